#include "errors.h"

namespace {{ cookiecutter.package_slug }} {

namespace {
// Returned when even allocating an error fails; never deleted.
TFL_Error g_no_memory_for_error{TFL_ERR_OUT_OF_MEMORY, "host memory exhausted while reporting an error"};
}  // namespace

TFL_Error* make_error(int32_t code, std::string message) {
  try {
    return new TFL_Error{code, std::move(message)};
  } catch (...) {
    return &g_no_memory_for_error;
  }
}

TFL_Error* error_from(const Failure& failure) { return make_error(failure.code, failure.message); }

void destroy_error(TFL_Error* error) {
  if (error != &g_no_memory_for_error) delete error;
}

}  // namespace {{ cookiecutter.package_slug }}
