// Reading a kernel's arguments (TFL_Kernel_Args) on the host: typed access to
// the tagged values with messages that name the argument, the stream to
// enqueue on, scratch memory from the host's workspace allocator, and the
// launch-error check. Every kernel entry point wraps its body in
// run_kernel(args, "aten::...", body), which turns a thrown tfl::Error into
// the returned TFL_Error (a decline is TFL_ERR_UNIMPLEMENTED, thrown before
// anything is enqueued).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "../runtime.h"
#include "strided_plan.h"

namespace flcuda {

inline int64_t itemsize_of(int32_t dtype) {
  switch (dtype) {
    case TFL_DTYPE_BOOL:
    case TFL_DTYPE_UINT8:
    case TFL_DTYPE_INT8: return 1;
    case TFL_DTYPE_INT16:
    case TFL_DTYPE_FLOAT16:
    case TFL_DTYPE_BFLOAT16: return 2;
    case TFL_DTYPE_INT32:
    case TFL_DTYPE_FLOAT32: return 4;
    case TFL_DTYPE_INT64:
    case TFL_DTYPE_FLOAT64: return 8;
    default: return 0;  // not handled by these kernels
  }
}

inline bool is_floating(int32_t dtype) {
  return dtype == TFL_DTYPE_FLOAT16 || dtype == TFL_DTYPE_BFLOAT16 || dtype == TFL_DTYPE_FLOAT32 ||
         dtype == TFL_DTYPE_FLOAT64;
}

inline OperandView view_of(const TFL_Tensor* t) {
  return OperandView{t->sizes, t->strides, t->ndim, itemsize_of(t->dtype)};
}

class KernelCall {
 public:
  explicit KernelCall(const TFL_Kernel_Args* args) : a_(args) {
    if (a_ == nullptr || a_->ctx == nullptr) tfl::invalid_argument("kernel called without arguments or context");
    stream_ = &stream_rec(a_->ctx->stream);
    use_device(stream_->device);
  }

  cudaStream_t stream() const { return stream_->stream; }
  int32_t device() const { return stream_->device; }
  int32_t variant() const { return a_->ctx->variant; }
  size_t num_inputs() const { return a_->num_inputs; }
  size_t num_outputs() const { return a_->num_outputs; }
  const TFL_Kernel_Args* raw() const { return a_; }

  const TFL_Value& input(size_t i, const char* what) const {
    if (i >= a_->num_inputs) tfl::invalid_argument("argument ", i, " (", what, ") is missing");
    return a_->inputs[i];
  }
  bool has_input(size_t i) const { return i < a_->num_inputs && a_->inputs[i].tag != TFL_VALUE_NONE; }

  const TFL_Tensor* tensor(size_t i, const char* what) const {
    const TFL_Value& v = input(i, what);
    if (v.tag != TFL_VALUE_TENSOR || v.v.tensor == nullptr)
      tfl::invalid_argument("argument ", i, " (", what, ") must be a tensor, got value tag ", v.tag);
    return checked(v.v.tensor, what);
  }
  // NULL for an absent optional tensor.
  const TFL_Tensor* optional_tensor(size_t i, const char* what) const {
    if (!has_input(i)) return nullptr;
    return tensor(i, what);
  }
  std::vector<const TFL_Tensor*> tensor_list(size_t i, const char* what) const {
    const TFL_Value& v = input(i, what);
    if (v.tag != TFL_VALUE_TENSOR_LIST)
      tfl::invalid_argument("argument ", i, " (", what, ") must be a tensor list, got value tag ", v.tag);
    std::vector<const TFL_Tensor*> out(v.v.tensors.data, v.v.tensors.data + v.v.tensors.size);
    for (const TFL_Tensor* t : out)
      if (t != nullptr) checked(t, what);
    return out;
  }
  // outputs[i], or NULL when the caller did not ask for it.
  const TFL_Tensor* output(size_t i) const {
    if (i >= a_->num_outputs || a_->outputs[i] == nullptr) return nullptr;
    return checked(a_->outputs[i], "output");
  }
  const TFL_Tensor* required_output(size_t i) const {
    const TFL_Tensor* t = output(i);
    if (t == nullptr) tfl::invalid_argument("output ", i, " must be requested");
    return t;
  }

  int64_t integer(size_t i, const char* what) const {
    const TFL_Value& v = input(i, what);
    if (v.tag != TFL_VALUE_INT && v.tag != TFL_VALUE_BOOL)
      tfl::invalid_argument("argument ", i, " (", what, ") must be an integer, got value tag ", v.tag);
    return v.v.i;
  }
  int64_t integer_or(size_t i, int64_t fallback, const char* what) const {
    return has_input(i) ? integer(i, what) : fallback;
  }
  bool boolean(size_t i, const char* what) const { return integer(i, what) != 0; }
  bool boolean_or(size_t i, bool fallback, const char* what) const {
    return has_input(i) ? boolean(i, what) : fallback;
  }
  // A float argument or a real Scalar, in double.
  double real(size_t i, const char* what) const {
    const TFL_Value& v = input(i, what);
    switch (v.tag) {
      case TFL_VALUE_DOUBLE: return v.v.d;
      case TFL_VALUE_INT:
      case TFL_VALUE_BOOL: return static_cast<double>(v.v.i);
      default: tfl::unimplemented("argument ", i, " (", what, ") must be a real number, got value tag ", v.tag);
    }
  }
  double real_or(size_t i, double fallback, const char* what) const {
    return has_input(i) ? real(i, what) : fallback;
  }
  std::vector<int64_t> ints(size_t i, const char* what) const {
    const TFL_Value& v = input(i, what);
    if (v.tag == TFL_VALUE_INT) return {v.v.i};
    if (v.tag != TFL_VALUE_INT_LIST)
      tfl::invalid_argument("argument ", i, " (", what, ") must be an int list, got value tag ", v.tag);
    return std::vector<int64_t>(v.v.ints.data, v.v.ints.data + v.v.ints.size);
  }
  std::vector<bool> bools(size_t i, const char* what) const {
    const TFL_Value& v = input(i, what);
    if (v.tag != TFL_VALUE_BOOL_LIST)
      tfl::invalid_argument("argument ", i, " (", what, ") must be a bool list, got value tag ", v.tag);
    std::vector<bool> out;
    for (size_t k = 0; k < v.v.bools.size; ++k) out.push_back(v.v.bools.data[k] != 0);
    return out;
  }
  std::string string_or(size_t i, const char* fallback, const char* what) const {
    if (!has_input(i)) return fallback;
    const TFL_Value& v = input(i, what);
    if (v.tag != TFL_VALUE_STRING)
      tfl::invalid_argument("argument ", i, " (", what, ") must be a string, got value tag ", v.tag);
    return std::string(v.v.str.data, v.v.str.size);
  }

  // Stream-ordered scratch memory on this device, reclaimed by the host.
  void* workspace(size_t bytes) const {
    if (bytes == 0) bytes = 1;
    void* ptr = nullptr;
    const int32_t code = a_->ctx->allocate_workspace(a_->ctx, bytes, &ptr);
    if (code != TFL_OK || ptr == nullptr)
      tfl::fail(code == TFL_OK ? TFL_ERR_OUT_OF_MEMORY : code, "could not get ", bytes, " bytes of workspace");
    return ptr;
  }

  // After a launch: a bad configuration surfaces here, a fault at the next sync.
  void check_launch(const char* what) const {
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) tfl::fail(error_code_of(err), what, " launch failed: ", cudaGetErrorString(err));
  }

 private:
  const TFL_Tensor* checked(const TFL_Tensor* t, const char* what) const {
    if (t->ndim > kMaxTensorDims)
      tfl::unimplemented(what, " has ", t->ndim, " dimensions; these kernels take at most ", kMaxTensorDims);
    if (t->memory_kind == TFL_MEMORY_DEVICE && t->numel > 0 && t->device != stream_->device)
      tfl::invalid_argument(what, " is on device ", t->device, " but the kernel runs on device ", stream_->device);
    if (itemsize_of(t->dtype) == 0) tfl::unimplemented(what, " has dtype ", t->dtype, ", which these kernels do not take");
    return t;
  }
  static constexpr int32_t kMaxTensorDims = 16;
  const TFL_Kernel_Args* a_;
  StreamRec* stream_ = nullptr;
};

template <class Body>
TFL_Error* run_kernel(const TFL_Kernel_Args* args, const char* op, Body&& body) noexcept {
  return tfl::guarded(op, [&] {
    KernelCall call(args);
    body(call);
  });
}

// Blocks of 256 threads covering n items, capped for grid-stride loops.
inline unsigned grid_for(int64_t n, int64_t per_block = 256, int64_t cap = 65535LL * 8) {
  int64_t blocks = (n + per_block - 1) / per_block;
  if (blocks < 1) blocks = 1;
  if (blocks > cap) blocks = cap;
  return static_cast<unsigned>(blocks);
}

}  // namespace flcuda
