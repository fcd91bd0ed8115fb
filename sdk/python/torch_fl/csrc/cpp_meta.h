// PyTorch's C++ meta functions, called directly for the operators whose Meta
// kernel `import torch` replaced with a Python one (cpp_meta_table.h, which
// the build generates for the torch it compiles against: sdk/tools/cpp_meta_table.py).
//
// Output metadata is computed on the Meta key (meta.cpp). For about 640 aten
// operators that key runs a Python function (torch._meta_registrations):
// ~50 us a call under the GIL, and the first elementwise one imports
// torch._dynamo, over a second of a process's first op. The C++ meta function
// the CPU kernel itself uses (at::meta::<op>) gives the same sizes, strides and
// dtype in well under a microsecond.
#pragma once

#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/operator_name.h>

#include <string>
#include <vector>

namespace torch_fl::bridge {

// The boxed C++ meta function of operator `name`; nullptr when there is none
// to prefer over the Meta key's own kernel. The pointer lives for the process.
const c10::KernelFunction* cpp_meta_function(const c10::OperatorName& name);

// The operators with one, sorted ("aten::add.Tensor").
std::vector<std::string> cpp_meta_ops();

} // namespace torch_fl::bridge
