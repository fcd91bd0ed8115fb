#include "fallback.h"

#include "copy.h"
#include "first_use.h"
#include "generator.h"
#include "op_rules.h"
#include "op_stats.h"
#include "loaded_plugin.h"
#include "signature.h"
#include "streams.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/TypeProperties.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <set>

namespace torch_fl::bridge {

namespace {

std::atomic<int> g_mode{static_cast<int>(FallbackMode::Warn)};

enum class Decision : uint8_t { Unknown, Usable, NotUsable };

struct DecompositionState {
  std::mutex mutex;
  Decomposer decomposer;
  std::map<std::string, bool> exists;                        // per op
  std::map<std::pair<std::string, int>, Decision> decisions; // per op and dtype
  std::set<std::string> warned;
};

DecompositionState& state() {
  static auto* s = new DecompositionState();
  return *s;
}

bool is_device_tensor(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

c10::ScalarType common_dtype(c10::ArrayRef<c10::IValue> args, const c10::FunctionSchema& schema) {
  at::native::ResultTypeState promote{};
  bool any = false;
  auto take = [&](const at::Tensor& t) {
    if (t.defined()) {
      promote = at::native::update_result_type_state(t, promote);
      any = true;
    }
  };
  for (size_t i = 0; i < args.size(); ++i) {
    if (schema.arguments()[i].is_out()) {
      continue;
    }
    const c10::IValue& v = args[i];
    if (v.isTensor()) {
      take(v.toTensor());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList()) {
        take(t);
      }
    } else if (v.isOptionalTensorList()) {
      for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
        if (t.has_value()) {
          take(*t);
        }
      }
    }
  }
  if (any) {
    return at::native::result_type(promote);
  }
  for (const c10::IValue& v : args) {
    if (v.isTensor() && v.toTensor().defined()) {
      return v.toTensor().scalar_type();
    }
  }
  return c10::ScalarType::Undefined;
}

std::string dtype_name(c10::ScalarType dtype) {
  return dtype == c10::ScalarType::Undefined ? std::string("no dtype")
                                             : std::string(c10::getDtypeNames(dtype).first);
}

// What a plugin registers to serve `op` natively: the functional overload,
// whose kernel also serves the in-place and out= overloads, with the dtype
// bit, and where: the kernel table, or for float32 the symbol convention.
std::string what_to_register(const c10::OperatorHandle& op, c10::ScalarType dtype, const std::string& plugin) {
  const std::optional<c10::OperatorHandle> functional = functional_of(op);
  const c10::OperatorHandle& target = functional.has_value() ? *functional : op;
  std::string text = "register a kernel for " + c10::toString(target.operator_name());
  if (target.operator_name() != op.operator_name()) {
    text += " (it also serves " + c10::toString(op.operator_name()) + ")";
  }
  if (dtype != c10::ScalarType::Undefined) {
    text += " with " + dtype_name(dtype) + " in its dtypes";
  }
  text += " in the '" + plugin + "' plugin: a TFL_KernelDesc in its Kernels_List";
  if (dtype == c10::ScalarType::Float && target.schema().name().rfind("aten::", 0) == 0) {
    text += ", or an exported function torch_fl_op_" + target.schema().name().substr(6);
    if (!target.schema().overload_name().empty()) {
      text += "_" + target.schema().overload_name();
    }
  }
  return text;
}

bool takes_generator(const c10::FunctionSchema& schema) {
  for (const c10::Argument& arg : schema.arguments()) {
    c10::TypePtr type = arg.type();
    if (auto opt = type->cast<c10::OptionalType>()) {
      type = opt->getElementType();
    }
    if (type->kind() == c10::TypeKind::GeneratorType) {
      return true;
    }
  }
  return false;
}

// `setup` receives the one-time set-up the decision took (op_stats.h).
bool try_decompose(
    const c10::OperatorHandle& op,
    const std::string& name,
    torch::jit::Stack* stack,
    c10::ScalarType dtype,
    uint64_t* setup) {
  // Random ops decompose into prims that draw on the CPU generator: never native.
  if (takes_generator(op.schema())) {
    return false;
  }
  DecompositionState& s = state();
  const std::pair<std::string, int> key{name, static_cast<int>(dtype)};
  Decomposer d;
  Decision decision = Decision::Unknown;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!s.decomposer.run) {
      return false;
    }
    auto it = s.decisions.find(key);
    if (it != s.decisions.end() && it->second == Decision::NotUsable) {
      return false;
    }
    decision = it == s.decisions.end() ? Decision::Unknown : it->second;
    d = s.decomposer;
  }
  if (decision == Decision::Unknown) {
    // Python is asked without the lock held: it takes the GIL.
    std::optional<bool> known;
    {
      std::lock_guard<std::mutex> lock(s.mutex);
      auto it = s.exists.find(name);
      if (it != s.exists.end()) {
        known = it->second;
      }
    }
    bool exists = known.value_or(false);
    if (!known.has_value()) {
      *setup += measure_setup([&] { exists = d.exists(name); });
    }
    if (!known.has_value()) {
      std::lock_guard<std::mutex> lock(s.mutex);
      s.exists[name] = exists;
    }
    bool usable = false;
    if (exists) {
      *setup += measure_setup([&] { usable = d.usable(op, *stack); });
    }
    decision = usable ? Decision::Usable : Decision::NotUsable;
    std::lock_guard<std::mutex> lock(s.mutex);
    s.decisions[key] = decision;
  }
  if (decision != Decision::Usable) {
    return false;
  }
  // A decomposition that reaches its own op again must not recurse.
  thread_local std::set<std::string> active;
  if (!active.insert(name).second) {
    return false;
  }
  try {
    d.run(op, stack);
  } catch (...) {
    active.erase(name);
    throw;
  }
  active.erase(name);
  return true;
}

// The op's results alias its inputs without mutating them: a CPU run would
// hand back copies where the caller expects views.
bool returns_view(const c10::FunctionSchema& schema) {
  for (const c10::Argument& ret : schema.returns()) {
    if (ret.alias_info() != nullptr && !ret.alias_info()->isWrite()) {
      return true;
    }
  }
  return false;
}

int aliased_argument(const c10::FunctionSchema& schema, const c10::Argument& ret) {
  const c10::AliasInfo* alias = ret.alias_info();
  if (alias == nullptr || !alias->isWrite()) {
    return -1;
  }
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const c10::AliasInfo* a = schema.arguments()[i].alias_info();
    if (a != nullptr && a->isWrite() && a->beforeSets() == alias->beforeSets()) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

// A CPU kernel lays some results out otherwise than torch.compile's rules,
// which the device kernel path follows (op_rules.h, adjust_output_metadata):
// a convolution's output on a channels-last input is channels-last on the
// CPU, contiguous on an out-of-tree device. Such results are restrided on the
// host, before they travel, so that a call lays its results out the same
// with or without a plugin kernel, and a compiled graph gets the layout it
// planned either way.
void lay_out_as_traced(
    const std::string& name,
    const c10::FunctionSchema& schema,
    c10::ArrayRef<c10::IValue> device_args,
    torch::jit::Stack& host_results) {
  const size_t n = schema.returns().size();
  std::vector<OutSpec> specs(n);
  bool any = false;
  for (size_t r = 0; r < n; ++r) {
    const c10::IValue& v = host_results[r];
    if (v.isTensor() && v.toTensor().defined()) {
      const at::Tensor& t = v.toTensor();
      specs[r] = OutSpec{t.scalar_type(), c10::DimVector(t.sizes()), c10::DimVector(t.strides())};
      any = true;
    } else {
      specs[r].defined = false;
    }
  }
  if (!any) {
    return;
  }
  adjust_output_metadata(name, device_args, specs);
  for (size_t r = 0; r < n; ++r) {
    if (!specs[r].defined) {
      continue;
    }
    const at::Tensor& t = host_results[r].toTensor();
    if (t.strides() != c10::IntArrayRef(specs[r].strides)) {
      host_results[r] = at::empty_strided(t.sizes(), specs[r].strides, t.options()).copy_(t);
    }
  }
}

struct Mutated {
  at::Tensor device;
  at::Tensor host;
};

// Copy in, run the CPU kernel, copy back. `name`: the op's schema name.
void cpu_fallback(const std::string& name, const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  auto args = torch::jit::last(*stack, nargs);
  check_cpu_kernel_arguments(name, args);
  c10::DeviceIndex device = -1;
  std::vector<Mutated> mutated;
  torch::jit::Stack cpu_stack;
  cpu_stack.reserve(nargs);
  uint64_t numel = 1;
  int generator_arg = -1;

  auto host_of = [&](const at::Tensor& t, bool write, bool out) -> at::Tensor {
    if (!is_device_tensor(t)) {
      return t;
    }
    if (device < 0) {
      device = t.device().index();
    }
    numel = std::max<uint64_t>(numel, static_cast<uint64_t>(t.numel()));
    // out= tensors are overwritten: their old contents need not travel.
    // Other arguments keep their layout, since CPU kernels and their backward
    // formulas branch on it (linalg_det on A's contiguity), except inputs read
    // through stride-0 dims, which arrive dense: some CPU kernels misread
    // those (median.dim of an expanded tensor returns values it never had).
    at::Tensor host;
    if (out) {
      host = at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kCPU));
    } else if (!write && at::has_internal_overlap(t) == at::MemOverlap::Yes) {
      host = to_host(t);
    } else {
      host = to_host_same_layout(t);
    }
    if (write) {
      mutated.push_back({t, host});
    }
    return host;
  };

  const std::vector<int>& hidden_writes = unannotated_mutations(name);
  for (size_t i = 0; i < nargs; ++i) {
    const c10::Argument& arg = schema.arguments()[i];
    const bool write = (arg.alias_info() != nullptr && arg.alias_info()->isWrite()) ||
        std::find(hidden_writes.begin(), hidden_writes.end(), static_cast<int>(i)) !=
            hidden_writes.end();
    const bool out = arg.is_out();
    const c10::IValue& v = args[i];
    if (v.isTensor()) {
      cpu_stack.emplace_back(host_of(v.toTensor(), write, out));
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : v.toTensorList()) {
        list.push_back(host_of(t, write, out));
      }
      cpu_stack.emplace_back(std::move(list));
    } else if (v.isOptionalTensorList()) {
      c10::List<std::optional<at::Tensor>> list;
      for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
        list.push_back(t.has_value() ? std::optional<at::Tensor>(host_of(*t, write, out)) : std::nullopt);
      }
      cpu_stack.emplace_back(std::move(list));
    } else if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
      const c10::Device d = v.toDevice();
      if (device < 0) {
        device = d.has_index() ? d.index() : current_device();
      }
      cpu_stack.emplace_back(c10::Device(c10::DeviceType::CPU));
    } else {
      if (arg.type()->kind() == c10::TypeKind::GeneratorType ||
          (arg.type()->kind() == c10::TypeKind::OptionalType &&
           arg.type()->castRaw<c10::OptionalType>()->getElementType()->kind() ==
               c10::TypeKind::GeneratorType)) {
        generator_arg = static_cast<int>(i);
      }
      cpu_stack.push_back(v);
    }
  }
  if (device < 0) {
    device = current_device();
  }
  if (generator_arg >= 0) {
    // Draw from the device generator's stream of numbers, so the result
    // depends on torch.manual_seed / the caller's device generator.
    std::optional<at::Generator> gen;
    if (!args[generator_arg].isNone()) {
      gen = args[generator_arg].toGenerator();
    }
    auto [seed, offset] = generator_for(gen, device)->reserve(numel);
    const uint64_t mixed = seed ^ (offset * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
    cpu_stack[generator_arg] = at::detail::createCPUGenerator(mixed);
  }

  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &cpu_stack);

  for (Mutated& m : mutated) {
    if (m.device.sizes() != m.host.sizes()) {
      // The CPU kernel resized it: take the strides it chose too (a
      // structured kernel's meta function picks them, e.g. an F-contiguous
      // LU), in the tensor's own storage as PyTorch's out= handling does.
      m.device.resize_(m.host.sizes());
      if (m.host.is_non_overlapping_and_dense() && m.device.strides() != m.host.strides()) {
        m.device.as_strided_(m.host.sizes(), m.host.strides(), m.device.storage_offset());
      }
    }
    m.device.copy_(m.host);
  }
  lay_out_as_traced(name, schema, args, cpu_stack);
  std::vector<c10::IValue> results;
  results.reserve(schema.returns().size());
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    const c10::IValue& value = cpu_stack[r];
    const int alias = aliased_argument(schema, schema.returns()[r]);
    if (alias >= 0) {
      results.push_back(args[alias]);
    } else if (value.isTensor()) {
      const at::Tensor& t = value.toTensor();
      results.emplace_back(t.defined() ? to_device(t, device) : t);
    } else if (value.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : value.toTensorList()) {
        list.push_back(t.defined() ? to_device(t, device) : t);
      }
      results.emplace_back(std::move(list));
    } else {
      results.push_back(value);
    }
  }
  torch::jit::drop(*stack, nargs);
  for (c10::IValue& r : results) {
    stack->push_back(std::move(r));
  }
}

void fallback_boxed(const c10::OperatorHandle& op, c10::DispatchKeySet ks, torch::jit::Stack* stack) {
  if (C10_UNLIKELY(first_use_pending())) {
    // The device's first use is an op the plugin may have a kernel for, not
    // yet in the dispatcher (first_use.h): put it there and go to it.
    on_first_use();
    op.redispatchBoxed(ks, stack);
    return;
  }
  run_fallback(op, ks, stack, "the plugin has no kernel for it");
}

} // namespace

void set_fallback_mode(FallbackMode mode) {
  g_mode.store(static_cast<int>(mode));
}

FallbackMode fallback_mode() {
  return static_cast<FallbackMode>(g_mode.load());
}

void set_decomposer(Decomposer decomposer) {
  DecompositionState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.decomposer = std::move(decomposer);
  s.exists.clear();
  s.decisions.clear();
}

void run_fallback(
    const c10::OperatorHandle& op,
    c10::DispatchKeySet /*ks*/,
    torch::jit::Stack* stack,
    const char* reason) {
  const c10::FunctionSchema& schema = op.schema();
  const std::string name = c10::toString(schema.operator_name());
  const c10::ScalarType dtype =
      common_dtype(torch::jit::last(*stack, schema.arguments().size()), schema);
  OpCounter& counter = op_counter(name, dtype);
  const std::string& plugin = active_plugin().name();
  const uint64_t start = ticks();

  uint64_t setup = 0;
  if (try_decompose(op, name, stack, dtype, &setup)) {
    counter.add(Path::Decomposed, ticks() - start - setup);
    return;
  }
  if (returns_view(schema)) {
    counter.add(Path::Failed, ticks() - start - setup);
    TORCH_CHECK_NOT_IMPLEMENTED(
        false, name, " (", dtype_name(dtype), ") is not implemented for the '", plugin,
        "' device and cannot run on the CPU fallback because it returns a view of its "
        "input; the plugin must implement it");
  }
  const FallbackMode mode = fallback_mode();
  if (mode == FallbackMode::Error) {
    counter.add(Path::Failed, ticks() - start - setup);
    TORCH_CHECK_NOT_IMPLEMENTED(
        false, name, " (", dtype_name(dtype), ") would run on the CPU fallback: ", reason,
        ". TORCH_FL_FALLBACK=error forbids CPU fallbacks; ", what_to_register(op, dtype, plugin),
        "; or set TORCH_FL_FALLBACK=warn to allow them");
  }
  const uint64_t bytes_before = transfer_bytes();
  try {
    cpu_fallback(name, op, stack);
  } catch (c10::Error& e) {
    counter.add(Path::Failed, ticks() - start - setup, transfer_bytes() - bytes_before);
    e.add_context(
        name + " is not native on the '" + plugin +
        "' device; this error comes from its CPU fallback");
    throw;
  }
  counter.add(Path::CpuFallback, ticks() - start - setup, transfer_bytes() - bytes_before);
  // Only after the fallback ran: a call the CPU refuses as well (a user error
  // that the meta step caught first) raises its own error without this warning.
  if (mode == FallbackMode::Warn) {
    bool first = false;
    {
      DecompositionState& s = state();
      std::lock_guard<std::mutex> lock(s.mutex);
      first = s.warned.insert(name).second;
    }
    if (first) {
      TORCH_WARN(
          name, " (", dtype_name(dtype), ") is not native on the '", plugin, "' device (",
          reason, "); it runs on the CPU with copies in and out. "
          "torch_fl.op_stats() counts every such call; TORCH_FL_FALLBACK=silent hides "
          "this warning, TORCH_FL_FALLBACK=error forbids the fallback.");
    }
  }
}

void register_fallback(torch::Library& lib) {
  lib.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback_boxed>());
}

} // namespace torch_fl::bridge
