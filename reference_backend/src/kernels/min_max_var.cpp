// Reductions beyond sum/mean: max/min (whole tensor, and over a dim with
// indices), argmax/argmin, amax/amin, var/std/var_mean/std_mean with a
// correction, all/any, prod.
//
// A reduction splits self's dims into kept dims (one output element per
// index) and reduced dims, walked in row-major order so that the position of
// an element among the reduced ones is the index argmax reports. Outputs are
// computed in parallel when there are many; a few large outputs are split
// into fixed-size chunks of reduced elements, combined in chunk order, so
// results do not depend on the number of threads.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "../thread_pool.h"
#include "support/elementwise_launch.h"
#include "support/registry.h"

namespace flemu {
namespace {

constexpr int kMaxDims = 64;

struct RPlan {
  const char* in = nullptr;
  int32_t in_dtype = 0;
  int64_t item = 0;
  int32_t nk = 0, nr = 0;
  int64_t ksizes[kMaxDims] = {}, kstrides[kMaxDims] = {};  // kept dims: sizes, self strides (bytes)
  int64_t rsizes[kMaxDims] = {}, rstrides[kMaxDims] = {};  // reduced dims
  int64_t ostrides[2][kMaxDims] = {};                      // output strides (bytes) per kept dim
  char* out[2] = {nullptr, nullptr};
  int32_t out_dtype[2] = {0, 0};
  int64_t out_count = 1, red_count = 1;
};

// Which dims of an ndim-dim tensor are reduced. `dims` empty and `all` true:
// every dim.
std::vector<bool> reduced_set(int32_t ndim, const int64_t* dims, size_t count, bool all, const char* op) {
  std::vector<bool> r(static_cast<size_t>(std::max(ndim, 0)), all);
  if (all) return r;
  const int64_t wrap = std::max<int64_t>(ndim, 1);
  for (size_t i = 0; i < count; ++i) {
    int64_t d = dims[i];
    if (d < -wrap || d >= wrap)
      invalid_argument(op, ": dim ", d, " is out of range for a tensor with ", ndim, " dims (expected ", -wrap, "..",
                       wrap - 1, ")");
    if (d < 0) d += wrap;
    if (ndim == 0) continue;
    if (r[static_cast<size_t>(d)]) invalid_argument(op, ": dim ", d, " appears more than once");
    r[static_cast<size_t>(d)] = true;
  }
  return r;
}

// Plans self -> outputs (each keepdim-shaped or with the reduced dims removed).
RPlan plan_reduction(const TensorArg& self, const std::vector<bool>& reduced, const TensorArg* outs, int nouts,
                     const char* op) {
  RPlan p;
  p.in = self.data;
  p.in_dtype = self.dtype;
  p.item = self.itemsize;
  int32_t kept_before = 0;
  for (int32_t d = 0; d < self.ndim; ++d) {
    if (reduced[static_cast<size_t>(d)]) {
      p.rsizes[p.nr] = self.sizes[d];
      p.rstrides[p.nr] = self.strides[d] * self.itemsize;
      p.red_count *= self.sizes[d];
      ++p.nr;
    } else {
      p.ksizes[p.nk] = self.sizes[d];
      p.kstrides[p.nk] = self.strides[d] * self.itemsize;
      for (int o = 0; o < nouts; ++o) {
        const TensorArg& out = outs[o];
        const int32_t od = out.ndim == self.ndim ? d : kept_before;
        if (od >= out.ndim || out.sizes[od] != self.sizes[d])
          invalid_argument(op, ": output ", o, " does not have the kept size ", self.sizes[d], " of dim ", d);
        p.ostrides[o][p.nk] = out.strides[od] * out.itemsize;
      }
      p.out_count *= self.sizes[d];
      ++p.nk;
      ++kept_before;
    }
  }
  for (int o = 0; o < nouts; ++o) {
    if (outs[o].numel != p.out_count)
      invalid_argument(op, ": output ", o, " has ", outs[o].numel, " elements; expected ", p.out_count);
    p.out[o] = outs[o].data;
    p.out_dtype[o] = outs[o].dtype;
  }
  return p;
}

// Calls acc.add(value, r) for reduced elements [rb, re) of the output whose
// self offset is `base`, r their row-major position among the reduced elements.
template <class T, class Acc>
void reduce_range(const RPlan& p, const char* base, int64_t rb, int64_t re, Acc& acc) {
  if (rb >= re) return;
  if (p.nr == 0) {
    acc.add(to_compute(*reinterpret_cast<const T*>(base)), 0);
    return;
  }
  const int inner = p.nr - 1;
  const int64_t n = p.rsizes[inner], st = p.rstrides[inner];
  int64_t idx[kMaxDims];
  int64_t row = rb / n, col = rb % n;
  const char* ptr = base;
  for (int d = inner - 1; d >= 0; --d) {
    idx[d] = row % p.rsizes[d];
    row /= p.rsizes[d];
    ptr += idx[d] * p.rstrides[d];
  }
  int64_t r = rb;
  while (r < re) {
    const int64_t len = std::min(n - col, re - r);
    const char* q = ptr + col * st;
    for (int64_t i = 0; i < len; ++i, q += st) acc.add(to_compute(*reinterpret_cast<const T*>(q)), r + i);
    r += len;
    col = 0;
    for (int d = inner - 1; d >= 0; --d) {
      ptr += p.rstrides[d];
      if (++idx[d] < p.rsizes[d]) break;
      ptr -= p.rstrides[d] * p.rsizes[d];
      idx[d] = 0;
    }
  }
}

const char* output_base(const RPlan& p, int64_t j, int64_t* out_off) {
  const char* base = p.in;
  out_off[0] = out_off[1] = 0;
  for (int d = p.nk - 1; d >= 0; --d) {
    const int64_t i = j % p.ksizes[d];
    j /= p.ksizes[d];
    base += i * p.kstrides[d];
    out_off[0] += i * p.ostrides[0][d];
    out_off[1] += i * p.ostrides[1][d];
  }
  return base;
}

constexpr int64_t kRedChunk = int64_t{1} << 15;

// Runs Acc (default-constructible from `proto`, with add/merge/write) over the plan.
template <class T, class Acc>
void run_reduction(const RPlan& p, const Acc& proto) {
  ThreadPool& pool = ThreadPool::instance();
  if (p.out_count >= 4 * pool.parallelism() || p.red_count < 2 * kRedChunk) {
    // Outputs in tasks of about kRedChunk reduced elements each.
    const int64_t per = std::max<int64_t>(1, kRedChunk / std::max<int64_t>(p.red_count, 1));
    const int64_t tasks = (p.out_count + per - 1) / per;
    auto body = [&](int64_t t) {
      for (int64_t j = t * per, je = std::min(p.out_count, (t + 1) * per); j < je; ++j) {
        int64_t off[2];
        const char* base = output_base(p, j, off);
        Acc acc = proto;
        reduce_range<T>(p, base, 0, p.red_count, acc);
        acc.write(p, off);
      }
    };
    if (tasks == 1) body(0);
    else pool.parallel_for(tasks, body);
    return;
  }
  const int64_t chunks = (p.red_count + kRedChunk - 1) / kRedChunk;
  std::vector<Acc> part(static_cast<size_t>(chunks), proto);
  for (int64_t j = 0; j < p.out_count; ++j) {
    int64_t off[2];
    const char* base = output_base(p, j, off);
    std::fill(part.begin(), part.end(), proto);
    pool.parallel_for(chunks, [&](int64_t c) {
      reduce_range<T>(p, base, c * kRedChunk, std::min(p.red_count, (c + 1) * kRedChunk), part[static_cast<size_t>(c)]);
    });
    Acc acc = proto;
    for (const Acc& a : part) acc.merge(a);
    acc.write(p, off);
  }
}

template <class V>
void store_as(char* dst, int32_t dtype, V v) {
  dispatch_dtype(dtype, [&](auto tag) {
    using O = typename decltype(tag)::type;
    *reinterpret_cast<O*>(dst) = convert<O>(v);
  });
}

// ---------------------------------------------------------------------------
// Accumulators
// ---------------------------------------------------------------------------

// max/min with the position of the first extreme; NaN wins (first NaN).
template <class C, bool kMax>
struct Extreme {
  C value{};
  int64_t index = -1;
  bool nan = false;
  void add(C v, int64_t r) {
    if (nan) return;
    if constexpr (std::is_floating_point_v<C>) {
      if (v != v) {
        value = v;
        index = r;
        nan = true;
        return;
      }
    }
    if (index < 0 || (kMax ? v > value : v < value)) {
      value = v;
      index = r;
    }
  }
  void merge(const Extreme& o) {
    if (o.index < 0 || nan) return;
    if (o.nan || index < 0 || (kMax ? o.value > value : o.value < value)) *this = o;
  }
};

enum class ExtremeOut { Values, Indices, Both };

template <class T, bool kMax, ExtremeOut what>
struct ExtremeAcc : Extreme<compute_t<T>, kMax> {
  void write(const RPlan& p, const int64_t* off) const {
    if (what == ExtremeOut::Indices) {
      store_as(p.out[0] + off[0], p.out_dtype[0], this->index);
      return;
    }
    store_as(p.out[0] + off[0], p.out_dtype[0], convert<T>(this->value));
    if (what == ExtremeOut::Both) store_as(p.out[1] + off[1], p.out_dtype[1], this->index);
  }
  void merge(const ExtremeAcc& o) { Extreme<compute_t<T>, kMax>::merge(o); }
};

// Welford's running mean and squared deviations, merged with Chan's formula.
template <class T>
struct Moments {
  double n = 0, mean = 0, m2 = 0;
  double correction = 1;
  bool take_sqrt = false;
  bool with_mean = false;  // var_mean / std_mean: output 1 is the mean
  template <class C>
  void add(C v, int64_t) {
    const double x = static_cast<double>(v);
    n += 1;
    const double d = x - mean;
    mean += d / n;
    m2 += d * (x - mean);
  }
  void merge(const Moments& o) {
    if (o.n == 0) return;
    if (n == 0) {
      n = o.n;
      mean = o.mean;
      m2 = o.m2;
      return;
    }
    const double total = n + o.n, d = o.mean - mean;
    mean += d * o.n / total;
    m2 += o.m2 + d * d * n * o.n / total;
    n = total;
  }
  void write(const RPlan& p, const int64_t* off) const {
    double var = m2 / std::max(0.0, n - correction);
    if (n == 0) var = std::nan("");
    store_as(p.out[0] + off[0], p.out_dtype[0], convert<T>(take_sqrt ? std::sqrt(var) : var));
    if (with_mean) store_as(p.out[1] + off[1], p.out_dtype[1], convert<T>(n == 0 ? std::nan("") : mean));
  }
};

template <bool kAll>
struct Truth {
  bool value = kAll;
  template <class C>
  void add(C v, int64_t) {
    if (kAll) value = value && v != C(0);
    else value = value || v != C(0);
  }
  void merge(const Truth& o) { value = kAll ? (value && o.value) : (value || o.value); }
  void write(const RPlan& p, const int64_t* off) const { store_as(p.out[0] + off[0], p.out_dtype[0], value); }
};

template <bool kFloating>
struct Product {
  std::conditional_t<kFloating, double, int64_t> value = 1;
  template <class C>
  void add(C v, int64_t) {
    if constexpr (kFloating) value *= static_cast<double>(v);
    else value = static_cast<int64_t>(static_cast<uint64_t>(value) * static_cast<uint64_t>(static_cast<int64_t>(v)));
  }
  void merge(const Product& o) {
    if constexpr (kFloating) value *= o.value;
    else value = static_cast<int64_t>(static_cast<uint64_t>(value) * static_cast<uint64_t>(o.value));
  }
  void write(const RPlan& p, const int64_t* off) const { store_as(p.out[0] + off[0], p.out_dtype[0], value); }
};

// ---------------------------------------------------------------------------
// Launch helpers
// ---------------------------------------------------------------------------

struct DimArg {
  std::vector<int64_t> dims;
  bool all = true;
};

// An int (dim), int[] (dims; empty = all) or None argument.
DimArg dim_arg(const Launch& L, size_t i) {
  DimArg a;
  if (!L.has_input(i)) return a;
  const TFL_Value& v = L.input(i, "dim");
  if (v.tag == TFL_VALUE_INT) {
    a.dims.push_back(v.v.i);
    a.all = false;
  } else if (v.tag == TFL_VALUE_INT_LIST) {
    a.dims.assign(v.v.ints.data, v.v.ints.data + v.v.ints.size);
    a.all = a.dims.empty();
  } else {
    invalid_argument("argument ", i, " (dim) must be an int, an int list or None, got tag ", v.tag);
  }
  return a;
}

template <class MakeAcc>
void launch_reduction(const Launch& L, const char* op, const TensorArg& self, const DimArg& dims, int nouts,
                      bool needs_elements, MakeAcc make) {
  TensorArg outs[2];
  for (int o = 0; o < nouts; ++o) outs[o] = L.output(static_cast<size_t>(o), o == 0 ? "out" : "out 1");
  if (self.ndim > kMaxDims) decline(op, ": more than ", kMaxDims, " dims");
  const std::vector<bool> reduced = reduced_set(self.ndim, dims.dims.data(), dims.dims.size(), dims.all, op);
  auto plan = std::make_shared<RPlan>(plan_reduction(self, reduced, outs, nouts, op));
  if (plan->out_count == 0) return;
  if (needs_elements && plan->red_count == 0)
    invalid_argument(op, ": cannot reduce over a zero-size dimension (the input has no elements to select)");
  dispatch_dtype(self.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto acc = make(TypeTag<T>{});
    L.enqueue([acc, plan] { run_reduction<T>(*plan, acc); });
  });
}

template <bool kMax>
TFL_Error* extreme_all(const TFL_Kernel_Args* args, int32_t id, const char* op) {
  return run_kernel(args, id, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self");
    launch_reduction(L, op, self, DimArg{}, 1, true, [](auto tag) {
      return ExtremeAcc<typename decltype(tag)::type, kMax, ExtremeOut::Values>{};
    });
  });
}

template <bool kMax>
TFL_Error* extreme_dim(const TFL_Kernel_Args* args, int32_t id, const char* op) {
  // max.dim(self, dim, keepdim) -> (values, indices)
  return run_kernel(args, id, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self");
    launch_reduction(L, op, self, dim_arg(L, 1), 2, true, [](auto tag) {
      return ExtremeAcc<typename decltype(tag)::type, kMax, ExtremeOut::Both>{};
    });
  });
}

template <bool kMax>
TFL_Error* arg_extreme(const TFL_Kernel_Args* args, int32_t id, const char* op) {
  // argmax(self, dim=None, keepdim=False): None reduces the flattened tensor.
  return run_kernel(args, id, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self");
    launch_reduction(L, op, self, dim_arg(L, 1), 1, true, [](auto tag) {
      return ExtremeAcc<typename decltype(tag)::type, kMax, ExtremeOut::Indices>{};
    });
  });
}

template <bool kMax>
TFL_Error* a_extreme(const TFL_Kernel_Args* args, int32_t id, const char* op) {
  // amax(self, dim=[], keepdim=False)
  return run_kernel(args, id, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self");
    launch_reduction(L, op, self, dim_arg(L, 1), 1, true, [](auto tag) {
      return ExtremeAcc<typename decltype(tag)::type, kMax, ExtremeOut::Values>{};
    });
  });
}

TFL_Error* moments(const TFL_Kernel_Args* args, int32_t id, const char* op, bool take_sqrt, bool with_mean) {
  // var.correction(self, dim=None, *, correction=None, keepdim=False) and friends
  return run_kernel(args, id, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self");
    if (!dtype_is_floating(self.dtype)) decline(op, " of a ", dtype_name(self.dtype), " tensor");
    const double correction = L.has_input(2) ? L.scalar(2, "correction").to_double() : 1.0;
    launch_reduction(L, op, self, dim_arg(L, 1), with_mean ? 2 : 1, false, [&](auto tag) {
      Moments<typename decltype(tag)::type> m;
      m.correction = correction;
      m.take_sqrt = take_sqrt;
      m.with_mean = with_mean;
      return m;
    });
  });
}

template <bool kAll>
TFL_Error* truth(const TFL_Kernel_Args* args, int32_t id, const char* op, bool has_dim) {
  return run_kernel(args, id, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self");
    launch_reduction(L, op, self, has_dim ? dim_arg(L, 1) : DimArg{}, 1, false, [](auto) { return Truth<kAll>{}; });
  });
}

}  // namespace

TFL_Error* kernel_max_all(const TFL_Kernel_Args* a) { return extreme_all<true>(a, kMaxAll, "max"); }
TFL_Error* kernel_min_all(const TFL_Kernel_Args* a) { return extreme_all<false>(a, kMinAll, "min"); }
TFL_Error* kernel_max_dim(const TFL_Kernel_Args* a) { return extreme_dim<true>(a, kMaxDim, "max.dim"); }
TFL_Error* kernel_min_dim(const TFL_Kernel_Args* a) { return extreme_dim<false>(a, kMinDim, "min.dim"); }
TFL_Error* kernel_argmax(const TFL_Kernel_Args* a) { return arg_extreme<true>(a, kArgmax, "argmax"); }
TFL_Error* kernel_argmin(const TFL_Kernel_Args* a) { return arg_extreme<false>(a, kArgmin, "argmin"); }
TFL_Error* kernel_amax(const TFL_Kernel_Args* a) { return a_extreme<true>(a, kAmax, "amax"); }
TFL_Error* kernel_amin(const TFL_Kernel_Args* a) { return a_extreme<false>(a, kAmin, "amin"); }
TFL_Error* kernel_var_correction(const TFL_Kernel_Args* a) { return moments(a, kVarCorrection, "var", false, false); }
TFL_Error* kernel_std_correction(const TFL_Kernel_Args* a) { return moments(a, kStdCorrection, "std", true, false); }
TFL_Error* kernel_var_mean_correction(const TFL_Kernel_Args* a) {
  return moments(a, kVarMeanCorrection, "var_mean", false, true);
}
TFL_Error* kernel_std_mean_correction(const TFL_Kernel_Args* a) {
  return moments(a, kStdMeanCorrection, "std_mean", true, true);
}
TFL_Error* kernel_all(const TFL_Kernel_Args* a) { return truth<true>(a, kAllReduce, "all", false); }
TFL_Error* kernel_any(const TFL_Kernel_Args* a) { return truth<false>(a, kAnyReduce, "any", false); }
TFL_Error* kernel_all_dim(const TFL_Kernel_Args* a) { return truth<true>(a, kAllDim, "all.dim", true); }
TFL_Error* kernel_any_dim(const TFL_Kernel_Args* a) { return truth<false>(a, kAnyDim, "any.dim", true); }
TFL_Error* kernel_all_dims(const TFL_Kernel_Args* a) { return truth<true>(a, kAllDims, "all.dims", true); }
TFL_Error* kernel_any_dims(const TFL_Kernel_Args* a) { return truth<false>(a, kAnyDims, "any.dims", true); }

TFL_Error* kernel_prod(const TFL_Kernel_Args* args) {
  // prod(self, *, dtype=None): the output dtype (from the host) decides.
  return run_kernel(args, kProd, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self"), out = L.output(0, "out");
    if (dtype_is_floating(out.dtype)) {
      launch_reduction(L, "prod", self, DimArg{}, 1, false, [](auto) { return Product<true>{}; });
    } else {
      if (dtype_is_floating(self.dtype)) decline("prod of a floating tensor into an integral output");
      launch_reduction(L, "prod", self, DimArg{}, 1, false, [](auto) { return Product<false>{}; });
    }
  });
}

}  // namespace flemu
