#include "device_tensor.h"

#include "caching_allocator.h"
#include "loaded_plugin.h"

#include <ATen/EmptyTensor.h>

#include <array>
#include <atomic>

namespace torch_fl::bridge {

namespace {

// Allocates through the caching allocator for `device` (the c10::Allocator
// interface only knows the current device).
class DeviceBoundAllocator final : public c10::Allocator {
 public:
  explicit DeviceBoundAllocator(c10::DeviceIndex device) : device_(device) {}
  c10::DataPtr allocate(size_t nbytes) override {
    return CachingAllocator::get().allocate_on(device_, nbytes);
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    CachingAllocator::get().copy_data(dest, src, count);
  }

 private:
  c10::DeviceIndex device_;
};

c10::Allocator* allocator_for(c10::DeviceIndex device) {
  static std::array<std::atomic<DeviceBoundAllocator*>, 64> allocators{};
  // An index out of range is refused before it indexes the table; one in
  // range has its allocator once it was checked against the plugin's devices.
  if (device < 0 || static_cast<size_t>(device) >= allocators.size()) {
    check_device_index(device);
    TORCH_CHECK(false, "device index ", static_cast<int>(device), " is beyond the 64 torch-fl supports");
  }
  DeviceBoundAllocator* allocator = allocators[device].load(std::memory_order_acquire);
  if (allocator == nullptr) {
    check_device_index(device);
    auto* fresh = new DeviceBoundAllocator(device);
    if (allocators[device].compare_exchange_strong(allocator, fresh)) {
      allocator = fresh;
    } else {
      delete fresh;
    }
  }
  return allocator;
}

constexpr c10::DispatchKeySet kDeviceKeys(c10::DispatchKey::PrivateUse1);

} // namespace

at::Tensor empty_device(
    c10::IntArrayRef sizes,
    c10::IntArrayRef strides,
    c10::ScalarType dtype,
    c10::DeviceIndex device) {
  return at::detail::empty_strided_generic(
      sizes, strides, allocator_for(device), kDeviceKeys, dtype);
}

at::Tensor empty_device(
    c10::IntArrayRef sizes,
    c10::ScalarType dtype,
    c10::DeviceIndex device,
    std::optional<c10::MemoryFormat> memory_format) {
  return at::detail::empty_generic(
      sizes, allocator_for(device), kDeviceKeys, dtype, memory_format);
}

at::Tensor empty_device_sized(
    c10::IntArrayRef sizes,
    c10::IntArrayRef strides,
    size_t nbytes,
    c10::ScalarType dtype,
    c10::DeviceIndex device) {
  // empty_strided_generic without its checks and size computation: the
  // spec was checked and sized once, when its cache entry was made.
  c10::Allocator* allocator = allocator_for(device);
  auto storage = c10::make_intrusive<c10::StorageImpl>(
      c10::StorageImpl::use_byte_size_t(), static_cast<int64_t>(nbytes), allocator->allocate(nbytes), allocator,
      /*resizable=*/true);
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), kDeviceKeys, c10::scalarTypeToTypeMeta(dtype));
  t.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);
  return t;
}

} // namespace torch_fl::bridge
