// Software prefetch of a byte range into L2, for streams the hardware prefetchers follow late.
#pragma once

#include <cstddef>
#include <cstdint>

namespace geniex {

// Asks for bytes [p, p + n) in the L2 cache ahead of their use (a hint: no fault, no effect on
// results). The empty asm keeps the loop: GCC deletes a loop of nothing but prefetches whose
// trip count it knows, prefetches counting as no side effect.
inline void prefetch_l2(const uint8_t* p, size_t n) {
  for (size_t off = 0; off < n; off += 64) {
    __builtin_prefetch(p + off, 0, 2);
    asm volatile("");
  }
}

}  // namespace geniex
