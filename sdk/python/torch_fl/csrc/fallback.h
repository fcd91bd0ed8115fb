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

// The decomposition step, installed by the Python layer (PyTorch's
// decompositions are Python). The bridge asks `exists` once per operator and
// `usable` once per operator and dtype, and keeps the answers: this is the
// one place decomposition decisions live.
struct Decomposer {
  // Whether `op` (schema name) has a decomposition at all.
  std::function<bool(const std::string& op)> exists;
  // Whether its decomposition may serve a call like this one: every part runs
  // natively and its outputs match the operator's own metadata.
  std::function<bool(const c10::OperatorHandle& op, const torch::jit::Stack& stack)> usable;
  // Runs it: replaces the arguments on the stack with the results.
  std::function<void(const c10::OperatorHandle& op, torch::jit::Stack* stack)> run;
};
void set_decomposer(Decomposer decomposer);

// The chain, for `op` with its arguments on `stack`. `reason` says why the
// op is not native (shown in the warning).
void run_fallback(
    const c10::OperatorHandle& op,
    c10::DispatchKeySet ks,
    torch::jit::Stack* stack,
    const char* reason);

// Registers run_fallback as the PrivateUse1 backend fallback.
void register_fallback(torch::Library& lib);

} // namespace torch_fl::bridge
