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

} // namespace torch_fl::bridge
