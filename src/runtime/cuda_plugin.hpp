// Loading the CUDA backend plugin (libgeniex_cuda.so) on demand; see
// backends/cuda/plugin_api.hpp for why it is a plugin. Built when the build has the CUDA
// backend (GENIEX_CUDA_PLUGIN).
#pragma once

#include <string>

#include "backends/cuda/plugin_api.hpp"
#include "core/result.hpp"

namespace geniex::cuda_plugin {

// The plugin's table, loaded once per process, or why there is none, in one line:
//   - no NVIDIA driver (libcuda.so.1 cannot be opened), or the driver reports no device:
//     the plugin is not even opened, so cudart and cuBLAS stay out of the process;
//   - the plugin file is not found, cannot be opened (e.g. libcublas missing), is not a
//     GenieX plugin, or was built from other headers (ABI key).
// Search order for the file: $GENIEX_CUDA_PLUGIN (a path; only that one), then next to the
// executable, <exe dir>/../lib/geniex, <exe dir>/../lib, the build tree's lib/ folder, and
// last the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache).
Result<const backends::cuda::CudaPluginApi*> load();

// The driver check alone: the number of CUDA devices libcuda.so.1 reports, or why none.
Result<int> driver_device_count();

// Opens one plugin file and checks it (no driver check, no caching): for tests and for
// load(). `abi` is the key it must carry (normally GENIEX_CUDA_PLUGIN_ABI).
Result<const backends::cuda::CudaPluginApi*> open_plugin(const std::string& path, const std::string& abi);

// The ABI key this runtime was built with.
const char* runtime_abi();

}  // namespace geniex::cuda_plugin
