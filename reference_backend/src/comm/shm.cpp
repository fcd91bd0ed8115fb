#include "shm.h"

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <string>
#include <vector>

#include "reduce.h"
#include "../errors.h"
#include "../runtime.h"
#include "../stream.h"

namespace flemu::comm {

namespace {

// One rank's row of the shared control segment. `progress` only grows: it is
// 3 * (shared-memory operations started) + the phase reached (1: buffers
// posted, 2: this rank's reads of the first phase done, 3: finished), and
// it is the futex word the other ranks sleep on.
struct alignas(64) Slot {
  std::atomic<uint32_t> progress;
  std::atomic<uint32_t> kind;
  std::atomic<uint64_t> seq;
  std::atomic<uint64_t> bytes;
  std::atomic<uint64_t> send_off;  // byte offsets in this rank's device memory file
  std::atomic<uint64_t> recv_off;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "the futex word must be a plain 32-bit word");

// What each rank tells the others at setup (through the TCP mesh).
struct SetupInfo {
  int32_t pid;
  int32_t want;          // 0: this rank cannot or will not use the path
  int32_t control_fd;    // rank 0: its control segment
  int32_t arena_fd;      // this rank's device memory file
  uint64_t arena_inode;
  uint64_t arena_size;
};

constexpr uint32_t kPosted = 1, kRead = 2, kFinished = 3;

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* timeout) {
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, timeout, nullptr, 0);
}

// The mapping of this process's address space that contains `p`:
// its start, the file offset there and the file's inode.
bool find_mapping(const void* p, uintptr_t* start, uint64_t* file_offset, uint64_t* inode) {
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return false;
  const auto addr = reinterpret_cast<uintptr_t>(p);
  char line[512];
  bool found = false;
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    unsigned long lo = 0, hi = 0, off = 0, ino = 0;
    char perms[8] = {}, dev[16] = {};
    if (std::sscanf(line, "%lx-%lx %7s %lx %15s %lu", &lo, &hi, perms, &off, dev, &ino) != 6) continue;
    if (addr >= lo && addr < hi) {
      *start = lo;
      *file_offset = off;
      *inode = ino;
      found = ino != 0;
      break;
    }
  }
  std::fclose(f);
  return found;
}

// A descriptor of this process open on the file with `inode`.
int find_fd(uint64_t inode) {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int result = -1;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    struct stat st {};
    if (fstat(static_cast<int>(fd), &st) == 0 && static_cast<uint64_t>(st.st_ino) == inode && S_ISREG(st.st_mode)) {
      result = static_cast<int>(fd);
      break;
    }
  }
  closedir(d);
  return result;
}

// Maps another process's descriptor through /proc; nullptr on failure.
char* map_peer_fd(int32_t pid, int32_t fd, uint64_t size, uint64_t inode) {
  const std::string path = cat("/proc/", pid, "/fd/", fd);
  Fd f(::open(path.c_str(), O_RDWR | O_CLOEXEC));
  if (!f.valid()) return nullptr;
  struct stat st {};
  if (fstat(f.get(), &st) != 0 || (inode != 0 && static_cast<uint64_t>(st.st_ino) != inode) ||
      static_cast<uint64_t>(st.st_size) < size)
    return nullptr;
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, f.get(), 0);
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

class ShmPath final : public SharedMemoryPath {
 public:
  ShmPath(Communicator& comm) : comm_(comm), n_(comm.size()), rank_(comm.rank()) {}

  ~ShmPath() override {
    for (int p = 0; p < n_; ++p)
      if (p != rank_ && peer_base_[p] != nullptr) munmap(peer_base_[p], peer_size_[p]);
    if (control_ != nullptr) munmap(control_, control_bytes_);
  }

  bool setup() {
    const int32_t device = comm_.device();
    SetupInfo mine{};
    mine.pid = static_cast<int32_t>(getpid());
    mine.want = tuning().shared_memory ? 1 : 0;
    mine.control_fd = -1;
    control_bytes_ = (sizeof(Slot) * static_cast<size_t>(n_) + 4095) / 4096 * 4096;
    // Locate this rank's device memory file through a probe allocation.
    if (mine.want) {
      Arena& arena = runtime().device(device).arena;
      void* probe = nullptr;
      try {
        probe = arena.allocate(Arena::kAlignment);
      } catch (const Error&) {
        mine.want = 0;
      }
      if (probe != nullptr) {
        const char* alias = arena.to_host(probe);
        uintptr_t start = 0;
        uint64_t offset = 0, inode = 0;
        if (find_mapping(alias, &start, &offset, &inode)) {
          own_base_ = reinterpret_cast<char*>(start) - offset;
          mine.arena_inode = inode;
          mine.arena_fd = find_fd(inode);
          struct stat st {};
          if (mine.arena_fd >= 0 && fstat(mine.arena_fd, &st) == 0) mine.arena_size = static_cast<uint64_t>(st.st_size);
          else mine.want = 0;
        } else {
          mine.want = 0;
        }
        arena.free(probe);
      }
    }
    if (mine.want && rank_ == 0) {
      control_fd_ = Fd(static_cast<int>(syscall(SYS_memfd_create, "flemu-comm-control", MFD_CLOEXEC)));
      if (!control_fd_.valid() || ftruncate(control_fd_.get(), static_cast<off_t>(control_bytes_)) != 0) {
        mine.want = 0;
      } else {
        mine.control_fd = control_fd_.get();
      }
    }
    std::vector<SetupInfo> all(static_cast<size_t>(n_));
    comm_.all_gather(reinterpret_cast<const char*>(&mine), reinterpret_cast<char*>(all.data()), sizeof(SetupInfo),
                     TFL_DTYPE_UINT8);
    uint8_t ok = 1;
    for (const SetupInfo& s : all) ok = ok && s.want;
    peer_base_.assign(static_cast<size_t>(n_), nullptr);
    peer_size_.assign(static_cast<size_t>(n_), 0);
    if (ok) {
      if (rank_ == 0) {
        void* p = mmap(nullptr, control_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, control_fd_.get(), 0);
        control_ = p == MAP_FAILED ? nullptr : static_cast<char*>(p);
      } else {
        control_ = map_peer_fd(all[0].pid, all[0].control_fd, control_bytes_, 0);
      }
      ok = control_ != nullptr;
      for (int p = 0; p < n_ && ok; ++p) {
        if (p == rank_) {
          peer_base_[p] = own_base_;
          continue;
        }
        peer_size_[p] = all[p].arena_size;
        peer_base_[p] = map_peer_fd(all[p].pid, all[p].arena_fd, all[p].arena_size, all[p].arena_inode);
        ok = peer_base_[p] != nullptr;
      }
    }
    // Every rank must decide the same: the path is used only if all can.
    uint8_t all_ok = ok;
    comm_.all_reduce(reinterpret_cast<const char*>(&ok), reinterpret_cast<char*>(&all_ok), 1, TFL_DTYPE_UINT8,
                     TFL_REDUCE_MIN);
    peer_base_[rank_] = nullptr;  // never unmapped: it is the arena's own mapping
    if (!all_ok) return false;
    peer_base_[rank_] = own_base_;
    slots_ = reinterpret_cast<Slot*>(control_);
    return true;
  }

  bool all_reduce(const OpContext& ctx, const char* send, char* recv, size_t count, int32_t dtype,
                  int32_t op) override {
    const size_t es = static_cast<size_t>(element_size(dtype));
    post(ctx, send, recv, count * es);
    wait_all(ctx, kPosted);
    // Phase 1: this rank reduces chunk `rank` across every rank's input,
    // starting from its own so an in-place input is read before written.
    const size_t base = count / n_, rem = count % n_;
    const size_t start = rank_ * base + std::min<size_t>(rank_, rem);
    const size_t len = base + (static_cast<size_t>(rank_) < rem ? 1 : 0);
    char* out = recv + start * es;
    if (len > 0) {
      const char* own = send + start * es;
      if (n_ == 1) {
        std::memmove(out, own, len * es);
      } else {
        const int first = (rank_ + 1) % n_;
        reduce_to(out, own, peer_send(first) + start * es, len, dtype, op);
        for (int k = 2; k < n_; ++k) reduce_into(out, peer_send((rank_ + k) % n_) + start * es, len, dtype, op);
      }
      finish_reduction(out, len, dtype, op, n_);
    }
    advance(kRead);
    wait_all(ctx, kRead);
    // Phase 2: copy every other rank's reduced chunk.
    for (int k = 1; k < n_; ++k) {
      const int p = (rank_ + k) % n_;
      const size_t s = p * base + std::min<size_t>(p, rem), l = base + (static_cast<size_t>(p) < rem ? 1 : 0);
      if (l > 0) std::memcpy(recv + s * es, peer_recv(p) + s * es, l * es);
    }
    finish(ctx);
    return true;
  }

  bool all_gather(const OpContext& ctx, char* recv, size_t chunk) override {
    post(ctx, nullptr, recv, chunk);
    wait_all(ctx, kPosted);
    for (int k = 1; k < n_; ++k) {
      const int p = (rank_ + k) % n_;
      if (chunk > 0) std::memcpy(recv + p * chunk, peer_recv(p) + p * chunk, chunk);
    }
    finish(ctx);
    return true;
  }

  bool reduce_scatter(const OpContext& ctx, const char* send, char* recv, size_t count, int32_t dtype,
                      int32_t op) override {
    const size_t es = static_cast<size_t>(element_size(dtype)), chunk = count * es;
    post(ctx, send, recv, chunk);
    wait_all(ctx, kPosted);
    if (count > 0) {
      const size_t at = static_cast<size_t>(rank_) * chunk;
      const int first = (rank_ + 1) % n_;
      reduce_to(recv, send + at, peer_send(first) + at, count, dtype, op);
      for (int k = 2; k < n_; ++k) reduce_into(recv, peer_send((rank_ + k) % n_) + at, count, dtype, op);
      finish_reduction(recv, count, dtype, op, n_);
    }
    finish(ctx);
    return true;
  }

  bool broadcast(const OpContext& ctx, char* buf, size_t bytes, int root) override {
    post(ctx, nullptr, buf, bytes);
    wait_all(ctx, kPosted);
    if (rank_ != root && bytes > 0) std::memcpy(buf, peer_recv(root), bytes);
    finish(ctx);
    return true;
  }

 private:
  uint64_t offset_of(const char* p) const { return p == nullptr ? 0 : static_cast<uint64_t>(p - own_base_); }
  const char* peer_send(int p) const {
    return peer_base_[p] + slots_[p].send_off.load(std::memory_order_relaxed);
  }
  const char* peer_recv(int p) const {
    return peer_base_[p] + slots_[p].recv_off.load(std::memory_order_relaxed);
  }

  // Publishes this rank's buffers for the operation and reaches phase 1.
  void post(const OpContext& ctx, const char* send, char* recv, size_t bytes) {
    ++ops_;
    Slot& s = slots_[rank_];
    s.kind.store(static_cast<uint32_t>(ctx.kind), std::memory_order_relaxed);
    s.seq.store(ctx.seq, std::memory_order_relaxed);
    s.bytes.store(bytes, std::memory_order_relaxed);
    s.send_off.store(offset_of(send != nullptr ? send : recv), std::memory_order_relaxed);
    s.recv_off.store(offset_of(recv), std::memory_order_relaxed);
    advance(kPosted);  // releases the fields above
  }

  void advance(uint32_t phase) {
    Slot& s = slots_[rank_];
    s.progress.store(static_cast<uint32_t>(3 * ops_ + phase - 3), std::memory_order_release);
    futex(&s.progress, FUTEX_WAKE, INT_MAX, nullptr);
  }

  // Both phases done here; wait until no other rank still reads this rank's
  // buffers before the stream may reuse them.
  void finish(const OpContext& ctx) {
    advance(kRead);
    advance(kFinished);
    wait_all(ctx, kFinished);
  }

  void wait_all(const OpContext& ctx, uint32_t phase) {
    const uint32_t target = static_cast<uint32_t>(3 * ops_ + phase - 3);
    for (int k = 1; k < n_; ++k) {
      const int p = (rank_ + k) % n_;
      wait_for(ctx, p, target, phase);
      if (phase == kPosted) check_same_call(ctx, p);
    }
  }

  // The peer's slot describes this operation unless the peer has already
  // moved past it; read it between two loads of its progress, like a
  // sequence lock.
  void check_same_call(const OpContext& ctx, int p) {
    const Slot& s = slots_[p];
    const uint32_t last_phase = static_cast<uint32_t>(3 * ops_);
    const uint32_t before = s.progress.load(std::memory_order_acquire);
    const auto kind = s.kind.load(std::memory_order_relaxed);
    const uint64_t seq = s.seq.load(std::memory_order_relaxed);
    const uint64_t bytes = s.bytes.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    const uint32_t after = s.progress.load(std::memory_order_relaxed);
    if (static_cast<int32_t>(before - last_phase) > 0 || before != after) return;
    if (kind != static_cast<uint32_t>(ctx.kind) || seq != ctx.seq)
      comm_.fail(ctx, TFL_ERR_INVALID_ARGUMENT,
                 cat("rank ", p, " is in ", op_kind_name(static_cast<OpKind>(kind)), " #", seq,
                     " while this rank is in ", ctx.name,
                     ": every rank must call the operations of a communicator in the same order"));
    const uint64_t mine = slots_[rank_].bytes.load(std::memory_order_relaxed);
    if (bytes != mine)
      comm_.fail(ctx, TFL_ERR_INVALID_ARGUMENT,
                 cat("rank ", p, " passed ", bytes, " bytes but this rank ", mine,
                     ": the ranks passed different counts or dtypes"));
  }

  void wait_for(const OpContext& ctx, int p, uint32_t target, uint32_t phase) {
    std::atomic<uint32_t>& word = slots_[p].progress;
    for (int spin = 0;; ++spin) {
      const uint32_t v = word.load(std::memory_order_acquire);
      if (static_cast<int32_t>(v - target) >= 0) return;
      if (spin < 256) {
        cpu_relax();
        continue;
      }
      if (comm_.broken()) comm_.rethrow_broken(&ctx);
      const int64_t left = ctx.deadline_ms - now_ms();
      if (left <= 0)
        comm_.fail(ctx, TFL_ERR_TIMEOUT,
                   cat("timed out after ", comm_.timeout_ms(), " ms: rank ", p,
                       phase == kPosted ? " has not joined the operation"
                                        : " has not finished reading this rank's buffers",
                       " (a rank that has not called the operation, is stuck, or died)"));
      // Sleep until the word changes; wake up now and then to notice a
      // failure or the deadline.
      timespec ts{0, static_cast<long>(std::min<int64_t>(left, 20)) * 1'000'000L};
      futex(&word, FUTEX_WAIT, v, &ts);
    }
  }

  Communicator& comm_;
  const int n_;
  const int rank_;
  uint64_t ops_ = 0;
  char* own_base_ = nullptr;
  Fd control_fd_;
  char* control_ = nullptr;
  size_t control_bytes_ = 0;
  Slot* slots_ = nullptr;
  std::vector<char*> peer_base_;
  std::vector<uint64_t> peer_size_;
};

}  // namespace

std::unique_ptr<SharedMemoryPath> SharedMemoryPath::create(Communicator& comm) {
  // Only when every rank shares this host and pid namespace (the same for
  // every rank: they all hold the same table).
  const auto& peers = comm.peers();
  for (const PeerInfo& p : peers)
    if (std::strncmp(p.host_key, peers[0].host_key, sizeof(p.host_key)) != 0) return nullptr;
  auto path = std::make_unique<ShmPath>(comm);
  if (!path->setup()) return nullptr;
  return path;
}

}  // namespace flemu::comm
