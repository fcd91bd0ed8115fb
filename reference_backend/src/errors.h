// Error objects that cross the ABI, and the exception used inside flemu to
// carry them up to the ABI boundary.
#ifndef FLEMU_ERRORS_H_
#define FLEMU_ERRORS_H_

#include <cstdint>
#include <exception>
#include <sstream>
#include <string>
#include <utility>

#include "torch_fl/types.h"

// The ABI declares `struct TFL_Error` opaque; this is flemu's definition.
struct TFL_Error {
  int32_t code;
  std::string message;  // always starts with "flemu: "
};

namespace flemu {

// Concatenates anything streamable into one string.
template <class... Parts>
std::string cat(Parts&&... parts) {
  std::ostringstream os;
  (os << ... << std::forward<Parts>(parts));
  return os.str();
}

// Thrown inside flemu; converted into a TFL_Error at the ABI boundary.
// `what()` is the bare description, without the "flemu: " prefix.
class Error : public std::exception {
 public:
  Error(int32_t code, std::string message) : code_(code), message_(std::move(message)) {}
  int32_t code() const noexcept { return code_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  int32_t code_;
  std::string message_;
};

[[noreturn]] void throw_error(int32_t code, std::string message);

template <class... Parts>
[[noreturn]] void invalid_argument(Parts&&... parts) {
  throw_error(TFL_ERR_INVALID_ARGUMENT, cat(std::forward<Parts>(parts)...));
}

// Creates an ABI error; `context` (e.g. "Memory_Free") prefixes the message.
TFL_Error* make_error(int32_t code, const std::string& context, const std::string& what);

// Releases an error made by make_error (TFL_Error_Destroy).
void destroy_error(TFL_Error* error) noexcept;

// Converts the exception in flight into an ABI error. Call only from a catch block.
TFL_Error* error_from_current_exception(const char* context) noexcept;

// Runs `fn` and turns anything it throws into a TFL_Error: nothing may cross
// the ABI as an exception.
template <class Fn>
TFL_Error* guarded(const char* context, Fn&& fn) noexcept {
  try {
    fn();
    return nullptr;
  } catch (...) {
    return error_from_current_exception(context);
  }
}

const char* error_code_name(int32_t code);

}  // namespace flemu

#endif  // FLEMU_ERRORS_H_
