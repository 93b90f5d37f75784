// Names for error codes and formatting of errors.
#include "geniex/result.hpp"

namespace geniex {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::Ok: return "Ok";
    case ErrorCode::InvalidArgument: return "InvalidArgument";
    case ErrorCode::NotFound: return "NotFound";
    case ErrorCode::IoError: return "IoError";
    case ErrorCode::InvalidFormat: return "InvalidFormat";
    case ErrorCode::Unsupported: return "Unsupported";
    case ErrorCode::OutOfMemory: return "OutOfMemory";
    case ErrorCode::OutOfRange: return "OutOfRange";
    case ErrorCode::BackendError: return "BackendError";
    case ErrorCode::Cancelled: return "Cancelled";
    case ErrorCode::Internal: return "Internal";
  }
  return "Unknown";
}

std::string Error::to_string() const {
  return std::string(error_code_name(code)) + ": " + message;
}

}  // namespace geniex
