// Kernels that work along one dim of a tensor, slice by slice: sort (stable),
// topk, and the scans cumsum / cumprod; and flip (cumsum's backward).
//
// NaN orders above every number, as in PyTorch: last in an ascending sort,
// first in a descending one and in topk(largest=True). Equal values keep
// their original order (every sort here is stable), and topk breaks ties by
// the lower index, so results do not depend on the thread count. Scans
// accumulate in double for float32/float64 and in float for float16/bfloat16
// (PyTorch's CPU accumulation types), after converting the input to the
// output dtype.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "support/elementwise_launch.h"
#include "support/nn_common.h"
#include "support/registry.h"

namespace flemu {
namespace {

// A tensor split into slices along `dim`: slice j starts at offset(t, j)
// elements and steps by the tensor's stride of `dim`.
struct Slices {
  int32_t dim = 0;
  int64_t count = 1;  // slices
  int64_t len = 1;    // elements of self per slice

  // Element offset of slice j in tensor t (same sizes as self outside `dim`).
  int64_t offset(const Strided& t, int64_t j) const {
    int64_t off = 0;
    for (int32_t d = t.ndim - 1; d >= 0; --d) {
      if (d == dim) continue;
      off += (j % t.sizes[d]) * t.strides[d];
      j /= t.sizes[d];
    }
    return off;
  }
  int64_t step(const Strided& t) const { return t.ndim == 0 ? 0 : t.strides[dim]; }
};

Slices slices_of(const TensorArg& self, int64_t dim, const char* op) {
  const int64_t wrap = std::max<int32_t>(self.ndim, 1);
  if (dim < -wrap || dim >= wrap)
    invalid_argument(op, ": dim ", dim, " is out of range for a tensor with ", self.ndim, " dims (expected ", -wrap, "..",
                     wrap - 1, ")");
  Slices s;
  s.dim = static_cast<int32_t>(dim < 0 ? dim + wrap : dim);
  s.len = self.ndim == 0 ? 1 : self.sizes[s.dim];
  s.count = s.len == 0 ? 0 : self.numel / s.len;
  return s;
}

// Checks that `out` has self's sizes except `len` along the slice dim.
void require_slice_shape(const TensorArg& self, const TensorArg& out, const Slices& s, int64_t len, const char* op,
                         const char* what) {
  bool ok = out.ndim == self.ndim;
  for (int32_t d = 0; ok && d < self.ndim; ++d) ok = out.sizes[d] == (d == s.dim ? len : self.sizes[d]);
  if (!ok) invalid_argument(op, ": ", what, " does not have the expected shape (self's, with ", len, " along dim ", s.dim, ")");
}

// Strict orders with NaN above every number.
template <class C>
bool less_nan_last(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (b != b) return a == a;
    if (a != a) return false;
  }
  return a < b;
}

template <class C>
bool greater_nan_first(C a, C b) {
  if constexpr (std::is_floating_point_v<C>) {
    if (a != a) return b == b;
    if (b != b) return false;
  }
  return a > b;
}

// Loads slice j of self (dtype T) into vals, in compute type.
template <class T>
void load_slice(const Strided& self, const Slices& s, int64_t j, std::vector<compute_t<T>>& vals) {
  const T* p = reinterpret_cast<const T*>(self.data) + s.offset(self, j);
  const int64_t st = s.step(self);
  vals.resize(static_cast<size_t>(s.len));
  for (int64_t i = 0; i < s.len; ++i) vals[static_cast<size_t>(i)] = to_compute(p[i * st]);
}

// Writes the first n entries of `order` (positions in the slice) as values and indices.
template <class T>
void store_slice(const Strided& values, const Strided& indices, const Slices& s, int64_t j,
                 const std::vector<compute_t<T>>& vals, const std::vector<int64_t>& order, int64_t n) {
  T* v = reinterpret_cast<T*>(values.data) + s.offset(values, j);
  int64_t* ix = reinterpret_cast<int64_t*>(indices.data) + s.offset(indices, j);
  const int64_t vs = s.step(values), is = s.step(indices);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = order[static_cast<size_t>(i)];
    v[i * vs] = convert<T>(vals[static_cast<size_t>(k)]);
    ix[i * is] = k;
  }
}

// Slices per parallel chunk: about 32K elements of work each.
int64_t slice_grain(int64_t len) { return std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(len, 1)); }

struct SelectJob {
  Strided self, values, indices;
  Slices s;
  int64_t k = 0;  // outputs per slice
  bool descending = false;
  bool topk = false;
};

template <class T>
void run_select(const SelectJob& j) {
  using C = compute_t<T>;
  parallel_chunks(j.s.count, slice_grain(j.s.len), [&](int64_t b, int64_t e) {
    std::vector<C> vals;
    std::vector<int64_t> order(static_cast<size_t>(j.s.len));
    for (int64_t sl = b; sl < e; ++sl) {
      load_slice<T>(j.self, j.s, sl, vals);
      std::iota(order.begin(), order.end(), int64_t{0});
      if (j.topk) {
        // Ties (and NaNs) by the lower index: a total order, so partial_sort is deterministic.
        auto before = [&](int64_t x, int64_t y) {
          const C a = vals[static_cast<size_t>(x)], c = vals[static_cast<size_t>(y)];
          if (j.descending ? greater_nan_first(a, c) : less_nan_last(a, c)) return true;
          if (j.descending ? greater_nan_first(c, a) : less_nan_last(c, a)) return false;
          return x < y;
        };
        std::partial_sort(order.begin(), order.begin() + j.k, order.end(), before);
      } else if (j.descending) {
        std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
          return greater_nan_first(vals[static_cast<size_t>(x)], vals[static_cast<size_t>(y)]);
        });
      } else {
        std::stable_sort(order.begin(), order.end(), [&](int64_t x, int64_t y) {
          return less_nan_last(vals[static_cast<size_t>(x)], vals[static_cast<size_t>(y)]);
        });
      }
      store_slice<T>(j.values, j.indices, j.s, sl, vals, order, j.k);
    }
  });
}

void launch_select(const Launch& L, SelectJob& j, const TensorArg& self, const char* op) {
  const TensorArg values = L.output(0, "values"), indices = L.output(1, "indices");
  if (values.dtype != self.dtype)
    invalid_argument(op, ": values has dtype ", dtype_name(values.dtype), "; expected self's ", dtype_name(self.dtype));
  if (indices.dtype != TFL_DTYPE_INT64) invalid_argument(op, ": indices must be int64, got ", dtype_name(indices.dtype));
  require_slice_shape(self, values, j.s, j.k, op, "values");
  require_slice_shape(self, indices, j.s, j.k, op, "indices");
  j.self = strided(self, "self");
  j.values = strided(values, "values");
  j.indices = strided(indices, "indices");
  if (j.s.count == 0 || j.k == 0) return;
  dispatch_dtype(self.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    L.enqueue([j] { run_select<T>(j); });
  });
}

// Scans: out[i] = op(out[i-1], x[i]) along the dim.
struct ScanJob {
  Strided self, out;
  Slices s;
  bool prod = false;
};

template <class T>
using scan_acc_t = std::conditional_t<std::is_floating_point_v<T>, double, compute_t<T>>;

template <class T>
void run_scan(const ScanJob& j) {
  using A = scan_acc_t<T>;
  const bool same = j.self.dtype == j.out.dtype;
  const LoadF64 load_f = loader_f64(j.self.dtype);
  const LoadI64 load_i = loader_i64(j.self.dtype);
  const int64_t item = dtype_size(j.self.dtype);
  parallel_chunks(j.s.count, slice_grain(j.s.len), [&](int64_t b, int64_t e) {
    for (int64_t sl = b; sl < e; ++sl) {
      const char* in = j.self.data + j.s.offset(j.self, sl) * item;
      const int64_t in_step = j.s.step(j.self) * item;
      T* out = reinterpret_cast<T*>(j.out.data) + j.s.offset(j.out, sl);
      const int64_t out_step = j.s.step(j.out);
      A acc = j.prod ? A(1) : A(0);
      for (int64_t i = 0; i < j.s.len; ++i, in += in_step) {
        // The input is first converted to the output dtype, as PyTorch does.
        T x;
        if (same) x = *reinterpret_cast<const T*>(in);
        else if constexpr (is_floating_v<T>) x = convert<T>(load_f(in));
        else x = convert<T>(load_i(in));
        const A v = static_cast<A>(to_compute(x));
        if constexpr (std::is_integral_v<A>) {
          // Integers wrap on overflow (two's complement), without undefined behaviour.
          const uint64_t ua = static_cast<uint64_t>(acc), uv = static_cast<uint64_t>(v);
          acc = static_cast<A>(j.prod ? ua * uv : ua + uv);
        } else {
          acc = j.prod ? acc * v : acc + v;
        }
        out[i * out_step] = convert<T>(acc);
      }
    }
  });
}

void launch_scan(const Launch& L, bool prod) {
  const char* op = prod ? "cumprod" : "cumsum";
  const TensorArg self = L.input_tensor(0, "self"), out = L.output(0, "out");
  ScanJob j;
  j.prod = prod;
  j.s = slices_of(self, int_arg(L, 1, "dim"), op);
  require_slice_shape(self, out, j.s, j.s.len, op, "out");
  if (out.dtype == TFL_DTYPE_BOOL) decline(op, " into a bool output");
  j.self = strided(self, "self");
  j.out = strided(out, "out");
  if (j.s.count == 0) return;
  dispatch_dtype(out.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, bool>) L.enqueue([j] { run_scan<T>(j); });
  });
}

// flip: out[i] = self[i with the flipped dims mirrored]; a byte copy per element.
struct FlipJob {
  Strided self, out;
  bool flipped[kMaxLoopDims] = {};
  int64_t item = 0;
};

void run_flip(const FlipJob& j) {
  parallel_chunks(j.out.numel, int64_t{1} << 14, [&](int64_t b, int64_t e) {
    Cursor dst(j.out, b);
    for (int64_t i = b; i < e; ++i, dst.next()) {
      int64_t src = 0;
      for (int32_t d = 0; d < j.self.ndim; ++d) {
        const int64_t at = j.flipped[d] ? j.self.sizes[d] - 1 - dst.idx[d] : dst.idx[d];
        src += at * j.self.strides[d];
      }
      std::memcpy(dst.ptr, j.self.data + src * j.item, static_cast<size_t>(j.item));
    }
  });
}

}  // namespace

TFL_Error* kernel_flip(const TFL_Kernel_Args* args) {
  return run_kernel(args, kFlip, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self"), out = L.output(0, "out");
    if (out.dtype != self.dtype || out.ndim != self.ndim)
      invalid_argument("flip: out must have self's dtype and dims");
    for (int32_t d = 0; d < self.ndim; ++d)
      if (out.sizes[d] != self.sizes[d]) invalid_argument("flip: out must have self's sizes");
    FlipJob j;
    j.self = strided(self, "self");
    j.out = strided(out, "out");
    j.item = self.itemsize;
    const int64_t wrap = std::max<int32_t>(self.ndim, 1);
    for (int64_t d : int_list(L, 1, "dims")) {
      if (d < -wrap || d >= wrap)
        invalid_argument("flip: dim ", d, " is out of range for a tensor with ", self.ndim, " dims (expected ", -wrap,
                         "..", wrap - 1, ")");
      if (d < 0) d += wrap;
      if (self.ndim == 0) continue;
      if (j.flipped[d]) invalid_argument("flip: dim ", d, " appears more than once in dims");
      j.flipped[d] = true;
    }
    if (out.numel == 0) return;
    L.enqueue([j] { run_flip(j); });
  });
}

TFL_Error* kernel_sort_stable(const TFL_Kernel_Args* args) {
  // sort.stable(self, *, bool? stable, int dim=-1, bool descending=False): always stable.
  return run_kernel(args, kSortStable, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self");
    SelectJob j;
    j.s = slices_of(self, int_arg(L, 2, "dim"), "sort");
    j.k = j.s.len;
    j.descending = L.boolean_or(3, false, "descending");
    launch_select(L, j, self, "sort");
  });
}

TFL_Error* kernel_topk(const TFL_Kernel_Args* args) {
  // topk(self, k, dim=-1, largest=True, sorted=True): the result is always sorted.
  return run_kernel(args, kTopk, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self");
    SelectJob j;
    j.s = slices_of(self, int_arg(L, 2, "dim"), "topk");
    j.k = int_arg(L, 1, "k");
    if (j.k < 0 || j.k > j.s.len)
      invalid_argument("topk: k=", j.k, " is out of range for a dim of size ", j.s.len, " (expected 0..", j.s.len, ")");
    j.descending = L.boolean_or(3, true, "largest");
    j.topk = true;
    launch_select(L, j, self, "topk");
  });
}

TFL_Error* kernel_cumsum(const TFL_Kernel_Args* args) {
  return run_kernel(args, kCumsum, [&](Launch& L) { launch_scan(L, false); });
}

TFL_Error* kernel_cumprod(const TFL_Kernel_Args* args) {
  return run_kernel(args, kCumprod, [&](Launch& L) { launch_scan(L, true); });
}

}  // namespace flemu
