#include "autocast.h"

#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace torch_fl::bridge {

void register_autocast(torch::Library& m) {
  // PyTorch's op lists name ATen types unqualified.
  using namespace at; // NOLINT(google-build-using-namespace)
#define TFL_AUTOCAST_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TFL_AUTOCAST_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TFL_AUTOCAST_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TFL_AUTOCAST_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(TFL_AUTOCAST_LOWER_PRECISION)
  AT_FORALL_FP32(TFL_AUTOCAST_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TFL_AUTOCAST_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(TFL_AUTOCAST_PROMOTE)
#undef TFL_AUTOCAST_LOWER_PRECISION
#undef TFL_AUTOCAST_FP32
#undef TFL_AUTOCAST_FP32_SET_OPT_DTYPE
#undef TFL_AUTOCAST_PROMOTE
}

} // namespace torch_fl::bridge
