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
#include <string>
#include <utility>
#include <vector>

namespace flemu {

class Arena {
 public:
  static constexpr uint64_t kAlignment = 256;
  // Freed ranges at least this large give their pages back to the kernel.
  static constexpr uint64_t kReleaseThreshold = uint64_t{1} << 20;

  // Guard regions under FLEMU_CHECK_CONTRACTS: canary bytes before each
  // allocation (kGuardBytes, keeping the alignment) and from its requested
  // end to kGuardBytes past its 256-byte rounding.
  static constexpr uint64_t kGuardBytes = 256;
  static constexpr uint8_t kCanary = 0xFD;

  // Reserves `capacity` bytes of address space (pages materialize only when
  // touched). In strict mode the device addresses are PROT_NONE and only the
  // alias mapping is readable and writable. With `guards`, every allocation
  // is surrounded by canaries (see check_guards).
  Arena(int32_t device, uint64_t capacity, bool strict, bool guards = false);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Throws TFL_ERR_OUT_OF_MEMORY (with requested/free/total) when no free
  // range fits; TFL_ERR_INVALID_ARGUMENT for size 0.
  void* allocate(uint64_t size);
  // Throws TFL_ERR_INVALID_ARGUMENT for a pointer this arena did not hand out.
  // With `leak` the allocation is forgotten but its bytes stay in use. With
  // guards, a broken canary is reported (TFL_ERR_INTERNAL) after the free.
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

  // The live allocation holding device address `p`: its start and usable
  // size (what was asked for with guards, else the 256-byte rounding).
  // False when `p` is in no live allocation.
  bool find_allocation(const void* p, const void** start, uint64_t* size) const;

  bool guards() const { return guards_; }
  // With guards: "" while the canaries of the allocation starting at device
  // address `start` are intact (or it is gone); otherwise what was
  // overwritten, and the canaries are repainted so it is reported once.
  std::string check_guards(const void* start);
  // The same for every live allocation; one description per broken one.
  std::vector<std::string> check_all_guards();

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
  // A live allocation, keyed by the offset handed out (its user offset).
  struct Block {
    uint64_t begin;  // offset of the block, front guard included
    uint64_t size;   // bytes of the block, guards included
    uint64_t usable; // bytes from the user offset the holder may touch
  };

  void insert_free(uint64_t offset, uint64_t size);  // coalesces; mutex held
  void erase_free(std::map<uint64_t, uint64_t>::iterator it);
  void release_pages(uint64_t offset, uint64_t size);
  void paint_guards(uint64_t user, const Block& b);
  std::string broken_guard(uint64_t user, const Block& b) const;  // "" when intact

  int32_t device_;
  uint64_t capacity_;
  bool strict_;
  bool guards_;
  int fd_ = -1;
  char* device_map_ = nullptr;  // what the host sees
  char* alias_ = nullptr;       // what flemu uses; == device_map_ unless strict
  uintptr_t device_base_ = 0;

  mutable std::mutex mu_;
  std::map<uint64_t, uint64_t> free_by_offset_;         // offset -> size
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;  // (size, offset): best fit
  std::map<uint64_t, Block> allocated_;                 // user offset -> block
  uint64_t allocated_bytes_ = 0;
};

}  // namespace flemu

#endif  // FLEMU_ARENA_H_
