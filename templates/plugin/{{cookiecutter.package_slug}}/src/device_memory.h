// Memory of the emulated device, and pinned host memory.
//
// VENDOR: this is the file your driver replaces first. The emulation hands out
// ordinary host memory as "device memory" and keeps the bookkeeping a driver
// keeps too (live blocks, capacity), so bad pointers and out-of-memory are
// reported the way the ABI asks. With real hardware, allocate() calls your
// driver's device malloc, and check_range() may become a cheap sanity check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace {{ cookiecutter.package_slug }} {

class DeviceMemory {
 public:
  // Every pointer allocate() returns is aligned to this (reported to the host
  // as TFL_DeviceProperties.memory_alignment).
  static constexpr size_t kAlignment = 256;

  DeviceMemory(int32_t device, uint64_t capacity);
  ~DeviceMemory();  // releases blocks still held (abandoned at shutdown)
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // Throws tfl::Error (TFL_ERR_OUT_OF_MEMORY) when `size` more bytes do not fit.
  void* allocate(size_t size);
  // Throws tfl::Error (TFL_ERR_INVALID_ARGUMENT) for a pointer allocate() did not return.
  void free(void* ptr);
  // Whether `ptr` lies inside a live block of this device.
  bool owns(const void* ptr) const;
  // Throws unless [ptr, ptr + size) lies inside one live block; `what` names
  // the argument in the message ("src", "dst").
  void check_range(const void* ptr, size_t size, const char* what) const;

  uint64_t capacity() const { return capacity_; }
  uint64_t free_bytes() const;

 private:
  const int32_t device_;
  const uint64_t capacity_;
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> blocks_;  // start address -> rounded size
  uint64_t used_ = 0;
};

// Page-locked host memory for truly asynchronous copies. The emulation only
// remembers which ranges are "pinned".
// VENDOR: call your driver's pinned-host allocator here.
class PinnedHostMemory {
 public:
  ~PinnedHostMemory();
  void* allocate(size_t size);
  void free(void* ptr);
  // Whether [ptr, ptr + size) lies inside one pinned block.
  bool is_pinned(const void* ptr, size_t size) const;

 private:
  mutable std::mutex mu_;
  std::map<uintptr_t, size_t> blocks_;
};

}  // namespace {{ cookiecutter.package_slug }}
