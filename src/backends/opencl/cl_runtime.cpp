// ClRuntime: device choice (GPU first, then accelerator, then CPU devices such as PoCL),
// context, the program built once from the embedded sources, device facts, fault injection.
#include "backends/opencl/cl_runtime.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "backends/opencl/kernel_sources.hpp"
#include "core/log.hpp"

namespace geniex::backends::opencl {

std::string cl_error_name(cl_int err) {
  const char* name = "CL_ERROR";
  switch (err) {
    case CL_SUCCESS: name = "CL_SUCCESS"; break;
    case CL_DEVICE_NOT_FOUND: name = "CL_DEVICE_NOT_FOUND"; break;
    case CL_DEVICE_NOT_AVAILABLE: name = "CL_DEVICE_NOT_AVAILABLE"; break;
    case CL_COMPILER_NOT_AVAILABLE: name = "CL_COMPILER_NOT_AVAILABLE"; break;
    case CL_MEM_OBJECT_ALLOCATION_FAILURE: name = "CL_MEM_OBJECT_ALLOCATION_FAILURE"; break;
    case CL_OUT_OF_RESOURCES: name = "CL_OUT_OF_RESOURCES"; break;
    case CL_OUT_OF_HOST_MEMORY: name = "CL_OUT_OF_HOST_MEMORY"; break;
    case CL_BUILD_PROGRAM_FAILURE: name = "CL_BUILD_PROGRAM_FAILURE"; break;
    case CL_INVALID_VALUE: name = "CL_INVALID_VALUE"; break;
    case CL_INVALID_BUFFER_SIZE: name = "CL_INVALID_BUFFER_SIZE"; break;
    case CL_INVALID_HOST_PTR: name = "CL_INVALID_HOST_PTR"; break;
    case CL_INVALID_KERNEL_NAME: name = "CL_INVALID_KERNEL_NAME"; break;
    case CL_INVALID_KERNEL_ARGS: name = "CL_INVALID_KERNEL_ARGS"; break;
    case CL_INVALID_WORK_GROUP_SIZE: name = "CL_INVALID_WORK_GROUP_SIZE"; break;
    case CL_INVALID_WORK_ITEM_SIZE: name = "CL_INVALID_WORK_ITEM_SIZE"; break;
    case CL_INVALID_GLOBAL_WORK_SIZE: name = "CL_INVALID_GLOBAL_WORK_SIZE"; break;
    case CL_INVALID_ARG_SIZE: name = "CL_INVALID_ARG_SIZE"; break;
    case CL_INVALID_ARG_VALUE: name = "CL_INVALID_ARG_VALUE"; break;
    case CL_INVALID_MEM_OBJECT: name = "CL_INVALID_MEM_OBJECT"; break;
    case CL_INVALID_OPERATION: name = "CL_INVALID_OPERATION"; break;
    case -1001: name = "CL_PLATFORM_NOT_FOUND_KHR"; break;  // from cl_ext.h, by value
    default: break;
  }
  return std::string(name) + " (" + std::to_string(err) + ")";
}

Result<Fault> Fault::parse(std::string_view spec) {
  Fault f;
  f.spec = std::string(spec);
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    const std::string_view item = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view{} : spec.substr(comma + 1);
    if (item.empty()) continue;
    if (item == "build") {
      f.build = true;
    } else if (item == "alloc") {
      f.alloc = true;
    } else if (item == "probe-crash") {
      f.probe_crash = true;
    } else if (item == "probe-hang") {
      f.probe_hang = true;
    } else if (item.substr(0, 6) == "build:" && item.size() > 6) {
      f.missing_kernels.insert(std::string(item.substr(6)));
    } else {
      return make_error(ErrorCode::InvalidArgument,
                        "GENIEX_OPENCL_FAULT: unknown item '" + std::string(item) +
                            "' (expected build, build:KERNEL, alloc, probe-crash or probe-hang)");
    }
  }
  return f;
}

Result<Fault> Fault::from_env() {
  const char* env = std::getenv("GENIEX_OPENCL_FAULT");
  return parse(env != nullptr ? env : "");
}

namespace {

std::string device_string(cl_device_id d, cl_device_info what) {
  size_t n = 0;
  if (clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return {};
  std::string s(n, '\0');
  if (clGetDeviceInfo(d, what, n, s.data(), nullptr) != CL_SUCCESS) return {};
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

template <typename T>
T device_value(cl_device_id d, cl_device_info what) {
  T v{};
  if (clGetDeviceInfo(d, what, sizeof(T), &v, nullptr) != CL_SUCCESS) return T{};
  return v;
}

struct Choice {
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
};

// GPU first, then accelerators, then CPU devices (PoCL's pthread device in CI).
Result<Choice> choose_device() {
  cl_uint n_platforms = 0;
  const cl_int err = clGetPlatformIDs(0, nullptr, &n_platforms);
  if (err != CL_SUCCESS || n_platforms == 0) {
    return make_error(ErrorCode::Unsupported,
                      "opencl: no OpenCL platform (" +
                          (err != CL_SUCCESS ? cl_error_name(err) : std::string("none installed")) + ")");
  }
  std::vector<cl_platform_id> platforms(n_platforms);
  clGetPlatformIDs(n_platforms, platforms.data(), nullptr);
  for (const cl_device_type type : {CL_DEVICE_TYPE_GPU, CL_DEVICE_TYPE_ACCELERATOR, CL_DEVICE_TYPE_CPU}) {
    for (cl_platform_id p : platforms) {
      cl_uint n = 0;
      if (clGetDeviceIDs(p, type, 0, nullptr, &n) != CL_SUCCESS || n == 0) continue;
      std::vector<cl_device_id> devices(n);
      clGetDeviceIDs(p, type, n, devices.data(), nullptr);
      for (cl_device_id d : devices) {
        if (device_value<cl_bool>(d, CL_DEVICE_AVAILABLE) && device_value<cl_bool>(d, CL_DEVICE_COMPILER_AVAILABLE)) {
          return Choice{p, d};
        }
      }
    }
  }
  return make_error(ErrorCode::Unsupported, "opencl: " + std::to_string(n_platforms) +
                                                " platform(s) but no available device with a compiler");
}

}  // namespace

namespace {

// Set once OpenCL drivers are loaded into this process (an in-process probe or a runtime):
// from then on probing here costs nothing more.
std::atomic<bool> drivers_loaded{false};

}  // namespace

Result<ProbedDevice> probe_device() {
  drivers_loaded.store(true);
  GX_ASSIGN_OR_RETURN(Choice c, choose_device());
  const auto type = device_value<cl_device_type>(c.device, CL_DEVICE_TYPE);
  return ProbedDevice{device_string(c.device, CL_DEVICE_NAME), (type & (CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_ACCELERATOR)) != 0};
}

namespace {

// The child's answer on the pipe: "ok <0|1> <name>" or "error <message>".
std::string encode_probe(const Result<ProbedDevice>& r) {
  if (r) return std::string("ok ") + (r->is_gpu ? "1 " : "0 ") + r->name;
  return "error " + r.error().message;
}

Result<ProbedDevice> decode_probe(const std::string& msg) {
  if (msg.rfind("ok ", 0) == 0 && msg.size() >= 5 && (msg[3] == '0' || msg[3] == '1') && msg[4] == ' ') {
    return ProbedDevice{msg.substr(5), msg[3] == '1'};
  }
  if (msg.rfind("error ", 0) == 0) return make_error(ErrorCode::Unsupported, msg.substr(6));
  return make_error(ErrorCode::BackendError, "opencl: the device probe returned an unreadable answer");
}

}  // namespace

Result<ProbedDevice> probe_device_in_child(int timeout_ms) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return probe_device();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return probe_device();
  }
  if (pid == 0) {
    // Child: only the probe, then _exit (no atexit handlers, no static destructors).
    ::close(fds[0]);
    if (auto fault = Fault::from_env()) {
      if (fault->probe_crash) ::kill(::getpid(), SIGKILL);
      if (fault->probe_hang) ::pause();
    }
    const std::string msg = encode_probe(probe_device());
    size_t off = 0;
    while (off < msg.size()) {
      const ssize_t n = ::write(fds[1], msg.data() + off, msg.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string msg;
  bool timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd pfd{fds[0], POLLIN, 0};
    const int pr = ::poll(&pfd, 1, static_cast<int>(left.count()));
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) {
      timed_out = pr == 0;
      break;
    }
    char buf[512];
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the child is done
    msg.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return make_error(ErrorCode::BackendError,
                      "opencl: the device probe did not answer within " + std::to_string(timeout_ms) + " ms (driver hung?)");
  }
  if (WIFSIGNALED(status)) {
    return make_error(ErrorCode::BackendError, "opencl: the device probe crashed (signal " +
                                                   std::to_string(WTERMSIG(status)) + "): the OpenCL driver is broken");
  }
  return decode_probe(msg);
}

Result<ProbedDevice> probe_device_isolated(int timeout_ms) {
  const char* env = std::getenv("GENIEX_OPENCL_PROBE");
  if ((env != nullptr && std::strcmp(env, "inprocess") == 0) || drivers_loaded.load()) return probe_device();
  static std::mutex mutex;
  static std::optional<Result<ProbedDevice>> cached;
  const std::lock_guard<std::mutex> lock(mutex);
  if (!cached) cached.emplace(probe_device_in_child(timeout_ms));
  return *cached;
}

ClRuntime::~ClRuntime() {
  if (program_ != nullptr) clReleaseProgram(program_);
  if (context_ != nullptr) clReleaseContext(context_);
}

Result<std::shared_ptr<ClRuntime>> ClRuntime::get(const Fault& fault) {
  // One runtime per fault spec, alive while some backend holds it (no CL objects are
  // released from static destructors, which may run after the ICD loader is gone).
  static std::mutex mutex;
  static std::map<std::string, std::weak_ptr<ClRuntime>> registry;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto alive = registry[fault.spec].lock()) return alive;
  std::shared_ptr<ClRuntime> rt(new ClRuntime());
  GX_TRY(rt->init(fault));
  registry[fault.spec] = rt;
  return rt;
}

Status ClRuntime::init(const Fault& fault) {
  fault_ = fault;
  drivers_loaded.store(true);
  GX_ASSIGN_OR_RETURN(Choice c, choose_device());
  platform_ = c.platform;
  device_ = c.device;
  {
    size_t n = 0;
    clGetPlatformInfo(platform_, CL_PLATFORM_NAME, 0, nullptr, &n);
    info_.platform.resize(n);
    clGetPlatformInfo(platform_, CL_PLATFORM_NAME, n, info_.platform.data(), nullptr);
    while (!info_.platform.empty() && info_.platform.back() == '\0') info_.platform.pop_back();
  }
  info_.name = device_string(device_, CL_DEVICE_NAME);
  info_.version = device_string(device_, CL_DEVICE_VERSION);
  const std::string ext = device_string(device_, CL_DEVICE_EXTENSIONS);
  info_.fp16 = ext.find("cl_khr_fp16") != std::string::npos;
  info_.subgroups = ext.find("cl_khr_subgroups") != std::string::npos;
  info_.unified_memory = device_value<cl_bool>(device_, CL_DEVICE_HOST_UNIFIED_MEMORY) != 0;
  info_.correct_div_sqrt =
      (device_value<cl_device_fp_config>(device_, CL_DEVICE_SINGLE_FP_CONFIG) & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
  info_.max_work_group = device_value<size_t>(device_, CL_DEVICE_MAX_WORK_GROUP_SIZE);
  info_.local_mem = device_value<cl_ulong>(device_, CL_DEVICE_LOCAL_MEM_SIZE);
  info_.global_mem = device_value<cl_ulong>(device_, CL_DEVICE_GLOBAL_MEM_SIZE);
  info_.max_alloc = device_value<cl_ulong>(device_, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
  info_.base_align_bytes = device_value<cl_uint>(device_, CL_DEVICE_MEM_BASE_ADDR_ALIGN) / 8;

  cl_int err = CL_SUCCESS;
  context_ = clCreateContext(nullptr, 1, &device_, nullptr, nullptr, &err);
  if (err != CL_SUCCESS || context_ == nullptr) {
    context_ = nullptr;
    return make_error(ErrorCode::BackendError, "opencl: cannot create a context on " + info_.name + ": " + cl_error_name(err));
  }

  if (fault_.build) {
    build_error_ = "opencl: program build failed (simulated by GENIEX_OPENCL_FAULT=build)";
    return ok_status();
  }
  std::vector<const char*> texts;
  std::vector<size_t> lengths;
  for (const KernelSource& s : kernel_sources()) {
    texts.push_back(s.text.data());
    lengths.push_back(s.text.size());
  }
  const auto t0 = std::chrono::steady_clock::now();
  program_ = clCreateProgramWithSource(context_, static_cast<cl_uint>(texts.size()), texts.data(), lengths.data(), &err);
  if (err != CL_SUCCESS || program_ == nullptr) {
    program_ = nullptr;
    build_error_ = "opencl: cannot create the program: " + cl_error_name(err);
    return ok_status();
  }
  // Correctly rounded division where the device offers it: the activation quantizers
  // divide (127 / amax) and must round as the CPU does to pick the same int8 values.
  const std::string options = info_.correct_div_sqrt ? "-cl-fp32-correctly-rounded-divide-sqrt" : "";
  err = clBuildProgram(program_, 1, &device_, options.c_str(), nullptr, nullptr);
  build_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (err != CL_SUCCESS) {
    size_t n = 0;
    clGetProgramBuildInfo(program_, device_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n);
    std::string log(n, '\0');
    if (n > 0) clGetProgramBuildInfo(program_, device_, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
    if (log.size() > 2000) log = log.substr(0, 2000) + "...";
    build_error_ = "opencl: program build failed on " + info_.name + ": " + cl_error_name(err) + ": " + log;
    clReleaseProgram(program_);
    program_ = nullptr;
    GX_LOG_WARN(build_error_);
    return ok_status();
  }
  size_t n = 0;
  clGetProgramInfo(program_, CL_PROGRAM_KERNEL_NAMES, 0, nullptr, &n);
  std::string names(n, '\0');
  clGetProgramInfo(program_, CL_PROGRAM_KERNEL_NAMES, n, names.data(), nullptr);
  size_t pos = 0;
  while (pos < names.size()) {
    size_t end = names.find(';', pos);
    if (end == std::string::npos) end = names.size();
    std::string k = names.substr(pos, end - pos);
    while (!k.empty() && k.back() == '\0') k.pop_back();
    if (!k.empty() && fault_.missing_kernels.count(k) == 0) kernels_.insert(k);
    pos = end + 1;
  }
  GX_LOG_INFO("opencl: " + info_.name + " (" + info_.platform + "), program built in " +
              std::to_string(static_cast<int>(build_ms_)) + " ms, " + std::to_string(kernels_.size()) + " kernels");
  return ok_status();
}

bool ClRuntime::has_kernel(const std::string& name) const { return kernels_.count(name) != 0; }

Result<cl_mem> ClRuntime::create_buffer(cl_mem_flags flags, size_t bytes, void* host_ptr,
                                        std::string_view what) const {
  if (fault_.alloc) {
    return make_error(ErrorCode::OutOfMemory, "opencl: cannot allocate " + std::to_string(bytes) + " bytes for " +
                                                  std::string(what) + " (simulated by GENIEX_OPENCL_FAULT=alloc)");
  }
  if (bytes == 0) bytes = 64;
  cl_int err = CL_SUCCESS;
  cl_mem m = clCreateBuffer(context_, flags, bytes, host_ptr, &err);
  if (err != CL_SUCCESS || m == nullptr) {
    return make_error(ErrorCode::OutOfMemory, "opencl: cannot allocate " + std::to_string(bytes) + " bytes for " +
                                                  std::string(what) + " on " + info_.name + ": " + cl_error_name(err));
  }
  return m;
}

}  // namespace geniex::backends::opencl
