// Work that registering a plugin leaves for the device's first use.
//
// `import torch` autoloads the plugin, and most processes that import torch
// never touch the device: DataLoader and compile workers, CPU-only scripts in
// the same environment. Putting the plugin's kernels, the bridge's rule
// kernels and the autocast kernels into PyTorch's dispatcher is about a third
// of what registering costs (with flemu, the bridge's 27.0M instructions fell
// to 18.3M once it waited), so it waits until the device is first used:
//   - the first allocation on it: no device tensor exists before one, so no op
//     dispatches on a device tensor before the kernels are in place;
//   - the first op that reaches the fallback (a factory op with a device
//     argument), which then redispatches to the kernel it now has;
//   - torch.autocast(device_type=<the device>) (the device module's
//     get_amp_supported_dtype), and whoever inspects the dispatcher from
//     Python (torch_fl._C.install_deferred()).
// What a plugin registers (its report, has_native_kernel) is settled at
// registration; only the dispatcher's tables wait. Ops that take no tensor
// they must be given (factory ops) are served at registration: a device
// argument routes them to the device before any tensor lives there. One way
// in stays loud rather than served: autocast switched on with
// torch.set_autocast_enabled (not torch.autocast) around fake tensors before
// any allocation finds no autocast kernel and raises PyTorch's "could not
// run ... with arguments from the Autocast<device> backend".
#pragma once

#include <c10/macros/Macros.h>

#include <atomic>
#include <functional>

namespace torch_fl::bridge {

namespace detail {
extern std::atomic<bool> g_first_use_pending;
void run_first_use();
} // namespace detail

// Queues `work` for the device's first use.
void defer_to_first_use(std::function<void()> work);

// Whether queued work waits for the first use (tests, diagnostics).
inline bool first_use_pending() {
  return detail::g_first_use_pending.load(std::memory_order_acquire);
}

// Runs the queued work once, on the first call after something was queued.
// A failure is kept: every later call raises it again (the device cannot be
// used with half its kernels in place).
inline void on_first_use() {
  if (C10_UNLIKELY(first_use_pending())) {
    detail::run_first_use();
  }
}

} // namespace torch_fl::bridge
