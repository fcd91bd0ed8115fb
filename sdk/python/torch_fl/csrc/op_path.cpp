#include "op_path.h"

#include "copy.h"
#include "device_tensor.h"
#include "fallback.h"
#include "generator.h"
#include "host_allocator.h"
#include "kernel_abi.h"
#include "minimal_ops.h"
#include "op_stats.h"
#include "streams.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TypeProperties.h>
#include <c10/util/SmallVector.h>

#include <array>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

namespace torch_fl::bridge {

namespace {

// ---------------------------------------------------------------------------
// Schema analysis, done once per registered operator
// ---------------------------------------------------------------------------

enum class ArgKind : uint8_t {
  Tensor,
  TensorList,
  OptionalTensorList,
  Int,
  Float,
  Bool,
  Scalar,
  IntList,
  FloatList,
  BoolList,
  ScalarList,
  ScalarType,
  Layout,
  Device,
  MemoryFormat,
  String,
  Generator,
  Unsupported,
};

struct ArgInfo {
  ArgKind kind = ArgKind::Unsupported;
  bool out = false;   // an out= argument
  bool write = false; // mutated in place
};

struct Signature {
  std::string name; // "aten::add.Tensor"
  std::vector<ArgInfo> args;
  size_t num_returns = 0;
  std::vector<int> return_args; // in-place/out: the argument each return aliases
  bool returns_list = false; // a single Tensor[] return
  int32_t variant = TFL_VARIANT_FUNCTIONAL;
  bool has_tensor_input = false;
  int generator_arg = -1;
  int device_arg = -1;
  std::string unsupported; // why the schema cannot be served, if it cannot
};

ArgKind classify(const c10::Argument& arg) {
  c10::TypePtr type = arg.real_type();
  if (auto opt = type->cast<c10::OptionalType>()) {
    type = opt->getElementType();
  }
  switch (type->kind()) {
    case c10::TypeKind::TensorType:
      return ArgKind::Tensor;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
      return ArgKind::Int;
    case c10::TypeKind::FloatType:
    case c10::TypeKind::SymFloatType:
      return ArgKind::Float;
    case c10::TypeKind::BoolType:
    case c10::TypeKind::SymBoolType:
      return ArgKind::Bool;
    case c10::TypeKind::NumberType:
      return ArgKind::Scalar;
    case c10::TypeKind::ScalarTypeType:
      return ArgKind::ScalarType;
    case c10::TypeKind::LayoutType:
      return ArgKind::Layout;
    case c10::TypeKind::DeviceObjType:
      return ArgKind::Device;
    case c10::TypeKind::MemoryFormatType:
      return ArgKind::MemoryFormat;
    case c10::TypeKind::StringType:
      return ArgKind::String;
    case c10::TypeKind::GeneratorType:
      return ArgKind::Generator;
    case c10::TypeKind::ListType: {
      c10::TypePtr elem = type->castRaw<c10::ListType>()->getElementType();
      switch (elem->kind()) {
        case c10::TypeKind::TensorType:
          return ArgKind::TensorList;
        case c10::TypeKind::OptionalType:
          if (elem->castRaw<c10::OptionalType>()->getElementType()->kind() ==
              c10::TypeKind::TensorType) {
            return ArgKind::OptionalTensorList;
          }
          return ArgKind::Unsupported;
        case c10::TypeKind::IntType:
        case c10::TypeKind::SymIntType:
          return ArgKind::IntList;
        case c10::TypeKind::FloatType:
          return ArgKind::FloatList;
        case c10::TypeKind::BoolType:
          return ArgKind::BoolList;
        case c10::TypeKind::NumberType:
          return ArgKind::ScalarList;
        default:
          return ArgKind::Unsupported;
      }
    }
    default:
      return ArgKind::Unsupported;
  }
}

bool is_tensor_type(const c10::TypePtr& type) {
  return type->kind() == c10::TypeKind::TensorType;
}

bool is_tensor_list_type(const c10::TypePtr& type) {
  auto list = type->cast<c10::ListType>();
  return list && is_tensor_type(list->getElementType());
}

Signature analyze(const c10::FunctionSchema& schema) {
  Signature sig;
  sig.name = c10::toString(schema.operator_name());
  bool has_out = false;
  bool mutates = false;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const c10::Argument& arg = schema.arguments()[i];
    ArgInfo info;
    info.kind = classify(arg);
    info.out = arg.is_out();
    info.write = arg.alias_info() != nullptr && arg.alias_info()->isWrite();
    has_out = has_out || info.out;
    mutates = mutates || info.write;
    if (info.kind == ArgKind::Unsupported && sig.unsupported.empty()) {
      sig.unsupported = "argument '" + arg.name() + "' has type " +
          arg.type()->str() + ", which the kernel ABI cannot pass";
    }
    if (!info.out && (info.kind == ArgKind::Tensor || info.kind == ArgKind::TensorList ||
                      info.kind == ArgKind::OptionalTensorList)) {
      sig.has_tensor_input = true;
    }
    if (info.kind == ArgKind::Generator) {
      sig.generator_arg = static_cast<int>(i);
    }
    if (info.kind == ArgKind::Device) {
      sig.device_arg = static_cast<int>(i);
    }
    sig.args.push_back(info);
  }
  const auto& returns = schema.returns();
  sig.num_returns = returns.size();
  for (const c10::Argument& ret : returns) {
    if (!is_tensor_type(ret.type()) && !is_tensor_list_type(ret.type())) {
      if (sig.unsupported.empty()) {
        sig.unsupported = "it returns " + ret.type()->str() +
            "; kernels can only produce tensors";
      }
    }
    if (ret.alias_info() != nullptr && !ret.alias_info()->isWrite() &&
        sig.unsupported.empty()) {
      sig.unsupported = "it returns a view of an input; views are made by the bridge";
    }
  }
  sig.returns_list = returns.size() == 1 && is_tensor_list_type(returns[0].type());
  if (sig.returns_list && has_out) {
    sig.unsupported = "out= overloads returning Tensor[] are not supported";
  }
  // A return that aliases a mutated argument hands that argument back.
  bool returns_alias = false;
  for (const c10::Argument& ret : returns) {
    const c10::AliasInfo* alias = ret.alias_info();
    if (alias == nullptr || !alias->isWrite()) {
      sig.return_args.push_back(-1);
      continue;
    }
    returns_alias = true;
    int found = -1;
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      const c10::AliasInfo* a = schema.arguments()[i].alias_info();
      if (a != nullptr && a->isWrite() && a->beforeSets() == alias->beforeSets()) {
        found = static_cast<int>(i);
        break;
      }
    }
    sig.return_args.push_back(found);
    if (found < 0 && sig.unsupported.empty()) {
      sig.unsupported = "a return aliases no argument";
    }
  }
  if (has_out) {
    sig.variant = TFL_VARIANT_OUT;
  } else if (returns_alias || (returns.empty() && mutates)) {
    sig.variant = TFL_VARIANT_INPLACE;
  } else if (returns_alias != (sig.num_returns > 0 && sig.return_args[0] >= 0)) {
    sig.unsupported = "it mixes fresh and aliased returns";
  }
  return sig;
}

bool same_arguments(
    const c10::FunctionSchema& a,
    const c10::FunctionSchema& b,
    bool skip_out_in_b) {
  std::vector<const c10::Argument*> bargs;
  for (const auto& arg : b.arguments()) {
    if (!(skip_out_in_b && arg.is_out())) {
      bargs.push_back(&arg);
    }
  }
  if (a.arguments().size() != bargs.size()) {
    return false;
  }
  for (size_t i = 0; i < bargs.size(); ++i) {
    const c10::Argument& x = a.arguments()[i];
    const c10::Argument& y = *bargs[i];
    if (x.name() != y.name() || x.type()->str() != y.type()->str()) {
      return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------
// The meta cache
// ---------------------------------------------------------------------------

struct OutSpec {
  c10::ScalarType dtype;
  c10::DimVector sizes;
  c10::DimVector strides;
  bool defined = true; // false: the caller did not ask for it (output_mask)
};

struct MetaEntry {
  std::vector<OutSpec> outs;
  bool unavailable = false;
  std::string reason;
};

struct Key {
  c10::SmallVector<int64_t, 48> words;
  bool operator==(const Key& other) const {
    return words.size() == other.words.size() &&
        std::memcmp(words.data(), other.words.data(), words.size() * sizeof(int64_t)) == 0;
  }
};

struct KeyHash {
  size_t operator()(const Key& key) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t w : key.words) {
      h ^= static_cast<uint64_t>(w);
      h *= 1099511628211ull;
      h ^= h >> 29;
    }
    return static_cast<size_t>(h);
  }
};

constexpr size_t kMaxCacheEntries = 4096;
std::atomic<bool> g_meta_cache_enabled{true};

int64_t double_bits(double d) {
  int64_t bits;
  std::memcpy(&bits, &d, sizeof(bits));
  return bits;
}

// ---------------------------------------------------------------------------
// Per-call scratch space. Sized in a first pass so pointers stay valid.
// ---------------------------------------------------------------------------

struct CallScratch {
  c10::SmallVector<at::Tensor, 8> tensors;        // canonical inputs, kept alive
  c10::SmallVector<TFL_Tensor, 8> descs;
  c10::SmallVector<const TFL_Tensor*, 8> desc_ptrs;
  c10::SmallVector<int64_t, 32> ints;              // int lists and broadcast shapes
  c10::SmallVector<double, 4> doubles;
  c10::SmallVector<uint8_t, 8> bools;
  c10::SmallVector<TFL_Value, 8> values;
  c10::SmallVector<std::string, 1> strings;
};

TFL_Value value_of(int32_t tag) {
  TFL_Value v;
  std::memset(&v, 0, sizeof(v));
  v.tag = tag;
  return v;
}

int32_t memory_format_value(c10::MemoryFormat fmt) {
  switch (fmt) {
    case c10::MemoryFormat::Contiguous:
      return TFL_MEMORY_FORMAT_CONTIGUOUS;
    case c10::MemoryFormat::ChannelsLast:
      return TFL_MEMORY_FORMAT_CHANNELS_LAST;
    default:
      return TFL_MEMORY_FORMAT_ANY;
  }
}

// The bytes of a 0-dim CPU tensor's value converted to `dtype` (16 bytes
// hold every dtype, complex128 included).
std::array<uint8_t, 16> scalar_bytes(const at::Tensor& cpu, c10::ScalarType dtype) {
  c10::Scalar value;
  AT_DISPATCH_ALL_TYPES_AND_COMPLEX_AND3(
      at::kHalf, at::kBFloat16, at::kBool, cpu.scalar_type(), "scalar_bytes", [&] {
        value = c10::Scalar(*static_cast<const scalar_t*>(cpu.const_data_ptr()));
      });
  std::array<uint8_t, 16> bytes{};
  AT_DISPATCH_ALL_TYPES_AND_COMPLEX_AND3(
      at::kHalf, at::kBFloat16, at::kBool, dtype, "scalar_bytes", [&] {
        const scalar_t converted = value.to<scalar_t>();
        std::memcpy(bytes.data(), &converted, sizeof(scalar_t));
      });
  return bytes;
}

// Device copies of scalar operands (Python numbers in `x * 0.5`), cached by
// value per device and stream: repeated constants cost no copy, and a cached
// tensor is only reused on the stream its upload was queued on.
struct ScalarKey {
  int64_t stream;
  int32_t device;
  int32_t dtype;
  std::array<uint8_t, 16> bytes;
  bool operator==(const ScalarKey& o) const {
    return stream == o.stream && device == o.device && dtype == o.dtype && bytes == o.bytes;
  }
};

struct ScalarKeyHash {
  size_t operator()(const ScalarKey& k) const {
    uint64_t h = static_cast<uint64_t>(k.stream) * 1000003u ^
        static_cast<uint64_t>(k.device) * 10007u ^ static_cast<uint64_t>(k.dtype);
    for (uint8_t b : k.bytes) {
      h = (h ^ b) * 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

constexpr size_t kMaxCachedScalars = 512;

at::Tensor upload_scalar(const at::Tensor& cpu, c10::ScalarType dtype, c10::DeviceIndex device) {
  static std::mutex mutex;
  static auto* cache = new std::unordered_map<ScalarKey, at::Tensor, ScalarKeyHash>();
  const c10::Stream stream = StreamRegistry::get().current(device);
  const ScalarKey key{stream.id(), device, static_cast<int32_t>(dtype), scalar_bytes(cpu, dtype)};
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache->find(key);
    if (it != cache->end()) {
      return it->second;
    }
  }
  // A pinned buffer makes the copy asynchronous; the host allocator keeps it
  // until the copy has run.
  const size_t size = c10::elementSize(dtype);
  c10::DataPtr pinned = HostAllocator::get().allocate(size);
  std::memcpy(pinned.get(), key.bytes.data(), size);
  at::Tensor out = empty_device({}, {}, dtype, device);
  plugin_memcpy(
      TFL_COPY_HOST_TO_DEVICE, out.data_ptr(), device, pinned.get(), -1, size,
      StreamRegistry::get().native(stream), false);
  HostAllocator::get().record_use(pinned.get(), stream);
  std::lock_guard<std::mutex> lock(mutex);
  if (cache->size() >= kMaxCachedScalars) {
    cache->clear(); // freed blocks return to their stream's pool: stream-ordered
  }
  cache->emplace(key, out);
  return out;
}

[[noreturn]] void device_mismatch(const c10::Device& a, const c10::Device& b, const std::string& op) {
  TORCH_CHECK(
      false,
      "Expected all tensors to be on the same device, but found at least two devices, ",
      a, " and ", b, "! (when running ", op,
      "; only 0-dim CPU tensors may be mixed with device tensors)");
}

// ---------------------------------------------------------------------------
// The kernel
// ---------------------------------------------------------------------------

struct KernelSpec {
  std::string op;
  TFL_KernelFn fn = nullptr;
  void* user_data = nullptr;
  uint64_t dtypes = 0;
  uint32_t flags = 0;
  int32_t memory_format = TFL_MEMORY_FORMAT_ANY;
};

int64_t scalar_kind(const c10::IValue& v) {
  if (v.isDouble()) {
    return 1;
  }
  if (v.isInt()) {
    return 2;
  }
  if (v.isBool()) {
    return 3;
  }
  if (v.isComplexDouble()) {
    return 4;
  }
  return v.isSymInt() ? 5 : 6;
}

int64_t int_of(const c10::IValue& v) {
  return v.isSymInt() ? v.toSymInt().guard_int(__FILE__, __LINE__) : v.toInt();
}

double double_of(const c10::IValue& v) {
  return v.isSymFloat() ? v.toSymFloat().guard_float(__FILE__, __LINE__) : v.toDouble();
}

// What one call needs between its phases. Local to the call, so a kernel may
// be re-entered (a canonicalizing copy can dispatch to another kernel).
struct CallState {
  c10::DeviceIndex device = -1;
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  size_t num_tensors = 0;
  size_t num_ints = 0;
  size_t num_doubles = 0;
  size_t num_bools = 0;
  size_t num_strings = 0;
  size_t max_dims = 0;
  c10::SmallVector<at::Tensor, 4> outputs;   // what the kernel writes
  c10::SmallVector<at::Tensor, 4> targets;   // what the caller gets back (in-place/out=)
  c10::SmallVector<std::pair<at::Tensor, at::Tensor>, 2> copy_back; // (target, temporary)
};

class NativeKernel final : public c10::OperatorKernel {
 public:
  NativeKernel(KernelSpec spec, Signature sig, std::optional<c10::OperatorHandle> functional)
      : spec_(std::move(spec)),
        sig_(std::move(sig)),
        functional_(std::move(functional)),
        counters_(sig_.name) {}

  // Custom ops have no meta function: output i is shaped like the tensor
  // argument at schema position output_like[i].
  void set_output_like(std::vector<int32_t> like) {
    output_like_ = std::move(like);
  }

  void operator()(
      const c10::OperatorHandle& op,
      c10::DispatchKeySet ks,
      torch::jit::Stack* stack) {
    const uint64_t start = now_ns();
    const size_t nargs = sig_.args.size();
    auto args = torch::jit::last(*stack, nargs);

    CallState call;
    Key key;
    scan(args, call, key);
    // An op that returns nothing has no output metadata to compute (and some,
    // like _fused_sgd_, have no meta function at all).
    static const auto no_outputs = std::make_shared<const MetaEntry>();
    std::shared_ptr<const MetaEntry> entry =
        sig_.num_returns == 0 ? no_outputs : lookup(op, args, key);
    if (call.dtype == c10::ScalarType::Undefined && !entry->outs.empty()) {
      call.dtype = entry->outs[0].dtype;
    }
    if (entry->unavailable) {
      run_fallback(op, ks, stack, entry->reason.c_str());
      return;
    }
    if (call.dtype != c10::ScalarType::Undefined && (spec_.dtypes & dtype_bit(call.dtype)) == 0) {
      run_fallback(op, ks, stack, "the kernel does not take this dtype");
      return;
    }
    if (call.max_dims > TFL_MAX_DIMS) {
      run_fallback(op, ks, stack, "a tensor has more than TFL_MAX_DIMS dimensions");
      return;
    }
    OpCounter& counter = counters_.get(call.dtype);
    std::string declined;
    try {
      prepare_outputs(args, *entry, call);
      if (!launch(args, call, &declined)) {
        const std::string reason = "the kernel declined this call: " + declined;
        run_fallback(op, ks, stack, reason.c_str());
        return;
      }
      for (auto& [target, temp] : call.copy_back) {
        target.copy_(temp);
      }
    } catch (...) {
      counter.add(Path::Failed, now_ns() - start);
      throw;
    }
    push_results(stack, nargs, call);
    counter.add(Path::Native, now_ns() - start);
  }

 private:
  // Pass 1: devices, the common dtype, the cache key and scratch sizes.
  void scan(c10::ArrayRef<c10::IValue> args, CallState& call, Key& key) const {
    at::native::ResultTypeState promote{};
    for (size_t i = 0; i < args.size(); ++i) {
      const ArgInfo& info = sig_.args[i];
      const c10::IValue& v = args[i];
      if (v.isNone()) {
        key.words.push_back(-1);
        continue;
      }
      switch (info.kind) {
        case ArgKind::Tensor:
          scan_tensor(v.toTensor(), info, key, call, promote);
          ++call.num_tensors;
          break;
        case ArgKind::TensorList: {
          const auto list = v.toTensorList();
          key.words.push_back(static_cast<int64_t>(list.size()));
          for (const at::Tensor& t : list) {
            scan_tensor(t, info, key, call, promote);
          }
          call.num_tensors += list.size();
          break;
        }
        case ArgKind::OptionalTensorList: {
          const auto list = v.toOptionalTensorList();
          key.words.push_back(static_cast<int64_t>(list.size()));
          for (const std::optional<at::Tensor>& t : list) {
            if (t.has_value() && t->defined()) {
              scan_tensor(*t, info, key, call, promote);
            } else {
              key.words.push_back(-1);
            }
          }
          call.num_tensors += list.size();
          break;
        }
        case ArgKind::Int:
          key.words.push_back(int_of(v));
          break;
        case ArgKind::Float:
          key.words.push_back(double_bits(double_of(v)));
          break;
        case ArgKind::Bool:
          key.words.push_back(v.toBool() ? 1 : 0);
          break;
        case ArgKind::Scalar:
          // Only the kind of a scalar shapes the result of an op with tensor
          // inputs; factories (arange, full) depend on the value too.
          key.words.push_back(scalar_kind(v));
          if (!sig_.has_tensor_input) {
            key.words.push_back(v.isDouble() ? double_bits(v.toDouble()) : v.isInt() ? v.toInt() : 0);
          }
          break;
        case ArgKind::IntList: {
          const auto list = v.toListRef();
          key.words.push_back(static_cast<int64_t>(list.size()));
          for (const c10::IValue& e : list) {
            key.words.push_back(int_of(e));
          }
          call.num_ints += list.size();
          break;
        }
        case ArgKind::FloatList: {
          const auto list = v.toDoubleList();
          key.words.push_back(static_cast<int64_t>(list.size()));
          for (double d : list) {
            key.words.push_back(double_bits(d));
          }
          call.num_doubles += list.size();
          break;
        }
        case ArgKind::BoolList: {
          const auto list = v.toBoolList();
          key.words.push_back(static_cast<int64_t>(list.size()));
          for (bool b : list) {
            key.words.push_back(b ? 1 : 0);
          }
          call.num_bools += list.size();
          break;
        }
        case ArgKind::ScalarList: {
          // Like a Scalar: the kinds shape the result, not the values.
          const auto list = v.toListRef();
          key.words.push_back(static_cast<int64_t>(list.size()));
          for (const c10::IValue& e : list) {
            key.words.push_back(scalar_kind(e));
          }
          call.num_doubles += list.size();
          break;
        }
        case ArgKind::ScalarType:
        case ArgKind::Layout:
        case ArgKind::MemoryFormat:
          key.words.push_back(v.toInt());
          break;
        case ArgKind::Device: {
          const c10::Device d = v.toDevice();
          key.words.push_back(static_cast<int64_t>(d.type()) * 1024 + d.index());
          if (d.type() == c10::DeviceType::PrivateUse1 && call.device < 0) {
            call.device = d.has_index() ? d.index() : current_device();
          }
          break;
        }
        case ArgKind::String:
          key.words.push_back(static_cast<int64_t>(std::hash<std::string>{}(v.toStringRef())));
          ++call.num_strings;
          break;
        case ArgKind::Generator:
        case ArgKind::Unsupported:
          key.words.push_back(0);
          break;
      }
    }
    if (call.device < 0) {
      call.device = current_device();
    }
    if (sig_.has_tensor_input) {
      call.dtype = at::native::result_type(promote);
    }
  }

  void scan_tensor(
      const at::Tensor& t,
      const ArgInfo& info,
      Key& key,
      CallState& call,
      at::native::ResultTypeState& promote) const {
    if (!t.defined()) {
      key.words.push_back(-1);
      return;
    }
    const c10::Device d = t.device();
    if (d.type() == c10::DeviceType::PrivateUse1) {
      if (call.device < 0) {
        call.device = d.index();
      } else if (d.index() != call.device) {
        device_mismatch(c10::Device(c10::DeviceType::PrivateUse1, call.device), d, sig_.name);
      }
    } else if (!(d.is_cpu() && t.dim() == 0)) {
      device_mismatch(
          c10::Device(c10::DeviceType::PrivateUse1, std::max<c10::DeviceIndex>(call.device, 0)),
          d, sig_.name);
    }
    const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
    const auto sizes = impl->sizes();
    const auto strides = impl->strides();
    call.max_dims = std::max(call.max_dims, sizes.size());
    key.words.push_back(
        static_cast<int64_t>(c10::typeMetaToScalarType(impl->dtype())) | (d.is_cpu() ? 256 : 0) |
        (impl->is_wrapped_number() ? 512 : 0) | (static_cast<int64_t>(sizes.size()) << 16));
    key.words.append(sizes.begin(), sizes.end());
    key.words.append(strides.begin(), strides.end());
    if (!info.out) {
      promote = at::native::update_result_type_state(t, promote);
    }
  }

  std::shared_ptr<const MetaEntry> lookup(
      const c10::OperatorHandle& op,
      c10::ArrayRef<c10::IValue> args,
      const Key& key) {
    const bool use_cache = g_meta_cache_enabled.load(std::memory_order_relaxed);
    if (use_cache) {
      std::shared_lock<std::shared_mutex> lock(cache_mutex_);
      auto it = cache_.find(key);
      if (it != cache_.end()) {
        return it->second;
      }
    }
    auto entry = std::make_shared<const MetaEntry>(compute_meta(op, args));
    if (use_cache) {
      std::unique_lock<std::shared_mutex> lock(cache_mutex_);
      if (cache_.size() >= kMaxCacheEntries) {
        cache_.clear();
      }
      cache_.emplace(key, entry);
    }
    return entry;
  }

  static c10::IValue to_meta(const c10::IValue& v) {
    auto meta_tensor = [](const at::Tensor& t) -> at::Tensor {
      if (!t.defined() || (t.device().is_cpu() && t.dim() == 0)) {
        return t;
      }
      return at::empty_strided(
          t.sizes(), t.strides(), t.options().device(c10::DeviceType::Meta));
    };
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

  // An in-place op whose one tensor is the self it writes and returns (normal_,
  // uniform_, fill_.Scalar, ...) keeps self's metadata. Asking PyTorch would run
  // a Python meta function; normal_'s imports torch._dynamo on first use (~2 s).
  bool writes_only_self(c10::ArrayRef<c10::IValue> args) const {
    if (sig_.num_returns != 1 || sig_.return_args.empty() || sig_.return_args[0] != 0 ||
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

  // PyTorch's meta functions for the fused RNN cells read the optional biases
  // unconditionally (torch 2.13: `x.device` on None); without biases the
  // outputs are shaped here, as the CUDA kernels shape them.
  std::optional<MetaEntry> bias_free_rnn_cell(c10::ArrayRef<c10::IValue> args) const {
    const bool lstm = sig_.name == "aten::_thnn_fused_lstm_cell";
    if ((!lstm && sig_.name != "aten::_thnn_fused_gru_cell") || args.size() < 5) {
      return std::nullopt;
    }
    auto absent = [](const c10::IValue& v) { return v.isNone() || (v.isTensor() && !v.toTensor().defined()); };
    if (!absent(args[3]) && !absent(args[4])) {
      return std::nullopt;
    }
    const at::Tensor& gates = args[0].toTensor();
    const at::Tensor& state = args[2].toTensor();
    const at::Tensor& hidden_gates = args[1].toTensor();
    const int64_t per_unit = lstm ? 4 : 3;
    TORCH_CHECK(
        state.dim() == 2 && gates.dim() == 2 && gates.sizes() == hidden_gates.sizes() &&
            gates.size(0) == state.size(0) && gates.size(1) == per_unit * state.size(1),
        sig_.name, ": input_gates and hidden_gates must be of size [batch, ", per_unit,
        " * hidden] for a state of size [batch, hidden]; got input_gates ", gates.sizes(),
        ", hidden_gates ", hidden_gates.sizes(), ", state ", state.sizes());
    auto like = [](const at::Tensor& t, c10::IntArrayRef sizes) {
      return OutSpec{t.scalar_type(), c10::DimVector(sizes), c10::contiguous_strides(sizes)};
    };
    MetaEntry entry;
    entry.outs.push_back(like(state, state.sizes()));
    if (lstm) {
      entry.outs.push_back(like(state, state.sizes()));
      entry.outs.push_back(like(gates, gates.sizes()));
    } else {
      entry.outs.push_back(like(gates, {state.size(0), state.size(1) * 5}));
    }
    return entry;
  }

  MetaEntry compute_meta(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
    MetaEntry entry;
    if (!output_like_.empty()) {
      for (int32_t idx : output_like_) {
        TORCH_CHECK(
            idx >= 0 && static_cast<size_t>(idx) < args.size() && args[idx].isTensor(),
            sig_.name, ": output_like index ", idx, " does not name a tensor argument");
        const at::Tensor& like = args[idx].toTensor();
        entry.outs.push_back({like.scalar_type(), c10::DimVector(like.sizes()),
                              c10::contiguous_strides(like.sizes())});
      }
      return entry;
    }
    if (std::optional<MetaEntry> cell = bias_free_rnn_cell(args)) {
      return *cell;
    }
    if (!functional_.has_value() && writes_only_self(args)) {
      const at::Tensor& self = args[0].toTensor();
      entry.outs.push_back(
          {self.scalar_type(), c10::DimVector(self.sizes()), c10::DimVector(self.strides())});
      return entry;
    }
    // Derived in-place/out= overloads take their metadata from the
    // functional overload: the result the kernel computes.
    const c10::OperatorHandle& meta_op = functional_.has_value() ? *functional_ : op;
    torch::jit::Stack stack;
    stack.reserve(args.size());
    for (size_t i = 0; i < args.size(); ++i) {
      if (functional_.has_value() && sig_.args[i].out) {
        continue;
      }
      stack.push_back(to_meta(args[i]));
    }
    // Meta functions can fail for calls the kernel could serve (some of
    // PyTorch's Python meta functions have bugs, e.g. a missing optional
    // bias); any failure sends the call down the fallback chain.
    try {
      meta_op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &stack);
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
    for (const c10::IValue& r : stack) {
      if (r.isTensor()) {
        const at::Tensor& t = r.toTensor();
        if (!t.defined()) {
          entry.outs.push_back({c10::ScalarType::Undefined, {}, {}, false});
          continue;
        }
        entry.outs.push_back({t.scalar_type(), c10::DimVector(t.sizes()), c10::DimVector(t.strides())});
      } else if (r.isTensorList()) {
        for (const at::Tensor& t : r.toTensorList()) {
          entry.outs.push_back({t.scalar_type(), c10::DimVector(t.sizes()), c10::DimVector(t.strides())});
        }
      }
    }
    return entry;
  }

  at::Tensor allocate(const OutSpec& spec, c10::DeviceIndex device) const {
    if (!spec.defined) {
      return at::Tensor();
    }
    if (spec_.memory_format == TFL_MEMORY_FORMAT_CONTIGUOUS ||
        (spec_.flags & TFL_KERNEL_CONTIGUOUS_OUTPUTS)) {
      return empty_device(spec.sizes, spec.dtype, device);
    }
    if (spec_.memory_format == TFL_MEMORY_FORMAT_CHANNELS_LAST && spec.sizes.size() == 4) {
      return empty_device(spec.sizes, spec.dtype, device, c10::MemoryFormat::ChannelsLast);
    }
    return empty_device(spec.sizes, spec.strides, spec.dtype, device);
  }

  // Decides what the kernel writes: fresh outputs, the caller's tensors, or
  // temporaries copied back afterwards (dtype or layout the kernel can't take).
  void prepare_outputs(c10::ArrayRef<c10::IValue> args, const MetaEntry& entry, CallState& call) const {
    if (sig_.variant == TFL_VARIANT_FUNCTIONAL) {
      for (const OutSpec& spec : entry.outs) {
        call.outputs.push_back(allocate(spec, call.device));
      }
      return;
    }
    if (sig_.variant == TFL_VARIANT_OUT) {
      for (size_t i = 0; i < args.size(); ++i) {
        if (sig_.args[i].out) {
          call.targets.push_back(args[i].toTensor());
        }
      }
    } else {
      for (int arg : sig_.return_args) {
        call.targets.push_back(args[arg].toTensor());
      }
    }
    const bool in_place = sig_.variant == TFL_VARIANT_INPLACE;
    for (size_t i = 0; i < call.targets.size(); ++i) {
      const at::Tensor& target = call.targets[i];
      if (i < entry.outs.size()) {
        const OutSpec& spec = entry.outs[i];
        if (!in_place) {
          at::native::resize_output(target, spec.sizes);
        } else {
          TORCH_CHECK(
              target.sizes() == c10::IntArrayRef(spec.sizes),
              sig_.name, ": output with shape ", target.sizes(),
              " doesn't match the broadcast shape ", c10::IntArrayRef(spec.sizes));
        }
        if (functional_.has_value() && target.scalar_type() != spec.dtype) {
          TORCH_CHECK(
              c10::canCast(spec.dtype, target.scalar_type()),
              sig_.name, ": result type ", spec.dtype,
              " can't be cast to the desired output type ", target.scalar_type());
          at::Tensor temp = empty_device(spec.sizes, spec.dtype, call.device);
          if (in_place) {
            temp.copy_(target);
          }
          call.copy_back.emplace_back(target, temp);
          call.outputs.push_back(temp);
          continue;
        }
      }
      if ((spec_.flags & TFL_KERNEL_CONTIGUOUS_OUTPUTS) && !target.is_contiguous()) {
        at::Tensor temp = empty_device(target.sizes(), target.scalar_type(), call.device);
        if (in_place) {
          temp.copy_(target);
        }
        call.copy_back.emplace_back(target, temp);
        call.outputs.push_back(temp);
        continue;
      }
      call.outputs.push_back(target);
    }
  }

  // Pass 2: canonical inputs, their descriptors and the kernel launch.
  // Returns false when the kernel declined the call (message in *declined).
  bool launch(c10::ArrayRef<c10::IValue> args, CallState& call, std::string* declined) const {
    const uint32_t flags = spec_.flags;
    const c10::DeviceIndex device = call.device;
    const c10::ScalarType dtype = call.dtype;
    const c10::IntArrayRef out_shape = call.outputs.empty() || !call.outputs[0].defined()
        ? c10::IntArrayRef()
        : call.outputs[0].sizes();
    const size_t broadcast_ints = call.num_tensors * 2 * (out_shape.size() + 1);

    CallScratch s;
    s.tensors.reserve(call.num_tensors + 1);
    s.descs.reserve(call.num_tensors + call.outputs.size() + 1);
    s.desc_ptrs.reserve(call.num_tensors + 1);
    s.ints.reserve(call.num_ints + broadcast_ints + 1);
    s.doubles.reserve(call.num_doubles + 1);
    s.bools.reserve(call.num_bools + 1);
    s.strings.reserve(call.num_strings + 1);
    s.values.reserve(args.size());

    auto add_tensor = [&](const at::Tensor& t, bool mutated) -> const TFL_Tensor* {
      at::Tensor c = t;
      if (c.device().is_cpu()) {
        if (flags & TFL_KERNEL_HOST_SCALARS) {
          // Passed as given, never broadcast: the kernel reads the exact value
          // in its compute type.
          s.tensors.push_back(std::move(c));
          s.descs.emplace_back();
          describe(s.tensors.back(), &s.descs.back());
          return &s.descs.back();
        }
        const bool retype = dtype != c10::ScalarType::Undefined && c.scalar_type() != dtype &&
            (c.unsafeGetTensorImpl()->is_wrapped_number() || (flags & TFL_KERNEL_PROMOTE_INPUTS));
        c = upload_scalar(c, retype ? dtype : c.scalar_type(), device);
      } else if (!mutated && (flags & TFL_KERNEL_PROMOTE_INPUTS) &&
                 dtype != c10::ScalarType::Undefined && c.scalar_type() != dtype) {
        c = c.to(dtype);
      }
      const bool reshape = (flags & TFL_KERNEL_BROADCAST_INPUTS) && !out_shape.empty() &&
          c.sizes() != out_shape;
      if (!mutated && (flags & TFL_KERNEL_CONTIGUOUS_INPUTS)) {
        if (reshape) {
          c = c.expand(out_shape);
        }
        if (!c.is_contiguous()) {
          c = c.contiguous();
        }
      }
      s.tensors.push_back(std::move(c));
      s.descs.emplace_back();
      TFL_Tensor* desc = &s.descs.back();
      describe(s.tensors.back(), desc);
      if (reshape && !(flags & TFL_KERNEL_CONTIGUOUS_INPUTS)) {
        broadcast_desc(desc, out_shape, s.ints);
      }
      return desc;
    };

    for (size_t i = 0; i < args.size(); ++i) {
      const ArgInfo& info = sig_.args[i];
      if (info.out) {
        continue;
      }
      const c10::IValue& v = args[i];
      if (v.isNone()) {
        s.values.push_back(value_of(TFL_VALUE_NONE));
        continue;
      }
      switch (info.kind) {
        case ArgKind::Tensor: {
          const at::Tensor& t = v.toTensor();
          if (!t.defined()) {
            s.values.push_back(value_of(TFL_VALUE_NONE));
            break;
          }
          TFL_Value val = value_of(TFL_VALUE_TENSOR);
          val.v.tensor = add_tensor(t, info.write);
          s.values.push_back(val);
          break;
        }
        case ArgKind::TensorList:
        case ArgKind::OptionalTensorList: {
          const size_t first = s.desc_ptrs.size();
          if (info.kind == ArgKind::TensorList) {
            for (const at::Tensor& t : v.toTensorList()) {
              s.desc_ptrs.push_back(add_tensor(t, info.write));
            }
          } else {
            for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
              s.desc_ptrs.push_back(
                  t.has_value() && t->defined() ? add_tensor(*t, info.write) : nullptr);
            }
          }
          TFL_Value val = value_of(TFL_VALUE_TENSOR_LIST);
          val.v.tensors.data = s.desc_ptrs.data() + first;
          val.v.tensors.size = s.desc_ptrs.size() - first;
          s.values.push_back(val);
          break;
        }
        case ArgKind::Int: {
          TFL_Value val = value_of(TFL_VALUE_INT);
          val.v.i = int_of(v);
          s.values.push_back(val);
          break;
        }
        case ArgKind::Float: {
          TFL_Value val = value_of(TFL_VALUE_DOUBLE);
          val.v.d = double_of(v);
          s.values.push_back(val);
          break;
        }
        case ArgKind::Bool: {
          TFL_Value val = value_of(TFL_VALUE_BOOL);
          val.v.i = v.toBool() ? 1 : 0;
          s.values.push_back(val);
          break;
        }
        case ArgKind::Scalar:
          s.values.push_back(scalar_value(v));
          break;
        case ArgKind::IntList: {
          const size_t first = s.ints.size();
          for (const c10::IValue& e : v.toListRef()) {
            s.ints.push_back(int_of(e));
          }
          TFL_Value val = value_of(TFL_VALUE_INT_LIST);
          val.v.ints.data = s.ints.data() + first;
          val.v.ints.size = s.ints.size() - first;
          s.values.push_back(val);
          break;
        }
        case ArgKind::FloatList: {
          const size_t first = s.doubles.size();
          for (double d : v.toDoubleList()) {
            s.doubles.push_back(d);
          }
          TFL_Value val = value_of(TFL_VALUE_DOUBLE_LIST);
          val.v.doubles.data = s.doubles.data() + first;
          val.v.doubles.size = s.doubles.size() - first;
          s.values.push_back(val);
          break;
        }
        case ArgKind::ScalarList: {
          const size_t first = s.doubles.size();
          for (const c10::IValue& e : v.toListRef()) {
            s.doubles.push_back(
                e.isBool() ? (e.toBool() ? 1.0 : 0.0)
                           : (e.isInt() || e.isSymInt()) ? static_cast<double>(int_of(e)) : double_of(e));
          }
          TFL_Value val = value_of(TFL_VALUE_DOUBLE_LIST);
          val.v.doubles.data = s.doubles.data() + first;
          val.v.doubles.size = s.doubles.size() - first;
          s.values.push_back(val);
          break;
        }
        case ArgKind::BoolList: {
          const size_t first = s.bools.size();
          for (bool b : v.toBoolList()) {
            s.bools.push_back(b ? 1 : 0);
          }
          TFL_Value val = value_of(TFL_VALUE_BOOL_LIST);
          val.v.bools.data = s.bools.data() + first;
          val.v.bools.size = s.bools.size() - first;
          s.values.push_back(val);
          break;
        }
        case ArgKind::ScalarType: {
          TFL_Value val = value_of(TFL_VALUE_SCALAR_TYPE);
          val.v.i = to_tfl_dtype(v.toScalarType());
          s.values.push_back(val);
          break;
        }
        case ArgKind::Layout:
          s.values.push_back(value_of(TFL_VALUE_LAYOUT));
          break;
        case ArgKind::MemoryFormat: {
          TFL_Value val = value_of(TFL_VALUE_MEMORY_FORMAT);
          val.v.i = memory_format_value(v.toMemoryFormat());
          s.values.push_back(val);
          break;
        }
        case ArgKind::Device: {
          TFL_Value val = value_of(TFL_VALUE_DEVICE);
          const c10::Device d = v.toDevice();
          val.v.i = d.type() == c10::DeviceType::PrivateUse1 ? (d.has_index() ? d.index() : device) : -1;
          s.values.push_back(val);
          break;
        }
        case ArgKind::String: {
          s.strings.push_back(v.toStringRef());
          TFL_Value val = value_of(TFL_VALUE_STRING);
          val.v.str.data = s.strings.back().c_str();
          val.v.str.size = s.strings.back().size();
          s.values.push_back(val);
          break;
        }
        case ArgKind::Generator:
        case ArgKind::Unsupported:
          s.values.push_back(value_of(TFL_VALUE_NONE));
          break;
      }
    }

    c10::SmallVector<const TFL_Tensor*, 4> out_ptrs;
    for (const at::Tensor& out : call.outputs) {
      if (!out.defined()) {
        out_ptrs.push_back(nullptr); // not requested
        continue;
      }
      s.descs.emplace_back();
      describe(out, &s.descs.back());
      out_ptrs.push_back(&s.descs.back());
    }

    KernelCall kernel_call(
        device, StreamRegistry::get().current_native(device), sig_.name.c_str(),
        spec_.user_data, sig_.variant);
    if (flags & TFL_KERNEL_RANDOM) {
      uint64_t span = 0;
      for (const at::Tensor& out : call.outputs) {
        span += out.defined() ? static_cast<uint64_t>(out.numel()) : 0;
      }
      std::optional<at::Generator> gen;
      if (sig_.generator_arg >= 0 && !args[sig_.generator_arg].isNone()) {
        gen = args[sig_.generator_arg].toGenerator();
      }
      auto [seed, offset] = generator_for(gen, device)->reserve(span);
      kernel_call.context()->rng_seed = seed;
      kernel_call.context()->rng_offset = offset;
      kernel_call.context()->rng_span = (span + 3) / 4 * 4;
    }
    return kernel_call.run(
        spec_.fn, s.values.data(), s.values.size(), out_ptrs.data(), out_ptrs.size(), declined);
  }

  static TFL_Value scalar_value(const c10::IValue& v) {
    if (v.isInt() || v.isSymInt()) {
      TFL_Value val = value_of(TFL_VALUE_INT);
      val.v.i = int_of(v);
      return val;
    }
    if (v.isBool()) {
      TFL_Value val = value_of(TFL_VALUE_BOOL);
      val.v.i = v.toBool() ? 1 : 0;
      return val;
    }
    if (v.isComplexDouble()) {
      TFL_Value val = value_of(TFL_VALUE_COMPLEX);
      const c10::complex<double> c = v.toComplexDouble();
      val.v.c.re = c.real();
      val.v.c.im = c.imag();
      return val;
    }
    TFL_Value val = value_of(TFL_VALUE_DOUBLE);
    val.v.d = double_of(v);
    return val;
  }

  // Rewrites a descriptor to view `shape`: broadcast dimensions get stride 0.
  static void broadcast_desc(TFL_Tensor* desc, c10::IntArrayRef shape, c10::SmallVectorImpl<int64_t>& ints) {
    const int64_t nd = static_cast<int64_t>(shape.size());
    const int64_t offset = nd - desc->ndim;
    const size_t base = ints.size();
    ints.append(shape.begin(), shape.end());
    for (int64_t d = 0; d < nd; ++d) {
      const int64_t src = d - offset;
      const bool keep = src >= 0 && desc->sizes[src] == shape[d] && shape[d] != 1;
      ints.push_back(keep ? desc->strides[src] : 0);
    }
    desc->sizes = ints.data() + base;
    desc->strides = ints.data() + base + nd;
    desc->ndim = static_cast<int32_t>(nd);
    desc->numel = c10::multiply_integers(shape);
  }

  void push_results(torch::jit::Stack* stack, size_t nargs, CallState& call) const {
    torch::jit::drop(*stack, nargs);
    if (sig_.variant == TFL_VARIANT_FUNCTIONAL) {
      if (sig_.returns_list) {
        c10::List<at::Tensor> list;
        for (const at::Tensor& t : call.outputs) {
          list.push_back(t);
        }
        stack->emplace_back(std::move(list));
      } else {
        for (at::Tensor& t : call.outputs) {
          stack->emplace_back(std::move(t));
        }
      }
      return;
    }
    for (size_t i = 0; i < sig_.num_returns && i < call.targets.size(); ++i) {
      stack->emplace_back(std::move(call.targets[i]));
    }
  }

  KernelSpec spec_;
  Signature sig_;
  std::optional<c10::OperatorHandle> functional_;
  std::vector<int32_t> output_like_;
  OpCounterCache counters_;
  std::shared_mutex cache_mutex_;
  std::unordered_map<Key, std::shared_ptr<const MetaEntry>, KeyHash> cache_;
};

// ---------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------

struct NativeTable {
  std::shared_mutex mutex;
  std::map<std::string, uint64_t> dtypes; // schema name -> dtype mask
};

NativeTable& native_table() {
  static auto* table = new NativeTable();
  return *table;
}

std::pair<std::string, std::string> split_name(const std::string& op) {
  const auto dot = op.find('.');
  if (dot == std::string::npos) {
    return {op, ""};
  }
  return {op.substr(0, dot), op.substr(dot + 1)};
}

std::optional<c10::OperatorHandle> find_op(const std::string& op) {
  auto [name, overload] = split_name(op);
  return c10::Dispatcher::singleton().findOp(c10::OperatorName(name, overload));
}

// Resolves torch_fl_op_<suffix> to a schema name by asking the dispatcher
// which split of the suffix into <name>_<overload> exists.
std::string resolve_symbol(const std::string& suffix, std::string* why) {
  std::vector<std::string> matches;
  auto exists = [](const std::string& name, const std::string& overload) {
    return c10::Dispatcher::singleton()
        .findOp(c10::OperatorName("aten::" + name, overload))
        .has_value();
  };
  if (exists(suffix, "")) {
    matches.push_back("aten::" + suffix);
  }
  for (size_t pos = suffix.find('_', 1); pos != std::string::npos;
       pos = suffix.find('_', pos + 1)) {
    const std::string name = suffix.substr(0, pos);
    const std::string overload = suffix.substr(pos + 1);
    if (!overload.empty() && exists(name, overload)) {
      matches.push_back("aten::" + name + "." + overload);
    }
  }
  if (matches.size() == 1) {
    return matches[0];
  }
  if (matches.empty()) {
    *why = "no aten operator matches; expected torch_fl_op_<name>_<overload>, e.g. "
           "torch_fl_op_add_Tensor for aten::add.Tensor";
  } else {
    *why = "it is ambiguous between";
    for (const auto& m : matches) {
      *why += " " + m;
    }
  }
  return "";
}

torch::Library& library_for(
    const std::string& ns,
    torch::Library& aten,
    std::map<std::string, std::unique_ptr<torch::Library>>& libraries) {
  if (ns == "aten") {
    return aten;
  }
  auto& lib = libraries[ns];
  if (!lib) {
    lib = std::make_unique<torch::Library>(
        torch::Library::IMPL, ns, c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  }
  return *lib;
}

void register_one(
    const KernelSpec& spec,
    const c10::OperatorHandle& handle,
    std::optional<c10::OperatorHandle> functional,
    torch::Library& aten,
    std::map<std::string, std::unique_ptr<torch::Library>>& libraries,
    KernelRegistration& report) {
  const std::string name = c10::toString(handle.operator_name());
  Signature sig = analyze(handle.schema());
  if (!sig.unsupported.empty()) {
    report.rejected.emplace_back(name, "cannot be served by a kernel: " + sig.unsupported);
    return;
  }
  const auto ns = name.substr(0, name.find("::"));
  std::string impl_name = name.substr(name.find("::") + 2);
  KernelSpec own = spec;
  own.op = name;
  library_for(ns, aten, libraries)
      .impl(
          impl_name.c_str(),
          torch::CppFunction::makeFromBoxedFunctor(
              std::make_unique<NativeKernel>(own, std::move(sig), std::move(functional))));
  {
    std::unique_lock<std::shared_mutex> lock(native_table().mutex);
    native_table().dtypes[name] = spec.dtypes;
  }
  report.registered.push_back(name);
}

// The in-place and out= overloads that share a functional kernel's arguments.
std::vector<c10::OperatorHandle> derived_variants(const c10::OperatorHandle& functional) {
  std::vector<c10::OperatorHandle> variants;
  const c10::FunctionSchema& fs = functional.schema();
  const std::string& base = fs.name();
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name != base && name.name != base + "_") {
      continue;
    }
    auto handle = c10::Dispatcher::singleton().findOp(name);
    if (!handle.has_value() || !handle->hasSchema()) {
      continue;
    }
    const c10::FunctionSchema& vs = handle->schema();
    if (name.name == base + "_") {
      // In-place: same overload, same arguments, returns self.
      if (name.overload_name == fs.overload_name() && same_arguments(fs, vs, false) &&
          !vs.arguments().empty() && vs.arguments()[0].alias_info() &&
          vs.arguments()[0].alias_info()->isWrite()) {
        variants.push_back(*handle);
      }
    } else if (name.overload_name != fs.overload_name() && vs.is_mutable() &&
               same_arguments(fs, vs, true)) {
      bool has_out = false;
      for (const auto& arg : vs.arguments()) {
        has_out = has_out || arg.is_out();
      }
      if (has_out && vs.returns().size() == fs.returns().size()) {
        variants.push_back(*handle);
      }
    }
  }
  return variants;
}

bool is_composite_implicit(const c10::OperatorHandle& handle) {
  return handle.hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd);
}

} // namespace

KernelRegistration register_plugin_kernels(
    torch::Library& aten,
    std::map<std::string, std::unique_ptr<torch::Library>>& libraries,
    const Plugin& plugin,
    const std::set<std::string>& disabled) {
  KernelRegistration report;
  std::vector<KernelSpec> specs;
  std::set<std::string> seen;

  if (const TFL_KernelApi* kapi = plugin.kernels()) {
    if (kapi->struct_size >= TFL_STRUCT_SIZE(TFL_KernelApi, Kernels_List) && kapi->Kernels_List) {
      TFL_Kernels_List_Args list{};
      list.struct_size = TFL_Kernels_List_Args_STRUCT_SIZE;
      plugin.check(kapi->Kernels_List(&list), "Kernels_List");
      for (size_t i = 0; i < list.num_kernels; ++i) {
        const TFL_KernelDesc* desc = list.kernels[i];
        if (desc == nullptr || desc->op == nullptr || desc->fn == nullptr) {
          report.rejected.emplace_back(
              "<entry " + std::to_string(i) + ">", "kernel descriptor without op name or function");
          continue;
        }
        std::string op = desc->op;
        if (op == "aten::copy_") {
          set_copy_kernel(desc);
          report.registered.push_back(op + " (used for device copies)");
          continue;
        }
        KernelSpec spec;
        spec.op = op;
        spec.fn = desc->fn;
        spec.user_data = desc->user_data;
        spec.dtypes = desc->dtypes;
        spec.flags = desc->flags;
        if (TFL_HAS_FIELD(desc, TFL_KernelDesc, preferred_memory_format)) {
          spec.memory_format = desc->preferred_memory_format;
        }
        if (seen.insert(op).second) {
          specs.push_back(spec);
        }
      }
    }
  }
  for (const SymbolKernel& sym : plugin.symbol_kernels()) {
    std::string why;
    const std::string op = resolve_symbol(sym.suffix, &why);
    if (op.empty()) {
      report.rejected.emplace_back(sym.symbol, why);
      continue;
    }
    if (!seen.insert(op).second) {
      continue; // the kernel table wins
    }
    KernelSpec spec;
    spec.op = op;
    spec.fn = sym.fn;
    spec.dtypes = TFL_DTYPE_BIT(TFL_DTYPE_FLOAT32);
    spec.flags = TFL_KERNEL_SYMBOL_DEFAULT_FLAGS;
    specs.push_back(spec);
  }

  const auto& minimal = minimal_op_names();
  std::set<std::string> explicit_ops(seen.begin(), seen.end());
  std::set<std::string> done;
  for (const KernelSpec& spec : specs) {
    if (disabled.count(spec.op)) {
      report.rejected.emplace_back(spec.op, "disabled by TORCH_FL_DISABLE_KERNELS");
      continue;
    }
    if (std::find(minimal.begin(), minimal.end(), spec.op) != minimal.end()) {
      report.rejected.emplace_back(spec.op, "implemented by the bridge for every plugin");
      continue;
    }
    auto handle = find_op(spec.op);
    if (!handle.has_value() || !handle->hasSchema()) {
      report.rejected.emplace_back(spec.op, "no such operator is registered with PyTorch");
      continue;
    }
    if (is_composite_implicit(*handle)) {
      report.rejected.emplace_back(
          spec.op,
          "it is CompositeImplicitAutograd (PyTorch decomposes it before it reaches a "
          "device); register the operators it decomposes into");
      continue;
    }
    register_one(spec, *handle, std::nullopt, aten, libraries, report);
    done.insert(spec.op);
    if (spec.flags & TFL_KERNEL_NO_DERIVED_VARIANTS) {
      continue;
    }
    const Signature sig = analyze(handle->schema());
    if (sig.variant != TFL_VARIANT_FUNCTIONAL) {
      continue;
    }
    for (const c10::OperatorHandle& variant : derived_variants(*handle)) {
      const std::string vname = c10::toString(variant.operator_name());
      if (explicit_ops.count(vname) || done.count(vname) || disabled.count(vname)) {
        continue;
      }
      register_one(spec, variant, *handle, aten, libraries, report);
      done.insert(vname);
    }
  }
  return report;
}

void register_custom_kernel(
    torch::Library& impl,
    const std::string& qualified_name,
    TFL_KernelFn fn,
    void* user_data,
    uint64_t dtypes,
    uint32_t flags,
    std::vector<int32_t> output_like) {
  auto handle = find_op(qualified_name);
  TORCH_CHECK(
      handle.has_value() && handle->hasSchema(), "custom op ", qualified_name,
      " is not defined");
  Signature sig = analyze(handle->schema());
  TORCH_CHECK(
      sig.unsupported.empty(), "custom op ", qualified_name,
      " cannot be served by a kernel: ", sig.unsupported);
  KernelSpec spec;
  spec.op = qualified_name;
  spec.fn = fn;
  spec.user_data = user_data;
  spec.dtypes = dtypes;
  spec.flags = flags;
  auto kernel = std::make_unique<NativeKernel>(spec, std::move(sig), std::nullopt);
  kernel->set_output_like(std::move(output_like));
  const std::string impl_name = qualified_name.substr(qualified_name.find("::") + 2);
  impl.impl(impl_name.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::move(kernel)));
  std::unique_lock<std::shared_mutex> lock(native_table().mutex);
  native_table().dtypes[qualified_name] = dtypes;
}

bool has_native_kernel(const std::string& op, c10::ScalarType dtype) {
  std::shared_lock<std::shared_mutex> lock(native_table().mutex);
  auto it = native_table().dtypes.find(op);
  return it != native_table().dtypes.end() && (it->second & dtype_bit(dtype)) != 0;
}

std::map<std::string, uint64_t> native_kernel_table() {
  std::shared_lock<std::shared_mutex> lock(native_table().mutex);
  return native_table().dtypes;
}

void set_meta_cache_enabled(bool enabled) {
  g_meta_cache_enabled.store(enabled);
}

} // namespace torch_fl::bridge
