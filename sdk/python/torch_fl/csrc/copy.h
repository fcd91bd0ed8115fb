// The copy engine: every byte that moves between host and device, or between
// devices, goes through here.
//
// Dense tensors with matching layouts move as one Memory_Copy. Strided or
// dtype-changing copies on a device use the plugin's "aten::copy_" kernel
// when it has one; otherwise they are staged through the host. Copies across
// devices use peer copies where the plugin allows them and the host where not.
#pragma once

#include <torch_fl/plugin_api.h>

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

namespace torch_fl::bridge {

// The semantics of aten::_copy_from(src, dst): copies src (broadcast to dst's
// shape, cast to dst's dtype) into dst. Returns dst.
at::Tensor copy_from(const at::Tensor& src, const at::Tensor& dst, bool non_blocking);

// Grows a device storage to `new_size` bytes, keeping its contents.
void resize_storage_bytes(const c10::Storage& storage, size_t new_size);

// A CPU tensor with the values of a device tensor (blocking).
at::Tensor to_host(const at::Tensor& device_tensor);
// The same with the device tensor's sizes and strides, gaps and stride-0
// dimensions included (a view of a host copy of its storage extent): what
// the CPU fallback hands a kernel, since some kernels and their backward
// formulas branch on an input's layout (linalg_det factors A^T of a
// contiguous A and its backward asks A again).
at::Tensor to_host_same_layout(const at::Tensor& device_tensor);
// A new device tensor with the values of a CPU tensor.
at::Tensor to_device(const at::Tensor& host_tensor, c10::DeviceIndex device, bool non_blocking = false);

// Bytes moved between host and device by this thread so far.
uint64_t& transfer_bytes();

// The plugin's strided copy/cast kernel, if it registered "aten::copy_";
// used only for the dtypes it declares.
void set_copy_kernel(const TFL_KernelDesc* desc);

// Wraps TFL_Memory_Copy.
void plugin_memcpy(
    TFL_CopyKind kind,
    void* dst,
    int dst_device,
    const void* src,
    int src_device,
    size_t size,
    TFL_Stream* stream,
    bool blocking);

} // namespace torch_fl::bridge
