#include "kernel_abi.h"

#include "caching_allocator.h"
#include "loaded_plugin.h"
#include "streams.h"

namespace torch_fl::bridge {

int32_t to_tfl_dtype(c10::ScalarType type) {
  using c10::ScalarType;
  switch (type) {
    case ScalarType::Bool:
      return TFL_DTYPE_BOOL;
    case ScalarType::Byte:
      return TFL_DTYPE_UINT8;
    case ScalarType::Char:
      return TFL_DTYPE_INT8;
    case ScalarType::Short:
      return TFL_DTYPE_INT16;
    case ScalarType::Int:
      return TFL_DTYPE_INT32;
    case ScalarType::Long:
      return TFL_DTYPE_INT64;
    case ScalarType::Half:
      return TFL_DTYPE_FLOAT16;
    case ScalarType::BFloat16:
      return TFL_DTYPE_BFLOAT16;
    case ScalarType::Float:
      return TFL_DTYPE_FLOAT32;
    case ScalarType::Double:
      return TFL_DTYPE_FLOAT64;
    case ScalarType::ComplexFloat:
      return TFL_DTYPE_COMPLEX64;
    case ScalarType::ComplexDouble:
      return TFL_DTYPE_COMPLEX128;
    case ScalarType::UInt16:
      return TFL_DTYPE_UINT16;
    case ScalarType::UInt32:
      return TFL_DTYPE_UINT32;
    case ScalarType::UInt64:
      return TFL_DTYPE_UINT64;
    case ScalarType::Float8_e4m3fn:
      return TFL_DTYPE_FLOAT8_E4M3FN;
    case ScalarType::Float8_e5m2:
      return TFL_DTYPE_FLOAT8_E5M2;
    default:
      return -1;
  }
}

c10::ScalarType from_tfl_dtype(int32_t dtype) {
  using c10::ScalarType;
  switch (dtype) {
    case TFL_DTYPE_BOOL:
      return ScalarType::Bool;
    case TFL_DTYPE_UINT8:
      return ScalarType::Byte;
    case TFL_DTYPE_INT8:
      return ScalarType::Char;
    case TFL_DTYPE_INT16:
      return ScalarType::Short;
    case TFL_DTYPE_INT32:
      return ScalarType::Int;
    case TFL_DTYPE_INT64:
      return ScalarType::Long;
    case TFL_DTYPE_FLOAT16:
      return ScalarType::Half;
    case TFL_DTYPE_BFLOAT16:
      return ScalarType::BFloat16;
    case TFL_DTYPE_FLOAT32:
      return ScalarType::Float;
    case TFL_DTYPE_FLOAT64:
      return ScalarType::Double;
    case TFL_DTYPE_COMPLEX64:
      return ScalarType::ComplexFloat;
    case TFL_DTYPE_COMPLEX128:
      return ScalarType::ComplexDouble;
    case TFL_DTYPE_UINT16:
      return ScalarType::UInt16;
    case TFL_DTYPE_UINT32:
      return ScalarType::UInt32;
    case TFL_DTYPE_UINT64:
      return ScalarType::UInt64;
    case TFL_DTYPE_FLOAT8_E4M3FN:
      return ScalarType::Float8_e4m3fn;
    case TFL_DTYPE_FLOAT8_E5M2:
      return ScalarType::Float8_e5m2;
    default:
      return ScalarType::Undefined;
  }
}

void describe(const at::Tensor& t, TFL_Tensor* desc) {
  // Each field read once, through the TensorImpl's inline accessors: this
  // runs for every tensor of every call (hundreds for a fused optimizer).
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  const caffe2::TypeMeta meta = impl->dtype();
  const c10::Storage& storage = impl->unsafe_storage();
  const void* base = storage ? storage.data() : nullptr;
  const int64_t offset = impl->storage_offset();
  desc->struct_size = TFL_Tensor_STRUCT_SIZE;
  desc->data = base == nullptr
      ? nullptr
      : static_cast<char*>(const_cast<void*>(base)) + offset * static_cast<int64_t>(meta.itemsize());
  desc->dtype = to_tfl_dtype(meta.toScalarType());
  const c10::Device device = impl->device();
  const bool on_device = device.type() == c10::DeviceType::PrivateUse1;
  desc->memory_kind = on_device ? TFL_MEMORY_DEVICE : TFL_MEMORY_HOST;
  desc->device = on_device ? device.index() : -1;
  const auto sizes = impl->sizes();
  desc->ndim = static_cast<int32_t>(sizes.size());
  desc->sizes = sizes.data();
  desc->strides = impl->strides().data();
  desc->numel = impl->numel();
  desc->storage_offset = offset;
}

KernelCall::KernelCall(
    c10::DeviceIndex device,
    TFL_Stream* stream,
    const char* op_name,
    void* user_data,
    int32_t variant) {
  ctx_.struct_size = TFL_KernelContext_STRUCT_SIZE;
  ctx_.device = device;
  ctx_.variant = variant;
  ctx_.stream = stream;
  ctx_.op_name = op_name;
  ctx_.user_data = user_data;
  ctx_.allocate_workspace = &KernelCall::allocate_workspace;
  ctx_.host_data = this;
}

int32_t KernelCall::allocate_workspace(TFL_KernelContext* ctx, size_t size, void** ptr) {
  auto* self = static_cast<KernelCall*>(ctx->host_data);
  try {
    self->workspace_.push_back(
        CachingAllocator::get().allocate_on(static_cast<c10::DeviceIndex>(ctx->device), size));
    *ptr = self->workspace_.back().get();
    return TFL_OK;
  } catch (const c10::OutOfMemoryError&) {
    return TFL_ERR_OUT_OF_MEMORY;
  } catch (const std::exception&) {
    return TFL_ERR_INTERNAL;
  }
}

bool KernelCall::run(
    TFL_KernelFn fn,
    const TFL_Value* inputs,
    size_t num_inputs,
    const TFL_Tensor* const* outputs,
    size_t num_outputs,
    std::string* declined) {
  TFL_Kernel_Args args;
  args.struct_size = TFL_Kernel_Args_STRUCT_SIZE;
  args.ctx = &ctx_;
  args.inputs = inputs;
  args.num_inputs = num_inputs;
  args.outputs = outputs;
  args.num_outputs = num_outputs;
  TFL_Error* error;
  {
    EnqueueGuard enqueuing(ctx_.stream, static_cast<c10::DeviceIndex>(ctx_.device));
    error = fn(&args);
  }
  if (error == nullptr) {
    return true;
  }
  Plugin& plugin = active_plugin();
  TFL_Error_GetCode_Args code{};
  code.struct_size = TFL_Error_GetCode_Args_STRUCT_SIZE;
  code.error = error;
  plugin.api().core->Error_GetCode(&code);
  if (code.code == TFL_ERR_UNIMPLEMENTED) {
    *declined = plugin.consume(error).second;
    return false;
  }
  plugin.check(error, std::string("kernel ") + ctx_.op_name);
  return true;
}

} // namespace torch_fl::bridge
