/* torch-fl plugin ABI: helpers for plugin authors — not part of the ABI.
 *
 * Everything here is header-only plumbing that every plugin otherwise writes
 * again: a definition of the opaque TFL_Error, the three core error
 * functions, struct-size checks of argument structs, and `guarded()`, which
 * turns any C++ exception into a TFL_Error at the ABI boundary (nothing may
 * cross the ABI as an exception). Using it changes no layout and no symbol a
 * host sees; a plugin is free to write its own instead.
 *
 * From C only the struct-size check macro is available. From C++17:
 *
 *   #include "torch_fl/plugin_helpers.h"
 *   namespace tfl = torch_fl::helpers;
 *
 *   TFL_Error* Memory_Allocate(TFL_Memory_Allocate_Args* args) {
 *     return tfl::guarded("Memory_Allocate", [&] {
 *       TFL_CHECK_ARGS(args, TFL_Memory_Allocate_Args);
 *       if (args->size > kCapacity)
 *         tfl::fail(TFL_ERR_OUT_OF_MEMORY, "asked for ", args->size, " bytes");
 *       ...
 *     });
 *   }
 *   const TFL_CoreApi core = {TFL_CoreApi_STRUCT_SIZE, tfl::Error_Destroy,
 *                             tfl::Error_Message, tfl::Error_GetCode, ...};
 *
 * Messages: guarded(context, fn) reports "<prefix><context>: <what>", where
 * the prefix is set once with set_error_prefix("myplugin: ") before the
 * first error (for instance in TFL_GetPluginApi) and is empty by default.
 *
 * Thread safety: everything may be called from any thread, except
 * set_error_prefix, which must run before any other thread makes an error.
 */
#ifndef TORCH_FL_PLUGIN_HELPERS_H_
#define TORCH_FL_PLUGIN_HELPERS_H_

#include "torch_fl/core.h"

/* True when `args` is non-NULL and was written by a peer that knows every
 * field of `Type` up to its TFL_<Type>_STRUCT_SIZE. */
#define TFL_ARGS_COMPLETE(args, Type) \
  ((args) != NULL && (args)->struct_size >= Type##_STRUCT_SIZE)

#ifdef __cplusplus

#include <cstdint>
#include <exception>
#include <new>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

/* The ABI declares TFL_Error opaque; a plugin using these helpers gets this
 * definition. The host reads it only through Error_GetCode / Error_Message
 * and releases it with Error_Destroy. */
struct TFL_Error {
  int32_t code;        /* a TFL_ErrorCode */
  std::string message; /* what the host shows, prefix included */
};

/* Hidden: every plugin that includes this keeps its own copy (its own error
 * prefix, its own TFL_Error), even when it is built without
 * -fvisibility=hidden and loaded beside another plugin. */
#if defined(__GNUC__)
#define TFL_HELPERS_HIDDEN __attribute__((visibility("hidden")))
#else
#define TFL_HELPERS_HIDDEN
#endif

namespace torch_fl {
namespace TFL_HELPERS_HIDDEN helpers {

/* Concatenates anything streamable into one string. */
template <class... Parts>
std::string cat(Parts&&... parts) {
  std::ostringstream os;
  (void)(os << ... << std::forward<Parts>(parts));
  return os.str();
}

/* Thrown inside a plugin; guarded() turns it into a TFL_Error. */
class Error : public std::exception {
 public:
  Error(int32_t code, std::string message) : code_(code), message_(std::move(message)) {}
  int32_t code() const noexcept { return code_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  int32_t code_;
  std::string message_;
};

template <class... Parts>
[[noreturn]] void fail(int32_t code, Parts&&... parts) {
  throw Error(code, cat(std::forward<Parts>(parts)...));
}

template <class... Parts>
[[noreturn]] void invalid_argument(Parts&&... parts) {
  fail(TFL_ERR_INVALID_ARGUMENT, std::forward<Parts>(parts)...);
}

/* Declines a request this plugin cannot serve (a kernel returning this before
 * it enqueues anything makes the host fall back for that call). */
template <class... Parts>
[[noreturn]] void unimplemented(Parts&&... parts) {
  fail(TFL_ERR_UNIMPLEMENTED, std::forward<Parts>(parts)...);
}

/* The prefix of every message made here ("" by default). */
inline std::string& error_prefix() {
  static std::string prefix;
  return prefix;
}
inline void set_error_prefix(const char* prefix) { error_prefix() = prefix ? prefix : ""; }

namespace detail {
/* Returned when not even an error object can be allocated; never freed. */
inline TFL_Error& out_of_host_memory() {
  static TFL_Error error{TFL_ERR_OUT_OF_MEMORY, "out of host memory while reporting an error"};
  return error;
}
}  // namespace detail

/* A new error "<prefix><context>: <what>" (no context: "<prefix><what>").
 * Never throws; under memory exhaustion it returns a static error. */
inline TFL_Error* make_error(int32_t code, const std::string& context,
                             const std::string& what) noexcept {
  try {
    std::string message = error_prefix();
    if (!context.empty()) message += context + ": ";
    message += what;
    return new TFL_Error{code, std::move(message)};
  } catch (...) {
    return &detail::out_of_host_memory();
  }
}

/* Releases an error made by make_error. */
inline void destroy_error(TFL_Error* error) noexcept {
  if (error != &detail::out_of_host_memory()) delete error;
}

/* The exception in flight as an ABI error. Call only inside a catch block. */
inline TFL_Error* error_from_current_exception(const char* context) noexcept {
  const std::string where = context ? context : "";
  try {
    throw;
  } catch (const Error& e) {
    return make_error(e.code(), where, e.what());
  } catch (const std::bad_alloc&) {
    return make_error(TFL_ERR_OUT_OF_MEMORY, where, "host memory exhausted (std::bad_alloc)");
  } catch (const std::exception& e) {
    return make_error(TFL_ERR_INTERNAL, where, std::string("internal error: ") + e.what());
  } catch (...) {
    return make_error(TFL_ERR_INTERNAL, where, "internal error: unknown exception");
  }
}

/* Runs `fn` and returns NULL, or the TFL_Error for whatever it threw. A body
 * that returns a TFL_Error* (an error that was pending on a stream, say)
 * has it returned as it is. */
template <class Fn>
TFL_Error* guarded(const char* context, Fn&& fn) noexcept {
  try {
    if constexpr (std::is_same_v<std::invoke_result_t<Fn>, TFL_Error*>) {
      return std::forward<Fn>(fn)();
    } else {
      std::forward<Fn>(fn)();
      return nullptr;
    }
  } catch (...) {
    return error_from_current_exception(context);
  }
}

/* Throws TFL_ERR_INVALID_ARGUMENT unless `args` is non-NULL and at least
 * `expected` bytes as its struct_size says; `type` names the struct. */
template <class Args>
void check_args(const Args* args, size_t expected, const char* type) {
  if (args == nullptr) invalid_argument(type, " is NULL");
  if (args->struct_size < expected)
    invalid_argument(type, ".struct_size is ", args->struct_size, ", expected at least ", expected,
                     " (the caller was built against an older ABI than this plugin reads)");
}

/* The name of a TFL_ErrorCode, for messages and logs. */
inline const char* error_code_name(int32_t code) noexcept {
  switch (code) {
    case TFL_OK: return "TFL_OK";
    case TFL_ERR_UNKNOWN: return "TFL_ERR_UNKNOWN";
    case TFL_ERR_INVALID_ARGUMENT: return "TFL_ERR_INVALID_ARGUMENT";
    case TFL_ERR_OUT_OF_MEMORY: return "TFL_ERR_OUT_OF_MEMORY";
    case TFL_ERR_UNIMPLEMENTED: return "TFL_ERR_UNIMPLEMENTED";
    case TFL_ERR_DEVICE: return "TFL_ERR_DEVICE";
    case TFL_ERR_TIMEOUT: return "TFL_ERR_TIMEOUT";
    case TFL_ERR_ABORTED: return "TFL_ERR_ABORTED";
    case TFL_ERR_UNAVAILABLE: return "TFL_ERR_UNAVAILABLE";
    case TFL_ERR_INTERNAL: return "TFL_ERR_INTERNAL";
    case TFL_ERR_ABI_MISMATCH: return "TFL_ERR_ABI_MISMATCH";
    default: return "unknown error code";
  }
}

/* The three error functions of TFL_CoreApi, for errors made by make_error. */
inline void Error_Destroy(TFL_Error_Destroy_Args* args) {
  if (args != nullptr) destroy_error(args->error);
}

inline void Error_Message(TFL_Error_Message_Args* args) {
  if (args == nullptr) return;
  args->message = args->error == nullptr ? "" : args->error->message.c_str();
  args->message_size = args->error == nullptr ? 0 : args->error->message.size();
}

inline void Error_GetCode(TFL_Error_GetCode_Args* args) {
  if (args == nullptr) return;
  args->code = args->error == nullptr ? TFL_OK : args->error->code;
}

}  // namespace helpers
}  // namespace torch_fl

/* Throws TFL_ERR_INVALID_ARGUMENT (inside guarded()) unless `args` holds at
 * least the TFL_<Type>_STRUCT_SIZE this plugin was built with. */
#define TFL_CHECK_ARGS(args, Type) \
  ::torch_fl::helpers::check_args((args), Type##_STRUCT_SIZE, #Type)

#endif /* __cplusplus */

#endif /* TORCH_FL_PLUGIN_HELPERS_H_ */
