// Normalization: batch norm (training with running-stat update, eval with
// running stats; the native_batch_norm, _native_batch_norm_legit*,
// _batch_norm_with_update/_no_update and batch_norm_backward entry points),
// group norm and layer norm, each with its backward.
//
// Statistics accumulate in double (float partial sums over short vector
// lanes first); the elementwise passes compute in float (double for
// float64). Per-channel parameters may have another floating dtype than the
// input (bfloat16 activations with float32 weights).
#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>
#include <vector>

#include "support/nn_common.h"
#include "support/registry.h"

namespace flemu {
namespace {

// Sums over runs of elements. Each of K sums keeps kLanes float (double for
// float64) partial sums, lane j taking elements j, j + kLanes, ... of a run;
// the elements past a run's last full group of 8 go to a double total. The
// lanes fold pairwise into the total after every kFlushElems elements (in the
// middle of a long run, or after many short ones: a 4x4 feature map) and at
// the end, so no lane adds more than about kFlushElems / 8 terms. The order
// is fixed in the source, so every instruction-set build (isa.h) gives the
// same bits; 32 lanes keep several vector additions in flight.
constexpr int kLanes = 32;
constexpr int64_t kFlushElems = 4096;

// 8 lanes of C as one vector value: a local of this type lives in a
// register across LaneSums' loops (an array of scalars went through memory).
template <class C>
struct Lanes8;
template <>
struct Lanes8<float> {
  typedef float type __attribute__((vector_size(32)));
};
template <>
struct Lanes8<double> {
  typedef double type __attribute__((vector_size(64)));
};

template <class C, int K>
struct LaneSums {
  using V = typename Lanes8<C>::type;
  static constexpr int kGroups = kLanes / 8;
  V lane[K][kGroups] = {};
  double total[K] = {};
  int64_t pending = 0;

  // Adds term(C{}, i) (an std::array<C, K>) for i in [0, n); the elements
  // past the last group of 8 as term(0.0, i), computed in double.
  template <class Term>
  [[gnu::always_inline]] void add(int64_t n, Term&& term) {
    V acc[K][kGroups];
    for (int k = 0; k < K; ++k)
      for (int g = 0; g < kGroups; ++g) acc[k][g] = lane[k][g];
    int64_t i = 0;
    while (i + kLanes <= n) {
      // Groups of kLanes up to the next fold.
      const int64_t room = std::max<int64_t>(kLanes, (kFlushElems - pending) / kLanes * kLanes);
      const int64_t end = i + std::min<int64_t>((n - i) / kLanes * kLanes, room);
      pending += end - i;
      for (; i < end; i += kLanes) {
#pragma GCC unroll 4
        for (int g = 0; g < kGroups; ++g) add_group(acc, g, term, i + 8 * g);
      }
      if (pending >= kFlushElems) fold(acc);
    }
    const int64_t groups_end = i + (n - i) / 8 * 8;
    pending += groups_end - i;
    for (; i < groups_end; i += 8) add_group(acc, 0, term, i);
    for (; i < n; ++i) {
      const std::array<double, K> t = term(0.0, i);
      for (int k = 0; k < K; ++k) total[k] += t[static_cast<size_t>(k)];
    }
    if (pending >= kFlushElems) fold(acc);
    for (int k = 0; k < K; ++k)
      for (int g = 0; g < kGroups; ++g) lane[k][g] = acc[k][g];
  }

  // acc[k][g] += the terms of elements i..i+7.
  template <class Term>
  [[gnu::always_inline]] static void add_group(V (&acc)[K][kGroups], int g, Term& term, int64_t i) {
    V t[K];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const std::array<C, K> e = term(C{}, i + j);
      for (int k = 0; k < K; ++k) t[k][j] = e[static_cast<size_t>(k)];
    }
    for (int k = 0; k < K; ++k) acc[k][g] += t[k];
  }

  // The lanes fold pairwise (lane j += lane j + w, w = 16, 8, ..., 1) into
  // the totals, and restart from 0.
  [[gnu::always_inline]] void fold(V (&acc)[K][kGroups]) {
    for (int k = 0; k < K; ++k) {
      V* l = acc[k];
      for (int w = kGroups / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; ++j) l[j] += l[j + w];
      C s[8];
      for (int j = 0; j < 8; ++j) s[j] = l[0][j];
      for (int w = 4; w >= 1; w /= 2)
        for (int j = 0; j < w; ++j) s[j] += s[j + w];
      total[k] += static_cast<double>(s[0]);
      for (int g = 0; g < kGroups; ++g) l[g] = V{};
    }
    pending = 0;
  }

  // The K sums; the accumulator is empty afterwards.
  [[gnu::always_inline]] std::array<double, K> take() {
    fold(lane);
    std::array<double, K> out;
    for (int k = 0; k < K; ++k) {
      out[static_cast<size_t>(k)] = total[k];
      total[k] = 0.0;
    }
    return out;
  }
};

// A constant as U: the double for the double tail, else its compute-type copy.
template <class U, class C>
[[gnu::always_inline]] inline U as_u(double exact, C rounded) {
  if constexpr (std::is_same_v<U, double>) return exact;
  else return static_cast<U>(rounded);
}

// Element i of a strided run, as U (the compute type or double). The stride
// is an int64_t, or a std::integral_constant for a dense run, so that its
// loops vectorize.
template <class T, class U, class Stride>
[[gnu::always_inline]] inline U elem(const char* p, Stride stride_bytes, int64_t i) {
  return static_cast<U>(to_compute(*reinterpret_cast<const T*>(p + i * static_cast<int64_t>(stride_bytes))));
}

// f(stride): with the stride as a compile-time constant when the run is dense.
template <class T, class F>
[[gnu::always_inline]] inline void with_stride(int64_t stride_bytes, F&& f) {
  if (stride_bytes == static_cast<int64_t>(sizeof(T))) f(std::integral_constant<int64_t, sizeof(T)>{});
  else f(stride_bytes);
}

// Adds x to sum[0].
template <class T>
[[gnu::always_inline]] inline void add_run(LaneSums<acc_t<T>, 1>& sum, const char* p, int64_t stride_bytes, int64_t n) {
  with_stride<T>(stride_bytes, [&](auto st) __attribute__((always_inline)) {
    sum.add(n, [&](auto u, int64_t i) __attribute__((always_inline)) {
      using U = decltype(u);
      return std::array<U, 1>{elem<T, U>(p, st, i)};
    });
  });
}

// Adds (x - mean)^2 to sum[0].
template <class T>
[[gnu::always_inline]] inline void add_sq_dev_run(LaneSums<acc_t<T>, 1>& sum, const char* p, int64_t stride_bytes,
                                                  int64_t n, double mean) {
  const acc_t<T> m = static_cast<acc_t<T>>(mean);
  with_stride<T>(stride_bytes, [&](auto st) __attribute__((always_inline)) {
    sum.add(n, [&](auto u, int64_t i) __attribute__((always_inline)) {
      using U = decltype(u);
      const U d = elem<T, U>(p, st, i) - as_u<U>(mean, m);
      return std::array<U, 1>{d * d};
    });
  });
}

// Adds dy to sum[0] and dy * (x - mean) to sum[1], over runs of both.
template <class T>
[[gnu::always_inline]] inline void add_grad_run(LaneSums<acc_t<T>, 2>& sum, const char* dy, int64_t dys, const char* x,
                                                int64_t xs, int64_t n, double mean) {
  const acc_t<T> m = static_cast<acc_t<T>>(mean);
  const auto run = [&](auto dst, auto xst) __attribute__((always_inline)) {
    sum.add(n, [&](auto u, int64_t i) __attribute__((always_inline)) {
      using U = decltype(u);
      const U g = elem<T, U>(dy, dst, i);
      return std::array<U, 2>{g, g * (elem<T, U>(x, xst, i) - as_u<U>(mean, m))};
    });
  };
  if (dys == static_cast<int64_t>(sizeof(T)) && xs == static_cast<int64_t>(sizeof(T)))
    run(std::integral_constant<int64_t, sizeof(T)>{}, std::integral_constant<int64_t, sizeof(T)>{});
  else
    run(dys, xs);
}

// The sum of one contiguous run, and of its squared deviations from mean.
template <class T>
[[gnu::always_inline]] inline double sum_of(const T* x, int64_t n) {
  LaneSums<acc_t<T>, 1> sum;
  add_run<T>(sum, reinterpret_cast<const char*>(x), sizeof(T), n);
  return sum.take()[0];
}

template <class T>
[[gnu::always_inline]] inline double sq_dev_of(const T* x, int64_t n, double mean) {
  LaneSums<acc_t<T>, 1> sum;
  add_sq_dev_run<T>(sum, reinterpret_cast<const char*>(x), sizeof(T), n, mean);
  return sum.take()[0];
}

// ---------------------------------------------------------------------------
// (N, C, rest...) views for batch norm: per (n, c), the rest dims merged
// into as few strided runs as possible.
// ---------------------------------------------------------------------------

struct ChannelView {
  char* data = nullptr;
  int32_t dtype = 0;
  int64_t item = 0;
  int64_t N = 1, C = 1;
  int64_t sn = 0, sc = 0;  // bytes
  int32_t rdim = 0;        // merged rest dims, the last is the run
  int64_t rsize[kMaxLoopDims] = {};
  int64_t rstride[kMaxLoopDims] = {};  // bytes
  int64_t rest = 1;                    // elements per (n, c)

  template <class F>
  [[gnu::always_inline]] void for_runs(int64_t n, int64_t c, F&& f) const {
    const char* base = data + n * sn + c * sc;
    if (rdim == 0) {
      f(base, item, int64_t{1});
      return;
    }
    const int32_t inner = rdim - 1;
    int64_t idx[kMaxLoopDims] = {};
    for (;;) {
      const char* p = base;
      for (int32_t d = 0; d < inner; ++d) p += idx[d] * rstride[d];
      f(p, rstride[inner], rsize[inner]);
      int32_t d = inner - 1;
      for (; d >= 0; --d) {
        if (++idx[d] < rsize[d]) break;
        idx[d] = 0;
      }
      if (d < 0) return;
    }
  }
};

ChannelView channel_view(const TensorArg& t, const char* what) {
  if (t.ndim < 2) invalid_argument(what, " must have at least 2 dims (N, C, ...), got ", t.ndim);
  if (t.ndim - 2 > kMaxLoopDims)
    fail(TFL_ERR_UNIMPLEMENTED, cat(what, " has ", t.ndim, " dims; batch norm takes at most ", kMaxLoopDims + 2));
  ChannelView v;
  v.data = t.data;
  v.dtype = t.dtype;
  v.item = t.itemsize;
  v.N = t.sizes[0];
  v.C = t.sizes[1];
  v.sn = t.strides[0] * v.item;
  v.sc = t.strides[1] * v.item;
  for (int32_t d = 2; d < t.ndim; ++d) {
    v.rest *= t.sizes[d];
    if (t.sizes[d] == 1) continue;
    const int64_t st = t.strides[d] * v.item;
    if (v.rdim > 0 && v.rstride[v.rdim - 1] == st * t.sizes[d]) {
      v.rsize[v.rdim - 1] *= t.sizes[d];
      v.rstride[v.rdim - 1] = st;
    } else {
      v.rsize[v.rdim] = t.sizes[d];
      v.rstride[v.rdim] = st;
      ++v.rdim;
    }
  }
  return v;
}

// A 1-d per-channel tensor read and written as double.
struct Vec1 {
  char* data = nullptr;
  int32_t dtype = 0;
  int64_t stride = 0;  // bytes
  int64_t size = 0;
  bool present = false;
  double get(int64_t i) const { return loader_f64(dtype)(data + i * stride); }
  void set(int64_t i, double v) const { storer_f64(dtype)(data + i * stride, v); }
};

Vec1 vec1(const TensorArg& t, int64_t size, const char* what) {
  if (!dtype_is_floating(t.dtype)) invalid_argument(what, " must be floating, got ", dtype_name(t.dtype));
  if (t.numel != size) invalid_argument(what, " has ", t.numel, " elements; expected ", size, " (one per channel)");
  Vec1 v;
  v.data = t.data;
  v.dtype = t.dtype;
  v.size = size;
  int64_t st = 0;
  for (int32_t d = 0; d < t.ndim; ++d)
    if (t.sizes[d] != 1) st = t.strides[d];
  v.stride = st * t.itemsize;
  v.present = true;
  return v;
}

Vec1 optional_vec1(const Launch& L, size_t i, int64_t size, const char* what) {
  TensorArg t;
  if (!optional_tensor(L, i, what, &t)) return Vec1{};
  return vec1(t, size, what);
}

Vec1 optional_out_vec1(const Launch& L, size_t i, int64_t size, const char* what) {
  TensorArg t;
  if (!optional_output(L, i, what, &t) || t.numel == 0) return Vec1{};
  return vec1(t, size, what);
}

// ---------------------------------------------------------------------------
// batch norm
// ---------------------------------------------------------------------------

struct BatchNormJob {
  ChannelView x, y;
  Vec1 weight, bias, running_mean, running_var, save_mean, save_invstd;
  bool use_batch_stats = true;  // training (or no running stats)
  bool update_running = false;
  double momentum = 0.1, eps = 1e-5;
};

// One channel of batch norm: its statistics (batch or running), the running
// stats' update, and y = (x - mean) * alpha + beta.
template <class T>
[[gnu::always_inline]] inline void batch_norm_channel(const BatchNormJob& j, int64_t c, bool same_layout) {
  using Cp = acc_t<T>;
  const int64_t count = j.x.N * j.x.rest;
  double mean, invstd;
  if (j.use_batch_stats) {
    LaneSums<Cp, 1> sum;
    for (int64_t n = 0; n < j.x.N; ++n)
      j.x.for_runs(n, c, [&](const char* p, int64_t st, int64_t len)
                             __attribute__((always_inline)) { add_run<T>(sum, p, st, len); });
    mean = count > 0 ? sum.take()[0] / static_cast<double>(count) : 0.0;
    for (int64_t n = 0; n < j.x.N; ++n)
      j.x.for_runs(n, c, [&](const char* p, int64_t st, int64_t len) __attribute__((always_inline)) {
        add_sq_dev_run<T>(sum, p, st, len, mean);
      });
    const double sq = sum.take()[0];
    const double var = count > 0 ? sq / static_cast<double>(count) : 0.0;
    invstd = 1.0 / std::sqrt(var + j.eps);
    if (j.update_running) {
      const double unbiased = count > 1 ? sq / static_cast<double>(count - 1) : var;
      if (j.running_mean.present)
        j.running_mean.set(c, (1.0 - j.momentum) * j.running_mean.get(c) + j.momentum * mean);
      if (j.running_var.present)
        j.running_var.set(c, (1.0 - j.momentum) * j.running_var.get(c) + j.momentum * unbiased);
    }
  } else {
    mean = j.running_mean.get(c);
    invstd = 1.0 / std::sqrt(j.running_var.get(c) + j.eps);
  }
  if (j.save_mean.present) j.save_mean.set(c, mean);
  if (j.save_invstd.present) j.save_invstd.set(c, invstd);
  const double w = j.weight.present ? j.weight.get(c) : 1.0;
  const double b = j.bias.present ? j.bias.get(c) : 0.0;
  // y = (x - mean) * alpha + beta; centring first keeps a large mean from cancelling.
  const Cp alpha = static_cast<Cp>(invstd * w);
  const Cp beta = static_cast<Cp>(b);
  const Cp mu = static_cast<Cp>(mean);
  for (int64_t n = 0; n < j.x.N; ++n) {
    const char* xbase = j.x.data + n * j.x.sn + c * j.x.sc;
    char* ybase = j.y.data + n * j.y.sn + c * j.y.sc;
    if (same_layout) {
      // Runs of x and y line up.
      j.x.for_runs(n, c, [&](const char* p, int64_t st, int64_t len) __attribute__((always_inline)) {
        char* q = ybase + (p - xbase);
        if (st == static_cast<int64_t>(sizeof(T))) {
          const T* xi = reinterpret_cast<const T*>(p);
          T* yo = reinterpret_cast<T*>(q);
          for (int64_t i = 0; i < len; ++i) yo[i] = convert<T>((static_cast<Cp>(to_compute(xi[i])) - mu) * alpha + beta);
        } else {
          for (int64_t i = 0; i < len; ++i, p += st, q += st)
            *reinterpret_cast<T*>(q) =
                convert<T>((static_cast<Cp>(to_compute(*reinterpret_cast<const T*>(p))) - mu) * alpha + beta);
        }
      });
      continue;
    }
    // Otherwise walk y with its own view.
    int64_t k = 0;
    std::vector<Cp> vals(static_cast<size_t>(j.x.rest));
    j.x.for_runs(n, c, [&](const char* p, int64_t st, int64_t len) {
      for (int64_t i = 0; i < len; ++i, p += st)
        vals[static_cast<size_t>(k++)] = (static_cast<Cp>(to_compute(*reinterpret_cast<const T*>(p))) - mu) * alpha + beta;
    });
    k = 0;
    j.y.for_runs(n, c, [&](const char* p, int64_t st, int64_t len) {
      char* q = const_cast<char*>(p);
      for (int64_t i = 0; i < len; ++i, q += st) *reinterpret_cast<T*>(q) = convert<T>(vals[static_cast<size_t>(k++)]);
    });
  }
}

// Batch norm walks each element 2-3 times (sums, then output), in runs as
// short as a 4x4 feature map: a chunk of channels pays for waking the pool
// at about a quarter of grain_for's elements.
int64_t batch_norm_grain(const ChannelView& x) { return grain_for(4 * x.N * x.rest); }

template <class T>
void run_batch_norm(const BatchNormJob& j) {
  const bool same_layout = j.x.rdim == j.y.rdim && std::equal(j.x.rsize, j.x.rsize + j.x.rdim, j.y.rsize) &&
                           std::equal(j.x.rstride, j.x.rstride + j.x.rdim, j.y.rstride);
  parallel_chunks(j.x.C, batch_norm_grain(j.x), [&](int64_t c0, int64_t c1) {
    with_isa([&]() __attribute__((always_inline)) {
      for (int64_t c = c0; c < c1; ++c) batch_norm_channel<T>(j, c, same_layout);
    });
  });
}

struct BatchNormBackwardJob {
  ChannelView dy, x, dx;
  bool has_dx = false;
  Vec1 weight, mean_src, var_src;  // mean_src/var_src: save_mean/save_invstd (train) or running stats (eval)
  bool train = true;
  double eps = 1e-5;
  Vec1 grad_weight, grad_bias;
};

// One channel of batch norm's backward: the sums of dy and dy * (x - mean),
// the parameter gradients, and dx. dy_lockstep/dx_lockstep: dy (and dx)
// have x's runs within each (n, c) slab, so they are walked in lock step.
template <class T>
[[gnu::always_inline]] inline void batch_norm_backward_channel(const BatchNormBackwardJob& j, int64_t c,
                                                               bool dy_lockstep, bool dx_lockstep) {
  using Cp = acc_t<T>;
  const int64_t count = j.x.N * j.x.rest;
  const double mean = j.mean_src.get(c);
  const double invstd = j.train ? j.var_src.get(c) : 1.0 / std::sqrt(j.var_src.get(c) + j.eps);
  LaneSums<Cp, 2> sums;
  double sum_dy = 0.0, sum_dy_xmu = 0.0;
  for (int64_t n = 0; n < j.x.N; ++n) {
    if (dy_lockstep) {
      const char* dyb = j.dy.data + n * j.dy.sn + c * j.dy.sc;
      const char* xb = j.x.data + n * j.x.sn + c * j.x.sc;
      j.x.for_runs(n, c, [&](const char* p, int64_t st, int64_t len) __attribute__((always_inline)) {
        add_grad_run<T>(sums, dyb + (p - xb), st, p, st, len, mean);
      });
      continue;
    }
    std::vector<double> xs;
    xs.reserve(static_cast<size_t>(j.x.rest));
    j.x.for_runs(n, c, [&](const char* p, int64_t st, int64_t len) {
      for (int64_t i = 0; i < len; ++i, p += st) xs.push_back(static_cast<double>(to_compute(*reinterpret_cast<const T*>(p))));
    });
    size_t k = 0;
    j.dy.for_runs(n, c, [&](const char* p, int64_t st, int64_t len) {
      for (int64_t i = 0; i < len; ++i, p += st) {
        const double g = static_cast<double>(to_compute(*reinterpret_cast<const T*>(p)));
        sum_dy += g;
        sum_dy_xmu += g * (xs[k++] - mean);
      }
    });
  }
  const std::array<double, 2> lanes = sums.take();
  sum_dy += lanes[0];
  sum_dy_xmu += lanes[1];
  if (j.grad_weight.present) j.grad_weight.set(c, sum_dy_xmu * invstd);
  if (j.grad_bias.present) j.grad_bias.set(c, sum_dy);
  if (!j.has_dx) return;
  const double w = j.weight.present ? j.weight.get(c) : 1.0;
  // train: dx = w*invstd*(dy - mean(dy) - (x-mean)*invstd^2*mean(dy*(x-mean)))
  // eval:  dx = w*invstd*dy
  // As dx = a*(dy - d) + b*(x - mean): centred terms, no cancellation of large ones.
  const Cp a = static_cast<Cp>(w * invstd), mu = static_cast<Cp>(mean);
  Cp b = Cp(0), d = Cp(0);
  if (j.train && count > 0) {
    const double k2 = sum_dy_xmu / static_cast<double>(count) * invstd * invstd;
    b = static_cast<Cp>(-w * invstd * k2);
    d = static_cast<Cp>(sum_dy / static_cast<double>(count));
  }
  for (int64_t n = 0; n < j.x.N; ++n) {
    if (dx_lockstep) {
      const char* xb = j.x.data + n * j.x.sn + c * j.x.sc;
      const char* dyb = j.dy.data + n * j.dy.sn + c * j.dy.sc;
      char* dxb = j.dx.data + n * j.dx.sn + c * j.dx.sc;
      j.x.for_runs(n, c, [&](const char* p, int64_t st, int64_t len) __attribute__((always_inline)) {
        const T* xv = reinterpret_cast<const T*>(p);
        const T* g = reinterpret_cast<const T*>(dyb + (p - xb));
        T* out = reinterpret_cast<T*>(dxb + (p - xb));
        const auto at = [&](int64_t e) __attribute__((always_inline)) {
          out[e] = convert<T>(a * (static_cast<Cp>(to_compute(g[e])) - d) + b * (static_cast<Cp>(to_compute(xv[e])) - mu));
        };
        const int64_t step = st / static_cast<int64_t>(sizeof(T));
        if (step == 1)
          for (int64_t i = 0; i < len; ++i) at(i);
        else
          for (int64_t i = 0; i < len; ++i) at(i * step);
      });
      continue;
    }
    std::vector<Cp> g(static_cast<size_t>(j.x.rest)), xv(static_cast<size_t>(j.x.rest));
    size_t k = 0;
    j.dy.for_runs(n, c, [&](const char* p, int64_t st, int64_t len) {
      for (int64_t i = 0; i < len; ++i, p += st) g[k++] = static_cast<Cp>(to_compute(*reinterpret_cast<const T*>(p)));
    });
    k = 0;
    j.x.for_runs(n, c, [&](const char* p, int64_t st, int64_t len) {
      for (int64_t i = 0; i < len; ++i, p += st) xv[k++] = static_cast<Cp>(to_compute(*reinterpret_cast<const T*>(p)));
    });
    k = 0;
    j.dx.for_runs(n, c, [&](const char* p, int64_t st, int64_t len) {
      char* q = const_cast<char*>(p);
      for (int64_t i = 0; i < len; ++i, q += st, ++k) *reinterpret_cast<T*>(q) = convert<T>(a * (g[k] - d) + b * (xv[k] - mu));
    });
  }
}

template <class T>
void run_batch_norm_backward(const BatchNormBackwardJob& j) {
  const auto same_runs = [&](const ChannelView& v) {
    return v.rdim == j.x.rdim && std::equal(v.rstride, v.rstride + v.rdim, j.x.rstride);
  };
  const bool dy_lockstep = same_runs(j.dy), dx_lockstep = dy_lockstep && j.has_dx && same_runs(j.dx);
  parallel_chunks(j.x.C, batch_norm_grain(j.x), [&](int64_t c0, int64_t c1) {
    with_isa([&]() __attribute__((always_inline)) {
      for (int64_t c = c0; c < c1; ++c) batch_norm_backward_channel<T>(j, c, dy_lockstep, dx_lockstep);
    });
  });
}

void require_floating(const TensorArg& t, const char* what) {
  if (!dtype_is_floating(t.dtype)) invalid_argument(what, " must be floating, got ", dtype_name(t.dtype));
}

void require_shape_like(const TensorArg& a, const TensorArg& b, const char* an, const char* bn) {
  bool same = a.ndim == b.ndim;
  for (int32_t d = 0; same && d < a.ndim; ++d) same = a.sizes[d] == b.sizes[d];
  if (!same) invalid_argument(an, " must have the shape of ", bn);
}

// The forward of every batch-norm entry point. Arguments by position in the
// caller's schema; `running_writable` says whether the running stats are
// updated (training with stats present).
void launch_batch_norm(const Launch& L, size_t input_i, size_t weight_i, size_t bias_i, int rm_i, int rv_i,
                       bool training, double momentum, double eps, size_t save_mean_o, size_t save_invstd_o) {
  const TensorArg input = L.input_tensor(input_i, "input");
  require_floating(input, "input");
  const TensorArg out = L.output(0, "out");
  require_shape_like(out, input, "out", "input");
  if (out.dtype != input.dtype) invalid_argument("out must have the input's dtype");
  BatchNormJob j;
  j.x = channel_view(input, "input");
  j.y = channel_view(out, "out");
  const int64_t C = j.x.C;
  j.weight = optional_vec1(L, weight_i, C, "weight");
  j.bias = optional_vec1(L, bias_i, C, "bias");
  if (rm_i >= 0) j.running_mean = optional_vec1(L, static_cast<size_t>(rm_i), C, "running_mean");
  if (rv_i >= 0) j.running_var = optional_vec1(L, static_cast<size_t>(rv_i), C, "running_var");
  j.use_batch_stats = training;
  if (!training && !(j.running_mean.present && j.running_var.present))
    invalid_argument("batch norm in eval mode needs running_mean and running_var");
  j.update_running = training && (j.running_mean.present || j.running_var.present);
  j.momentum = momentum;
  j.eps = eps;
  j.save_mean = optional_out_vec1(L, save_mean_o, C, "save_mean");
  j.save_invstd = optional_out_vec1(L, save_invstd_o, C, "save_invstd");
  if (training && input.numel == 0)
    invalid_argument("batch norm in training mode needs at least one value per channel, got input with 0 elements");
  if (C == 0) return;
  dispatch_floating(input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    L.enqueue([j] { run_batch_norm<T>(j); });
  });
}

bool bool_at(const TFL_Value& v, size_t i) { return v.v.bools.data[i] != 0; }

const TFL_Value& mask3(const Launch& L, size_t i) {
  const TFL_Value& v = L.input(i, "output_mask");
  if (v.tag != TFL_VALUE_BOOL_LIST || v.v.bools.size != 3) invalid_argument("output_mask must be a list of 3 bools");
  return v;
}

// The backward of every batch-norm entry point: the statistics come from
// save_mean/save_invstd (train) or the running stats (eval).
void launch_batch_norm_backward(const Launch& L, const TensorArg& grad, const TensorArg& input, int weight_i,
                                int rm_i, int rv_i, int sm_i, int si_i, bool train, double eps, const bool* want) {
  require_floating(input, "input");
  require_floating(grad, "grad_out");
  require_shape_like(grad, input, "grad_out", "input");
  BatchNormBackwardJob j;
  j.dy = channel_view(grad, "grad_out");
  j.x = channel_view(input, "input");
  const int64_t C = j.x.C;
  if (weight_i >= 0) j.weight = optional_vec1(L, static_cast<size_t>(weight_i), C, "weight");
  j.train = train;
  j.eps = eps;
  if (train) {
    j.mean_src = optional_vec1(L, static_cast<size_t>(sm_i), C, "save_mean");
    j.var_src = optional_vec1(L, static_cast<size_t>(si_i), C, "save_invstd");
    if (!j.mean_src.present || !j.var_src.present)
      invalid_argument("batch norm backward in training mode needs save_mean and save_invstd");
  } else {
    j.mean_src = optional_vec1(L, static_cast<size_t>(rm_i), C, "running_mean");
    j.var_src = optional_vec1(L, static_cast<size_t>(rv_i), C, "running_var");
    if (!j.mean_src.present || !j.var_src.present)
      invalid_argument("batch norm backward in eval mode needs running_mean and running_var");
  }
  TensorArg dx;
  if (want[0] && optional_output(L, 0, "grad_input", &dx) && dx.numel > 0) {
    require_shape_like(dx, input, "grad_input", "input");
    j.dx = channel_view(dx, "grad_input");
    j.has_dx = true;
  }
  if (want[1]) j.grad_weight = optional_out_vec1(L, 1, C, "grad_weight");
  if (want[2]) j.grad_bias = optional_out_vec1(L, 2, C, "grad_bias");
  if (C == 0 || (!j.has_dx && !j.grad_weight.present && !j.grad_bias.present)) return;
  dispatch_floating(input.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    L.enqueue([j] { run_batch_norm_backward<T>(j); });
  });
}

// ---------------------------------------------------------------------------
// group norm and layer norm: dense (N, G, D, HxW) and (M, N) layouts
// ---------------------------------------------------------------------------

// The per-channel parameter (gamma or beta) as compute-type values.
template <class Cp>
std::vector<Cp> param_values(const Vec1& v, int64_t n, Cp fallback) {
  std::vector<Cp> out(static_cast<size_t>(n), fallback);
  if (v.present) {
    const LoadF64 load = loader_f64(v.dtype);
    for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<Cp>(load(v.data + i * v.stride));
  }
  return out;
}

struct GroupNormJob {
  const char* x = nullptr;
  char* y = nullptr;
  int64_t N = 0, C = 0, HxW = 0, G = 1;
  Vec1 weight, bias;
  char* mean = nullptr;  // (N, G) dense
  char* rstd = nullptr;
  int32_t stat_dtype = 0;
  double eps = 1e-5;
};

template <class T>
void run_group_norm(const GroupNormJob& j) {
  using Cp = acc_t<T>;
  const std::vector<Cp> gamma = param_values<Cp>(j.weight, j.C, Cp(1));
  const std::vector<Cp> beta = param_values<Cp>(j.bias, j.C, Cp(0));
  const StoreF64 store_stat = storer_f64(j.stat_dtype);
  const int64_t stat_item = dtype_size(j.stat_dtype);
  const int64_t D = j.C / j.G;
  const int64_t group_elems = D * j.HxW;
  parallel_chunks(j.N * j.G, grain_for(group_elems), [&](int64_t b, int64_t e) {
    for (int64_t ng = b; ng < e; ++ng) {
      const int64_t n = ng / j.G, g = ng % j.G;
      const T* xg = reinterpret_cast<const T*>(j.x) + (n * j.C + g * D) * j.HxW;
      T* yg = reinterpret_cast<T*>(j.y) + (n * j.C + g * D) * j.HxW;
      const double mean = group_elems ? sum_of(xg, group_elems) / static_cast<double>(group_elems) : 0.0;
      const double var = group_elems ? sq_dev_of(xg, group_elems, mean) / static_cast<double>(group_elems) : 0.0;
      const double rstd = 1.0 / std::sqrt(var + j.eps);
      store_stat(j.mean + ng * stat_item, mean);
      store_stat(j.rstd + ng * stat_item, rstd);
      for (int64_t d = 0; d < D; ++d) {
        const int64_t c = g * D + d;
        const Cp a = static_cast<Cp>(rstd) * gamma[static_cast<size_t>(c)];
        const Cp bb = beta[static_cast<size_t>(c)], mu = static_cast<Cp>(mean);
        const T* xi = xg + d * j.HxW;
        T* yo = yg + d * j.HxW;
        for (int64_t i = 0; i < j.HxW; ++i) yo[i] = convert<T>((static_cast<Cp>(to_compute(xi[i])) - mu) * a + bb);
      }
    }
  });
}

struct GroupNormBackwardJob {
  const char* dy = nullptr;
  const char* x = nullptr;
  const char* mean = nullptr;
  const char* rstd = nullptr;
  int32_t stat_dtype = 0;
  int64_t N = 0, C = 0, HxW = 0, G = 1;
  Vec1 weight;
  char* dx = nullptr;
  Vec1 grad_weight, grad_bias;
};

template <class T>
void run_group_norm_backward(const GroupNormBackwardJob& j) {
  using Cp = acc_t<T>;
  const std::vector<Cp> gamma = param_values<Cp>(j.weight, j.C, Cp(1));
  const LoadF64 load_stat = loader_f64(j.stat_dtype);
  const int64_t stat_item = dtype_size(j.stat_dtype);
  const int64_t D = j.C / j.G;
  // ds[n, c] = sum dy * x, db[n, c] = sum dy over HxW.
  std::vector<double> ds(static_cast<size_t>(j.N * j.C)), db(static_cast<size_t>(j.N * j.C));
  parallel_chunks(j.N * j.C, std::max<int64_t>(4, grain_for(j.HxW)), [&](int64_t b, int64_t e) {
    for (int64_t nc = b; nc < e; ++nc) {
      const T* g = reinterpret_cast<const T*>(j.dy) + nc * j.HxW;
      const T* v = reinterpret_cast<const T*>(j.x) + nc * j.HxW;
      LaneSums<Cp, 2> sums;
      add_grad_run<T>(sums, reinterpret_cast<const char*>(g), sizeof(T), reinterpret_cast<const char*>(v), sizeof(T),
                      j.HxW, 0.0);
      const std::array<double, 2> s = sums.take();
      ds[static_cast<size_t>(nc)] = s[1];
      db[static_cast<size_t>(nc)] = s[0];
    }
  });
  if (j.dx != nullptr) {
    const double s = 1.0 / static_cast<double>(D * j.HxW);
    parallel_chunks(j.N * j.G, grain_for(D * j.HxW), [&](int64_t b, int64_t e) {
      for (int64_t ng = b; ng < e; ++ng) {
        const int64_t n = ng / j.G, g = ng % j.G;
        const double mean = load_stat(j.mean + ng * stat_item), rstd = load_stat(j.rstd + ng * stat_item);
        double ds_g = 0.0, db_g = 0.0;
        for (int64_t d = 0; d < D; ++d) {
          const int64_t c = g * D + d;
          ds_g += ds[static_cast<size_t>(n * j.C + c)] * gamma[static_cast<size_t>(c)];
          db_g += db[static_cast<size_t>(n * j.C + c)] * gamma[static_cast<size_t>(c)];
        }
        // dx = rstd * (gamma_c * dy - k1 - (x - mean) * k2), with
        // k1 = sum(gamma dy) / M and k2 = rstd^2 * sum(gamma dy (x - mean)) / M: centred
        // terms, so a group of one element gets exactly zero.
        const Cp k1 = static_cast<Cp>(db_g * s);
        const Cp k2 = static_cast<Cp>((ds_g - mean * db_g) * s * rstd * rstd);
        const Cp rs = static_cast<Cp>(rstd), mu = static_cast<Cp>(mean);
        for (int64_t d = 0; d < D; ++d) {
          const int64_t c = g * D + d;
          const Cp gm = gamma[static_cast<size_t>(c)];
          const int64_t off = (n * j.C + c) * j.HxW;
          const T* g_ = reinterpret_cast<const T*>(j.dy) + off;
          const T* x_ = reinterpret_cast<const T*>(j.x) + off;
          T* o = reinterpret_cast<T*>(j.dx) + off;
          for (int64_t i = 0; i < j.HxW; ++i)
            o[i] = convert<T>(rs * (gm * static_cast<Cp>(to_compute(g_[i])) - k1 -
                                    (static_cast<Cp>(to_compute(x_[i])) - mu) * k2));
        }
      }
    });
  }
  if (j.grad_weight.present || j.grad_bias.present) {
    for (int64_t c = 0; c < j.C; ++c) {
      const int64_t g = c / D;
      double gw = 0.0, gb = 0.0;
      for (int64_t n = 0; n < j.N; ++n) {
        const double mean = load_stat(j.mean + (n * j.G + g) * stat_item);
        const double rstd = load_stat(j.rstd + (n * j.G + g) * stat_item);
        gw += (ds[static_cast<size_t>(n * j.C + c)] - db[static_cast<size_t>(n * j.C + c)] * mean) * rstd;
        gb += db[static_cast<size_t>(n * j.C + c)];
      }
      if (j.grad_weight.present) j.grad_weight.set(c, gw);
      if (j.grad_bias.present) j.grad_bias.set(c, gb);
    }
  }
}

struct LayerNormJob {
  const char* x = nullptr;
  char* y = nullptr;
  int64_t M = 0, N = 0;
  Vec1 weight, bias;
  char* mean = nullptr;  // M values, dense
  char* rstd = nullptr;
  int32_t stat_dtype = 0;
  double eps = 1e-5;
};

template <class T>
void run_layer_norm(const LayerNormJob& j) {
  using Cp = acc_t<T>;
  const std::vector<Cp> gamma = param_values<Cp>(j.weight, j.N, Cp(1));
  const std::vector<Cp> beta = param_values<Cp>(j.bias, j.N, Cp(0));
  const StoreF64 store_stat = j.mean ? storer_f64(j.stat_dtype) : nullptr;
  const int64_t stat_item = j.mean ? dtype_size(j.stat_dtype) : 0;
  parallel_chunks(j.M, grain_for(j.N), [&](int64_t b, int64_t e) {
    with_isa([&]() __attribute__((always_inline)) {
      for (int64_t r = b; r < e; ++r) {
        const T* xr = reinterpret_cast<const T*>(j.x) + r * j.N;
        T* yr = reinterpret_cast<T*>(j.y) + r * j.N;
        const double mean = j.N ? sum_of(xr, j.N) / static_cast<double>(j.N) : 0.0;
        const double var = j.N ? sq_dev_of(xr, j.N, mean) / static_cast<double>(j.N) : 0.0;
        const double rstd = 1.0 / std::sqrt(var + j.eps);
        if (store_stat) {
          store_stat(j.mean + r * stat_item, mean);
          store_stat(j.rstd + r * stat_item, rstd);
        }
        const Cp m = static_cast<Cp>(mean), rs = static_cast<Cp>(rstd);
        for (int64_t i = 0; i < j.N; ++i)
          yr[i] = convert<T>((static_cast<Cp>(to_compute(xr[i])) - m) * rs * gamma[static_cast<size_t>(i)] +
                             beta[static_cast<size_t>(i)]);
      }
    });
  });
}

struct LayerNormBackwardJob {
  const char* dy = nullptr;
  const char* x = nullptr;
  const char* mean = nullptr;
  const char* rstd = nullptr;
  int32_t stat_dtype = 0;
  int64_t M = 0, N = 0;
  Vec1 weight;
  char* dx = nullptr;
  Vec1 grad_weight, grad_bias;
};

// Rows [chunk * per, ...) of layer norm's backward: dx, and this chunk's
// partial parameter gradients (pw, pb) when they are wanted.
template <class T>
[[gnu::always_inline]] inline void layer_norm_backward_rows(const LayerNormBackwardJob& j,
                                                            const std::vector<acc_t<T>>& gamma, int64_t chunk,
                                                            int64_t chunks, std::vector<std::vector<double>>& pw,
                                                            std::vector<std::vector<double>>& pb) {
  using Cp = acc_t<T>;
  const LoadF64 load_stat = loader_f64(j.stat_dtype);
  const int64_t stat_item = dtype_size(j.stat_dtype);
  const bool params = !pw.empty();
  const int64_t per = (j.M + chunks - 1) / chunks;
  const int64_t r0 = chunk * per, r1 = std::min(j.M, r0 + per);
  double* gw = nullptr;
  double* gb = nullptr;
  if (params) {
    pw[static_cast<size_t>(chunk)].assign(static_cast<size_t>(j.N), 0.0);
    pb[static_cast<size_t>(chunk)].assign(static_cast<size_t>(j.N), 0.0);
    gw = pw[static_cast<size_t>(chunk)].data();
    gb = pb[static_cast<size_t>(chunk)].data();
  }
  const Cp* gm = gamma.data();
  for (int64_t r = r0; r < r1; ++r) {
    const T* g = reinterpret_cast<const T*>(j.dy) + r * j.N;
    const T* v = reinterpret_cast<const T*>(j.x) + r * j.N;
    const double mean = load_stat(j.mean + r * stat_item), rstd = load_stat(j.rstd + r * stat_item);
    const Cp m = static_cast<Cp>(mean), rs = static_cast<Cp>(rstd);
    if (params) {
      for (int64_t i = 0; i < j.N; ++i) {
        const Cp gi = static_cast<Cp>(to_compute(g[i]));
        gw[i] += static_cast<double>(gi * (static_cast<Cp>(to_compute(v[i])) - m) * rs);
        gb[i] += static_cast<double>(gi);
      }
    }
    if (j.dx == nullptr) continue;
    // dx = rstd * (gdy - mean(gdy) - xhat * mean(gdy * xhat)), gdy = gamma * dy
    LaneSums<Cp, 2> sums;
    sums.add(j.N, [&](auto u, int64_t i) __attribute__((always_inline)) {
      using U = decltype(u);
      const U gd = static_cast<U>(to_compute(g[i])) * static_cast<U>(gm[i]);
      return std::array<U, 2>{gd, gd * (static_cast<U>(to_compute(v[i])) - as_u<U>(mean, m))};
    });
    const std::array<double, 2> ab = sums.take();
    const Cp mean_gd = static_cast<Cp>(ab[0] / static_cast<double>(j.N));
    const Cp k2 = static_cast<Cp>(ab[1] / static_cast<double>(j.N) * rstd * rstd);
    T* o = reinterpret_cast<T*>(j.dx) + r * j.N;
    for (int64_t t = 0; t < j.N; ++t) {
      const Cp gd = static_cast<Cp>(to_compute(g[t])) * gm[t];
      o[t] = convert<T>(rs * (gd - mean_gd - (static_cast<Cp>(to_compute(v[t])) - m) * k2));
    }
  }
}

template <class T>
void run_layer_norm_backward(const LayerNormBackwardJob& j) {
  using Cp = acc_t<T>;
  const std::vector<Cp> gamma = param_values<Cp>(j.weight, j.N, Cp(1));
  const bool params = j.grad_weight.present || j.grad_bias.present;
  ThreadPool& pool = ThreadPool::instance();
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(pool.parallelism(), j.M * j.N / 16384));
  // Each chunk of rows keeps its own partial parameter gradients.
  std::vector<std::vector<double>> pw(static_cast<size_t>(params ? chunks : 0)), pb(pw.size());
  auto body = [&](int64_t chunk) {
    with_isa([&]() __attribute__((always_inline)) { layer_norm_backward_rows<T>(j, gamma, chunk, chunks, pw, pb); });
  };
  if (chunks > 1) pool.parallel_for(chunks, body);
  else body(0);
  if (params) {
    for (int64_t i = 0; i < j.N; ++i) {
      double w = 0.0, b = 0.0;
      for (int64_t c = 0; c < chunks; ++c) {
        w += pw[static_cast<size_t>(c)][static_cast<size_t>(i)];
        b += pb[static_cast<size_t>(c)][static_cast<size_t>(i)];
      }
      if (j.grad_weight.present) j.grad_weight.set(i, w);
      if (j.grad_bias.present) j.grad_bias.set(i, b);
    }
  }
}

void require_dense(const TensorArg& t, const char* what) {
  if (!t.is_contiguous())
    invalid_argument(what, " must be contiguous (the kernel is registered with TFL_KERNEL_CONTIGUOUS_INPUTS/OUTPUTS)");
}

// Statistics tensors (mean, rstd): dense with `count` elements.
char* stat_tensor(const TensorArg& t, int64_t count, const char* what) {
  require_floating(t, what);
  if (t.numel != count) invalid_argument(what, " has ", t.numel, " elements; expected ", count);
  require_dense(t, what);
  return t.data;
}

}  // namespace

TFL_Error* kernel_native_batch_norm(const TFL_Kernel_Args* args) {
  // native_batch_norm(input, weight?, bias?, running_mean?, running_var?, bool training, float momentum, float eps)
  //   -> (out, save_mean, save_invstd)
  return run_kernel(args, kNativeBatchNorm, [&](Launch& L) {
    const bool training = L.boolean_or(5, true, "training");
    launch_batch_norm(L, 0, 1, 2, 3, 4, training, double_arg(L, 6, "momentum"), double_arg(L, 7, "eps"), 1, 2);
  });
}

TFL_Error* kernel_native_batch_norm_legit(const TFL_Kernel_Args* args) {
  // _native_batch_norm_legit(input, weight?, bias?, Tensor(a!) running_mean, Tensor(b!) running_var,
  //                          bool training, float momentum, float eps) -> (out, save_mean, save_rstd)
  return run_kernel(args, kNativeBatchNormLegit, [&](Launch& L) {
    const bool training = L.boolean_or(5, true, "training");
    launch_batch_norm(L, 0, 1, 2, 3, 4, training, double_arg(L, 6, "momentum"), double_arg(L, 7, "eps"), 1, 2);
  });
}

TFL_Error* kernel_native_batch_norm_legit_no_stats(const TFL_Kernel_Args* args) {
  // _native_batch_norm_legit.no_stats(input, weight?, bias?, bool training, float momentum, float eps)
  return run_kernel(args, kNativeBatchNormLegitNoStats, [&](Launch& L) {
    const bool training = L.boolean_or(3, true, "training");
    if (!training) invalid_argument("batch norm without running stats must run in training mode");
    launch_batch_norm(L, 0, 1, 2, -1, -1, true, double_arg(L, 4, "momentum"), double_arg(L, 5, "eps"), 1, 2);
  });
}

TFL_Error* kernel_native_batch_norm_legit_no_training(const TFL_Kernel_Args* args) {
  // _native_batch_norm_legit_no_training(input, weight?, bias?, running_mean, running_var, float momentum, float eps)
  return run_kernel(args, kNativeBatchNormLegitNoTraining, [&](Launch& L) {
    launch_batch_norm(L, 0, 1, 2, 3, 4, false, double_arg(L, 5, "momentum"), double_arg(L, 6, "eps"), 1, 2);
  });
}

TFL_Error* kernel_batch_norm_with_update(const TFL_Kernel_Args* args) {
  // _batch_norm_with_update(input, weight?, bias?, Tensor(a!) running_mean, Tensor(b!) running_var,
  //                         float momentum, float eps) -> (out, save_mean, save_invstd, reserve)
  return run_kernel(args, kBatchNormWithUpdate, [&](Launch& L) {
    launch_batch_norm(L, 0, 1, 2, 3, 4, true, double_arg(L, 5, "momentum"), double_arg(L, 6, "eps"), 1, 2);
  });
}

TFL_Error* kernel_batch_norm_no_update(const TFL_Kernel_Args* args) {
  // _batch_norm_no_update(input, weight?, bias?, running_mean?, running_var?, float momentum, float eps)
  //   -> (out, save_mean, save_invstd, reserve): eval with running stats, batch stats without.
  return run_kernel(args, kBatchNormNoUpdate, [&](Launch& L) {
    const bool have_stats = L.has_input(3) && L.has_input(4);
    launch_batch_norm(L, 0, 1, 2, have_stats ? 3 : -1, have_stats ? 4 : -1, !have_stats, double_arg(L, 5, "momentum"),
                      double_arg(L, 6, "eps"), 1, 2);
  });
}

TFL_Error* kernel_native_batch_norm_backward(const TFL_Kernel_Args* args) {
  // native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?, save_mean?, save_invstd?,
  //                            bool train, float eps, bool[3] output_mask)
  return run_kernel(args, kNativeBatchNormBackward, [&](Launch& L) {
    const TFL_Value& m = mask3(L, 9);
    const bool want[3] = {bool_at(m, 0), bool_at(m, 1), bool_at(m, 2)};
    launch_batch_norm_backward(L, L.input_tensor(0, "grad_out"), L.input_tensor(1, "input"), 2, 3, 4, 5, 6,
                               L.boolean_or(7, true, "train"), double_arg(L, 8, "eps"), want);
  });
}

TFL_Error* kernel_batch_norm_backward(const TFL_Kernel_Args* args) {
  // batch_norm_backward(grad_out, input, weight, running_mean?, running_var?, save_mean?, save_var?,
  //                     bool update, float eps, bool[3] output_mask, Tensor reserve)
  return run_kernel(args, kBatchNormBackward, [&](Launch& L) {
    const TFL_Value& m = mask3(L, 9);
    const bool want[3] = {bool_at(m, 0), bool_at(m, 1), bool_at(m, 2)};
    // `update` says the forward used batch statistics (saved); otherwise the running ones.
    const bool update = L.boolean_or(7, true, "update");
    const bool train = update || !(L.has_input(3) && L.has_input(4));
    launch_batch_norm_backward(L, L.input_tensor(0, "grad_out"), L.input_tensor(1, "input"), 2, 3, 4, 5, 6, train,
                               double_arg(L, 8, "eps"), want);
  });
}

TFL_Error* kernel_native_group_norm(const TFL_Kernel_Args* args) {
  // native_group_norm(input, weight?, bias?, N, C, HxW, int group, float eps) -> (out, mean, rstd)
  return run_kernel(args, kNativeGroupNorm, [&](Launch& L) {
    const TensorArg input = L.input_tensor(0, "input");
    require_floating(input, "input");
    require_dense(input, "input");
    GroupNormJob j;
    j.N = int_arg(L, 3, "N");
    j.C = int_arg(L, 4, "C");
    j.HxW = int_arg(L, 5, "HxW");
    j.G = int_arg(L, 6, "group");
    j.eps = double_arg(L, 7, "eps");
    if (j.G <= 0 || j.C % j.G) invalid_argument("C=", j.C, " must be divisible by group=", j.G);
    if (j.N * j.C * j.HxW != input.numel)
      invalid_argument("input has ", input.numel, " elements but N*C*HxW = ", j.N * j.C * j.HxW);
    j.weight = optional_vec1(L, 1, j.C, "weight");
    j.bias = optional_vec1(L, 2, j.C, "bias");
    const TensorArg out = L.output(0, "out"), mean = L.output(1, "mean"), rstd = L.output(2, "rstd");
    require_dense(out, "out");
    if (out.dtype != input.dtype || out.numel != input.numel) invalid_argument("out must be shaped like the input");
    j.mean = stat_tensor(mean, j.N * j.G, "mean");
    j.rstd = stat_tensor(rstd, j.N * j.G, "rstd");
    if (mean.dtype != rstd.dtype) invalid_argument("mean and rstd must share a dtype");
    j.stat_dtype = mean.dtype;
    j.x = input.data;
    j.y = out.data;
    if (j.N * j.G == 0) return;
    dispatch_floating(input.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([j] { run_group_norm<T>(j); });
    });
  });
}

TFL_Error* kernel_native_group_norm_backward(const TFL_Kernel_Args* args) {
  // native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, int group, bool[3] output_mask)
  return run_kernel(args, kNativeGroupNormBackward, [&](Launch& L) {
    const TensorArg grad = L.input_tensor(0, "grad_out"), input = L.input_tensor(1, "input");
    const TensorArg mean = L.input_tensor(2, "mean"), rstd = L.input_tensor(3, "rstd");
    require_floating(input, "input");
    require_dense(input, "input");
    require_dense(grad, "grad_out");
    if (grad.dtype != input.dtype || grad.numel != input.numel) invalid_argument("grad_out must be shaped like the input");
    GroupNormBackwardJob j;
    j.N = int_arg(L, 5, "N");
    j.C = int_arg(L, 6, "C");
    j.HxW = int_arg(L, 7, "HxW");
    j.G = int_arg(L, 8, "group");
    if (j.G <= 0 || j.C % j.G) invalid_argument("C=", j.C, " must be divisible by group=", j.G);
    if (j.N * j.C * j.HxW != input.numel)
      invalid_argument("input has ", input.numel, " elements but N*C*HxW = ", j.N * j.C * j.HxW);
    j.mean = stat_tensor(mean, j.N * j.G, "mean");
    j.rstd = stat_tensor(rstd, j.N * j.G, "rstd");
    if (mean.dtype != rstd.dtype) invalid_argument("mean and rstd must share a dtype");
    j.stat_dtype = mean.dtype;
    j.weight = optional_vec1(L, 4, j.C, "weight");
    j.dy = grad.data;
    j.x = input.data;
    const TFL_Value& m = mask3(L, 9);
    TensorArg dx;
    if (bool_at(m, 0) && optional_output(L, 0, "grad_input", &dx) && dx.numel > 0) {
      require_dense(dx, "grad_input");
      if (dx.numel != input.numel || dx.dtype != input.dtype) invalid_argument("grad_input must be shaped like the input");
      j.dx = dx.data;
    }
    if (bool_at(m, 1)) j.grad_weight = optional_out_vec1(L, 1, j.C, "grad_weight");
    if (bool_at(m, 2)) j.grad_bias = optional_out_vec1(L, 2, j.C, "grad_bias");
    if (j.C == 0 || (!j.dx && !j.grad_weight.present && !j.grad_bias.present)) return;
    dispatch_floating(input.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([j] { run_group_norm_backward<T>(j); });
    });
  });
}

namespace {

// M (rows) and N (normalized elements) of a layer norm over the trailing dims.
void layer_norm_sizes(const Launch& L, const TensorArg& input, size_t shape_i, int64_t* M, int64_t* N) {
  const auto shape = int_list(L, shape_i, "normalized_shape");
  const int32_t k = static_cast<int32_t>(shape.size());
  if (k < 1 || k > input.ndim) invalid_argument("normalized_shape must have 1 to ", input.ndim, " entries, got ", k);
  int64_t n = 1, m = 1;
  for (int32_t d = 0; d < k; ++d) {
    const int64_t s = input.sizes[input.ndim - k + d];
    if (s != shape[static_cast<size_t>(d)])
      invalid_argument("normalized_shape does not match the trailing dims of the input (dim ", input.ndim - k + d,
                       " is ", s, ", normalized_shape says ", shape[static_cast<size_t>(d)], ")");
    n *= s;
  }
  for (int32_t d = 0; d < input.ndim - k; ++d) m *= input.sizes[d];
  *M = m;
  *N = n;
}

}  // namespace

TFL_Error* kernel_native_layer_norm(const TFL_Kernel_Args* args) {
  // native_layer_norm(input, normalized_shape, weight?, bias?, float eps) -> (out, mean, rstd)
  return run_kernel(args, kNativeLayerNorm, [&](Launch& L) {
    const TensorArg input = L.input_tensor(0, "input");
    require_floating(input, "input");
    require_dense(input, "input");
    LayerNormJob j;
    layer_norm_sizes(L, input, 1, &j.M, &j.N);
    j.weight = optional_vec1(L, 2, j.N, "weight");
    j.bias = optional_vec1(L, 3, j.N, "bias");
    j.eps = double_arg(L, 4, "eps");
    const TensorArg out = L.output(0, "out");
    require_dense(out, "out");
    if (out.dtype != input.dtype || out.numel != input.numel) invalid_argument("out must be shaped like the input");
    TensorArg mean, rstd;
    if (optional_output(L, 1, "mean", &mean) && optional_output(L, 2, "rstd", &rstd) && mean.numel > 0) {
      j.mean = stat_tensor(mean, j.M, "mean");
      j.rstd = stat_tensor(rstd, j.M, "rstd");
      if (mean.dtype != rstd.dtype) invalid_argument("mean and rstd must share a dtype");
      j.stat_dtype = mean.dtype;
    }
    j.x = input.data;
    j.y = out.data;
    if (j.M == 0) return;
    dispatch_floating(input.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([j] { run_layer_norm<T>(j); });
    });
  });
}

TFL_Error* kernel_native_layer_norm_backward(const TFL_Kernel_Args* args) {
  // native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?, bool[3] output_mask)
  return run_kernel(args, kNativeLayerNormBackward, [&](Launch& L) {
    const TensorArg grad = L.input_tensor(0, "grad_out"), input = L.input_tensor(1, "input");
    require_floating(input, "input");
    require_dense(input, "input");
    require_dense(grad, "grad_out");
    if (grad.dtype != input.dtype || grad.numel != input.numel) invalid_argument("grad_out must be shaped like the input");
    LayerNormBackwardJob j;
    layer_norm_sizes(L, input, 2, &j.M, &j.N);
    const TensorArg mean = L.input_tensor(3, "mean"), rstd = L.input_tensor(4, "rstd");
    j.mean = stat_tensor(mean, j.M, "mean");
    j.rstd = stat_tensor(rstd, j.M, "rstd");
    if (mean.dtype != rstd.dtype) invalid_argument("mean and rstd must share a dtype");
    j.stat_dtype = mean.dtype;
    j.weight = optional_vec1(L, 5, j.N, "weight");
    j.dy = grad.data;
    j.x = input.data;
    const TFL_Value& m = mask3(L, 7);
    TensorArg dx;
    if (bool_at(m, 0) && optional_output(L, 0, "grad_input", &dx) && dx.numel > 0) {
      require_dense(dx, "grad_input");
      if (dx.numel != input.numel || dx.dtype != input.dtype) invalid_argument("grad_input must be shaped like the input");
      j.dx = dx.data;
    }
    if (bool_at(m, 1)) j.grad_weight = optional_out_vec1(L, 1, j.N, "grad_weight");
    if (bool_at(m, 2)) j.grad_bias = optional_out_vec1(L, 2, j.N, "grad_bias");
    if (j.M == 0 && !j.grad_weight.present && !j.grad_bias.present) return;
    if (!j.dx && !j.grad_weight.present && !j.grad_bias.present) return;
    dispatch_floating(input.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([j] { run_layer_norm_backward<T>(j); });
    });
  });
}

}  // namespace flemu
