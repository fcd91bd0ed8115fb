/* torch-fl plugin ABI: versioning, errors, data types, tensors and values.
 *
 * Every other torch_fl header includes this one. It is plain C11, usable from
 * C++17, and never lets an exception or a longjmp cross it: a C++ plugin must
 * catch everything at its API boundary and return a TFL_Error instead.
 *
 * Conventions used by all torch_fl headers
 * ----------------------------------------
 * - Every struct that crosses the ABI starts with `size_t struct_size`. The
 *   side that creates the struct sets it to the TFL_<Name>_STRUCT_SIZE of the
 *   headers it was compiled against. The side that reads it checks
 *   TFL_HAS_FIELD before touching a field added after 1.0, so host and plugin
 *   built against different minor versions keep working.
 * - Function tables and argument structs are append-only. Fields are never
 *   removed, reordered or retyped within a major version.
 * - Enum values are explicit and only ever appended. Enums are carried in
 *   `int32_t` fields so their size never depends on the compiler.
 * - "in" fields are set by the caller, "out" fields by the callee.
 * - Strings are NUL-terminated UTF-8. Every output pointer documents who owns
 *   it and how long it lives.
 */
#ifndef TORCH_FL_TYPES_H_
#define TORCH_FL_TYPES_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ========================================================================
 * Versioning
 * ========================================================================
 *
 * TFL_ABI_MAJOR changes only when an existing struct layout, function
 * signature or documented behaviour changes incompatibly. The host refuses a
 * plugin whose major differs from its own, naming both versions.
 *
 * TFL_ABI_MINOR grows when something is appended: a field at the end of a
 * struct, a function at the end of a table, an enum value, a flag bit. A host
 * at minor H loads a plugin at minor P for any P: it reads the plugin's tables
 * through their struct_size and treats absent entries as "not provided". A
 * plugin receives the host's version in TFL_Plugin_Initialize_Args and must
 * not read host-provided fields beyond what the host's struct_size covers.
 *
 * Every minor bump is an entry in ABI_CHANGELOG.md.
 */
#define TFL_ABI_MAJOR 1
#define TFL_ABI_MINOR 1

/* ========================================================================
 * Helpers
 * ======================================================================== */

#if defined(_WIN32)
#define TFL_EXPORT __declspec(dllexport)
#else
#define TFL_EXPORT __attribute__((visibility("default")))
#endif

/* Size of a struct up to and including `last_field`: the value a writer puts
 * in struct_size. It does not change when fields are appended later. */
#define TFL_STRUCT_SIZE(type, last_field) \
  (offsetof(type, last_field) + sizeof(((type*)0)->last_field))

/* True when the struct at `ptr` was written by a peer that knows `field`. */
#define TFL_HAS_FIELD(ptr, type, field) \
  ((ptr)->struct_size >= TFL_STRUCT_SIZE(type, field))

/* Gives a plugin-defined function C linkage from C and C++ sources alike. */
#ifdef __cplusplus
#define TFL_EXTERN_C extern "C"
#else
#define TFL_EXTERN_C
#endif

#ifdef __cplusplus
#define TFL_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define TFL_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/* ========================================================================
 * Errors
 * ========================================================================
 *
 * Every fallible ABI function returns `TFL_Error*`: NULL means success. A
 * non-NULL error is owned by the plugin that created it; the host reads its
 * code and message through TFL_CoreApi and then releases it exactly once with
 * TFL_Error_Destroy. Errors may be created and destroyed on any thread.
 *
 * Work that fails asynchronously (a kernel running on a stream) leaves a
 * pending error on its stream: the next synchronizing call on that stream
 * (Stream_Synchronize, a blocking Memory_Copy, Event_Synchronize on an event
 * recorded after the failure, Device_Synchronize) returns it, once. Work
 * enqueued after a failure still runs.
 */
typedef struct TFL_Error TFL_Error;

/* The closed set of error codes. A host that receives a value it does not
 * know treats it as TFL_ERR_UNKNOWN. */
typedef enum TFL_ErrorCode {
  TFL_OK = 0,
  TFL_ERR_UNKNOWN = 1,
  TFL_ERR_INVALID_ARGUMENT = 2,  /* bad shape, dtype, handle or value */
  TFL_ERR_OUT_OF_MEMORY = 3,     /* becomes torch.OutOfMemoryError */
  TFL_ERR_UNIMPLEMENTED = 4,     /* valid request this plugin cannot serve */
  TFL_ERR_DEVICE = 5,            /* the device or a kernel on it failed */
  TFL_ERR_TIMEOUT = 6,           /* an operation did not finish in time */
  TFL_ERR_ABORTED = 7,           /* cancelled, e.g. an aborted communicator */
  TFL_ERR_UNAVAILABLE = 8,       /* resource or peer temporarily unavailable */
  TFL_ERR_INTERNAL = 9,          /* a bug inside the plugin */
  TFL_ERR_ABI_MISMATCH = 10      /* the plugin refuses the host's version */
} TFL_ErrorCode;

/* ========================================================================
 * Data types
 * ======================================================================== */

typedef enum TFL_DType {
  TFL_DTYPE_BOOL = 0,
  TFL_DTYPE_UINT8 = 1,
  TFL_DTYPE_INT8 = 2,
  TFL_DTYPE_INT16 = 3,
  TFL_DTYPE_INT32 = 4,
  TFL_DTYPE_INT64 = 5,
  TFL_DTYPE_FLOAT16 = 6,
  TFL_DTYPE_BFLOAT16 = 7,
  TFL_DTYPE_FLOAT32 = 8,
  TFL_DTYPE_FLOAT64 = 9,
  TFL_DTYPE_COMPLEX64 = 10,
  TFL_DTYPE_COMPLEX128 = 11,
  TFL_DTYPE_UINT16 = 12,
  TFL_DTYPE_UINT32 = 13,
  TFL_DTYPE_UINT64 = 14,
  TFL_DTYPE_FLOAT8_E4M3FN = 15,
  TFL_DTYPE_FLOAT8_E5M2 = 16
} TFL_DType;

/* Bit masks over TFL_DType, used for "which dtypes does this kernel take". */
#define TFL_DTYPE_BIT(dtype) (UINT64_C(1) << (dtype))
#define TFL_DTYPES_INTEGRAL                                            \
  (TFL_DTYPE_BIT(TFL_DTYPE_UINT8) | TFL_DTYPE_BIT(TFL_DTYPE_INT8) |    \
   TFL_DTYPE_BIT(TFL_DTYPE_INT16) | TFL_DTYPE_BIT(TFL_DTYPE_INT32) |   \
   TFL_DTYPE_BIT(TFL_DTYPE_INT64))
#define TFL_DTYPES_FLOATING                                              \
  (TFL_DTYPE_BIT(TFL_DTYPE_FLOAT16) | TFL_DTYPE_BIT(TFL_DTYPE_BFLOAT16) | \
   TFL_DTYPE_BIT(TFL_DTYPE_FLOAT32) | TFL_DTYPE_BIT(TFL_DTYPE_FLOAT64))
#define TFL_DTYPES_ALL (~UINT64_C(0))

/* Memory formats (dense layouts) a device or a kernel may prefer. */
typedef enum TFL_MemoryFormat {
  TFL_MEMORY_FORMAT_ANY = 0,           /* whatever the op's meta function gives */
  TFL_MEMORY_FORMAT_CONTIGUOUS = 1,    /* row-major */
  TFL_MEMORY_FORMAT_CHANNELS_LAST = 2  /* NHWC strides for 4-d tensors */
} TFL_MemoryFormat;

/* ========================================================================
 * Opaque handles (created and owned by the plugin)
 * ======================================================================== */

typedef struct TFL_Stream TFL_Stream;             /* an in-order work queue */
typedef struct TFL_Event TFL_Event;               /* a marker in a stream */
typedef struct TFL_Communicator TFL_Communicator; /* a collectives group */
typedef struct TFL_Executable TFL_Executable;     /* a compiled graph */

/* ========================================================================
 * Tensors
 * ======================================================================== */

/* Where the bytes of a TFL_Tensor live. */
typedef enum TFL_MemoryKind {
  TFL_MEMORY_DEVICE = 0,  /* device memory from TFL_Memory_Allocate */
  TFL_MEMORY_HOST = 1     /* ordinary host memory (only for 0-dim scalars,
                             and only to kernels flagged TFL_KERNEL_HOST_SCALARS) */
} TFL_MemoryKind;

/* A strided view of memory, in the style of DLPack's DLTensor.
 *
 * Lifetime: the descriptor, its sizes and strides arrays are owned by the
 * host and valid only for the duration of the call they are passed to. A
 * plugin that runs work asynchronously copies what it needs before
 * returning. The memory `data` points to stays valid until the work enqueued
 * by that call has completed on its stream (the host's allocator is
 * stream-ordered). */
typedef struct TFL_Tensor {
  size_t struct_size;
  void* data;              /* address of element (0, ..., 0); may be NULL when numel == 0 */
  int32_t dtype;           /* TFL_DType */
  int32_t memory_kind;     /* TFL_MemoryKind */
  int32_t device;          /* device index, -1 for host memory */
  int32_t ndim;            /* number of dimensions, 0 for a scalar */
  const int64_t* sizes;    /* ndim entries; may be NULL when ndim == 0 */
  const int64_t* strides;  /* ndim entries, in elements (not bytes), never negative */
  int64_t numel;           /* product of sizes */
  int64_t storage_offset;  /* elements from the start of the allocation to `data` */
} TFL_Tensor;
#define TFL_Tensor_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Tensor, storage_offset)

/* ========================================================================
 * Tagged values: the arguments of an operator, in schema order
 * ======================================================================== */

typedef enum TFL_ValueTag {
  TFL_VALUE_NONE = 0,          /* an absent optional argument */
  TFL_VALUE_TENSOR = 1,        /* v.tensor */
  TFL_VALUE_INT = 2,           /* v.i (also a Scalar holding an integer) */
  TFL_VALUE_DOUBLE = 3,        /* v.d (also a Scalar holding a float) */
  TFL_VALUE_BOOL = 4,          /* v.i: 0 or 1 (also a Scalar holding a bool) */
  TFL_VALUE_COMPLEX = 5,       /* v.c (a Scalar holding a complex number) */
  TFL_VALUE_INT_LIST = 6,      /* v.ints */
  TFL_VALUE_DOUBLE_LIST = 7,   /* v.doubles (also a Scalar[], elements as doubles) */
  TFL_VALUE_BOOL_LIST = 8,     /* v.bools */
  TFL_VALUE_TENSOR_LIST = 9,   /* v.tensors; an entry is NULL for an absent
                                  element of an optional-tensor list */
  TFL_VALUE_STRING = 10,       /* v.str */
  TFL_VALUE_SCALAR_TYPE = 11,  /* v.i: a TFL_DType */
  TFL_VALUE_MEMORY_FORMAT = 12,/* v.i: a TFL_MemoryFormat */
  TFL_VALUE_LAYOUT = 13,       /* v.i: 0 = strided (others are not passed) */
  TFL_VALUE_DEVICE = 14,       /* v.i: device index, -1 for host */
  TFL_VALUE_GRAPH_REF = 15     /* v.i: index of a value in a TFL_Graph */
} TFL_ValueTag;

/* One argument. Scalars keep their kind (integer, float, bool, complex):
 * nothing is passed through a lossy double.
 *
 * TFL_Value is frozen at 32 bytes for the whole major version so arrays of
 * values have one stride on both sides; new kinds of value get new tags. */
typedef struct TFL_Value {
  int32_t tag;       /* TFL_ValueTag */
  int32_t reserved;  /* zero */
  union {
    const TFL_Tensor* tensor;
    int64_t i;
    double d;
    struct { double re, im; } c;
    struct { const int64_t* data; size_t size; } ints;
    struct { const double* data; size_t size; } doubles;
    struct { const uint8_t* data; size_t size; } bools;
    struct { const TFL_Tensor* const* data; size_t size; } tensors;
    struct { const char* data; size_t size; } str;
    uint8_t reserved_bytes[24];
  } v;
} TFL_Value;

TFL_STATIC_ASSERT(sizeof(TFL_Value) == 32, "TFL_Value is frozen at 32 bytes");

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TORCH_FL_TYPES_H_ */
