// Status and StatusOr<T>: the error type of every library in tracepoint_exporter.
//
// No exception crosses a library boundary: functions that can fail return Status (or
// StatusOr<T> when they produce a value). A Status carries a code and a one-line message that
// names the culprit (file, JSON path, event, field) and what would be valid. Only src/daemon
// turns an error into a process exit.
//
// Thread-safety: values; a const Status may be read from any thread.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace tpe {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // bad input: config, flags, format file, ring data
  kNotFound,          // event, field, file, mount point does not exist
  kPermissionDenied,  // missing privilege (CAP_PERFMON, tracefs access, ...)
  kUnavailable,       // resource busy or temporarily absent (port in use, ...)
  kInternal,          // a syscall failed in a way that is not the caller's fault
  kUnimplemented,     // valid input this code cannot handle (yet), e.g. a filter BPF cannot express
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns a copy whose message is "<prefix>: <message>", for adding context on the way up.
  Status WithContext(const std::string& prefix) const {
    if (ok()) return *this;
    return Status(code_, prefix + ": " + message_);
  }

  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }

// Builds a Status from errno after a failed syscall: EPERM/EACCES map to kPermissionDenied,
// ENOENT to kNotFound, EBUSY/EADDRINUSE to kUnavailable, EINVAL to kInvalidArgument.
Status ErrnoStatus(int err, const std::string& what);

// A value of type T or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  StatusOr(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok());
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace tpe

#define TPE_CONCAT_INNER(a, b) a##b
#define TPE_CONCAT(a, b) TPE_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define TPE_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::tpe::Status tpe_status_ = (expr);        \
    if (!tpe_status_.ok()) return tpe_status_; \
  } while (0)

// `TPE_ASSIGN_OR_RETURN(auto x, F());` declares x from F()'s value or returns its Status.
#define TPE_ASSIGN_OR_RETURN(lhs, expr) TPE_ASSIGN_OR_RETURN_IMPL(TPE_CONCAT(tpe_statusor_, __LINE__), lhs, expr)
#define TPE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
