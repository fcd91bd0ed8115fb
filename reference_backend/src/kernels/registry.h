// The kernels flemu registers: their identities (used by fault injection),
// their entry points, and the tables handed to the host.
#ifndef FLEMU_KERNELS_REGISTRY_H_
#define FLEMU_KERNELS_REGISTRY_H_

#include <cstdint>
#include <string>

#include "../config.h"
#include "tensor_kernels.h"
#include "torch_fl/kernel.h"

namespace flemu {

enum KernelId : int32_t {
  kFillScalar,
  kZero,
  kAddTensor,
  kSubTensor,
  kMulTensor,
  kDivTensor,
  kAddScalar,
  kSubScalar,
  kMulScalar,
  kDivScalar,
  kNeg,
  kRelu,
  kSum,
  kSumDim,
  kMean,
  kMeanDim,
  kMm,
  kAddmm,
  kCopy,
  kAbs,          // symbol convention
  kMaximum,      // symbol convention
  kScaleAdd,     // custom op
  kScaleAddBackward,
  // Neural-network kernels (nn_kernels.h): convolution, normalization, pooling,
  // embedding, dropout, random numbers, optimizers.
  kConvolution,
  kConvolutionBackward,
  kNativeBatchNorm,
  kNativeBatchNormLegit,
  kNativeBatchNormLegitNoStats,
  kNativeBatchNormLegitNoTraining,
  kBatchNormWithUpdate,
  kBatchNormNoUpdate,
  kNativeBatchNormBackward,
  kBatchNormBackward,
  kNativeGroupNorm,
  kNativeGroupNormBackward,
  kNativeLayerNorm,
  kNativeLayerNormBackward,
  kMaxPool2dWithIndices,
  kMaxPool2dWithIndicesBackward,
  kAvgPool2d,
  kAvgPool2dBackward,
  kAdaptiveAvgPool2d,
  kAdaptiveAvgPool2dBackward,
  kUpsampleNearest2d,
  kUpsampleNearest2dBackward,
  kEmbedding,
  kEmbeddingDenseBackward,
  kNativeDropout,
  kNativeDropoutBackward,
  kUniform,
  kNormal,
  kBernoulliFloat,
  kBernoulliP,
  kBernoulliTensor,
  kBernoulli,
  kRandom,
  kRandomTo,
  kRandomFrom,
  kRandperm,
  kRandpermGenerator,
  kFusedAdam,
  kFusedAdamTensorLr,
  kFusedAdamw,
  kFusedAdamwTensorLr,
  kFusedSgd,
  kFusedSgdTensorLr,
  kForeachAddScalar,
  kForeachAddList,
  kForeachMulScalar,
  kForeachDivScalar,
  kForeachDivScalarList,
  kForeachLerpScalar,
  kForeachAddcmulScalar,
  kForeachAddcdivScalar,
  kForeachAddcdivScalarList,
  kForeachSqrt,
  kForeachNeg,
  kForeachMaximumList,
  kForeachZero,
  // End of the neural-network kernels.
  // Tensor kernels (tensor_kernels.h): elementwise math, activations,
  // comparisons, matmul family, softmax, losses, indexing, reductions, LSTM.
#define FLEMU_TENSOR_KERNEL_ID(id, name, fn, dtypes, flags) id,
  FLEMU_TENSOR_KERNELS(FLEMU_TENSOR_KERNEL_ID)
#undef FLEMU_TENSOR_KERNEL_ID
  // End of the tensor kernels.
  kNumKernels
};

// "aten::mm", ...; the backward of a custom op is "<schema name>_backward".
const char* kernel_name(int32_t id);
int32_t kernel_id_by_name(const std::string& name);  // -1 when unknown

// Applies the configuration: dtype masks of the tables and of launch-time
// checks, and the fault injections. Throws for an injection naming an
// unknown kernel.
void configure_kernels(const Config& cfg);

// The tables of TFL_Kernels_List and TFL_Kernels_ListCustomOps.
void list_kernels(const TFL_KernelDesc* const** kernels, size_t* count);
void list_custom_ops(const TFL_CustomOpDesc* const** ops, size_t* count);

// Kernel entry points (TFL_KernelFn), one per registered operator.
TFL_Error* kernel_fill_scalar(const TFL_Kernel_Args* args);
TFL_Error* kernel_zero(const TFL_Kernel_Args* args);
TFL_Error* kernel_add_tensor(const TFL_Kernel_Args* args);
TFL_Error* kernel_sub_tensor(const TFL_Kernel_Args* args);
TFL_Error* kernel_mul_tensor(const TFL_Kernel_Args* args);
TFL_Error* kernel_div_tensor(const TFL_Kernel_Args* args);
TFL_Error* kernel_add_scalar(const TFL_Kernel_Args* args);
TFL_Error* kernel_sub_scalar(const TFL_Kernel_Args* args);
TFL_Error* kernel_mul_scalar(const TFL_Kernel_Args* args);
TFL_Error* kernel_div_scalar(const TFL_Kernel_Args* args);
TFL_Error* kernel_neg(const TFL_Kernel_Args* args);
TFL_Error* kernel_relu(const TFL_Kernel_Args* args);
TFL_Error* kernel_sum(const TFL_Kernel_Args* args);
TFL_Error* kernel_sum_dim(const TFL_Kernel_Args* args);
TFL_Error* kernel_mean(const TFL_Kernel_Args* args);
TFL_Error* kernel_mean_dim(const TFL_Kernel_Args* args);
TFL_Error* kernel_mm(const TFL_Kernel_Args* args);
TFL_Error* kernel_addmm(const TFL_Kernel_Args* args);
TFL_Error* kernel_copy(const TFL_Kernel_Args* args);
TFL_Error* kernel_scale_add(const TFL_Kernel_Args* args);
TFL_Error* kernel_scale_add_backward(const TFL_Kernel_Args* args);

}  // namespace flemu

#endif  // FLEMU_KERNELS_REGISTRY_H_
