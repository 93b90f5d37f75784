// Included first by the files compiled for AVX-512: GCC 12's AVX-512 headers trip
// -W(maybe-)uninitialized inside their own intrinsics (the deliberately undefined "__Y"
// operands); nothing in those files is uninitialized. Clang has neither the false positive nor
// the -Wmaybe-uninitialized group (naming it there is itself a warning).
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
