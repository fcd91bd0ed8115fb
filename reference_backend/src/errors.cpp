#include "errors.h"

#include <new>

namespace flemu {

void throw_error(int32_t code, std::string message) { throw Error(code, std::move(message)); }

TFL_Error* make_error(int32_t code, const std::string& context, const std::string& what) {
  auto* err = new TFL_Error;
  err->code = code;
  err->message = context.empty() ? cat("flemu: ", what) : cat("flemu: ", context, ": ", what);
  return err;
}

namespace {
// Returned when not even an error object can be allocated; never deleted.
TFL_Error g_out_of_host_memory{TFL_ERR_OUT_OF_MEMORY, "flemu: out of host memory"};
}  // namespace

void destroy_error(TFL_Error* error) noexcept {
  if (error != &g_out_of_host_memory) delete error;
}

TFL_Error* error_from_current_exception(const char* context) noexcept {
  try {
    try {
      throw;
    } catch (const Error& e) {
      return make_error(e.code(), context, e.what());
    } catch (const std::bad_alloc&) {
      return make_error(TFL_ERR_OUT_OF_MEMORY, context, "host memory exhausted (std::bad_alloc)");
    } catch (const std::exception& e) {
      return make_error(TFL_ERR_INTERNAL, context, cat("internal error: ", e.what()));
    } catch (...) {
      return make_error(TFL_ERR_INTERNAL, context, "internal error: unknown exception");
    }
  } catch (...) {
    return &g_out_of_host_memory;
  }
}

const char* error_code_name(int32_t code) {
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

}  // namespace flemu
