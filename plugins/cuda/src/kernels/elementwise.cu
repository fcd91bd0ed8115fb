// Elementwise kernels: copy_, fill_/zero_, arithmetic (Tensor and Scalar
// overloads), activations and their backwards, where/masked_fill, the
// _foreach_add step counter and the fused Adam/AdamW step.
//
// Layout: these kernels take operands as the caller passed them (any
// strides, broadcast inputs expanded by the bridge with stride 0, host
// scalars for arithmetic) and walk them through a LayoutPlan; only the flags
// each descriptor in kernel_table.cpp declares are relied on.
#include <cmath>

#include "device_access.cuh"
#include "kernel_call.h"
#include "kernel_entry_points.h"
#include "tensor_ref.h"

namespace flcuda {

namespace {

constexpr int kThreads = 256;

// ---------------------------------------------------------------------------
// The generic launch
// ---------------------------------------------------------------------------

template <class C, int NIN, class F>
__global__ void elementwise_kernel(DevPlan p, F f) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < p.numel; i += step) {
    int64_t off[NIN + 1];
    plan_offsets<NIN + 1>(p, i, off);
    C x[NIN + 1];
#pragma unroll
    for (int k = 0; k < NIN; ++k) x[k] = operand_value<C>(p, k + 1, off[k + 1]);
    store_as<C>(p.data[0] + off[0], p.dtype[0], f(x));
  }
}

// One operand of a launch: a tensor (device memory) or a constant.
struct Operand {
  const TensorRef* ref = nullptr;
  double fconst = 0;
  int64_t iconst = 0;
  int32_t const_dtype = TFL_DTYPE_FLOAT64;
};

Operand constant_operand(double f, int64_t i, int32_t dtype) {
  Operand o;
  o.fconst = f;
  o.iconst = i;
  o.const_dtype = dtype;
  return o;
}

// A 0-dim host scalar (TFL_KERNEL_HOST_SCALARS) read now, at launch.
Operand host_scalar_operand(const TFL_Tensor* t) {
  const char* p = static_cast<const char*>(t->data);
  switch (t->dtype) {
    case TFL_DTYPE_FLOAT64: { double v = *reinterpret_cast<const double*>(p); return constant_operand(v, static_cast<int64_t>(v), t->dtype); }
    case TFL_DTYPE_FLOAT32: { double v = *reinterpret_cast<const float*>(p); return constant_operand(v, static_cast<int64_t>(v), t->dtype); }
    case TFL_DTYPE_INT64: { int64_t v = *reinterpret_cast<const int64_t*>(p); return constant_operand(static_cast<double>(v), v, t->dtype); }
    case TFL_DTYPE_INT32: { int64_t v = *reinterpret_cast<const int32_t*>(p); return constant_operand(static_cast<double>(v), v, t->dtype); }
    case TFL_DTYPE_BOOL:
    case TFL_DTYPE_UINT8: { int64_t v = *reinterpret_cast<const uint8_t*>(p); return constant_operand(static_cast<double>(v), v, t->dtype); }
    default: tfl::unimplemented("a host scalar of dtype ", t->dtype, " is not read by this kernel");
  }
}

DevPlan make_plan(const TensorRef& out, const Operand* ins, int nin) {
  OperandView views[kPlanOperands];
  const int64_t* no_dims = nullptr;
  views[0] = OperandView{out.sizes, out.strides, out.ndim, itemsize_of(out.dtype)};
  for (int k = 0; k < nin; ++k) {
    const TensorRef* r = ins[k].ref;
    views[k + 1] = r != nullptr ? OperandView{r->sizes, r->strides, r->ndim, itemsize_of(r->dtype)}
                                : OperandView{no_dims, no_dims, 0, 0};
  }
  const LayoutPlan lp = plan_layout(views, nin + 1);
  if (!lp.ok) tfl::unimplemented("operands that do not broadcast to the output or have more than ", kPlanDims,
                                 " unmergeable dimensions");
  DevPlan p{};
  p.ndim = lp.ndim;
  p.num_operands = nin + 1;
  p.numel = lp.numel;
  p.contiguous = lp.contiguous;
  for (int d = 0; d < lp.ndim; ++d) p.sizes[d] = lp.sizes[d];
  for (int k = 0; k <= nin; ++k) {
    for (int d = 0; d < lp.ndim; ++d) p.strides[k][d] = lp.strides[k][d];
    const TensorRef* r = k == 0 ? &out : ins[k - 1].ref;
    if (r != nullptr) {
      p.data[k] = r->data;
      p.dtype[k] = r->dtype;
      p.itemsize[k] = itemsize_of(r->dtype);
    } else {
      p.data[k] = nullptr;
      p.dtype[k] = ins[k - 1].const_dtype;
      p.itemsize[k] = 0;
      p.fconst[k] = ins[k - 1].fconst;
      p.iconst[k] = ins[k - 1].iconst;
    }
  }
  // A constant never moves: its "stride" is 0 and the contiguous fast path
  // multiplies by its itemsize 0.
  return p;
}

enum class Compute { kFloat, kDouble, kInt };

Compute compute_for(int32_t out_dtype) {
  if (out_dtype == TFL_DTYPE_FLOAT64) return Compute::kDouble;
  if (is_floating(out_dtype)) return Compute::kFloat;
  return Compute::kInt;
}

template <int NIN, class F>
void launch_plan(cudaStream_t stream, const DevPlan& p, Compute c, const F& f, bool floating_only) {
  if (p.numel == 0) return;
  const unsigned grid = grid_for(p.numel, kThreads);
  switch (c) {
    case Compute::kFloat: elementwise_kernel<float, NIN><<<grid, kThreads, 0, stream>>>(p, f); break;
    case Compute::kDouble: elementwise_kernel<double, NIN><<<grid, kThreads, 0, stream>>>(p, f); break;
    case Compute::kInt:
      if constexpr (F::kIntegral) {
        elementwise_kernel<int64_t, NIN><<<grid, kThreads, 0, stream>>>(p, f);
      } else {
        (void)floating_only;
        tfl::unimplemented("integral outputs are not computed by this kernel");
      }
      break;
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) tfl::fail(error_code_of(err), "elementwise launch failed: ", cudaGetErrorString(err));
}

// Runs `f` over outputs[0] and the given operands.
template <int NIN, class F>
void run_elementwise(const KernelCall& call, const TFL_Tensor* out, const Operand* ins, const F& f) {
  const TensorRef o = ref_of(out);
  const DevPlan p = make_plan(o, ins, NIN);
  launch_plan<NIN>(call.stream(), p, compute_for(out->dtype), f, !F::kIntegral);
}

// An input tensor argument as an operand; a host scalar becomes a constant.
struct OperandHolder {
  TensorRef refs[3];
  Operand ops[3];
};

void add_tensor_operand(OperandHolder& h, int k, const TFL_Tensor* t) {
  if (t->memory_kind == TFL_MEMORY_HOST) {
    h.ops[k] = host_scalar_operand(t);
    return;
  }
  h.refs[k] = ref_of(t);
  h.ops[k].ref = &h.refs[k];
}

// A Scalar argument as a constant operand, exact for integers.
Operand scalar_operand(const KernelCall& call, size_t i, const char* what) {
  const TFL_Value& v = call.input(i, what);
  switch (v.tag) {
    case TFL_VALUE_INT:
    case TFL_VALUE_BOOL: return constant_operand(static_cast<double>(v.v.i), v.v.i, TFL_DTYPE_INT64);
    case TFL_VALUE_DOUBLE: return constant_operand(v.v.d, static_cast<int64_t>(v.v.d), TFL_DTYPE_FLOAT64);
    default: tfl::unimplemented("argument ", i, " (", what, ") must be a real scalar, got value tag ", v.tag);
  }
}

// A Scalar multiplier (alpha) exact for integers.
struct Scalar {
  double f = 1;
  int64_t i = 1;
};
Scalar scalar_arg(const KernelCall& call, size_t i, const char* what, double fallback) {
  Scalar s{fallback, static_cast<int64_t>(fallback)};
  if (!call.has_input(i)) return s;
  const TFL_Value& v = call.input(i, what);
  if (v.tag == TFL_VALUE_INT || v.tag == TFL_VALUE_BOOL) return Scalar{static_cast<double>(v.v.i), v.v.i};
  if (v.tag == TFL_VALUE_DOUBLE) return Scalar{v.v.d, static_cast<int64_t>(v.v.d)};
  tfl::unimplemented("argument ", i, " (", what, ") must be a real scalar, got value tag ", v.tag);
}

template <class C>
__device__ __forceinline__ C pick(const Scalar& s) {
  if constexpr (std::is_integral<C>::value) return static_cast<C>(s.i);
  else return static_cast<C>(s.f);
}

// ---------------------------------------------------------------------------
// Functors. kIntegral: whether the op also runs on integer outputs.
// ---------------------------------------------------------------------------

struct CopyOp {
  static constexpr bool kIntegral = true;
  template <class C> __device__ C operator()(const C* x) const { return x[0]; }
};
struct AddOp {
  static constexpr bool kIntegral = true;
  Scalar alpha;
  template <class C> __device__ C operator()(const C* x) const { return x[0] + pick<C>(alpha) * x[1]; }
};
struct SubOp {
  static constexpr bool kIntegral = true;
  Scalar alpha;
  template <class C> __device__ C operator()(const C* x) const { return x[0] - pick<C>(alpha) * x[1]; }
};
struct MulOp {
  static constexpr bool kIntegral = true;
  template <class C> __device__ C operator()(const C* x) const { return x[0] * x[1]; }
};
struct DivOp {  // true division: integer inputs have a floating result dtype
  static constexpr bool kIntegral = false;
  template <class C> __device__ C operator()(const C* x) const { return x[0] / x[1]; }
};
struct NegOp {
  static constexpr bool kIntegral = true;
  template <class C> __device__ C operator()(const C* x) const { return -x[0]; }
};
struct ReluOp {
  static constexpr bool kIntegral = true;
  template <class C> __device__ C operator()(const C* x) const {
    return (x[0] != x[0]) ? x[0] : (x[0] > C(0) ? x[0] : C(0));
  }
};
struct ExpOp {
  static constexpr bool kIntegral = false;
  template <class C> __device__ C operator()(const C* x) const { return exp(x[0]); }
};
struct TanhOp {
  static constexpr bool kIntegral = false;
  template <class C> __device__ C operator()(const C* x) const { return tanh(x[0]); }
};
struct SqrtOp {
  static constexpr bool kIntegral = false;
  template <class C> __device__ C operator()(const C* x) const { return sqrt(x[0]); }
};
struct RsqrtOp {
  static constexpr bool kIntegral = false;
  template <class C> __device__ C operator()(const C* x) const { return C(1) / sqrt(x[0]); }
};
struct SigmoidOp {
  static constexpr bool kIntegral = false;
  template <class C> __device__ C operator()(const C* x) const { return C(1) / (C(1) + exp(-x[0])); }
};
struct PowScalarOp {
  static constexpr bool kIntegral = false;
  double exponent;
  template <class C> __device__ C operator()(const C* x) const {
    if (exponent == 2.0) return x[0] * x[0];
    if (exponent == 0.5) return sqrt(x[0]);
    return pow(x[0], static_cast<C>(exponent));
  }
};
// gelu: 0.5 x (1 + erf(x / sqrt 2)), or the tanh approximation.
struct GeluOp {
  static constexpr bool kIntegral = false;
  bool tanh_approx;
  template <class C> __device__ C operator()(const C* x) const {
    const C v = x[0];
    if (tanh_approx) {
      const C k = C(0.7978845608028654), c = C(0.044715);
      return C(0.5) * v * (C(1) + tanh(k * (v + c * v * v * v)));
    }
    return C(0.5) * v * (C(1) + erf(v * C(0.7071067811865476)));
  }
};
struct GeluBackwardOp {
  static constexpr bool kIntegral = false;
  bool tanh_approx;
  template <class C> __device__ C operator()(const C* x) const {
    const C g = x[0], v = x[1];
    if (tanh_approx) {
      const C k = C(0.7978845608028654), c = C(0.044715);
      const C inner = k * (v + c * v * v * v);
      const C t = tanh(inner);
      const C left = C(0.5) * v, right = C(1) + t;
      const C left_d = C(0.5) * right;
      const C right_d = left * (C(1) - t * t) * k * (C(1) + C(3) * c * v * v);
      return g * (left_d + right_d);
    }
    const C cdf = C(0.5) * (C(1) + erf(v * C(0.7071067811865476)));
    const C pdf = exp(C(-0.5) * v * v) * C(0.3989422804014327);
    return g * (cdf + v * pdf);
  }
};
struct TanhBackwardOp {
  static constexpr bool kIntegral = false;
  template <class C> __device__ C operator()(const C* x) const { return x[0] * (C(1) - x[1] * x[1]); }
};
struct SigmoidBackwardOp {
  static constexpr bool kIntegral = false;
  template <class C> __device__ C operator()(const C* x) const { return x[0] * (C(1) - x[1]) * x[1]; }
};
struct ThresholdBackwardOp {  // grad where self > threshold, else 0
  static constexpr bool kIntegral = true;
  Scalar threshold;
  template <class C> __device__ C operator()(const C* x) const { return x[1] <= pick<C>(threshold) ? C(0) : x[0]; }
};
struct WhereOp {  // cond ? a : b
  static constexpr bool kIntegral = true;
  template <class C> __device__ C operator()(const C* x) const { return x[0] != C(0) ? x[1] : x[2]; }
};
struct MaskedFillOp {  // mask ? value : self
  static constexpr bool kIntegral = true;
  template <class C> __device__ C operator()(const C* x) const { return x[1] != C(0) ? x[2] : x[0]; }
};
// Comparisons: a bool result computed in the inputs' type (see compare()).
enum class Cmp { kEq, kNe, kLt, kLe, kGt, kGe };
struct CompareOp {
  static constexpr bool kIntegral = true;
  Cmp cmp;
  template <class C> __device__ C operator()(const C* x) const {
    bool r = false;
    switch (cmp) {
      case Cmp::kEq: r = x[0] == x[1]; break;
      case Cmp::kNe: r = x[0] != x[1]; break;
      case Cmp::kLt: r = x[0] < x[1]; break;
      case Cmp::kLe: r = x[0] <= x[1]; break;
      case Cmp::kGt: r = x[0] > x[1]; break;
      case Cmp::kGe: r = x[0] >= x[1]; break;
    }
    return r ? C(1) : C(0);
  }
};

// ---------------------------------------------------------------------------
// Kernel bodies
// ---------------------------------------------------------------------------

template <class F>
TFL_Error* unary(const TFL_Kernel_Args* args, const char* op, const F& f) {
  return run_kernel(args, op, [&](KernelCall& call) {
    OperandHolder h;
    add_tensor_operand(h, 0, call.tensor(0, "self"));
    run_elementwise<1>(call, call.required_output(0), h.ops, f);
  });
}

// op(self, other) with both as tensors (or host scalars).
template <class F>
TFL_Error* binary(const TFL_Kernel_Args* args, const char* op, const F& f) {
  return run_kernel(args, op, [&](KernelCall& call) {
    OperandHolder h;
    add_tensor_operand(h, 0, call.tensor(0, "self"));
    add_tensor_operand(h, 1, call.tensor(1, "other"));
    run_elementwise<2>(call, call.required_output(0), h.ops, f);
  });
}

// op(self, Scalar other).
template <class F>
TFL_Error* binary_scalar(const TFL_Kernel_Args* args, const char* op, const F& f) {
  return run_kernel(args, op, [&](KernelCall& call) {
    OperandHolder h;
    add_tensor_operand(h, 0, call.tensor(0, "self"));
    h.ops[1] = scalar_operand(call, 1, "other");
    run_elementwise<2>(call, call.required_output(0), h.ops, f);
  });
}

// The type two operands compare in: double when either is float64, float
// when either is floating, int64 otherwise (a float compared as an integer
// would be truncated first).
Compute compare_compute(const Operand* ops) {
  bool f64 = false, floating = false;
  for (int k = 0; k < 2; ++k) {
    const int32_t dt = ops[k].ref != nullptr ? ops[k].ref->dtype : ops[k].const_dtype;
    f64 |= dt == TFL_DTYPE_FLOAT64;
    floating |= is_floating(dt);
  }
  return f64 ? Compute::kDouble : floating ? Compute::kFloat : Compute::kInt;
}

TFL_Error* compare(const TFL_Kernel_Args* args, const char* op, Cmp cmp, bool scalar_other) {
  return run_kernel(args, op, [&](KernelCall& call) {
    OperandHolder h;
    add_tensor_operand(h, 0, call.tensor(0, "self"));
    if (scalar_other) h.ops[1] = scalar_operand(call, 1, "other");
    else add_tensor_operand(h, 1, call.tensor(1, "other"));
    const TensorRef o = ref_of(call.required_output(0));
    const DevPlan p = make_plan(o, h.ops, 2);
    launch_plan<2>(call.stream(), p, compare_compute(h.ops), CompareOp{cmp}, false);
  });
}

bool tanh_approximation(const KernelCall& call, size_t i) {
  const std::string a = call.string_or(i, "none", "approximate");
  if (a == "none") return false;
  if (a == "tanh") return true;
  tfl::invalid_argument("approximate must be 'none' or 'tanh', got '", a, "'");
}

}  // namespace

// ---------------------------------------------------------------------------
// Copies and fills used by other kernels
// ---------------------------------------------------------------------------

void copy_into(cudaStream_t stream, const TensorRef& dst, const TensorRef& src) {
  Operand in;
  in.ref = &src;
  const DevPlan p = make_plan(dst, &in, 1);
  launch_plan<1>(stream, p, dst.dtype == src.dtype && !is_floating(dst.dtype) ? Compute::kInt
                            : (dst.dtype == TFL_DTYPE_FLOAT64 || src.dtype == TFL_DTYPE_FLOAT64 ||
                               !is_floating(dst.dtype) || !is_floating(src.dtype))
                                ? Compute::kDouble
                                : Compute::kFloat,
                 CopyOp{}, false);
}

void fill_ref(cudaStream_t stream, const TensorRef& dst, double value) {
  Operand c = constant_operand(value, static_cast<int64_t>(value), TFL_DTYPE_FLOAT64);
  const DevPlan p = make_plan(dst, &c, 1);
  launch_plan<1>(stream, p, compute_for(dst.dtype), CopyOp{}, false);
}

void scale_into(cudaStream_t stream, const TensorRef& dst, const TensorRef& src, double factor) {
  Operand in[2];
  in[0].ref = &src;
  in[1] = constant_operand(factor, static_cast<int64_t>(factor), TFL_DTYPE_FLOAT64);
  const DevPlan p = make_plan(dst, in, 2);
  launch_plan<2>(stream, p, compute_for(dst.dtype), MulOp{}, false);
}

// ---------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------

// aten::copy_(Tensor(a!) self, Tensor src, bool non_blocking=False): any
// layouts and dtypes; src broadcasts to self.
TFL_Error* kernel_copy(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::copy_", [&](KernelCall& call) {
    const TFL_Value& sv = call.input(1, "src");
    if (sv.tag != TFL_VALUE_TENSOR || sv.v.tensor == nullptr) tfl::invalid_argument("src must be a tensor");
    const TFL_Tensor* src_t = sv.v.tensor;
    if (src_t->memory_kind != TFL_MEMORY_DEVICE || (src_t->numel > 0 && src_t->device != call.device()))
      tfl::unimplemented("copies from another device or from host memory go through the host's copy path");
    const TFL_Tensor* self_t = call.output(0) != nullptr ? call.output(0) : call.tensor(0, "self");
    const TFL_Tensor* src_checked = call.tensor(1, "src");
    const TensorRef dst = ref_of(self_t), src = ref_of(src_checked);
    if (dst.numel() == 0) return;
    if (dst.data == src.data && dst.dtype == src.dtype && dst.ndim == src.ndim) {
      bool same = true;
      for (int32_t d = 0; d < dst.ndim; ++d)
        same &= dst.sizes[d] == src.sizes[d] && (dst.sizes[d] == 1 || dst.strides[d] == src.strides[d]);
      if (same) return;  // a view copied onto itself
    }
    // Dense same-layout, same-dtype copies are one memcpy.
    if (dst.dtype == src.dtype && is_row_major(dst.sizes, dst.strides, dst.ndim) &&
        is_row_major(src.sizes, src.strides, src.ndim) && src.numel() == dst.numel()) {
      check_cuda(cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(dst.numel() * itemsize_of(dst.dtype)),
                                 cudaMemcpyDeviceToDevice, call.stream()),
                 "cudaMemcpyAsync");
      return;
    }
    copy_into(call.stream(), dst, src);
  });
}

// aten::fill_.Scalar(Tensor(a!) self, Scalar value)
TFL_Error* kernel_fill_scalar(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::fill_.Scalar", [&](KernelCall& call) {
    const TFL_Tensor* self = call.output(0) != nullptr ? call.output(0) : call.tensor(0, "self");
    OperandHolder h;
    h.ops[0] = scalar_operand(call, 1, "value");
    const TensorRef o = ref_of(self);
    const DevPlan p = make_plan(o, h.ops, 1);
    launch_plan<1>(call.stream(), p, compute_for(self->dtype), CopyOp{}, false);
  });
}

// aten::zero_(Tensor(a!) self)
TFL_Error* kernel_zero(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::zero_", [&](KernelCall& call) {
    const TFL_Tensor* self = call.output(0) != nullptr ? call.output(0) : call.tensor(0, "self");
    const TensorRef o = ref_of(self);
    if (is_row_major(o.sizes, o.strides, o.ndim)) {
      check_cuda(cudaMemsetAsync(o.data, 0, static_cast<size_t>(o.numel() * itemsize_of(o.dtype)), call.stream()),
                 "cudaMemsetAsync");
      return;
    }
    fill_ref(call.stream(), o, 0.0);
  });
}

TFL_Error* kernel_add_tensor(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::add.Tensor", [&](KernelCall& call) {
    OperandHolder h;
    add_tensor_operand(h, 0, call.tensor(0, "self"));
    add_tensor_operand(h, 1, call.tensor(1, "other"));
    run_elementwise<2>(call, call.required_output(0), h.ops, AddOp{scalar_arg(call, 2, "alpha", 1.0)});
  });
}
TFL_Error* kernel_sub_tensor(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::sub.Tensor", [&](KernelCall& call) {
    OperandHolder h;
    add_tensor_operand(h, 0, call.tensor(0, "self"));
    add_tensor_operand(h, 1, call.tensor(1, "other"));
    run_elementwise<2>(call, call.required_output(0), h.ops, SubOp{scalar_arg(call, 2, "alpha", 1.0)});
  });
}
TFL_Error* kernel_mul_tensor(const TFL_Kernel_Args* args) { return binary(args, "aten::mul.Tensor", MulOp{}); }
TFL_Error* kernel_div_tensor(const TFL_Kernel_Args* args) { return binary(args, "aten::div.Tensor", DivOp{}); }

TFL_Error* kernel_add_scalar(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::add.Scalar", [&](KernelCall& call) {
    OperandHolder h;
    add_tensor_operand(h, 0, call.tensor(0, "self"));
    h.ops[1] = scalar_operand(call, 1, "other");
    run_elementwise<2>(call, call.required_output(0), h.ops, AddOp{scalar_arg(call, 2, "alpha", 1.0)});
  });
}
TFL_Error* kernel_sub_scalar(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::sub.Scalar", [&](KernelCall& call) {
    OperandHolder h;
    add_tensor_operand(h, 0, call.tensor(0, "self"));
    h.ops[1] = scalar_operand(call, 1, "other");
    run_elementwise<2>(call, call.required_output(0), h.ops, SubOp{scalar_arg(call, 2, "alpha", 1.0)});
  });
}
TFL_Error* kernel_mul_scalar(const TFL_Kernel_Args* args) { return binary_scalar(args, "aten::mul.Scalar", MulOp{}); }
TFL_Error* kernel_div_scalar(const TFL_Kernel_Args* args) { return binary_scalar(args, "aten::div.Scalar", DivOp{}); }

TFL_Error* kernel_neg(const TFL_Kernel_Args* args) { return unary(args, "aten::neg", NegOp{}); }
TFL_Error* kernel_relu(const TFL_Kernel_Args* args) { return unary(args, "aten::relu", ReluOp{}); }
TFL_Error* kernel_exp(const TFL_Kernel_Args* args) { return unary(args, "aten::exp", ExpOp{}); }
TFL_Error* kernel_tanh(const TFL_Kernel_Args* args) { return unary(args, "aten::tanh", TanhOp{}); }
TFL_Error* kernel_sqrt(const TFL_Kernel_Args* args) { return unary(args, "aten::sqrt", SqrtOp{}); }
TFL_Error* kernel_rsqrt(const TFL_Kernel_Args* args) { return unary(args, "aten::rsqrt", RsqrtOp{}); }
TFL_Error* kernel_sigmoid(const TFL_Kernel_Args* args) { return unary(args, "aten::sigmoid", SigmoidOp{}); }

TFL_Error* kernel_pow_tensor_scalar(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::pow.Tensor_Scalar", [&](KernelCall& call) {
    OperandHolder h;
    add_tensor_operand(h, 0, call.tensor(0, "self"));
    run_elementwise<1>(call, call.required_output(0), h.ops, PowScalarOp{call.real(1, "exponent")});
  });
}

TFL_Error* kernel_gelu(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::gelu", [&](KernelCall& call) {
    OperandHolder h;
    add_tensor_operand(h, 0, call.tensor(0, "self"));
    run_elementwise<1>(call, call.required_output(0), h.ops, GeluOp{tanh_approximation(call, 1)});
  });
}

TFL_Error* kernel_gelu_backward(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::gelu_backward", [&](KernelCall& call) {
    OperandHolder h;
    add_tensor_operand(h, 0, call.tensor(0, "grad_output"));
    add_tensor_operand(h, 1, call.tensor(1, "self"));
    run_elementwise<2>(call, call.required_output(0), h.ops, GeluBackwardOp{tanh_approximation(call, 2)});
  });
}

TFL_Error* kernel_tanh_backward(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::tanh_backward", [&](KernelCall& call) {
    OperandHolder h;
    add_tensor_operand(h, 0, call.tensor(0, "grad_output"));
    add_tensor_operand(h, 1, call.tensor(1, "output"));
    run_elementwise<2>(call, call.required_output(0), h.ops, TanhBackwardOp{});
  });
}

TFL_Error* kernel_sigmoid_backward(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::sigmoid_backward", [&](KernelCall& call) {
    OperandHolder h;
    add_tensor_operand(h, 0, call.tensor(0, "grad_output"));
    add_tensor_operand(h, 1, call.tensor(1, "output"));
    run_elementwise<2>(call, call.required_output(0), h.ops, SigmoidBackwardOp{});
  });
}

TFL_Error* kernel_threshold_backward(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::threshold_backward", [&](KernelCall& call) {
    OperandHolder h;
    add_tensor_operand(h, 0, call.tensor(0, "grad_output"));
    add_tensor_operand(h, 1, call.tensor(1, "self"));
    run_elementwise<2>(call, call.required_output(0), h.ops,
                       ThresholdBackwardOp{scalar_arg(call, 2, "threshold", 0.0)});
  });
}

TFL_Error* kernel_eq_tensor(const TFL_Kernel_Args* args) { return compare(args, "aten::eq.Tensor", Cmp::kEq, false); }
TFL_Error* kernel_ne_tensor(const TFL_Kernel_Args* args) { return compare(args, "aten::ne.Tensor", Cmp::kNe, false); }
TFL_Error* kernel_lt_tensor(const TFL_Kernel_Args* args) { return compare(args, "aten::lt.Tensor", Cmp::kLt, false); }
TFL_Error* kernel_le_tensor(const TFL_Kernel_Args* args) { return compare(args, "aten::le.Tensor", Cmp::kLe, false); }
TFL_Error* kernel_gt_tensor(const TFL_Kernel_Args* args) { return compare(args, "aten::gt.Tensor", Cmp::kGt, false); }
TFL_Error* kernel_ge_tensor(const TFL_Kernel_Args* args) { return compare(args, "aten::ge.Tensor", Cmp::kGe, false); }
TFL_Error* kernel_eq_scalar(const TFL_Kernel_Args* args) { return compare(args, "aten::eq.Scalar", Cmp::kEq, true); }
TFL_Error* kernel_ne_scalar(const TFL_Kernel_Args* args) { return compare(args, "aten::ne.Scalar", Cmp::kNe, true); }
TFL_Error* kernel_lt_scalar(const TFL_Kernel_Args* args) { return compare(args, "aten::lt.Scalar", Cmp::kLt, true); }
TFL_Error* kernel_le_scalar(const TFL_Kernel_Args* args) { return compare(args, "aten::le.Scalar", Cmp::kLe, true); }
TFL_Error* kernel_gt_scalar(const TFL_Kernel_Args* args) { return compare(args, "aten::gt.Scalar", Cmp::kGt, true); }
TFL_Error* kernel_ge_scalar(const TFL_Kernel_Args* args) { return compare(args, "aten::ge.Scalar", Cmp::kGe, true); }

// aten::where.self(Tensor condition, Tensor self, Tensor other)
TFL_Error* kernel_where_self(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::where.self", [&](KernelCall& call) {
    OperandHolder h;
    add_tensor_operand(h, 0, call.tensor(0, "condition"));
    add_tensor_operand(h, 1, call.tensor(1, "self"));
    add_tensor_operand(h, 2, call.tensor(2, "other"));
    run_elementwise<3>(call, call.required_output(0), h.ops, WhereOp{});
  });
}

// aten::masked_fill.Scalar(Tensor self, Tensor mask, Scalar value)
TFL_Error* kernel_masked_fill_scalar(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::masked_fill.Scalar", [&](KernelCall& call) {
    OperandHolder h;
    add_tensor_operand(h, 0, call.tensor(0, "self"));
    add_tensor_operand(h, 1, call.tensor(1, "mask"));
    h.ops[2] = scalar_operand(call, 2, "value");
    run_elementwise<3>(call, call.required_output(0), h.ops, MaskedFillOp{});
  });
}

// aten::_foreach_add.Scalar(Tensor[] self, Scalar scalar) -> Tensor[]; the
// in-place overload (the optimizers' step counters) writes self.
TFL_Error* kernel_foreach_add_scalar(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::_foreach_add.Scalar", [&](KernelCall& call) {
    const std::vector<const TFL_Tensor*> self = call.tensor_list(0, "self");
    Operand in[2];
    in[1] = scalar_operand(call, 1, "scalar");
    const bool write_self = call.num_outputs() == 0;
    if (!write_self && call.num_outputs() != self.size())
      tfl::invalid_argument("expects ", self.size(), " outputs, got ", call.num_outputs());
    for (size_t i = 0; i < self.size(); ++i) {
      if (self[i] == nullptr) tfl::invalid_argument("self[", i, "] is undefined");
      const TensorRef a = ref_of(self[i]);
      in[0].ref = &a;
      const TFL_Tensor* out_t = write_self ? self[i] : call.required_output(i);
      const TensorRef o = ref_of(out_t);
      const DevPlan p = make_plan(o, in, 2);
      launch_plan<2>(call.stream(), p, compute_for(o.dtype), AddOp{Scalar{1.0, 1}}, false);
    }
  });
}

// ---------------------------------------------------------------------------
// Dropout: Philox4x32-10 keyed by the host's seed, element i drawing word
// i % 4 of counter rng_offset + i / 4 (so a call uses numel / 4 counters of
// the span the host reserved for it: the sum of its outputs' sizes).
// ---------------------------------------------------------------------------

namespace {

__device__ __forceinline__ uint32_t philox_word(uint64_t seed, uint64_t counter, int word) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = __umulhi(0xD2511F53u, c0), lo0 = 0xD2511F53u * c0;
    const uint32_t hi1 = __umulhi(0xCD9E8D57u, c2), lo1 = 0xCD9E8D57u * c2;
    const uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return word == 0 ? c0 : word == 1 ? c1 : word == 2 ? c2 : c3;
}

struct DropoutArgs {
  const char* x;
  char* y;
  bool* mask;
  int32_t x_dt, y_dt;
  int64_t n;
  uint64_t seed, offset;
  double keep;  // 1 - p
  float scale;
  bool train;
};

__global__ void dropout_kernel(DropoutArgs a) {
  const int64_t xs = itemsize_of_dev(a.x_dt), ys = itemsize_of_dev(a.y_dt);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    bool keep = true;
    if (a.train) {
      const uint32_t w = philox_word(a.seed, a.offset + static_cast<uint64_t>(i / 4), static_cast<int>(i % 4));
      keep = static_cast<double>(w) * 0x1.0p-32 < a.keep;
    }
    const float v = load_as<float>(a.x + i * xs, a.x_dt);
    store_as<float>(a.y + i * ys, a.y_dt, a.train ? (keep ? v * a.scale : 0.0f) : v);
    if (a.mask != nullptr) a.mask[i] = keep;
  }
}

struct DropoutBackwardOp {  // grad * mask * scale
  static constexpr bool kIntegral = false;
  double scale;
  template <class C> __device__ C operator()(const C* x) const { return x[0] * x[1] * static_cast<C>(scale); }
};

}  // namespace

// aten::native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor); dense operands.
TFL_Error* kernel_native_dropout(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::native_dropout", [&](KernelCall& call) {
    const TFL_Tensor* x = call.tensor(0, "input");
    const double p = call.real(1, "p");
    if (p < 0.0 || p > 1.0) tfl::invalid_argument("dropout probability has to be between 0 and 1, but got ", p);
    const bool train = call.boolean_or(2, true, "train");
    const TFL_Tensor* y = call.required_output(0);
    const TFL_Tensor* mask = call.output(1);
    if (mask != nullptr && mask->dtype != TFL_DTYPE_BOOL) tfl::invalid_argument("the mask must be bool");
    const TFL_KernelContext* ctx = call.raw()->ctx;
    if (train && (!TFL_HAS_FIELD(ctx, TFL_KernelContext, rng_span) || ctx->rng_span * 4 < static_cast<uint64_t>(x->numel)))
      tfl::invalid_argument("the host reserved ", ctx->rng_span, " random counters for ", x->numel,
                            " elements (the kernel must be flagged TFL_KERNEL_RANDOM)");
    if (x->numel == 0) return;
    DropoutArgs a{static_cast<const char*>(x->data), static_cast<char*>(y->data),
                  mask != nullptr ? static_cast<bool*>(mask->data) : nullptr, x->dtype, y->dtype, x->numel,
                  ctx->rng_seed, ctx->rng_offset, 1.0 - p, p >= 1.0 ? 0.0f : static_cast<float>(1.0 / (1.0 - p)),
                  train};
    dropout_kernel<<<grid_for(x->numel, kThreads), kThreads, 0, call.stream()>>>(a);
    call.check_launch("dropout");
  });
}

// aten::native_dropout_backward(Tensor grad_output, Tensor mask, float scale) -> Tensor
TFL_Error* kernel_native_dropout_backward(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::native_dropout_backward", [&](KernelCall& call) {
    OperandHolder h;
    add_tensor_operand(h, 0, call.tensor(0, "grad_output"));
    add_tensor_operand(h, 1, call.tensor(1, "mask"));
    run_elementwise<2>(call, call.required_output(0), h.ops, DropoutBackwardOp{call.real(2, "scale")});
  });
}

// ---------------------------------------------------------------------------
// Fused Adam / AdamW (torch.optim's fused=True), float lr
// ---------------------------------------------------------------------------

namespace {

constexpr int kAdamBatch = 16;  // tensors per launch (kernel parameters stay small)

struct AdamTensors {
  char* param[kAdamBatch];
  char* grad[kAdamBatch];
  char* m[kAdamBatch];
  char* v[kAdamBatch];
  char* vmax[kAdamBatch];
  const float* step[kAdamBatch];
  int64_t numel[kAdamBatch];
  int32_t count;
  int32_t dtype;
};

struct AdamHyper {
  double lr, beta1, beta2, weight_decay, eps;
  bool amsgrad, maximize, adamw;
  const char* grad_scale;  // device scalar or NULL
  int32_t grad_scale_dtype;
  const char* found_inf;
  int32_t found_inf_dtype;
};

// Follows torch.optim's single-tensor Adam step by step, in float.
__global__ void adam_kernel(AdamTensors t, AdamHyper h) {
  const int slot = blockIdx.y;
  if (slot >= t.count) return;
  if (h.found_inf != nullptr && load_as<float>(h.found_inf, h.found_inf_dtype) == 1.0f) return;
  const float inv_scale = h.grad_scale != nullptr ? 1.0f / load_as<float>(h.grad_scale, h.grad_scale_dtype) : 1.0f;
  const double step = static_cast<double>(*t.step[slot]);
  const double bc1 = 1.0 - pow(h.beta1, step), bc2 = 1.0 - pow(h.beta2, step);
  const float neg_step_size = static_cast<float>(-(h.lr / bc1));
  const float bc2_sqrt = static_cast<float>(sqrt(bc2));
  const float w = static_cast<float>(1.0 - h.beta1), beta2 = static_cast<float>(h.beta2),
              beta2c = static_cast<float>(1.0 - h.beta2), wd = static_cast<float>(h.weight_decay),
              decay = static_cast<float>(1.0 - h.lr * h.weight_decay), eps = static_cast<float>(h.eps);
  const bool l2 = h.weight_decay != 0.0 && !h.adamw, decoupled = h.weight_decay != 0.0 && h.adamw;
  const int32_t dt = t.dtype;
  const int64_t is = dt == TFL_DTYPE_FLOAT32 ? 4 : 2;
  const int64_t n = t.numel[slot];
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t off = i * is;
    float g = load_as<float>(t.grad[slot] + off, dt);
    if (h.grad_scale != nullptr) {
      g = g * inv_scale;
      store_as<float>(t.grad[slot] + off, dt, g);
    }
    if (h.maximize) g = -g;
    float p = load_as<float>(t.param[slot] + off, dt);
    if (l2) g = g + wd * p;
    if (decoupled) p = p * decay;
    float m = load_as<float>(t.m[slot] + off, dt);
    m = w < 0.5f ? m + w * (g - m) : g - (g - m) * (1.0f - w);
    store_as<float>(t.m[slot] + off, dt, m);
    float v = load_as<float>(t.v[slot] + off, dt);
    v = v * beta2 + beta2c * g * g;
    store_as<float>(t.v[slot] + off, dt, v);
    float s = v;
    if (h.amsgrad) {
      float vm = load_as<float>(t.vmax[slot] + off, dt);
      vm = (vm > v || vm != vm) ? vm : v;
      store_as<float>(t.vmax[slot] + off, dt, vm);
      s = vm;
    }
    p = p + neg_step_size * (m / (sqrtf(s) / bc2_sqrt + eps));
    store_as<float>(t.param[slot] + off, dt, p);
  }
}

bool dense_like(const TFL_Tensor* a, const TFL_Tensor* p) {
  if (a->numel != p->numel || a->dtype != p->dtype) return false;
  return is_row_major(a->sizes, a->strides, a->ndim);
}

const char* optional_scalar(const KernelCall& call, size_t i, const char* what, int32_t* dtype) {
  const TFL_Tensor* t = call.optional_tensor(i, what);
  if (t == nullptr) return nullptr;
  if (t->numel != 1 || t->memory_kind != TFL_MEMORY_DEVICE) tfl::unimplemented(what, " must be one element on the device");
  *dtype = t->dtype;
  return static_cast<const char*>(t->data);
}

void launch_adam(KernelCall& call, bool adamw) {
  static const char* const kNames[] = {"self", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs"};
  AdamHyper h{};
  h.adamw = adamw;
  h.amsgrad = call.boolean_or(11, false, "amsgrad");
  h.maximize = call.boolean_or(12, false, "maximize");
  h.lr = call.real(6, "lr");
  h.beta1 = call.real(7, "beta1");
  h.beta2 = call.real(8, "beta2");
  h.weight_decay = call.real(9, "weight_decay");
  h.eps = call.real(10, "eps");
  h.grad_scale = optional_scalar(call, 13, "grad_scale", &h.grad_scale_dtype);
  h.found_inf = optional_scalar(call, 14, "found_inf", &h.found_inf_dtype);
  std::vector<std::vector<const TFL_Tensor*>> lists;
  for (size_t k = 0; k < 5; ++k) lists.push_back(call.tensor_list(k, kNames[k]));
  const std::vector<const TFL_Tensor*> steps = call.tensor_list(5, "state_steps");
  const size_t n = lists[0].size();
  for (size_t k = 1; k < 4; ++k)
    if (lists[k].size() != n) tfl::invalid_argument(kNames[k], " has ", lists[k].size(), " tensors, self has ", n);
  if (h.amsgrad && lists[4].size() != n) tfl::invalid_argument("amsgrad needs one max_exp_avg_sqs per parameter");
  if (steps.size() != n) tfl::invalid_argument("state_steps has ", steps.size(), " tensors, self has ", n);
  // Validate everything before the first launch, so a decline enqueues nothing.
  int32_t dtype = -1;
  for (size_t i = 0; i < n; ++i) {
    const TFL_Tensor* p = lists[0][i];
    if (p == nullptr) tfl::invalid_argument("self[", i, "] is undefined");
    if (p->dtype != TFL_DTYPE_FLOAT32 && p->dtype != TFL_DTYPE_FLOAT16 && p->dtype != TFL_DTYPE_BFLOAT16)
      tfl::unimplemented("the fused step runs float32, float16 and bfloat16 parameters, got dtype ", p->dtype);
    if (dtype == -1) dtype = p->dtype;
    if (p->dtype != dtype) tfl::unimplemented("parameters of mixed dtypes");
    for (size_t k = 0; k < 5; ++k) {
      if (k == 4 && !h.amsgrad) continue;
      if (lists[k][i] == nullptr || !dense_like(lists[k][i], p))
        tfl::unimplemented(kNames[k], "[", i, "] is not dense with the dtype and size of self[", i, "]");
    }
    if (steps[i] == nullptr || steps[i]->dtype != TFL_DTYPE_FLOAT32 || steps[i]->numel != 1 ||
        steps[i]->memory_kind != TFL_MEMORY_DEVICE)
      tfl::unimplemented("state_steps[", i, "] must be a one-element float32 tensor on the device");
  }
  for (size_t begin = 0; begin < n; begin += kAdamBatch) {
    AdamTensors t{};
    t.dtype = dtype;
    int64_t most = 0;
    for (size_t i = begin; i < n && i < begin + kAdamBatch; ++i) {
      const int j = t.count++;
      t.param[j] = static_cast<char*>(lists[0][i]->data);
      t.grad[j] = static_cast<char*>(lists[1][i]->data);
      t.m[j] = static_cast<char*>(lists[2][i]->data);
      t.v[j] = static_cast<char*>(lists[3][i]->data);
      t.vmax[j] = h.amsgrad ? static_cast<char*>(lists[4][i]->data) : nullptr;
      t.step[j] = static_cast<const float*>(steps[i]->data);
      t.numel[j] = lists[0][i]->numel;
      most = std::max(most, t.numel[j]);
    }
    if (most == 0) continue;
    const dim3 grid(grid_for(most, kThreads * 4, 1024), static_cast<unsigned>(t.count));
    adam_kernel<<<grid, kThreads, 0, call.stream()>>>(t, h);
    call.check_launch("fused Adam");
  }
}

}  // namespace

TFL_Error* kernel_fused_adam(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::_fused_adam_", [&](KernelCall& call) { launch_adam(call, false); });
}
TFL_Error* kernel_fused_adamw(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::_fused_adamw_", [&](KernelCall& call) { launch_adam(call, true); });
}

}  // namespace flcuda
