// The device probe of `--device auto` runs in a child process: same answer as the in-process
// probe, no OpenCL driver left in this process when no GPU is found, and a crashing or hung
// driver (simulated with GENIEX_OPENCL_FAULT) is an error, not a dead or stuck process.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>

#include "backends/opencl/cl_runtime.hpp"
#include "runtime/impl.hpp"
#include "../common/scoped_env.hpp"

namespace geniex::backends::opencl {
namespace {

using test_support::ScopedEnv;

bool maps_contain(const std::string& needle) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find(needle) != std::string::npos) return true;
  }
  return false;
}

TEST(OpenClProbe, ChildAnswersAsTheInProcessProbe) {
  auto child = probe_device_in_child(20000);
  auto here = probe_device();
  ASSERT_EQ(child.has_value(), here.has_value())
      << (child ? std::string("child found ") + child->name : child.error().message) << " / "
      << (here ? std::string("here found ") + here->name : here.error().message);
  if (!here) GTEST_SKIP() << "no OpenCL device: " << here.error().message;
  EXPECT_EQ(child->name, here->name);
  EXPECT_EQ(child->is_gpu, here->is_gpu);
}

TEST(OpenClProbe, CrashingDriverIsAnErrorNotACrash) {
  ScopedEnv fault("GENIEX_OPENCL_FAULT", "probe-crash");
  auto r = probe_device_in_child(20000);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("crashed (signal 9)"), std::string::npos) << r.error().message;
}

TEST(OpenClProbe, HungDriverTimesOut) {
  ScopedEnv fault("GENIEX_OPENCL_FAULT", "probe-hang");
  const auto t0 = std::chrono::steady_clock::now();
  auto r = probe_device_in_child(300);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("did not answer within 300 ms"), std::string::npos) << r.error().message;
  EXPECT_LT(ms, 10000);
}

TEST(OpenClProbe, FaultSpecNamesTheProbeItems) {
  auto f = Fault::parse("probe-crash,probe-hang");
  ASSERT_TRUE(f.has_value());
  EXPECT_TRUE(f->probe_crash);
  EXPECT_TRUE(f->probe_hang);
  auto bad = Fault::parse("probe");
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("probe-crash"), std::string::npos);
}

// In a fresh process (a death-test child re-executes this binary for this test alone):
// resolving `auto` on a machine whose OpenCL devices are all CPU devices (PoCL here) must not
// leave the driver mapped in the process.
TEST(OpenClProbe, AutoLeavesNoCpuOnlyDriverLoaded) {
  auto probe = probe_device_in_child(20000);
  if (!probe) GTEST_SKIP() << "no OpenCL device: " << probe.error().message;
  if (probe->is_gpu) GTEST_SKIP() << "an OpenCL GPU (" << probe->name << ") is present: auto uses it";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const bool before = maps_contain("libpocl");
        const DeviceResolution r = resolve_device(Device::auto_select());
        const bool opencl = std::find(r.backend_names.begin(), r.backend_names.end(), "opencl") != r.backend_names.end();
        std::_Exit(before ? 3 : opencl ? 4 : maps_contain("libpocl") ? 5 : 0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace geniex::backends::opencl
