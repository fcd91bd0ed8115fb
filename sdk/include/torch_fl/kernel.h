/* torch-fl plugin ABI: the kernel group — operator kernels and custom ops.
 *
 * Optional as a group (a plugin without it runs every operator through the
 * bridge's fallback chain), but it is where a device earns its keep.
 *
 * How the bridge calls a kernel
 * -----------------------------
 * A plugin registers a kernel under an ATen schema name such as
 * "aten::add.Tensor", "aten::mm" or "aten::sum.dim_IntList". For every call
 * of that operator on the plugin's device the bridge:
 *   1. checks that all tensors are on one device (0-dim CPU tensors are legal
 *      operands) and that the dtype is one the kernel declared;
 *   2. works out the outputs' sizes, strides and dtype (meta functions, with
 *      a cache) and allocates them — kernels never allocate their outputs;
 *   3. adapts the inputs to the kernel's flags (contiguous, broadcast,
 *      promoted to one dtype, scalars on the device);
 *   4. calls the kernel on the current stream and maps a returned error to a
 *      Python exception that names the plugin, the operator and the code.
 *
 * Arguments: `inputs` holds the operator's arguments in schema order, except
 * `out=` tensors; `outputs` holds the tensors the operator returns (a
 * returned Tensor[] is flattened). An `outputs` entry is NULL when the caller
 * did not ask for that result (e.g. a False entry of a backward op's
 * output_mask). A `Scalar[]` argument arrives as TFL_VALUE_DOUBLE_LIST.
 * An operator's int (SymInt) returns are not outputs: the bridge takes them
 * from the operator's meta function, and `outputs` holds only its tensors.
 *
 * Fused attention: a kernel for
 * "aten::_scaled_dot_product_fused_attention_overrideable" (and, optionally,
 * its _backward) makes F.scaled_dot_product_attention pick that op for 4-d
 * inputs with equal head counts, dropout_p == 0 and a dtype the kernel
 * declares; other calls, a missing backward and a declined call run the
 * bridge's decomposition of the op on the device.
 *
 * Variants: a kernel registered for the functional overload also serves the
 * in-place and out= overloads with the same arguments (unless
 * TFL_KERNEL_NO_DERIVED_VARIANTS); ctx->variant says which one is running.
 * For in-place, outputs[0] is the same memory as inputs[0] (same data,
 * sizes and strides); for out=, outputs are the user's out tensors (or
 * temporaries standing in for them, see below), already resized. The flags hold for every variant:
 * when the caller's self or out tensor is not what the flags promise (a
 * strided view for a CONTIGUOUS kernel, another dtype than the result's, an
 * out tensor that overlaps an input), the kernel gets a dense temporary that
 * the host copies back afterwards. An in-place call whose result dtype
 * differs from what inputs[0] holds (an in-place comparison: a bool result
 * into a float self) runs as the out= variant into a temporary of the result
 * dtype, which the host casts into self. In-place overloads without
 * returns (_foreach_add_) write their self through the input descriptors.
 * Arguments an operator mutates (running statistics, optimizer state) are
 * written through their input descriptors, under the same rules.
 *
 * A kernel is a launch: it validates, enqueues its work on ctx->stream and
 * returns. It may also run synchronously. It must copy any descriptor data it
 * needs later (see TFL_Tensor lifetime) and must not block on other streams.
 *
 * Declining a call: a kernel that cannot serve these particular arguments (an
 * output dtype the device lacks, too many dimensions, ...) returns
 * TFL_ERR_UNIMPLEMENTED before enqueuing anything; the bridge then runs the
 * call through its fallback chain and counts it there. Any other error is
 * raised to the caller.
 *
 * Tensors have at most TFL_MAX_DIMS dimensions.
 *
 * The symbol convention
 * ---------------------
 * Instead of (or besides) TFL_Kernels_List, a plugin may export functions
 * named torch_fl_op_<name>_<overload> with the TFL_KernelFn signature, e.g.
 * torch_fl_op_add_Tensor for "aten::add.Tensor" and torch_fl_op_mm for
 * "aten::mm" (the default overload has no suffix). Such kernels are
 * registered for float32 with TFL_KERNEL_SYMBOL_DEFAULT_FLAGS, the most
 * conservative contract: dense, same-shape, same-dtype operands on the device.
 * A kernel listed by TFL_Kernels_List wins over a symbol for the same op.
 */
#ifndef TORCH_FL_KERNEL_H_
#define TORCH_FL_KERNEL_H_

#include "torch_fl/types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest ndim the bridge passes to a kernel; larger tensors fall back. */
#define TFL_MAX_DIMS 64

/* Which overload of a kernel's operator is running. */
typedef enum TFL_KernelVariant {
  TFL_VARIANT_FUNCTIONAL = 0, /* outputs are fresh allocations */
  TFL_VARIANT_INPLACE = 1,    /* outputs[0] aliases inputs[0] */
  TFL_VARIANT_OUT = 2         /* outputs are the caller's out= tensors */
} TFL_KernelVariant;

/* What the bridge hands a kernel besides its arguments. Host-owned, valid for
 * the duration of the call. */
typedef struct TFL_KernelContext TFL_KernelContext;
struct TFL_KernelContext {
  size_t struct_size;
  int32_t device;      /* device the kernel runs on */
  int32_t variant;     /* TFL_KernelVariant */
  TFL_Stream* stream;  /* enqueue work here */
  const char* op_name; /* the schema name being run, e.g. "aten::add_.Tensor" */
  void* user_data;     /* the user_data of the kernel's descriptor */
  /* Random kernels (TFL_KERNEL_RANDOM): a counter-based generator keyed by
   * rng_seed may use counters [rng_offset, rng_offset + rng_span). The host
   * advances its generator past them, so runs are reproducible from
   * torch.manual_seed. Zero for other kernels. */
  uint64_t rng_seed;
  uint64_t rng_offset;
  uint64_t rng_span;
  /* Scratch device memory on ctx->device for work this call enqueues on
   * ctx->stream; reclaimed by the host, stream-ordered, after the kernel
   * returns. Returns a TFL_ErrorCode (TFL_OK on success). */
  int32_t (*allocate_workspace)(TFL_KernelContext* ctx, size_t size, void** ptr);
  void* host_data;     /* opaque to the plugin */
};
#define TFL_KernelContext_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_KernelContext, host_data)

typedef struct TFL_Kernel_Args {
  size_t struct_size;
  TFL_KernelContext* ctx;
  const TFL_Value* inputs;           /* schema arguments except out= tensors */
  size_t num_inputs;
  const TFL_Tensor* const* outputs;  /* the returned tensors, allocated; NULL = not requested */
  size_t num_outputs;
} TFL_Kernel_Args;
#define TFL_Kernel_Args_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_Kernel_Args, num_outputs)

/* A kernel. Returns NULL on success or a plugin-owned error. */
typedef TFL_Error* (*TFL_KernelFn)(const TFL_Kernel_Args* args);

/* What a kernel can take. Without a flag the kernel receives tensors as the
 * caller passed them: any strides, shapes and dtypes, 0-dim CPU operands
 * uploaded to the device. */
typedef enum TFL_KernelFlags {
  /* Tensor inputs arrive dense and row-major. */
  TFL_KERNEL_CONTIGUOUS_INPUTS = 1u << 0,
  /* Tensor inputs are expanded to the first output's shape (elementwise ops);
   * combine with CONTIGUOUS_INPUTS to get them materialized. */
  TFL_KERNEL_BROADCAST_INPUTS = 1u << 1,
  /* Tensor inputs are cast to the operator's common dtype (type promotion
   * over all tensor inputs), as elementwise arithmetic needs. */
  TFL_KERNEL_PROMOTE_INPUTS = 1u << 2,
  /* Outputs arrive dense and row-major; for a strided in-place or out=
   * target, or a fresh output PyTorch lays out otherwise (channels-last),
   * the bridge runs the kernel into a temporary and copies back. */
  TFL_KERNEL_CONTIGUOUS_OUTPUTS = 1u << 3,
  /* 0-dim CPU operands (Python numbers in `x * 0.5`) arrive as
   * TFL_MEMORY_HOST tensors with their own dtype, readable during the launch,
   * instead of being uploaded; PROMOTE_INPUTS does not cast them. Read the
   * value in the op's compute type, as PyTorch's kernels do: uploaded scalars
   * are cast to the common dtype, which for float16/bfloat16 ops is less
   * precise than PyTorch's own CPU and CUDA kernels. */
  TFL_KERNEL_HOST_SCALARS = 1u << 4,
  /* The kernel draws random numbers: ctx carries seed, offset and span. */
  TFL_KERNEL_RANDOM = 1u << 5,
  /* Do not also register the in-place and out= overloads. */
  TFL_KERNEL_NO_DERIVED_VARIANTS = 1u << 6
} TFL_KernelFlags;

#define TFL_KERNEL_SYMBOL_DEFAULT_FLAGS                              \
  (TFL_KERNEL_CONTIGUOUS_INPUTS | TFL_KERNEL_BROADCAST_INPUTS |      \
   TFL_KERNEL_PROMOTE_INPUTS | TFL_KERNEL_CONTIGUOUS_OUTPUTS)

/* One registered kernel. Owned by the plugin, valid until unload. */
typedef struct TFL_KernelDesc {
  size_t struct_size;
  const char* op;        /* ATen schema name: "aten::<name>[.<overload>]" */
  TFL_KernelFn fn;
  void* user_data;       /* handed back in ctx->user_data */
  uint64_t dtypes;       /* TFL_DTYPE_BIT mask of the common dtype of the tensor
                            inputs (or of the output when there is no tensor
                            input) the kernel accepts; other dtypes fall back */
  uint32_t flags;        /* TFL_KernelFlags */
  int32_t preferred_memory_format; /* TFL_MemoryFormat of fresh outputs; ANY = as meta says */
  /* ABI 1.1. The full schema the kernel was written for, as PyTorch prints
   * it (str(torch.ops.aten.add.Tensor._schema)):
   * "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor".
   * NULL (or a plugin built against 1.0) registers by name alone. With it the
   * host compares the schema against the running PyTorch's:
   *   - equal: the kernel is registered;
   *   - the running schema only adds arguments that have defaults: the kernel
   *     is registered and receives exactly the arguments of its own schema;
   *     a call that passes a non-default value for an added argument runs on
   *     the fallback chain instead;
   *   - anything else (a changed type, default, name, order or return): the
   *     kernel is refused with a warning naming the operator and both
   *     schemas, and the operator falls back.
   * A plugin that fills this field cannot be handed shifted arguments when a
   * PyTorch release changes an operator. */
  const char* schema;
} TFL_KernelDesc;
#define TFL_KernelDesc_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_KernelDesc, schema)

/* A new operator with autograd, in the plugin's own namespace.
 *
 * Forward: inputs are the schema's arguments, outputs its returns; output i
 * takes the sizes and dtype of the tensor argument at schema position
 * output_like[i] (dense, row-major).
 * Backward (optional; without it the op is not differentiable): inputs are
 * the gradients of the forward outputs (TFL_VALUE_NONE where undefined), then
 * the forward arguments, then the forward outputs; outputs are one gradient
 * per forward tensor argument, in order, allocated like that argument. */
typedef struct TFL_CustomOpDesc {
  size_t struct_size;
  const char* schema;           /* e.g. "flemu::scaled_gelu(Tensor x, float s) -> Tensor" */
  TFL_KernelFn forward;
  TFL_KernelFn backward;        /* may be NULL */
  void* user_data;
  uint64_t dtypes;              /* as in TFL_KernelDesc */
  uint32_t flags;               /* TFL_KernelFlags that apply to tensors */
  const int32_t* output_like;   /* one schema position per return */
  size_t num_outputs;
} TFL_CustomOpDesc;
#define TFL_CustomOpDesc_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_CustomOpDesc, num_outputs)

/* The plugin's kernels for ATen operators. The arrays and descriptors are
 * owned by the plugin and live until the library is unloaded. */
typedef struct TFL_Kernels_List_Args {
  size_t struct_size;
  const TFL_KernelDesc* const* kernels; /* out */
  size_t num_kernels;                   /* out */
} TFL_Kernels_List_Args;
#define TFL_Kernels_List_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Kernels_List_Args, num_kernels)
typedef TFL_Error* TFL_Kernels_List(TFL_Kernels_List_Args* args);

/* The plugin's custom operators (optional function). Same ownership. */
typedef struct TFL_Kernels_ListCustomOps_Args {
  size_t struct_size;
  const TFL_CustomOpDesc* const* ops; /* out */
  size_t num_ops;                     /* out */
} TFL_Kernels_ListCustomOps_Args;
#define TFL_Kernels_ListCustomOps_Args_STRUCT_SIZE \
  TFL_STRUCT_SIZE(TFL_Kernels_ListCustomOps_Args, num_ops)
typedef TFL_Error* TFL_Kernels_ListCustomOps(TFL_Kernels_ListCustomOps_Args* args);

typedef struct TFL_KernelApi {
  size_t struct_size;
  TFL_Kernels_List* Kernels_List;
  TFL_Kernels_ListCustomOps* Kernels_ListCustomOps; /* optional */
} TFL_KernelApi;
#define TFL_KernelApi_STRUCT_SIZE TFL_STRUCT_SIZE(TFL_KernelApi, Kernels_ListCustomOps)

/* The symbol convention. */
#define TFL_OP_SYMBOL_PREFIX "torch_fl_op_"
#define TFL_DEFINE_OP(name, overload) \
  TFL_EXTERN_C TFL_EXPORT TFL_Error* torch_fl_op_##name##_##overload(const TFL_Kernel_Args* args)
#define TFL_DEFINE_OP_DEFAULT(name) \
  TFL_EXTERN_C TFL_EXPORT TFL_Error* torch_fl_op_##name(const TFL_Kernel_Args* args)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TORCH_FL_KERNEL_H_ */
