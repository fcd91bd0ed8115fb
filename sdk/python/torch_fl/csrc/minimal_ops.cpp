// The operators every PrivateUse1 device needs, implemented by the bridge
// over the plugin's memory ABI so that no vendor ever writes them: tensor
// creation, views, resize/set, copies, scalar reads, record_stream and the
// shallow-copy compatibility Module.to() relies on.
#include "minimal_ops.h"

#include "caching_allocator.h"
#include "copy.h"
#include "device_tensor.h"
#include "op_stats.h"
#include "loaded_plugin.h"
#include "streams.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/util/strides.h>
#include <torch/library.h>

namespace torch_fl::bridge {

namespace {

c10::DeviceIndex device_index_of(std::optional<c10::Device> device) {
  if (!device.has_value() || !device->has_index()) {
    return current_device();
  }
  TORCH_CHECK(
      device->type() == c10::DeviceType::PrivateUse1,
      "expected a torch-fl device, got ", *device);
  check_device_index(device->index());
  return device->index();
}

void check_options(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(
      c10::layout_or_default(layout) == c10::Layout::Strided,
      "torch-fl devices hold strided (dense) tensors only; got layout ", *layout);
  TORCH_CHECK(
      !c10::pinned_memory_or_default(pin_memory),
      "pin_memory applies to CPU tensors only");
}

at::Tensor empty_memory_format(
    c10::IntArrayRef size,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory,
    std::optional<c10::MemoryFormat> memory_format) {
  check_options(layout, pin_memory);
  return empty_device(
      size, c10::dtype_or_default(dtype), device_index_of(device), memory_format);
}

at::Tensor empty_strided(
    c10::IntArrayRef size,
    c10::IntArrayRef stride,
    std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout,
    std::optional<c10::Device> device,
    std::optional<bool> pin_memory) {
  check_options(layout, pin_memory);
  return empty_device(size, stride, c10::dtype_or_default(dtype), device_index_of(device));
}

at::Tensor as_strided(
    const at::Tensor& self,
    c10::IntArrayRef size,
    c10::IntArrayRef stride,
    std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor view(const at::Tensor& self, c10::IntArrayRef size) {
  return at::native::view(self, size);
}

at::Tensor reshape_alias(
    const at::Tensor& self,
    c10::IntArrayRef size,
    c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

at::Tensor unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return at::native::unfold(self, dimension, size, step);
}

at::Tensor view_as_real(const at::Tensor& self) {
  return at::native::view_as_real(self);
}

at::Tensor view_as_complex(const at::Tensor& self) {
  return at::native::view_as_complex(self);
}

const at::Tensor& resize_(
    const at::Tensor& self,
    c10::IntArrayRef size,
    std::optional<c10::MemoryFormat> memory_format) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  if (impl->sizes() != size) {
    impl->set_sizes_contiguous(size);
  }
  const size_t needed = at::detail::computeStorageNbytesContiguous(
      size, impl->itemsize(), static_cast<size_t>(impl->storage_offset()));
  if (needed > impl->storage().nbytes()) {
    resize_storage_bytes(impl->storage(), needed);
  }
  if (memory_format.has_value()) {
    TORCH_CHECK(
        *memory_format != c10::MemoryFormat::Preserve,
        "unsupported memory format ", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor& set_storage(
    at::Tensor& self,
    c10::Storage source,
    int64_t storage_offset,
    c10::IntArrayRef size,
    c10::IntArrayRef stride) {
  const c10::DimVector strides = stride.empty() && !size.empty()
      ? c10::contiguous_strides(size)
      : c10::DimVector(stride);
  at::native::checkSetStorage(self, source, storage_offset, size, c10::IntArrayRef(strides));
  self.unsafeGetTensorImpl()->set_storage_offset(storage_offset);
  at::native::setStrided(self, size, c10::IntArrayRef(strides), storage_offset);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, c10::Storage source) {
  const int64_t numel = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_storage(self, std::move(source), 0, {numel}, {});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.unsafeGetTensorImpl() == source.unsafeGetTensorImpl()) {
    return self;
  }
  return set_storage(
      self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::Storage storage(
      c10::Storage::use_byte_size_t(), 0,
      CachingAllocator::get().allocate_on(self.device().index(), 0),
      &CachingAllocator::get(), true);
  return set_storage(self, std::move(storage), 0, {0}, {});
}

// Autograd's cheap all-zeros tensor (e.g. the gradient of sgn): no memory; the
// ZeroTensor key materializes it when an op needs its values.
at::Tensor efficient_zero_tensor(
    at::IntArrayRef size,
    std::optional<at::ScalarType> dtype,
    std::optional<at::Layout> /*layout*/,
    std::optional<c10::Device> device,
    std::optional<bool> /*pin_memory*/) {
  const c10::Device target(c10::DeviceType::PrivateUse1, device_index_of(device));
  at::native::ZeroTensorAllocator allocator(target);
  const auto keys = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1) |
      c10::DispatchKeySet(c10::DispatchKey::ZeroTensor);
  return at::detail::empty_generic(
      size, &allocator, keys, c10::dtype_or_default(dtype), std::nullopt);
}

at::Tensor copy_from_op(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  static OpCounterCache counters("aten::_copy_from");
  const uint64_t start = ticks();
  const uint64_t bytes_before = transfer_bytes();
  try {
    copy_from(self, dst, non_blocking);
  } catch (...) {
    counters.get(dst.scalar_type()).add(Path::Failed, ticks() - start);
    throw;
  }
  counters.get(dst.scalar_type())
      .add(Path::Native, ticks() - start, transfer_bytes() - bytes_before);
  return dst;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) {
    resize_(dst, self.sizes(), std::nullopt);
  }
  return copy_from_op(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(
      self.numel() == 1, "a Tensor with ", self.numel(),
      " elements cannot be converted to Scalar");
  return to_host(self).item();
}

void record_stream(at::Tensor& self, c10::Stream stream) {
  CachingAllocator::get().recordStream(self.storage().data_ptr(), stream);
}

// Module.to(), Tensor.data = ..., load_state_dict and swap_tensors keep a
// Parameter's identity only when this says a device tensor and a CPU tensor
// can take each other's place (PyTorch answers true for its own dense
// backends; TensorImpl.h leaves PrivateUse1 to override it, as CUDA is).
bool compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == c10::Layout::Strided &&
        (t.device().is_cpu() || t.device().type() == c10::DeviceType::PrivateUse1);
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) ||
      (dense(self) && dense(from));
}

} // namespace

// The bridge-served operators, once: registration and the name list (which
// Python reads through torch_fl._C.bridge_ops) both expand this table.
#define TFL_BRIDGE_OPS(X)                                          \
  X("empty.memory_format", empty_memory_format)                    \
  X("empty_strided", empty_strided)                                \
  X("as_strided", as_strided)                                      \
  X("view", view)                                                  \
  X("_reshape_alias", reshape_alias)                               \
  X("unfold", unfold)                                              \
  X("view_as_real", view_as_real)                                  \
  X("view_as_complex", view_as_complex)                            \
  X("resize_", resize_)                                            \
  X("set_.source_Storage_storage_offset", set_storage)             \
  X("set_.source_Storage", set_source_storage)                     \
  X("set_.source_Tensor", set_source_tensor)                       \
  X("set_", set_empty)                                             \
  X("_efficientzerotensor", efficient_zero_tensor)                 \
  X("_copy_from", copy_from_op)                                    \
  X("_copy_from_and_resize", copy_from_and_resize)                 \
  X("_local_scalar_dense", local_scalar_dense)                     \
  X("record_stream", record_stream)                                \
  X("_has_compatible_shallow_copy_type", compatible_shallow_copy_type)

void register_minimal_ops(torch::Library& m) {
#define TFL_REGISTER_BRIDGE_OP(name, fn) m.impl(name, TORCH_FN(fn));
  TFL_BRIDGE_OPS(TFL_REGISTER_BRIDGE_OP)
#undef TFL_REGISTER_BRIDGE_OP
}

void register_math_bit_fallthroughs(torch::Library& conjugate, torch::Library& negative) {
  for (torch::Library* m : {&conjugate, &negative}) {
    m->impl("_copy_from", torch::CppFunction::makeFallthrough());
    m->impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
  }
}

const std::vector<std::string>& minimal_op_names() {
  static const std::vector<std::string> names = {
#define TFL_BRIDGE_OP_NAME(name, fn) "aten::" name,
      TFL_BRIDGE_OPS(TFL_BRIDGE_OP_NAME)
#undef TFL_BRIDGE_OP_NAME
  };
  return names;
}

} // namespace torch_fl::bridge
