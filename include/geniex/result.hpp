// Result<T> and Error: how every fallible operation in GenieX reports failure (no exceptions
// cross the API). Part of the public API; used by the internals too.
#pragma once

#include <cstdint>
#include <new>
#include <string>
#include <type_traits>
#include <utility>

namespace geniex {

// Numbered so that logs and the C API can report a stable code.
enum class ErrorCode : int32_t {
  Ok = 0,
  InvalidArgument = 1,   // caller passed something meaningless (bad flag, empty prompt...)
  NotFound = 2,          // file, key or tensor absent
  IoError = 3,           // open/read/mmap failed
  InvalidFormat = 4,     // file bytes violate the format (truncated, bad offsets, overflow...)
  Unsupported = 5,       // valid but not implemented (unknown tensor type, architecture...)
  OutOfMemory = 6,       // allocation or budget exceeded
  OutOfRange = 7,        // request exceeds a limit (context length, vocab id...)
  BackendError = 8,      // a compute unit failed (kernel build, device allocation...)
  Cancelled = 9,         // the user's callback asked to stop
  Internal = 10,         // a bug in GenieX; should never happen
};

const char* error_code_name(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::Internal;
  std::string message;

  // "InvalidFormat: gguf: tensor 'blk.0.attn_q.weight' data ends past end of file"
  std::string to_string() const;
};

inline Error make_error(ErrorCode code, std::string message) {
  return Error{code, std::move(message)};
}

// A value or an Error. Intentionally small: no monadic chains, just has_value/value/error
// plus the GX_TRY macros below.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : ok_(true) { new (&storage_.value) T(std::move(value)); }  // NOLINT
  Result(Error error) : ok_(false) { new (&storage_.error) Error(std::move(error)); }  // NOLINT
  Result(const Result& other) : ok_(other.ok_) {
    if (ok_) new (&storage_.value) T(other.storage_.value);
    else new (&storage_.error) Error(other.storage_.error);
  }
  Result(Result&& other) noexcept : ok_(other.ok_) {
    if (ok_) new (&storage_.value) T(std::move(other.storage_.value));
    else new (&storage_.error) Error(std::move(other.storage_.error));
  }
  Result& operator=(Result other) noexcept {
    destroy();
    ok_ = other.ok_;
    if (ok_) new (&storage_.value) T(std::move(other.storage_.value));
    else new (&storage_.error) Error(std::move(other.storage_.error));
    return *this;
  }
  ~Result() { destroy(); }

  bool has_value() const { return ok_; }
  explicit operator bool() const { return ok_; }

  T& value() & { return storage_.value; }
  const T& value() const& { return storage_.value; }
  T&& value() && { return std::move(storage_.value); }
  T* operator->() { return &storage_.value; }
  const T* operator->() const { return &storage_.value; }
  T& operator*() & { return storage_.value; }
  const T& operator*() const& { return storage_.value; }

  const Error& error() const { return storage_.error; }
  Error&& take_error() { return std::move(storage_.error); }

 private:
  void destroy() {
    if (ok_) storage_.value.~T();
    else storage_.error.~Error();
  }
  union Storage {
    Storage() {}
    ~Storage() {}
    T value;
    Error error;
  } storage_;
  bool ok_;
};

// Result<void>: success or an Error.
template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : ok_(false), error_(std::move(error)) {}  // NOLINT
  bool has_value() const { return ok_; }
  explicit operator bool() const { return ok_; }
  const Error& error() const { return error_; }
  Error&& take_error() { return std::move(error_); }

 private:
  bool ok_ = true;
  Error error_;
};

using Status = Result<void>;

inline Status ok_status() { return Status(); }

}  // namespace geniex

#define GX_CONCAT_INNER(a, b) a##b
#define GX_CONCAT(a, b) GX_CONCAT_INNER(a, b)

// Evaluate a Status/Result expression; return its error from the enclosing function on failure.
#define GX_TRY(expr)                                   \
  do {                                                 \
    auto&& gx_try_result_ = (expr);                    \
    if (!gx_try_result_) return gx_try_result_.take_error(); \
  } while (0)

// Bind the value of a Result expression to `lhs`, or return its error.
#define GX_ASSIGN_OR_RETURN(lhs, expr) GX_ASSIGN_OR_RETURN_IMPL(GX_CONCAT(gx_tmp_, __LINE__), lhs, expr)
#define GX_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp) return tmp.take_error();             \
  lhs = std::move(tmp).value()
