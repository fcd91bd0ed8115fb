#include "device_memory.h"

#include <cstdlib>

#include "torch_fl/plugin_helpers.h"

namespace {{ cookiecutter.package_slug }} {

namespace tfl = ::torch_fl::helpers;

namespace {

size_t round_up(size_t size, size_t alignment) { return (size + alignment - 1) / alignment * alignment; }

// The block of `blocks` that contains `ptr`, or end().
std::map<uintptr_t, size_t>::const_iterator containing(const std::map<uintptr_t, size_t>& blocks,
                                                        const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  auto it = blocks.upper_bound(address);
  if (it == blocks.begin()) return blocks.end();
  --it;
  return address < it->first + it->second ? it : blocks.end();
}

}  // namespace

DeviceMemory::DeviceMemory(int32_t device, uint64_t capacity) : device_(device), capacity_(capacity) {}

DeviceMemory::~DeviceMemory() {
  for (const auto& [start, size] : blocks_) std::free(reinterpret_cast<void*>(start));
}

void* DeviceMemory::allocate(size_t size) {
  if (size == 0) tfl::invalid_argument("size is 0 (the host never asks for an empty allocation)");
  const size_t rounded = round_up(size, kAlignment);
  std::lock_guard<std::mutex> lock(mu_);
  if (rounded > capacity_ - used_)
    tfl::fail(TFL_ERR_OUT_OF_MEMORY, "device ", device_, " is out of memory: requested ", size, " bytes, ",
         capacity_ - used_, " of ", capacity_, " bytes free");
  // VENDOR: your driver's device allocation goes here.
  void* ptr = std::aligned_alloc(kAlignment, rounded);
  if (ptr == nullptr)
    tfl::fail(TFL_ERR_OUT_OF_MEMORY, "device ", device_, ": the host could not back ", rounded, " bytes");
  blocks_.emplace(reinterpret_cast<uintptr_t>(ptr), rounded);
  used_ += rounded;
  return ptr;
}

void DeviceMemory::free(void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == blocks_.end())
    tfl::invalid_argument(ptr, " was not returned by Memory_Allocate on device ", device_, " (or was freed already)");
  used_ -= it->second;
  blocks_.erase(it);
  // VENDOR: your driver's device free goes here.
  std::free(ptr);
}

bool DeviceMemory::owns(const void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  return containing(blocks_, ptr) != blocks_.end();
}

void DeviceMemory::check_range(const void* ptr, size_t size, const char* what) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = containing(blocks_, ptr);
  if (it == blocks_.end()) tfl::invalid_argument(what, " ", ptr, " is not device memory of device ", device_);
  const uintptr_t end = reinterpret_cast<uintptr_t>(ptr) + size;
  if (end > it->first + it->second)
    tfl::invalid_argument(what, " ", ptr, " + ", size, " bytes runs past the end of its allocation of ", it->second,
                     " bytes on device ", device_);
}

uint64_t DeviceMemory::free_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return capacity_ - used_;
}

PinnedHostMemory::~PinnedHostMemory() {
  for (const auto& [start, size] : blocks_) std::free(reinterpret_cast<void*>(start));
}

void* PinnedHostMemory::allocate(size_t size) {
  if (size == 0) tfl::invalid_argument("size is 0");
  void* ptr = std::aligned_alloc(DeviceMemory::kAlignment, round_up(size, DeviceMemory::kAlignment));
  if (ptr == nullptr) tfl::fail(TFL_ERR_OUT_OF_MEMORY, "cannot allocate ", size, " bytes of pinned host memory");
  std::lock_guard<std::mutex> lock(mu_);
  blocks_.emplace(reinterpret_cast<uintptr_t>(ptr), size);
  return ptr;
}

void PinnedHostMemory::free(void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == blocks_.end())
    tfl::invalid_argument(ptr, " was not returned by HostMemory_Allocate (or was freed already)");
  blocks_.erase(it);
  std::free(ptr);
}

bool PinnedHostMemory::is_pinned(const void* ptr, size_t size) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = containing(blocks_, ptr);
  return it != blocks_.end() && reinterpret_cast<uintptr_t>(ptr) + size <= it->first + it->second;
}

}  // namespace {{ cookiecutter.package_slug }}
