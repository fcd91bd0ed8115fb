// The tensor kernels: elementwise math, activations, comparisons and
// selection, the batched matmul family, softmax, losses, indexing and
// concatenation, reductions beyond sum/mean, sort/topk/cumsum/cumprod, and
// the fused LSTM cell.
//
// FLEMU_TENSOR_KERNELS(X) lists them once as X(id, schema name, entry point,
// dtype mask, flags); registry.h expands it into KernelIds and registry.cpp
// into names and table entries, so the three can never disagree. The dtype
// masks and flags name constants of registry.cpp (kFloats, kAll, ...).
#ifndef FLEMU_KERNELS_TENSOR_KERNELS_H_
#define FLEMU_KERNELS_TENSOR_KERNELS_H_

#include "torch_fl/kernel.h"

// Kernels that read and write dense row-major operands only.
#define FLEMU_DENSE (TFL_KERNEL_CONTIGUOUS_INPUTS | TFL_KERNEL_CONTIGUOUS_OUTPUTS)

// clang-format off
#define FLEMU_TENSOR_KERNELS(X)                                                                              \
  /* elementwise_math.cpp */                                                                                 \
  X(kExp, "aten::exp", kernel_exp, kFloats, 0)                                                               \
  X(kLog, "aten::log", kernel_log, kFloats, 0)                                                               \
  X(kLog1p, "aten::log1p", kernel_log1p, kFloats, 0)                                                         \
  X(kSqrt, "aten::sqrt", kernel_sqrt, kFloats, 0)                                                            \
  X(kRsqrt, "aten::rsqrt", kernel_rsqrt, kFloats, 0)                                                         \
  X(kReciprocal, "aten::reciprocal", kernel_reciprocal, kFloats, 0)                                          \
  X(kSin, "aten::sin", kernel_sin, kFloats, 0)                                                               \
  X(kCos, "aten::cos", kernel_cos, kFloats, 0)                                                               \
  X(kErf, "aten::erf", kernel_erf, kFloats, 0)                                                               \
  X(kSign, "aten::sign", kernel_sign, kInts | kFloats, 0)                                                    \
  X(kPowTensorScalar, "aten::pow.Tensor_Scalar", kernel_pow_tensor_scalar, kFloats, 0)                       \
  X(kPowTensorTensor, "aten::pow.Tensor_Tensor", kernel_pow_tensor_tensor, kFloats, kElementwise)            \
  X(kPowScalar, "aten::pow.Scalar", kernel_pow_scalar, kFloats, 0)                                           \
  X(kClamp, "aten::clamp", kernel_clamp, kInts | kFloats, 0)                                                 \
  X(kClampTensor, "aten::clamp.Tensor", kernel_clamp_tensor, kInts | kFloats, kElementwise)                  \
  X(kClampMin, "aten::clamp_min", kernel_clamp_min, kInts | kFloats, 0)                                      \
  X(kClampMax, "aten::clamp_max", kernel_clamp_max, kInts | kFloats, 0)                                      \
  X(kClampMinTensor, "aten::clamp_min.Tensor", kernel_clamp_min_tensor, kInts | kFloats, kElementwise)      \
  X(kClampMaxTensor, "aten::clamp_max.Tensor", kernel_clamp_max_tensor, kInts | kFloats, kElementwise)      \
  X(kMinimum, "aten::minimum", kernel_minimum, kAll, kElementwise)                                           \
  X(kAddcmul, "aten::addcmul", kernel_addcmul, kFloats, kElementwise)                                        \
  X(kAddcdiv, "aten::addcdiv", kernel_addcdiv, kFloats, kElementwise)                                        \
  X(kLerpScalar, "aten::lerp.Scalar", kernel_lerp_scalar, kFloats, kElementwise)                             \
  X(kLerpTensor, "aten::lerp.Tensor", kernel_lerp_tensor, kFloats, kElementwise)                             \
  /* activation.cpp */                                                                                       \
  X(kSigmoid, "aten::sigmoid", kernel_sigmoid, kFloats, 0)                                                   \
  X(kTanh, "aten::tanh", kernel_tanh, kFloats, 0)                                                            \
  X(kGelu, "aten::gelu", kernel_gelu, kFloats, 0)                                                            \
  X(kSilu, "aten::silu", kernel_silu, kFloats, 0)                                                            \
  X(kLeakyRelu, "aten::leaky_relu", kernel_leaky_relu, kFloats, 0)                                           \
  X(kHardtanh, "aten::hardtanh", kernel_hardtanh, kInts | kFloats, 0)                                        \
  X(kThreshold, "aten::threshold", kernel_threshold, kInts | kFloats, 0)                                     \
  X(kSigmoidBackward, "aten::sigmoid_backward", kernel_sigmoid_backward, kFloats, kElementwise)              \
  X(kTanhBackward, "aten::tanh_backward", kernel_tanh_backward, kFloats, kElementwise)                       \
  X(kGeluBackward, "aten::gelu_backward", kernel_gelu_backward, kFloats, kElementwise)                       \
  X(kLeakyReluBackward, "aten::leaky_relu_backward", kernel_leaky_relu_backward, kFloats, kElementwise)      \
  X(kThresholdBackward, "aten::threshold_backward", kernel_threshold_backward, kInts | kFloats, kElementwise) \
  X(kHardtanhBackward, "aten::hardtanh_backward", kernel_hardtanh_backward, kFloats, kElementwise)           \
  /* compare.cpp */                                                                                          \
  X(kEqTensor, "aten::eq.Tensor", kernel_eq_tensor, kAll, kElementwise)                                      \
  X(kNeTensor, "aten::ne.Tensor", kernel_ne_tensor, kAll, kElementwise)                                      \
  X(kLtTensor, "aten::lt.Tensor", kernel_lt_tensor, kAll, kElementwise)                                      \
  X(kLeTensor, "aten::le.Tensor", kernel_le_tensor, kAll, kElementwise)                                      \
  X(kGtTensor, "aten::gt.Tensor", kernel_gt_tensor, kAll, kElementwise)                                      \
  X(kGeTensor, "aten::ge.Tensor", kernel_ge_tensor, kAll, kElementwise)                                      \
  X(kEqScalar, "aten::eq.Scalar", kernel_eq_scalar, kAll, 0)                                                 \
  X(kNeScalar, "aten::ne.Scalar", kernel_ne_scalar, kAll, 0)                                                 \
  X(kLtScalar, "aten::lt.Scalar", kernel_lt_scalar, kAll, 0)                                                 \
  X(kLeScalar, "aten::le.Scalar", kernel_le_scalar, kAll, 0)                                                 \
  X(kGtScalar, "aten::gt.Scalar", kernel_gt_scalar, kAll, 0)                                                 \
  X(kGeScalar, "aten::ge.Scalar", kernel_ge_scalar, kAll, 0)                                                 \
  X(kLogicalNot, "aten::logical_not", kernel_logical_not, kAll, 0)                                           \
  X(kLogicalAnd, "aten::logical_and", kernel_logical_and, kAll, kElementwise)                                \
  X(kLogicalOr, "aten::logical_or", kernel_logical_or, kAll, kElementwise)                                   \
  X(kLogicalXor, "aten::logical_xor", kernel_logical_xor, kAll, kElementwise)                                \
  X(kBitwiseNot, "aten::bitwise_not", kernel_bitwise_not, kBool | kInts, 0)                                  \
  X(kBitwiseAndTensor, "aten::bitwise_and.Tensor", kernel_bitwise_and, kBool | kInts, kElementwise)          \
  X(kBitwiseOrTensor, "aten::bitwise_or.Tensor", kernel_bitwise_or, kBool | kInts, kElementwise)             \
  X(kIsnan, "aten::isnan", kernel_isnan, kAll, 0)                                                            \
  X(kIsinf, "aten::isinf", kernel_isinf, kAll, 0)                                                            \
  X(kIsneginf, "aten::isneginf", kernel_isneginf, kAll, 0)                                                   \
  X(kIsposinf, "aten::isposinf", kernel_isposinf, kAll, 0)                                                   \
  X(kWhereSelf, "aten::where.self", kernel_where_self, kAll, TFL_KERNEL_BROADCAST_INPUTS)                    \
  X(kMaskedFillScalar, "aten::masked_fill.Scalar", kernel_masked_fill_scalar, kAll,                          \
    TFL_KERNEL_BROADCAST_INPUTS)                                                                             \
  X(kMaskedFillTensor, "aten::masked_fill.Tensor", kernel_masked_fill_tensor, kAll,                          \
    TFL_KERNEL_BROADCAST_INPUTS)                                                                             \
  /* batched_gemm.cpp */                                                                                     \
  X(kBmm, "aten::bmm", kernel_bmm, kFloats, 0)                                                               \
  X(kBaddbmm, "aten::baddbmm", kernel_baddbmm, kFloats, 0)                                                   \
  /* softmax.cpp */                                                                                          \
  X(kSoftmax, "aten::_softmax", kernel_softmax, kFloats, FLEMU_DENSE)                                                  \
  X(kLogSoftmax, "aten::_log_softmax", kernel_log_softmax, kFloats, FLEMU_DENSE)                                       \
  X(kSoftmaxBackward, "aten::_softmax_backward_data", kernel_softmax_backward, kFloats, FLEMU_DENSE)                   \
  X(kLogSoftmaxBackward, "aten::_log_softmax_backward_data", kernel_log_softmax_backward, kFloats, FLEMU_DENSE)        \
  /* loss.cpp */                                                                                             \
  X(kNllLossForward, "aten::nll_loss_forward", kernel_nll_loss_forward, kFloats, FLEMU_DENSE)                          \
  X(kNllLossBackward, "aten::nll_loss_backward", kernel_nll_loss_backward, kFloats, FLEMU_DENSE)                       \
  X(kNllLoss2dForward, "aten::nll_loss2d_forward", kernel_nll_loss2d_forward, kFloats, FLEMU_DENSE)                    \
  X(kNllLoss2dBackward, "aten::nll_loss2d_backward", kernel_nll_loss2d_backward, kFloats, FLEMU_DENSE)                 \
  X(kBinaryCrossEntropy, "aten::binary_cross_entropy", kernel_binary_cross_entropy, kFloats, FLEMU_DENSE)              \
  X(kBinaryCrossEntropyBackward, "aten::binary_cross_entropy_backward", kernel_binary_cross_entropy_backward, \
    kFloats, FLEMU_DENSE)                                                                                              \
  X(kMseLoss, "aten::mse_loss", kernel_mse_loss, kFloats, FLEMU_DENSE)                                                 \
  X(kMseLossBackward, "aten::mse_loss_backward", kernel_mse_loss_backward, kFloats, FLEMU_DENSE)                       \
  /* index.cpp */                                                                                            \
  X(kCat, "aten::cat", kernel_cat, kAll, 0)                                                                  \
  X(kIndexSelect, "aten::index_select", kernel_index_select, kAll, 0)                                        \
  X(kGather, "aten::gather", kernel_gather, kAll, 0)                                                         \
  X(kScatterAdd, "aten::scatter_add", kernel_scatter_add, kAll, 0)                                           \
  X(kIndexAdd, "aten::index_add", kernel_index_add, kAll, 0)                                                 \
  X(kScatterSrc, "aten::scatter.src", kernel_scatter_src, kAll, 0)                                           \
  X(kScatterValue, "aten::scatter.value", kernel_scatter_value, kAll, 0)                                     \
  X(kIndexTensor, "aten::index.Tensor", kernel_index_tensor, kAll, 0)                                        \
  X(kIndexPut, "aten::index_put", kernel_index_put, kAll, 0)                                                 \
  X(kArangeStartOut, "aten::arange.start_out", kernel_arange_start_out, kInts | kFloats, 0)                  \
  X(kTril, "aten::tril", kernel_tril, kAll, 0)                                                               \
  X(kTriu, "aten::triu", kernel_triu, kAll, 0)                                                               \
  /* reduce_extra.cpp */                                                                                     \
  X(kMaxAll, "aten::max", kernel_max_all, kAll, 0)                                                           \
  X(kMinAll, "aten::min", kernel_min_all, kAll, 0)                                                           \
  X(kMaxDim, "aten::max.dim", kernel_max_dim, kAll, 0)                                                       \
  X(kMinDim, "aten::min.dim", kernel_min_dim, kAll, 0)                                                       \
  X(kArgmax, "aten::argmax", kernel_argmax, kInts | kFloats, 0)                                              \
  X(kArgmin, "aten::argmin", kernel_argmin, kInts | kFloats, 0)                                              \
  X(kAmax, "aten::amax", kernel_amax, kAll, 0)                                                               \
  X(kAmin, "aten::amin", kernel_amin, kAll, 0)                                                               \
  X(kVarCorrection, "aten::var.correction", kernel_var_correction, kFloats, 0)                               \
  X(kStdCorrection, "aten::std.correction", kernel_std_correction, kFloats, 0)                               \
  X(kVarMeanCorrection, "aten::var_mean.correction", kernel_var_mean_correction, kFloats, 0)                 \
  X(kStdMeanCorrection, "aten::std_mean.correction", kernel_std_mean_correction, kFloats, 0)                 \
  X(kAllReduce, "aten::all", kernel_all, kAll, 0)                                                            \
  X(kAnyReduce, "aten::any", kernel_any, kAll, 0)                                                            \
  X(kAllDim, "aten::all.dim", kernel_all_dim, kAll, 0)                                                       \
  X(kAnyDim, "aten::any.dim", kernel_any_dim, kAll, 0)                                                       \
  X(kAllDims, "aten::all.dims", kernel_all_dims, kAll, 0)                                                    \
  X(kAnyDims, "aten::any.dims", kernel_any_dims, kAll, 0)                                                    \
  X(kProd, "aten::prod", kernel_prod, kAll, 0)                                                               \
  /* sort.cpp */                                                                                              \
  X(kSortStable, "aten::sort.stable", kernel_sort_stable, kAll, 0)                                           \
  X(kTopk, "aten::topk", kernel_topk, kInts | kFloats, 0)                                                    \
  X(kCumsum, "aten::cumsum", kernel_cumsum, kAll, 0)                                                         \
  X(kCumprod, "aten::cumprod", kernel_cumprod, kAll, 0)                                                      \
  X(kFlip, "aten::flip", kernel_flip, kAll, 0)                                                               \
  /* lstm.cpp */                                                                                             \
  X(kThnnFusedLstmCell, "aten::_thnn_fused_lstm_cell", kernel_thnn_fused_lstm_cell, kFloats, FLEMU_DENSE)              \
  X(kThnnFusedLstmCellBackwardImpl, "aten::_thnn_fused_lstm_cell_backward_impl",                             \
    kernel_thnn_fused_lstm_cell_backward_impl, kFloats, FLEMU_DENSE)
// clang-format on

namespace flemu {

#define FLEMU_DECLARE_TENSOR_KERNEL(id, name, fn, dtypes, flags) TFL_Error* fn(const TFL_Kernel_Args* args);
FLEMU_TENSOR_KERNELS(FLEMU_DECLARE_TENSOR_KERNEL)
#undef FLEMU_DECLARE_TENSOR_KERNEL

// Table kernels for ops that also have a float32 symbol-convention kernel
// (elementwise.cpp); registered under the existing ids kAbs and kMaximum.
TFL_Error* kernel_abs_table(const TFL_Kernel_Args* args);
TFL_Error* kernel_maximum_table(const TFL_Kernel_Args* args);

}  // namespace flemu

#endif  // FLEMU_KERNELS_TENSOR_KERNELS_H_
