// What the bridge knows about particular operators that their schemas and
// PyTorch's meta functions do not say (or say wrongly). Everything here is a
// named exception to the general op path; the general path never tests an
// operator's name itself.
#pragma once

#include "meta.h"

#include <ATen/core/ivalue.h>

#include <optional>
#include <string>
#include <vector>

namespace torch {
class Library;
}

namespace torch_fl::bridge {

// Arguments an operator writes although its schema does not mark them
// `(a!)`: native_batch_norm updates running_mean/running_var in training.
// Both the kernel path and the CPU fallback treat them as mutated.
const std::vector<int>& unannotated_mutations(const std::string& op);

// Refuses, with an error that names what is missing, a call whose CPU kernel
// would crash the process instead of raising (PyTorch's own bugs; its meta
// function rejects the same call): native_batch_norm_backward dereferences
// running_mean/running_var in eval mode and save_mean/save_invstd in
// training mode without checking that they were given. The CPU fallback
// checks every call before it runs the CPU kernel.
void check_cpu_kernel_arguments(const std::string& op, c10::ArrayRef<c10::IValue> args);

// Arguments whose tensors may live on the CPU although the operator runs on
// the device, because PyTorch moves them to the device itself: the index
// tensors of advanced indexing (x[cpu_index], x[cpu_mask] = v, index_put_).
// The bridge moves them too; any other CPU tensor but a 0-dim one is a
// device mismatch.
std::vector<int> host_operand_args(const c10::FunctionSchema& schema);

// Output metadata the bridge computes itself where PyTorch's meta function
// cannot be used for a call (it fails on valid arguments). nullopt: ask the
// meta function.
std::optional<std::vector<OutSpec>> rule_output_metadata(
    const std::string& op, c10::ArrayRef<c10::IValue> args);

// Adjusts what a meta function computed where torch.compile's FakeTensor
// rules give a different layout: a convolution's output and gradients take
// the memory format ATen's convolution picks for the backend it selects
// (FakeTensor's conv rule), not the meta kernels' own choice. The device
// kernel path applies it to the meta function's specs; the CPU fallback to
// the CPU kernel's results, before they travel to the device.
void adjust_output_metadata(
    const std::string& op, c10::ArrayRef<c10::IValue> args, std::vector<OutSpec>& outs);

// Registers, unless the plugin serves them natively (`native`: registered
// schema names): the *_overrideable convolution ops PyTorch routes
// out-of-tree devices to, as their regular counterparts; and the operators
// whose CompositeExplicitAutograd kernel is less accurate than the operator
// (native_layer_norm, native_group_norm) or refuses the device (mode.values),
// as the bridge's fallback chain.
void register_rule_kernels(torch::Library& aten, const std::vector<std::string>& native);

} // namespace torch_fl::bridge
