/* torch-fl plugin ABI: the collectives group — the device's communication
 * library behind torch.distributed.
 *
 * Optional: a plugin without it leaves TFL_Api.collectives NULL and
 * torch.distributed uses gloo through the host for its tensors.
 *
 * Model (NCCL-like): rank 0 creates a unique id, the host exchanges it through
 * the c10d store, every rank creates a communicator for (world size, rank, id,
 * device). Collectives are enqueued on a stream of the communicator's device
 * and complete asynchronously; the host waits on events recorded after them.
 * Errors — including a peer that disappeared and a timeout — surface through
 * the stream's sticky error and TFL_Comm_GetAsyncError, never as a hang.
 * Buffers are contiguous device memory; counts are in elements.
 *
 * Rules every plugin and host follow (fixed in 1.0):
 * - Order. Every rank enqueues the collectives of a communicator in the same
 *   order. Send/Recv between two ranks are matched in the order they are
 *   enqueued. A Send may wait until the peer's matching Recv runs, so a host
 *   that posts sends and receives to each other from two ranks enqueues them
 *   on different streams.
 * - Timeouts. timeout_ms bounds Comm_Init and each later operation, measured
 *   from when the operation starts running on its stream (time spent queued
 *   behind other work does not count); 0 or less selects the plugin's default.
 * - Errors. An operation that times out fails with TFL_ERR_TIMEOUT; one that
 *   loses a peer (its process died, its connection broke) with
 *   TFL_ERR_UNAVAILABLE, the message naming the rank ("rank 2
 *   disconnected"); ranks that call different collectives or counts get
 *   TFL_ERR_INVALID_ARGUMENT where the plugin can tell; after an abort,
 *   TFL_ERR_ABORTED. After any such failure the communicator is broken: every
 *   later operation on it fails with the same cause, and the host aborts it.
 *   Plugins should make the other ranks fail promptly too rather than leave
 *   them to their timeout.
 * - count == 0 is valid and still a collective (buffers may then be NULL).
 * - Reductions: TFL_REDUCE_AVG is the sum divided by the world size
 *   (integers truncate toward zero). A dtype the plugin cannot reduce fails
 *   at enqueue with TFL_ERR_UNIMPLEMENTED; data movement (all_gather,
 *   broadcast, all_to_all, send/recv) takes any dtype.
 */
#ifndef TORCH_FL_COLLECTIVES_H_
#define TORCH_FL_COLLECTIVES_H_

#include "torch_fl/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum TFL_ReduceOp {
  TFL_REDUCE_SUM = 0,
  TFL_REDUCE_PRODUCT = 1,
  TFL_REDUCE_MIN = 2,
  TFL_REDUCE_MAX = 3,
  TFL_REDUCE_AVG = 4
} TFL_ReduceOp;

/* Opaque bytes identifying one communicator group; frozen size. */
#define TFL_COMM_UNIQUE_ID_BYTES 128
typedef struct TFL_CommUniqueId {
  uint8_t bytes[TFL_COMM_UNIQUE_ID_BYTES];
} TFL_CommUniqueId;

typedef struct TFL_Comm_GetUniqueId_Args {
  size_t struct_size;
  TFL_CommUniqueId id; /* out */
} TFL_Comm_GetUniqueId_Args;
#define TFL_Comm_GetUniqueId_Args_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Comm_GetUniqueId_Args, id)
typedef TFL_Error* TFL_Comm_GetUniqueId(TFL_Comm_GetUniqueId_Args* args);

/* Collective over all ranks: returns when every rank has joined or after
 * timeout_ms with TFL_ERR_TIMEOUT. */
typedef struct TFL_Comm_Init_Args {
  size_t struct_size;
  int32_t device;               /* in */
  int32_t world_size;           /* in */
  int32_t rank;                 /* in */
  const TFL_CommUniqueId* id;   /* in: from rank 0's TFL_Comm_GetUniqueId */
  int64_t timeout_ms;           /* in: for init and every later operation */
  TFL_Communicator* comm;       /* out: owned by the caller until TFL_Comm_Destroy */
} TFL_Comm_Init_Args;
#define TFL_Comm_Init_Args_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Comm_Init_Args, comm)
typedef TFL_Error* TFL_Comm_Init(TFL_Comm_Init_Args* args);

/* Destroy completes pending work first; Abort cancels it (pending work fails
 * with TFL_ERR_ABORTED) and never blocks. Both release the handle: after
 * either returns (even with an error) the caller must not use `comm` again,
 * and never calls both on one communicator. */
typedef struct TFL_Comm_Destroy_Args {
  size_t struct_size;
  TFL_Communicator* comm; /* in */
} TFL_Comm_Destroy_Args;
#define TFL_Comm_Destroy_Args_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Comm_Destroy_Args, comm)
typedef TFL_Error* TFL_Comm_Destroy(TFL_Comm_Destroy_Args* args);
typedef TFL_Error* TFL_Comm_Abort(TFL_Comm_Destroy_Args* args);

/* Non-blocking: the communicator's first asynchronous error, if any (the
 * returned error is owned by the caller). */
typedef struct TFL_Comm_GetAsyncError_Args {
  size_t struct_size;
  TFL_Communicator* comm; /* in */
  TFL_Error* error;       /* out: NULL when healthy */
} TFL_Comm_GetAsyncError_Args;
#define TFL_Comm_GetAsyncError_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Comm_GetAsyncError_Args, error)
typedef TFL_Error* TFL_Comm_GetAsyncError(TFL_Comm_GetAsyncError_Args* args);

/* all_reduce, reduce_scatter (recv_count elements per rank), all_gather
 * (count elements per rank) and broadcast share one argument struct; fields a
 * collective does not use are ignored. sendbuf == recvbuf means in place.
 * all_gather: sendbuf holds count elements, recvbuf count * world_size; it is
 * also in place when sendbuf is this rank's slot of recvbuf (recvbuf + rank *
 * count elements). reduce_scatter: sendbuf holds count * world_size elements,
 * recvbuf count; also in place when recvbuf is this rank's slot of sendbuf.
 * broadcast: sendbuf is read on the root only; recvbuf is written on every
 * rank (on the root too, when it differs from sendbuf). */
typedef struct TFL_Comm_Collective_Args {
  size_t struct_size;
  TFL_Communicator* comm; /* in */
  const void* sendbuf;    /* in */
  void* recvbuf;          /* in */
  size_t count;           /* in: elements (per rank for all_gather / reduce_scatter) */
  int32_t dtype;          /* in: TFL_DType */
  int32_t op;             /* in: TFL_ReduceOp (reductions only) */
  int32_t root;           /* in: broadcast only */
  TFL_Stream* stream;     /* in */
} TFL_Comm_Collective_Args;
#define TFL_Comm_Collective_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Comm_Collective_Args, stream)
typedef TFL_Error* TFL_Comm_AllReduce(TFL_Comm_Collective_Args* args);
typedef TFL_Error* TFL_Comm_AllGather(TFL_Comm_Collective_Args* args);
typedef TFL_Error* TFL_Comm_ReduceScatter(TFL_Comm_Collective_Args* args);
typedef TFL_Error* TFL_Comm_Broadcast(TFL_Comm_Collective_Args* args);

/* all_to_all with per-rank counts and displacements, in elements: this rank
 * sends send_counts[p] elements starting at sendbuf + send_offsets[p] to rank
 * p and receives recv_counts[p] from it at recvbuf + recv_offsets[p]. Counts
 * may differ per rank and be 0; send_counts[rank] == recv_counts[rank]. The
 * send and receive buffers must not overlap. */
typedef struct TFL_Comm_AllToAll_Args {
  size_t struct_size;
  TFL_Communicator* comm;     /* in */
  const void* sendbuf;        /* in */
  void* recvbuf;              /* in */
  const size_t* send_counts;  /* in: world_size entries */
  const size_t* send_offsets; /* in: world_size entries */
  const size_t* recv_counts;  /* in: world_size entries */
  const size_t* recv_offsets; /* in: world_size entries */
  int32_t dtype;              /* in */
  TFL_Stream* stream;         /* in */
} TFL_Comm_AllToAll_Args;
#define TFL_Comm_AllToAll_Args_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Comm_AllToAll_Args, stream)
typedef TFL_Error* TFL_Comm_AllToAll(TFL_Comm_AllToAll_Args* args);

/* Point to point. */
typedef struct TFL_Comm_SendRecv_Args {
  size_t struct_size;
  TFL_Communicator* comm; /* in */
  void* buf;              /* in: read by send, written by recv */
  size_t count;           /* in: elements */
  int32_t dtype;          /* in */
  int32_t peer;           /* in: the other rank */
  TFL_Stream* stream;     /* in */
} TFL_Comm_SendRecv_Args;
#define TFL_Comm_SendRecv_Args_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Comm_SendRecv_Args, stream)
typedef TFL_Error* TFL_Comm_Send(TFL_Comm_SendRecv_Args* args);
typedef TFL_Error* TFL_Comm_Recv(TFL_Comm_SendRecv_Args* args);

typedef struct TFL_Comm_Barrier_Args {
  size_t struct_size;
  TFL_Communicator* comm; /* in */
  TFL_Stream* stream;     /* in */
} TFL_Comm_Barrier_Args;
#define TFL_Comm_Barrier_Args_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Comm_Barrier_Args, stream)
typedef TFL_Error* TFL_Comm_Barrier(TFL_Comm_Barrier_Args* args);

typedef struct TFL_CollectivesApi {
  size_t struct_size;
  TFL_Comm_GetUniqueId* Comm_GetUniqueId;
  TFL_Comm_Init* Comm_Init;
  TFL_Comm_Destroy* Comm_Destroy;
  TFL_Comm_Abort* Comm_Abort;
  TFL_Comm_GetAsyncError* Comm_GetAsyncError;
  TFL_Comm_AllReduce* Comm_AllReduce;
  TFL_Comm_AllGather* Comm_AllGather;
  TFL_Comm_ReduceScatter* Comm_ReduceScatter;
  TFL_Comm_Broadcast* Comm_Broadcast;
  TFL_Comm_AllToAll* Comm_AllToAll;
  TFL_Comm_Send* Comm_Send;
  TFL_Comm_Recv* Comm_Recv;
  TFL_Comm_Barrier* Comm_Barrier;
} TFL_CollectivesApi;
#define TFL_CollectivesApi_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_CollectivesApi, Comm_Barrier)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TORCH_FL_COLLECTIVES_H_ */
