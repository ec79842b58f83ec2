// Typed errors and the two kinds of checks (STYLE.md §8).
//  - TRIMKV_CHECK(cond, kind, msg...) : bad input. Throws trimkv::Error whose message names the
//    file / tensor / field concerned. Callers at the boundary (CLI, GUI) turn it into a message.
//  - TRIMKV_ASSERT(cond, msg...)      : internal invariant. Throws ErrorKind::Internal.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace trimkv {

enum class ErrorKind {
  Io,           // missing / unreadable file or folder
  Format,       // malformed file content (JSON, safetensors header, tokenizer.json)
  Config,       // a config field is missing, has the wrong type or an impossible value
  Shape,        // a tensor's shape or dtype does not match what the config implies
  Unsupported,  // unknown architecture, dtype, tokenizer model, rope type...
  Input,        // bad user input (prompt too long, bad option value)
  Cancelled,    // an operation was cancelled by the user
  Internal,     // an invariant was violated: a bug
};

const char* error_kind_name(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message);
  ErrorKind kind() const { return m_kind; }

 private:
  ErrorKind m_kind;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace trimkv

#define TRIMKV_CHECK(cond, kind, ...)                                                   \
  do {                                                                                   \
    if (!(cond)) throw ::trimkv::Error(::trimkv::ErrorKind::kind,                        \
                                       ::trimkv::detail::concat(__VA_ARGS__));           \
  } while (0)

#define TRIMKV_FAIL(kind, ...) \
  throw ::trimkv::Error(::trimkv::ErrorKind::kind, ::trimkv::detail::concat(__VA_ARGS__))

#define TRIMKV_ASSERT(cond, ...)                                                              \
  do {                                                                                         \
    if (!(cond)) throw ::trimkv::Error(::trimkv::ErrorKind::Internal,                          \
                                       ::trimkv::detail::concat("internal error: ", #cond,    \
                                                                " (", __FILE__, ":", __LINE__, \
                                                                ") ", ##__VA_ARGS__));         \
  } while (0)
