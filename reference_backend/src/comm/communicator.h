// A flemu communicator: one rank's end of a group of processes that run
// collectives together over TCP.
//
// Bootstrap. Rank 0's TFL_Comm_GetUniqueId opens a listening socket; the id
// carries its address, port and a random nonce. Every other rank connects to
// it and says hello (nonce, rank, world size, the address of its own data
// listener); rank 0 answers with the table of all ranks; then every pair of
// ranks connects directly, twice: one connection for collectives, one for
// send/recv, so that a send on one stream and a collective on another never
// interleave bytes. The connections to rank 0 stay open as a control star.
//
// Failure. A monitor thread watches the control star. When a rank's process
// dies, rank 0 sees its control connection close and tells everyone "rank k
// disconnected"; when an operation fails on a rank (a timeout, a lost peer,
// mismatched calls) that rank reports it to rank 0, which forwards it. Every
// operation in flight is woken through an eventfd and fails with that
// message; the communicator stays broken and later operations fail at once.
// Nothing waits without a deadline: each operation has `timeout_ms` from the
// moment it starts running on its stream.
//
// Framing. Every message starts with a 24-byte header (operation kind, the
// communicator's sequence number, step, payload bytes), so ranks that call
// collectives in a different order or with different sizes get an error
// naming both sides instead of corrupted data or a hang.
#ifndef FLEMU_COMM_COMMUNICATOR_H_
#define FLEMU_COMM_COMMUNICATOR_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "socket.h"
#include "torch_fl/collectives.h"

namespace flemu::comm {

class SharedMemoryPath;

// Fills `id` for a new group and keeps its listening socket for rank 0's
// Comm_Init in this process.
void create_unique_id(TFL_CommUniqueId* id);

enum class OpKind : uint16_t {
  kAllReduce = 1,
  kAllGather = 2,
  kReduceScatter = 3,
  kBroadcast = 4,
  kAllToAll = 5,
  kSend = 6,
  kBarrier = 7,
};
const char* op_kind_name(OpKind kind);

struct MsgHeader {
  uint32_t magic;
  uint16_t kind;
  uint16_t step;
  uint64_t seq;
  uint64_t bytes;
};
static_assert(sizeof(MsgHeader) == 24, "the wire header is 24 bytes");

// What this process tells the others about itself.
struct PeerInfo {
  Endpoint data;       // its data listener
  char host_key[96];   // equal on processes that share a host and a pid namespace
  int32_t pid;
  int32_t device;
};

// The state of one running operation, for messages and deadlines.
struct OpContext {
  OpKind kind;
  uint64_t seq;
  int64_t deadline_ms;
  std::string name;  // "all_reduce #12"
};

// One direction of one message within an exchange.
struct Transfer {
  int peer = -1;
  int fd = -1;
  bool is_send = false;
  char* data = nullptr;
  size_t len = 0;
  MsgHeader header{};        // sent as is, or the one expected
  uint16_t step = 0;
  // Sends only: how many bytes of `data` may go out now (cut-through
  // forwarding); nullptr = all of them.
  const size_t* ready = nullptr;
  // Receives only: called with [from, to) byte offsets that just arrived.
  std::function<void(size_t, size_t)> on_data;

  // Progress, owned by the exchange loop.
  MsgHeader incoming{};
  size_t header_done = 0;
  size_t done = 0;
  bool finished() const { return header_done == sizeof(MsgHeader) && done == len; }
};

// Process-wide size thresholds, read once from the environment.
struct Tuning {
  size_t allreduce_small_bytes;  // FLEMU_COMM_SMALL_ALLREDUCE: recursive doubling at or below
  size_t broadcast_small_bytes;  // FLEMU_COMM_SMALL_BROADCAST: binomial tree at or below
  bool shared_memory;            // FLEMU_COMM_SHM: same-host fast path
  size_t shared_memory_min_bytes;  // FLEMU_COMM_SHM_MIN_BYTES: TCP below it
};
const Tuning& tuning();

class Communicator {
 public:
  // Collective over all ranks; returns once every rank has joined.
  static std::shared_ptr<Communicator> create(int32_t device, int32_t world_size, int32_t rank,
                                              const TFL_CommUniqueId& id, int64_t timeout_ms);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int32_t device() const { return device_; }
  int64_t timeout_ms() const { return timeout_ms_; }

  // Throws the communicator's error when it is broken or aborted.
  void check_usable() const;

  // Pending-work accounting: the API layer counts each enqueued task.
  void task_enqueued();
  void task_done();

  // The operations; each runs on a stream worker and throws flemu::Error.
  // Buffers are flemu's host aliases of device memory.
  void all_reduce(const char* send, char* recv, size_t count, int32_t dtype, int32_t op);
  void all_gather(const char* send, char* recv, size_t count, int32_t dtype);
  void reduce_scatter(const char* send, char* recv, size_t count, int32_t dtype, int32_t op);
  void broadcast(const char* send, char* recv, size_t count, int32_t dtype, int root);
  void all_to_all(const char* send, char* recv, const std::vector<size_t>& send_counts,
                  const std::vector<size_t>& send_offsets, const std::vector<size_t>& recv_counts,
                  const std::vector<size_t>& recv_offsets, int32_t dtype);
  void send(const char* buf, size_t count, int32_t dtype, int peer);
  void recv(char* buf, size_t count, int32_t dtype, int peer);
  void barrier();

  // Completes pending work, says goodbye to the other ranks, closes.
  void destroy();
  // Fails pending and future work with TFL_ERR_ABORTED, tells the other
  // ranks, and returns at once.
  void abort();
  // The first error, or code TFL_OK.
  std::pair<int32_t, std::string> error() const;

  // Transport pieces the algorithms use.
  void exchange(Transfer* transfers, size_t n, const OpContext& ctx);
  int coll_fd(int peer) const { return coll_[peer].get(); }
  char* scratch(size_t bytes, int which);
  SharedMemoryPath* shm() const { return shm_.get(); }
  const std::vector<PeerInfo>& peers() const { return peers_; }
  bool broken() const { return broken_.load(std::memory_order_acquire); }
  // Records `what` as the communicator's error (telling the other ranks)
  // and throws it for the operation `ctx`.
  [[noreturn]] void fail(const OpContext& ctx, int32_t code, const std::string& what);
  // Throws the communicator's error for `ctx` (or for a new operation).
  [[noreturn]] void rethrow_broken(const OpContext* ctx) const;

 private:
  Communicator(int32_t device, int32_t world_size, int32_t rank, int64_t timeout_ms);

  void bootstrap(const TFL_CommUniqueId& id);
  void build_mesh(const Fd& listener, int64_t deadline_ms);
  void start_monitor();
  void monitor_loop();

  // Runs a collective under the collective lock with its sequence number and
  // deadline; turns any failure into the communicator's error.
  template <class Fn>
  void run(OpKind kind, Fn&& fn);
  template <class Fn>
  void run_p2p(OpKind kind, int peer, bool sending, Fn&& fn);
  // Records the first error and wakes every waiter; false if one was set.
  bool set_error(int32_t code, std::string message);
  void notify_peers(int32_t code, const std::string& message, int except_rank);
  [[noreturn]] void peer_lost(const OpContext& ctx, int peer, const std::string& detail);
  // Whether an operation moving `bytes` takes the shared-memory path; the
  // same answer on every rank (same sizes, same tuning).
  bool use_shm(size_t bytes) const { return shm_ && bytes >= tuning().shared_memory_min_bytes; }

  // now_ms() truncates to whole milliseconds; one more keeps an operation
  // from failing before `timeout_ms` has fully elapsed.
  int64_t op_deadline_ms() const { return now_ms() + timeout_ms_ + 1; }

  void progress_send(Transfer& t, const OpContext& ctx);
  void progress_recv(Transfer& t, const OpContext& ctx);

  const int32_t device_;
  const int size_;
  const int rank_;
  const int64_t timeout_ms_;
  uint8_t nonce_[16] = {};

  std::vector<Fd> coll_;     // per rank, the collective channel (invalid for self)
  std::vector<Fd> p2p_;      // per rank, the send/recv channel
  std::vector<Fd> control_;  // rank 0: per rank; others: [0] = rank 0
  std::vector<PeerInfo> peers_;
  Fd wake_;                  // eventfd: readable once broken or aborted
  Fd monitor_stop_;          // eventfd: stops the monitor thread
  std::thread monitor_;
  std::mutex control_write_mu_;

  mutable std::mutex error_mu_;
  std::condition_variable error_cv_;
  std::atomic<bool> broken_{false};
  std::atomic<bool> aborted_{false};
  int32_t error_code_ = 0;
  std::string error_message_;

  std::mutex coll_mu_;  // one collective at a time
  uint64_t coll_seq_ = 0;
  std::unique_ptr<std::mutex[]> send_mu_, recv_mu_;  // per peer, p2p channel
  std::vector<uint64_t> send_seq_, recv_seq_;

  std::mutex pending_mu_;
  std::condition_variable pending_cv_;
  int64_t pending_ = 0;

  std::vector<char> scratch_[3];
  std::unique_ptr<SharedMemoryPath> shm_;
  bool destroyed_ = false;
};

}  // namespace flemu::comm

#endif  // FLEMU_COMM_COMMUNICATOR_H_
