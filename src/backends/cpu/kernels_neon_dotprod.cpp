// Armv8.2 dot-product kernels (SDOT, FEAT_DotProd: Cortex-A76/A55 and later, every Snapdragon
// Kryo since the 855): the NEON bodies of kernels_neon_impl.hpp with vdotq_s32 as the int8 dot.
// Compiled with -march=armv8.2-a+dotprod; called only after a run-time HWCAP check.
#define GENIEX_NEON_SDOT 1
#include "backends/cpu/kernels_neon_impl.hpp"

#include "backends/cpu/kernels_internal.hpp"

namespace geniex::cpu::neon_dotprod {

const TypeKernels* kernels(DType t) { return DotTable::find(t, "dotprod"); }

}  // namespace geniex::cpu::neon_dotprod
