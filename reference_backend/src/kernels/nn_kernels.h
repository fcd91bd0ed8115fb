// Entry points of the neural-network kernels: convolution, normalization,
// pooling and resampling, embedding, dropout and random numbers, fused
// optimizer steps and the _foreach_ ops the unfused optimizers use. Their
// KernelIds and table entries are in registry.{h,cpp}.
#ifndef FLEMU_KERNELS_NN_KERNELS_H_
#define FLEMU_KERNELS_NN_KERNELS_H_

#include "registry.h"
#include "torch_fl/kernel.h"

namespace flemu {

// conv.cpp
TFL_Error* kernel_convolution(const TFL_Kernel_Args* args);
TFL_Error* kernel_convolution_backward(const TFL_Kernel_Args* args);
// norm.cpp
TFL_Error* kernel_native_batch_norm(const TFL_Kernel_Args* args);
TFL_Error* kernel_native_batch_norm_legit(const TFL_Kernel_Args* args);
TFL_Error* kernel_native_batch_norm_legit_no_stats(const TFL_Kernel_Args* args);
TFL_Error* kernel_native_batch_norm_legit_no_training(const TFL_Kernel_Args* args);
TFL_Error* kernel_batch_norm_with_update(const TFL_Kernel_Args* args);
TFL_Error* kernel_batch_norm_no_update(const TFL_Kernel_Args* args);
TFL_Error* kernel_native_batch_norm_backward(const TFL_Kernel_Args* args);
TFL_Error* kernel_batch_norm_backward(const TFL_Kernel_Args* args);
TFL_Error* kernel_native_group_norm(const TFL_Kernel_Args* args);
TFL_Error* kernel_native_group_norm_backward(const TFL_Kernel_Args* args);
TFL_Error* kernel_native_layer_norm(const TFL_Kernel_Args* args);
TFL_Error* kernel_native_layer_norm_backward(const TFL_Kernel_Args* args);
// pool.cpp
TFL_Error* kernel_max_pool2d_with_indices(const TFL_Kernel_Args* args);
TFL_Error* kernel_max_pool2d_with_indices_backward(const TFL_Kernel_Args* args);
TFL_Error* kernel_avg_pool2d(const TFL_Kernel_Args* args);
TFL_Error* kernel_avg_pool2d_backward(const TFL_Kernel_Args* args);
TFL_Error* kernel_adaptive_avg_pool2d(const TFL_Kernel_Args* args);
TFL_Error* kernel_adaptive_avg_pool2d_backward(const TFL_Kernel_Args* args);
TFL_Error* kernel_upsample_nearest2d(const TFL_Kernel_Args* args);
TFL_Error* kernel_upsample_nearest2d_backward(const TFL_Kernel_Args* args);
// embedding.cpp
TFL_Error* kernel_embedding(const TFL_Kernel_Args* args);
TFL_Error* kernel_embedding_dense_backward(const TFL_Kernel_Args* args);
// random.cpp
TFL_Error* kernel_uniform(const TFL_Kernel_Args* args);
TFL_Error* kernel_normal(const TFL_Kernel_Args* args);
TFL_Error* kernel_bernoulli_float(const TFL_Kernel_Args* args);
TFL_Error* kernel_bernoulli_p(const TFL_Kernel_Args* args);
TFL_Error* kernel_bernoulli_tensor(const TFL_Kernel_Args* args);
TFL_Error* kernel_bernoulli(const TFL_Kernel_Args* args);
TFL_Error* kernel_random(const TFL_Kernel_Args* args);
TFL_Error* kernel_random_to(const TFL_Kernel_Args* args);
TFL_Error* kernel_random_from(const TFL_Kernel_Args* args);
TFL_Error* kernel_randperm(const TFL_Kernel_Args* args);
TFL_Error* kernel_randperm_generator(const TFL_Kernel_Args* args);
TFL_Error* kernel_native_dropout(const TFL_Kernel_Args* args);
TFL_Error* kernel_native_dropout_backward(const TFL_Kernel_Args* args);
// optim.cpp
TFL_Error* kernel_fused_adam(const TFL_Kernel_Args* args);
TFL_Error* kernel_fused_adam_tensor_lr(const TFL_Kernel_Args* args);
TFL_Error* kernel_fused_adamw(const TFL_Kernel_Args* args);
TFL_Error* kernel_fused_adamw_tensor_lr(const TFL_Kernel_Args* args);
TFL_Error* kernel_fused_sgd(const TFL_Kernel_Args* args);
TFL_Error* kernel_fused_sgd_tensor_lr(const TFL_Kernel_Args* args);
// foreach.cpp
TFL_Error* kernel_foreach_add_scalar(const TFL_Kernel_Args* args);
TFL_Error* kernel_foreach_add_list(const TFL_Kernel_Args* args);
TFL_Error* kernel_foreach_mul_scalar(const TFL_Kernel_Args* args);
TFL_Error* kernel_foreach_div_scalar(const TFL_Kernel_Args* args);
TFL_Error* kernel_foreach_div_scalar_list(const TFL_Kernel_Args* args);
TFL_Error* kernel_foreach_lerp_scalar(const TFL_Kernel_Args* args);
TFL_Error* kernel_foreach_addcmul_scalar(const TFL_Kernel_Args* args);
TFL_Error* kernel_foreach_addcdiv_scalar(const TFL_Kernel_Args* args);
TFL_Error* kernel_foreach_addcdiv_scalar_list(const TFL_Kernel_Args* args);
TFL_Error* kernel_foreach_sqrt(const TFL_Kernel_Args* args);
TFL_Error* kernel_foreach_neg(const TFL_Kernel_Args* args);
TFL_Error* kernel_foreach_maximum_list(const TFL_Kernel_Args* args);
TFL_Error* kernel_foreach_zero(const TFL_Kernel_Args* args);

}  // namespace flemu

#endif  // FLEMU_KERNELS_NN_KERNELS_H_
