// flemu's errors are torch-fl's plugin helpers (torch_fl/plugin_helpers.h):
// their TFL_Error, exception, guarded() and error functions, with every
// message prefixed "flemu: " (set in TFL_GetPluginApi). These are the names
// flemu's code uses for them.
#ifndef FLEMU_ERRORS_H_
#define FLEMU_ERRORS_H_

#include "torch_fl/plugin_helpers.h"

namespace flemu {

using torch_fl::helpers::cat;
using torch_fl::helpers::destroy_error;
using torch_fl::helpers::Error;
using torch_fl::helpers::error_code_name;
using torch_fl::helpers::fail;
using torch_fl::helpers::guarded;
using torch_fl::helpers::invalid_argument;
using torch_fl::helpers::make_error;
using torch_fl::helpers::unimplemented;

}  // namespace flemu

#endif  // FLEMU_ERRORS_H_
