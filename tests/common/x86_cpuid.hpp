// F16C as the tests see it, outside core/cpu_features: GCC's __builtin_cpu_supports("f16c")
// (libgcc's own CPUID reading). clang 14 does not know that feature name, so under clang the
// test reads CPUID and XGETBV itself: the F16C bit, and the OS saving the YMM state.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

#include <cstdint>

namespace geniex::test {

inline bool x86_f16c_usable() {
#if !defined(__clang__)
  return __builtin_cpu_supports("f16c") != 0;
#else
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(1, &a, &b, &c, &d) == 0) return false;
  if ((c & bit_F16C) == 0 || (c & bit_OSXSAVE) == 0) return false;
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 0x6u) == 0x6u;  // XMM and YMM state enabled
#endif
}

}  // namespace geniex::test
#endif
