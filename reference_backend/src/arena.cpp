#include "arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "errors.h"

namespace flemu {

namespace {

constexpr uint64_t kPage = 4096;

uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
uint64_t round_down(uint64_t v, uint64_t a) { return v / a * a; }


}  // namespace

Arena::Arena(int32_t device, uint64_t capacity, bool strict, bool guards)
    : device_(device), capacity_(round_up(capacity, kPage)), strict_(strict), guards_(guards) {
  const std::string name = cat("flemu-device-", device);
  fd_ = static_cast<int>(memfd_create(name.c_str(), MFD_CLOEXEC));
  if (fd_ < 0) fail(TFL_ERR_DEVICE, cat("memfd_create for device ", device, " failed: ", std::strerror(errno)));
  if (ftruncate(fd_, static_cast<off_t>(capacity_)) != 0) {
    const int e = errno;
    close(fd_);
    fail(TFL_ERR_DEVICE, cat("cannot size the memory of device ", device, " to ", capacity_,
                             " bytes: ", std::strerror(e)));
  }
  const int flags = MAP_SHARED | MAP_NORESERVE;
  void* dev = mmap(nullptr, capacity_, strict ? PROT_NONE : PROT_READ | PROT_WRITE, flags, fd_, 0);
  if (dev == MAP_FAILED) {
    const int e = errno;
    close(fd_);
    fail(TFL_ERR_DEVICE, cat("cannot map ", capacity_, " bytes for device ", device, ": ",
                             std::strerror(e), " (lower FLEMU_MEMORY_BYTES)"));
  }
  device_map_ = static_cast<char*>(dev);
  alias_ = device_map_;
  if (strict) {
    void* alias = mmap(nullptr, capacity_, PROT_READ | PROT_WRITE, flags, fd_, 0);
    if (alias == MAP_FAILED) {
      const int e = errno;
      munmap(device_map_, capacity_);
      close(fd_);
      fail(TFL_ERR_DEVICE, cat("cannot map the strict-mode alias of device ", device, ": ",
                               std::strerror(e)));
    }
    alias_ = static_cast<char*>(alias);
  }
  device_base_ = reinterpret_cast<uintptr_t>(device_map_);
  insert_free(0, capacity_);
}

Arena::~Arena() {
  if (alias_ != device_map_) munmap(alias_, capacity_);
  munmap(device_map_, capacity_);
  close(fd_);
}

void Arena::erase_free(std::map<uint64_t, uint64_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_offset_.erase(it);
}

void Arena::insert_free(uint64_t offset, uint64_t size) {
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      erase_free(prev);
    }
  }
  if (next != free_by_offset_.end() && offset + size == next->first) {
    size += next->second;
    erase_free(next);
  }
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
}

void* Arena::allocate(uint64_t size) {
  if (size == 0) invalid_argument("cannot allocate 0 bytes on device ", device_, " (size must be > 0)");
  const uint64_t guard = guards_ ? kGuardBytes : 0;
  const uint64_t need = size > capacity_ ? capacity_ + 1 : round_up(size, kAlignment) + 2 * guard;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = free_by_size_.lower_bound({need, 0});
  if (need > capacity_ || it == free_by_size_.end()) {
    const uint64_t largest = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
    fail(TFL_ERR_OUT_OF_MEMORY,
         cat("out of memory on device ", device_, ": requested ", size, " bytes, ",
             capacity_ - allocated_bytes_, " bytes free of ", capacity_,
             " total (largest free block ", largest, " bytes)"));
  }
  const uint64_t block_size = it->first, offset = it->second;
  free_by_size_.erase(it);
  free_by_offset_.erase(offset);
  if (block_size > need) {
    free_by_offset_.emplace(offset + need, block_size - need);
    free_by_size_.emplace(block_size - need, offset + need);
  }
  const Block block{offset, need, guards_ ? size : need};
  allocated_.emplace(offset + guard, block);
  allocated_bytes_ += need;
  if (guards_) paint_guards(offset + guard, block);
  return device_map_ + offset + guard;
}

void Arena::free(void* ptr, bool leak) {
  if (!owns(ptr)) invalid_argument(ptr, " is not a device address of device ", device_);
  const uint64_t user = reinterpret_cast<uintptr_t>(ptr) - device_base_;
  Block block{};
  std::string broken;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocated_.find(user);
    if (it == allocated_.end())
      invalid_argument("device ", device_, " has no allocation at ", ptr,
                       " (freed twice, or not the start of an allocation)");
    block = it->second;
    if (guards_) broken = broken_guard(user, block);
    allocated_.erase(it);
    if (!leak) allocated_bytes_ -= block.size;
  }
  if (!leak) {
    // The range is neither allocated nor free here, so nobody can be handed
    // it while its pages are dropped.
    release_pages(block.begin, block.size);
    std::lock_guard<std::mutex> lock(mu_);
    insert_free(block.begin, block.size);
  }
  if (!broken.empty())
    fail(TFL_ERR_INTERNAL, cat("out-of-bounds write found when the memory was freed: ", broken,
                               " (guard regions of FLEMU_CHECK_CONTRACTS=1)"));
}

void Arena::paint_guards(uint64_t user, const Block& b) {
  std::memset(alias_ + b.begin, kCanary, user - b.begin);
  const uint64_t end = user + b.usable;
  std::memset(alias_ + end, kCanary, b.begin + b.size - end);
}

std::string Arena::broken_guard(uint64_t user, const Block& b) const {
  // Eight bytes at a time: this runs after every kernel task under contract checking.
  auto first_broken = [this](uint64_t from, uint64_t to) -> int64_t {
    constexpr uint64_t kWord = 0x0101010101010101ull * kCanary;
    uint64_t o = from;
    for (; o + 8 <= to; o += 8) {
      uint64_t w;
      std::memcpy(&w, alias_ + o, 8);
      if (w != kWord) break;
    }
    for (; o < to; ++o)
      if (static_cast<uint8_t>(alias_[o]) != kCanary) return static_cast<int64_t>(o);
    return -1;
  };
  const void* start = device_map_ + user;
  const int64_t before = first_broken(b.begin, user);
  if (before >= 0)
    return cat("the guard region before the ", b.usable, "-byte allocation at ", start, " on device ", device_,
               " was overwritten ", user - static_cast<uint64_t>(before), " bytes before its start");
  const uint64_t end = user + b.usable;
  const int64_t after = first_broken(end, b.begin + b.size);
  if (after >= 0)
    return cat("the guard region after the ", b.usable, "-byte allocation at ", start, " on device ", device_,
               " was overwritten at byte ", static_cast<uint64_t>(after) - user, " (", static_cast<uint64_t>(after) - end,
               " bytes past its end)");
  return "";
}

bool Arena::find_allocation(const void* p, const void** start, uint64_t* size) const {
  if (!owns(p)) return false;
  const uint64_t offset = reinterpret_cast<uintptr_t>(p) - device_base_;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocated_.upper_bound(offset);
  if (it == allocated_.begin()) return false;
  --it;
  if (offset >= it->first + it->second.usable) return false;
  *start = device_map_ + it->first;
  *size = it->second.usable;
  return true;
}

std::string Arena::check_guards(const void* start) {
  if (!guards_ || !owns(start)) return "";
  const uint64_t user = reinterpret_cast<uintptr_t>(start) - device_base_;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocated_.find(user);
  if (it == allocated_.end()) return "";
  std::string broken = broken_guard(user, it->second);
  if (!broken.empty()) paint_guards(user, it->second);
  return broken;
}

std::vector<std::string> Arena::check_all_guards() {
  std::vector<std::string> broken;
  if (!guards_) return broken;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [user, block] : allocated_) {
    std::string b = broken_guard(user, block);
    if (b.empty()) continue;
    paint_guards(user, block);
    broken.push_back(std::move(b));
  }
  return broken;
}

void Arena::release_pages(uint64_t offset, uint64_t size) {
  const uint64_t begin = round_up(offset, kPage), end = round_down(offset + size, kPage);
  if (end <= begin || end - begin < kReleaseThreshold) return;
  // Best effort: failing to punch only keeps memory resident.
  (void)fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(begin),
                  static_cast<off_t>(end - begin));
}

uint64_t Arena::free_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return capacity_ - allocated_bytes_;
}

uint64_t Arena::largest_free_block() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

void Arena::check_allocated(const void* p, uint64_t n, const char* what) const {
  if (!owns(p)) invalid_argument(what, " ", p, " is not a device address of device ", device_);
  const uint64_t offset = reinterpret_cast<uintptr_t>(p) - device_base_;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = allocated_.upper_bound(offset);
  if (it == allocated_.begin())
    invalid_argument(what, " ", p, " on device ", device_, " is not inside a live allocation");
  --it;
  const uint64_t start = it->first, len = it->second.usable;
  if (offset >= start + len)
    invalid_argument(what, " ", p, " on device ", device_, " is not inside a live allocation");
  if (n > start + len - offset)
    invalid_argument(what, " range [", p, ", +", n, " bytes) on device ", device_,
                     " runs past the end of its allocation (", len - (offset - start), " bytes left)");
}

}  // namespace flemu
