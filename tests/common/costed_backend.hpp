// A backend test double with given cost estimates per op, for the cost-model placement
// tests: it supports the ops it is given, answers estimate_us from a table, and never runs
// (placement only).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "backends/backend.hpp"
#include "backends/cpu/backend/cpu_backend.hpp"

namespace geniex::test_support {

class CostedBackend final : public backends::Backend {
 public:
  // us: estimate per op; an op absent from the table is not supported.
  CostedBackend(std::string name, backends::DeviceKind kind, std::map<graph::Op, double> us)
      : name_(std::move(name)), kind_(kind), us_(std::move(us)) {}

  std::string_view name() const override { return name_; }
  backends::DeviceKind kind() const override { return kind_; }
  backends::Support supports(const graph::Graph&, const graph::Node& n) const override {
    if (n.op == graph::Op::Copy || us_.count(n.op) != 0) return backends::Support::yes();
    return backends::Support::no("no " + std::string(graph::op_name(n.op)));
  }
  double estimate_us(const graph::Graph&, const graph::Node& n) const override {
    const auto it = us_.find(n.op);
    return it == us_.end() ? 0.0 : it->second;
  }
  Result<std::unique_ptr<backends::Buffer>> allocate(size_t bytes) override {
    return std::unique_ptr<backends::Buffer>(std::make_unique<backends::HostBuffer>(bytes));
  }
  bool host_visible() const override { return true; }
  Status compute(std::span<const int32_t>, backends::ExecContext&) override {
    return make_error(ErrorCode::Unsupported, name_ + ": a placement-only test double does not run");
  }

 private:
  std::string name_;
  backends::DeviceKind kind_;
  std::map<graph::Op, double> us_;
};

}  // namespace geniex::test_support
