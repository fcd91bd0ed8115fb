// The op path: how one call of an ATen operator reaches a plugin kernel.
//
// One NativeKernel (a boxed dispatcher kernel) is registered per operator
// overload the plugin serves (kernel_registration.cpp). Per call:
//   1. scan the arguments: device, common dtype, cache key (call_scan.cpp);
//   2. find the outputs' metadata, cached per call shape (meta.cpp, with the
//      per-operator exceptions of op_rules.cpp);
//   3. hand anything the kernel cannot take to the fallback chain (fallback.cpp);
//   4. make the operands keep what the kernel's flags promise (operands.cpp);
//   5. marshal them into ABI values and launch on the current stream
//      (marshal.cpp, kernel_abi.cpp), copy temporaries back, count the call
//      (op_stats.cpp).
#pragma once

#include "meta.h"
#include "op_stats.h"
#include "operands.h"
#include "schema_guard.h"
#include "signature.h"

#include <torch_fl/plugin_api.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <optional>
#include <string>
#include <vector>

namespace torch_fl::bridge {

struct CallScratch; // marshal.h

// What the plugin declared for one kernel (TFL_KernelDesc).
struct KernelSpec {
  std::string op;
  TFL_KernelFn fn = nullptr;
  void* user_data = nullptr;
  uint64_t dtypes = 0;
  uint32_t flags = 0;
  int32_t memory_format = TFL_MEMORY_FORMAT_ANY;
  std::string schema;              // the schema the kernel was written for; empty = not stated
  std::vector<std::string> hidden; // arguments PyTorch added since that schema (schema_guard.h)
};

class NativeKernel final : public c10::OperatorKernel {
 public:
  // `functional`: for an in-place/out= overload served by the functional
  // overload's kernel. `output_like`: for custom ops (no meta function).
  // `hidden`: arguments of `sig` the kernel does not receive (schema_guard.h).
  NativeKernel(
      KernelSpec spec,
      Signature sig,
      std::optional<c10::OperatorHandle> functional,
      std::vector<int32_t> output_like = {},
      HiddenArgs hidden = {});
  // Holds pointers to its own members: never copied or moved.
  NativeKernel(const NativeKernel&) = delete;
  NativeKernel& operator=(const NativeKernel&) = delete;

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack);

 private:
  // `setup` receives the one-time set-up time of a cache miss (op_stats.h).
  std::shared_ptr<const MetaEntry> metadata(
      const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args, const MetaKey& key,
      uint64_t* setup);
  const char* why_not_native(const CallShape& call, const MetaEntry& meta) const;
  // `in_plugin` receives the time spent inside the plugin's kernel function.
  bool launch(c10::ArrayRef<c10::IValue> args, const CallShape& call, const Operands& ops,
              CallScratch& s, std::string* declined, uint64_t* in_plugin) const;
  void push_results(torch::jit::Stack* stack, size_t nargs, Operands& ops, const MetaEntry& meta) const;

  KernelSpec spec_;
  Signature sig_;
  HiddenArgs hidden_;
  MetaSource meta_source_;
  std::vector<bool> read_write_;
  OperandRules rules_;
  OpCounterCache counters_;
  MetaCache cache_;
};

} // namespace torch_fl::bridge
