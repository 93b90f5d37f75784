// Declared device -> backends available in this build, in the documented fallback order
// npu -> gpu -> cpu, with one line of reason per fallback.
#include <algorithm>
#include <mutex>
#include <string>
#include <utility>

#include "backends/cpu/backend/cpu_backend.hpp"
#include "runtime/impl.hpp"
#ifdef GENIEX_HAVE_OPENCL
#include "backends/opencl/opencl_backend.hpp"
#endif
#ifdef GENIEX_CUDA_PLUGIN
#include "runtime/cuda_plugin.hpp"
#endif

namespace geniex {

namespace {
// Backends registered by tests (ScopedTestBackend), in registration order.
struct TestBackendRegistry {
  std::mutex mutex;
  std::vector<std::pair<std::string, BackendFactory>> entries;
};
TestBackendRegistry& test_backends() {
  static TestBackendRegistry registry;
  return registry;
}
}  // namespace

ScopedTestBackend::ScopedTestBackend(std::string name, BackendFactory factory) : name_(std::move(name)) {
  TestBackendRegistry& r = test_backends();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.entries.emplace_back(name_, std::move(factory));
}

ScopedTestBackend::~ScopedTestBackend() {
  TestBackendRegistry& r = test_backends();
  const std::lock_guard<std::mutex> lock(r.mutex);
  for (auto it = r.entries.end(); it != r.entries.begin();) {
    --it;
    if (it->first == name_) {
      r.entries.erase(it);
      break;
    }
  }
}

Result<Device> Device::parse(std::string_view name) {
  if (name == "cpu") return Device::cpu();
  if (name == "gpu") return Device::gpu();
  if (name == "npu") return Device::npu();
  if (name == "auto") return Device::auto_select();
  return make_error(ErrorCode::InvalidArgument,
                    "unknown device '" + std::string(name) + "' (expected cpu, gpu, npu or auto)");
}

std::string_view Device::name() const {
  switch (kind_) {
    case Kind::Cpu: return "cpu";
    case Kind::Gpu: return "gpu";
    case Kind::Npu: return "npu";
    case Kind::Auto: return "auto";
  }
  return "?";
}

DeviceResolution resolve_device(Device device) {
  // The backend registry: the explicit list of backends compiled into this build: the CPU
  // backend, and OpenCL when built with GENIEX_OPENCL; CUDA and NPU backends join this list.
  DeviceResolution r;
  {
    TestBackendRegistry& reg = test_backends();
    const std::lock_guard<std::mutex> lock(reg.mutex);
    for (const auto& entry : reg.entries) {
      const std::string& name = entry.first;
      if (std::find(r.backend_names.begin(), r.backend_names.end(), name) != r.backend_names.end()) continue;
      r.backend_names.push_back(name);
      r.notes.push_back("test backend '" + name + "' registered by a test: placed first");
    }
  }
  const bool want_npu = device.kind() == Device::Kind::Npu || device.kind() == Device::Kind::Auto;
  const bool want_gpu = want_npu || device.kind() == Device::Kind::Gpu;
  if (want_npu) r.notes.push_back("npu: no NPU backend in this build; falling back to gpu");
  bool have_cuda = false;
#ifdef GENIEX_CUDA_PLUGIN
  // CUDA first: an NVIDIA GPU takes "gpu" and "auto" ahead of OpenCL. The backend is a
  // plugin, opened only when the NVIDIA driver reports a device (runtime/cuda_plugin.hpp).
  std::string cuda_miss;
  if (want_gpu) {
    auto plugin = cuda_plugin::load();
    auto cuda_probe = plugin ? (*plugin)->probe() : Result<backends::cuda::CudaPluginDevice>(plugin.error());
    have_cuda = cuda_probe.has_value();
    if (have_cuda) r.backend_names.push_back("cuda");
    else cuda_miss = cuda_probe.error().message;
  }
#endif
  if (want_gpu && !have_cuda) {
#ifdef GENIEX_HAVE_OPENCL
    // OpenCL: "gpu" takes any OpenCL device (a CPU one such as PoCL too: that is how CI
    // tests the backend); "auto" only a real GPU, since a CPU device would just be a slower
    // CPU backend. Ops the backend cannot run fall back to the CPU node by node.
    // auto probes in a child process: when it finds no GPU, no driver stays loaded here.
    auto probe = device.kind() == Device::Kind::Gpu ? backends::opencl::probe_device()
                                                    : backends::opencl::probe_device_isolated();
    if (probe && (probe->is_gpu || device.kind() == Device::Kind::Gpu)) {
      r.backend_names.push_back("opencl");
    } else if (probe) {
      r.notes.push_back("gpu: the only OpenCL device (" + probe->name +
                        ") is a CPU device; auto keeps the cpu backend (--device gpu uses it)");
    } else {
      r.notes.push_back("gpu: no OpenCL device (" + probe.error().message + "); falling back to cpu");
    }
#else
    r.notes.push_back("gpu: no GPU backend in this build (built without OpenCL); falling back to cpu");
#endif
  }
#ifdef GENIEX_CUDA_PLUGIN
  // No CUDA device: one line, joined to the gpu note above when the fallback wrote one.
  if (!cuda_miss.empty()) {
    const bool opencl = std::find(r.backend_names.begin(), r.backend_names.end(), "opencl") != r.backend_names.end();
    if (!opencl && !r.notes.empty() && r.notes.back().rfind("gpu:", 0) == 0) {
      r.notes.back() += "; cuda: " + cuda_miss;
    } else {
      r.notes.push_back("gpu: " + cuda_miss + (opencl ? "; using opencl" : "; falling back to cpu"));
    }
  }
#endif
  r.backend_names.push_back("cpu");
  return r;
}

Result<std::vector<std::unique_ptr<backends::Backend>>> create_backends(
    const std::vector<std::string>& names, int32_t n_threads,
    std::shared_ptr<const backends::CpuWeightStore> cpu_weights) {
  std::vector<std::unique_ptr<backends::Backend>> out;
  for (const std::string& name : names) {
    if (name == "cpu") {
      out.push_back(std::make_unique<backends::CpuBackend>(n_threads, cpu_weights));
#ifdef GENIEX_CUDA_PLUGIN
    } else if (name == "cuda") {
      GX_ASSIGN_OR_RETURN(const backends::cuda::CudaPluginApi* plugin, cuda_plugin::load());
      GX_ASSIGN_OR_RETURN(auto cu, plugin->create(log_level()));
      out.push_back(std::move(cu));
#endif
#ifdef GENIEX_HAVE_OPENCL
    } else if (name == "opencl") {
      GX_ASSIGN_OR_RETURN(auto cl, backends::opencl::OpenClBackend::create());
      out.push_back(std::move(cl));
#endif
    } else {
      BackendFactory factory;
      {
        TestBackendRegistry& reg = test_backends();
        const std::lock_guard<std::mutex> lock(reg.mutex);
        for (const auto& entry : reg.entries) {
          if (entry.first == name) factory = entry.second;  // the newest registration wins
        }
      }
      if (!factory) return make_error(ErrorCode::Unsupported, "backend '" + name + "' is not in this build");
      GX_ASSIGN_OR_RETURN(auto made, factory(n_threads));
      out.push_back(std::move(made));
    }
  }
  return out;
}

}  // namespace geniex
