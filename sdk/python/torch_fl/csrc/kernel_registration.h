// Registering a plugin's kernels with PyTorch's dispatcher: the kernel table
// and the symbol convention (kernel.h), the in-place and out= overloads a
// functional kernel also serves, custom ops; and the table of what is native.
// Each registration is one NativeKernel (native_kernel.h: the op path).
#pragma once

#include "loaded_plugin.h"

#include <torch/library.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace torch_fl::bridge {

// A kernel for the dispatcher's PrivateUse1 slot of `op`, made when it goes there.
struct PendingKernel {
  c10::OperatorName op;
  std::function<c10::KernelFunction()> make;
};

struct KernelRegistration {
  std::vector<std::string> registered;                      // schema names
  std::vector<std::pair<std::string, std::string>> rejected; // name, reason
  // Registered for an older schema: PyTorch added defaulted arguments since
  // (schema_guard.h). Name, what the kernel does not receive.
  std::vector<std::pair<std::string, std::string>> adapted;
  // What registering should warn about (raised as Python warnings by the caller).
  std::vector<std::string> warnings;
  // The kernels for the dispatcher's PrivateUse1 slots (install_plugin_kernels):
  // of ops that take no tensor they must be given (factory ops), which a
  // device argument routes to the device before any tensor lives there, and
  // of all the others.
  std::vector<PendingKernel> factory_kernels;
  std::vector<PendingKernel> kernels;
};

// Checks the plugin's kernels (table and symbol convention) against the
// running PyTorch and makes one for each operator it serves, in any namespace,
// with the in-place and out= overloads a functional kernel also serves;
// has_native_kernel knows them from here on, and install_plugin_kernels puts
// them into the dispatcher. `disabled` names operators to leave to the
// fallback chain.
KernelRegistration register_plugin_kernels(
    const Plugin& plugin,
    const std::set<std::string>& disabled);

// Serves each operator of `kernels` with its kernel on PrivateUse1.
void install_plugin_kernels(const std::vector<PendingKernel>& kernels);

// Registers a plugin kernel for a custom operator whose schema is already
// defined. Output i is shaped like the tensor argument at schema position
// output_like[i] (custom ops have no meta function).
void register_custom_kernel(
    const std::string& qualified_name,
    TFL_KernelFn fn,
    void* user_data,
    uint64_t dtypes,
    uint32_t flags,
    std::vector<int32_t> output_like);

// Whether `op` (schema name) has a native kernel that accepts `dtype`.
bool has_native_kernel(const std::string& op, c10::ScalarType dtype);

// The schema names served natively, with their dtype masks.
std::map<std::string, uint64_t> native_kernel_table();

} // namespace torch_fl::bridge
