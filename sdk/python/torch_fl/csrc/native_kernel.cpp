#include "native_kernel.h"

#include "call_scan.h"
#include "cpp_meta.h"
#include "fallback.h"
#include "generator.h"
#include "kernel_abi.h"
#include "kernel_trace.h"
#include "marshal.h"
#include "streams.h"
#include "thread_scratch.h"

#include <ATen/ATen.h>

#include <array>

namespace torch_fl::bridge {

namespace {

// Per argument: read and written by the kernel through its input descriptor.
std::vector<bool> read_write_args(const Signature& sig, const std::optional<c10::OperatorHandle>& functional) {
  std::vector<bool> rw(sig.args.size(), false);
  if (functional.has_value()) {
    // A derived variant writes what the functional overload writes; its own
    // self or out= tensors are outputs.
    const Signature fsig = analyze(functional->schema());
    for (size_t i = 0; i < rw.size() && i < fsig.args.size(); ++i) {
      rw[i] = fsig.args[i].write && !fsig.args[i].out;
    }
    // An in-place overload that returns nothing (_foreach_add_) writes its
    // self through the input descriptor.
    if (sig.variant == TFL_VARIANT_INPLACE && sig.num_returns == 0 && !rw.empty()) {
      rw[0] = true;
    }
    return rw;
  }
  for (size_t i = 0; i < rw.size(); ++i) {
    rw[i] = sig.args[i].write && !sig.args[i].out;
  }
  return rw;
}

// A native call's scratch, reused by the thread's next call: one
// thread-local lookup per call (each costs a call into the loader).
struct CallState {
  MetaKey key;
  Operands ops;
  CallScratch marshal;
  void clear() {
    key.clear();
    ops.clear();
    marshal.clear();
  }
};

// Counter-based RNG: the kernel may use [offset, offset + span) of the
// generator's stream for seed; the host generator moves past them.
void reserve_random(
    const Signature& sig,
    c10::ArrayRef<c10::IValue> args,
    c10::DeviceIndex device,
    const Operands& ops,
    TFL_KernelContext* ctx) {
  uint64_t span = 0;
  for (const at::Tensor& out : ops.outputs) {
    span += out.defined() ? static_cast<uint64_t>(out.numel()) : 0;
  }
  std::optional<at::Generator> gen;
  if (sig.generator_arg >= 0 && !args[sig.generator_arg].isNone()) {
    gen = args[sig.generator_arg].toGenerator();
  }
  auto [seed, offset] = generator_for(gen, device)->reserve(span);
  ctx->rng_seed = seed;
  ctx->rng_offset = offset;
  ctx->rng_span = (span + 3) / 4 * 4;
}

} // namespace

NativeKernel::NativeKernel(
    KernelSpec spec,
    Signature sig,
    std::optional<c10::OperatorHandle> functional,
    std::vector<int32_t> output_like,
    HiddenArgs hidden)
    : spec_(std::move(spec)), sig_(std::move(sig)), hidden_(std::move(hidden)), counters_(sig_.name) {
  for (size_t pos : hidden_.positions) {
    sig_.args[pos].hidden = true;
  }
  meta_source_.sig = &sig_;
  meta_source_.functional = functional;
  meta_source_.output_like = std::move(output_like);
  meta_source_.cpp_meta = cpp_meta_function(
      functional.has_value() ? functional->operator_name() : operator_name_of(sig_.name));
  read_write_ = read_write_args(sig_, functional);
  rules_.sig = &sig_;
  rules_.flags = spec_.flags;
  rules_.memory_format = spec_.memory_format;
  rules_.derived = functional.has_value();
  rules_.read_write = &read_write_;
}

void NativeKernel::operator()(
    const c10::OperatorHandle& op,
    c10::DispatchKeySet ks,
    torch::jit::Stack* stack) {
  const uint64_t start = ticks();
  const size_t nargs = sig_.args.size();
  auto args = torch::jit::last(*stack, nargs);

  if (!hidden_.empty()) {
    if (const std::string* name = hidden_.first_non_default(args)) {
      const std::string why = "the kernel was written for a schema without the argument '" + *name +
          "', and this call passes another value than its default";
      run_fallback(op, ks, stack, why.c_str());
      return;
    }
  }
  ThreadScratch<CallState> state;
  CallShape call;
  uint64_t setup = 0;
  scan_call(sig_, args, call, state->key);
  const std::shared_ptr<const MetaEntry> meta = metadata(op, args, state->key, &setup);
  call.dtype = meta->common_dtype;
  if (call.dtype == c10::ScalarType::Undefined && !meta->outs.empty()) {
    call.dtype = meta->outs[0].dtype;
  }
  if (const char* why = why_not_native(call, *meta)) {
    run_fallback(op, ks, stack, why);
    return;
  }
  OpCounter& counter = counters_.get(call.dtype);
  Operands& ops = state->ops;
  uint64_t in_plugin = 0;
  try {
    prepare_operands(rules_, args, *meta, call, ops);
    std::string declined;
    if (!launch(args, call, ops, state->marshal, &declined, &in_plugin)) {
      const std::string reason = "the kernel declined this call: " + declined;
      run_fallback(op, ks, stack, reason.c_str());
      return;
    }
    write_back(ops);
  } catch (...) {
    counter.add(Path::Failed, ticks() - start - setup, 0, in_plugin);
    throw;
  }
  push_results(stack, nargs, ops, *meta);
  counter.add(Path::Native, ticks() - start - setup, 0, in_plugin);
}

std::shared_ptr<const MetaEntry> NativeKernel::metadata(
    const c10::OperatorHandle& op,
    c10::ArrayRef<c10::IValue> args,
    const MetaKey& key,
    uint64_t* setup) {
  // An op that returns nothing has no output metadata (and some, like
  // _fused_sgd_, have no meta function at all): only its common dtype,
  // computed per call, as its keys carry hyperparameters (an optimizer's
  // learning rate) that may change at every step.
  if (sig_.num_returns == 0) {
    static const auto entries = [] {
      std::array<std::shared_ptr<const MetaEntry>, static_cast<size_t>(c10::ScalarType::NumOptions) + 1> e;
      for (size_t i = 0; i < e.size(); ++i) {
        auto entry = std::make_shared<MetaEntry>();
        entry->common_dtype = i < e.size() - 1 ? static_cast<c10::ScalarType>(i) : c10::ScalarType::Undefined;
        e[i] = std::move(entry);
      }
      return e;
    }();
    const c10::ScalarType dtype = common_dtype(sig_, args);
    return dtype == c10::ScalarType::Undefined ? entries.back() : entries[static_cast<size_t>(dtype)];
  }
  const bool cached = meta_cache_enabled();
  if (cached) {
    if (auto hit = cache_.find(key)) {
      return hit;
    }
  }
  auto entry = std::make_shared<MetaEntry>();
  *setup = measure_setup([&] { *entry = compute_meta(meta_source_, op, args); });
  set_nbytes(entry->outs);
  entry->common_dtype = common_dtype(sig_, args);
  if (cached) {
    cache_.insert(key, entry);
  }
  return entry;
}

const char* NativeKernel::why_not_native(const CallShape& call, const MetaEntry& meta) const {
  if (meta.unavailable) {
    return meta.reason.c_str();
  }
  if (call.dtype != c10::ScalarType::Undefined && (spec_.dtypes & dtype_bit(call.dtype)) == 0) {
    return "the kernel does not take this dtype";
  }
  if (call.max_dims > TFL_MAX_DIMS) {
    return "a tensor has more than TFL_MAX_DIMS dimensions";
  }
  return nullptr;
}

bool NativeKernel::launch(
    c10::ArrayRef<c10::IValue> args,
    const CallShape& call,
    const Operands& ops,
    CallScratch& s,
    std::string* declined,
    uint64_t* in_plugin) const {
  marshal_call(sig_, args, call, ops, s);
  KernelCall kernel_call(
      call.device, StreamRegistry::get().current_native(call.device), sig_.name.c_str(),
      spec_.user_data, ops.variant);
  if (spec_.flags & TFL_KERNEL_RANDOM) {
    reserve_random(sig_, args, call.device, ops, kernel_call.context());
  }
  // Timed on its stream only while a profiler session records device
  // activities (kernel_trace.h).
  std::optional<TracedLaunch> traced;
  if (kernel_trace_recording()) {
    traced.emplace(call.device, sig_.name);
  }
  const uint64_t entered = ticks();
  const bool launched = kernel_call.run(
      spec_.fn, s.values.data(), s.values.size(), s.outputs.data(), s.outputs.size(), declined);
  *in_plugin = ticks() - entered;
  if (traced) {
    traced->finish(launched);
  }
  return launched;
}

void NativeKernel::push_results(
    torch::jit::Stack* stack, size_t nargs, Operands& ops, const MetaEntry& meta) const {
  torch::jit::drop(*stack, nargs);
  if (sig_.variant == TFL_VARIANT_FUNCTIONAL) {
    if (sig_.num_int_returns > 0) {
      // Tensors from the kernel, ints from the meta function, in schema order.
      size_t t = 0, i = 0;
      for (bool is_int : sig_.int_returns) {
        if (is_int) {
          stack->emplace_back(meta.ints[i++]);
        } else {
          stack->emplace_back(std::move(ops.outputs[t++]));
        }
      }
    } else if (sig_.returns_list) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : ops.outputs) {
        list.push_back(t);
      }
      stack->emplace_back(std::move(list));
    } else {
      for (at::Tensor& t : ops.outputs) {
        stack->emplace_back(std::move(t));
      }
    }
    return;
  }
  for (size_t i = 0; i < sig_.num_returns && i < ops.targets.size(); ++i) {
    stack->emplace_back(std::move(ops.targets[i]));
  }
}

} // namespace torch_fl::bridge
