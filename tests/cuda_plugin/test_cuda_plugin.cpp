// The CUDA plugin loader (src/runtime/cuda_plugin.hpp). This executable links the runtime but
// not the CUDA backend, so /proc/self/maps says whether cudart and cuBLAS were loaded. Each
// test runs in its own process (gtest_discover_tests), so one test's loads do not leak into
// the next one's maps.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "runtime/cuda_plugin.hpp"
#include "runtime/impl.hpp"

namespace geniex {
namespace {

bool maps_contain(const std::string& needle) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(needle) != std::string::npos) return true;
  }
  return false;
}

bool has_driver() { return cuda_plugin::driver_device_count().has_value(); }

TEST(CudaPlugin, WithoutADriverGpuFallsBackAndCudartStaysOut) {
  if (has_driver()) GTEST_SKIP() << "an NVIDIA driver is installed here; this checks the machine without one";
  for (const Device d : {Device::gpu(), Device::auto_select()}) {
    const DeviceResolution r = resolve_device(d);
    EXPECT_EQ(std::count(r.backend_names.begin(), r.backend_names.end(), "cuda"), 0);
    EXPECT_EQ(r.backend_names.back(), "cpu");
    std::string notes;
    for (const std::string& n : r.notes) notes += n + "\n";
    EXPECT_NE(notes.find("no NVIDIA driver found"), std::string::npos) << notes;
  }
  EXPECT_FALSE(maps_contain("libgeniex_cuda")) << "the plugin was opened without a driver";
  EXPECT_FALSE(maps_contain("libcudart")) << "cudart was loaded without a driver";
  EXPECT_FALSE(maps_contain("libcublas")) << "cuBLAS was loaded without a driver";
  // The cached answer stays the same.
  auto again = cuda_plugin::load();
  ASSERT_FALSE(again.has_value());
  EXPECT_NE(again.error().message.find("libcuda.so.1"), std::string::npos) << again.error().message;
}

TEST(CudaPlugin, TheBuiltPluginLoadsProbesAndCarriesTheBackend) {
  EXPECT_FALSE(maps_contain("libcudart")) << "this test executable must not link cudart itself";
  auto api = cuda_plugin::open_plugin(GENIEX_TEST_CUDA_PLUGIN, cuda_plugin::runtime_abi());
  ASSERT_TRUE(api.has_value()) << api.error().message;
  EXPECT_STREQ((*api)->abi, cuda_plugin::runtime_abi());
  EXPECT_TRUE(maps_contain("libcudart")) << "the plugin should bring cudart with it";
  auto probe = (*api)->probe();
  auto made = (*api)->create(LogLevel::Error);
  if (!has_driver()) {
    ASSERT_FALSE(probe.has_value());
    EXPECT_EQ(probe.error().message.rfind("no CUDA device", 0), 0u) << probe.error().message;
    ASSERT_FALSE(made.has_value());
    EXPECT_EQ(made.error().message.rfind("no CUDA device", 0), 0u) << made.error().message;
  } else if (probe) {
    EXPECT_FALSE(probe->name.empty());
    EXPECT_GE(probe->cc_major, 8);
    ASSERT_TRUE(made.has_value()) << made.error().message;
    EXPECT_EQ((*made)->name(), "cuda");
    EXPECT_EQ((*made)->kind(), backends::DeviceKind::Gpu);
  } else {
    // A driver without a usable device (e.g. too old a GPU): create refuses as probe does.
    EXPECT_FALSE(made.has_value()) << "create succeeded where probe said: " << probe.error().message;
  }
}

TEST(CudaPlugin, ExportsOnlyItsEntryPoint) {
  void* h = dlopen(GENIEX_TEST_CUDA_PLUGIN, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  EXPECT_NE(dlsym(h, backends::cuda::kCudaPluginEntry), nullptr);
  // Symbols of the static libraries inside it (the logger, the backend's factory) are
  // hidden, so they can never bind to, or be bound from, the executable's own copies.
  EXPECT_EQ(dlsym(h, "_ZN6geniex13set_log_levelENS_8LogLevelE"), nullptr);
  EXPECT_EQ(dlsym(h, "_ZN6geniex8backends4cuda12probe_deviceEv"), nullptr);
}

TEST(CudaPlugin, RefusesAPluginFromOtherSources) {
  auto api = cuda_plugin::open_plugin(GENIEX_TEST_FAKE_WRONG_ABI, cuda_plugin::runtime_abi());
  ASSERT_FALSE(api.has_value());
  EXPECT_NE(api.error().message.find("built from other GenieX sources"), std::string::npos) << api.error().message;
  EXPECT_NE(api.error().message.find("0000-another-build"), std::string::npos) << api.error().message;
}

TEST(CudaPlugin, RefusesALibraryThatIsNotAPlugin) {
  auto api = cuda_plugin::open_plugin(GENIEX_TEST_FAKE_NO_ENTRY, cuda_plugin::runtime_abi());
  ASSERT_FALSE(api.has_value());
  EXPECT_NE(api.error().message.find("is not a GenieX CUDA plugin"), std::string::npos) << api.error().message;
}

TEST(CudaPlugin, AMissingOrBrokenFileIsAnErrorNotACrash) {
  auto missing = cuda_plugin::open_plugin("/nonexistent/libgeniex_cuda.so", cuda_plugin::runtime_abi());
  ASSERT_FALSE(missing.has_value());
  EXPECT_NE(missing.error().message.find("cannot load the CUDA plugin"), std::string::npos);
  // A file that is not an ELF library at all.
  const std::string junk = testing::TempDir() + "/libgeniex_cuda_junk.so";
  std::ofstream(junk) << "not a shared library";
  auto broken = cuda_plugin::open_plugin(junk, cuda_plugin::runtime_abi());
  ASSERT_FALSE(broken.has_value());
  EXPECT_NE(broken.error().message.find("cannot load the CUDA plugin"), std::string::npos) << broken.error().message;
}

}  // namespace
}  // namespace geniex
