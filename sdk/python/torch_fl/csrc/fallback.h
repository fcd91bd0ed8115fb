// The fallback chain for operators the plugin has no kernel for:
//   1. PyTorch's decomposition of the op, when one exists and every op it
//      decomposes into runs natively (decided once per op and dtype);
//   2. the CPU fallback: copy the inputs to the host, run the CPU kernel,
//      copy the results back (TORCH_FL_FALLBACK=warn|silent|error);
//   3. a clear error for what cannot fall back (views of inputs, no CPU kernel).
// Every call is counted in op_stats.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <functional>
#include <string>
#include <vector>

namespace torch {
class Library;
}

namespace torch_fl::bridge {

enum class FallbackMode : int { Warn = 0, Silent = 1, Error = 2 };
void set_fallback_mode(FallbackMode mode);
FallbackMode fallback_mode();

// Runs a decomposition of `op` on the stack if one applies; false if not.
// Installed by the Python layer (PyTorch's decompositions are Python).
using Decomposer =
    std::function<bool(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::ScalarType dtype)>;
// Says whether `op` (schema name) has a decomposition at all.
using DecompositionProbe = std::function<bool(const std::string& op)>;
void set_decomposer(Decomposer decomposer, DecompositionProbe probe);

// The chain, for `op` with its arguments on `stack`. `reason` says why the
// op is not native (shown in the warning).
void run_fallback(
    const c10::OperatorHandle& op,
    c10::DispatchKeySet ks,
    torch::jit::Stack* stack,
    const char* reason);

// Registers run_fallback as the PrivateUse1 backend fallback.
void register_fallback(torch::Library& lib);

// Registers the *_overrideable ops PyTorch routes out-of-tree devices to, as
// their regular counterparts (into the aten PrivateUse1 library), unless the
// plugin serves them natively (`native`: registered schema names).
void register_overrideable_ops(torch::Library& aten, const std::vector<std::string>& native);

} // namespace torch_fl::bridge
