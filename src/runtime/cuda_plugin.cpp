// The CUDA plugin loader (see cuda_plugin.hpp).
#ifdef GENIEX_CUDA_PLUGIN

#include "runtime/cuda_plugin.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <vector>

#include "geniex_cuda_plugin_abi.h"

namespace geniex::cuda_plugin {
namespace {

std::string dl_error() {
  const char* e = dlerror();
  return e != nullptr ? std::string(e) : std::string("unknown dlopen error");
}

std::string exe_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

Result<const backends::cuda::CudaPluginApi*> load_once() {
  GX_ASSIGN_OR_RETURN(const int devices, driver_device_count());
  if (devices <= 0) return make_error(ErrorCode::Unsupported, "no CUDA device: the NVIDIA driver reports none");

  std::vector<std::string> candidates;
  const char* env = std::getenv("GENIEX_CUDA_PLUGIN");
  if (env != nullptr && *env != '\0') {
    candidates.emplace_back(env);
  } else {
    const std::string dir = exe_dir();
    const std::string file = backends::cuda::kCudaPluginFile;
    if (!dir.empty()) {
      candidates.push_back(dir + "/" + file);
      candidates.push_back(dir + "/../lib/geniex/" + file);
      candidates.push_back(dir + "/../lib/" + file);
    }
#ifdef GENIEX_CUDA_PLUGIN_BUILD_DIR
    candidates.push_back(std::string(GENIEX_CUDA_PLUGIN_BUILD_DIR) + "/" + file);
#endif
  }
  for (const std::string& path : candidates) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) continue;
    // The first file that exists decides: a plugin that is there but cannot load says why.
    return open_plugin(path, GENIEX_CUDA_PLUGIN_ABI);
  }
  if (env != nullptr && *env != '\0') {
    return make_error(ErrorCode::NotFound, std::string("CUDA plugin not found: GENIEX_CUDA_PLUGIN=") + env);
  }
  // Last, the dynamic loader's own search path.
  auto found = open_plugin(backends::cuda::kCudaPluginFile, GENIEX_CUDA_PLUGIN_ABI);
  if (!found) {
    return make_error(ErrorCode::NotFound, std::string("CUDA plugin ") + backends::cuda::kCudaPluginFile +
                                               " not found next to the executable, in ../lib/geniex, or on the "
                                               "loader's path (set GENIEX_CUDA_PLUGIN to its path)");
  }
  return found;
}

}  // namespace

const char* runtime_abi() { return GENIEX_CUDA_PLUGIN_ABI; }

Result<int> driver_device_count() {
  // The driver library is what an NVIDIA driver install provides; without it cudart could
  // only fail, so the plugin (cudart, cuBLAS: ~200 MiB resident) is not opened at all.
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    return make_error(ErrorCode::Unsupported, "no CUDA device: no NVIDIA driver found (" + dl_error() + ")");
  }
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  auto* init = reinterpret_cast<InitFn>(dlsym(h, "cuInit"));
  auto* count = reinterpret_cast<CountFn>(dlsym(h, "cuDeviceGetCount"));
  if (init == nullptr || count == nullptr) {
    dlclose(h);
    return make_error(ErrorCode::Unsupported, "no CUDA device: libcuda.so.1 lacks cuInit/cuDeviceGetCount");
  }
  if (const int rc = init(0); rc != 0) {
    dlclose(h);
    return make_error(ErrorCode::Unsupported, "no CUDA device: the NVIDIA driver failed to initialise (cuInit error " +
                                                  std::to_string(rc) + ")");
  }
  int n = 0;
  if (const int rc = count(&n); rc != 0) {
    dlclose(h);
    return make_error(ErrorCode::Unsupported, "no CUDA device: cuDeviceGetCount error " + std::to_string(rc));
  }
  // Kept open when there are devices: cudart opens the same library next.
  if (n <= 0) dlclose(h);
  return n;
}

Result<const backends::cuda::CudaPluginApi*> open_plugin(const std::string& path, const std::string& abi) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return make_error(ErrorCode::Unsupported, "cannot load the CUDA plugin: " + dl_error());
  auto* entry = reinterpret_cast<backends::cuda::CudaPluginEntryFn>(dlsym(h, backends::cuda::kCudaPluginEntry));
  if (entry == nullptr) {
    dlclose(h);
    return make_error(ErrorCode::Unsupported, path + " is not a GenieX CUDA plugin (no " +
                                                  backends::cuda::kCudaPluginEntry + " symbol)");
  }
  const backends::cuda::CudaPluginApi* api = entry();
  if (api == nullptr || api->abi == nullptr || api->probe == nullptr || api->create == nullptr) {
    dlclose(h);
    return make_error(ErrorCode::Unsupported, path + " is not a GenieX CUDA plugin (empty entry table)");
  }
  if (abi != api->abi) {
    const std::string theirs = api->abi;
    dlclose(h);
    return make_error(ErrorCode::Unsupported, path + " was built from other GenieX sources (ABI key " + theirs +
                                                  ", this runtime " + abi + "); rebuild it with this runtime");
  }
  // Never closed: backends it creates may live until exit.
  return api;
}

Result<const backends::cuda::CudaPluginApi*> load() {
  static std::once_flag once;
  static Result<const backends::cuda::CudaPluginApi*> loaded = make_error(ErrorCode::Internal, "not loaded");
  std::call_once(once, [] { loaded = load_once(); });
  return loaded;
}

}  // namespace geniex::cuda_plugin

#endif  // GENIEX_CUDA_PLUGIN
