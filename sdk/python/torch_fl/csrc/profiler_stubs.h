// torch.autograd.profiler.profile(use_device="<name>"): PyTorch's
// PrivateUse1 profiler stubs over the plugin's timing events. PyTorch
// records one event before and one after every operator on the current
// stream and reports their elapsed time as the operator's device time.
#pragma once

namespace torch_fl::bridge {

void register_profiler_stubs();

} // namespace torch_fl::bridge
