// The same-host fast path: when every rank of a communicator runs on this
// host (same boot, same pid namespace), ranks read each other's device
// memory directly — the way devices on one board use peer-to-peer links —
// instead of copying it through TCP.
//
// flemu device memory is a shared memfd mapping; each rank opens its peers'
// arenas through /proc/<pid>/fd/<fd> and maps them once. A small shared
// control segment carries, per rank, the buffer offsets of the current
// operation and progress counters; ranks spin on those counters with the
// operation's deadline, and poll the TCP mesh (which stays connected) to
// notice a peer that died. Anything that cannot use this path (a peer on
// another host, memory that is not a shared mapping, a failed open) falls
// back to TCP for the whole communicator, decided once at Comm_Init.
#ifndef FLEMU_COMM_SHM_H_
#define FLEMU_COMM_SHM_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "communicator.h"

namespace flemu::comm {

class SharedMemoryPath {
 public:
  // nullptr when the ranks do not all share this host or the segment
  // cannot be set up; collective over all ranks (uses the TCP mesh).
  static std::unique_ptr<SharedMemoryPath> create(Communicator& comm);
  virtual ~SharedMemoryPath() = default;

  // Each returns false when this call cannot use shared memory (e.g. a
  // buffer outside the device arena); the caller then uses TCP. The decision
  // is the same on every rank.
  virtual bool all_reduce(const OpContext& ctx, const char* send, char* recv, size_t count, int32_t dtype,
                          int32_t op) = 0;
  virtual bool all_gather(const OpContext& ctx, char* recv, size_t chunk_bytes) = 0;
  virtual bool reduce_scatter(const OpContext& ctx, const char* send, char* recv, size_t count, int32_t dtype,
                              int32_t op) = 0;
  virtual bool broadcast(const OpContext& ctx, char* buf, size_t bytes, int root) = 0;
};

}  // namespace flemu::comm

#endif  // FLEMU_COMM_SHM_H_
