// Result<T>, Status, the GX_TRY / GX_ASSIGN_OR_RETURN macros and Error formatting.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>

#include "core/result.hpp"

namespace geniex {
namespace {

// Counts live instances so that leaks and double destruction show up as a wrong count.
struct Tracked {
  static int live;
  int v = 0;
  explicit Tracked(int x) : v(x) { ++live; }
  Tracked(const Tracked& o) : v(o.v) { ++live; }
  Tracked(Tracked&& o) noexcept : v(o.v) {
    o.v = -1;
    ++live;
  }
  Tracked& operator=(const Tracked&) = default;
  Tracked& operator=(Tracked&&) = default;
  ~Tracked() { --live; }
};
int Tracked::live = 0;

TEST(Result, MoveOnlyValue) {
  Result<std::unique_ptr<int>> r(std::make_unique<int>(42));
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE(static_cast<bool>(r));
  ASSERT_NE(r.value(), nullptr);
  EXPECT_EQ(*r.value(), 42);
  EXPECT_EQ(**r, 42);
  EXPECT_EQ(*r->get(), 42);

  Result<std::unique_ptr<int>> moved(std::move(r));
  ASSERT_TRUE(moved.has_value());
  EXPECT_EQ(*moved.value(), 42);
  EXPECT_EQ(r.value(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from unique_ptr is null

  std::unique_ptr<int> out = std::move(moved).value();
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(*out, 42);
  EXPECT_EQ(moved.value(), nullptr);  // NOLINT(bugprone-use-after-move)
}

TEST(Result, MoveOnlyAssignBetweenStates) {
  Result<std::unique_ptr<int>> r(make_error(ErrorCode::NotFound, "nope"));
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::NotFound);
  r = Result<std::unique_ptr<int>>(std::make_unique<int>(7));  // error -> value
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(**r, 7);
  r = Result<std::unique_ptr<int>>(std::make_unique<int>(8));  // value -> value (no leak)
  EXPECT_EQ(**r, 8);
  r = Result<std::unique_ptr<int>>(make_error(ErrorCode::IoError, "io"));  // value -> error
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::IoError);
  EXPECT_EQ(r.error().message, "io");
  Result<std::unique_ptr<int>> e2(std::move(r));
  ASSERT_FALSE(e2.has_value());
  EXPECT_EQ(e2.error().message, "io");
}

TEST(Result, CopyAndMoveOfValueAndErrorStates) {
  ASSERT_EQ(Tracked::live, 0);
  {
    Result<Tracked> a(Tracked(1));
    EXPECT_EQ(Tracked::live, 1);
    Result<Tracked> b(a);  // copy value
    EXPECT_EQ(Tracked::live, 2);
    EXPECT_EQ(b->v, 1);
    EXPECT_EQ(a->v, 1);
    Result<Tracked> c(std::move(a));  // move value
    EXPECT_EQ(c->v, 1);
    EXPECT_EQ(Tracked::live, 3);  // a still holds a moved-from object

    Result<Tracked> err(make_error(ErrorCode::InvalidArgument, "bad"));
    Result<Tracked> err_copy(err);
    ASSERT_FALSE(err_copy.has_value());
    EXPECT_EQ(err_copy.error().code, ErrorCode::InvalidArgument);
    EXPECT_EQ(err_copy.error().message, "bad");
    EXPECT_EQ(err.error().message, "bad");  // copying left the source intact
    EXPECT_EQ(Tracked::live, 3);

    b = err;  // value -> error: destroys b's value
    EXPECT_EQ(Tracked::live, 2);
    ASSERT_FALSE(b.has_value());
    EXPECT_EQ(b.error().message, "bad");
    err = c;  // error -> value (copy)
    EXPECT_EQ(Tracked::live, 3);
    ASSERT_TRUE(err.has_value());
    EXPECT_EQ(err->v, 1);
    c = Result<Tracked>(Tracked(5));  // value -> value
    EXPECT_EQ(c->v, 5);
    EXPECT_EQ(Tracked::live, 3);
    const Result<Tracked>& c_alias = c;
    c = c_alias;  // self-assignment keeps the value
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->v, 5);
    EXPECT_EQ(Tracked::live, 3);
    const Result<Tracked>& e_alias = err_copy;
    err_copy = e_alias;  // self-assignment of an error
    ASSERT_FALSE(err_copy.has_value());
    EXPECT_EQ(err_copy.error().message, "bad");
  }
  EXPECT_EQ(Tracked::live, 0);
}

TEST(Result, TakeErrorMovesMessage) {
  Result<int> r(make_error(ErrorCode::OutOfRange, "too far"));
  Error e = r.take_error();
  EXPECT_EQ(e.code, ErrorCode::OutOfRange);
  EXPECT_EQ(e.message, "too far");
}

TEST(Result, StatusOkAndError) {
  Status ok = ok_status();
  EXPECT_TRUE(ok.has_value());
  EXPECT_TRUE(static_cast<bool>(ok));
  Status def;
  EXPECT_TRUE(def.has_value());
  Status bad = make_error(ErrorCode::Cancelled, "stop");
  EXPECT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().code, ErrorCode::Cancelled);
  Status copy = bad;
  EXPECT_EQ(copy.error().message, "stop");
  Status moved = std::move(bad);
  EXPECT_FALSE(moved.has_value());
  EXPECT_EQ(moved.error().message, "stop");
  copy = ok;
  EXPECT_TRUE(copy.has_value());
  Error taken = moved.take_error();
  EXPECT_EQ(taken.message, "stop");
}

// --- macros -------------------------------------------------------------------------------

int g_evaluations = 0;

Status status_of(bool ok) {
  ++g_evaluations;
  if (ok) return ok_status();
  return make_error(ErrorCode::InvalidFormat, "bad bytes");
}

Result<std::unique_ptr<int>> ptr_of(int v) {
  ++g_evaluations;
  if (v < 0) return make_error(ErrorCode::OutOfRange, "negative " + std::to_string(v));
  return std::make_unique<int>(v);
}

Status try_twice(bool first, bool second, int* reached) {
  GX_TRY(status_of(first));
  *reached = 1;
  GX_TRY(status_of(second));
  *reached = 2;
  return ok_status();
}

Result<std::string> try_in_result(int v) {
  GX_TRY(ptr_of(v));  // a Result<T> works with GX_TRY too
  return std::string("ok");
}

Result<int> assign_sum(int a, int b) {
  GX_ASSIGN_OR_RETURN(auto pa, ptr_of(a));
  GX_ASSIGN_OR_RETURN(std::unique_ptr<int> pb, ptr_of(b));
  return *pa + *pb;
}

Status assign_existing(int v, int* out) {
  std::unique_ptr<int> p;
  GX_ASSIGN_OR_RETURN(p, ptr_of(v));
  *out = *p;
  return ok_status();
}

TEST(ResultMacros, TryPropagatesErrorsAndContinuesOnSuccess) {
  int reached = 0;
  g_evaluations = 0;
  EXPECT_TRUE(try_twice(true, true, &reached).has_value());
  EXPECT_EQ(reached, 2);
  EXPECT_EQ(g_evaluations, 2);  // each expression evaluated exactly once

  reached = 0;
  g_evaluations = 0;
  Status s = try_twice(true, false, &reached);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::InvalidFormat);
  EXPECT_EQ(s.error().message, "bad bytes");
  EXPECT_EQ(reached, 1);
  EXPECT_EQ(g_evaluations, 2);

  reached = 0;
  g_evaluations = 0;
  s = try_twice(false, true, &reached);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(reached, 0);
  EXPECT_EQ(g_evaluations, 1);

  auto r = try_in_result(3);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, "ok");
  r = try_in_result(-4);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::OutOfRange);
  EXPECT_EQ(r.error().message, "negative -4");
}

TEST(ResultMacros, AssignOrReturnBindsValuesAndPropagatesErrors) {
  g_evaluations = 0;
  auto r = assign_sum(2, 3);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(*r, 5);
  EXPECT_EQ(g_evaluations, 2);

  g_evaluations = 0;
  r = assign_sum(-1, 3);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::OutOfRange);
  EXPECT_EQ(r.error().message, "negative -1");
  EXPECT_EQ(g_evaluations, 1);  // stopped at the first failure

  r = assign_sum(1, -9);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().message, "negative -9");

  int out = 0;
  EXPECT_TRUE(assign_existing(11, &out).has_value());
  EXPECT_EQ(out, 11);
  Status s = assign_existing(-2, &out);
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().code, ErrorCode::OutOfRange);
  EXPECT_EQ(out, 11);
}

TEST(Error, ToStringFormat) {
  EXPECT_EQ(make_error(ErrorCode::InvalidFormat, "gguf: truncated").to_string(),
            "InvalidFormat: gguf: truncated");
  EXPECT_EQ(make_error(ErrorCode::NotFound, "").to_string(), "NotFound: ");
  Error def;
  EXPECT_EQ(def.code, ErrorCode::Internal);
  EXPECT_EQ(def.to_string(), "Internal: ");
}

TEST(Error, EveryCodeHasItsName) {
  const std::pair<ErrorCode, const char*> names[] = {
      {ErrorCode::Ok, "Ok"},
      {ErrorCode::InvalidArgument, "InvalidArgument"},
      {ErrorCode::NotFound, "NotFound"},
      {ErrorCode::IoError, "IoError"},
      {ErrorCode::InvalidFormat, "InvalidFormat"},
      {ErrorCode::Unsupported, "Unsupported"},
      {ErrorCode::OutOfMemory, "OutOfMemory"},
      {ErrorCode::OutOfRange, "OutOfRange"},
      {ErrorCode::BackendError, "BackendError"},
      {ErrorCode::Cancelled, "Cancelled"},
      {ErrorCode::Internal, "Internal"},
  };
  for (int i = 0; i <= 10; ++i) {
    EXPECT_EQ(static_cast<int>(names[i].first), i);  // stable numbering
    EXPECT_STREQ(error_code_name(names[i].first), names[i].second);
    EXPECT_EQ(make_error(names[i].first, "m").to_string(), std::string(names[i].second) + ": m");
  }
  EXPECT_STREQ(error_code_name(static_cast<ErrorCode>(99)), "Unknown");
  EXPECT_STREQ(error_code_name(static_cast<ErrorCode>(-1)), "Unknown");
}

}  // namespace
}  // namespace geniex
