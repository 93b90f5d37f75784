// Seeded randomness for the core tests (see common/test_seed.hpp).
#pragma once

#include "common/test_seed.hpp"

namespace geniex::core_test {
using test_support::make_rng;
using test_support::test_seed;
}  // namespace geniex::core_test
