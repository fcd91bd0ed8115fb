// The collectives group of the ABI: argument checks, buffer resolution and
// enqueueing onto the caller's stream. The work itself is in
// communicator.cpp and collectives.cpp.
#include "api.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "communicator.h"
#include "reduce.h"
#include "../errors.h"
#include "../kernels/support/dtype.h"
#include "../runtime.h"

namespace flemu::comm {
namespace {

constexpr uint64_t kHandleMagic = 0x464c454d55434f4dull;  // "FLEMUCOM"

// What a TFL_Communicator* points to. Tasks hold their own references, so a
// communicator lives until its last enqueued operation has run.
struct Handle {
  uint64_t magic = kHandleMagic;
  std::shared_ptr<Communicator> comm;
};

Handle& handle_of(TFL_Communicator* comm) {
  auto* h = reinterpret_cast<Handle*>(comm);
  if (h == nullptr) invalid_argument("comm is NULL");
  if (h->magic != kHandleMagic || !h->comm)
    invalid_argument("comm ", static_cast<void*>(comm), " is not a live flemu communicator (destroyed or aborted?)");
  return *h;
}

std::shared_ptr<Communicator> comm_of(TFL_Communicator* comm) {
  std::shared_ptr<Communicator> c = handle_of(comm).comm;
  c->check_usable();
  return c;
}

Stream& stream_for(const Communicator& comm, TFL_Stream* handle) {
  Stream& stream = stream_from_handle(handle);
  if (stream.device() != comm.device())
    invalid_argument("the stream belongs to device ", stream.device(), " but the communicator to device ",
                     comm.device());
  return stream;
}

size_t byte_count(size_t count, int32_t dtype) {
  const int64_t es = element_size(dtype);
  if (es == 0) invalid_argument("dtype ", dtype_name(dtype), " (", dtype, ") is not a TFL_DType flemu can move");
  if (count > std::numeric_limits<size_t>::max() / static_cast<size_t>(es))
    invalid_argument("count ", count, " overflows the byte size");
  return count * static_cast<size_t>(es);
}

// Device address -> flemu's alias, after checking that [ptr, ptr+bytes) lies
// in one live allocation of the communicator's device.
char* device_bytes(int32_t device, const void* ptr, size_t bytes, const char* what) {
  if (bytes == 0) return nullptr;
  Runtime& rt = runtime();
  Device& dev = rt.device(device);
  if (ptr == nullptr) invalid_argument(what, " is NULL");
  if (!dev.arena.owns(ptr)) {
    if (Arena* other = rt.arena_of(ptr))
      invalid_argument(what, " ", ptr, " is memory of device ", other->device(), ", but the communicator is on device ",
                       device);
    invalid_argument(what, " ", ptr, " is not device memory of device ", device, " (collectives take device buffers)");
  }
  dev.arena.check_allocated(ptr, bytes, what);
  return dev.arena.to_host(ptr);
}

void check_dtype_enabled(int32_t dtype) {
  const Config& cfg = runtime().config();
  if ((dtype == TFL_DTYPE_FLOAT64 && !cfg.fp64) || (dtype == TFL_DTYPE_FLOAT16 && !cfg.fp16) ||
      (dtype == TFL_DTYPE_BFLOAT16 && !cfg.bf16))
    flemu::fail(TFL_ERR_UNIMPLEMENTED, cat(dtype_name(dtype), " is disabled on this flemu (FLEMU_FP64/FP16/BF16)"));
}

// Counts the task as pending work of the communicator until it has run (or
// was dropped without running), so that Comm_Destroy can wait for it.
class PendingTask {
 public:
  explicit PendingTask(std::shared_ptr<Communicator> comm) : comm_(std::move(comm)) { comm_->task_enqueued(); }
  ~PendingTask() { comm_->task_done(); }
  PendingTask(const PendingTask&) = delete;
  PendingTask& operator=(const PendingTask&) = delete;

 private:
  std::shared_ptr<Communicator> comm_;
};

template <class Fn>
void enqueue(Stream& stream, const std::shared_ptr<Communicator>& comm, const char* name, Fn fn) {
  auto pending = std::make_shared<PendingTask>(comm);
  stream.submit(name, [pending = std::move(pending), fn = std::move(fn)]() mutable { fn(); });
}

// ---------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------

TFL_Error* Comm_GetUniqueId(TFL_Comm_GetUniqueId_Args* args) {
  return guarded("Comm_GetUniqueId", [&] {
    TFL_CHECK_ARGS(args, TFL_Comm_GetUniqueId_Args);
    runtime();
    create_unique_id(&args->id);
  });
}

TFL_Error* Comm_Init(TFL_Comm_Init_Args* args) {
  return guarded("Comm_Init", [&] {
    TFL_CHECK_ARGS(args, TFL_Comm_Init_Args);
    args->comm = nullptr;
    runtime().device(args->device);
    if (args->world_size < 1) invalid_argument("world_size is ", args->world_size, ", expected at least 1");
    if (args->rank < 0 || args->rank >= args->world_size)
      invalid_argument("rank ", args->rank, " is outside [0, ", args->world_size, ")");
    if (args->id == nullptr) invalid_argument("id is NULL");
    // 0 or less: flemu's default of 30 minutes, the same as torch.distributed's.
    const int64_t timeout = args->timeout_ms > 0 ? args->timeout_ms : int64_t{30} * 60 * 1000;
    auto comm = Communicator::create(args->device, args->world_size, args->rank, *args->id, timeout);
    args->comm = reinterpret_cast<TFL_Communicator*>(new Handle{kHandleMagic, std::move(comm)});
  });
}

TFL_Error* Comm_Destroy(TFL_Comm_Destroy_Args* args) {
  return guarded("Comm_Destroy", [&] {
    TFL_CHECK_ARGS(args, TFL_Comm_Destroy_Args);
    Handle& h = handle_of(args->comm);
    std::shared_ptr<Communicator> comm = std::move(h.comm);
    h.magic = 0;
    delete &h;
    comm->destroy();
  });
}

TFL_Error* Comm_Abort(TFL_Comm_Destroy_Args* args) {
  return guarded("Comm_Abort", [&] {
    TFL_CHECK_ARGS(args, TFL_Comm_Destroy_Args);
    Handle& h = handle_of(args->comm);
    std::shared_ptr<Communicator> comm = std::move(h.comm);
    h.magic = 0;
    delete &h;
    comm->abort();
  });
}

TFL_Error* Comm_GetAsyncError(TFL_Comm_GetAsyncError_Args* args) {
  return guarded("Comm_GetAsyncError", [&] {
    TFL_CHECK_ARGS(args, TFL_Comm_GetAsyncError_Args);
    args->error = nullptr;
    auto [code, message] = handle_of(args->comm).comm->error();
    if (code != TFL_OK) args->error = make_error(code, "", message);
  });
}

TFL_Error* Comm_AllReduce(TFL_Comm_Collective_Args* args) {
  return guarded("Comm_AllReduce", [&] {
    TFL_CHECK_ARGS(args, TFL_Comm_Collective_Args);
    auto comm = comm_of(args->comm);
    check_reduction(args->dtype, args->op);
    check_dtype_enabled(args->dtype);
    Stream& stream = stream_for(*comm, args->stream);
    const size_t bytes = byte_count(args->count, args->dtype);
    const char* send = device_bytes(comm->device(), args->sendbuf, bytes, "sendbuf");
    char* recv = device_bytes(comm->device(), args->recvbuf, bytes, "recvbuf");
    const size_t count = args->count;
    const int32_t dtype = args->dtype, op = args->op;
    enqueue(stream, comm, "Comm_AllReduce",
            [comm, send, recv, count, dtype, op] { comm->all_reduce(send, recv, count, dtype, op); });
  });
}

TFL_Error* Comm_AllGather(TFL_Comm_Collective_Args* args) {
  return guarded("Comm_AllGather", [&] {
    TFL_CHECK_ARGS(args, TFL_Comm_Collective_Args);
    auto comm = comm_of(args->comm);
    Stream& stream = stream_for(*comm, args->stream);
    const size_t chunk = byte_count(args->count, args->dtype);
    const char* send = device_bytes(comm->device(), args->sendbuf, chunk, "sendbuf");
    char* recv = device_bytes(comm->device(), args->recvbuf, chunk * static_cast<size_t>(comm->size()), "recvbuf");
    const size_t count = args->count;
    const int32_t dtype = args->dtype;
    enqueue(stream, comm, "Comm_AllGather", [comm, send, recv, count, dtype] { comm->all_gather(send, recv, count, dtype); });
  });
}

TFL_Error* Comm_ReduceScatter(TFL_Comm_Collective_Args* args) {
  return guarded("Comm_ReduceScatter", [&] {
    TFL_CHECK_ARGS(args, TFL_Comm_Collective_Args);
    auto comm = comm_of(args->comm);
    check_reduction(args->dtype, args->op);
    check_dtype_enabled(args->dtype);
    Stream& stream = stream_for(*comm, args->stream);
    const size_t chunk = byte_count(args->count, args->dtype);
    const char* send = device_bytes(comm->device(), args->sendbuf, chunk * static_cast<size_t>(comm->size()), "sendbuf");
    char* recv = device_bytes(comm->device(), args->recvbuf, chunk, "recvbuf");
    const size_t count = args->count;
    const int32_t dtype = args->dtype, op = args->op;
    enqueue(stream, comm, "Comm_ReduceScatter",
            [comm, send, recv, count, dtype, op] { comm->reduce_scatter(send, recv, count, dtype, op); });
  });
}

TFL_Error* Comm_Broadcast(TFL_Comm_Collective_Args* args) {
  return guarded("Comm_Broadcast", [&] {
    TFL_CHECK_ARGS(args, TFL_Comm_Collective_Args);
    auto comm = comm_of(args->comm);
    if (args->root < 0 || args->root >= comm->size())
      invalid_argument("root ", args->root, " is outside [0, ", comm->size(), ")");
    Stream& stream = stream_for(*comm, args->stream);
    const size_t bytes = byte_count(args->count, args->dtype);
    // Only the root reads sendbuf.
    const char* send = comm->rank() == args->root ? device_bytes(comm->device(), args->sendbuf, bytes, "sendbuf") : nullptr;
    char* recv = device_bytes(comm->device(), args->recvbuf, bytes, "recvbuf");
    const size_t count = args->count;
    const int32_t dtype = args->dtype, root = args->root;
    enqueue(stream, comm, "Comm_Broadcast",
            [comm, send, recv, count, dtype, root] { comm->broadcast(send, recv, count, dtype, root); });
  });
}

TFL_Error* Comm_AllToAll(TFL_Comm_AllToAll_Args* args) {
  return guarded("Comm_AllToAll", [&] {
    TFL_CHECK_ARGS(args, TFL_Comm_AllToAll_Args);
    auto comm = comm_of(args->comm);
    Stream& stream = stream_for(*comm, args->stream);
    const size_t n = static_cast<size_t>(comm->size());
    if (args->send_counts == nullptr || args->send_offsets == nullptr || args->recv_counts == nullptr ||
        args->recv_offsets == nullptr)
      invalid_argument("send_counts, send_offsets, recv_counts and recv_offsets must all be set (world_size entries)");
    std::vector<size_t> sc(args->send_counts, args->send_counts + n), so(args->send_offsets, args->send_offsets + n);
    std::vector<size_t> rc(args->recv_counts, args->recv_counts + n), ro(args->recv_offsets, args->recv_offsets + n);
    byte_count(1, args->dtype);  // rejects unknown dtypes
    size_t send_extent = 0, recv_extent = 0;
    for (size_t p = 0; p < n; ++p) {
      if (sc[p] != 0) send_extent = std::max(send_extent, byte_count(so[p] + sc[p], args->dtype));
      if (rc[p] != 0) recv_extent = std::max(recv_extent, byte_count(ro[p] + rc[p], args->dtype));
    }
    const int r = comm->rank();
    if (sc[r] != rc[r])
      invalid_argument("this rank sends ", sc[r], " elements to itself but expects to receive ", rc[r]);
    const char* send = device_bytes(comm->device(), args->sendbuf, send_extent, "sendbuf");
    char* recv = device_bytes(comm->device(), args->recvbuf, recv_extent, "recvbuf");
    if (send != nullptr && recv != nullptr && send < recv + recv_extent && recv < send + send_extent)
      invalid_argument("all_to_all needs separate send and receive buffers (they overlap)");
    const int32_t dtype = args->dtype;
    enqueue(stream, comm, "Comm_AllToAll", [comm, send, recv, sc, so, rc, ro, dtype] {
      comm->all_to_all(send, recv, sc, so, rc, ro, dtype);
    });
  });
}

void check_peer(const Communicator& comm, int32_t peer) {
  if (peer < 0 || peer >= comm.size()) invalid_argument("peer ", peer, " is outside [0, ", comm.size(), ")");
  if (peer == comm.rank()) invalid_argument("peer ", peer, " is this rank; send/recv need another rank");
}

TFL_Error* Comm_Send(TFL_Comm_SendRecv_Args* args) {
  return guarded("Comm_Send", [&] {
    TFL_CHECK_ARGS(args, TFL_Comm_SendRecv_Args);
    auto comm = comm_of(args->comm);
    check_peer(*comm, args->peer);
    Stream& stream = stream_for(*comm, args->stream);
    const size_t bytes = byte_count(args->count, args->dtype);
    const char* buf = device_bytes(comm->device(), args->buf, bytes, "buf");
    const size_t count = args->count;
    const int32_t dtype = args->dtype, peer = args->peer;
    enqueue(stream, comm, "Comm_Send", [comm, buf, count, dtype, peer] { comm->send(buf, count, dtype, peer); });
  });
}

TFL_Error* Comm_Recv(TFL_Comm_SendRecv_Args* args) {
  return guarded("Comm_Recv", [&] {
    TFL_CHECK_ARGS(args, TFL_Comm_SendRecv_Args);
    auto comm = comm_of(args->comm);
    check_peer(*comm, args->peer);
    Stream& stream = stream_for(*comm, args->stream);
    const size_t bytes = byte_count(args->count, args->dtype);
    char* buf = device_bytes(comm->device(), args->buf, bytes, "buf");
    const size_t count = args->count;
    const int32_t dtype = args->dtype, peer = args->peer;
    enqueue(stream, comm, "Comm_Recv", [comm, buf, count, dtype, peer] { comm->recv(buf, count, dtype, peer); });
  });
}

TFL_Error* Comm_Barrier(TFL_Comm_Barrier_Args* args) {
  return guarded("Comm_Barrier", [&] {
    TFL_CHECK_ARGS(args, TFL_Comm_Barrier_Args);
    auto comm = comm_of(args->comm);
    Stream& stream = stream_for(*comm, args->stream);
    enqueue(stream, comm, "Comm_Barrier", [comm] { comm->barrier(); });
  });
}

}  // namespace

const TFL_CollectivesApi kCollectivesApi = {
    TFL_CollectivesApi_STRUCT_SIZE,
    Comm_GetUniqueId,
    Comm_Init,
    Comm_Destroy,
    Comm_Abort,
    Comm_GetAsyncError,
    Comm_AllReduce,
    Comm_AllGather,
    Comm_ReduceScatter,
    Comm_Broadcast,
    Comm_AllToAll,
    Comm_Send,
    Comm_Recv,
    Comm_Barrier,
};

}  // namespace flemu::comm
