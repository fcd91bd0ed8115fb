/* torch-fl plugin ABI: the device group — enumeration and properties.
 *
 * Required. Devices are numbered 0 .. count-1 and every other function names
 * the device it acts on explicitly: the ABI has no "current device".
 */
#ifndef TORCH_FL_DEVICE_H_
#define TORCH_FL_DEVICE_H_

#include "torch_fl/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Capability bits reported in TFL_DeviceProperties.capabilities. The bridge
 * and the conformance suite use them to decide what to run; a capability a
 * device does not report is skipped with a reason, never assumed. */
typedef enum TFL_DeviceCapability {
  TFL_CAP_FP64 = 1 << 0,           /* float64 kernels */
  TFL_CAP_FP16 = 1 << 1,           /* float16 kernels */
  TFL_CAP_BF16 = 1 << 2,           /* bfloat16 kernels */
  TFL_CAP_UNIFIED_MEMORY = 1 << 3, /* device pointers are host-accessible */
  TFL_CAP_PEER_ACCESS = 1 << 4,    /* direct device-to-device copies across devices */
  TFL_CAP_HOST_MAPPING = 1 << 5,   /* TFL_Memory_MapToHost is available */
  TFL_CAP_COMPLEX = 1 << 6,        /* complex64/complex128 kernels */
  TFL_CAP_TIMING_EVENTS = 1 << 7,  /* TFL_Event_ElapsedTime works */
  TFL_CAP_ASYNC_COPY = 1 << 8      /* copies with pinned host memory overlap compute */
} TFL_DeviceCapability;

/* Properties of one device. The host allocates this struct and sets
 * struct_size; the plugin fills the fields that struct_size covers. */
typedef struct TFL_DeviceProperties {
  size_t struct_size;
  char name[128];                  /* NUL-terminated product name */
  uint64_t total_memory;           /* bytes of device memory */
  uint64_t capabilities;           /* TFL_DeviceCapability bits */
  uint32_t memory_alignment;       /* alignment of TFL_Memory_Allocate results, a power of two */
  int32_t preferred_memory_format; /* TFL_MemoryFormat for 4-d activations */
  int32_t compute_units;           /* cores / SMs / tiles; informational */
  int32_t version_major;           /* hardware generation; informational */
  int32_t version_minor;
} TFL_DeviceProperties;
#define TFL_DeviceProperties_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_DeviceProperties, version_minor)

typedef struct TFL_Device_Count_Args {
  size_t struct_size;
  int32_t count; /* out: number of devices, >= 0 */
} TFL_Device_Count_Args;
#define TFL_Device_Count_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Device_Count_Args, count)
typedef TFL_Error* TFL_Device_Count(TFL_Device_Count_Args* args);

typedef struct TFL_Device_GetProperties_Args {
  size_t struct_size;
  int32_t device;                   /* in */
  TFL_DeviceProperties* properties; /* in: host-owned, struct_size set; out: filled */
} TFL_Device_GetProperties_Args;
#define TFL_Device_GetProperties_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Device_GetProperties_Args, properties)
typedef TFL_Error* TFL_Device_GetProperties(TFL_Device_GetProperties_Args* args);

/* Blocks until all work on all streams of the device has completed. Returns
 * the first asynchronous error of any of them. */
typedef struct TFL_Device_Synchronize_Args {
  size_t struct_size;
  int32_t device; /* in */
} TFL_Device_Synchronize_Args;
#define TFL_Device_Synchronize_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Device_Synchronize_Args, device)
typedef TFL_Error* TFL_Device_Synchronize(TFL_Device_Synchronize_Args* args);

/* Whether `device` can copy directly to and from `peer` (TFL_COPY_PEER).
 * When it cannot, the host stages cross-device copies through host memory.
 * A device can always access itself. */
typedef struct TFL_Device_CanAccessPeer_Args {
  size_t struct_size;
  int32_t device;     /* in */
  int32_t peer;       /* in */
  uint8_t can_access; /* out: 0 or 1 */
} TFL_Device_CanAccessPeer_Args;
#define TFL_Device_CanAccessPeer_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Device_CanAccessPeer_Args, can_access)
typedef TFL_Error* TFL_Device_CanAccessPeer(TFL_Device_CanAccessPeer_Args* args);

typedef struct TFL_DeviceApi {
  size_t struct_size;
  TFL_Device_Count* Device_Count;
  TFL_Device_GetProperties* Device_GetProperties;
  TFL_Device_Synchronize* Device_Synchronize;
  TFL_Device_CanAccessPeer* Device_CanAccessPeer;
} TFL_DeviceApi;
#define TFL_DeviceApi_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_DeviceApi, Device_CanAccessPeer)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TORCH_FL_DEVICE_H_ */
