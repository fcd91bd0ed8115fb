// Registration of the bridge-implemented minimal operator set.
#pragma once

#include <string>
#include <vector>

namespace torch {
class Library;
}

namespace torch_fl::bridge {

void register_minimal_ops(torch::Library& m);
// Schema names of those operators; plugin kernels for them are ignored.
const std::vector<std::string>& minimal_op_names();

} // namespace torch_fl::bridge
