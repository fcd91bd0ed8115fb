// Pinned host memory from the plugin, cached by size class.
//
// A pinned buffer handed to an asynchronous copy must not be reused before
// the copy has run, so every such use records an event and a freed buffer
// waits for its events before it is handed out again.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/Stream.h>

namespace torch_fl::bridge {

class HostAllocator final : public c10::Allocator {
 public:
  static HostAllocator& get();

  c10::DataPtr allocate(size_t nbytes) override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  // Whether `ptr` points into pinned memory from this allocator.
  bool is_pinned(const void* ptr) const;
  // Marks the pinned buffer holding `ptr` as used by work queued on `stream`.
  void record_use(const void* ptr, const c10::Stream& stream);
  // Returns unused cached buffers to the plugin.
  void empty_cache();
};

} // namespace torch_fl::bridge
