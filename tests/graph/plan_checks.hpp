// Checks of a Plan's memory and ordering that hold for sequential and concurrent execution:
// two tensors sharing bytes of one arena must be ordered -- every access to one happens
// before every access to the other, by the plan's own order (a queue runs its splits in
// order, a split its nodes in order, and a split starts after the splits it waits for).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "sched/scheduler.hpp"

namespace geniex::test_support {

// Returns the number of overlapping tensor pairs checked; records a failure per violation.
inline int check_plan_memory_is_ordered(const sched::Plan& p) {
  const graph::Graph& g = p.graph;
  const auto n = static_cast<size_t>(g.size());
  const size_t ns = p.splits.size();
  std::vector<int32_t> split_of(n, -1), pos(n, -1);
  for (size_t s = 0; s < ns; ++s) {
    for (size_t k = 0; k < p.splits[s].nodes.size(); ++k) {
      split_of[static_cast<size_t>(p.splits[s].nodes[k])] = static_cast<int32_t>(s);
      pos[static_cast<size_t>(p.splits[s].nodes[k])] = static_cast<int32_t>(k);
    }
  }
  // reach[a][b]: split a finishes before split b starts.
  std::vector<std::vector<char>> reach(ns, std::vector<char>(ns, 0));
  for (size_t b = 0; b < ns; ++b) {
    std::vector<size_t> direct;
    for (int32_t w : p.splits[b].waits) {
      EXPECT_LT(static_cast<size_t>(w), b) << "a split waits for a later one";
      direct.push_back(static_cast<size_t>(w));
    }
    for (size_t a = b; a-- > 0;) {
      if (p.splits[a].backend == p.splits[b].backend) {
        direct.push_back(a);
        break;
      }
    }
    for (size_t a : direct) {
      reach[a][b] = 1;
      for (size_t x = 0; x < a; ++x) reach[x][b] = reach[x][b] || reach[x][a];
    }
  }
  auto before = [&](int32_t x, int32_t y) {  // node x finishes before node y starts
    const int32_t sx = split_of[static_cast<size_t>(x)], sy = split_of[static_cast<size_t>(y)];
    if (sx == sy) return pos[static_cast<size_t>(x)] < pos[static_cast<size_t>(y)];
    return reach[static_cast<size_t>(sx)][static_cast<size_t>(sy)] != 0;
  };
  // Accesses per stored tensor: its writers and readers (inputs: their readers; the host
  // writes them before any split runs). The output is also read after the last split.
  std::vector<std::vector<int32_t>> acc(n), writers(n);
  for (int32_t i = 0; i < g.size(); ++i) {
    const graph::Node& node = g.node(i);
    if (node.op == graph::Op::Weight) continue;
    if (node.op != graph::Op::Input) {
      EXPECT_GE(split_of[static_cast<size_t>(i)], 0) << node.name << " is in no split";
      const auto owner = static_cast<size_t>(p.store_of[static_cast<size_t>(i)]);
      acc[owner].push_back(i);
      writers[owner].push_back(i);
    }
    for (int32_t s : node.src) {
      if (s >= 0 && g.node(s).op != graph::Op::Weight) acc[static_cast<size_t>(s)].push_back(i);
    }
  }
  int checked = 0;
  for (size_t a = 0; a < n; ++a) {
    if (p.offset[a] < 0) continue;
    const auto sa = static_cast<int64_t>(g.node(static_cast<int32_t>(a)).nbytes());
    const int32_t ba = p.backend_of[a];
    EXPECT_LE(p.offset[a] + sa, p.arena_bytes[static_cast<size_t>(ba)]) << g.node(static_cast<int32_t>(a)).name;
    for (size_t b = a + 1; b < n; ++b) {
      if (p.offset[b] < 0 || p.backend_of[b] != ba) continue;
      const auto sb = static_cast<int64_t>(g.node(static_cast<int32_t>(b)).nbytes());
      if (p.offset[a] + sa <= p.offset[b] || p.offset[b] + sb <= p.offset[a]) continue;
      ++checked;
      const bool a_input = g.node(static_cast<int32_t>(a)).op == graph::Op::Input;
      const bool b_input = g.node(static_cast<int32_t>(b)).op == graph::Op::Input;
      const bool a_out = static_cast<int32_t>(a) == g.output(), b_out = static_cast<int32_t>(b) == g.output();
      auto all_before = [&](size_t x, size_t y) {  // every access of x before every access of y
        if (g.node(static_cast<int32_t>(y)).op == graph::Op::Input) return false;
        if (static_cast<int32_t>(x) == g.output()) return false;
        for (int32_t u : acc[x]) {
          for (int32_t v : acc[y]) {
            if (!before(u, v)) return false;
          }
        }
        return !acc[y].empty();
      };
      const bool ok = (!b_input && !a_out && all_before(a, b)) || (!a_input && !b_out && all_before(b, a));
      EXPECT_TRUE(ok) << g.node(static_cast<int32_t>(a)).name << " and " << g.node(static_cast<int32_t>(b)).name
                      << " share memory but may be live at once";
    }
  }
  return checked;
}

}  // namespace geniex::test_support
