#include "meta.h"

#include "op_rules.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <c10/util/strides.h>

#include <algorithm>
#include <atomic>

namespace torch_fl::bridge {

namespace {

constexpr size_t kMaxCacheEntries = 4096;
std::atomic<bool> g_enabled{true};

at::Tensor meta_tensor(const at::Tensor& t) {
  // 0-dim CPU operands stay on the CPU: meta functions accept them as CUDA's do.
  if (!t.defined() || (t.device().is_cpu() && t.dim() == 0)) {
    return t;
  }
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::DeviceType::Meta));
}

c10::IValue to_meta(const c10::IValue& v) {
  if (v.isTensor()) {
    return meta_tensor(v.toTensor());
  }
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList()) {
      out.push_back(meta_tensor(t));
    }
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> out;
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
      out.push_back(t.has_value() ? std::optional<at::Tensor>(meta_tensor(*t)) : std::nullopt);
    }
    return out;
  }
  if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) {
    return c10::Device(c10::DeviceType::Meta);
  }
  return v;
}

OutSpec spec_of(const at::Tensor& t) {
  if (!t.defined()) {
    return {c10::ScalarType::Undefined, {}, {}, false};
  }
  return {t.scalar_type(), c10::DimVector(t.sizes()), c10::DimVector(t.strides())};
}

// An in-place op whose one tensor is the self it writes and returns (normal_,
// uniform_, fill_.Scalar, ...) keeps self's metadata: asking PyTorch would run
// a Python meta function (normal_'s imports torch._dynamo on first use, ~2 s).
bool writes_only_self(const Signature& sig, c10::ArrayRef<c10::IValue> args) {
  if (sig.num_returns != 1 || sig.return_args.empty() || sig.return_args[0] != 0 ||
      args.empty() || !args[0].isTensor()) {
    return false;
  }
  for (size_t i = 1; i < args.size(); ++i) {
    if ((args[i].isTensor() && args[i].toTensor().defined()) || args[i].isTensorList() ||
        args[i].isOptionalTensorList()) {
      return false;
    }
  }
  return true;
}

} // namespace

size_t MetaKeyHash::operator()(const MetaKey& key) const {
  // Two independent multiply chains over alternate words (each word costs
  // a dependent multiply; a key has tens of words), mixed at the end so
  // that high input bits reach the low bits the bucket index uses.
  const int64_t* w = key.words.data();
  const size_t n = key.words.size();
  uint64_t a = 1469598103934665603ull;
  uint64_t b = 0x9e3779b97f4a7c15ull;
  size_t i = 0;
  for (; i + 1 < n; i += 2) {
    a = (a ^ static_cast<uint64_t>(w[i])) * 1099511628211ull;
    b = (b ^ static_cast<uint64_t>(w[i + 1])) * 0xff51afd7ed558ccdull;
  }
  if (i < n) {
    a = (a ^ static_cast<uint64_t>(w[i])) * 1099511628211ull;
  }
  uint64_t h = a ^ (b + 0x632be59bd9b4e019ull + (a << 6)) ^ n;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 29;
  return static_cast<size_t>(h);
}

std::shared_ptr<const MetaEntry> MetaCache::find(const MetaKey& key) const {
  std::shared_lock<std::shared_mutex> lock(mutex_);
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : it->second;
}

void MetaCache::insert(const MetaKey& key, std::shared_ptr<const MetaEntry> entry) {
  std::unique_lock<std::shared_mutex> lock(mutex_);
  if (entries_.size() >= kMaxCacheEntries) {
    entries_.clear();
  }
  entries_.emplace(key, std::move(entry));
}

void set_meta_cache_enabled(bool enabled) {
  g_enabled.store(enabled);
}

bool meta_cache_enabled() {
  return g_enabled.load(std::memory_order_relaxed);
}

void set_nbytes(std::vector<OutSpec>& specs) {
  for (OutSpec& spec : specs) {
    // ComplexHalf stays unsized: creating one warns that it is experimental,
    // which the generic path does.
    if (!spec.defined || spec.dtype == c10::ScalarType::Undefined ||
        spec.dtype == c10::ScalarType::ComplexHalf || spec.sizes.size() != spec.strides.size() ||
        std::any_of(spec.sizes.begin(), spec.sizes.end(), [](int64_t s) { return s < 0; })) {
      continue;
    }
    spec.nbytes = at::detail::computeStorageNbytes(spec.sizes, spec.strides, c10::elementSize(spec.dtype));
  }
}

std::vector<OutSpec> specs_of(const torch::jit::Stack& results) {
  std::vector<OutSpec> out;
  for (const c10::IValue& r : results) {
    if (r.isTensor()) {
      out.push_back(spec_of(r.toTensor()));
    } else if (r.isNone()) {
      out.push_back(spec_of(at::Tensor())); // a Python meta function's undefined tensor
    } else if (r.isTensorList()) {
      for (const at::Tensor& t : r.toTensorList()) {
        out.push_back(spec_of(t));
      }
    }
  }
  return out;
}

MetaEntry compute_meta(const MetaSource& src, const c10::OperatorHandle& op,
                       c10::ArrayRef<c10::IValue> args) {
  const Signature& sig = *src.sig;
  MetaEntry entry;
  // The shortcuts describe tensors only; int returns need the meta function.
  if (sig.num_int_returns == 0) {
    if (!src.output_like.empty()) {
      for (int32_t idx : src.output_like) {
        TORCH_CHECK(
            idx >= 0 && static_cast<size_t>(idx) < args.size() && args[idx].isTensor(),
            sig.name, ": output_like index ", idx, " does not name a tensor argument");
        const at::Tensor& like = args[idx].toTensor();
        entry.outs.push_back({like.scalar_type(), c10::DimVector(like.sizes()),
                              c10::contiguous_strides(like.sizes())});
      }
      return entry;
    }
    if (std::optional<std::vector<OutSpec>> ruled = rule_output_metadata(sig.name, args)) {
      entry.outs = std::move(*ruled);
      return entry;
    }
    if (!src.functional.has_value() && writes_only_self(sig, args)) {
      entry.outs.push_back(spec_of(args[0].toTensor()));
      return entry;
    }
  }
  const c10::OperatorHandle& meta_op = src.functional.has_value() ? *src.functional : op;
  torch::jit::Stack stack;
  stack.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    if (src.functional.has_value() && sig.args[i].out) {
      continue;
    }
    stack.push_back(to_meta(args[i]));
  }
  // Meta functions can fail for calls the kernel could serve (some of
  // PyTorch's Python meta functions have bugs, e.g. a missing optional
  // bias); any failure sends the call down the fallback chain.
  try {
    if (src.cpp_meta != nullptr) {
      src.cpp_meta->callBoxed(meta_op, c10::DispatchKeySet(c10::DispatchKey::Meta), &stack);
    } else {
      meta_op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &stack);
    }
  } catch (const c10::Error& e) {
    entry.unavailable = true;
    entry.reason = std::string("its output metadata could not be computed (") +
        e.what_without_backtrace() + ")";
    return entry;
  } catch (const std::exception& e) {
    entry.unavailable = true;
    entry.reason = std::string("its meta function failed (") + e.what() + ")";
    return entry;
  }
  entry.outs = specs_of(stack);
  adjust_output_metadata(sig.name, args, entry.outs);
  if (sig.num_int_returns > 0) {
    for (const c10::IValue& r : stack) {
      std::optional<int64_t> value;
      if (r.isInt()) {
        value = r.toInt();
      } else if (r.isSymInt()) {
        value = r.toSymInt().maybe_as_int();
      } else {
        continue;
      }
      if (!value.has_value()) {
        entry.unavailable = true;
        entry.reason = "its meta function returned a symbolic int";
        return entry;
      }
      entry.ints.push_back(*value);
    }
    if (entry.ints.size() != sig.num_int_returns) {
      entry.unavailable = true;
      entry.reason = "its meta function did not return the schema's ints";
    }
  }
  return entry;
}

} // namespace torch_fl::bridge
