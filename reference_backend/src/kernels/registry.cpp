#include "registry.h"

#include <array>
#include <vector>

#include "../errors.h"
#include "launch.h"
#include "nn_kernels.h"
#include "tensor_kernels.h"

namespace flemu {

namespace {

const char* const kNames[] = {
    "aten::fill_.Scalar", "aten::zero_",      "aten::add.Tensor", "aten::sub.Tensor",
    "aten::mul.Tensor",   "aten::div.Tensor", "aten::add.Scalar", "aten::sub.Scalar",
    "aten::mul.Scalar",   "aten::div.Scalar", "aten::neg",        "aten::relu",
    "aten::sum",          "aten::sum.dim_IntList", "aten::mean",  "aten::mean.dim",
    "aten::mm",           "aten::addmm",      "aten::copy_",      "aten::abs",
    "aten::maximum",      "flemu::scale_add", "flemu::scale_add_backward",
    // Neural-network kernels (nn_kernels.h): convolution, normalization, pooling,
    // embedding, dropout, random numbers, optimizers.
    "aten::convolution",
    "aten::convolution_backward",
    "aten::native_batch_norm",
    "aten::_native_batch_norm_legit",
    "aten::_native_batch_norm_legit.no_stats",
    "aten::_native_batch_norm_legit_no_training",
    "aten::_batch_norm_with_update",
    "aten::_batch_norm_no_update",
    "aten::native_batch_norm_backward",
    "aten::batch_norm_backward",
    "aten::native_group_norm",
    "aten::native_group_norm_backward",
    "aten::native_layer_norm",
    "aten::native_layer_norm_backward",
    "aten::max_pool2d_with_indices",
    "aten::max_pool2d_with_indices_backward",
    "aten::avg_pool2d",
    "aten::avg_pool2d_backward",
    "aten::_adaptive_avg_pool2d",
    "aten::_adaptive_avg_pool2d_backward",
    "aten::upsample_nearest2d",
    "aten::upsample_nearest2d_backward",
    "aten::embedding",
    "aten::embedding_dense_backward",
    "aten::native_dropout",
    "aten::native_dropout_backward",
    "aten::uniform_",
    "aten::normal_",
    "aten::bernoulli_.float",
    "aten::bernoulli.p",
    "aten::bernoulli.Tensor",
    "aten::bernoulli",
    "aten::random_",
    "aten::random_.to",
    "aten::random_.from",
    "aten::randperm",
    "aten::randperm.generator",
    "aten::_fused_adam_",
    "aten::_fused_adam_.tensor_lr",
    "aten::_fused_adamw_",
    "aten::_fused_adamw_.tensor_lr",
    "aten::_fused_sgd_",
    "aten::_fused_sgd_.tensor_lr",
    "aten::_foreach_add.Scalar",
    "aten::_foreach_add.List",
    "aten::_foreach_mul.Scalar",
    "aten::_foreach_div.Scalar",
    "aten::_foreach_div.ScalarList",
    "aten::_foreach_lerp.Scalar",
    "aten::_foreach_addcmul.Scalar",
    "aten::_foreach_addcdiv.Scalar",
    "aten::_foreach_addcdiv.ScalarList",
    "aten::_foreach_sqrt",
    "aten::_foreach_neg",
    "aten::_foreach_maximum.List",
    "aten::_foreach_zero_",
    // End of the neural-network kernels.
    // Tensor kernels (tensor_kernels.h).
#define FLEMU_TENSOR_KERNEL_NAME(id, name, fn, dtypes, flags) name,
    FLEMU_TENSOR_KERNELS(FLEMU_TENSOR_KERNEL_NAME)
#undef FLEMU_TENSOR_KERNEL_NAME
    // End of the tensor kernels.
};

static_assert(sizeof(kNames) / sizeof(kNames[0]) == kNumKernels,
              "kNames must name every KernelId, in enum order");

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

constexpr uint32_t kScaleAddFlags = TFL_KERNEL_CONTIGUOUS_INPUTS | TFL_KERNEL_BROADCAST_INPUTS;
constexpr uint32_t kElementwise = TFL_KERNEL_BROADCAST_INPUTS | TFL_KERNEL_PROMOTE_INPUTS;
// add/sub/mul/div read 0-dim host operands (Python numbers) at launch.
constexpr uint32_t kArithmetic = kElementwise | TFL_KERNEL_HOST_SCALARS;

const Entry kEntries[] = {
    // In-place by name: no functional/out= variants to derive.
    {kFillScalar, kernel_fill_scalar, kAll, TFL_KERNEL_NO_DERIVED_VARIANTS},
    {kZero, kernel_zero, kAll, TFL_KERNEL_NO_DERIVED_VARIANTS},
    {kAddTensor, kernel_add_tensor, kAll, kArithmetic},
    {kSubTensor, kernel_sub_tensor, kInts | kFloats, kArithmetic},
    {kMulTensor, kernel_mul_tensor, kAll, kArithmetic},
    // Integral inputs divide into a floating output.
    {kDivTensor, kernel_div_tensor, kAll, kArithmetic},
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
    // Neural-network kernels (nn_kernels.h): convolution, normalization, pooling,
    // embedding, dropout, random numbers, optimizers.
    {kConvolution, kernel_convolution, kFloats, 0},
    {kConvolutionBackward, kernel_convolution_backward, kFloats, 0},
    {kNativeBatchNorm, kernel_native_batch_norm, kFloats, 0},
    {kNativeBatchNormLegit, kernel_native_batch_norm_legit, kFloats, 0},
    {kNativeBatchNormLegitNoStats, kernel_native_batch_norm_legit_no_stats, kFloats, 0},
    {kNativeBatchNormLegitNoTraining, kernel_native_batch_norm_legit_no_training, kFloats, 0},
    {kBatchNormWithUpdate, kernel_batch_norm_with_update, kFloats, 0},
    {kBatchNormNoUpdate, kernel_batch_norm_no_update, kFloats, 0},
    {kNativeBatchNormBackward, kernel_native_batch_norm_backward, kFloats, 0},
    {kBatchNormBackward, kernel_batch_norm_backward, kFloats, 0},
    {kNativeGroupNorm, kernel_native_group_norm, kFloats, TFL_KERNEL_CONTIGUOUS_INPUTS | TFL_KERNEL_CONTIGUOUS_OUTPUTS},
    {kNativeGroupNormBackward, kernel_native_group_norm_backward, kFloats, TFL_KERNEL_CONTIGUOUS_INPUTS | TFL_KERNEL_CONTIGUOUS_OUTPUTS},
    {kNativeLayerNorm, kernel_native_layer_norm, kFloats, TFL_KERNEL_CONTIGUOUS_INPUTS | TFL_KERNEL_CONTIGUOUS_OUTPUTS},
    {kNativeLayerNormBackward, kernel_native_layer_norm_backward, kFloats, TFL_KERNEL_CONTIGUOUS_INPUTS | TFL_KERNEL_CONTIGUOUS_OUTPUTS},
    {kMaxPool2dWithIndices, kernel_max_pool2d_with_indices, kFloats, 0},
    {kMaxPool2dWithIndicesBackward, kernel_max_pool2d_with_indices_backward, kFloats, 0},
    {kAvgPool2d, kernel_avg_pool2d, kFloats, 0},
    {kAvgPool2dBackward, kernel_avg_pool2d_backward, kFloats, 0},
    {kAdaptiveAvgPool2d, kernel_adaptive_avg_pool2d, kFloats, 0},
    {kAdaptiveAvgPool2dBackward, kernel_adaptive_avg_pool2d_backward, kFloats, 0},
    {kUpsampleNearest2d, kernel_upsample_nearest2d, kAll, 0},
    {kUpsampleNearest2dBackward, kernel_upsample_nearest2d_backward, kFloats, 0},
    {kEmbedding, kernel_embedding, kAll, 0},
    {kEmbeddingDenseBackward, kernel_embedding_dense_backward, kFloats, 0},
    {kNativeDropout, kernel_native_dropout, kFloats, TFL_KERNEL_RANDOM},
    {kNativeDropoutBackward, kernel_native_dropout_backward, kFloats, 0},
    {kUniform, kernel_uniform, kFloats, TFL_KERNEL_RANDOM | TFL_KERNEL_NO_DERIVED_VARIANTS},
    {kNormal, kernel_normal, kFloats, TFL_KERNEL_RANDOM | TFL_KERNEL_NO_DERIVED_VARIANTS},
    {kBernoulliFloat, kernel_bernoulli_float, kAll, TFL_KERNEL_RANDOM | TFL_KERNEL_NO_DERIVED_VARIANTS},
    {kBernoulliP, kernel_bernoulli_p, kAll, TFL_KERNEL_RANDOM},
    {kBernoulliTensor, kernel_bernoulli_tensor, kAll, TFL_KERNEL_RANDOM | TFL_KERNEL_BROADCAST_INPUTS},
    {kBernoulli, kernel_bernoulli, kFloats, TFL_KERNEL_RANDOM},
    {kRandom, kernel_random, kAll, TFL_KERNEL_RANDOM | TFL_KERNEL_NO_DERIVED_VARIANTS},
    {kRandomTo, kernel_random_to, kAll, TFL_KERNEL_RANDOM | TFL_KERNEL_NO_DERIVED_VARIANTS},
    {kRandomFrom, kernel_random_from, kAll, TFL_KERNEL_RANDOM | TFL_KERNEL_NO_DERIVED_VARIANTS},
    {kRandperm, kernel_randperm, kInts | kFloats, TFL_KERNEL_RANDOM},
    {kRandpermGenerator, kernel_randperm_generator, kInts | kFloats, TFL_KERNEL_RANDOM},
    {kFusedAdam, kernel_fused_adam, kFloats, TFL_KERNEL_NO_DERIVED_VARIANTS},
    {kFusedAdamTensorLr, kernel_fused_adam_tensor_lr, kFloats, TFL_KERNEL_NO_DERIVED_VARIANTS},
    {kFusedAdamw, kernel_fused_adamw, kFloats, TFL_KERNEL_NO_DERIVED_VARIANTS},
    {kFusedAdamwTensorLr, kernel_fused_adamw_tensor_lr, kFloats, TFL_KERNEL_NO_DERIVED_VARIANTS},
    {kFusedSgd, kernel_fused_sgd, kFloats, TFL_KERNEL_NO_DERIVED_VARIANTS},
    {kFusedSgdTensorLr, kernel_fused_sgd_tensor_lr, kFloats, TFL_KERNEL_NO_DERIVED_VARIANTS},
    {kForeachAddScalar, kernel_foreach_add_scalar, kFloats, 0},
    {kForeachAddList, kernel_foreach_add_list, kFloats, 0},
    {kForeachMulScalar, kernel_foreach_mul_scalar, kFloats, 0},
    {kForeachDivScalar, kernel_foreach_div_scalar, kFloats, 0},
    {kForeachDivScalarList, kernel_foreach_div_scalar_list, kFloats, 0},
    {kForeachLerpScalar, kernel_foreach_lerp_scalar, kFloats, 0},
    {kForeachAddcmulScalar, kernel_foreach_addcmul_scalar, kFloats, 0},
    {kForeachAddcdivScalar, kernel_foreach_addcdiv_scalar, kFloats, 0},
    {kForeachAddcdivScalarList, kernel_foreach_addcdiv_scalar_list, kFloats, 0},
    {kForeachSqrt, kernel_foreach_sqrt, kFloats, 0},
    {kForeachNeg, kernel_foreach_neg, kFloats, 0},
    {kForeachMaximumList, kernel_foreach_maximum_list, kFloats, 0},
    {kForeachZero, kernel_foreach_zero, kFloats, TFL_KERNEL_NO_DERIVED_VARIANTS},
    // End of the neural-network kernels.
    // Tensor kernels (tensor_kernels.h). abs and maximum also have float32
    // symbol-convention kernels; these table entries cover every dtype and win.
    {kAbs, kernel_abs_table, kInts | kFloats, 0},
    {kMaximum, kernel_maximum_table, kAll, kElementwise},
#define FLEMU_TENSOR_KERNEL_ENTRY(id, name, fn, dtypes, flags) {id, fn, dtypes, flags},
    FLEMU_TENSOR_KERNELS(FLEMU_TENSOR_KERNEL_ENTRY)
#undef FLEMU_TENSOR_KERNEL_ENTRY
    // End of the tensor kernels.
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
  s.check_contracts = cfg.check_contracts;
  for (const Entry& e : kEntries) s.contracts[static_cast<size_t>(e.id)] = {e.dtypes & ~disabled, e.flags};
  s.contracts[kScaleAdd] = s.contracts[kScaleAddBackward] = {kF32, kScaleAddFlags};
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
  for (int32_t f = 0; f < static_cast<int32_t>(Fault::kCount); ++f) {
    const Fault fault = static_cast<Fault>(f);
    if ((cfg.faults & fault_bit(fault)) == 0) continue;
    if (const char* op = fault_kernel(fault)) {
      const int32_t id = kernel_id_by_name(op);
      if (id < 0) invalid_argument("FLEMU_FAULT=", fault_info(fault).name, " changes ", op, ", which is not a flemu kernel");
      s.kernel_faults[static_cast<size_t>(id)] |= fault_bit(fault);
    } else if (fault == Fault::kFp64ComputedInFp32 || fault == Fault::kSeedIgnored) {
      // Faults of a class of kernels: the shared launch code decides where they act.
      for (FaultSet& k : s.kernel_faults) k |= fault_bit(fault);
    }
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
  g_scale_add.flags = kScaleAddFlags;
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
