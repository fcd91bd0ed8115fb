// PrivateUse1HooksInterface: what PyTorch asks an accelerator directly
// (availability, generators, pinned memory, pointer ownership, storage
// resize). Without it autograd's backward on the device fails.
#pragma once

namespace torch_fl::bridge {

void register_hooks();

} // namespace torch_fl::bridge
