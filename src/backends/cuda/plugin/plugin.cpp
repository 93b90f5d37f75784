// libgeniex_cuda.so: the CUDA backend behind one C entry point (see ../plugin_api.hpp).
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/plugin_api.hpp"
#include "geniex_cuda_plugin_abi.h"

namespace geniex::backends::cuda {
namespace {

Result<CudaPluginDevice> plugin_probe() {
  GX_ASSIGN_OR_RETURN(DeviceInfo info, probe_device());
  CudaPluginDevice d;
  d.name = info.name;
  d.cc_major = info.cc_major;
  d.cc_minor = info.cc_minor;
  d.total_mem = info.total_mem;
  return d;
}

Result<std::unique_ptr<Backend>> plugin_create(LogLevel level) {
  set_log_level(level);
  GX_ASSIGN_OR_RETURN(auto be, CudaBackend::create());
  return std::unique_ptr<Backend>(std::move(be));
}

const CudaPluginApi kApi{GENIEX_CUDA_PLUGIN_ABI, &plugin_probe, &plugin_create};

}  // namespace
}  // namespace geniex::backends::cuda

extern "C" __attribute__((visibility("default"))) const geniex::backends::cuda::CudaPluginApi* geniex_cuda_plugin() {
  return &geniex::backends::cuda::kApi;
}
