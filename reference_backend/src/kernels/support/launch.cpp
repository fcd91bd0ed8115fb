#include "launch.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "layout.h"

namespace flemu {

KernelSettings& kernel_settings() {
  static KernelSettings settings;
  return settings;
}

// An unsupported dtype is a call flemu declines (TFL_ERR_UNIMPLEMENTED): the
// host then runs it through its fallback chain.
void check_dtype_enabled(int32_t dtype, const char* what) {
  const int64_t size = dtype_size(dtype);
  if (size == 0) {
    fail(TFL_ERR_UNIMPLEMENTED,
         cat(what, " has dtype ", dtype_name(dtype), ", which flemu kernels do not support"));
  }
  if (kernel_settings().enabled_dtypes & TFL_DTYPE_BIT(dtype)) return;
  const char* var = dtype == TFL_DTYPE_FLOAT64   ? "FLEMU_FP64"
                    : dtype == TFL_DTYPE_FLOAT16 ? "FLEMU_FP16"
                                                 : "FLEMU_BF16";
  fail(TFL_ERR_UNIMPLEMENTED,
       cat(what, " has dtype ", dtype_name(dtype), ", which is disabled on this device (", var, "=0)"));
}

bool TensorArg::is_contiguous() const { return row_major_dense(ndim, sizes, strides); }

Launch::Launch(const TFL_Kernel_Args* args, int32_t id, const KernelContract* contract) : args_(args), id_(id) {
  TFL_CHECK_ARGS(args, TFL_Kernel_Args);
  const TFL_KernelContext* ctx = args->ctx;
  // Fields past op_name are read only by the kernels that need them.
  torch_fl::helpers::check_args(ctx, TFL_STRUCT_SIZE(TFL_KernelContext, op_name), "TFL_KernelContext");
  if (args->num_inputs > 0 && args->inputs == nullptr) invalid_argument("inputs is NULL");
  if (args->num_outputs > 0 && args->outputs == nullptr) invalid_argument("outputs is NULL");
  rt_ = &runtime();
  device_ = ctx->device;
  arena_ = &rt_->device(device_).arena;  // range-checks ctx->device
  stream_ = &stream_from_handle(ctx->stream);
  if (stream_->device() != device_)
    invalid_argument("ctx->stream belongs to device ", stream_->device(), ", not to ctx->device ", device_);
  const KernelSettings& s = kernel_settings();
  if (s.inject_crash_id == id) {
    std::fprintf(stderr, "flemu: FLEMU_INJECT_CRASH=%s: aborting in the kernel\n", name());
    std::fflush(stderr);
    std::abort();
  }
  if (s.check_contracts) {
    if (ctx->struct_size < TFL_KernelContext_STRUCT_SIZE)
      fail(TFL_ERR_INTERNAL, "host contract violated: ", ctx->op_name != nullptr ? ctx->op_name : name(),
           ": TFL_KernelContext.struct_size is ", ctx->struct_size, ", smaller than ABI 1.0's ",
           TFL_KernelContext_STRUCT_SIZE);
    check_host_contract(*args, contract ? *contract : s.contracts[static_cast<size_t>(id)], *rt_, &guarded_);
  }
  faults_ = s.kernel_faults[static_cast<size_t>(id)];
  if (faulty(Fault::kMmCrash)) {
    std::fprintf(stderr, "flemu: FLEMU_FAULT=mm_crash: %s aborts in the kernel\n", name());
    std::fflush(stderr);
    std::abort();
  }
  if (s.inject_error_id == id) {
    if (s.inject_error_async) inject_async_ = true;
    else
      fail(s.inject_error_code,
           cat("injected failure at launch (FLEMU_INJECT_ERROR=", name(), ":", s.inject_error_code, ")"));
  }
}

void Launch::enqueue_injected_failure() const {
  const int32_t code = kernel_settings().inject_error_code;
  const char* op = name();
  stream_->submit(op, [code, op] {
    fail(code, cat("injected failure on the stream (FLEMU_INJECT_ERROR=", op, ":", code, ":async)"));
  });
}

const TFL_Value& Launch::input(size_t i, const char* what) const {
  if (i >= args_->num_inputs)
    invalid_argument("missing argument ", i, " (", what, "): got ", args_->num_inputs, " inputs");
  return args_->inputs[i];
}

TensorArg Launch::input_tensor(size_t i, const char* what) const {
  const TFL_Value& v = input(i, what);
  if (v.tag != TFL_VALUE_TENSOR) invalid_argument("argument ", i, " (", what, ") must be a tensor, got tag ", v.tag);
  TensorArg a = tensor(v.v.tensor, what);
  constexpr FaultSet kMisreads =
      fault_bit(Fault::kMulIgnoresStrides) | fault_bit(Fault::kSubBroadcastWrong) | fault_bit(Fault::kExpIgnoresOffset);
  if ((faults_ & kMisreads) != 0 && a.numel > 0) misread_input(*v.v.tensor, &a);
  return a;
}

void Launch::misread_input(const TFL_Tensor& t, TensorArg* a) const {
  if (faulty(Fault::kExpIgnoresOffset)) {
    a->data -= t.storage_offset * a->itemsize;
    return;
  }
  // Both stride faults put the dense row-major stride where the real one
  // was: every dim (mul_ignores_strides) or the broadcast ones (sub).
  const bool every_dim = faulty(Fault::kMulIgnoresStrides);
  auto strides = std::make_unique<int64_t[]>(static_cast<size_t>(std::max(a->ndim, 1)));
  int64_t dense = 1;
  for (int32_t d = a->ndim - 1; d >= 0; --d) {
    const bool broadcast = a->strides[d] == 0 && a->sizes[d] > 1;
    strides[static_cast<size_t>(d)] = every_dim || broadcast ? dense : a->strides[d];
    dense *= a->sizes[d];
  }
  a->strides = strides.get();
  misread_strides_.push_back(std::move(strides));
}

ScalarArg Launch::scalar(size_t i, const char* what) const {
  const TFL_Value& v = input(i, what);
  ScalarArg s;
  s.tag = v.tag;
  switch (v.tag) {
    case TFL_VALUE_INT:
    case TFL_VALUE_BOOL: s.i = v.v.i; break;
    case TFL_VALUE_DOUBLE: s.d = v.v.d; break;
    case TFL_VALUE_COMPLEX:
      fail(TFL_ERR_UNIMPLEMENTED, cat("argument ", i, " (", what, ") is a complex scalar; flemu has no complex kernels"));
    default: invalid_argument("argument ", i, " (", what, ") must be a scalar (int, float or bool), got tag ", v.tag);
  }
  return s;
}

bool Launch::host_scalar(size_t i, ScalarArg* out) const {
  if (!has_input(i) || args_->inputs[i].tag != TFL_VALUE_TENSOR) return false;
  const TFL_Tensor* t = args_->inputs[i].v.tensor;
  if (t == nullptr || t->memory_kind != TFL_MEMORY_HOST) return false;
  if (t->numel != 1 || t->data == nullptr) invalid_argument("host operand ", i, " must be a scalar");
  if (t->dtype == TFL_DTYPE_COMPLEX64 || t->dtype == TFL_DTYPE_COMPLEX128 || dtype_size(t->dtype) == 0)
    fail(TFL_ERR_UNIMPLEMENTED, cat("host operand ", i, " has dtype ", dtype_name(t->dtype)));
  const char* p = static_cast<const char*>(t->data);
  if (dtype_is_floating(t->dtype)) {
    out->tag = TFL_VALUE_DOUBLE;
    out->d = loader_f64(t->dtype)(p);
  } else {
    out->tag = t->dtype == TFL_DTYPE_BOOL ? TFL_VALUE_BOOL : TFL_VALUE_INT;
    out->i = loader_i64(t->dtype)(p);
  }
  return true;
}

ScalarArg Launch::scalar_or(size_t i, int64_t fallback, const char* what) const {
  if (!has_input(i)) {
    ScalarArg s;
    s.i = fallback;
    return s;
  }
  return scalar(i, what);
}

bool Launch::boolean_or(size_t i, bool fallback, const char* what) const {
  if (!has_input(i)) return fallback;
  const TFL_Value& v = args_->inputs[i];
  if (v.tag != TFL_VALUE_BOOL && v.tag != TFL_VALUE_INT)
    invalid_argument("argument ", i, " (", what, ") must be a bool, got tag ", v.tag);
  return v.v.i != 0;
}

TensorArg Launch::output(size_t i, const char* what) const {
  if (i >= args_->num_outputs)
    invalid_argument("missing output ", i, " (", what, "): got ", args_->num_outputs, " outputs");
  return tensor(args_->outputs[i], what);
}

TensorArg Launch::tensor(const TFL_Tensor* t, const char* what, bool allow_peer) const {
  if (t == nullptr) invalid_argument(what, " is NULL");
  if (t->struct_size < TFL_Tensor_STRUCT_SIZE)
    invalid_argument(what, ": TFL_Tensor.struct_size is ", t->struct_size, ", expected at least ", TFL_Tensor_STRUCT_SIZE);
  check_dtype_enabled(t->dtype, what);
  TensorArg a;
  a.dtype = t->dtype;
  a.itemsize = dtype_size(t->dtype);
  a.ndim = t->ndim;
  a.device = t->device;
  a.sizes = t->sizes;
  a.strides = t->strides;
  if (t->memory_kind != TFL_MEMORY_DEVICE)
    invalid_argument(what, " is in host memory; flemu kernels take device tensors (they do not set TFL_KERNEL_HOST_SCALARS)");
  if (t->device != device_) {
    if (!allow_peer) invalid_argument(what, " is on device ", t->device, " but the kernel runs on device ", device_);
    if (!kernel_settings().peer_access)
      invalid_argument(what, " is on device ", t->device, " and peer access is disabled (FLEMU_PEER_ACCESS=0)");
  }
  if (t->ndim < 0 || t->ndim > 64) invalid_argument(what, " has ndim ", t->ndim, "; expected 0..64");
  if (t->ndim > 0 && (t->sizes == nullptr || t->strides == nullptr))
    invalid_argument(what, " has ndim ", t->ndim, " but NULL sizes or strides");
  int64_t numel = 1, last = 0;
  for (int32_t d = 0; d < t->ndim; ++d) {
    if (t->sizes[d] < 0 || t->strides[d] < 0)
      invalid_argument(what, " has size ", t->sizes[d], " and stride ", t->strides[d], " in dim ", d,
                       "; both must be >= 0");
    numel *= t->sizes[d];
    if (t->sizes[d] > 0) last += (t->sizes[d] - 1) * t->strides[d];
  }
  if (numel != t->numel) invalid_argument(what, " says numel ", t->numel, " but its sizes multiply to ", numel);
  a.numel = numel;
  if (numel == 0) return a;
  if (t->data == nullptr) invalid_argument(what, " has ", numel, " elements but a NULL data pointer");
  Arena& arena = t->device == device_ ? *arena_ : rt_->device(t->device).arena;
  const uint64_t bytes = static_cast<uint64_t>(last + 1) * static_cast<uint64_t>(a.itemsize);
  if (!arena.owns_range(t->data, bytes))
    invalid_argument(what, " [", t->data, ", +", bytes, " bytes) is not inside the memory of device ", t->device);
  // Contract checking has checked the allocations already.
  if (kernel_settings().strict && !kernel_settings().check_contracts) arena.check_allocated(t->data, bytes, what);
  a.data = arena.to_host(t->data);
  return a;
}

}  // namespace flemu
