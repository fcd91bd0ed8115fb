// Conversions between ATen and the plugin ABI: dtypes, tensor descriptors
// and the kernel context (with its workspace allocator).
#pragma once

#include <torch_fl/plugin_api.h>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/core/Stream.h>

#include <string>
#include <vector>

namespace torch_fl::bridge {

// TFL_DType for a ScalarType, or -1 when the ABI has no such dtype.
int32_t to_tfl_dtype(c10::ScalarType type);
c10::ScalarType from_tfl_dtype(int32_t dtype);

inline uint64_t dtype_bit(c10::ScalarType type) {
  const int32_t d = to_tfl_dtype(type);
  return d < 0 ? 0 : TFL_DTYPE_BIT(d);
}

// Fills `desc` to describe `t`. sizes/strides point into t's metadata, so
// `t` must outlive the descriptor's use.
void describe(const at::Tensor& t, TFL_Tensor* desc);

// A kernel context plus the workspace it handed out. Workspace blocks are
// returned to the caching allocator when this object dies, which is safe
// right after the launch: the allocator is stream-ordered.
class KernelCall {
 public:
  KernelCall(
      c10::DeviceIndex device,
      TFL_Stream* stream,
      const char* op_name,
      void* user_data,
      int32_t variant);
  KernelCall(const KernelCall&) = delete;
  KernelCall& operator=(const KernelCall&) = delete;

  TFL_KernelContext* context() {
    return &ctx_;
  }
  // Calls `fn`. Returns true when it ran; false when it declined the call
  // with TFL_ERR_UNIMPLEMENTED (its message in *declined). Throws the mapped
  // exception for any other error.
  bool run(
      TFL_KernelFn fn,
      const TFL_Value* inputs,
      size_t num_inputs,
      const TFL_Tensor* const* outputs,
      size_t num_outputs,
      std::string* declined);

 private:
  static int32_t allocate_workspace(TFL_KernelContext* ctx, size_t size, void** ptr);
  TFL_KernelContext ctx_{};
  std::vector<c10::DataPtr> workspace_;
};

} // namespace torch_fl::bridge
