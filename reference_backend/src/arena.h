// Device memory: one arena per emulated device, backed by a memfd so that the
// address handed to the host (the device address) and the address flemu
// itself works through (the alias) can be two mappings of the same pages.
#ifndef FLEMU_ARENA_H_
#define FLEMU_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <utility>

namespace flemu {

class Arena {
 public:
  static constexpr uint64_t kAlignment = 256;
  // Freed ranges at least this large give their pages back to the kernel.
  static constexpr uint64_t kReleaseThreshold = uint64_t{1} << 20;

  // Reserves `capacity` bytes of address space (pages materialize only when
  // touched). In strict mode the device addresses are PROT_NONE and only the
  // alias mapping is readable and writable.
  Arena(int32_t device, uint64_t capacity, bool strict);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Throws TFL_ERR_OUT_OF_MEMORY (with requested/free/total) when no free
  // range fits; TFL_ERR_INVALID_ARGUMENT for size 0.
  void* allocate(uint64_t size);
  // Throws TFL_ERR_INVALID_ARGUMENT for a pointer this arena did not hand out.
  // With `leak` the allocation is forgotten but its bytes stay in use.
  void free(void* ptr, bool leak = false);

  uint64_t capacity() const { return capacity_; }
  uint64_t free_bytes() const;
  uint64_t largest_free_block() const;
  int32_t device() const { return device_; }

  // Whether `p` is a device address of this arena (allocated or not).
  bool owns(const void* p) const {
    auto a = reinterpret_cast<uintptr_t>(p);
    return a >= device_base_ && a < device_base_ + capacity_;
  }
  // Whether [p, p+n) lies inside the arena's address range.
  bool owns_range(const void* p, uint64_t n) const {
    auto a = reinterpret_cast<uintptr_t>(p);
    return owns(p) && n <= capacity_ && a - device_base_ <= capacity_ - n;
  }
  // Throws TFL_ERR_INVALID_ARGUMENT unless [p, p+n) lies inside one live
  // allocation; `what` names the operand in the message.
  void check_allocated(const void* p, uint64_t n, const char* what) const;

  // Device address -> address flemu reads and writes (identity unless strict).
  char* to_host(const void* device_ptr) const {
    return alias_ + (reinterpret_cast<uintptr_t>(device_ptr) - device_base_);
  }
  bool owns_host_alias(const void* host_ptr, uint64_t n) const {
    auto a = reinterpret_cast<uintptr_t>(host_ptr);
    auto base = reinterpret_cast<uintptr_t>(alias_);
    return a >= base && n <= capacity_ && a - base <= capacity_ - n;
  }

 private:
  void insert_free(uint64_t offset, uint64_t size);  // coalesces; mutex held
  void erase_free(std::map<uint64_t, uint64_t>::iterator it);
  void release_pages(uint64_t offset, uint64_t size);

  int32_t device_;
  uint64_t capacity_;
  bool strict_;
  int fd_ = -1;
  char* device_map_ = nullptr;  // what the host sees
  char* alias_ = nullptr;       // what flemu uses; == device_map_ unless strict
  uintptr_t device_base_ = 0;

  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> free_by_offset_;         // offset -> size
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;  // (size, offset): best fit
  std::map<uint64_t, uint64_t> allocated_;              // offset -> size
  uint64_t allocated_bytes_ = 0;
};

}  // namespace flemu

#endif  // FLEMU_ARENA_H_
