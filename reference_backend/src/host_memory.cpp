#include "host_memory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "errors.h"

namespace flemu {

HostMemory::~HostMemory() {
  for (const auto& [addr, size] : blocks_) munmap(reinterpret_cast<void*>(addr), size);
}

void* HostMemory::allocate(uint64_t size) {
  if (size == 0) invalid_argument("cannot allocate 0 bytes of pinned host memory (size must be > 0)");
  // mmap gives page alignment and returns the pages to the system on free.
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    fail(TFL_ERR_OUT_OF_MEMORY,
         cat("cannot allocate ", size, " bytes of pinned host memory: ", std::strerror(errno)));
  std::lock_guard<std::mutex> lock(mu_);
  blocks_.emplace(reinterpret_cast<uintptr_t>(p), size);
  return p;
}

void HostMemory::free(void* ptr) {
  uint64_t size = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == blocks_.end())
      invalid_argument(ptr, " is not pinned host memory from HostMemory_Allocate (freed twice?)");
    size = it->second;
    blocks_.erase(it);
  }
  munmap(ptr, size);
}

bool HostMemory::is_pinned(const void* p, uint64_t n) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.upper_bound(a);
  if (it == blocks_.begin()) return false;
  --it;
  return a - it->first < it->second && n <= it->second - (a - it->first);
}

}  // namespace flemu
