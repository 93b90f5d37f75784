// GX_ASSERT: checks of the program's own invariants (never of user input, which gets Errors).
#pragma once

#include <cstdio>
#include <cstdlib>

#define GX_ASSERT(cond)                                                                \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "geniex: internal invariant failed: %s (%s:%d)\n", #cond,  \
                   __FILE__, __LINE__);                                                \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)
