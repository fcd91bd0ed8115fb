// A stream-aware caching allocator over the plugin's raw device memory.
//
// Plugin allocations are slow (a driver call); tensors come and go at every
// op. So memory is taken from the plugin in segments, carved into blocks, and
// freed blocks are kept for reuse by the stream that freed them (which is
// ordered after every earlier use). A block used on other streams
// (record_stream) returns to the pool only once events on those streams have
// completed. When the plugin reports out-of-memory the cache is released and
// the allocation retried once before torch.OutOfMemoryError is raised.
#pragma once

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Stream.h>

#include <optional>

namespace torch_fl::bridge {

class DeviceCache; // one per device, in caching_allocator.cpp

class CachingAllocator final : public c10::DeviceAllocator {
 public:
  static CachingAllocator& get();
  void init(int device_count);

  // c10::Allocator: allocates on the current device for its current stream.
  c10::DataPtr allocate(size_t nbytes) override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  // c10::DeviceAllocator
  bool initialized() override;
  void emptyCache(c10::MempoolId_t mempool_id = {0, 0}) override;
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(
      c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override;

  // Allocates on an explicit device for its current stream.
  c10::DataPtr allocate_on(c10::DeviceIndex device, size_t nbytes);
  // The device whose memory holds `ptr`, if it came from this allocator.
  std::optional<c10::DeviceIndex> device_of(const void* ptr) const;
  // Releases the cache of every device (process exit).
  void release_all() noexcept;

 private:
  DeviceCache& cache(c10::DeviceIndex device) const;
};

// Makes the allocator PyTorch's allocator for PrivateUse1.
void register_allocator();

} // namespace torch_fl::bridge
