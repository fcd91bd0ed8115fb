#include "call_scan.h"

#include "streams.h"

#include <ATen/ATen.h>
#include <ATen/native/TypeProperties.h>

#include <cstring>
#include <functional>

namespace torch_fl::bridge {

namespace {

int64_t double_bits(double d) {
  int64_t bits;
  std::memcpy(&bits, &d, sizeof(bits));
  return bits;
}

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

void scan_tensor(
    const Signature& sig,
    const at::Tensor& t,
    const ArgInfo& info,
    MetaKey& key,
    CallShape& call) {
  if (!t.defined()) {
    key.words.push_back(-1);
    return;
  }
  const c10::Device d = t.device();
  if (d.type() == c10::DeviceType::PrivateUse1) {
    if (call.device < 0) {
      call.device = d.index();
    } else if (d.index() != call.device) {
      device_mismatch(c10::Device(c10::DeviceType::PrivateUse1, call.device), d, sig.name);
    }
  } else if (!(d.is_cpu() && (t.dim() == 0 || info.host))) {
    device_mismatch(
        c10::Device(c10::DeviceType::PrivateUse1, std::max<c10::DeviceIndex>(call.device, 0)), d,
        sig.name);
  }
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  const auto sizes = impl->sizes();
  const auto strides = impl->strides();
  call.max_dims = std::max(call.max_dims, sizes.size());
  // One size change, then plain stores: a model's tensors have a few dims,
  // for which a memcpy call (or a capacity check per word) costs more than
  // the copy.
  const size_t nd = sizes.size();
  const size_t at = key.words.size();
  key.words.resize_for_overwrite(at + 1 + 2 * nd);
  int64_t* w = key.words.data() + at;
  w[0] = static_cast<int64_t>(c10::typeMetaToScalarType(impl->dtype())) | (d.is_cpu() ? 256 : 0) |
      (impl->is_wrapped_number() ? 512 : 0) | (static_cast<int64_t>(nd) << 16);
  for (size_t i = 0; i < nd; ++i) {
    w[1 + i] = sizes[i];
    w[1 + nd + i] = strides[i];
  }
}

// Each tensor the common dtype is promoted over, in schema order.
template <typename Fn>
void for_each_input_tensor(const Signature& sig, c10::ArrayRef<c10::IValue> args, Fn&& fn) {
  for (size_t i = 0; i < args.size(); ++i) {
    const ArgInfo& info = sig.args[i];
    const c10::IValue& v = args[i];
    if (info.out || v.isNone()) {
      continue;
    }
    if (info.kind == ArgKind::Tensor) {
      fn(v.toTensor());
    } else if (info.kind == ArgKind::TensorList) {
      for (const at::Tensor& t : v.toTensorList()) {
        fn(t);
      }
    } else if (info.kind == ArgKind::OptionalTensorList) {
      for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) {
        if (t.has_value()) {
          fn(*t);
        }
      }
    }
  }
}

// The key words of the tensor lists in a call, counted up front: a fused
// optimizer passes hundreds of tensors, and growing the key list by list
// would copy it again for each.
size_t list_key_words(const Signature& sig, c10::ArrayRef<c10::IValue> args) {
  size_t words = 0;
  for (size_t i = 0; i < args.size(); ++i) {
    const ArgKind kind = sig.args[i].kind;
    if (args[i].isNone() || (kind != ArgKind::TensorList && kind != ArgKind::OptionalTensorList)) {
      continue;
    }
    ++words;
    if (kind == ArgKind::TensorList) {
      for (const at::Tensor& t : args[i].toTensorList()) {
        words += t.defined() ? 1 + 2 * static_cast<size_t>(t.dim()) : 1;
      }
    } else {
      for (const std::optional<at::Tensor>& t : args[i].toOptionalTensorList()) {
        words += t.has_value() && t->defined() ? 1 + 2 * static_cast<size_t>(t->dim()) : 1;
      }
    }
  }
  return words;
}

} // namespace

[[noreturn]] void device_mismatch(const c10::Device& a, const c10::Device& b, const std::string& op) {
  TORCH_CHECK(
      false,
      "Expected all tensors to be on the same device, but found at least two devices, ",
      a, " and ", b, "! (when running ", op,
      "; only 0-dim CPU tensors may be mixed with device tensors)");
}

int64_t int_of(const c10::IValue& v) {
  return v.isSymInt() ? v.toSymInt().guard_int(__FILE__, __LINE__) : v.toInt();
}

double double_of(const c10::IValue& v) {
  return v.isSymFloat() ? v.toSymFloat().guard_float(__FILE__, __LINE__) : v.toDouble();
}

c10::ScalarType common_dtype(const Signature& sig, c10::ArrayRef<c10::IValue> args) {
  if (!sig.has_tensor_input) {
    return c10::ScalarType::Undefined;
  }
  // Tensors of one dtype promote to it, whatever their dims: the common case
  // (a fused optimizer's hundreds of tensors) costs a compare each.
  c10::ScalarType first = c10::ScalarType::Undefined;
  bool uniform = true;
  for_each_input_tensor(sig, args, [&](const at::Tensor& t) {
    if (t.defined()) {
      const c10::ScalarType dtype = t.scalar_type();
      first = first == c10::ScalarType::Undefined ? dtype : first;
      uniform = uniform && dtype == first;
    }
  });
  if (uniform) {
    return first;
  }
  at::native::ResultTypeState promote{};
  for_each_input_tensor(sig, args, [&](const at::Tensor& t) {
    if (t.defined()) {
      promote = at::native::update_result_type_state(t, promote);
    }
  });
  return at::native::result_type(promote);
}

void scan_call(const Signature& sig, c10::ArrayRef<c10::IValue> args, CallShape& call, MetaKey& key) {
  if (sig.has_tensor_list) {
    key.words.reserve(key.words.size() + list_key_words(sig, args) + 2 * args.size());
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const ArgInfo& info = sig.args[i];
    const c10::IValue& v = args[i];
    if (v.isNone()) {
      key.words.push_back(-1);
      continue;
    }
    switch (info.kind) {
      case ArgKind::Tensor:
        scan_tensor(sig, v.toTensor(), info, key, call);
        ++call.num_tensors;
        break;
      case ArgKind::TensorList: {
        const auto list = v.toTensorList();
        key.words.push_back(static_cast<int64_t>(list.size()));
        for (const at::Tensor& t : list) {
          scan_tensor(sig, t, info, key, call);
        }
        call.num_tensors += list.size();
        break;
      }
      case ArgKind::OptionalTensorList: {
        const auto list = v.toOptionalTensorList();
        key.words.push_back(static_cast<int64_t>(list.size()));
        for (const std::optional<at::Tensor>& t : list) {
          if (t.has_value() && t->defined()) {
            scan_tensor(sig, *t, info, key, call);
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
        if (!sig.has_tensor_input) {
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
}

} // namespace torch_fl::bridge
