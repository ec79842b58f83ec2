#include "trimkv/core/error.h"

namespace trimkv {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Io: return "io";
    case ErrorKind::Format: return "format";
    case ErrorKind::Config: return "config";
    case ErrorKind::Shape: return "shape";
    case ErrorKind::Unsupported: return "unsupported";
    case ErrorKind::Input: return "input";
    case ErrorKind::Cancelled: return "cancelled";
    case ErrorKind::Internal: return "internal";
  }
  return "unknown";
}

Error::Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), m_kind(kind) {}

}  // namespace trimkv
