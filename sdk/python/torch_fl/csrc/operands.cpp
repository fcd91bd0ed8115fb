#include "operands.h"

#include "device_tensor.h"
#include "marshal.h"

#include <torch_fl/kernel.h>

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorGeometry.h>
#include <ATen/native/Resize.h>

#include <limits>

namespace torch_fl::bridge {

namespace {

constexpr size_t kNoSlot = std::numeric_limits<size_t>::max();

// Whether two device tensors share memory (conservatively: a layout too
// hard to decide counts as sharing).
bool shares_memory(const at::Tensor& a, const at::Tensor& b) {
  if (!a.is_alias_of(b)) {
    return false;
  }
  return at::get_overlap_status(a, b) != at::MemOverlapStatus::No;
}

// Where argument `arg`'s first tensor sits in Operands::inputs.
size_t input_slot(const Signature& sig, c10::ArrayRef<c10::IValue> args, size_t arg) {
  size_t slot = 0;
  for (size_t i = 0; i < arg; ++i) {
    const ArgInfo& info = sig.args[i];
    if (info.out) {
      continue;
    }
    if (info.kind == ArgKind::Tensor) {
      ++slot;
    } else if (info.kind == ArgKind::TensorList && !args[i].isNone()) {
      slot += args[i].toTensorList().size();
    } else if (info.kind == ArgKind::OptionalTensorList && !args[i].isNone()) {
      slot += args[i].toOptionalTensorList().size();
    }
  }
  return slot;
}

class Builder {
 public:
  Builder(const OperandRules& rules, const CallShape& call, const MetaEntry& meta, Operands& ops)
      : rules_(rules), flags_(rules.flags), call_(call), ops_(ops) {
    if (!meta.outs.empty() && meta.outs[0].defined) {
      out_shape_ = meta.outs[0].sizes; // the entry outlives the call
    }
  }

  // A tensor the kernel only reads.
  at::Tensor read_only(const at::Tensor& t, uint8_t* broadcast) const {
    at::Tensor c = t;
    if (c.device().is_cpu() && c.dim() != 0) {
      // A host operand the operator allows (op_rules: CPU index tensors).
      c = c.to(c10::Device(c10::DeviceType::PrivateUse1, call_.device));
    }
    if (c.device().is_cpu()) {
      if (flags_ & TFL_KERNEL_HOST_SCALARS) {
        return c; // passed as given, never broadcast: the kernel reads the exact value
      }
      const bool retype = call_.dtype != c10::ScalarType::Undefined &&
          c.scalar_type() != call_.dtype &&
          (c.unsafeGetTensorImpl()->is_wrapped_number() || (flags_ & TFL_KERNEL_PROMOTE_INPUTS));
      c = upload_scalar(c, retype ? call_.dtype : c.scalar_type(), call_.device);
    } else if ((flags_ & TFL_KERNEL_PROMOTE_INPUTS) && call_.dtype != c10::ScalarType::Undefined &&
               c.scalar_type() != call_.dtype) {
      c = c.to(call_.dtype);
    }
    const bool reshape = (flags_ & TFL_KERNEL_BROADCAST_INPUTS) && !out_shape_.empty() &&
        c.sizes() != out_shape_;
    if (flags_ & TFL_KERNEL_CONTIGUOUS_INPUTS) {
      if (reshape) {
        c = c.expand(out_shape_);
      }
      if (!c.is_contiguous()) {
        c = c.contiguous();
      }
    } else if (reshape) {
      *broadcast = 1;
    }
    return c;
  }

  // A tensor the kernel reads and writes through its input descriptor.
  at::Tensor read_write(const at::Tensor& t, const char* what) {
    TORCH_CHECK(
        t.device().type() == c10::DeviceType::PrivateUse1,
        rules_.sig->name, ": ", what, " is written by the operator and must be on the device, got ",
        t.device());
    const c10::ScalarType dtype =
        (flags_ & TFL_KERNEL_PROMOTE_INPUTS) && call_.dtype != c10::ScalarType::Undefined
        ? call_.dtype
        : t.scalar_type();
    const bool dense = flags_ & (TFL_KERNEL_CONTIGUOUS_INPUTS | TFL_KERNEL_CONTIGUOUS_OUTPUTS);
    if (t.scalar_type() == dtype && (!dense || t.is_contiguous())) {
      return t;
    }
    return temporary_for(t, dtype, /*copy_in=*/true);
  }

  void add_input(const at::Tensor& t, size_t arg, bool defer) {
    uint8_t broadcast = 0;
    if (!t.defined() || defer) {
      ops_.inputs.push_back(t);
    } else if ((*rules_.read_write)[arg]) {
      ops_.inputs.push_back(read_write(t, "a mutated argument"));
    } else {
      ops_.inputs.push_back(read_only(t, &broadcast));
    }
    ops_.broadcast.push_back(broadcast);
  }

  // A fresh output: the metadata's layout, unless the plugin chose the
  // layout of its fresh outputs (preferred_memory_format). A kernel flagged
  // CONTIGUOUS_OUTPUTS writes a dense one: where the metadata lays the output
  // out otherwise (an elementwise op on a channels-last input), the kernel
  // writes a dense temporary and the caller gets the metadata's layout, as
  // from PyTorch's own kernel and as torch.compile traced it.
  at::Tensor allocate(const OutSpec& spec) const {
    if (!spec.defined) {
      return at::Tensor();
    }
    if (rules_.memory_format == TFL_MEMORY_FORMAT_CONTIGUOUS) {
      return empty_device(spec.sizes, spec.dtype, call_.device);
    }
    if (flags_ & TFL_KERNEL_CONTIGUOUS_OUTPUTS) {
      // Row-major but for size-1 dims (whose strides are never used), or empty.
      if (at::geometry_is_contiguous(spec.sizes, spec.strides)) {
        return as_specified(spec);
      }
      at::Tensor target = as_specified(spec);
      at::Tensor temp = empty_device(spec.sizes, spec.dtype, call_.device);
      ops_.copy_back.emplace_back(target, temp);
      ops_.laid_out.emplace_back(ops_.outputs.size(), std::move(target));
      return temp;
    }
    if (rules_.memory_format == TFL_MEMORY_FORMAT_CHANNELS_LAST && spec.sizes.size() == 4) {
      return empty_device(spec.sizes, spec.dtype, call_.device, c10::MemoryFormat::ChannelsLast);
    }
    return as_specified(spec);
  }

  at::Tensor as_specified(const OutSpec& spec) const {
    if (spec.nbytes != OutSpec::kUnknownBytes) {
      return empty_device_sized(spec.sizes, spec.strides, spec.nbytes, spec.dtype, call_.device);
    }
    return empty_device(spec.sizes, spec.strides, spec.dtype, call_.device);
  }

  // A derived in-place call: `self` is read as inputs[0] and written as outputs[0].
  void in_place_self(const at::Tensor& self, const OutSpec& spec) {
    const std::string& op = rules_.sig->name;
    TORCH_CHECK(
        self.sizes() == c10::IntArrayRef(spec.sizes), op, ": output with shape ", self.sizes(),
        " doesn't match the broadcast shape ", c10::IntArrayRef(spec.sizes));
    const c10::ScalarType result = spec.dtype;
    TORCH_CHECK(
        self.scalar_type() == result || c10::canCast(result, self.scalar_type()), op,
        ": result type ", result, " can't be cast to the desired output type ",
        self.scalar_type());
    written(self);
    ops_.targets.push_back(self);
    const c10::ScalarType input_dtype =
        (flags_ & TFL_KERNEL_PROMOTE_INPUTS) && call_.dtype != c10::ScalarType::Undefined
        ? call_.dtype
        : self.scalar_type();
    if (input_dtype == result) {
      const bool dense = flags_ & (TFL_KERNEL_CONTIGUOUS_INPUTS | TFL_KERNEL_CONTIGUOUS_OUTPUTS);
      const bool direct = self.scalar_type() == result && (!dense || self.is_contiguous()) &&
          !overlaps_inputs(self, 0);
      at::Tensor buffer = direct ? self : temporary_for(self, result, /*copy_in=*/true);
      ops_.inputs[0] = buffer;
      ops_.outputs.push_back(buffer);
      return;
    }
    // Not one buffer: the functional kernel's out= form into a temporary.
    uint8_t broadcast = 0;
    ops_.inputs[0] = read_only(self, &broadcast);
    ops_.outputs.push_back(temporary_for(self, result, /*copy_in=*/false));
    ops_.variant = TFL_VARIANT_OUT;
  }

  // An out= tensor (or a return of a non-derived in-place kernel).
  void out_target(const at::Tensor& target, const OutSpec* spec, bool resize) {
    const std::string& op = rules_.sig->name;
    if (spec != nullptr && resize) {
      at::native::resize_output(target, spec->sizes);
    }
    written(target);
    const c10::ScalarType dtype = spec != nullptr ? spec->dtype : target.scalar_type();
    TORCH_CHECK(
        target.scalar_type() == dtype || c10::canCast(dtype, target.scalar_type()), op,
        ": result type ", dtype, " can't be cast to the desired output type ",
        target.scalar_type());
    ops_.targets.push_back(target);
    const bool direct = target.scalar_type() == dtype &&
        (!(flags_ & TFL_KERNEL_CONTIGUOUS_OUTPUTS) || target.is_contiguous()) &&
        !overlaps_inputs(target, kNoSlot);
    ops_.outputs.push_back(direct ? target : temporary_for(target, dtype, /*copy_in=*/false));
  }

 private:
  // Checks a tensor the operator writes, as PyTorch does for its own kernels.
  void written(const at::Tensor& t) const {
    if (t.device().type() != c10::DeviceType::PrivateUse1) {
      device_mismatch(c10::Device(c10::DeviceType::PrivateUse1, call_.device), t.device(),
                      rules_.sig->name);
    }
    at::assert_no_internal_overlap(t);
  }

  bool overlaps_inputs(const at::Tensor& t, size_t skip) const {
    for (size_t k = 0; k < ops_.inputs.size(); ++k) {
      const at::Tensor& in = ops_.inputs[k];
      if (k != skip && in.defined() && in.device().type() == c10::DeviceType::PrivateUse1 &&
          shares_memory(t, in)) {
        return true;
      }
    }
    return false;
  }

  at::Tensor temporary_for(const at::Tensor& t, c10::ScalarType dtype, bool copy_in) {
    at::Tensor temp = empty_device(t.sizes(), dtype, call_.device);
    if (copy_in) {
      temp.copy_(t);
    }
    ops_.copy_back.emplace_back(t, temp);
    return temp;
  }

  const OperandRules& rules_;
  const uint32_t flags_;
  const CallShape& call_;
  Operands& ops_;
  c10::IntArrayRef out_shape_;
};

// Each tensor input argument of a call (out= tensors excluded), list
// elements flattened, an absent optional as an undefined tensor.
template <typename Fn>
void for_each_input(const Signature& sig, c10::ArrayRef<c10::IValue> args, Fn&& fn) {
  for (size_t i = 0; i < args.size(); ++i) {
    const ArgInfo& info = sig.args[i];
    const c10::IValue& v = args[i];
    if (info.out) {
      continue;
    }
    switch (info.kind) {
      case ArgKind::Tensor:
        fn(v.isNone() ? at::Tensor() : v.toTensor(), i);
        break;
      case ArgKind::TensorList:
        if (!v.isNone()) {
          for (const at::Tensor& t : v.toTensorList()) {
            fn(t, i);
          }
        }
        break;
      case ArgKind::OptionalTensorList:
        if (!v.isNone()) {
          for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
            fn(t.has_value() ? *t : at::Tensor(), i);
          }
        }
        break;
      default:
        break;
    }
  }
}

// Whether the operands the rules built are the call's own inputs, untouched.
bool inputs_as_given(const Signature& sig, c10::ArrayRef<c10::IValue> args, const Operands& ops) {
  if (!ops.copy_back.empty() || ops.variant != sig.variant) {
    return false;
  }
  size_t k = 0;
  bool same = true;
  for_each_input(sig, args, [&](const at::Tensor& t, size_t /*arg*/) {
    same = same && k < ops.inputs.size() && ops.broadcast[k] == 0 &&
        ops.inputs[k].unsafeGetTensorImpl() == t.unsafeGetTensorImpl();
    ++k;
  });
  return same && k == ops.inputs.size();
}

} // namespace

void prepare_operands(
    const OperandRules& rules,
    c10::ArrayRef<c10::IValue> args,
    const MetaEntry& meta,
    const CallShape& call,
    Operands& ops) {
  const Signature& sig = *rules.sig;
  ops.variant = sig.variant;
  Builder b(rules, call, meta, ops);
  ops.inputs.reserve(call.num_tensors);
  ops.broadcast.reserve(call.num_tensors);
  // A functional call's operands depend only on what the metadata key holds
  // (dtypes, sizes, strides, devices): once its first call showed that every
  // input goes to the kernel as given, the calls of that key skip the rules.
  const bool functional = sig.variant == TFL_VARIANT_FUNCTIONAL;
  if (functional && meta.inputs_as_given.value.load(std::memory_order_relaxed) == 1) {
    for_each_input(sig, args, [&](const at::Tensor& t, size_t /*arg*/) {
      ops.inputs.push_back(t);
      ops.broadcast.push_back(0);
    });
    for (const OutSpec& spec : meta.outs) {
      ops.outputs.push_back(b.allocate(spec));
    }
    return;
  }
  // A derived in-place self is decided with the outputs (it is one of them).
  // In-place overloads that return nothing (_foreach_add_) write their
  // self list through the input descriptors instead.
  const bool defer_self =
      rules.derived && sig.variant == TFL_VARIANT_INPLACE && sig.num_returns > 0;
  for_each_input(sig, args, [&](const at::Tensor& t, size_t i) {
    b.add_input(t, i, defer_self && i == 0 && sig.args[i].kind == ArgKind::Tensor);
  });

  switch (sig.variant) {
    case TFL_VARIANT_FUNCTIONAL:
      for (const OutSpec& spec : meta.outs) {
        ops.outputs.push_back(b.allocate(spec));
      }
      break;
    case TFL_VARIANT_INPLACE:
      if (defer_self) {
        TORCH_INTERNAL_ASSERT(!meta.outs.empty(), sig.name, ": no metadata for the in-place result");
        b.in_place_self(args[0].toTensor(), meta.outs[0]);
        break;
      }
      // The kernel's own in-place schema: each return is a read-write
      // argument, written through the same buffer the kernel reads.
      for (size_t r = 0; r < sig.return_args.size(); ++r) {
        const size_t arg = static_cast<size_t>(sig.return_args[r]);
        ops.targets.push_back(args[arg].toTensor());
        ops.outputs.push_back(sig.args[arg].out ? args[arg].toTensor()
                                                : ops.inputs[input_slot(sig, args, arg)]);
      }
      break;
    case TFL_VARIANT_OUT: {
      size_t r = 0;
      for (size_t i = 0; i < args.size(); ++i) {
        if (sig.args[i].out) {
          const OutSpec* spec = r < meta.outs.size() ? &meta.outs[r] : nullptr;
          b.out_target(args[i].toTensor(), spec, /*resize=*/true);
          ++r;
        }
      }
      break;
    }
    default:
      break;
  }
  if (functional && meta.inputs_as_given.value.load(std::memory_order_relaxed) < 0) {
    meta.inputs_as_given.value.store(inputs_as_given(sig, args, ops) ? 1 : 0, std::memory_order_relaxed);
  }
}

void write_back(Operands& ops) {
  for (auto& [target, temp] : ops.copy_back) {
    target.copy_(temp);
  }
  for (auto& [index, target] : ops.laid_out) {
    ops.outputs[index] = std::move(target);
  }
}

} // namespace torch_fl::bridge
