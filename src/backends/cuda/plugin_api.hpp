// The CUDA backend as a plugin: what the runtime and libgeniex_cuda.so agree on.
//
// The backend links cudart and cuBLAS, whose loading alone costs ~200 MiB of resident memory
// and which a machine without an NVIDIA driver may not even have. So the runtime does not link
// it: it checks for the driver (libcuda.so.1) first and only then dlopens the plugin, which
// carries the backend and its own copies of the layers below it (core, graph, kv, backends,
// quant; their symbols hidden). One C entry point hands back this table.
//
// Across the boundary go C++ objects (Result, std::string, Backend, Buffer, graph::Graph,
// KvCache): both sides must be built from the same headers by the same compiler. The ABI key
// is a hash of every header under src/ and the compiler's version, generated at build time
// (cmake/cuda_plugin_abi.cmake) into both; the loader refuses a plugin whose key differs.
// The plugin is never unloaded (backends it made may live until exit).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "backends/backend.hpp"
#include "core/log.hpp"
#include "core/result.hpp"

namespace geniex::backends::cuda {

// The symbol libgeniex_cuda.so exports (extern "C", returns const CudaPluginApi*).
inline constexpr const char* kCudaPluginEntry = "geniex_cuda_plugin";
// The plugin's file name, looked up as described in runtime/cuda_plugin.cpp.
inline constexpr const char* kCudaPluginFile = "libgeniex_cuda.so";

struct CudaPluginDevice {
  std::string name;
  int cc_major = 0, cc_minor = 0;
  size_t total_mem = 0;
};

struct CudaPluginApi {
  const char* abi;  // the ABI key the plugin was built with
  // The first usable CUDA device, or why there is none.
  Result<CudaPluginDevice> (*probe)();
  // A backend on that device; `level` is the host's log level (the plugin has its own copy
  // of the logger).
  Result<std::unique_ptr<Backend>> (*create)(LogLevel level);
};

using CudaPluginEntryFn = const CudaPluginApi* (*)();

}  // namespace geniex::backends::cuda
