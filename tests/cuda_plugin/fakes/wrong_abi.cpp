// A fake CUDA plugin built from "other sources": its table carries another ABI key, which the
// loader must refuse before calling anything in it.
#include "backends/cuda/plugin_api.hpp"

namespace {
geniex::Result<geniex::backends::cuda::CudaPluginDevice> fake_probe() {
  return geniex::make_error(geniex::ErrorCode::Internal, "fake plugin: probe must not be called");
}
geniex::Result<std::unique_ptr<geniex::backends::Backend>> fake_create(geniex::LogLevel) {
  return geniex::make_error(geniex::ErrorCode::Internal, "fake plugin: create must not be called");
}
const geniex::backends::cuda::CudaPluginApi kApi{"0000-another-build", &fake_probe, &fake_create};
}  // namespace

extern "C" __attribute__((visibility("default"))) const geniex::backends::cuda::CudaPluginApi* geniex_cuda_plugin() {
  return &kApi;
}
