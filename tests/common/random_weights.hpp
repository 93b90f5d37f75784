// Random quantized weights for hand-built test graphs: normal(0, 0.5) values quantized with
// the scalar reference, owned here (stable addresses) and added to a graph as Weight nodes.
#pragma once

#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "graph/graph.hpp"
#include "quant/quant.hpp"

namespace geniex::test_support {

class RandomWeights {
 public:
  // A k x n weight of type t (n rows of k values) in g; returns its node id.
  int32_t add(graph::Graph& g, const std::string& name, DType t, int64_t k, int64_t n, std::mt19937& rng) {
    std::normal_distribution<float> d(0.0f, 0.5f);
    std::vector<float> x(static_cast<size_t>(k * n));
    for (float& v : x) v = d(rng);
    std::vector<uint8_t> q(static_cast<size_t>(row_bytes(t, k) * n));
    for (int64_t r = 0; r < n; ++r) quant::quantize_row_ref(t, x.data() + r * k, q.data() + r * row_bytes(t, k), k);
    bytes_.push_back(std::move(q));
    graph::WeightRef w;
    w.name = name;
    w.type = t;
    w.ne[0] = k;
    w.ne[1] = n;
    w.data = bytes_.back().data();
    w.nbytes = bytes_.back().size();
    refs_.push_back(w);
    return g.weight(refs_.back());
  }

 private:
  std::deque<std::vector<uint8_t>> bytes_;
  std::deque<graph::WeightRef> refs_;
};

}  // namespace geniex::test_support
