// Shared helpers for the quant and CPU kernel tests: seeded random data (seed printed, and
// overridable with GENIEX_TEST_SEED to replay a failure) and the list of types under test.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "common/test_seed.hpp"
#include "core/dtype.hpp"

namespace geniex::test {

using test_support::make_rng;
using test_support::test_seed;

inline std::vector<float> random_normal(std::mt19937& rng, size_t n, float sigma = 1.0f) {
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

inline const std::vector<DType>& weight_types() {
  static const std::vector<DType> types = {DType::F32,  DType::F16,  DType::BF16,
                                           DType::Q4_0, DType::Q4_1, DType::Q5_0,
                                           DType::Q5_1, DType::Q8_0, DType::Q4_K,
                                           DType::Q5_K, DType::Q6_K};
  return types;
}

inline std::string type_name(const testing::TestParamInfo<DType>& info) {
  return std::string(dtype_name(info.param));
}

}  // namespace geniex::test
