// Every kernel flcuda registers, one line each: the only list of them.
//
//   X(entry point, "aten::<op>", dtypes, flags, schema)
//
// `dtypes` is the TFL_DTYPE_BIT mask of the common input dtype the kernel
// computes (others fall back); `flags` are the TFL_KernelFlags its body
// relies on and nothing more; `schema` is the operator's schema as PyTorch
// prints it, so a release that changes an operator gets the kernel refused
// (the op then falls back) instead of handed shifted arguments.
#pragma once

#include "torch_fl/kernel.h"

namespace flcuda {
namespace table {

constexpr uint64_t kF32 = TFL_DTYPE_BIT(TFL_DTYPE_FLOAT32);
constexpr uint64_t kHalfs = TFL_DTYPE_BIT(TFL_DTYPE_FLOAT16) | TFL_DTYPE_BIT(TFL_DTYPE_BFLOAT16);
constexpr uint64_t kF32Half = kF32 | kHalfs;  // kernels that compute in float
constexpr uint64_t kFloats = TFL_DTYPES_FLOATING;
constexpr uint64_t kInts = TFL_DTYPES_INTEGRAL;
constexpr uint64_t kBool = TFL_DTYPE_BIT(TFL_DTYPE_BOOL);
constexpr uint64_t kNumbers = kInts | kFloats;
constexpr uint64_t kAll = kBool | kInts | kFloats;

// Strided operands walked by the kernel itself; inputs expanded to the output.
constexpr uint32_t kBroadcast = TFL_KERNEL_BROADCAST_INPUTS;
// The same, reading 0-dim CPU operands (Python numbers) at launch.
constexpr uint32_t kArithmetic = TFL_KERNEL_BROADCAST_INPUTS | TFL_KERNEL_HOST_SCALARS;
constexpr uint32_t kDense = TFL_KERNEL_CONTIGUOUS_INPUTS | TFL_KERNEL_CONTIGUOUS_OUTPUTS;
constexpr uint32_t kDenseRandom = kDense | TFL_KERNEL_RANDOM;
constexpr uint32_t kGemm = TFL_KERNEL_PROMOTE_INPUTS | TFL_KERNEL_CONTIGUOUS_OUTPUTS;
constexpr uint32_t kInPlaceByName = TFL_KERNEL_NO_DERIVED_VARIANTS;

}  // namespace table
}  // namespace flcuda

// clang-format off
#define FLCUDA_KERNELS(X) \
  /* elementwise.cu */ \
  X(kernel_copy, "aten::copy_", kAll, 0, "aten::copy_(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)") \
  X(kernel_fill_scalar, "aten::fill_.Scalar", kAll, kInPlaceByName, "aten::fill_.Scalar(Tensor(a!) self, Scalar value) -> Tensor(a!)") \
  X(kernel_zero, "aten::zero_", kAll, kInPlaceByName, "aten::zero_(Tensor(a!) self) -> Tensor(a!)") \
  X(kernel_add_tensor, "aten::add.Tensor", kAll, kArithmetic, "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor") \
  X(kernel_sub_tensor, "aten::sub.Tensor", kNumbers, kArithmetic, "aten::sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor") \
  X(kernel_mul_tensor, "aten::mul.Tensor", kAll, kArithmetic, "aten::mul.Tensor(Tensor self, Tensor other) -> Tensor") \
  X(kernel_div_tensor, "aten::div.Tensor", kAll, kArithmetic, "aten::div.Tensor(Tensor self, Tensor other) -> Tensor") \
  X(kernel_add_scalar, "aten::add.Scalar", kAll, 0, "aten::add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor") \
  X(kernel_sub_scalar, "aten::sub.Scalar", kNumbers, 0, "aten::sub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor") \
  X(kernel_mul_scalar, "aten::mul.Scalar", kAll, 0, "aten::mul.Scalar(Tensor self, Scalar other) -> Tensor") \
  X(kernel_div_scalar, "aten::div.Scalar", kAll, 0, "aten::div.Scalar(Tensor self, Scalar other) -> Tensor") \
  X(kernel_neg, "aten::neg", kNumbers, 0, "aten::neg(Tensor self) -> Tensor") \
  X(kernel_relu, "aten::relu", kNumbers, 0, "aten::relu(Tensor self) -> Tensor") \
  X(kernel_exp, "aten::exp", kFloats, 0, "aten::exp(Tensor self) -> Tensor") \
  X(kernel_tanh, "aten::tanh", kFloats, 0, "aten::tanh(Tensor self) -> Tensor") \
  X(kernel_sqrt, "aten::sqrt", kFloats, 0, "aten::sqrt(Tensor self) -> Tensor") \
  X(kernel_rsqrt, "aten::rsqrt", kFloats, 0, "aten::rsqrt(Tensor self) -> Tensor") \
  X(kernel_sigmoid, "aten::sigmoid", kFloats, 0, "aten::sigmoid(Tensor self) -> Tensor") \
  X(kernel_pow_tensor_scalar, "aten::pow.Tensor_Scalar", kFloats, 0, "aten::pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor") \
  X(kernel_gelu, "aten::gelu", kFloats, 0, "aten::gelu(Tensor self, *, str approximate=\"none\") -> Tensor") \
  X(kernel_gelu_backward, "aten::gelu_backward", kFloats, kBroadcast, "aten::gelu_backward(Tensor grad_output, Tensor self, *, str approximate=\"none\") -> Tensor") \
  X(kernel_tanh_backward, "aten::tanh_backward", kFloats, kBroadcast, "aten::tanh_backward(Tensor grad_output, Tensor output) -> Tensor") \
  X(kernel_sigmoid_backward, "aten::sigmoid_backward", kFloats, kBroadcast, "aten::sigmoid_backward(Tensor grad_output, Tensor output) -> Tensor") \
  X(kernel_threshold_backward, "aten::threshold_backward", kNumbers, kBroadcast, "aten::threshold_backward(Tensor grad_output, Tensor self, Scalar threshold) -> Tensor") \
  X(kernel_eq_tensor, "aten::eq.Tensor", kAll, kArithmetic, "aten::eq.Tensor(Tensor self, Tensor other) -> Tensor") \
  X(kernel_ne_tensor, "aten::ne.Tensor", kAll, kArithmetic, "aten::ne.Tensor(Tensor self, Tensor other) -> Tensor") \
  X(kernel_lt_tensor, "aten::lt.Tensor", kAll, kArithmetic, "aten::lt.Tensor(Tensor self, Tensor other) -> Tensor") \
  X(kernel_le_tensor, "aten::le.Tensor", kAll, kArithmetic, "aten::le.Tensor(Tensor self, Tensor other) -> Tensor") \
  X(kernel_gt_tensor, "aten::gt.Tensor", kAll, kArithmetic, "aten::gt.Tensor(Tensor self, Tensor other) -> Tensor") \
  X(kernel_ge_tensor, "aten::ge.Tensor", kAll, kArithmetic, "aten::ge.Tensor(Tensor self, Tensor other) -> Tensor") \
  X(kernel_eq_scalar, "aten::eq.Scalar", kAll, 0, "aten::eq.Scalar(Tensor self, Scalar other) -> Tensor") \
  X(kernel_ne_scalar, "aten::ne.Scalar", kAll, 0, "aten::ne.Scalar(Tensor self, Scalar other) -> Tensor") \
  X(kernel_lt_scalar, "aten::lt.Scalar", kAll, 0, "aten::lt.Scalar(Tensor self, Scalar other) -> Tensor") \
  X(kernel_le_scalar, "aten::le.Scalar", kAll, 0, "aten::le.Scalar(Tensor self, Scalar other) -> Tensor") \
  X(kernel_gt_scalar, "aten::gt.Scalar", kAll, 0, "aten::gt.Scalar(Tensor self, Scalar other) -> Tensor") \
  X(kernel_ge_scalar, "aten::ge.Scalar", kAll, 0, "aten::ge.Scalar(Tensor self, Scalar other) -> Tensor") \
  X(kernel_where_self, "aten::where.self", kAll, kBroadcast, "aten::where.self(Tensor condition, Tensor self, Tensor other) -> Tensor") \
  X(kernel_masked_fill_scalar, "aten::masked_fill.Scalar", kAll, kBroadcast, "aten::masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor") \
  X(kernel_foreach_add_scalar, "aten::_foreach_add.Scalar", kNumbers, 0, "aten::_foreach_add.Scalar(Tensor[] self, Scalar scalar) -> Tensor[]") \
  X(kernel_native_dropout, "aten::native_dropout", kF32Half, kDenseRandom, "aten::native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)") \
  X(kernel_native_dropout_backward, "aten::native_dropout_backward", kFloats, kBroadcast, "aten::native_dropout_backward(Tensor grad_output, Tensor mask, float scale) -> Tensor") \
  X(kernel_fused_adam, "aten::_fused_adam_", kF32Half, kInPlaceByName, "aten::_fused_adam_(Tensor(a!)[] self, Tensor(b!)[] grads, Tensor(c!)[] exp_avgs, Tensor(d!)[] exp_avg_sqs, Tensor(e!)[] max_exp_avg_sqs, Tensor[] state_steps, *, float lr, float beta1, float beta2, float weight_decay, float eps, bool amsgrad, bool maximize, Tensor? grad_scale=None, Tensor? found_inf=None) -> ()") \
  X(kernel_fused_adamw, "aten::_fused_adamw_", kF32Half, kInPlaceByName, "aten::_fused_adamw_(Tensor(a!)[] self, Tensor(b!)[] grads, Tensor(c!)[] exp_avgs, Tensor(d!)[] exp_avg_sqs, Tensor(e!)[] max_exp_avg_sqs, Tensor[] state_steps, *, float lr, float beta1, float beta2, float weight_decay, float eps, bool amsgrad, bool maximize, Tensor? grad_scale=None, Tensor? found_inf=None) -> ()") \
  /* gemm.cpp */ \
  X(kernel_mm, "aten::mm", kFloats, kGemm, "aten::mm(Tensor self, Tensor mat2) -> Tensor") \
  X(kernel_addmm, "aten::addmm", kFloats, kGemm, "aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor") \
  X(kernel_bmm, "aten::bmm", kFloats, kGemm, "aten::bmm(Tensor self, Tensor mat2) -> Tensor") \
  /* reduce_norm.cu */ \
  X(kernel_sum, "aten::sum", kFloats, 0, "aten::sum(Tensor self, *, ScalarType? dtype=None) -> Tensor") \
  X(kernel_mean, "aten::mean", kFloats, 0, "aten::mean(Tensor self, *, ScalarType? dtype=None) -> Tensor") \
  X(kernel_sum_dim, "aten::sum.dim_IntList", kFloats, 0, "aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor") \
  X(kernel_mean_dim, "aten::mean.dim", kFloats, 0, "aten::mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor") \
  X(kernel_softmax, "aten::_softmax", kFloats, kDense, "aten::_softmax(Tensor self, int dim, bool half_to_float) -> Tensor") \
  X(kernel_log_softmax, "aten::_log_softmax", kFloats, kDense, "aten::_log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor") \
  X(kernel_softmax_backward, "aten::_softmax_backward_data", kFloats, kDense, "aten::_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor") \
  X(kernel_log_softmax_backward, "aten::_log_softmax_backward_data", kFloats, kDense, "aten::_log_softmax_backward_data(Tensor grad_output, Tensor output, int dim, ScalarType input_dtype) -> Tensor") \
  X(kernel_native_layer_norm, "aten::native_layer_norm", kFloats, kDense, "aten::native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)") \
  X(kernel_native_layer_norm_backward, "aten::native_layer_norm_backward", kFloats, kDense, "aten::native_layer_norm_backward(Tensor grad_out, Tensor input, SymInt[] normalized_shape, Tensor mean, Tensor rstd, Tensor? weight, Tensor? bias, bool[3] output_mask) -> (Tensor, Tensor, Tensor)") \
  X(kernel_native_batch_norm, "aten::native_batch_norm", kF32Half, kDense, "aten::native_batch_norm(Tensor input, Tensor? weight, Tensor? bias, Tensor? running_mean, Tensor? running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)") \
  X(kernel_native_batch_norm, "aten::_native_batch_norm_legit", kF32Half, kDense, "aten::_native_batch_norm_legit(Tensor input, Tensor? weight, Tensor? bias, Tensor(a!) running_mean, Tensor(b!) running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)") \
  X(kernel_native_batch_norm_legit_no_stats, "aten::_native_batch_norm_legit.no_stats", kF32Half, kDense, "aten::_native_batch_norm_legit.no_stats(Tensor input, Tensor? weight, Tensor? bias, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)") \
  X(kernel_native_batch_norm_legit_no_training, "aten::_native_batch_norm_legit_no_training", kF32Half, kDense, "aten::_native_batch_norm_legit_no_training(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor)") \
  X(kernel_native_batch_norm_backward, "aten::native_batch_norm_backward", kF32Half, kDense, "aten::native_batch_norm_backward(Tensor grad_out, Tensor input, Tensor? weight, Tensor? running_mean, Tensor? running_var, Tensor? save_mean, Tensor? save_invstd, bool train, float eps, bool[3] output_mask) -> (Tensor, Tensor, Tensor)") \
  X(kernel_nll_loss_forward, "aten::nll_loss_forward", kF32Half, kDense, "aten::nll_loss_forward(Tensor self, Tensor target, Tensor? weight, int reduction, SymInt ignore_index) -> (Tensor output, Tensor total_weight)") \
  X(kernel_nll_loss_backward, "aten::nll_loss_backward", kF32Half, kDense, "aten::nll_loss_backward(Tensor grad_output, Tensor self, Tensor target, Tensor? weight, int reduction, SymInt ignore_index, Tensor total_weight) -> Tensor") \
  /* conv_pool.cu */ \
  X(kernel_convolution, "aten::convolution", kF32Half, kDense, "aten::convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor") \
  X(kernel_convolution_backward, "aten::convolution_backward", kF32Half, kDense, "aten::convolution_backward(Tensor grad_output, Tensor input, Tensor weight, SymInt[]? bias_sizes, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups, bool[3] output_mask) -> (Tensor, Tensor, Tensor)") \
  X(kernel_max_pool2d_with_indices, "aten::max_pool2d_with_indices", kF32Half, kDense, "aten::max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)") \
  X(kernel_max_pool2d_with_indices_backward, "aten::max_pool2d_with_indices_backward", kF32, kDense, "aten::max_pool2d_with_indices_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, bool ceil_mode, Tensor indices) -> Tensor") \
  X(kernel_embedding, "aten::embedding", kF32Half, kDense, "aten::embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, bool sparse=False) -> Tensor") \
  X(kernel_embedding_dense_backward, "aten::embedding_dense_backward", kF32, kDense, "aten::embedding_dense_backward(Tensor grad_output, Tensor indices, SymInt num_weights, SymInt padding_idx, bool scale_grad_by_freq) -> Tensor")
// clang-format on
