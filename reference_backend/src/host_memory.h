// Pinned ("page-locked") host memory: page-aligned allocations that flemu
// tracks so copies can tell whether a host buffer may be used asynchronously.
#ifndef FLEMU_HOST_MEMORY_H_
#define FLEMU_HOST_MEMORY_H_

#include <cstdint>
#include <map>
#include <mutex>

namespace flemu {

class HostMemory {
 public:
  HostMemory() = default;
  ~HostMemory();
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;

  void* allocate(uint64_t size);  // throws OOM / invalid argument
  void free(void* ptr);           // throws for a pointer not from allocate
  // Whether [p, p+n) lies inside one pinned allocation.
  bool is_pinned(const void* p, uint64_t n) const;

 private:
  mutable std::mutex mu_;
  std::map<uintptr_t, uint64_t> blocks_;  // address -> size
};

}  // namespace flemu

#endif  // FLEMU_HOST_MEMORY_H_
