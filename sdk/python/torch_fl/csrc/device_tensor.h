// Creating tensors in device memory without a trip through the dispatcher.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/MemoryFormat.h>

#include <optional>

namespace torch_fl::bridge {

at::Tensor empty_device(
    c10::IntArrayRef sizes,
    c10::IntArrayRef strides,
    c10::ScalarType dtype,
    c10::DeviceIndex device);

at::Tensor empty_device(
    c10::IntArrayRef sizes,
    c10::ScalarType dtype,
    c10::DeviceIndex device,
    std::optional<c10::MemoryFormat> memory_format = std::nullopt);

// A tensor whose layout was checked and sized before (a cached OutSpec):
// `nbytes` is the storage its sizes and strides span.
at::Tensor empty_device_sized(
    c10::IntArrayRef sizes,
    c10::IntArrayRef strides,
    size_t nbytes,
    c10::ScalarType dtype,
    c10::DeviceIndex device);

} // namespace torch_fl::bridge
