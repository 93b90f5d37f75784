// Runtime CPU feature detection, read once, used to pick kernels.
#pragma once

#include <string>

namespace geniex {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vnni = false;
  bool avxvnni = false;
  // AMX tiles with int8 dot products, usable by this process: the CPU has them, the OS saves
  // their state (XCR0) and Linux granted the permission (arch_prctl ARCH_REQ_XCOMP_PERM).
  bool amx_int8 = false;
  // The CPUID vendor is AuthenticAMD or HygonGenuine (Zen cores): kernel choices that were
  // measured to differ between AMD and Intel cores read it (not a feature; never masked).
  bool amd = false;
  bool neon = false;
  bool arm_dotprod = false;
  bool arm_i8mm = false;

  std::string to_string() const;
};

// Detected features, masked by the GENIEX_CPU_DISABLE environment variable
// (comma list, e.g. "avx2" forces the scalar paths in tests and benchmarks).
const CpuFeatures& cpu_features();

}  // namespace geniex
