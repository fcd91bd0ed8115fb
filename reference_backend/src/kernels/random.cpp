// Random kernels: uniform_, normal_, bernoulli (in-place and functional),
// random_ (all ranges), randperm, and native_dropout with its backward.
//
// All draw from Philox4x32-10 keyed by ctx->rng_seed. Element i (in logical
// row-major order) takes its words from counter rng_offset + i / per, where
// `per` is how many elements one counter's four words serve (4 for 32-bit
// draws, 2 for 64-bit ones, 2 for double normals); the bridge reserves one
// counter per output element, so every kernel stays inside its span.
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "support/isa.h"
#include "support/nn_common.h"
#include "support/registry.h"
#include "support/philox.h"

namespace flemu {
namespace {

struct Rng {
  uint64_t seed = 0, offset = 0, span = 0;
};

Rng rng_of(const Launch& L) {
  const TFL_KernelContext& ctx = L.context();
  if (ctx.struct_size < TFL_STRUCT_SIZE(TFL_KernelContext, rng_span))
    invalid_argument(L.name(), ": the host's kernel context has no RNG fields (TFL_KernelContext too small)");
  if (L.faulty(Fault::kSeedIgnored)) {
    // A generator seeded from the clock and a call counter: never the host's stream of numbers.
    static std::atomic<uint64_t> calls{0};
    const uint64_t seed = static_cast<uint64_t>(now_ns()) * 0x9e3779b97f4a7c15ull + calls.fetch_add(1);
    return {seed, 0, ctx.rng_span};
  }
  return {ctx.rng_seed, ctx.rng_offset, ctx.rng_span};
}

// Writes gen(block, vals) values to every element of `t`: block b fills
// elements [b * per, b * per + per).
template <class T, class Gen>
void fill_blocks(const Strided& t, const Rng& rng, int per, Gen gen) {
  const int64_t n = t.numel;
  const int64_t blocks = (n + per - 1) / per;
  parallel_chunks(blocks, 2048, [&](int64_t b0, int64_t b1) {
    Cursor cur(t, b0 * per);
    T vals[4];
    for (int64_t b = b0; b < b1; ++b) {
      gen(philox4x32_10(rng.seed, rng.offset + static_cast<uint64_t>(b)), vals);
      const int64_t count = std::min<int64_t>(per, n - b * per);
      for (int64_t j = 0; j < count; ++j) {
        *reinterpret_cast<T*>(cur.ptr) = vals[j];
        cur.next();
      }
    }
  });
}

TensorArg inplace_self(const Launch& L) { return L.num_outputs() > 0 ? L.output(0, "self") : L.input_tensor(0, "self"); }

void check_span(const Rng& rng, int64_t counters, const char* op) {
  if (static_cast<uint64_t>(counters) > rng.span)
    invalid_argument(op, " needs ", counters, " Philox counters but the host reserved ", rng.span,
                     " (ctx->rng_span); the kernel must be flagged TFL_KERNEL_RANDOM");
}

// ---------------------------------------------------------------------------
// uniform_ / normal_
// ---------------------------------------------------------------------------

template <class T>
void run_uniform(const Strided& t, Rng rng, double from, double to) {
  const double range = to - from;
  if constexpr (std::is_same_v<T, double>) {
    fill_blocks<T>(t, rng, 2, [=](const Philox4x32& r, T* v) {
      v[0] = from + uniform_d53(r.w[0], r.w[1]) * range;
      v[1] = from + uniform_d53(r.w[2], r.w[3]) * range;
    });
  } else {
    fill_blocks<T>(t, rng, 4, [=](const Philox4x32& r, T* v) {
      for (int j = 0; j < 4; ++j) {
        T x = convert<T>(static_cast<float>(from + static_cast<double>(uniform_f24(r.w[j])) * range));
        // Rounding may land on `to` in a narrow type; the interval is half-open.
        if (range > 0 && static_cast<double>(static_cast<float>(x)) >= to) x = convert<T>(static_cast<float>(from));
        v[j] = x;
      }
    });
  }
}

template <class T>
void run_normal(const Strided& t, Rng rng, double mean, double std) {
  if constexpr (std::is_same_v<T, double>) {
    fill_blocks<T>(t, rng, 2, [=](const Philox4x32& r, T* v) {
      double z0, z1;
      box_muller<double>(uniform_d53(r.w[0], r.w[1]), uniform_d53(r.w[2], r.w[3]), &z0, &z1);
      v[0] = mean + std * z0;
      v[1] = mean + std * z1;
    });
  } else {
    const float m = static_cast<float>(mean), s = static_cast<float>(std);
    fill_blocks<T>(t, rng, 4, [=](const Philox4x32& r, T* v) {
      float z[4];
      box_muller<float>(uniform_f24(r.w[0]), uniform_f24(r.w[1]), &z[0], &z[1]);
      box_muller<float>(uniform_f24(r.w[2]), uniform_f24(r.w[3]), &z[2], &z[3]);
      for (int j = 0; j < 4; ++j) v[j] = convert<T>(m + s * z[j]);
    });
  }
}

// ---------------------------------------------------------------------------
// bernoulli
// ---------------------------------------------------------------------------

// out[i] = u_i < p, p a constant.
template <class T>
void run_bernoulli_scalar(const Strided& out, Rng rng, double p) {
  fill_blocks<T>(out, rng, 4, [=](const Philox4x32& r, T* v) {
    for (int j = 0; j < 4; ++j) v[j] = convert<T>(uniform_d32(r.w[j]) < p ? 1 : 0);
  });
}

// out[i] = u_i < prob[i], prob any floating dtype (broadcast by strides).
template <class T>
void run_bernoulli_tensor(const Strided& out, const Strided& prob, Rng rng) {
  const LoadF64 load = loader_f64(prob.dtype);
  const int64_t n = out.numel;
  const int64_t blocks = (n + 3) / 4;
  parallel_chunks(blocks, 2048, [&](int64_t b0, int64_t b1) {
    Cursor co(out, b0 * 4), cp(prob, b0 * 4);
    for (int64_t b = b0; b < b1; ++b) {
      const Philox4x32 r = philox4x32_10(rng.seed, rng.offset + static_cast<uint64_t>(b));
      const int64_t count = std::min<int64_t>(4, n - b * 4);
      for (int64_t j = 0; j < count; ++j) {
        const double p = load(cp.ptr);
        *reinterpret_cast<T*>(co.ptr) = convert<T>(uniform_d32(r.w[j]) < p ? 1 : 0);
        co.next();
        cp.next();
      }
    }
  });
}

void check_probability(double p, const char* what) {
  if (!(p >= 0.0 && p <= 1.0)) invalid_argument(what, " must be in [0, 1], got ", p);
}

// ---------------------------------------------------------------------------
// random_
// ---------------------------------------------------------------------------

// The largest integer random_() draws for a dtype without `to`: the
// integer range a floating type represents exactly, the maximum otherwise.
int64_t default_random_max(int32_t dtype) {
  switch (dtype) {
    case TFL_DTYPE_BOOL: return 1;
    case TFL_DTYPE_UINT8: return 255;
    case TFL_DTYPE_INT8: return 127;
    case TFL_DTYPE_INT16: return 32767;
    case TFL_DTYPE_INT32: return 2147483647;
    case TFL_DTYPE_INT64: return std::numeric_limits<int64_t>::max();
    case TFL_DTYPE_FLOAT16: return int64_t{1} << 11;
    case TFL_DTYPE_BFLOAT16: return int64_t{1} << 8;
    case TFL_DTYPE_FLOAT32: return int64_t{1} << 24;
    case TFL_DTYPE_FLOAT64: return int64_t{1} << 53;
    default: return 0;
  }
}

// from + (draw mod range); range == 0 stands for 2^64.
template <class T>
void run_random(const Strided& t, Rng rng, int64_t from, uint64_t range) {
  if (range != 0 && range <= (uint64_t{1} << 32)) {
    fill_blocks<T>(t, rng, 4, [=](const Philox4x32& r, T* v) {
      for (int j = 0; j < 4; ++j)
        v[j] = convert<T>(static_cast<int64_t>(static_cast<uint64_t>(from) + r.w[j] % range));
    });
  } else {
    fill_blocks<T>(t, rng, 2, [=](const Philox4x32& r, T* v) {
      for (int j = 0; j < 2; ++j) {
        const uint64_t bits = (static_cast<uint64_t>(r.w[2 * j]) << 32) | r.w[2 * j + 1];
        v[j] = convert<T>(static_cast<int64_t>(static_cast<uint64_t>(from) + (range ? bits % range : bits)));
      }
    });
  }
}

void launch_random(const Launch& L, const Rng& rng, const TensorArg& self, int64_t from, uint64_t range) {
  check_span(rng, (self.numel + 1) / 2, L.name());
  if (self.numel == 0) return;
  const Strided t = strided(self, "self");
  dispatch_dtype(self.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    L.enqueue([t, rng, from, range] { run_random<T>(t, rng, from, range); });
  });
}

// ---------------------------------------------------------------------------
// dropout
// ---------------------------------------------------------------------------

// Dense operands in training: kPhiloxLanes blocks (64 elements) a step, in
// loops that vectorize; the same elements as the strided form below.
template <class T>
void run_dense_dropout(const T* in, T* out, bool* mask, int64_t n, Rng rng, double p1m) {
  using C = acc_t<T>;
  const C scale = p1m == 0.0 ? C(0) : static_cast<C>(1.0 / p1m);
  // words[k] < threshold as a 32-bit comparison (threshold is at most 2^32):
  // words[k] <= last, and nothing kept when the threshold is 0.
  const uint64_t threshold = below_threshold_u32(p1m);
  const bool none = threshold == 0;
  const uint32_t last = none ? 0 : static_cast<uint32_t>(threshold - 1);
  const int64_t blocks = (n + 3) / 4;
  parallel_chunks(blocks, 2048, [&](int64_t b0, int64_t b1) {
    with_isa([&]() __attribute__((always_inline)) {
      uint32_t words[4 * kPhiloxLanes];
      for (int64_t b = b0; b < b1; b += kPhiloxLanes) {
        philox4x32_10_lanes(rng.seed, rng.offset + static_cast<uint64_t>(b), words);
        const int64_t first = 4 * b;
        const int64_t count = std::min<int64_t>(4 * std::min<int64_t>(kPhiloxLanes, b1 - b), n - first);
        auto apply = [&](auto count) __attribute__((always_inline)) {
          const T* x = in + first;
          T* o = out + first;
          bool* m = mask + first;
          for (int64_t k = 0; k < count; ++k) {
            const bool keep = !none && words[k] <= last;
            const C v = static_cast<C>(to_compute(x[k]));
            o[k] = convert<T>(keep ? v * scale : C(0));
            m[k] = keep;
          }
        };
        // A whole step has a constant trip count, which the loop then vectorizes fully.
        if (count == 4 * kPhiloxLanes) apply(std::integral_constant<int64_t, 4 * kPhiloxLanes>{});
        else apply(count);
      }
    });
  });
}

template <class T>
void run_dropout(const Strided& in, const Strided& out, const Strided& mask, Rng rng, double p1m, bool train) {
  using C = acc_t<T>;
  const C scale = p1m == 0.0 ? C(0) : static_cast<C>(1.0 / p1m);
  const int64_t n = in.numel;
  if (train && dense(in) && dense(out) && dense(mask)) {
    run_dense_dropout<T>(reinterpret_cast<const T*>(in.data), reinterpret_cast<T*>(out.data),
                         reinterpret_cast<bool*>(mask.data), n, rng, p1m);
    return;
  }
  const int64_t blocks = (n + 3) / 4;
  parallel_chunks(blocks, 2048, [&](int64_t b0, int64_t b1) {
    Cursor ci(in, b0 * 4), co(out, b0 * 4), cm(mask, b0 * 4);
    for (int64_t b = b0; b < b1; ++b) {
      Philox4x32 r{};
      if (train) r = philox4x32_10(rng.seed, rng.offset + static_cast<uint64_t>(b));
      const int64_t count = std::min<int64_t>(4, n - b * 4);
      for (int64_t j = 0; j < count; ++j) {
        const bool keep = !train || uniform_d32(r.w[j]) < p1m;
        const C x = static_cast<C>(to_compute(*reinterpret_cast<const T*>(ci.ptr)));
        *reinterpret_cast<T*>(co.ptr) = convert<T>(train ? (keep ? x * scale : C(0)) : x);
        *reinterpret_cast<bool*>(cm.ptr) = keep;
        ci.next();
        co.next();
        cm.next();
      }
    }
  });
}

template <class T>
void run_dropout_backward(const Strided& grad, const Strided& mask, const Strided& out, double scale) {
  using C = acc_t<T>;
  const C s = static_cast<C>(scale);
  if (dense(grad) && dense(mask) && dense(out)) {
    const T* g = reinterpret_cast<const T*>(grad.data);
    const bool* m = reinterpret_cast<const bool*>(mask.data);
    T* o = reinterpret_cast<T*>(out.data);
    parallel_chunks(grad.numel, 1 << 15, [&](int64_t b, int64_t e) {
      with_isa([&]() __attribute__((always_inline)) {
        for (int64_t i = b; i < e; ++i) o[i] = convert<T>(m[i] ? static_cast<C>(to_compute(g[i])) * s : C(0));
      });
    });
    return;
  }
  parallel_chunks(grad.numel, 1 << 15, [&](int64_t b, int64_t e) {
    Cursor cg(grad, b), cm(mask, b), co(out, b);
    for (int64_t i = b; i < e; ++i) {
      const C g = static_cast<C>(to_compute(*reinterpret_cast<const T*>(cg.ptr)));
      const bool m = *reinterpret_cast<const bool*>(cm.ptr);
      *reinterpret_cast<T*>(co.ptr) = convert<T>(m ? g * s : C(0));
      cg.next();
      cm.next();
      co.next();
    }
  });
}

void require_same_shape(const TensorArg& a, const TensorArg& b, const char* an, const char* bn) {
  bool same = a.ndim == b.ndim;
  for (int32_t d = 0; same && d < a.ndim; ++d) same = a.sizes[d] == b.sizes[d];
  if (!same) invalid_argument(an, " and ", bn, " must have the same shape");
}

}  // namespace

TFL_Error* kernel_uniform(const TFL_Kernel_Args* args) {
  // uniform_(self, float from=0, float to=1, *, Generator? generator)
  return run_kernel(args, kUniform, [&](Launch& L) {
    const Rng rng = rng_of(L);
    const TensorArg self = inplace_self(L);
    const double from = L.has_input(1) ? double_arg(L, 1, "from") : 0.0;
    double to = L.has_input(2) ? double_arg(L, 2, "to") : 1.0;
    if (!(from <= to)) invalid_argument("uniform_ expects from <= to, got from=", from, " to=", to);
    if (!dtype_is_floating(self.dtype)) invalid_argument("uniform_ fills floating tensors, got ", dtype_name(self.dtype));
    // FLEMU_FAULT=uniform_range_wrong: the range runs a tenth too far.
    if (L.faulty(Fault::kUniformRangeWrong)) to += (to - from) / 10;
    check_span(rng, (self.numel + 1) / 2, L.name());
    if (self.numel == 0) return;
    const Strided t = strided(self, "self");
    dispatch_floating(self.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([t, rng, from, to] { run_uniform<T>(t, rng, from, to); });
    });
  });
}

TFL_Error* kernel_normal(const TFL_Kernel_Args* args) {
  // normal_(self, float mean=0, float std=1, *, Generator? generator)
  return run_kernel(args, kNormal, [&](Launch& L) {
    const Rng rng = rng_of(L);
    const TensorArg self = inplace_self(L);
    const double mean = L.has_input(1) ? double_arg(L, 1, "mean") : 0.0;
    const double std = L.has_input(2) ? double_arg(L, 2, "std") : 1.0;
    if (!(std >= 0.0)) invalid_argument("normal_ expects std >= 0.0, got ", std);
    if (!dtype_is_floating(self.dtype)) invalid_argument("normal_ fills floating tensors, got ", dtype_name(self.dtype));
    check_span(rng, (self.numel + 1) / 2, L.name());
    if (self.numel == 0) return;
    const Strided t = strided(self, "self");
    dispatch_floating(self.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([t, rng, mean, std] { run_normal<T>(t, rng, mean, std); });
    });
  });
}

TFL_Error* kernel_bernoulli_float(const TFL_Kernel_Args* args) {
  // bernoulli_.float(self, float p=0.5, *, Generator? generator)
  return run_kernel(args, kBernoulliFloat, [&](Launch& L) {
    const Rng rng = rng_of(L);
    const TensorArg self = inplace_self(L);
    const double p = L.has_input(1) ? double_arg(L, 1, "p") : 0.5;
    check_probability(p, "bernoulli_ p");
    check_span(rng, (self.numel + 3) / 4, L.name());
    if (self.numel == 0) return;
    const Strided t = strided(self, "self");
    dispatch_dtype(self.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([t, rng, p] { run_bernoulli_scalar<T>(t, rng, p); });
    });
  });
}

TFL_Error* kernel_bernoulli_p(const TFL_Kernel_Args* args) {
  // bernoulli.p(self, float p, *, Generator? generator) -> Tensor shaped like self
  return run_kernel(args, kBernoulliP, [&](Launch& L) {
    const Rng rng = rng_of(L);
    const TensorArg out = L.output(0, "out");
    const double p = double_arg(L, 1, "p");
    check_probability(p, "bernoulli p");
    check_span(rng, (out.numel + 3) / 4, L.name());
    if (out.numel == 0) return;
    const Strided t = strided(out, "out");
    dispatch_dtype(out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([t, rng, p] { run_bernoulli_scalar<T>(t, rng, p); });
    });
  });
}

// bernoulli_.Tensor(self, Tensor p, *, generator) and bernoulli(self, *, generator):
// per-element probabilities.
TFL_Error* kernel_bernoulli_tensor(const TFL_Kernel_Args* args) {
  return run_kernel(args, kBernoulliTensor, [&](Launch& L) {
    const Rng rng = rng_of(L);
    const TensorArg self = inplace_self(L);
    const TensorArg p = L.input_tensor(1, "p");
    if (!dtype_is_floating(p.dtype)) invalid_argument("bernoulli_ p must be a floating tensor, got ", dtype_name(p.dtype));
    require_same_shape(self, p, "self", "p (broadcast)");
    check_span(rng, (self.numel + 3) / 4, L.name());
    if (self.numel == 0) return;
    const Strided t = strided(self, "self"), pt = strided(p, "p");
    dispatch_dtype(self.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([t, pt, rng] { run_bernoulli_tensor<T>(t, pt, rng); });
    });
  });
}

TFL_Error* kernel_bernoulli(const TFL_Kernel_Args* args) {
  // bernoulli(self, *, Generator? generator): self holds the probabilities.
  return run_kernel(args, kBernoulli, [&](Launch& L) {
    const Rng rng = rng_of(L);
    const TensorArg p = L.input_tensor(0, "self");
    const TensorArg out = L.output(0, "out");
    if (!dtype_is_floating(p.dtype)) invalid_argument("bernoulli takes floating probabilities, got ", dtype_name(p.dtype));
    require_same_shape(out, p, "out", "self");
    check_span(rng, (out.numel + 3) / 4, L.name());
    if (out.numel == 0) return;
    const Strided t = strided(out, "out"), pt = strided(p, "self");
    dispatch_dtype(out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([t, pt, rng] { run_bernoulli_tensor<T>(t, pt, rng); });
    });
  });
}

TFL_Error* kernel_random(const TFL_Kernel_Args* args) {
  // random_(self, *, Generator? generator)
  return run_kernel(args, kRandom, [&](Launch& L) {
    const Rng rng = rng_of(L);
    const TensorArg self = inplace_self(L);
    const int64_t hi = default_random_max(self.dtype);
    launch_random(L, rng, self, 0, static_cast<uint64_t>(hi) + 1);
  });
}

TFL_Error* kernel_random_to(const TFL_Kernel_Args* args) {
  // random_.to(self, int to, *, Generator? generator): [0, to)
  return run_kernel(args, kRandomTo, [&](Launch& L) {
    const Rng rng = rng_of(L);
    const TensorArg self = inplace_self(L);
    const int64_t to = int_arg(L, 1, "to");
    if (to <= 0) invalid_argument("random_ expects 'from' to be less than 'to', but got from=0 >= to=", to);
    launch_random(L, rng, self, 0, static_cast<uint64_t>(to));
  });
}

TFL_Error* kernel_random_from(const TFL_Kernel_Args* args) {
  // random_.from(self, int from, int? to, *, Generator? generator): [from, to), or
  // [from, the dtype's default maximum] without `to`.
  return run_kernel(args, kRandomFrom, [&](Launch& L) {
    const Rng rng = rng_of(L);
    const TensorArg self = inplace_self(L);
    const int64_t from = int_arg(L, 1, "from");
    uint64_t range;
    if (L.has_input(2)) {
      const int64_t to = int_arg(L, 2, "to");
      if (from >= to) invalid_argument("random_ expects 'from' to be less than 'to', but got from=", from, " >= to=", to);
      range = static_cast<uint64_t>(to) - static_cast<uint64_t>(from);
    } else {
      const int64_t hi = default_random_max(self.dtype);
      if (from > hi) invalid_argument("random_ from=", from, " is above the largest value of ", dtype_name(self.dtype));
      range = static_cast<uint64_t>(hi) - static_cast<uint64_t>(from) + 1;  // wraps to 0 = 2^64 for the full int64 range
    }
    launch_random(L, rng, self, from, range);
  });
}

namespace {

// randperm(n, ...) and randperm.generator(n, generator, ...): Fisher-Yates,
// position i drawing from counter offset + i.
void launch_randperm(const Launch& L, const Rng& rng) {
  const int64_t n = int_arg(L, 0, "n");
  const TensorArg out = L.output(0, "out");
  if (n < 0) invalid_argument("randperm n must be non-negative, got ", n);
  if (out.numel != n) invalid_argument("randperm output has ", out.numel, " elements, expected ", n);
  if (out.dtype == TFL_DTYPE_BOOL) invalid_argument("randperm does not produce bool tensors");
  if (dtype_is_floating(out.dtype) && n > default_random_max(out.dtype) + 1)
    invalid_argument("randperm n=", n, " is too large for ", dtype_name(out.dtype), " to hold every index exactly");
  check_span(rng, n, L.name());
  if (n == 0) return;
  const Strided t = strided(out, "out");
  L.enqueue([t, rng, n] {
    std::vector<int64_t> perm(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) perm[static_cast<size_t>(i)] = i;
    for (int64_t i = n - 1; i > 0; --i) {
      const Philox4x32 r = philox4x32_10(rng.seed, rng.offset + static_cast<uint64_t>(i));
      const uint64_t bits = (static_cast<uint64_t>(r.w[0]) << 32) | r.w[1];
      const int64_t j = static_cast<int64_t>(bits % static_cast<uint64_t>(i + 1));
      std::swap(perm[static_cast<size_t>(i)], perm[static_cast<size_t>(j)]);
    }
    const StoreI64 store = storer_i64(t.dtype);
    Cursor c(t, 0);
    for (int64_t i = 0; i < n; ++i, c.next()) store(c.ptr, perm[static_cast<size_t>(i)]);
  });
}

}  // namespace

TFL_Error* kernel_randperm(const TFL_Kernel_Args* args) {
  return run_kernel(args, kRandperm, [&](Launch& L) { launch_randperm(L, rng_of(L)); });
}

TFL_Error* kernel_randperm_generator(const TFL_Kernel_Args* args) {
  return run_kernel(args, kRandpermGenerator, [&](Launch& L) { launch_randperm(L, rng_of(L)); });
}

TFL_Error* kernel_native_dropout(const TFL_Kernel_Args* args) {
  // native_dropout(input, float p, bool? train) -> (output, mask)
  return run_kernel(args, kNativeDropout, [&](Launch& L) {
    const Rng rng = rng_of(L);
    const TensorArg input = L.input_tensor(0, "input");
    const double p = double_arg(L, 1, "p");
    const bool train = L.boolean_or(2, true, "train");
    const TensorArg out = L.output(0, "output"), mask = L.output(1, "mask");
    check_probability(p, "dropout probability");
    if (!dtype_is_floating(input.dtype)) invalid_argument("native_dropout takes floating input, got ", dtype_name(input.dtype));
    if (out.dtype != input.dtype) invalid_argument("native_dropout output must have the input's dtype");
    if (mask.dtype != TFL_DTYPE_BOOL) invalid_argument("native_dropout mask must be bool, got ", dtype_name(mask.dtype));
    require_same_shape(out, input, "output", "input");
    require_same_shape(mask, input, "mask", "input");
    check_span(rng, (input.numel + 3) / 4, L.name());
    if (input.numel == 0) return;
    const Strided si = strided(input, "input"), so = strided(out, "output"), sm = strided(mask, "mask");
    const double p1m = 1.0 - p;
    dispatch_floating(input.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([si, so, sm, rng, p1m, train] { run_dropout<T>(si, so, sm, rng, p1m, train); });
    });
  });
}

TFL_Error* kernel_native_dropout_backward(const TFL_Kernel_Args* args) {
  // native_dropout_backward(grad_output, mask, float scale) -> grad_input
  return run_kernel(args, kNativeDropoutBackward, [&](Launch& L) {
    const TensorArg grad = L.input_tensor(0, "grad_output"), mask = L.input_tensor(1, "mask");
    const double scale = double_arg(L, 2, "scale");
    const TensorArg out = L.output(0, "grad_input");
    if (!dtype_is_floating(grad.dtype)) invalid_argument("grad_output must be floating, got ", dtype_name(grad.dtype));
    if (mask.dtype != TFL_DTYPE_BOOL) invalid_argument("mask must be bool, got ", dtype_name(mask.dtype));
    if (out.dtype != grad.dtype) invalid_argument("grad_input must have grad_output's dtype");
    require_same_shape(out, grad, "grad_input", "grad_output");
    require_same_shape(mask, grad, "mask", "grad_output");
    if (grad.numel == 0) return;
    const Strided sg = strided(grad, "grad_output"), sm = strided(mask, "mask"), so = strided(out, "grad_input");
    dispatch_floating(grad.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([sg, sm, so, scale] { run_dropout_backward<T>(sg, sm, so, scale); });
    });
  });
}

}  // namespace flemu
