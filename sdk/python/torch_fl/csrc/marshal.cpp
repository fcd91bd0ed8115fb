#include "marshal.h"

#include "copy.h"
#include "device_tensor.h"
#include "host_allocator.h"
#include "kernel_abi.h"
#include "streams.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>

#include <array>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace torch_fl::bridge {

namespace {

TFL_Value value_of(int32_t tag) {
  TFL_Value v;
  std::memset(&v, 0, sizeof(v));
  v.tag = tag;
  return v;
}

TFL_Value int_value(int32_t tag, int64_t i) {
  TFL_Value v = value_of(tag);
  v.v.i = i;
  return v;
}

TFL_Value scalar_value(const c10::IValue& v) {
  if (v.isInt() || v.isSymInt()) {
    return int_value(TFL_VALUE_INT, int_of(v));
  }
  if (v.isBool()) {
    return int_value(TFL_VALUE_BOOL, v.toBool() ? 1 : 0);
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

// Rewrites a descriptor to view `shape`: broadcast dimensions get stride 0.
void broadcast_desc(TFL_Tensor* desc, c10::IntArrayRef shape, c10::SmallVectorImpl<int64_t>& ints) {
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

// Appends the descriptor of `t` (and broadcasts it to `shape` if asked).
const TFL_Tensor* add_desc(CallScratch& s, const at::Tensor& t, bool broadcast, c10::IntArrayRef shape) {
  s.descs.emplace_back();
  TFL_Tensor* desc = &s.descs.back();
  describe(t, desc);
  if (broadcast) {
    broadcast_desc(desc, shape, s.ints);
  }
  return desc;
}

} // namespace

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

void marshal_call(
    const Signature& sig,
    c10::ArrayRef<c10::IValue> args,
    const CallShape& call,
    const Operands& ops,
    CallScratch& s) {
  const c10::IntArrayRef out_shape = ops.outputs.empty() || !ops.outputs[0].defined()
      ? c10::IntArrayRef()
      : ops.outputs[0].sizes();
  s.descs.reserve(ops.inputs.size() + ops.outputs.size() + 1);
  s.desc_ptrs.reserve(ops.inputs.size() + 1);
  s.ints.reserve(call.num_ints + ops.inputs.size() * 2 * (out_shape.size() + 1) + 1);
  s.doubles.reserve(call.num_doubles + 1);
  s.bools.reserve(call.num_bools + 1);
  s.strings.reserve(call.num_strings + 1);
  s.outputs.reserve(ops.outputs.size());
  // At most one value per argument, stored in place: SmallVector's
  // push_back is an out-of-line call each.
  s.values.resize_for_overwrite(args.size());
  TFL_Value* const values = s.values.data();
  size_t num_values = 0;
  auto put = [&](const TFL_Value& val) { values[num_values++] = val; };

  size_t slot = 0; // next entry of ops.inputs
  auto next_tensor = [&]() -> const TFL_Tensor* {
    const at::Tensor& t = ops.inputs[slot];
    const bool broadcast = ops.broadcast[slot] != 0;
    ++slot;
    return t.defined() ? add_desc(s, t, broadcast, out_shape) : nullptr;
  };

  for (size_t i = 0; i < args.size(); ++i) {
    const ArgInfo& info = sig.args[i];
    if (info.out) {
      continue;
    }
    const c10::IValue& v = args[i];
    if (info.hidden) {
      // Holds its default (checked before the launch); a tensor default is None.
      if (v.isNone() && info.kind == ArgKind::Tensor) {
        ++slot;
      }
      continue;
    }
    if (v.isNone()) {
      if (info.kind == ArgKind::Tensor) {
        ++slot;
      }
      put(value_of(TFL_VALUE_NONE));
      continue;
    }
    switch (info.kind) {
      case ArgKind::Tensor: {
        const TFL_Tensor* desc = next_tensor();
        if (desc == nullptr) {
          put(value_of(TFL_VALUE_NONE));
          break;
        }
        TFL_Value val = value_of(TFL_VALUE_TENSOR);
        val.v.tensor = desc;
        put(val);
        break;
      }
      case ArgKind::TensorList:
      case ArgKind::OptionalTensorList: {
        const size_t first = s.desc_ptrs.size();
        const size_t n = info.kind == ArgKind::TensorList ? v.toTensorList().size()
                                                          : v.toOptionalTensorList().size();
        for (size_t k = 0; k < n; ++k) {
          s.desc_ptrs.push_back(next_tensor());
        }
        TFL_Value val = value_of(TFL_VALUE_TENSOR_LIST);
        val.v.tensors.data = s.desc_ptrs.data() + first;
        val.v.tensors.size = n;
        put(val);
        break;
      }
      case ArgKind::Int:
        put(int_value(TFL_VALUE_INT, int_of(v)));
        break;
      case ArgKind::Float: {
        TFL_Value val = value_of(TFL_VALUE_DOUBLE);
        val.v.d = double_of(v);
        put(val);
        break;
      }
      case ArgKind::Bool:
        put(int_value(TFL_VALUE_BOOL, v.toBool() ? 1 : 0));
        break;
      case ArgKind::Scalar:
        put(scalar_value(v));
        break;
      case ArgKind::IntList: {
        const size_t first = s.ints.size();
        for (const c10::IValue& e : v.toListRef()) {
          s.ints.push_back(int_of(e));
        }
        TFL_Value val = value_of(TFL_VALUE_INT_LIST);
        val.v.ints.data = s.ints.data() + first;
        val.v.ints.size = s.ints.size() - first;
        put(val);
        break;
      }
      case ArgKind::FloatList:
      case ArgKind::ScalarList: {
        const size_t first = s.doubles.size();
        if (info.kind == ArgKind::FloatList) {
          for (double d : v.toDoubleList()) {
            s.doubles.push_back(d);
          }
        } else {
          for (const c10::IValue& e : v.toListRef()) {
            s.doubles.push_back(
                e.isBool() ? (e.toBool() ? 1.0 : 0.0)
                           : (e.isInt() || e.isSymInt()) ? static_cast<double>(int_of(e))
                                                         : double_of(e));
          }
        }
        TFL_Value val = value_of(TFL_VALUE_DOUBLE_LIST);
        val.v.doubles.data = s.doubles.data() + first;
        val.v.doubles.size = s.doubles.size() - first;
        put(val);
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
        put(val);
        break;
      }
      case ArgKind::ScalarType:
        put(int_value(TFL_VALUE_SCALAR_TYPE, to_tfl_dtype(v.toScalarType())));
        break;
      case ArgKind::Layout:
        put(value_of(TFL_VALUE_LAYOUT));
        break;
      case ArgKind::MemoryFormat:
        put(
            int_value(TFL_VALUE_MEMORY_FORMAT, memory_format_value(v.toMemoryFormat())));
        break;
      case ArgKind::Device: {
        const c10::Device d = v.toDevice();
        put(int_value(
            TFL_VALUE_DEVICE,
            d.type() == c10::DeviceType::PrivateUse1 ? (d.has_index() ? d.index() : call.device)
                                                     : -1));
        break;
      }
      case ArgKind::String: {
        s.strings.push_back(v.toStringRef());
        TFL_Value val = value_of(TFL_VALUE_STRING);
        val.v.str.data = s.strings.back().c_str();
        val.v.str.size = s.strings.back().size();
        put(val);
        break;
      }
      case ArgKind::Generator:
      case ArgKind::Unsupported:
        put(value_of(TFL_VALUE_NONE));
        break;
    }
  }

  s.values.resize(num_values);

  for (const at::Tensor& out : ops.outputs) {
    s.outputs.push_back(out.defined() ? add_desc(s, out, false, {}) : nullptr);
  }
}

} // namespace torch_fl::bridge
