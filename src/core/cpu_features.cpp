// CPUID / getauxval based feature detection.
#include "core/cpu_features.hpp"

#include <cstdlib>
#include <cstring>
#include <string_view>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace geniex {
namespace {

#if defined(__x86_64__) && defined(__linux__)
// Linux keeps AMX tile data off until a process asks (arch_prctl ARCH_REQ_XCOMP_PERM for
// XFEATURE_XTILEDATA, 18); without the permission the first tile instruction raises SIGILL.
// The permission is process-wide and covers threads started before or after it.
bool request_amx_permission() {
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}
#endif

bool disabled(std::string_view list, std::string_view name) {
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string_view::npos) end = list.size();
    if (list.substr(start, end - start) == name) return true;
    start = end + 1;
  }
  return false;
}

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &c, &d)) {
    char vendor[13] = {};
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    f.amd = std::strcmp(vendor, "AuthenticAMD") == 0 || std::strcmp(vendor, "HygonGenuine") == 0;
  }
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    f.fma = (c >> 12) & 1;
    f.f16c = (c >> 29) & 1;
    const bool osxsave = (c >> 27) & 1;
    bool ymm_ok = false, zmm_ok = false, tiles_ok = false;
    if (osxsave) {
      unsigned lo, hi;
      __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
      ymm_ok = (lo & 0x6) == 0x6;
      zmm_ok = (lo & 0xe6) == 0xe6;
      tiles_ok = (lo & 0x60000) == 0x60000;  // XTILECFG and XTILEDATA
    }
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
      f.avx2 = ymm_ok && ((b >> 5) & 1);
      f.avx512f = zmm_ok && ((b >> 16) & 1);
      f.avx512bw = zmm_ok && ((b >> 30) & 1);
      f.avx512vnni = zmm_ok && ((c >> 11) & 1);
      // AMX-TILE (edx bit 24) and AMX-INT8 (bit 25).
      f.amx_int8 = tiles_ok && ((d >> 24) & 1) && ((d >> 25) & 1);
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avxvnni = ymm_ok && ((a >> 4) & 1);
    if (!ymm_ok) f.fma = f.f16c = false;
  }
#endif
#if defined(__aarch64__)
  f.neon = true;
#if defined(__linux__)
  const unsigned long hw = getauxval(AT_HWCAP);
  const unsigned long hw2 = getauxval(AT_HWCAP2);
  f.arm_dotprod = (hw & HWCAP_ASIMDDP) != 0;
  f.arm_i8mm = (hw2 & HWCAP2_I8MM) != 0;
#endif
#endif
  if (const char* env = std::getenv("GENIEX_CPU_DISABLE")) {
    const std::string_view list(env);
    if (disabled(list, "avx2")) f.avx2 = false;
    if (disabled(list, "fma")) f.fma = false;
    if (disabled(list, "f16c")) f.f16c = false;
    if (disabled(list, "avx512")) f.avx512f = f.avx512bw = f.avx512vnni = false;
    if (disabled(list, "avx512vnni")) f.avx512vnni = false;
    if (disabled(list, "avxvnni")) f.avxvnni = false;
    if (disabled(list, "amx")) f.amx_int8 = false;
    if (disabled(list, "dotprod")) f.arm_dotprod = false;
    if (disabled(list, "i8mm")) f.arm_i8mm = false;
  }
  // Every x86 CPU with AVX-512, AVX-VNNI or AMX has AVX2, FMA and F16C, and their kernels use
  // them: a mask without those (GENIEX_CPU_DISABLE=avx2) leaves none of the tiers above on.
  if (!(f.avx2 && f.fma && f.f16c)) f.avx512f = f.avx512bw = f.avx512vnni = f.avxvnni = false;
  if (!f.avx512f || !f.avx512bw) f.amx_int8 = false;  // the AMX kernels' float work is AVX-512
#if defined(__x86_64__) && defined(__linux__)
  if (f.amx_int8) f.amx_int8 = request_amx_permission();
#else
  f.amx_int8 = false;
#endif
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

std::string CpuFeatures::to_string() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vnni, "avx512vnni");
  add(avxvnni, "avxvnni");
  add(amx_int8, "amx-int8");
  add(neon, "neon");
  add(arm_dotprod, "dotprod");
  add(arm_i8mm, "i8mm");
  return s.empty() ? "none" : s;
}

}  // namespace geniex
