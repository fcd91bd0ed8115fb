// The kernels flemu registers: one line each, the only list of them.
//
//   X(id, schema name, entry point, dtypes, flags, minimal)
//
// `dtypes` (a TFL_DTYPE_BIT mask, before FLEMU_FP64/FP16/BF16 remove what
// the device lacks) and `flags` (TFL_KernelFlags) are what Kernels_List
// declares in the full profile. `minimal` says what the kernel is under
// FLEMU_PROFILE=minimal: kFullOnly (absent) or the conservative flags and
// dtypes a new vendor's first plugin registers it with. The kernel ids, the
// names, the descriptors, the dtype and fault lookups and the profile filter
// all derive from this table (support/registry.cpp); adding a kernel is its body
// plus one line here. Custom operators (Kernels_ListCustomOps) are in
// FLEMU_CUSTOM_OPS below; the two symbol-convention kernels (torch_fl_op_abs,
// torch_fl_op_maximum) are found by the host through their exported names.
#ifndef FLEMU_KERNELS_KERNEL_TABLE_H_
#define FLEMU_KERNELS_KERNEL_TABLE_H_

#include <cstdint>

#include "torch_fl/kernel.h"

namespace flemu {
namespace table {

// Dtype groups.
constexpr uint64_t kBool = TFL_DTYPE_BIT(TFL_DTYPE_BOOL);
constexpr uint64_t kInts = TFL_DTYPES_INTEGRAL;
constexpr uint64_t kFloats = TFL_DTYPES_FLOATING;
constexpr uint64_t kAll = kBool | kInts | kFloats;
constexpr uint64_t kF32 = TFL_DTYPE_BIT(TFL_DTYPE_FLOAT32);
constexpr uint64_t kF64 = TFL_DTYPE_BIT(TFL_DTYPE_FLOAT64);
constexpr uint64_t kI64 = TFL_DTYPE_BIT(TFL_DTYPE_INT64);

// Flag groups. Kernels broadcast and walk strides themselves unless a group
// says otherwise.
constexpr uint32_t kBroadcast = TFL_KERNEL_BROADCAST_INPUTS;
// Elementwise ops whose inputs share the computation's dtype.
constexpr uint32_t kElementwise = TFL_KERNEL_BROADCAST_INPUTS | TFL_KERNEL_PROMOTE_INPUTS;
// add/sub/mul/div also read 0-dim host operands (Python numbers) at launch.
constexpr uint32_t kArithmetic = kElementwise | TFL_KERNEL_HOST_SCALARS;
// Kernels that read and write dense row-major operands only.
constexpr uint32_t kDense = TFL_KERNEL_CONTIGUOUS_INPUTS | TFL_KERNEL_CONTIGUOUS_OUTPUTS;
// In place by name (fill_, uniform_, ...): no functional or out= variants to derive.
constexpr uint32_t kInPlaceByName = TFL_KERNEL_NO_DERIVED_VARIANTS;
constexpr uint32_t kRng = TFL_KERNEL_RANDOM;
constexpr uint32_t kRngInPlace = TFL_KERNEL_RANDOM | TFL_KERNEL_NO_DERIVED_VARIANTS;

// A kernel's registration under FLEMU_PROFILE=minimal.
struct MinimalProfile {
  bool listed;
  uint32_t flags;
  uint64_t dtypes;  // intersected with the kernel's own mask
};
constexpr MinimalProfile kFullOnly{false, 0, 0};
// float32 (and float64/int64 where the kernel has them) with the flags of the
// symbol convention: dense, same-shape, same-dtype operands.
constexpr MinimalProfile kVendorElementwise{true, TFL_KERNEL_SYMBOL_DEFAULT_FLAGS, kF32 | kF64 | kI64};
// The same without broadcasting, which would expand inputs to the output's
// shape: a reduction's or a matrix product's inputs are not shaped like it.
constexpr MinimalProfile kVendorDense{
    true, TFL_KERNEL_CONTIGUOUS_INPUTS | TFL_KERNEL_PROMOTE_INPUTS | TFL_KERNEL_CONTIGUOUS_OUTPUTS, kF32 | kF64 | kI64};
constexpr MinimalProfile kVendorInPlace{true, TFL_KERNEL_SYMBOL_DEFAULT_FLAGS | TFL_KERNEL_NO_DERIVED_VARIANTS,
                                        kF32 | kF64 | kI64};
// The host calls copy_ itself for every strided or dtype-changing device
// copy and adapts nothing, so a copy kernel takes any layout and dtype pair.
constexpr MinimalProfile kVendorCopy{true, 0, kAll};

}  // namespace table
}  // namespace flemu

// clang-format off
#define FLEMU_KERNELS(X) \
  /* fill.cpp */ \
  X(kFillScalar, "aten::fill_.Scalar", kernel_fill_scalar, kAll, kInPlaceByName, kVendorInPlace) \
  X(kZero, "aten::zero_", kernel_zero, kAll, kInPlaceByName, kVendorInPlace) \
  /* arithmetic.cpp */ \
  X(kAddTensor, "aten::add.Tensor", kernel_add_tensor, kAll, kArithmetic, kVendorElementwise) \
  X(kSubTensor, "aten::sub.Tensor", kernel_sub_tensor, kInts | kFloats, kArithmetic, kVendorElementwise) \
  X(kMulTensor, "aten::mul.Tensor", kernel_mul_tensor, kAll, kArithmetic, kVendorElementwise) \
  X(kDivTensor, "aten::div.Tensor", kernel_div_tensor, kAll, kArithmetic, kVendorElementwise) \
  X(kAddScalar, "aten::add.Scalar", kernel_add_scalar, kAll, 0, kFullOnly) \
  X(kSubScalar, "aten::sub.Scalar", kernel_sub_scalar, kInts | kFloats, 0, kFullOnly) \
  X(kMulScalar, "aten::mul.Scalar", kernel_mul_scalar, kAll, 0, kFullOnly) \
  X(kDivScalar, "aten::div.Scalar", kernel_div_scalar, kAll, 0, kFullOnly) \
  X(kNeg, "aten::neg", kernel_neg, kInts | kFloats, 0, kVendorElementwise) \
  X(kRelu, "aten::relu", kernel_relu, kInts | kFloats, 0, kVendorElementwise) \
  /* sum_mean.cpp */ \
  X(kSum, "aten::sum", kernel_sum, kAll, 0, kFullOnly) \
  X(kSumDim, "aten::sum.dim_IntList", kernel_sum_dim, kAll, 0, kVendorDense) \
  X(kMean, "aten::mean", kernel_mean, kAll, 0, kFullOnly) \
  X(kMeanDim, "aten::mean.dim", kernel_mean_dim, kAll, 0, kFullOnly) \
  /* gemm.cpp */ \
  X(kMm, "aten::mm", kernel_mm, kFloats, 0, kVendorDense) \
  X(kAddmm, "aten::addmm", kernel_addmm, kFloats, 0, kFullOnly) \
  /* copy.cpp */ \
  X(kCopy, "aten::copy_", kernel_copy, kAll, 0, kVendorCopy) \
  /* math.cpp */ \
  X(kExp, "aten::exp", kernel_exp, kFloats, 0, kVendorElementwise) \
  X(kLog, "aten::log", kernel_log, kFloats, 0, kFullOnly) \
  X(kLog1p, "aten::log1p", kernel_log1p, kFloats, 0, kFullOnly) \
  X(kSqrt, "aten::sqrt", kernel_sqrt, kFloats, 0, kFullOnly) \
  X(kRsqrt, "aten::rsqrt", kernel_rsqrt, kFloats, 0, kFullOnly) \
  X(kReciprocal, "aten::reciprocal", kernel_reciprocal, kFloats, 0, kFullOnly) \
  X(kSin, "aten::sin", kernel_sin, kFloats, 0, kFullOnly) \
  X(kCos, "aten::cos", kernel_cos, kFloats, 0, kFullOnly) \
  X(kErf, "aten::erf", kernel_erf, kFloats, 0, kFullOnly) \
  X(kFloor, "aten::floor", kernel_floor, kFloats, 0, kFullOnly) \
  X(kCeil, "aten::ceil", kernel_ceil, kFloats, 0, kFullOnly) \
  X(kTrunc, "aten::trunc", kernel_trunc, kFloats, 0, kFullOnly) \
  X(kRound, "aten::round", kernel_round, kFloats, 0, kFullOnly) \
  X(kFrac, "aten::frac", kernel_frac, kFloats, 0, kFullOnly) \
  X(kExp2, "aten::exp2", kernel_exp2, kFloats, 0, kFullOnly) \
  X(kExpm1, "aten::expm1", kernel_expm1, kFloats, 0, kFullOnly) \
  X(kLog2, "aten::log2", kernel_log2, kFloats, 0, kFullOnly) \
  X(kLog10, "aten::log10", kernel_log10, kFloats, 0, kFullOnly) \
  X(kTan, "aten::tan", kernel_tan, kFloats, 0, kFullOnly) \
  X(kAtan, "aten::atan", kernel_atan, kFloats, 0, kFullOnly) \
  X(kSinh, "aten::sinh", kernel_sinh, kFloats, 0, kFullOnly) \
  X(kCosh, "aten::cosh", kernel_cosh, kFloats, 0, kFullOnly) \
  X(kAsin, "aten::asin", kernel_asin, kFloats, 0, kFullOnly) \
  X(kAcos, "aten::acos", kernel_acos, kFloats, 0, kFullOnly) \
  X(kAtanh, "aten::atanh", kernel_atanh, kFloats, 0, kFullOnly) \
  X(kAsinh, "aten::asinh", kernel_asinh, kFloats, 0, kFullOnly) \
  X(kAcosh, "aten::acosh", kernel_acosh, kFloats, 0, kFullOnly) \
  X(kLogit, "aten::logit", kernel_logit, kFloats, 0, kFullOnly) \
  X(kLogitBackward, "aten::logit_backward", kernel_logit_backward, kFloats, kElementwise, kFullOnly) \
  X(kSign, "aten::sign", kernel_sign, kInts | kFloats, 0, kFullOnly) \
  X(kAbs, "aten::abs", kernel_abs_table, kInts | kFloats, 0, kFullOnly) \
  X(kPowTensorScalar, "aten::pow.Tensor_Scalar", kernel_pow_tensor_scalar, kFloats, 0, kFullOnly) \
  X(kPowTensorTensor, "aten::pow.Tensor_Tensor", kernel_pow_tensor_tensor, kFloats, kElementwise, kFullOnly) \
  X(kPowScalar, "aten::pow.Scalar", kernel_pow_scalar, kFloats, 0, kFullOnly) \
  X(kClamp, "aten::clamp", kernel_clamp, kInts | kFloats, 0, kFullOnly) \
  X(kClampTensor, "aten::clamp.Tensor", kernel_clamp_tensor, kInts | kFloats, kElementwise, kFullOnly) \
  X(kClampMin, "aten::clamp_min", kernel_clamp_min, kInts | kFloats, 0, kFullOnly) \
  X(kClampMax, "aten::clamp_max", kernel_clamp_max, kInts | kFloats, 0, kFullOnly) \
  X(kClampMinTensor, "aten::clamp_min.Tensor", kernel_clamp_min_tensor, kInts | kFloats, kElementwise, kFullOnly) \
  X(kClampMaxTensor, "aten::clamp_max.Tensor", kernel_clamp_max_tensor, kInts | kFloats, kElementwise, kFullOnly) \
  X(kMaximum, "aten::maximum", kernel_maximum_table, kAll, kElementwise, kFullOnly) \
  X(kMinimum, "aten::minimum", kernel_minimum, kAll, kElementwise, kFullOnly) \
  X(kAddcmul, "aten::addcmul", kernel_addcmul, kFloats, kElementwise, kFullOnly) \
  X(kAddcdiv, "aten::addcdiv", kernel_addcdiv, kFloats, kElementwise, kFullOnly) \
  X(kLerpScalar, "aten::lerp.Scalar", kernel_lerp_scalar, kFloats, kElementwise, kFullOnly) \
  X(kLerpTensor, "aten::lerp.Tensor", kernel_lerp_tensor, kFloats, kElementwise, kFullOnly) \
  /* activation.cpp */ \
  X(kSigmoid, "aten::sigmoid", kernel_sigmoid, kFloats, 0, kFullOnly) \
  X(kTanh, "aten::tanh", kernel_tanh, kFloats, 0, kFullOnly) \
  X(kGelu, "aten::gelu", kernel_gelu, kFloats, 0, kFullOnly) \
  X(kSilu, "aten::silu", kernel_silu, kFloats, 0, kFullOnly) \
  X(kLeakyRelu, "aten::leaky_relu", kernel_leaky_relu, kFloats, 0, kFullOnly) \
  X(kHardtanh, "aten::hardtanh", kernel_hardtanh, kInts | kFloats, 0, kFullOnly) \
  X(kThreshold, "aten::threshold", kernel_threshold, kInts | kFloats, 0, kFullOnly) \
  X(kSigmoidBackward, "aten::sigmoid_backward", kernel_sigmoid_backward, kFloats, kElementwise, kFullOnly) \
  X(kTanhBackward, "aten::tanh_backward", kernel_tanh_backward, kFloats, kElementwise, kFullOnly) \
  X(kGeluBackward, "aten::gelu_backward", kernel_gelu_backward, kFloats, kElementwise, kFullOnly) \
  X(kLeakyReluBackward, "aten::leaky_relu_backward", kernel_leaky_relu_backward, kFloats, kElementwise, kFullOnly) \
  X(kThresholdBackward, "aten::threshold_backward", kernel_threshold_backward, kInts | kFloats, kElementwise, kFullOnly) \
  X(kHardtanhBackward, "aten::hardtanh_backward", kernel_hardtanh_backward, kFloats, kElementwise, kFullOnly) \
  X(kElu, "aten::elu", kernel_elu, kFloats, 0, kFullOnly) \
  X(kEluBackward, "aten::elu_backward", kernel_elu_backward, kFloats, kElementwise, kFullOnly) \
  X(kSoftplus, "aten::softplus", kernel_softplus, kFloats, 0, kFullOnly) \
  X(kSoftplusBackward, "aten::softplus_backward", kernel_softplus_backward, kFloats, kElementwise, kFullOnly) \
  X(kMish, "aten::mish", kernel_mish, kFloats, 0, kFullOnly) \
  X(kHardsigmoid, "aten::hardsigmoid", kernel_hardsigmoid, kFloats, 0, kFullOnly) \
  X(kHardsigmoidBackward, "aten::hardsigmoid_backward", kernel_hardsigmoid_backward, kFloats, kElementwise, kFullOnly) \
  X(kHardswish, "aten::hardswish", kernel_hardswish, kFloats, 0, kFullOnly) \
  X(kHardswishBackward, "aten::hardswish_backward", kernel_hardswish_backward, kFloats, kElementwise, kFullOnly) \
  /* compare.cpp */ \
  X(kEqTensor, "aten::eq.Tensor", kernel_eq_tensor, kAll, kElementwise, kFullOnly) \
  X(kNeTensor, "aten::ne.Tensor", kernel_ne_tensor, kAll, kElementwise, kFullOnly) \
  X(kLtTensor, "aten::lt.Tensor", kernel_lt_tensor, kAll, kElementwise, kFullOnly) \
  X(kLeTensor, "aten::le.Tensor", kernel_le_tensor, kAll, kElementwise, kFullOnly) \
  X(kGtTensor, "aten::gt.Tensor", kernel_gt_tensor, kAll, kElementwise, kFullOnly) \
  X(kGeTensor, "aten::ge.Tensor", kernel_ge_tensor, kAll, kElementwise, kFullOnly) \
  X(kEqScalar, "aten::eq.Scalar", kernel_eq_scalar, kAll, 0, kFullOnly) \
  X(kNeScalar, "aten::ne.Scalar", kernel_ne_scalar, kAll, 0, kFullOnly) \
  X(kLtScalar, "aten::lt.Scalar", kernel_lt_scalar, kAll, 0, kFullOnly) \
  X(kLeScalar, "aten::le.Scalar", kernel_le_scalar, kAll, 0, kFullOnly) \
  X(kGtScalar, "aten::gt.Scalar", kernel_gt_scalar, kAll, 0, kFullOnly) \
  X(kGeScalar, "aten::ge.Scalar", kernel_ge_scalar, kAll, 0, kFullOnly) \
  X(kLogicalNot, "aten::logical_not", kernel_logical_not, kAll, 0, kFullOnly) \
  X(kLogicalAnd, "aten::logical_and", kernel_logical_and, kAll, kElementwise, kFullOnly) \
  X(kLogicalOr, "aten::logical_or", kernel_logical_or, kAll, kElementwise, kFullOnly) \
  X(kLogicalXor, "aten::logical_xor", kernel_logical_xor, kAll, kElementwise, kFullOnly) \
  X(kBitwiseNot, "aten::bitwise_not", kernel_bitwise_not, kBool | kInts, 0, kFullOnly) \
  X(kBitwiseAndTensor, "aten::bitwise_and.Tensor", kernel_bitwise_and, kBool | kInts, kElementwise, kFullOnly) \
  X(kBitwiseOrTensor, "aten::bitwise_or.Tensor", kernel_bitwise_or, kBool | kInts, kElementwise, kFullOnly) \
  X(kIsnan, "aten::isnan", kernel_isnan, kAll, 0, kFullOnly) \
  X(kIsinf, "aten::isinf", kernel_isinf, kAll, 0, kFullOnly) \
  X(kIsneginf, "aten::isneginf", kernel_isneginf, kAll, 0, kFullOnly) \
  X(kIsposinf, "aten::isposinf", kernel_isposinf, kAll, 0, kFullOnly) \
  X(kWhereSelf, "aten::where.self", kernel_where_self, kAll, kBroadcast, kFullOnly) \
  X(kMaskedFillScalar, "aten::masked_fill.Scalar", kernel_masked_fill_scalar, kAll, kBroadcast, kFullOnly) \
  X(kMaskedFillTensor, "aten::masked_fill.Tensor", kernel_masked_fill_tensor, kAll, kBroadcast, kFullOnly) \
  /* batched_gemm.cpp */ \
  X(kBmm, "aten::bmm", kernel_bmm, kFloats, 0, kFullOnly) \
  X(kBaddbmm, "aten::baddbmm", kernel_baddbmm, kFloats, 0, kFullOnly) \
  /* attention.cpp */ \
  X(kSdpaFused, "aten::_scaled_dot_product_fused_attention_overrideable", kernel_sdpa_fused, kFloats, 0, kFullOnly) \
  X(kSdpaFusedBackward, "aten::_scaled_dot_product_fused_attention_overrideable_backward", kernel_sdpa_fused_backward, \
    kFloats, 0, kFullOnly) \
  /* softmax.cpp */ \
  X(kSoftmax, "aten::_softmax", kernel_softmax, kFloats, kDense, kFullOnly) \
  X(kLogSoftmax, "aten::_log_softmax", kernel_log_softmax, kFloats, kDense, kFullOnly) \
  X(kSoftmaxBackward, "aten::_softmax_backward_data", kernel_softmax_backward, kFloats, kDense, kFullOnly) \
  X(kLogSoftmaxBackward, "aten::_log_softmax_backward_data", kernel_log_softmax_backward, kFloats, kDense, kFullOnly) \
  /* loss.cpp */ \
  X(kNllLossForward, "aten::nll_loss_forward", kernel_nll_loss_forward, kFloats, kDense, kFullOnly) \
  X(kNllLossBackward, "aten::nll_loss_backward", kernel_nll_loss_backward, kFloats, kDense, kFullOnly) \
  X(kNllLoss2dForward, "aten::nll_loss2d_forward", kernel_nll_loss2d_forward, kFloats, kDense, kFullOnly) \
  X(kNllLoss2dBackward, "aten::nll_loss2d_backward", kernel_nll_loss2d_backward, kFloats, kDense, kFullOnly) \
  X(kBinaryCrossEntropy, "aten::binary_cross_entropy", kernel_binary_cross_entropy, kFloats, kDense, kFullOnly) \
  X(kBinaryCrossEntropyBackward, "aten::binary_cross_entropy_backward", kernel_binary_cross_entropy_backward, \
    kFloats, kDense, kFullOnly) \
  X(kMseLoss, "aten::mse_loss", kernel_mse_loss, kFloats, kDense, kFullOnly) \
  X(kMseLossBackward, "aten::mse_loss_backward", kernel_mse_loss_backward, kFloats, kDense, kFullOnly) \
  /* index.cpp */ \
  X(kCat, "aten::cat", kernel_cat, kAll, 0, kFullOnly) \
  X(kIndexSelect, "aten::index_select", kernel_index_select, kAll, 0, kFullOnly) \
  X(kGather, "aten::gather", kernel_gather, kAll, 0, kFullOnly) \
  X(kScatterAdd, "aten::scatter_add", kernel_scatter_add, kAll, 0, kFullOnly) \
  X(kIndexAdd, "aten::index_add", kernel_index_add, kAll, 0, kFullOnly) \
  X(kScatterSrc, "aten::scatter.src", kernel_scatter_src, kAll, 0, kFullOnly) \
  X(kScatterValue, "aten::scatter.value", kernel_scatter_value, kAll, 0, kFullOnly) \
  X(kIndexTensor, "aten::index.Tensor", kernel_index_tensor, kAll, 0, kFullOnly) \
  X(kIndexPut, "aten::index_put", kernel_index_put, kAll, 0, kFullOnly) \
  X(kArangeStartOut, "aten::arange.start_out", kernel_arange_start_out, kInts | kFloats, 0, kFullOnly) \
  X(kTril, "aten::tril", kernel_tril, kAll, 0, kFullOnly) \
  X(kTriu, "aten::triu", kernel_triu, kAll, 0, kFullOnly) \
  /* min_max_var.cpp */ \
  X(kMaxAll, "aten::max", kernel_max_all, kAll, 0, kFullOnly) \
  X(kMinAll, "aten::min", kernel_min_all, kAll, 0, kFullOnly) \
  X(kMaxDim, "aten::max.dim", kernel_max_dim, kAll, 0, kFullOnly) \
  X(kMinDim, "aten::min.dim", kernel_min_dim, kAll, 0, kFullOnly) \
  X(kArgmax, "aten::argmax", kernel_argmax, kInts | kFloats, 0, kFullOnly) \
  X(kArgmin, "aten::argmin", kernel_argmin, kInts | kFloats, 0, kFullOnly) \
  X(kAmax, "aten::amax", kernel_amax, kAll, 0, kFullOnly) \
  X(kAmin, "aten::amin", kernel_amin, kAll, 0, kFullOnly) \
  X(kVarCorrection, "aten::var.correction", kernel_var_correction, kFloats, 0, kFullOnly) \
  X(kStdCorrection, "aten::std.correction", kernel_std_correction, kFloats, 0, kFullOnly) \
  X(kVarMeanCorrection, "aten::var_mean.correction", kernel_var_mean_correction, kFloats, 0, kFullOnly) \
  X(kStdMeanCorrection, "aten::std_mean.correction", kernel_std_mean_correction, kFloats, 0, kFullOnly) \
  X(kAllReduce, "aten::all", kernel_all, kAll, 0, kFullOnly) \
  X(kAnyReduce, "aten::any", kernel_any, kAll, 0, kFullOnly) \
  X(kAllDim, "aten::all.dim", kernel_all_dim, kAll, 0, kFullOnly) \
  X(kAnyDim, "aten::any.dim", kernel_any_dim, kAll, 0, kFullOnly) \
  X(kAllDims, "aten::all.dims", kernel_all_dims, kAll, 0, kFullOnly) \
  X(kAnyDims, "aten::any.dims", kernel_any_dims, kAll, 0, kFullOnly) \
  X(kProd, "aten::prod", kernel_prod, kAll, 0, kFullOnly) \
  /* sort.cpp */ \
  X(kSortStable, "aten::sort.stable", kernel_sort_stable, kAll, 0, kFullOnly) \
  X(kTopk, "aten::topk", kernel_topk, kInts | kFloats, 0, kFullOnly) \
  X(kCumsum, "aten::cumsum", kernel_cumsum, kAll, 0, kFullOnly) \
  X(kCumprod, "aten::cumprod", kernel_cumprod, kAll, 0, kFullOnly) \
  X(kFlip, "aten::flip", kernel_flip, kAll, 0, kFullOnly) \
  /* lstm.cpp */ \
  X(kThnnFusedLstmCell, "aten::_thnn_fused_lstm_cell", kernel_thnn_fused_lstm_cell, kFloats, kDense, kFullOnly) \
  X(kThnnFusedLstmCellBackwardImpl, "aten::_thnn_fused_lstm_cell_backward_impl", kernel_thnn_fused_lstm_cell_backward_impl, \
    kFloats, kDense, kFullOnly) \
  /* conv.cpp */ \
  X(kConvolution, "aten::convolution", kernel_convolution, kFloats, 0, kFullOnly) \
  X(kConvolutionBackward, "aten::convolution_backward", kernel_convolution_backward, kFloats, 0, kFullOnly) \
  /* norm.cpp */ \
  X(kNativeBatchNorm, "aten::native_batch_norm", kernel_native_batch_norm, kFloats, 0, kFullOnly) \
  X(kNativeBatchNormLegit, "aten::_native_batch_norm_legit", kernel_native_batch_norm_legit, kFloats, 0, kFullOnly) \
  X(kNativeBatchNormLegitNoStats, "aten::_native_batch_norm_legit.no_stats", kernel_native_batch_norm_legit_no_stats, \
    kFloats, 0, kFullOnly) \
  X(kNativeBatchNormLegitNoTraining, "aten::_native_batch_norm_legit_no_training", kernel_native_batch_norm_legit_no_training, \
    kFloats, 0, kFullOnly) \
  X(kBatchNormWithUpdate, "aten::_batch_norm_with_update", kernel_batch_norm_with_update, kFloats, 0, kFullOnly) \
  X(kBatchNormNoUpdate, "aten::_batch_norm_no_update", kernel_batch_norm_no_update, kFloats, 0, kFullOnly) \
  X(kNativeBatchNormBackward, "aten::native_batch_norm_backward", kernel_native_batch_norm_backward, \
    kFloats, 0, kFullOnly) \
  X(kBatchNormBackward, "aten::batch_norm_backward", kernel_batch_norm_backward, kFloats, 0, kFullOnly) \
  X(kNativeGroupNorm, "aten::native_group_norm", kernel_native_group_norm, kFloats, kDense, kFullOnly) \
  X(kNativeGroupNormBackward, "aten::native_group_norm_backward", kernel_native_group_norm_backward, \
    kFloats, kDense, kFullOnly) \
  X(kNativeLayerNorm, "aten::native_layer_norm", kernel_native_layer_norm, kFloats, kDense, kFullOnly) \
  X(kNativeLayerNormBackward, "aten::native_layer_norm_backward", kernel_native_layer_norm_backward, \
    kFloats, kDense, kFullOnly) \
  /* pool.cpp */ \
  X(kMaxPool2dWithIndices, "aten::max_pool2d_with_indices", kernel_max_pool2d_with_indices, kFloats, 0, kFullOnly) \
  X(kMaxPool2dWithIndicesBackward, "aten::max_pool2d_with_indices_backward", kernel_max_pool2d_with_indices_backward, \
    kFloats, 0, kFullOnly) \
  X(kAvgPool2d, "aten::avg_pool2d", kernel_avg_pool2d, kFloats, 0, kFullOnly) \
  X(kAvgPool2dBackward, "aten::avg_pool2d_backward", kernel_avg_pool2d_backward, kFloats, 0, kFullOnly) \
  X(kAdaptiveAvgPool2d, "aten::_adaptive_avg_pool2d", kernel_adaptive_avg_pool2d, kFloats, 0, kFullOnly) \
  X(kAdaptiveAvgPool2dBackward, "aten::_adaptive_avg_pool2d_backward", kernel_adaptive_avg_pool2d_backward, \
    kFloats, 0, kFullOnly) \
  X(kUpsampleNearest2d, "aten::upsample_nearest2d", kernel_upsample_nearest2d, kAll, 0, kFullOnly) \
  X(kUpsampleNearest2dBackward, "aten::upsample_nearest2d_backward", kernel_upsample_nearest2d_backward, \
    kFloats, 0, kFullOnly) \
  /* embedding.cpp */ \
  X(kEmbedding, "aten::embedding", kernel_embedding, kAll, 0, kFullOnly) \
  X(kEmbeddingDenseBackward, "aten::embedding_dense_backward", kernel_embedding_dense_backward, kFloats, 0, kFullOnly) \
  /* random.cpp */ \
  X(kNativeDropout, "aten::native_dropout", kernel_native_dropout, kFloats, kRng, kFullOnly) \
  X(kNativeDropoutBackward, "aten::native_dropout_backward", kernel_native_dropout_backward, kFloats, 0, kFullOnly) \
  X(kUniform, "aten::uniform_", kernel_uniform, kFloats, kRngInPlace, kFullOnly) \
  X(kNormal, "aten::normal_", kernel_normal, kFloats, kRngInPlace, kFullOnly) \
  X(kBernoulliFloat, "aten::bernoulli_.float", kernel_bernoulli_float, kAll, kRngInPlace, kFullOnly) \
  X(kBernoulliP, "aten::bernoulli.p", kernel_bernoulli_p, kAll, kRng, kFullOnly) \
  X(kBernoulliTensor, "aten::bernoulli.Tensor", kernel_bernoulli_tensor, kAll, kRng | kBroadcast, kFullOnly) \
  X(kBernoulli, "aten::bernoulli", kernel_bernoulli, kFloats, kRng, kFullOnly) \
  X(kRandom, "aten::random_", kernel_random, kAll, kRngInPlace, kFullOnly) \
  X(kRandomTo, "aten::random_.to", kernel_random_to, kAll, kRngInPlace, kFullOnly) \
  X(kRandomFrom, "aten::random_.from", kernel_random_from, kAll, kRngInPlace, kFullOnly) \
  X(kRandperm, "aten::randperm", kernel_randperm, kInts | kFloats, kRng, kFullOnly) \
  X(kRandpermGenerator, "aten::randperm.generator", kernel_randperm_generator, kInts | kFloats, kRng, kFullOnly) \
  /* optim.cpp */ \
  X(kFusedAdam, "aten::_fused_adam_", kernel_fused_adam, kFloats, kInPlaceByName, kFullOnly) \
  X(kFusedAdamTensorLr, "aten::_fused_adam_.tensor_lr", kernel_fused_adam_tensor_lr, kFloats, kInPlaceByName, kFullOnly) \
  X(kFusedAdamw, "aten::_fused_adamw_", kernel_fused_adamw, kFloats, kInPlaceByName, kFullOnly) \
  X(kFusedAdamwTensorLr, "aten::_fused_adamw_.tensor_lr", kernel_fused_adamw_tensor_lr, \
    kFloats, kInPlaceByName, kFullOnly) \
  X(kFusedSgd, "aten::_fused_sgd_", kernel_fused_sgd, kFloats, kInPlaceByName, kFullOnly) \
  X(kFusedSgdTensorLr, "aten::_fused_sgd_.tensor_lr", kernel_fused_sgd_tensor_lr, kFloats, kInPlaceByName, kFullOnly) \
  /* amp.cpp */ \
  X(kAmpForeachNonFiniteCheckAndUnscale, "aten::_amp_foreach_non_finite_check_and_unscale_", \
    kernel_amp_foreach_non_finite_check_and_unscale, kFloats, kInPlaceByName, kFullOnly) \
  X(kAmpUpdateScale, "aten::_amp_update_scale_", kernel_amp_update_scale, kFloats, kInPlaceByName, kFullOnly) \
  /* foreach.cpp */ \
  X(kForeachAddScalar, "aten::_foreach_add.Scalar", kernel_foreach_add_scalar, kFloats, 0, kFullOnly) \
  X(kForeachAddList, "aten::_foreach_add.List", kernel_foreach_add_list, kFloats, 0, kFullOnly) \
  X(kForeachMulScalar, "aten::_foreach_mul.Scalar", kernel_foreach_mul_scalar, kFloats, 0, kFullOnly) \
  X(kForeachDivScalar, "aten::_foreach_div.Scalar", kernel_foreach_div_scalar, kFloats, 0, kFullOnly) \
  X(kForeachDivScalarList, "aten::_foreach_div.ScalarList", kernel_foreach_div_scalar_list, kFloats, 0, kFullOnly) \
  X(kForeachLerpScalar, "aten::_foreach_lerp.Scalar", kernel_foreach_lerp_scalar, kFloats, 0, kFullOnly) \
  X(kForeachAddcmulScalar, "aten::_foreach_addcmul.Scalar", kernel_foreach_addcmul_scalar, kFloats, 0, kFullOnly) \
  X(kForeachAddcdivScalar, "aten::_foreach_addcdiv.Scalar", kernel_foreach_addcdiv_scalar, kFloats, 0, kFullOnly) \
  X(kForeachAddcdivScalarList, "aten::_foreach_addcdiv.ScalarList", kernel_foreach_addcdiv_scalar_list, \
    kFloats, 0, kFullOnly) \
  X(kForeachSqrt, "aten::_foreach_sqrt", kernel_foreach_sqrt, kFloats, 0, kFullOnly) \
  X(kForeachNeg, "aten::_foreach_neg", kernel_foreach_neg, kFloats, 0, kFullOnly) \
  X(kForeachMaximumList, "aten::_foreach_maximum.List", kernel_foreach_maximum_list, kFloats, 0, kFullOnly) \
  X(kForeachZero, "aten::_foreach_zero_", kernel_foreach_zero, kFloats, kInPlaceByName, kFullOnly)

// Custom operators with one return, each with its backward (which the host
// names "<name>_backward"):
//   X(id, name, schema, forward, backward id, backward name, backward, dtypes, flags, like)
// The return is shaped like the tensor argument at schema position `like`.
#define FLEMU_CUSTOM_OPS(X) \
  X(kScaleAdd, "flemu::scale_add", "flemu::scale_add(Tensor x, Tensor y, float alpha) -> Tensor", kernel_scale_add, \
    kScaleAddBackward, "flemu::scale_add_backward", kernel_scale_add_backward, kF32, \
    TFL_KERNEL_CONTIGUOUS_INPUTS | TFL_KERNEL_BROADCAST_INPUTS, 0)
// clang-format on

namespace flemu {

#define FLEMU_DECLARE_KERNEL(id, name, fn, dtypes, flags, minimal) TFL_Error* fn(const TFL_Kernel_Args* args);
FLEMU_KERNELS(FLEMU_DECLARE_KERNEL)
#undef FLEMU_DECLARE_KERNEL
#define FLEMU_DECLARE_CUSTOM_OP(id, name, schema, fn, bwd_id, bwd_name, bwd_fn, dtypes, flags, like) \
  TFL_Error* fn(const TFL_Kernel_Args* args);                                                 \
  TFL_Error* bwd_fn(const TFL_Kernel_Args* args);
FLEMU_CUSTOM_OPS(FLEMU_DECLARE_CUSTOM_OP)
#undef FLEMU_DECLARE_CUSTOM_OP

}  // namespace flemu

#endif  // FLEMU_KERNELS_KERNEL_TABLE_H_
