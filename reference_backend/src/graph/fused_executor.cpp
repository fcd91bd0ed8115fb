// Runs a fused program: tiles of kTile elements; per tile every input is
// loaded (converted to the compute type) into its register, each
// instruction runs as one tight loop over the tile, and the outputs are
// converted and stored. Memory is touched once per operand, whatever the
// length of the chain.
#include <algorithm>
#include <cmath>
#include <vector>

#include "../kernels/support/dtype.h"
#include "../thread_pool.h"
#include "fused_program.h"

namespace flemu::graph {
namespace {

constexpr int64_t kTile = 1024;
// Below this many elements a program runs on the stream's own thread.
constexpr int64_t kParallelGrain = int64_t{1} << 16;

template <class C, class T>
inline C to_c(T v) {
  if constexpr (std::is_same_v<T, bool>) return v ? C(1) : C(0);
  else if constexpr (is_reduced_float_v<T>) return static_cast<C>(static_cast<float>(v));
  else return static_cast<C>(v);
}

template <class T, class C>
inline T from_c(C v) {
  if constexpr (std::is_same_v<T, bool>) return v != C(0);
  else if constexpr (is_reduced_float_v<T>) return T(static_cast<float>(v));
  else return static_cast<T>(v);
}

template <class C, class T>
void load_run(const char* src, int64_t stride, int64_t n, C* dst) {
  const T* p = reinterpret_cast<const T*>(src);
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] = to_c<C>(p[i]);
  } else if (stride == 0) {
    const C v = to_c<C>(p[0]);
    for (int64_t i = 0; i < n; ++i) dst[i] = v;
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = to_c<C>(p[i * stride]);
  }
}

template <class C, class T>
void store_run(char* dst, int64_t stride, int64_t n, const C* src) {
  T* p = reinterpret_cast<T*>(dst);
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) p[i] = from_c<T>(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) p[i * stride] = from_c<T>(src[i]);
  }
}

using LoadFn = void (*)(const char*, int64_t, int64_t, void*);
using StoreFn = void (*)(char*, int64_t, int64_t, const void*);

template <class C>
LoadFn loader(int32_t dtype) {
  switch (dtype) {
    case TFL_DTYPE_FLOAT32:
      return [](const char* s, int64_t st, int64_t n, void* d) { load_run<C, float>(s, st, n, static_cast<C*>(d)); };
    case TFL_DTYPE_FLOAT64:
      return [](const char* s, int64_t st, int64_t n, void* d) { load_run<C, double>(s, st, n, static_cast<C*>(d)); };
    case TFL_DTYPE_FLOAT16:
      return [](const char* s, int64_t st, int64_t n, void* d) { load_run<C, Half>(s, st, n, static_cast<C*>(d)); };
    case TFL_DTYPE_BFLOAT16:
      return [](const char* s, int64_t st, int64_t n, void* d) { load_run<C, BFloat16>(s, st, n, static_cast<C*>(d)); };
    default:
      return [](const char* s, int64_t st, int64_t n, void* d) { load_run<C, bool>(s, st, n, static_cast<C*>(d)); };
  }
}

template <class C>
StoreFn storer(int32_t dtype) {
  switch (dtype) {
    case TFL_DTYPE_FLOAT32:
      return [](char* d, int64_t st, int64_t n, const void* s) { store_run<C, float>(d, st, n, static_cast<const C*>(s)); };
    case TFL_DTYPE_FLOAT64:
      return [](char* d, int64_t st, int64_t n, const void* s) { store_run<C, double>(d, st, n, static_cast<const C*>(s)); };
    case TFL_DTYPE_FLOAT16:
      return [](char* d, int64_t st, int64_t n, const void* s) { store_run<C, Half>(d, st, n, static_cast<const C*>(s)); };
    case TFL_DTYPE_BFLOAT16:
      return [](char* d, int64_t st, int64_t n, const void* s) {
        store_run<C, BFloat16>(d, st, n, static_cast<const C*>(s));
      };
    default:
      return [](char* d, int64_t st, int64_t n, const void* s) { store_run<C, bool>(d, st, n, static_cast<const C*>(s)); };
  }
}

template <class C>
inline C round_to(C x, int32_t dtype) {
  switch (dtype) {
    case TFL_DTYPE_FLOAT16: return static_cast<C>(static_cast<float>(Half(static_cast<float>(x))));
    case TFL_DTYPE_BFLOAT16: return static_cast<C>(static_cast<float>(BFloat16(static_cast<float>(x))));
    case TFL_DTYPE_FLOAT32: return static_cast<C>(static_cast<float>(x));
    case TFL_DTYPE_BOOL: return x != C(0) ? C(1) : C(0);
    default: return x;
  }
}

template <class C>
inline C gelu(C x, bool tanh_approx) {
  if (tanh_approx) {
    const C k_beta = static_cast<C>(M_SQRT2 * M_2_SQRTPI * 0.5);
    const C k_kappa = static_cast<C>(0.044715);
    const C inner = k_beta * (x + k_kappa * x * x * x);
    return C(0.5) * x * (C(1) + std::tanh(inner));
  }
  return x * C(0.5) * (C(1) + std::erf(x * static_cast<C>(M_SQRT1_2)));
}

template <class C>
inline C gelu_backward(C g, C x, bool tanh_approx) {
  if (tanh_approx) {
    const C k_beta = static_cast<C>(M_SQRT2 * M_2_SQRTPI * 0.5);
    const C k_kappa = static_cast<C>(0.044715);
    const C x_sq = x * x;
    const C inner = k_beta * (x + k_kappa * x_sq * x);
    const C t = std::tanh(inner);
    const C left = C(0.5) * x;
    const C right = C(1) + t;
    const C left_derivative = C(0.5) * right;
    const C right_derivative = (C(1) - t * t) * k_beta * (C(1) + C(3) * k_kappa * x_sq);
    return g * (left_derivative + left * right_derivative);
  }
  const C cdf = C(0.5) * (C(1) + std::erf(x * static_cast<C>(M_SQRT1_2)));
  const C pdf = std::exp(C(-0.5) * x * x) * static_cast<C>(M_2_SQRTPI * M_SQRT1_2 * 0.5);
  return g * (cdf + x * pdf);
}

template <class C>
inline C nan_max(C x, C y) {
  if (x != x) return x;
  if (y != y) return y;
  return x > y ? x : y;
}
template <class C>
inline C nan_min(C x, C y) {
  if (x != x) return x;
  if (y != y) return y;
  return x < y ? x : y;
}

template <class C>
inline C pow_const(C x, C e) {
  if (e == C(2)) return x * x;
  if (e == C(3)) return x * x * x;
  if (e == C(1)) return x;
  if (e == C(0.5)) return std::sqrt(x);
  if (e == C(-1)) return C(1) / x;
  if (e == C(-2)) return C(1) / (x * x);
  if (e == C(-0.5)) return C(1) / std::sqrt(x);
  return std::pow(x, e);
}

template <class C>
void exec(const Instr& in, C* regs, int64_t n) {
  C* d = regs + in.dst * kTile;
  const C* a = in.a >= 0 ? regs + in.a * kTile : nullptr;
  const C* b = in.b >= 0 ? regs + in.b * kTile : nullptr;
  const C* c = in.c >= 0 ? regs + in.c * kTile : nullptr;
  const C k0 = static_cast<C>(in.imm[0]), k1 = static_cast<C>(in.imm[1]);
#define FLEMU_UNARY(expr)                 \
  for (int64_t i = 0; i < n; ++i) {       \
    const C x = a[i];                     \
    d[i] = (expr);                        \
  }                                       \
  return;
#define FLEMU_BINARY(expr)                \
  for (int64_t i = 0; i < n; ++i) {       \
    const C x = a[i], y = b[i];           \
    d[i] = (expr);                        \
  }                                       \
  return;
#define FLEMU_TERNARY(expr)               \
  for (int64_t i = 0; i < n; ++i) {       \
    const C x = a[i], y = b[i], z = c[i]; \
    d[i] = (expr);                        \
  }                                       \
  return;
  switch (in.op) {
    case OpCode::Copy: FLEMU_UNARY(x)
    case OpCode::Add:
      if (k0 == C(1)) { FLEMU_BINARY(x + y) }
      FLEMU_BINARY(x + k0 * y)
    case OpCode::Sub:
      if (k0 == C(1)) { FLEMU_BINARY(x - y) }
      FLEMU_BINARY(x - k0 * y)
    case OpCode::Mul: FLEMU_BINARY(x * y)
    case OpCode::Div: FLEMU_BINARY(x / y)
    case OpCode::AddConst: FLEMU_UNARY(x + k0)
    case OpCode::MulConst: FLEMU_UNARY(x * k0)
    case OpCode::DivConst: FLEMU_UNARY(x / k0)
    case OpCode::RSubConst: FLEMU_UNARY(k0 - k1 * x)
    case OpCode::Neg: FLEMU_UNARY(-x)
    case OpCode::Relu: FLEMU_UNARY((x > C(0) || x != x) ? x : C(0))
    case OpCode::Abs: FLEMU_UNARY(std::abs(x))
    case OpCode::Exp: FLEMU_UNARY(std::exp(x))
    case OpCode::Exp2: FLEMU_UNARY(std::exp2(x))
    case OpCode::Log: FLEMU_UNARY(std::log(x))
    case OpCode::Log2: FLEMU_UNARY(std::log2(x))
    case OpCode::Log1p: FLEMU_UNARY(std::log1p(x))
    case OpCode::Expm1: FLEMU_UNARY(std::expm1(x))
    case OpCode::Sqrt: FLEMU_UNARY(std::sqrt(x))
    case OpCode::Rsqrt: FLEMU_UNARY(C(1) / std::sqrt(x))
    case OpCode::Reciprocal: FLEMU_UNARY(C(1) / x)
    case OpCode::Sigmoid: FLEMU_UNARY(C(1) / (C(1) + std::exp(-x)))
    case OpCode::Tanh: FLEMU_UNARY(std::tanh(x))
    case OpCode::Sin: FLEMU_UNARY(std::sin(x))
    case OpCode::Cos: FLEMU_UNARY(std::cos(x))
    case OpCode::Erf: FLEMU_UNARY(std::erf(x))
    case OpCode::Floor: FLEMU_UNARY(std::floor(x))
    case OpCode::Ceil: FLEMU_UNARY(std::ceil(x))
    case OpCode::Trunc: FLEMU_UNARY(std::trunc(x))
    case OpCode::Round: FLEMU_UNARY(std::nearbyint(x))
    case OpCode::Sign: FLEMU_UNARY(static_cast<C>((C(0) < x) - (x < C(0))))
    case OpCode::Silu: FLEMU_UNARY(x / (C(1) + std::exp(-x)))
    case OpCode::PowConst: FLEMU_UNARY(pow_const(x, k0))
    case OpCode::Pow: FLEMU_BINARY(std::pow(x, y))
    case OpCode::RPowConst: FLEMU_UNARY(std::pow(k0, x))
    case OpCode::Maximum: FLEMU_BINARY(nan_max(x, y))
    case OpCode::Minimum: FLEMU_BINARY(nan_min(x, y))
    case OpCode::Clamp: {
      const int flags = static_cast<int>(in.imm[2]);
      if (flags == 3) { FLEMU_UNARY(x != x ? x : std::min(std::max(x, k0), k1)) }
      if (flags == 1) { FLEMU_UNARY(x != x ? x : std::max(x, k0)) }
      if (flags == 2) { FLEMU_UNARY(x != x ? x : std::min(x, k1)) }
      FLEMU_UNARY(x)
    }
    case OpCode::LeakyRelu: FLEMU_UNARY(x > C(0) ? x : x * k0)
    case OpCode::Gelu:
      if (in.imm[0] != 0.0) { FLEMU_UNARY(gelu(x, true)) }
      FLEMU_UNARY(gelu(x, false))
    case OpCode::GeluBackward:
      if (in.imm[0] != 0.0) { FLEMU_BINARY(gelu_backward(x, y, true)) }
      FLEMU_BINARY(gelu_backward(x, y, false))
    case OpCode::SiluBackward: {
      for (int64_t i = 0; i < n; ++i) {
        const C g = a[i], x = b[i];
        const C s = C(1) / (C(1) + std::exp(-x));
        d[i] = g * s * (C(1) + x * (C(1) - s));
      }
      return;
    }
    case OpCode::SigmoidBackward: FLEMU_BINARY(x * (C(1) - y) * y)
    case OpCode::TanhBackward: FLEMU_BINARY(x * (C(1) - y * y))
    case OpCode::ThresholdBackward: FLEMU_BINARY(y <= k0 ? C(0) : x)
    case OpCode::Threshold: FLEMU_UNARY(x <= k0 ? k1 : x)
    case OpCode::Where: FLEMU_TERNARY(x != C(0) ? y : z)
    case OpCode::MaskedFill: FLEMU_BINARY(y != C(0) ? k0 : x)
    case OpCode::Gt: FLEMU_BINARY(x > y ? C(1) : C(0))
    case OpCode::Ge: FLEMU_BINARY(x >= y ? C(1) : C(0))
    case OpCode::Lt: FLEMU_BINARY(x < y ? C(1) : C(0))
    case OpCode::Le: FLEMU_BINARY(x <= y ? C(1) : C(0))
    case OpCode::Eq: FLEMU_BINARY(x == y ? C(1) : C(0))
    case OpCode::Ne: FLEMU_BINARY(x != y ? C(1) : C(0))
    case OpCode::GtConst: FLEMU_UNARY(x > k0 ? C(1) : C(0))
    case OpCode::GeConst: FLEMU_UNARY(x >= k0 ? C(1) : C(0))
    case OpCode::LtConst: FLEMU_UNARY(x < k0 ? C(1) : C(0))
    case OpCode::LeConst: FLEMU_UNARY(x <= k0 ? C(1) : C(0))
    case OpCode::EqConst: FLEMU_UNARY(x == k0 ? C(1) : C(0))
    case OpCode::NeConst: FLEMU_UNARY(x != k0 ? C(1) : C(0))
    case OpCode::LogicalNot: FLEMU_UNARY(x == C(0) ? C(1) : C(0))
    case OpCode::LogicalAnd: FLEMU_BINARY((x != C(0) && y != C(0)) ? C(1) : C(0))
    case OpCode::LogicalOr: FLEMU_BINARY((x != C(0) || y != C(0)) ? C(1) : C(0))
    case OpCode::Addcmul: FLEMU_TERNARY(x + k0 * y * z)
    case OpCode::Addcdiv: FLEMU_TERNARY(x + k0 * y / z)
    case OpCode::Lerp:
      if (std::abs(k0) < C(0.5)) { FLEMU_BINARY(x + k0 * (y - x)) }
      FLEMU_BINARY(y - (y - x) * (C(1) - k0))
    case OpCode::RoundTo: {
      const int32_t dtype = static_cast<int32_t>(in.imm[0]);
      FLEMU_UNARY(round_to(x, dtype))
    }
  }
#undef FLEMU_UNARY
#undef FLEMU_BINARY
#undef FLEMU_TERNARY
}

// Calls f(tile_offset, len, idx) for the runs along the innermost loop dim
// that cover elements [begin, begin + n); idx is the loop index of each run.
template <class F>
void for_each_segment(const Program& p, int64_t begin, int64_t n, F&& f) {
  int64_t idx[kMaxFusedDims];
  int64_t rem = begin;
  for (int32_t d = p.ndim - 1; d >= 0; --d) {
    idx[d] = rem % p.sizes[d];
    rem /= p.sizes[d];
  }
  const int32_t inner = p.ndim - 1;
  int64_t done = 0;
  while (done < n) {
    const int64_t len = std::min(n - done, p.sizes[inner] - idx[inner]);
    f(done, len, idx);
    done += len;
    idx[inner] += len;
    for (int32_t d = inner; d > 0 && idx[d] >= p.sizes[d]; --d) {
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

inline int64_t offset_of(const Operand& op, const int64_t* idx, int32_t ndim) {
  int64_t off = 0;
  for (int32_t d = 0; d < ndim; ++d) off += idx[d] * op.strides[d];
  return off;
}

template <class C>
struct Runner {
  const Program& p;
  char* const* in_ptrs;
  char* const* out_ptrs;
  std::vector<LoadFn> loads;
  std::vector<StoreFn> stores;

  Runner(const Program& prog, char* const* ins, char* const* outs) : p(prog), in_ptrs(ins), out_ptrs(outs) {
    for (const Operand& op : p.inputs) loads.push_back(loader<C>(op.dtype));
    for (const Operand& op : p.outputs) stores.push_back(storer<C>(op.dtype));
  }

  void run_range(int64_t begin, int64_t end, C* regs) const {
    const int32_t inner = p.ndim - 1;
    for (int64_t t = begin; t < end; t += kTile) {
      const int64_t n = std::min(kTile, end - t);
      for_each_segment(p, t, n, [&](int64_t at, int64_t len, const int64_t* idx) {
        for (size_t k = 0; k < p.inputs.size(); ++k) {
          const Operand& op = p.inputs[k];
          const char* src = in_ptrs[k] + offset_of(op, idx, p.ndim) * op.itemsize;
          loads[k](src, op.strides[inner], len, regs + op.reg * kTile + at);
        }
      });
      for (const Instr& in : p.code) exec<C>(in, regs, n);
      for_each_segment(p, t, n, [&](int64_t at, int64_t len, const int64_t* idx) {
        for (size_t k = 0; k < p.outputs.size(); ++k) {
          const Operand& op = p.outputs[k];
          char* dst = out_ptrs[k] + offset_of(op, idx, p.ndim) * op.itemsize;
          stores[k](dst, op.strides[inner], len, regs + op.reg * kTile + at);
        }
      });
    }
  }

  void run() const {
    const size_t reg_elems = static_cast<size_t>(p.num_regs) * kTile;
    if (p.numel < 2 * kParallelGrain) {
      std::vector<C> regs(reg_elems);
      run_range(0, p.numel, regs.data());
      return;
    }
    ThreadPool& pool = ThreadPool::instance();
    // Chunks are whole tiles so every chunk but the last runs full tiles.
    const int64_t tiles = (p.numel + kTile - 1) / kTile;
    const int64_t chunks = std::min<int64_t>(p.numel / kParallelGrain, 4 * pool.parallelism());
    const int64_t per = (tiles + chunks - 1) / chunks * kTile;
    pool.parallel_for(chunks, [&](int64_t c) {
      std::vector<C> regs(reg_elems);
      run_range(c * per, std::min(p.numel, (c + 1) * per), regs.data());
    });
  }
};

}  // namespace

void run_program(const Program& program, char* const* inputs, char* const* outputs) {
  if (program.numel == 0) return;
  if (program.double_compute) Runner<double>(program, inputs, outputs).run();
  else Runner<float>(program, inputs, outputs).run();
}

}  // namespace flemu::graph
