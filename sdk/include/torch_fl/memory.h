/* torch-fl plugin ABI: the memory group — device and pinned host memory,
 * copies and memset.
 *
 * Required, except TFL_Memory_MapToHost / TFL_Memory_Unmap which a plugin
 * provides only with TFL_CAP_HOST_MAPPING.
 *
 * The host runs a caching allocator on top of TFL_Memory_Allocate and
 * TFL_Memory_Free, so these are called rarely and may be slow. All functions
 * are thread-safe.
 */
#ifndef TORCH_FL_MEMORY_H_
#define TORCH_FL_MEMORY_H_

#include "torch_fl/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Allocates device memory aligned to TFL_DeviceProperties.memory_alignment.
 * Fails with TFL_ERR_OUT_OF_MEMORY when the device cannot hold `size` more
 * bytes; the host then frees its cache and retries once. */
typedef struct TFL_Memory_Allocate_Args {
  size_t struct_size;
  int32_t device; /* in */
  size_t size;    /* in: bytes, > 0 */
  void* ptr;      /* out: device address, owned by the caller until TFL_Memory_Free */
} TFL_Memory_Allocate_Args;
#define TFL_Memory_Allocate_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Memory_Allocate_Args, ptr)
typedef TFL_Error* TFL_Memory_Allocate(TFL_Memory_Allocate_Args* args);

/* Releases memory from TFL_Memory_Allocate. The host guarantees no queued or
 * running work still uses it. */
typedef struct TFL_Memory_Free_Args {
  size_t struct_size;
  int32_t device; /* in */
  void* ptr;      /* in */
} TFL_Memory_Free_Args;
#define TFL_Memory_Free_Args_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Memory_Free_Args, ptr)
typedef TFL_Error* TFL_Memory_Free(TFL_Memory_Free_Args* args);

/* Device memory the plugin could still hand out, and the device's total. */
typedef struct TFL_Memory_GetInfo_Args {
  size_t struct_size;
  int32_t device;      /* in */
  uint64_t free_bytes; /* out */
  uint64_t total_bytes;/* out */
} TFL_Memory_GetInfo_Args;
#define TFL_Memory_GetInfo_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Memory_GetInfo_Args, total_bytes)
typedef TFL_Error* TFL_Memory_GetInfo(TFL_Memory_GetInfo_Args* args);

/* Allocates page-locked ("pinned") host memory: the only host memory with
 * which non-blocking copies are truly asynchronous. */
typedef struct TFL_HostMemory_Allocate_Args {
  size_t struct_size;
  size_t size; /* in: bytes, > 0 */
  void* ptr;   /* out: host address, owned by the caller until TFL_HostMemory_Free */
} TFL_HostMemory_Allocate_Args;
#define TFL_HostMemory_Allocate_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_HostMemory_Allocate_Args, ptr)
typedef TFL_Error* TFL_HostMemory_Allocate(TFL_HostMemory_Allocate_Args* args);

/* Releases pinned host memory. The host guarantees no queued copy uses it. */
typedef struct TFL_HostMemory_Free_Args {
  size_t struct_size;
  void* ptr; /* in */
} TFL_HostMemory_Free_Args;
#define TFL_HostMemory_Free_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_HostMemory_Free_Args, ptr)
typedef TFL_Error* TFL_HostMemory_Free(TFL_HostMemory_Free_Args* args);

typedef enum TFL_CopyKind {
  TFL_COPY_HOST_TO_DEVICE = 0,
  TFL_COPY_DEVICE_TO_HOST = 1,
  TFL_COPY_DEVICE_TO_DEVICE = 2, /* src_device == dst_device */
  TFL_COPY_PEER = 3              /* across devices; only where CanAccessPeer says so */
} TFL_CopyKind;

/* Copies `size` contiguous bytes.
 *
 * Ordering: the copy runs after all work enqueued earlier on `stream`, and
 * work enqueued later on `stream` sees its result. `stream` belongs to the
 * device that owns the device side of the copy (for TFL_COPY_PEER: the
 * source device).
 *
 * blocking = 1: returns after the copy has completed (and reports any
 * earlier asynchronous error of the stream).
 * blocking = 0: may return before the copy has run. Host memory must then
 * stay valid and untouched until the stream reaches the copy. For host memory
 * that did not come from TFL_HostMemory_Allocate the plugin may behave as
 * blocking; it must at least finish reading a host source before returning. */
typedef struct TFL_Memory_Copy_Args {
  size_t struct_size;
  int32_t kind;       /* in: TFL_CopyKind */
  void* dst;          /* in */
  int32_t dst_device; /* in: -1 for host */
  const void* src;    /* in */
  int32_t src_device; /* in: -1 for host */
  size_t size;        /* in: bytes; 0 is a no-op */
  TFL_Stream* stream; /* in */
  uint8_t blocking;   /* in: 0 or 1 */
} TFL_Memory_Copy_Args;
#define TFL_Memory_Copy_Args_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Memory_Copy_Args, blocking)
typedef TFL_Error* TFL_Memory_Copy(TFL_Memory_Copy_Args* args);

/* Sets `size` bytes of device memory to `value`, enqueued on `stream`. */
typedef struct TFL_Memory_Set_Args {
  size_t struct_size;
  int32_t device;     /* in */
  void* ptr;          /* in */
  uint8_t value;      /* in */
  size_t size;        /* in: bytes */
  TFL_Stream* stream; /* in */
} TFL_Memory_Set_Args;
#define TFL_Memory_Set_Args_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Memory_Set_Args, stream)
typedef TFL_Error* TFL_Memory_Set(TFL_Memory_Set_Args* args);

/* Optional (TFL_CAP_HOST_MAPPING): makes a range of device memory readable
 * and writable from the host until TFL_Memory_Unmap. The caller synchronizes
 * with the streams that use the range. */
typedef struct TFL_Memory_MapToHost_Args {
  size_t struct_size;
  int32_t device;  /* in */
  void* ptr;       /* in: device address */
  size_t size;     /* in: bytes */
  void* host_ptr;  /* out: valid until TFL_Memory_Unmap */
} TFL_Memory_MapToHost_Args;
#define TFL_Memory_MapToHost_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Memory_MapToHost_Args, host_ptr)
typedef TFL_Error* TFL_Memory_MapToHost(TFL_Memory_MapToHost_Args* args);

typedef struct TFL_Memory_Unmap_Args {
  size_t struct_size;
  int32_t device;  /* in */
  void* host_ptr;  /* in: from TFL_Memory_MapToHost */
  size_t size;     /* in */
} TFL_Memory_Unmap_Args;
#define TFL_Memory_Unmap_Args_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Memory_Unmap_Args, size)
typedef TFL_Error* TFL_Memory_Unmap(TFL_Memory_Unmap_Args* args);

typedef struct TFL_MemoryApi {
  size_t struct_size;
  TFL_Memory_Allocate* Memory_Allocate;
  TFL_Memory_Free* Memory_Free;
  TFL_Memory_GetInfo* Memory_GetInfo;
  TFL_HostMemory_Allocate* HostMemory_Allocate;
  TFL_HostMemory_Free* HostMemory_Free;
  TFL_Memory_Copy* Memory_Copy;
  TFL_Memory_Set* Memory_Set;
  TFL_Memory_MapToHost* Memory_MapToHost; /* optional: NULL without TFL_CAP_HOST_MAPPING */
  TFL_Memory_Unmap* Memory_Unmap;         /* optional, paired with Memory_MapToHost */
} TFL_MemoryApi;
#define TFL_MemoryApi_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_MemoryApi, Memory_Unmap)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TORCH_FL_MEMORY_H_ */
