#include "common/status.h"

#include <cerrno>
#include <cstring>

namespace tpe {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kInternal:
      return "INTERNAL";
    case StatusCode::kUnimplemented:
      return "UNIMPLEMENTED";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status ErrnoStatus(int err, const std::string& what) {
  std::string msg = what + ": " + std::strerror(err);
  switch (err) {
    case EPERM:
    case EACCES:
      return PermissionDenied(msg);
    case ENOENT:
      return NotFound(msg);
    case EBUSY:
    case EADDRINUSE:
      return Unavailable(msg);
    case EINVAL:
      return InvalidArgument(msg);
    default:
      return Internal(msg);
  }
}

}  // namespace tpe
