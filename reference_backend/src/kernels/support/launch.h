// What every kernel launch does before it enqueues work: check the context
// and stream, apply fault injection, and turn host descriptors into
// validated TensorArgs that point at flemu's read-write alias of the memory.
#ifndef FLEMU_KERNELS_SUPPORT_LAUNCH_H_
#define FLEMU_KERNELS_SUPPORT_LAUNCH_H_

#include <array>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "../../errors.h"
#include "../../faults.h"
#include "../../runtime.h"
#include "../../stream.h"
#include "contract.h"
#include "dtype.h"
#include "isa.h"
#include "registry.h"
#include "torch_fl/kernel.h"

namespace flemu {

// Launch-time switches derived from the Config by configure_kernels.
struct KernelSettings {
  uint64_t enabled_dtypes = 0;  // TFL_DTYPE_BIT mask
  int32_t inject_error_id = -1;
  int32_t inject_error_code = 0;
  bool inject_error_async = false;
  int32_t inject_crash_id = -1;
  // Per kernel: the active faults that change it (FLEMU_FAULT).
  std::array<FaultSet, kNumKernels> kernel_faults{};
  // FLEMU_CHECK_CONTRACTS, and per kernel what it declared to the host.
  bool check_contracts = false;
  std::array<KernelContract, kNumKernels> contracts{};
  bool strict = false;
  bool peer_access = true;
  bool blas = true;  // float GEMMs through OpenBLAS (support/blas.h)
  bool dnnl = true;  // float32 convolutions through oneDNN (support/dnnl_conv.h)
  Isa isa = Isa::kBaseline;  // the build of the vectorized loops (support/isa.h)
};
KernelSettings& kernel_settings();

// Throws unless `dtype` is handled and enabled (naming the FLEMU_* switch).
void check_dtype_enabled(int32_t dtype, const char* what);

// A tensor operand after validation. `data` is flemu's alias of element 0
// (nullptr when numel == 0); sizes/strides point into the host descriptor
// and are valid only during the launch.
struct TensorArg {
  char* data = nullptr;
  int32_t dtype = 0;
  int32_t ndim = 0;
  int32_t device = 0;
  int64_t numel = 0;
  int64_t itemsize = 0;
  const int64_t* sizes = nullptr;
  const int64_t* strides = nullptr;

  int64_t size(int32_t d) const { return sizes[d]; }
  int64_t stride(int32_t d) const { return strides[d]; }
  // Dense row-major, as PyTorch's is_contiguous() (support/layout.h).
  bool is_contiguous() const;
};

// A Scalar argument with its kind kept (integers never go through double).
struct ScalarArg {
  int32_t tag = TFL_VALUE_INT;  // TFL_VALUE_INT, _DOUBLE or _BOOL
  int64_t i = 0;
  double d = 0.0;

  bool is_floating() const { return tag == TFL_VALUE_DOUBLE; }
  double to_double() const { return tag == TFL_VALUE_DOUBLE ? d : static_cast<double>(i); }
  int64_t to_int() const { return tag == TFL_VALUE_DOUBLE ? float_to_i64(d) : i; }
  // The value in an arithmetic compute type (see compute_t).
  template <class C>
  C as() const {
    if constexpr (std::is_integral_v<C>) return static_cast<C>(to_int());
    else if (tag == TFL_VALUE_DOUBLE) return static_cast<C>(d);
    else return static_cast<C>(i);
  }
};

class Launch {
 public:
  // Validates args/ctx/stream, checks the host's contract (under
  // FLEMU_CHECK_CONTRACTS; `contract` overrides the kernel's registered one)
  // and applies FLEMU_INJECT_CRASH and the synchronous FLEMU_INJECT_ERROR.
  Launch(const TFL_Kernel_Args* args, int32_t kernel_id, const KernelContract* contract = nullptr);

  const char* name() const { return kernel_name(id_); }
  int32_t id() const { return id_; }
  int32_t device() const { return device_; }
  // ctx->variant: which overload of the kernel's operator is running.
  int32_t variant() const { return args_->ctx->variant; }
  const TFL_KernelContext& context() const { return *args_->ctx; }
  // Whether FLEMU_FAULT makes this kernel misbehave in way `f`.
  bool faulty(Fault f) const { return (faults_ & fault_bit(f)) != 0; }
  Stream& stream() const { return *stream_; }
  size_t num_inputs() const { return args_->num_inputs; }
  size_t num_outputs() const { return args_->num_outputs; }

  const TFL_Value& input(size_t i, const char* what) const;
  bool has_input(size_t i) const { return i < args_->num_inputs && args_->inputs[i].tag != TFL_VALUE_NONE; }
  // False for an output the caller did not ask for (a NULL entry, or past the end).
  bool has_output(size_t i) const { return i < args_->num_outputs && args_->outputs[i] != nullptr; }
  TensorArg input_tensor(size_t i, const char* what) const;
  ScalarArg scalar(size_t i, const char* what) const;
  ScalarArg scalar_or(size_t i, int64_t fallback, const char* what) const;
  // For kernels flagged TFL_KERNEL_HOST_SCALARS: when input i is a 0-dim host
  // tensor, reads its value now (the host memory is only valid during the
  // launch) into *out and returns true.
  bool host_scalar(size_t i, ScalarArg* out) const;
  bool boolean_or(size_t i, bool fallback, const char* what) const;
  TensorArg output(size_t i, const char* what) const;
  // Validates any descriptor: dtype enabled, device memory of this device
  // (or of a peer when allow_peer and peer access is on), in range.
  TensorArg tensor(const TFL_Tensor* t, const char* what, bool allow_peer = false) const;

  // Enqueues the kernel's work on ctx->stream (or, under the asynchronous
  // form of FLEMU_INJECT_ERROR, a task that fails instead).
  // A task is built in its queue slot and each line it writes there moves to
  // the stream worker's core: capture a LoopPlan last ([al, plan], not
  // [plan, al]). GCC lays a closure's members out in capture order, and a
  // member after the plan lands past its 688 bytes, on a line of its own,
  // where before it the plan's copy (only the dims in use, loop.h) keeps the
  // task in two lines for a 1-d op.
  template <class Fn>
  void enqueue(Fn&& fn) const {
    if (inject_async_) {
      enqueue_injected_failure();
      return;
    }
    if (faulty(Fault::kMmHang)) {
      stream_->submit(name(), [] { hang_until_released(); });
      return;
    }
    if (!guarded_.empty()) {
      stream_->submit(name(), [fn = std::decay_t<Fn>(std::forward<Fn>(fn)), guarded = guarded_]() mutable {
        fn();
        check_guards_after_task(guarded);
      });
      return;
    }
    stream_->submit(name(), std::forward<Fn>(fn));
  }

 private:
  void enqueue_injected_failure() const;
  // The input-layout faults (mul_ignores_strides, sub_broadcast_wrong,
  // exp_ignores_offset): how the faulty kernel misreads a validated input.
  void misread_input(const TFL_Tensor& t, TensorArg* a) const;

  const TFL_Kernel_Args* args_;
  int32_t id_;
  int32_t device_;
  Runtime* rt_;
  Arena* arena_;  // ctx->device's memory
  Stream* stream_;
  bool inject_async_ = false;
  FaultSet faults_ = 0;
  std::vector<GuardedAllocation> guarded_;  // under FLEMU_CHECK_CONTRACTS
  // Strides the input-layout faults substitute; they live as long as the launch.
  mutable std::vector<std::unique_ptr<int64_t[]>> misread_strides_;
};

// Runs a launch body, converting exceptions into a TFL_Error for the host.
template <class Body>
TFL_Error* run_kernel(const TFL_Kernel_Args* args, int32_t id, Body&& body) noexcept {
  return guarded(kernel_name(id), [&] {
    Launch launch(args, id);
    body(launch);
  });
}

// The same for a kernel found through the symbol convention: the host
// registers those for float32 with TFL_KERNEL_SYMBOL_DEFAULT_FLAGS.
template <class Body>
TFL_Error* run_symbol_kernel(const TFL_Kernel_Args* args, int32_t id, Body&& body) noexcept {
  static const KernelContract kSymbolContract{TFL_DTYPE_BIT(TFL_DTYPE_FLOAT32), TFL_KERNEL_SYMBOL_DEFAULT_FLAGS};
  return guarded(kernel_name(id), [&] {
    Launch launch(args, id, &kSymbolContract);
    body(launch);
  });
}

}  // namespace flemu

#endif  // FLEMU_KERNELS_SUPPORT_LAUNCH_H_
