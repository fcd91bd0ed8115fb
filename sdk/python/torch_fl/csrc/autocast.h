// Autocast for the plugin's device: torch.autocast("<name>", dtype=...)
// casts matmul/convolution-like ops to the low-precision dtype and keeps
// numerically sensitive ops in float32, with PyTorch's own op lists.
#pragma once

namespace torch {
class Library;
}

namespace torch_fl::bridge {

// `m` is an IMPL library for namespace aten and AutocastPrivateUse1.
void register_autocast(torch::Library& m);

} // namespace torch_fl::bridge
