#include "registry.h"

#include <array>
#include <vector>

#include "../errors.h"
#include "launch.h"

namespace flemu {

namespace {

const char* const kNames[kNumKernels] = {
    "aten::fill_.Scalar", "aten::zero_",      "aten::add.Tensor", "aten::sub.Tensor",
    "aten::mul.Tensor",   "aten::div.Tensor", "aten::add.Scalar", "aten::sub.Scalar",
    "aten::mul.Scalar",   "aten::div.Scalar", "aten::neg",        "aten::relu",
    "aten::sum",          "aten::sum.dim_IntList", "aten::mean",  "aten::mean.dim",
    "aten::mm",           "aten::addmm",      "aten::copy_",      "aten::abs",
    "aten::maximum",      "flemu::scale_add", "flemu::scale_add_backward",
};

// Dtype groups, before the FLEMU_FP64/FP16/BF16 switches are applied.
constexpr uint64_t kBool = TFL_DTYPE_BIT(TFL_DTYPE_BOOL);
constexpr uint64_t kInts = TFL_DTYPES_INTEGRAL;
constexpr uint64_t kFloats = TFL_DTYPES_FLOATING;
constexpr uint64_t kAll = kBool | kInts | kFloats;
constexpr uint64_t kF32 = TFL_DTYPE_BIT(TFL_DTYPE_FLOAT32);

struct Entry {
  int32_t id;
  TFL_KernelFn fn;
  uint64_t dtypes;
  uint32_t flags;
};

constexpr uint32_t kElementwise = TFL_KERNEL_BROADCAST_INPUTS | TFL_KERNEL_PROMOTE_INPUTS;

const Entry kEntries[] = {
    // In-place by name: no functional/out= variants to derive.
    {kFillScalar, kernel_fill_scalar, kAll, TFL_KERNEL_NO_DERIVED_VARIANTS},
    {kZero, kernel_zero, kAll, TFL_KERNEL_NO_DERIVED_VARIANTS},
    {kAddTensor, kernel_add_tensor, kAll, kElementwise},
    {kSubTensor, kernel_sub_tensor, kInts | kFloats, kElementwise},
    {kMulTensor, kernel_mul_tensor, kAll, kElementwise},
    // Integral inputs divide into a floating output.
    {kDivTensor, kernel_div_tensor, kAll, kElementwise},
    {kAddScalar, kernel_add_scalar, kAll, 0},
    {kSubScalar, kernel_sub_scalar, kInts | kFloats, 0},
    {kMulScalar, kernel_mul_scalar, kAll, 0},
    {kDivScalar, kernel_div_scalar, kAll, 0},
    {kNeg, kernel_neg, kInts | kFloats, 0},
    {kRelu, kernel_relu, kInts | kFloats, 0},
    {kSum, kernel_sum, kAll, 0},
    {kSumDim, kernel_sum_dim, kAll, 0},
    // The output dtype decides; integral input needs dtype= and the host's meta check says so.
    {kMean, kernel_mean, kAll, 0},
    {kMeanDim, kernel_mean_dim, kAll, 0},
    {kMm, kernel_mm, kFloats, 0},
    {kAddmm, kernel_addmm, kFloats, 0},
    {kCopy, kernel_copy, kAll, 0},
};
constexpr size_t kNumEntries = sizeof(kEntries) / sizeof(kEntries[0]);

// Filled by configure_kernels; they live until the library is unloaded.
std::array<TFL_KernelDesc, kNumEntries> g_descs;
std::array<const TFL_KernelDesc*, kNumEntries> g_desc_ptrs;
TFL_CustomOpDesc g_scale_add;
const TFL_CustomOpDesc* g_custom_ptrs[1];
const int32_t kScaleAddOutputLike[1] = {0};

}  // namespace

const char* kernel_name(int32_t id) { return id >= 0 && id < kNumKernels ? kNames[id] : "unknown kernel"; }

int32_t kernel_id_by_name(const std::string& name) {
  for (int32_t i = 0; i < kNumKernels; ++i)
    if (name == kNames[i]) return i;
  return -1;
}

void configure_kernels(const Config& cfg) {
  uint64_t disabled = 0;
  if (!cfg.fp64) disabled |= TFL_DTYPE_BIT(TFL_DTYPE_FLOAT64);
  if (!cfg.fp16) disabled |= TFL_DTYPE_BIT(TFL_DTYPE_FLOAT16);
  if (!cfg.bf16) disabled |= TFL_DTYPE_BIT(TFL_DTYPE_BFLOAT16);

  KernelSettings s;
  s.enabled_dtypes = kAll & ~disabled;
  s.strict = cfg.strict;
  s.peer_access = cfg.peer_access;
  if (!cfg.inject_error_op.empty()) {
    s.inject_error_id = kernel_id_by_name(cfg.inject_error_op);
    if (s.inject_error_id < 0)
      invalid_argument("invalid FLEMU_INJECT_ERROR='", cfg.inject_error_op, ":", cfg.inject_error_code,
                       cfg.inject_error_async ? ":async" : "", "': '", cfg.inject_error_op,
                       "' is not a flemu kernel (e.g. aten::mm, aten::add.Tensor, flemu::scale_add)");
    s.inject_error_code = cfg.inject_error_code;
    s.inject_error_async = cfg.inject_error_async;
  }
  if (!cfg.inject_crash_op.empty()) {
    s.inject_crash_id = kernel_id_by_name(cfg.inject_crash_op);
    if (s.inject_crash_id < 0)
      invalid_argument("invalid FLEMU_INJECT_CRASH='", cfg.inject_crash_op,
                       "': not a flemu kernel (e.g. aten::mm, aten::add.Tensor, flemu::scale_add)");
  }
  kernel_settings() = s;

  for (size_t i = 0; i < kNumEntries; ++i) {
    TFL_KernelDesc& d = g_descs[i];
    d.struct_size = TFL_KernelDesc_STRUCT_SIZE;
    d.op = kNames[kEntries[i].id];
    d.fn = kEntries[i].fn;
    d.user_data = nullptr;
    d.dtypes = kEntries[i].dtypes & ~disabled;
    d.flags = kEntries[i].flags;
    d.preferred_memory_format = TFL_MEMORY_FORMAT_ANY;
    g_desc_ptrs[i] = &d;
  }

  g_scale_add.struct_size = TFL_CustomOpDesc_STRUCT_SIZE;
  g_scale_add.schema = "flemu::scale_add(Tensor x, Tensor y, float alpha) -> Tensor";
  g_scale_add.forward = kernel_scale_add;
  g_scale_add.backward = kernel_scale_add_backward;
  g_scale_add.user_data = nullptr;
  g_scale_add.dtypes = kF32;
  g_scale_add.flags = TFL_KERNEL_CONTIGUOUS_INPUTS | TFL_KERNEL_BROADCAST_INPUTS;
  g_scale_add.output_like = kScaleAddOutputLike;
  g_scale_add.num_outputs = 1;
  g_custom_ptrs[0] = &g_scale_add;
}

void list_kernels(const TFL_KernelDesc* const** kernels, size_t* count) {
  *kernels = g_desc_ptrs.data();
  *count = kNumEntries;
}

void list_custom_ops(const TFL_CustomOpDesc* const** ops, size_t* count) {
  *ops = g_custom_ptrs;
  *count = 1;
}

}  // namespace flemu
