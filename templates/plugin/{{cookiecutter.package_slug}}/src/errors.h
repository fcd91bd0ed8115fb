// Errors: the TFL_Error object every failing ABI call returns, and the
// exception that carries one from deep inside the runtime to the ABI boundary.
//
// Nothing may throw across the C ABI. Every entry point in plugin.cpp runs its
// body through guarded(), which turns an exception into a TFL_Error.
#pragma once

#include <cstdint>
#include <exception>
#include <new>
#include <sstream>
#include <string>
#include <utility>

#include "torch_fl/plugin_api.h"

// The ABI declares TFL_Error opaque; this plugin defines it. The host reads it
// only through Error_GetCode / Error_Message and frees it with Error_Destroy.
struct TFL_Error {
  int32_t code;
  std::string message;
};

namespace {{ cookiecutter.package_slug }} {

// Thrown inside the plugin; guarded() converts it at the ABI boundary.
struct Failure : std::exception {
  Failure(int32_t c, std::string m) : code(c), message(std::move(m)) {}
  const char* what() const noexcept override { return message.c_str(); }
  int32_t code;
  std::string message;
};

// Concatenates anything streamable into one message.
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

template <typename... Parts>
[[noreturn]] void fail(int32_t code, const Parts&... parts) {
  throw Failure(code, cat(parts...));
}

template <typename... Parts>
[[noreturn]] void invalid_argument(const Parts&... parts) {
  fail(TFL_ERR_INVALID_ARGUMENT, parts...);
}

TFL_Error* make_error(int32_t code, std::string message);
TFL_Error* error_from(const Failure& failure);
void destroy_error(TFL_Error* error);

// Runs `body`; returns NULL on success or a TFL_Error naming `function`.
template <typename Body>
TFL_Error* guarded(const char* function, Body&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (const Failure& f) {
    return make_error(f.code, cat(function, ": ", f.message));
  } catch (const std::bad_alloc&) {
    return make_error(TFL_ERR_OUT_OF_MEMORY, cat(function, ": host memory exhausted"));
  } catch (const std::exception& e) {
    return make_error(TFL_ERR_INTERNAL, cat(function, ": ", e.what()));
  } catch (...) {
    return make_error(TFL_ERR_INTERNAL, cat(function, ": unknown exception"));
  }
}

}  // namespace {{ cookiecutter.package_slug }}
