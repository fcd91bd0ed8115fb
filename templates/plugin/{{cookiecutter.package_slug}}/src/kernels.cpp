// Operator kernels. There are two ways to give the host a kernel; this file
// shows one of each:
//
//  1. The kernel table (Kernels_List): a TFL_KernelDesc per ATen overload,
//     with the dtypes it takes and flags saying how the bridge should prepare
//     its inputs. aten::add.Tensor below is registered this way.
//  2. The symbol convention: an exported function torch_fl_op_<name>_<overload>
//     (TFL_DEFINE_OP). The bridge finds it by name and registers it for
//     float32 with TFL_KERNEL_SYMBOL_DEFAULT_FLAGS: dense, same-shape,
//     same-dtype operands. aten::mul.Tensor below is registered this way.
//
// A kernel is a launch: check the arguments, copy out what the work needs
// (descriptors die when the call returns), enqueue the work on ctx->stream,
// return. Outputs arrive allocated. A kernel that cannot serve a call returns
// TFL_ERR_UNIMPLEMENTED before enqueuing anything, and the bridge runs that
// call through its fallback chain instead.
//
// Every operator without a kernel here still works: the bridge decomposes it
// or runs it on the CPU, and counts it (torch_fl.op_stats()). Adding kernels
// is how the device stops falling back.
#include "kernels.h"

#include <cstdint>

#include "runtime.h"
#include "torch_fl/plugin_helpers.h"

namespace {{ cookiecutter.package_slug }} {

namespace tfl = ::torch_fl::helpers;

namespace {

// Dense float32 operands of a binary elementwise operator, as the flags
// CONTIGUOUS_INPUTS | BROADCAST_INPUTS | PROMOTE_INPUTS | CONTIGUOUS_OUTPUTS
// deliver them: same dtype, row-major, shaped like the output; a 1-element
// operand (a Python scalar) is read as a scalar. Plain pointers and numbers,
// so the enqueued work can keep them after the call returns.
struct BinaryOperands {
  const float* a;
  const float* b;
  float* out;
  int64_t numel;
  int64_t a_step;  // 1, or 0 for a scalar operand
  int64_t b_step;
};

// Messages need not name the operator: tfl::guarded() puts it in front.
const TFL_Tensor* tensor_arg(const TFL_Kernel_Args* args, size_t i) {
  if (i >= args->num_inputs || args->inputs[i].tag != TFL_VALUE_TENSOR)
    tfl::invalid_argument("expects a tensor as argument ", i);
  return args->inputs[i].v.tensor;
}

BinaryOperands binary_float32(const TFL_Kernel_Args* args) {
  if (args->num_outputs != 1) tfl::invalid_argument("expects 1 output, got ", args->num_outputs);
  const TFL_Tensor* a = tensor_arg(args, 0);
  const TFL_Tensor* b = tensor_arg(args, 1);
  const TFL_Tensor* out = args->outputs[0];
  if (out == nullptr) tfl::invalid_argument("expects its output to be requested");
  for (const TFL_Tensor* t : {a, b, out}) {
    // Declining (not failing) lets the bridge serve this call another way.
    if (t->dtype != TFL_DTYPE_FLOAT32) tfl::unimplemented("runs float32 only, got dtype ", t->dtype);
    if (t->memory_kind != TFL_MEMORY_DEVICE) tfl::invalid_argument("got a tensor that is not in device memory");
    if (t->numel != out->numel && t->numel != 1)
      tfl::invalid_argument("expects operands broadcast to the output's ", out->numel, " elements, got ", t->numel);
  }
  return {static_cast<const float*>(a->data),
          static_cast<const float*>(b->data),
          static_cast<float*>(out->data),
          out->numel,
          a->numel == out->numel ? 1 : 0,
          b->numel == out->numel ? 1 : 0};
}

// A Scalar argument arrives tagged with its kind: never assume a double.
float scalar_arg(const TFL_Kernel_Args* args, size_t i) {
  if (i >= args->num_inputs) return 1.0f;
  const TFL_Value& v = args->inputs[i];
  switch (v.tag) {
    case TFL_VALUE_INT:
    case TFL_VALUE_BOOL: return static_cast<float>(v.v.i);
    case TFL_VALUE_DOUBLE: return static_cast<float>(v.v.d);
    default: tfl::unimplemented("takes a real scalar as argument ", i, ", got value tag ", v.tag);
  }
}

// aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor
// Registered through the table, so it also serves add_.Tensor and add.out.
TFL_Error* add_tensor(const TFL_Kernel_Args* args) {
  return tfl::guarded("aten::add.Tensor", [&] {
    const BinaryOperands x = binary_float32(args);
    const float alpha = scalar_arg(args, 2);
    if (x.numel == 0) return;
    // VENDOR: launch your add kernel on the hardware queue behind ctx->stream.
    runtime().stream(args->ctx->stream)->submit([x, alpha] {
      for (int64_t i = 0; i < x.numel; ++i) x.out[i] = x.a[i * x.a_step] + alpha * x.b[i * x.b_step];
    });
  });
}

constexpr uint32_t kElementwiseFlags = TFL_KERNEL_CONTIGUOUS_INPUTS | TFL_KERNEL_BROADCAST_INPUTS |
                                       TFL_KERNEL_PROMOTE_INPUTS | TFL_KERNEL_CONTIGUOUS_OUTPUTS;

// VENDOR: one entry per kernel you register. Next in line: the 30 most used
// operators (see the README); torch_fl.op_stats() tells you which ones your
// models fall back on most.
const TFL_KernelDesc kAddTensor = {
    TFL_KernelDesc_STRUCT_SIZE,
    "aten::add.Tensor",
    add_tensor,
    nullptr,                           // user_data, handed back in ctx->user_data
    TFL_DTYPE_BIT(TFL_DTYPE_FLOAT32),  // other dtypes fall back
    kElementwiseFlags,
    TFL_MEMORY_FORMAT_ANY,
    // The schema this kernel is written for, as str(torch.ops.aten.add.Tensor._schema)
    // prints it. Should a PyTorch release change it, the bridge refuses the
    // kernel with a warning (the op falls back) rather than hand it shifted
    // arguments; a release that only appends defaulted arguments keeps it.
    "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
};
const TFL_KernelDesc* const kKernelTable[] = {&kAddTensor};

}  // namespace

void list_kernels(const TFL_KernelDesc* const** kernels, size_t* count) {
  runtime();  // fails clearly before Plugin_Initialize
  *kernels = kKernelTable;
  *count = sizeof(kKernelTable) / sizeof(kKernelTable[0]);
}

}  // namespace {{ cookiecutter.package_slug }}

// aten::mul.Tensor(Tensor self, Tensor other) -> Tensor, by the symbol
// convention: the exported name alone registers it (see exports.map).
TFL_DEFINE_OP(mul, Tensor) {
  using namespace {{ cookiecutter.package_slug }};
  return tfl::guarded("aten::mul.Tensor", [&] {
    const BinaryOperands x = binary_float32(args);
    if (x.numel == 0) return;
    // VENDOR: launch your multiply kernel here.
    runtime().stream(args->ctx->stream)->submit([x] {
      for (int64_t i = 0; i < x.numel; ++i) x.out[i] = x.a[i * x.a_step] * x.b[i * x.b_step];
    });
  });
}
