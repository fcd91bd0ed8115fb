#include "copy.h"

#include "caching_allocator.h"
#include "device_tensor.h"
#include "host_allocator.h"
#include "kernel_abi.h"
#include "loaded_plugin.h"
#include "streams.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>

#include <atomic>

namespace torch_fl::bridge {

namespace {

std::atomic<const TFL_KernelDesc*> g_copy_kernel{nullptr};

bool is_device(const at::Tensor& t) {
  return t.device().type() == c10::DeviceType::PrivateUse1;
}

size_t nbytes_of(const at::Tensor& t) {
  return static_cast<size_t>(t.numel()) * t.element_size();
}

// Dense tensors whose bytes line up element for element move as one block.
bool same_dense_layout(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() &&
      a.strides() == b.strides() && a.is_non_overlapping_and_dense();
}

// Number of elements between the first and the last element of a strided
// view, inclusive: the extent a staged copy has to move.
int64_t extent_elements(const at::Tensor& t) {
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) {
    last += (t.size(d) - 1) * t.stride(d);
  }
  return last + 1;
}

// A CPU tensor holding the storage extent of a device view, viewed with the
// view's sizes and strides.
at::Tensor read_extent(const at::Tensor& src) {
  const int64_t extent = extent_elements(src);
  at::Tensor buffer = at::empty({extent}, src.options().device(c10::kCPU));
  plugin_memcpy(
      TFL_COPY_DEVICE_TO_HOST, buffer.data_ptr(), -1, src.data_ptr(),
      src.device().index(), static_cast<size_t>(extent) * src.element_size(),
      StreamRegistry::get().current_native(src.device().index()), true);
  return buffer.as_strided(src.sizes(), src.strides());
}

// Whether the plugin's copy kernel takes a copy between these dtypes and
// layouts: both dtypes in its mask, and dense operands when its flags ask for
// them (such a kernel converts dtypes but cannot serve strided copies).
bool copy_kernel_takes(c10::ScalarType dst, c10::ScalarType src, bool both_dense) {
  const TFL_KernelDesc* desc = g_copy_kernel.load(std::memory_order_acquire);
  if (desc == nullptr || (desc->dtypes & dtype_bit(dst)) == 0 || (desc->dtypes & dtype_bit(src)) == 0) {
    return false;
  }
  return both_dense ||
      (desc->flags & (TFL_KERNEL_CONTIGUOUS_INPUTS | TFL_KERNEL_CONTIGUOUS_OUTPUTS)) == 0;
}

void launch_copy_kernel(const at::Tensor& dst, const at::Tensor& src) {
  const TFL_KernelDesc* desc = g_copy_kernel.load(std::memory_order_acquire);
  const c10::DeviceIndex device = dst.device().index();
  TFL_Tensor dst_desc, src_desc;
  describe(dst, &dst_desc);
  describe(src, &src_desc);
  TFL_Value inputs[3];
  inputs[0].tag = TFL_VALUE_TENSOR;
  inputs[0].reserved = 0;
  inputs[0].v.tensor = &dst_desc;
  inputs[1].tag = TFL_VALUE_TENSOR;
  inputs[1].reserved = 0;
  inputs[1].v.tensor = &src_desc;
  inputs[2].tag = TFL_VALUE_BOOL;
  inputs[2].reserved = 0;
  inputs[2].v.i = 0;
  const TFL_Tensor* outputs[1] = {&dst_desc};
  KernelCall call(
      device, StreamRegistry::get().current_native(device), desc->op,
      desc->user_data, TFL_VARIANT_INPLACE);
  std::string declined;
  if (!call.run(desc->fn, inputs, 3, outputs, 1, &declined)) {
    // The plugin's copy kernel cannot take this pair: stage through the host.
    at::Tensor host = read_extent(src);
    at::Tensor view = read_extent(dst);
    view.copy_(host);
    plugin_memcpy(
        TFL_COPY_HOST_TO_DEVICE, dst.data_ptr(), device, view.data_ptr(), -1,
        static_cast<size_t>(extent_elements(dst)) * dst.element_size(),
        StreamRegistry::get().current_native(device), true);
  }
}

void copy_host_to_device(const at::Tensor& dst, const at::Tensor& src, bool non_blocking);

// Device to device on one device.
void copy_on_device(const at::Tensor& dst, const at::Tensor& src) {
  const c10::DeviceIndex device = dst.device().index();
  if (same_dense_layout(dst, src)) {
    plugin_memcpy(
        TFL_COPY_DEVICE_TO_DEVICE, dst.data_ptr(), device, src.data_ptr(), device,
        nbytes_of(dst), StreamRegistry::get().current_native(device), false);
    return;
  }
  if (copy_kernel_takes(dst.scalar_type(), src.scalar_type(),
                        dst.is_contiguous() && src.is_contiguous())) {
    launch_copy_kernel(dst, src);
    return;
  }
  copy_host_to_device(dst, to_host(src), false);
}

void copy_host_to_device(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  const c10::DeviceIndex device = dst.device().index();
  at::Tensor host = src.scalar_type() == dst.scalar_type() ? src : src.to(dst.scalar_type());
  if (dst.is_non_overlapping_and_dense()) {
    if (!same_dense_layout(dst, host)) {
      at::Tensor staged = at::empty_strided(dst.sizes(), dst.strides(), host.options());
      staged.copy_(host);
      host = staged;
    }
    TFL_Stream* stream = StreamRegistry::get().current_native(device);
    const bool async = non_blocking && HostAllocator::get().is_pinned(host.data_ptr());
    plugin_memcpy(
        TFL_COPY_HOST_TO_DEVICE, dst.data_ptr(), device, host.data_ptr(), -1,
        nbytes_of(dst), stream, !async);
    if (async) {
      HostAllocator::get().record_use(host.data_ptr(), StreamRegistry::get().current(device));
    }
    return;
  }
  if (copy_kernel_takes(dst.scalar_type(), dst.scalar_type(), false)) {
    at::Tensor dense = empty_device(dst.sizes(), dst.scalar_type(), device);
    copy_host_to_device(dense, host, false);
    launch_copy_kernel(dst, dense);
    return;
  }
  // No strided kernel: read the destination's extent, patch it on the host
  // and write it back.
  at::Tensor view = read_extent(dst);
  view.copy_(host);
  const at::Tensor& buffer = view;
  plugin_memcpy(
      TFL_COPY_HOST_TO_DEVICE, dst.data_ptr(), device, buffer.data_ptr(), -1,
      static_cast<size_t>(extent_elements(dst)) * dst.element_size(),
      StreamRegistry::get().current_native(device), true);
}

void copy_device_to_host(const at::Tensor& dst, const at::Tensor& src, bool non_blocking) {
  const c10::DeviceIndex device = src.device().index();
  if (!src.is_non_overlapping_and_dense()) {
    if (copy_kernel_takes(src.scalar_type(), src.scalar_type(), false)) {
      at::Tensor dense = empty_device(src.sizes(), src.scalar_type(), device);
      launch_copy_kernel(dense, src);
      copy_device_to_host(dst, dense, false);
    } else {
      dst.copy_(read_extent(src));
    }
    return;
  }
  const bool direct = same_dense_layout(dst, src);
  at::Tensor target = direct
      ? dst
      : at::empty_strided(src.sizes(), src.strides(), src.options().device(c10::kCPU));
  const bool async =
      direct && non_blocking && HostAllocator::get().is_pinned(dst.data_ptr());
  plugin_memcpy(
      TFL_COPY_DEVICE_TO_HOST, target.data_ptr(), -1, src.data_ptr(), device,
      nbytes_of(src), StreamRegistry::get().current_native(device), !async);
  if (async) {
    HostAllocator::get().record_use(dst.data_ptr(), StreamRegistry::get().current(device));
  }
  if (!direct) {
    dst.copy_(target);
  }
}

void copy_across_devices(const at::Tensor& dst, const at::Tensor& src) {
  const c10::DeviceIndex from = src.device().index();
  const c10::DeviceIndex to = dst.device().index();
  Plugin& plugin = active_plugin();
  if (plugin.has_peer_access(from, to) && same_dense_layout(dst, src)) {
    // Work already queued on the destination may still read or write dst.
    synchronize_stream(StreamRegistry::get().current(to));
    plugin_memcpy(
        TFL_COPY_PEER, dst.data_ptr(), to, src.data_ptr(), from, nbytes_of(dst),
        StreamRegistry::get().current_native(from), true);
    return;
  }
  copy_host_to_device(dst, to_host(src), false);
}

} // namespace

uint64_t& transfer_bytes() {
  thread_local uint64_t bytes = 0;
  return bytes;
}

void set_copy_kernel(const TFL_KernelDesc* desc) {
  g_copy_kernel.store(desc, std::memory_order_release);
}


void plugin_memcpy(
    TFL_CopyKind kind,
    void* dst,
    int dst_device,
    const void* src,
    int src_device,
    size_t size,
    TFL_Stream* stream,
    bool blocking) {
  if (size == 0) {
    return;
  }
  Plugin& plugin = active_plugin();
  TFL_Memory_Copy_Args args;
  args.struct_size = TFL_Memory_Copy_Args_STRUCT_SIZE;
  args.kind = kind;
  args.dst = dst;
  args.dst_device = dst_device;
  args.src = src;
  args.src_device = src_device;
  args.size = size;
  args.stream = stream;
  args.blocking = blocking ? 1 : 0;
  {
    EnqueueGuard enqueuing(stream);
    plugin.check(plugin.memory().Memory_Copy(&args), "Memory_Copy");
  }
  if (kind == TFL_COPY_HOST_TO_DEVICE || kind == TFL_COPY_DEVICE_TO_HOST) {
    transfer_bytes() += size;
  }
}

namespace {

bool has_math_bits(const at::Tensor& t) {
  return t.is_conj() || t.is_neg();
}

// The same memory without the lazy conjugate/negative bits: what is stored.
at::Tensor stored_view(const at::Tensor& t) {
  at::Tensor view = at::alias(t);
  view._set_conj(false);
  view._set_neg(false);
  return view;
}

// _copy_from lets the Conjugate and Negative keys fall through (their
// fallback would materialize the source with clone, which copies, which
// reaches _copy_from again). Bytes move as stored; the bits are applied on the
// host, where PyTorch's own kernels resolve them.
at::Tensor copy_with_math_bits(const at::Tensor& src, const at::Tensor& dst) {
  at::Tensor value;
  if (is_device(src)) {
    value = to_host(stored_view(src));
    value._set_conj(src.is_conj());
    value._set_neg(src.is_neg());
  } else {
    value = src;
  }
  value = value.resolve_conj().resolve_neg();
  // dst stores conj/neg of its logical value when it carries the bits.
  if (dst.is_conj()) {
    value = value.conj_physical();
  }
  if (dst.is_neg()) {
    value = value.neg();
  }
  at::Tensor target = stored_view(dst);
  if (is_device(target)) {
    copy_from(value, target, false);
  } else {
    target.copy_(value);
  }
  return dst;
}

} // namespace

at::Tensor copy_from(const at::Tensor& src, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(src.defined() && dst.defined(), "copy_: both tensors must be defined");
  if (dst.numel() == 0) {
    return dst;
  }
  if (src._is_zerotensor()) {  // no memory behind it
    dst.zero_();
    return dst;
  }
  if (has_math_bits(src) || has_math_bits(dst)) {
    return copy_with_math_bits(src, dst);
  }
  at::Tensor source = src.sizes() == dst.sizes() ? src : src.expand(dst.sizes());
  const bool src_on_device = is_device(source);
  const bool dst_on_device = is_device(dst);
  if (src_on_device && dst_on_device) {
    if (source.device() == dst.device()) {
      copy_on_device(dst, source);
    } else {
      copy_across_devices(dst, source);
    }
  } else if (dst_on_device) {
    TORCH_CHECK(
        source.device().is_cpu(), "cannot copy from ", source.device(), " to ",
        dst.device(), "; move the tensor to the CPU first");
    copy_host_to_device(dst, source, non_blocking);
  } else {
    TORCH_CHECK(
        dst.device().is_cpu(), "cannot copy from ", source.device(), " to ",
        dst.device(), "; move the tensor to the CPU first");
    copy_device_to_host(dst, source, non_blocking);
  }
  return dst;
}

void resize_storage_bytes(const c10::Storage& storage, size_t new_size) {
  TORCH_CHECK(
      storage.resizable(), "trying to resize a storage that is not resizable");
  const c10::DeviceIndex device = storage.device().index();
  c10::DataPtr fresh = CachingAllocator::get().allocate_on(device, new_size);
  const size_t keep = std::min(new_size, storage.nbytes());
  if (keep > 0 && storage.data() != nullptr) {
    plugin_memcpy(
        TFL_COPY_DEVICE_TO_DEVICE, fresh.get(), device, storage.data(), device, keep,
        StreamRegistry::get().current_native(device), false);
  }
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
  storage.unsafeGetStorageImpl()->set_nbytes(new_size);
}

at::Tensor to_host(const at::Tensor& device_tensor) {
  at::Tensor host = at::empty_strided(
      device_tensor.sizes(),
      device_tensor.is_non_overlapping_and_dense()
          ? device_tensor.strides()
          : c10::contiguous_strides(device_tensor.sizes()),
      device_tensor.options().device(c10::kCPU));
  copy_device_to_host(host, device_tensor, false);
  return host;
}

at::Tensor to_host_same_layout(const at::Tensor& device_tensor) {
  if (device_tensor.is_non_overlapping_and_dense() || device_tensor.numel() == 0) {
    return to_host(device_tensor);
  }
  return read_extent(device_tensor);
}

at::Tensor to_device(const at::Tensor& host_tensor, c10::DeviceIndex device, bool non_blocking) {
  at::Tensor out = empty_device(
      host_tensor.sizes(),
      host_tensor.is_non_overlapping_and_dense()
          ? host_tensor.strides()
          : c10::contiguous_strides(host_tensor.sizes()),
      host_tensor.scalar_type(), device);
  copy_host_to_device(out, host_tensor, non_blocking);
  return out;
}

} // namespace torch_fl::bridge
