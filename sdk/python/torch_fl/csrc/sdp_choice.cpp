// Which backend F.scaled_dot_product_attention uses on the plugin's device.
//
// PyTorch asks a per-device choice function. Without one, a PrivateUse1
// device gets the math backend: attention decomposed into bmm, softmax and
// elementwise ops, a dozen launches forward and more backward. A plugin that
// registers a kernel for aten::_scaled_dot_product_fused_attention_overrideable
// (and, optionally, its _backward) gets the whole attention in one launch
// each way, for the calls that kernel contract covers:
//   - 4-d query, key and value with as many key/value heads as query heads
//     (enable_gqa with fewer key heads takes the math backend);
//   - dropout_p == 0 (attention dropout draws inside the op; the kernel ABI
//     passes no generator state to it);
//   - a dtype the forward kernel declares;
//   - the overrideable backend not disabled (torch.nn.attention.sdpa_kernel).
// A backward the plugin lacks, or a call its kernel declines, runs the
// bridge's decomposition of the same op (torch_fl/_decomp.py) on the device.
#include "kernel_registration.h"

#include <ATen/Context.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>

namespace torch_fl::bridge {

namespace {

constexpr const char* kFusedForward = "aten::_scaled_dot_product_fused_attention_overrideable";

bool fused_kernel_serves(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         double dropout_p) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || q.is_nested()) {
    return false;
  }
  if (k.size(1) != q.size(1) || v.size(1) != q.size(1) || dropout_p != 0.0) {
    return false;
  }
  return has_native_kernel(kFusedForward, q.scalar_type());
}

int64_t choose_sdp_backend(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                           const std::optional<at::Tensor>& /*attn_mask*/, double dropout_p,
                           bool /*is_causal*/, std::optional<double> /*scale*/, bool /*enable_gqa*/) {
  const at::Context& ctx = at::globalContext();
  const bool fused = fused_kernel_serves(query, key, value, dropout_p);
  if (fused && ctx.userEnabledOverrideableSDP()) {
    return static_cast<int64_t>(sdp::SDPBackend::overrideable);
  }
  if (ctx.userEnabledMathSDP()) {
    return static_cast<int64_t>(sdp::SDPBackend::math);
  }
  TORCH_CHECK(
      false, "scaled_dot_product_attention on ", query.device(),
      ": the math backend is disabled and ",
      fused ? "the overrideable (fused) backend is disabled too"
            : "the plugin's fused attention (a kernel for " + std::string(kFusedForward) +
              ") does not serve this call (4-d inputs, equal head counts, dropout_p=0 and a dtype "
              "the kernel declares); enable the math backend in torch.nn.attention.sdpa_kernel");
  return static_cast<int64_t>(sdp::SDPBackend::error);
}

} // namespace

} // namespace torch_fl::bridge

namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_fl::bridge::choose_sdp_backend)
} // namespace at::native
