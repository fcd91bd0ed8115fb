// The plugin's operator kernels (kernels.cpp).
#pragma once

#include <cstddef>

#include "torch_fl/plugin_api.h"

namespace {{ cookiecutter.package_slug }} {

// The kernel table handed to the host by Kernels_List. Static: valid until unload.
void list_kernels(const TFL_KernelDesc* const** kernels, size_t* count);

}  // namespace {{ cookiecutter.package_slug }}
