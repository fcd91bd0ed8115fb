// Registration of the bridge-implemented minimal operator set.
#pragma once

#include <string>
#include <vector>

namespace torch {
class Library;
}

namespace torch_fl::bridge {

void register_minimal_ops(torch::Library& m);
// Lets the Conjugate and Negative keys fall through _copy_from, which
// resolves the bits itself (libraries for those two keys, namespace aten).
void register_math_bit_fallthroughs(torch::Library& conjugate, torch::Library& negative);
// Schema names of those operators; plugin kernels for them are ignored.
const std::vector<std::string>& minimal_op_names();

} // namespace torch_fl::bridge
