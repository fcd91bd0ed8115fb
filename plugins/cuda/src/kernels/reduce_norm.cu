// Reductions and normalizations: sum/mean over dims, softmax and
// log_softmax (and their backwards), layer norm, batch norm (the
// native_batch_norm family) and the nll_loss pieces of cross-entropy.
//
// Accumulation is in float (double for float64 data, and for batch-norm
// statistics, whose E[x^2] - E[x]^2 would lose digits in float).
#include <cmath>
#include <vector>

#include "block_reduce.cuh"
#include "device_access.cuh"
#include "kernel_call.h"
#include "kernel_entry_points.h"
#include "tensor_ref.h"

namespace flcuda {

namespace {

constexpr int kThreads = 256;

// ===========================================================================
// sum / mean over dims
// ===========================================================================

// Dims split into kept (one output each) and reduced ones, outermost first.
struct ReducePlan {
  int32_t kept_ndim, red_ndim;
  int64_t kept_sizes[kPlanDims], kept_in_strides[kPlanDims], kept_out_strides[kPlanDims];
  int64_t red_sizes[kPlanDims], red_strides[kPlanDims];
  int64_t M, R;  // outputs, elements per output
  const char* in;
  char* out;
  int32_t in_dtype, out_dtype;
  double scale;  // 1 for sum, 1/R for mean
};

__device__ __forceinline__ int64_t decompose(int64_t i, int32_t nd, const int64_t* sizes, const int64_t* strides) {
  int64_t off = 0;
  for (int d = nd - 1; d >= 0; --d) {
    off += (i % sizes[d]) * strides[d];
    i /= sizes[d];
  }
  return off;
}

__device__ __forceinline__ int64_t decompose2(int64_t i, int32_t nd, const int64_t* sizes, const int64_t* s1,
                                              const int64_t* s2, int64_t* off2) {
  int64_t off = 0, o2 = 0;
  for (int d = nd - 1; d >= 0; --d) {
    const int64_t idx = i % sizes[d];
    off += idx * s1[d];
    o2 += idx * s2[d];
    i /= sizes[d];
  }
  *off2 = o2;
  return off;
}

// One block per output; threads walk the reduced elements.
template <class Acc>
__global__ void reduce_rows_kernel(ReducePlan p) {
  for (int64_t m = blockIdx.x; m < p.M; m += gridDim.x) {
    int64_t out_off = 0;
    const int64_t base = decompose2(m, p.kept_ndim, p.kept_sizes, p.kept_in_strides, p.kept_out_strides, &out_off);
    Acc acc = 0;
    for (int64_t r = threadIdx.x; r < p.R; r += blockDim.x)
      acc += load_as<Acc>(p.in + base + decompose(r, p.red_ndim, p.red_sizes, p.red_strides), p.in_dtype);
    acc = block_sum(acc);
    if (threadIdx.x == 0) store_as<Acc>(p.out + out_off, p.out_dtype, acc * static_cast<Acc>(p.scale));
  }
}

// Block per (output, slice of the reduced range), threads walking the slice
// with unit stride: partial sums to ws[s][m]. For few long contiguous rows.
template <class Acc>
__global__ void reduce_row_slices_kernel(ReducePlan p, int64_t slices, Acc* ws) {
  const int64_t m = blockIdx.x, s = blockIdx.y;
  const int64_t chunk = (p.R + slices - 1) / slices;
  const int64_t base = decompose(m, p.kept_ndim, p.kept_sizes, p.kept_in_strides);
  const int64_t end = min(p.R, (s + 1) * chunk);
  Acc acc = 0;
  for (int64_t r = s * chunk + threadIdx.x; r < end; r += blockDim.x)
    acc += load_as<Acc>(p.in + base + decompose(r, p.red_ndim, p.red_sizes, p.red_strides), p.in_dtype);
  acc = block_sum(acc);
  if (threadIdx.x == 0) ws[s * p.M + m] = acc;
}

// Thread per (output, slice of the reduced range): partial sums to ws[s][m].
template <class Acc>
__global__ void reduce_columns_kernel(ReducePlan p, int64_t slices, Acc* ws) {
  const int64_t total = p.M * slices;
  const int64_t chunk = (p.R + slices - 1) / slices;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = t % p.M, s = t / p.M;
    const int64_t base = decompose(m, p.kept_ndim, p.kept_sizes, p.kept_in_strides);
    Acc acc = 0;
    const int64_t end = min(p.R, (s + 1) * chunk);
    for (int64_t r = s * chunk; r < end; ++r)
      acc += load_as<Acc>(p.in + base + decompose(r, p.red_ndim, p.red_sizes, p.red_strides), p.in_dtype);
    ws[s * p.M + m] = acc;
  }
}

template <class Acc>
__global__ void reduce_finish_kernel(ReducePlan p, int64_t slices, const Acc* ws) {
  for (int64_t m = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; m < p.M;
       m += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Acc acc = 0;
    for (int64_t s = 0; s < slices; ++s) acc += ws[s * p.M + m];
    int64_t out_off = 0;
    decompose2(m, p.kept_ndim, p.kept_sizes, p.kept_in_strides, p.kept_out_strides, &out_off);
    store_as<Acc>(p.out + out_off, p.out_dtype, acc * static_cast<Acc>(p.scale));
  }
}

template <class Acc>
void launch_reduce(const KernelCall& call, ReducePlan& p, bool rows, bool inner_reduced) {
  if (p.M == 0) return;
  if (p.R == 0) {
    // Sum of nothing is 0; mean of nothing is NaN, as in PyTorch.
    p.scale = p.scale == 1.0 ? 0.0 : NAN;
    p.R = 0;
  }
  if (rows) {
    reduce_rows_kernel<Acc><<<static_cast<unsigned>(std::min<int64_t>(p.M, 65535 * 8)), kThreads, 0, call.stream()>>>(p);
  } else if (inner_reduced && p.M <= 65535) {
    // Each block takes at least 16K elements of one row; ~1K blocks in all.
    const int64_t slices = std::max<int64_t>(1, std::min<int64_t>((p.R + 16383) / 16384, std::max<int64_t>(1, 1024 / p.M)));
    Acc* ws = static_cast<Acc*>(call.workspace(static_cast<size_t>(slices * p.M) * sizeof(Acc)));
    reduce_row_slices_kernel<Acc><<<dim3(static_cast<unsigned>(p.M), static_cast<unsigned>(slices)), kThreads, 0,
                                    call.stream()>>>(p, slices, ws);
    reduce_finish_kernel<Acc><<<grid_for(p.M, kThreads), kThreads, 0, call.stream()>>>(p, slices, ws);
  } else {
    int64_t slices = std::min<int64_t>((p.R + 31) / 32, std::max<int64_t>(1, 262144 / p.M));
    slices = std::max<int64_t>(1, std::min<int64_t>(slices, 1024));
    Acc* ws = static_cast<Acc*>(call.workspace(static_cast<size_t>(slices * p.M) * sizeof(Acc)));
    reduce_columns_kernel<Acc><<<grid_for(p.M * slices, kThreads), kThreads, 0, call.stream()>>>(p, slices, ws);
    reduce_finish_kernel<Acc><<<grid_for(p.M, kThreads), kThreads, 0, call.stream()>>>(p, slices, ws);
  }
  call.check_launch("reduction");
}

// all_dims: aten::sum / aten::mean, whose argument 1 is the dtype, not dims.
void reduce_dims(KernelCall& call, bool mean, const char* op, bool all_dims = false) {
  const TFL_Tensor* x = call.tensor(0, "self");
  const TFL_Tensor* out = call.required_output(0);
  if (mean && !is_floating(out->dtype)) tfl::unimplemented("mean of an integral result dtype");
  std::vector<bool> reduced(static_cast<size_t>(x->ndim), false);
  std::vector<int64_t> dims;
  if (!all_dims && call.has_input(1)) dims = call.ints(1, "dim");
  if (dims.empty()) {
    std::fill(reduced.begin(), reduced.end(), true);
  } else {
    for (int64_t d : dims) {
      const int64_t nd = std::max<int64_t>(x->ndim, 1);
      const int64_t w = d < 0 ? d + nd : d;
      if (w < 0 || w >= nd) tfl::invalid_argument("dim ", d, " is out of range for ", x->ndim, " dimensions");
      if (x->ndim > 0) reduced[static_cast<size_t>(w)] = true;
    }
  }
  const bool keepdim = !all_dims && call.boolean_or(2, false, "keepdim");
  ReducePlan p{};
  p.in = static_cast<const char*>(x->data);
  p.out = static_cast<char*>(out->data);
  p.in_dtype = x->dtype;
  p.out_dtype = out->dtype;
  const int64_t in_is = itemsize_of(x->dtype), out_is = itemsize_of(out->dtype);
  p.M = 1;
  p.R = 1;
  // Map each kept input dim to its output dim.
  int32_t out_dim = 0;
  struct Dim { int64_t size, stride, out_stride; };
  std::vector<Dim> kept, red;
  for (int32_t d = 0; d < x->ndim; ++d) {
    const int64_t size = x->sizes[d];
    if (reduced[static_cast<size_t>(d)]) {
      if (keepdim) ++out_dim;
      if (size != 1) red.push_back({size, x->strides[d] * in_is, 0});
      p.R *= size;
    } else {
      if (out_dim >= out->ndim) tfl::invalid_argument("output has too few dimensions");
      if (size != 1) kept.push_back({size, x->strides[d] * in_is, out->strides[out_dim] * out_is});
      ++out_dim;
      p.M *= size;
    }
  }
  // The reduced dims walked with the smallest input stride innermost.
  std::stable_sort(red.begin(), red.end(), [](const Dim& a, const Dim& b) { return a.stride > b.stride; });
  if (kept.size() > static_cast<size_t>(kPlanDims) || red.size() > static_cast<size_t>(kPlanDims))
    tfl::unimplemented(op, " over more than ", kPlanDims, " dimensions");
  p.kept_ndim = static_cast<int32_t>(kept.size());
  p.red_ndim = static_cast<int32_t>(red.size());
  for (size_t i = 0; i < kept.size(); ++i) {
    p.kept_sizes[i] = kept[i].size;
    p.kept_in_strides[i] = kept[i].stride;
    p.kept_out_strides[i] = kept[i].out_stride;
  }
  for (size_t i = 0; i < red.size(); ++i) {
    p.red_sizes[i] = red[i].size;
    p.red_strides[i] = red[i].stride;
  }
  p.scale = mean ? (p.R > 0 ? 1.0 / static_cast<double>(p.R) : NAN) : 1.0;
  // Rows when the reduced walk is unit-stride (coalesced across a block);
  // columns when the outputs are (coalesced across threads).
  // A block per output needs enough outputs to fill the GPU or short rows;
  // few long contiguous rows (a full reduction) go to the split path.
  const bool inner_reduced = !red.empty() && red.back().stride == in_is;
  const bool rows = inner_reduced && (p.M >= 512 || p.R <= 65536);
  if (x->dtype == TFL_DTYPE_FLOAT64 || out->dtype == TFL_DTYPE_FLOAT64) launch_reduce<double>(call, p, rows, inner_reduced);
  else if (is_floating(out->dtype)) launch_reduce<float>(call, p, rows, inner_reduced);
  else tfl::unimplemented(op, " with an integral result runs on the fallback path");
}

// ===========================================================================
// softmax / log_softmax (dense operands)
// ===========================================================================

struct RowGeom {
  int64_t outer, D, inner;
};

RowGeom row_geometry(const TFL_Tensor* x, int64_t dim) {
  const int64_t nd = std::max<int32_t>(x->ndim, 1);
  const int64_t d = dim < 0 ? dim + nd : dim;
  if (d < 0 || d >= nd) tfl::invalid_argument("dim ", dim, " is out of range for ", x->ndim, " dimensions");
  RowGeom g{1, 1, 1};
  for (int32_t i = 0; i < x->ndim; ++i) {
    if (i < d) g.outer *= x->sizes[i];
    else if (i == d) g.D = x->sizes[i];
    else g.inner *= x->sizes[i];
  }
  return g;
}

// A row of D elements with stride `inner`, starting at element `base`.
struct Rows {
  const char* a;  // input (forward) or grad_output (backward)
  const char* b;  // output of the forward (backward only)
  char* out;
  int32_t a_dt, b_dt, out_dt;
  int64_t a_is, b_is, out_is;
  int64_t outer, D, inner;
  int kind;  // 0 softmax, 1 log_softmax
};

__device__ __forceinline__ int64_t row_base(const Rows& r, int64_t row) {
  return (row / r.inner) * r.D * r.inner + (row % r.inner);
}

// One block per row (inner == 1: the row is contiguous).
template <class Acc>
__global__ void softmax_block_kernel(Rows r) {
  const int64_t rows = r.outer * r.inner;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row_base(r, row);
    Acc mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < r.D; j += blockDim.x) {
      const Acc v = load_as<Acc>(r.a + (base + j * r.inner) * r.a_is, r.a_dt);
      mx = (v > mx || v != v) ? v : mx;
    }
    mx = block_max(mx);
    Acc sum = 0;
    for (int64_t j = threadIdx.x; j < r.D; j += blockDim.x)
      sum += exp(load_as<Acc>(r.a + (base + j * r.inner) * r.a_is, r.a_dt) - mx);
    sum = block_sum(sum);
    const Acc log_sum = log(sum);
    for (int64_t j = threadIdx.x; j < r.D; j += blockDim.x) {
      const int64_t e = base + j * r.inner;
      const Acc v = load_as<Acc>(r.a + e * r.a_is, r.a_dt) - mx;
      store_as<Acc>(r.out + e * r.out_is, r.out_dt, r.kind == 1 ? v - log_sum : exp(v) / sum);
    }
  }
}

// One thread per row (inner > 1: neighbouring threads read neighbouring rows).
template <class Acc>
__global__ void softmax_thread_kernel(Rows r) {
  const int64_t rows = r.outer * r.inner;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t base = row_base(r, row);
    Acc mx = -INFINITY;
    for (int64_t j = 0; j < r.D; ++j) {
      const Acc v = load_as<Acc>(r.a + (base + j * r.inner) * r.a_is, r.a_dt);
      mx = (v > mx || v != v) ? v : mx;
    }
    Acc sum = 0;
    for (int64_t j = 0; j < r.D; ++j) sum += exp(load_as<Acc>(r.a + (base + j * r.inner) * r.a_is, r.a_dt) - mx);
    const Acc log_sum = log(sum);
    for (int64_t j = 0; j < r.D; ++j) {
      const int64_t e = base + j * r.inner;
      const Acc v = load_as<Acc>(r.a + e * r.a_is, r.a_dt) - mx;
      store_as<Acc>(r.out + e * r.out_is, r.out_dt, r.kind == 1 ? v - log_sum : exp(v) / sum);
    }
  }
}

// softmax: gi = y (g - sum(g y)); log_softmax: gi = g - exp(y) sum(g).
template <class Acc>
__device__ __forceinline__ Acc softmax_grad_term(const Rows& r, int64_t e) {
  const Acc g = load_as<Acc>(r.a + e * r.a_is, r.a_dt);
  return r.kind == 1 ? g : g * load_as<Acc>(r.b + e * r.b_is, r.b_dt);
}

template <class Acc>
__device__ __forceinline__ Acc softmax_grad_value(const Rows& r, int64_t e, Acc sum) {
  const Acc g = load_as<Acc>(r.a + e * r.a_is, r.a_dt);
  const Acc y = load_as<Acc>(r.b + e * r.b_is, r.b_dt);
  return r.kind == 1 ? g - exp(y) * sum : y * (g - sum);
}

template <class Acc>
__global__ void softmax_backward_block_kernel(Rows r) {
  const int64_t rows = r.outer * r.inner;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const int64_t base = row_base(r, row);
    Acc sum = 0;
    for (int64_t j = threadIdx.x; j < r.D; j += blockDim.x) sum += softmax_grad_term<Acc>(r, base + j * r.inner);
    sum = block_sum(sum);
    for (int64_t j = threadIdx.x; j < r.D; j += blockDim.x) {
      const int64_t e = base + j * r.inner;
      store_as<Acc>(r.out + e * r.out_is, r.out_dt, softmax_grad_value<Acc>(r, e, sum));
    }
  }
}

template <class Acc>
__global__ void softmax_backward_thread_kernel(Rows r) {
  const int64_t rows = r.outer * r.inner;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; row < rows;
       row += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t base = row_base(r, row);
    Acc sum = 0;
    for (int64_t j = 0; j < r.D; ++j) sum += softmax_grad_term<Acc>(r, base + j * r.inner);
    for (int64_t j = 0; j < r.D; ++j) {
      const int64_t e = base + j * r.inner;
      store_as<Acc>(r.out + e * r.out_is, r.out_dt, softmax_grad_value<Acc>(r, e, sum));
    }
  }
}

unsigned threads_for_row(int64_t D) {
  if (D >= 1024) return 1024;
  unsigned t = 32;
  while (t < D && t < 1024) t <<= 1;
  return t;
}

void launch_softmax(KernelCall& call, int kind, bool backward) {
  const TFL_Tensor* a = call.tensor(0, backward ? "grad_output" : "self");
  const TFL_Tensor* b = backward ? call.tensor(1, "output") : nullptr;
  const int64_t dim = call.integer(backward ? 2 : 1, "dim");
  const TFL_Tensor* out = call.required_output(0);
  const RowGeom g = row_geometry(a, dim);
  Rows r{};
  r.a = static_cast<const char*>(a->data);
  r.b = b != nullptr ? static_cast<const char*>(b->data) : nullptr;
  r.out = static_cast<char*>(out->data);
  r.a_dt = a->dtype, r.b_dt = b != nullptr ? b->dtype : a->dtype, r.out_dt = out->dtype;
  r.a_is = itemsize_of(r.a_dt), r.b_is = itemsize_of(r.b_dt), r.out_is = itemsize_of(r.out_dt);
  r.outer = g.outer, r.D = g.D, r.inner = g.inner;
  r.kind = kind;
  const int64_t rows = g.outer * g.inner;
  if (rows == 0 || g.D == 0) return;
  const bool f64 = a->dtype == TFL_DTYPE_FLOAT64;
  cudaStream_t s = call.stream();
  if (g.inner == 1) {
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>(rows, 65535LL * 16));
    const unsigned threads = threads_for_row(g.D);
    if (backward) {
      if (f64) softmax_backward_block_kernel<double><<<grid, threads, 0, s>>>(r);
      else softmax_backward_block_kernel<float><<<grid, threads, 0, s>>>(r);
    } else {
      if (f64) softmax_block_kernel<double><<<grid, threads, 0, s>>>(r);
      else softmax_block_kernel<float><<<grid, threads, 0, s>>>(r);
    }
  } else {
    const unsigned grid = grid_for(rows, kThreads);
    if (backward) {
      if (f64) softmax_backward_thread_kernel<double><<<grid, kThreads, 0, s>>>(r);
      else softmax_backward_thread_kernel<float><<<grid, kThreads, 0, s>>>(r);
    } else {
      if (f64) softmax_thread_kernel<double><<<grid, kThreads, 0, s>>>(r);
      else softmax_thread_kernel<float><<<grid, kThreads, 0, s>>>(r);
    }
  }
  call.check_launch("softmax");
}

// ===========================================================================
// layer norm (dense operands): rows of N = prod(normalized_shape)
// ===========================================================================

struct LayerNormArgs {
  const char* x;
  const char* w;
  const char* b;
  char* y;
  char* mean;
  char* rstd;
  int32_t x_dt, w_dt, b_dt, y_dt, stat_dt;
  int64_t M, N;
  double eps;
};

template <class Acc>
__global__ void layer_norm_kernel(LayerNormArgs a) {
  const int64_t xs = itemsize_of_dev(a.x_dt), ws = itemsize_of_dev(a.w_dt), bs = itemsize_of_dev(a.b_dt),
                ys = itemsize_of_dev(a.y_dt), ss = itemsize_of_dev(a.stat_dt);
  for (int64_t row = blockIdx.x; row < a.M; row += gridDim.x) {
    const char* x = a.x + row * a.N * xs;
    Acc sum = 0;
    for (int64_t j = threadIdx.x; j < a.N; j += blockDim.x) sum += load_as<Acc>(x + j * xs, a.x_dt);
    const Acc mean = block_sum(sum) / static_cast<Acc>(a.N);
    Acc sq = 0;
    for (int64_t j = threadIdx.x; j < a.N; j += blockDim.x) {
      const Acc d = load_as<Acc>(x + j * xs, a.x_dt) - mean;
      sq += d * d;
    }
    const Acc var = block_sum(sq) / static_cast<Acc>(a.N);
    const Acc rstd = static_cast<Acc>(1) / sqrt(var + static_cast<Acc>(a.eps));
    for (int64_t j = threadIdx.x; j < a.N; j += blockDim.x) {
      Acc v = (load_as<Acc>(x + j * xs, a.x_dt) - mean) * rstd;
      if (a.w != nullptr) v *= load_as<Acc>(a.w + j * ws, a.w_dt);
      if (a.b != nullptr) v += load_as<Acc>(a.b + j * bs, a.b_dt);
      store_as<Acc>(a.y + (row * a.N + j) * ys, a.y_dt, v);
    }
    if (threadIdx.x == 0) {
      if (a.mean != nullptr) store_as<Acc>(a.mean + row * ss, a.stat_dt, mean);
      if (a.rstd != nullptr) store_as<Acc>(a.rstd + row * ss, a.stat_dt, rstd);
    }
  }
}

struct LayerNormBackwardArgs {
  const char* dy;
  const char* x;
  const char* mean;
  const char* rstd;
  const char* w;
  char* dx;
  int32_t dy_dt, x_dt, stat_dt, w_dt, dx_dt;
  int64_t M, N;
};

// dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy w.
template <class Acc>
__global__ void layer_norm_backward_input_kernel(LayerNormBackwardArgs a) {
  const int64_t dys = itemsize_of_dev(a.dy_dt), xs = itemsize_of_dev(a.x_dt), ss = itemsize_of_dev(a.stat_dt),
                ws = itemsize_of_dev(a.w_dt), dxs = itemsize_of_dev(a.dx_dt);
  for (int64_t row = blockIdx.x; row < a.M; row += gridDim.x) {
    const Acc mean = load_as<Acc>(a.mean + row * ss, a.stat_dt);
    const Acc rstd = load_as<Acc>(a.rstd + row * ss, a.stat_dt);
    const int64_t e0 = row * a.N;
    Acc s1 = 0, s2 = 0;
    for (int64_t j = threadIdx.x; j < a.N; j += blockDim.x) {
      Acc g = load_as<Acc>(a.dy + (e0 + j) * dys, a.dy_dt);
      if (a.w != nullptr) g *= load_as<Acc>(a.w + j * ws, a.w_dt);
      const Acc xhat = (load_as<Acc>(a.x + (e0 + j) * xs, a.x_dt) - mean) * rstd;
      s1 += g;
      s2 += g * xhat;
    }
    s1 = block_sum(s1) / static_cast<Acc>(a.N);
    s2 = block_sum(s2) / static_cast<Acc>(a.N);
    for (int64_t j = threadIdx.x; j < a.N; j += blockDim.x) {
      Acc g = load_as<Acc>(a.dy + (e0 + j) * dys, a.dy_dt);
      if (a.w != nullptr) g *= load_as<Acc>(a.w + j * ws, a.w_dt);
      const Acc xhat = (load_as<Acc>(a.x + (e0 + j) * xs, a.x_dt) - mean) * rstd;
      store_as<Acc>(a.dx + (e0 + j) * dxs, a.dx_dt, rstd * (g - s1 - xhat * s2));
    }
  }
}

// Column partial sums over a slice of rows: ws_w[s][j] = sum dy xhat,
// ws_b[s][j] = sum dy.
template <class Acc>
__global__ void layer_norm_backward_params_kernel(LayerNormBackwardArgs a, int64_t slices, Acc* ws_w, Acc* ws_b) {
  const int64_t dys = itemsize_of_dev(a.dy_dt), xs = itemsize_of_dev(a.x_dt), ss = itemsize_of_dev(a.stat_dt);
  const int64_t chunk = (a.M + slices - 1) / slices;
  const int64_t total = a.N * slices;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = t % a.N, s = t / a.N;
    Acc gw = 0, gb = 0;
    const int64_t end = min(a.M, (s + 1) * chunk);
    for (int64_t row = s * chunk; row < end; ++row) {
      const Acc dy = load_as<Acc>(a.dy + (row * a.N + j) * dys, a.dy_dt);
      const Acc xhat = (load_as<Acc>(a.x + (row * a.N + j) * xs, a.x_dt) - load_as<Acc>(a.mean + row * ss, a.stat_dt)) *
                       load_as<Acc>(a.rstd + row * ss, a.stat_dt);
      gw += dy * xhat;
      gb += dy;
    }
    ws_w[s * a.N + j] = gw;
    ws_b[s * a.N + j] = gb;
  }
}

template <class Acc>
__global__ void column_finish_kernel(const Acc* ws, int64_t slices, int64_t N, char* out, int32_t out_dt) {
  const int64_t os = itemsize_of_dev(out_dt);
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < N;
       j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    Acc acc = 0;
    for (int64_t s = 0; s < slices; ++s) acc += ws[s * N + j];
    store_as<Acc>(out + j * os, out_dt, acc);
  }
}

int64_t normalized_numel(const KernelCall& call, size_t i, const TFL_Tensor* x, int64_t* rows) {
  const std::vector<int64_t> shape = call.ints(i, "normalized_shape");
  if (shape.size() > static_cast<size_t>(x->ndim)) tfl::invalid_argument("normalized_shape has too many dims");
  int64_t n = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    if (x->sizes[x->ndim - shape.size() + k] != shape[k])
      tfl::invalid_argument("normalized_shape does not match the input's trailing dims");
    n *= shape[k];
  }
  *rows = n == 0 ? 0 : x->numel / n;
  return n;
}

const char* data_or_null(const TFL_Tensor* t) { return t != nullptr ? static_cast<const char*>(t->data) : nullptr; }

// ===========================================================================
// batch norm (dense NC* operands)
// ===========================================================================

struct ChannelGeom {
  int64_t N, C, HW;
};

ChannelGeom channel_geometry(const TFL_Tensor* x) {
  if (x->ndim < 2) tfl::invalid_argument("batch norm needs at least 2 dims, got ", x->ndim);
  ChannelGeom g{x->sizes[0], x->sizes[1], 1};
  for (int32_t d = 2; d < x->ndim; ++d) g.HW *= x->sizes[d];
  return g;
}

// Per (channel, slice): sum of a and of a*b (b = x - shift) in double.
struct ChannelSums {
  const char* a;  // x (forward) or dy (backward)
  const char* x;  // backward: x
  const float* shift;  // backward: per-channel mean
  int32_t a_dt, x_dt;
  ChannelGeom g;
  int64_t slices;
  double* ws;  // [C][slices][2]
  bool backward;
};

__global__ void channel_sums_kernel(ChannelSums p) {
  const int64_t c = blockIdx.x, s = blockIdx.y;
  const int64_t count = p.g.N * p.g.HW;
  const int64_t chunk = (count + p.slices - 1) / p.slices;
  const int64_t begin = s * chunk, end = min(count, begin + chunk);
  const int64_t as = itemsize_of_dev(p.a_dt), xs = itemsize_of_dev(p.x_dt);
  double s1 = 0, s2 = 0;
  for (int64_t e = begin + threadIdx.x; e < end; e += blockDim.x) {
    const int64_t n = e / p.g.HW, hw = e % p.g.HW;
    const int64_t idx = (n * p.g.C + c) * p.g.HW + hw;
    const double a = load_as<double>(p.a + idx * as, p.a_dt);
    if (p.backward) {
      const double xm = load_as<double>(p.x + idx * xs, p.x_dt) - static_cast<double>(p.shift[c]);
      s1 += a;
      s2 += a * xm;
    } else {
      s1 += a;
      s2 += a * a;
    }
  }
  s1 = block_sum(s1);
  s2 = block_sum(s2);
  if (threadIdx.x == 0) {
    p.ws[(c * p.slices + s) * 2] = s1;
    p.ws[(c * p.slices + s) * 2 + 1] = s2;
  }
}

struct BatchNormStats {
  const double* ws;
  int64_t slices, C, count;
  bool training;
  double momentum, eps;
  char* running_mean;
  char* running_var;
  int32_t rm_dt, rv_dt;
  char* save_mean;
  char* save_invstd;
  int32_t sm_dt, si_dt;
  float* mean_out;    // workspace [C]
  float* invstd_out;  // workspace [C]
};

__global__ void batch_norm_stats_kernel(BatchNormStats p) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < p.C;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double mean, invstd;
    if (p.training) {
      double s1 = 0, s2 = 0;
      for (int64_t s = 0; s < p.slices; ++s) {
        s1 += p.ws[(c * p.slices + s) * 2];
        s2 += p.ws[(c * p.slices + s) * 2 + 1];
      }
      const double n = static_cast<double>(p.count);
      mean = s1 / n;
      double var = s2 / n - mean * mean;
      if (var < 0) var = 0;
      invstd = 1.0 / sqrt(var + p.eps);
      if (p.running_mean != nullptr) {
        const int64_t is = itemsize_of_dev(p.rm_dt);
        const double rm = load_as<double>(p.running_mean + c * is, p.rm_dt);
        store_as<double>(p.running_mean + c * is, p.rm_dt, (1 - p.momentum) * rm + p.momentum * mean);
      }
      if (p.running_var != nullptr) {
        const int64_t is = itemsize_of_dev(p.rv_dt);
        const double rv = load_as<double>(p.running_var + c * is, p.rv_dt);
        const double unbiased = p.count > 1 ? var * n / (n - 1) : var;
        store_as<double>(p.running_var + c * is, p.rv_dt, (1 - p.momentum) * rv + p.momentum * unbiased);
      }
      if (p.save_mean != nullptr) store_as<double>(p.save_mean + c * itemsize_of_dev(p.sm_dt), p.sm_dt, mean);
      if (p.save_invstd != nullptr) store_as<double>(p.save_invstd + c * itemsize_of_dev(p.si_dt), p.si_dt, invstd);
    } else {
      mean = load_as<double>(p.running_mean + c * itemsize_of_dev(p.rm_dt), p.rm_dt);
      invstd = 1.0 / sqrt(load_as<double>(p.running_var + c * itemsize_of_dev(p.rv_dt), p.rv_dt) + p.eps);
    }
    p.mean_out[c] = static_cast<float>(mean);
    p.invstd_out[c] = static_cast<float>(invstd);
  }
}

// y = (x - mean) invstd w + b, per channel.
struct BatchNormApply {
  const char* x;
  char* y;
  const char* w;
  const char* b;
  int32_t x_dt, y_dt, w_dt, b_dt;
  const float* mean;
  const float* invstd;
  ChannelGeom g;
};

__global__ void batch_norm_apply_kernel(BatchNormApply p) {
  const int64_t total = p.g.N * p.g.C * p.g.HW;
  const int64_t xs = itemsize_of_dev(p.x_dt), ys = itemsize_of_dev(p.y_dt), ws = itemsize_of_dev(p.w_dt),
                bs = itemsize_of_dev(p.b_dt);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = (i / p.g.HW) % p.g.C;
    float v = (load_as<float>(p.x + i * xs, p.x_dt) - p.mean[c]) * p.invstd[c];
    if (p.w != nullptr) v *= load_as<float>(p.w + c * ws, p.w_dt);
    if (p.b != nullptr) v += load_as<float>(p.b + c * bs, p.b_dt);
    store_as<float>(p.y + i * ys, p.y_dt, v);
  }
}

int64_t channel_slices(const ChannelGeom& g) {
  const int64_t count = g.N * g.HW;
  // Enough blocks to fill the GPU, each with at least a few thousand elements.
  int64_t slices = std::max<int64_t>(1, std::min<int64_t>((count + 4095) / 4096, std::max<int64_t>(1, 1024 / std::max<int64_t>(1, g.C))));
  return std::min<int64_t>(slices, 65535);
}

void check_channel_vector(const TFL_Tensor* t, int64_t C, const char* what) {
  if (t != nullptr && (t->numel != C || t->memory_kind != TFL_MEMORY_DEVICE))
    tfl::invalid_argument(what, " must hold ", C, " elements on the device, got ", t->numel);
}

// input, weight, bias, running_mean, running_var, training, momentum, eps.
void batch_norm_forward(KernelCall& call, const TFL_Tensor* x, const TFL_Tensor* w, const TFL_Tensor* b,
                        const TFL_Tensor* rm, const TFL_Tensor* rv, bool training, double momentum, double eps) {
  const TFL_Tensor* y = call.required_output(0);
  const TFL_Tensor* save_mean = call.output(1);
  const TFL_Tensor* save_invstd = call.output(2);
  const ChannelGeom g = channel_geometry(x);
  for (const TFL_Tensor* t : {w, b, rm, rv}) check_channel_vector(t, g.C, "a per-channel argument");
  if (!training && (rm == nullptr || rv == nullptr))
    tfl::invalid_argument("evaluation mode needs running_mean and running_var");
  if (g.C == 0) return;
  float* mean = static_cast<float*>(call.workspace(static_cast<size_t>(g.C) * sizeof(float) * 2));
  float* invstd = mean + g.C;
  BatchNormStats st{};
  st.C = g.C;
  st.count = g.N * g.HW;
  st.training = training;
  st.momentum = momentum;
  st.eps = eps;
  st.running_mean = rm != nullptr ? static_cast<char*>(rm->data) : nullptr;
  st.running_var = rv != nullptr ? static_cast<char*>(rv->data) : nullptr;
  st.rm_dt = rm != nullptr ? rm->dtype : TFL_DTYPE_FLOAT32;
  st.rv_dt = rv != nullptr ? rv->dtype : TFL_DTYPE_FLOAT32;
  st.save_mean = save_mean != nullptr && save_mean->numel == g.C ? static_cast<char*>(save_mean->data) : nullptr;
  st.save_invstd = save_invstd != nullptr && save_invstd->numel == g.C ? static_cast<char*>(save_invstd->data) : nullptr;
  st.sm_dt = save_mean != nullptr ? save_mean->dtype : TFL_DTYPE_FLOAT32;
  st.si_dt = save_invstd != nullptr ? save_invstd->dtype : TFL_DTYPE_FLOAT32;
  st.mean_out = mean;
  st.invstd_out = invstd;
  if (training) {
    if (st.count == 0) tfl::invalid_argument("batch norm in training mode needs more than 0 values per channel");
    const int64_t slices = channel_slices(g);
    double* ws = static_cast<double*>(call.workspace(static_cast<size_t>(g.C * slices * 2) * sizeof(double)));
    ChannelSums cs{static_cast<const char*>(x->data), nullptr, nullptr, x->dtype, x->dtype, g, slices, ws, false};
    channel_sums_kernel<<<dim3(static_cast<unsigned>(g.C), static_cast<unsigned>(slices)), kThreads, 0, call.stream()>>>(cs);
    st.ws = ws;
    st.slices = slices;
  }
  batch_norm_stats_kernel<<<grid_for(g.C, kThreads), kThreads, 0, call.stream()>>>(st);
  BatchNormApply ap{static_cast<const char*>(x->data), static_cast<char*>(y->data), data_or_null(w), data_or_null(b),
                    x->dtype, y->dtype, w != nullptr ? w->dtype : x->dtype, b != nullptr ? b->dtype : x->dtype,
                    mean, invstd, g};
  if (x->numel > 0) batch_norm_apply_kernel<<<grid_for(x->numel, kThreads), kThreads, 0, call.stream()>>>(ap);
  call.check_launch("batch norm");
}

struct BatchNormBackwardCoef {
  const double* ws;
  int64_t slices, C, count;
  bool training;
  const float* mean;
  const float* invstd;
  const char* w;
  int32_t w_dt;
  char* grad_w;
  char* grad_b;
  int32_t gw_dt, gb_dt;
  float* k1;  // dx = (dy - k0 - (x - mean) k1) k2
  float* k0;
  float* k2;
};

__global__ void batch_norm_backward_coef_kernel(BatchNormBackwardCoef p) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < p.C;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double sum_dy = 0, sum_dy_xmu = 0;
    for (int64_t s = 0; s < p.slices; ++s) {
      sum_dy += p.ws[(c * p.slices + s) * 2];
      sum_dy_xmu += p.ws[(c * p.slices + s) * 2 + 1];
    }
    const double invstd = p.invstd[c];
    const double w = p.w != nullptr ? load_as<double>(p.w + c * itemsize_of_dev(p.w_dt), p.w_dt) : 1.0;
    const double n = static_cast<double>(p.count);
    if (p.training) {
      p.k0[c] = static_cast<float>(sum_dy / n);
      p.k1[c] = static_cast<float>(sum_dy_xmu / n * invstd * invstd);
    } else {
      p.k0[c] = 0.0f;
      p.k1[c] = 0.0f;
    }
    p.k2[c] = static_cast<float>(invstd * w);
    if (p.grad_w != nullptr) store_as<double>(p.grad_w + c * itemsize_of_dev(p.gw_dt), p.gw_dt, sum_dy_xmu * invstd);
    if (p.grad_b != nullptr) store_as<double>(p.grad_b + c * itemsize_of_dev(p.gb_dt), p.gb_dt, sum_dy);
  }
}

struct BatchNormBackwardApply {
  const char* dy;
  const char* x;
  char* dx;
  int32_t dy_dt, x_dt, dx_dt;
  const float* mean;
  const float* k0;
  const float* k1;
  const float* k2;
  ChannelGeom g;
};

__global__ void batch_norm_backward_apply_kernel(BatchNormBackwardApply p) {
  const int64_t total = p.g.N * p.g.C * p.g.HW;
  const int64_t dys = itemsize_of_dev(p.dy_dt), xs = itemsize_of_dev(p.x_dt), dxs = itemsize_of_dev(p.dx_dt);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = (i / p.g.HW) % p.g.C;
    const float dy = load_as<float>(p.dy + i * dys, p.dy_dt);
    const float xm = load_as<float>(p.x + i * xs, p.x_dt) - p.mean[c];
    store_as<float>(p.dx + i * dxs, p.dx_dt, (dy - p.k0[c] - xm * p.k1[c]) * p.k2[c]);
  }
}

__global__ void invstd_from_var_kernel(const char* mean_in, int32_t m_dt, const char* var, int32_t v_dt, double eps,
                                       int64_t C, float* mean_out, float* invstd_out) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < C;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    mean_out[c] = load_as<float>(mean_in + c * itemsize_of_dev(m_dt), m_dt);
    invstd_out[c] = static_cast<float>(1.0 / sqrt(load_as<double>(var + c * itemsize_of_dev(v_dt), v_dt) + eps));
  }
}

__global__ void copy_stats_kernel(const char* mean_in, int32_t m_dt, const char* invstd_in, int32_t i_dt, int64_t C,
                                  float* mean_out, float* invstd_out) {
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < C;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    mean_out[c] = load_as<float>(mean_in + c * itemsize_of_dev(m_dt), m_dt);
    invstd_out[c] = load_as<float>(invstd_in + c * itemsize_of_dev(i_dt), i_dt);
  }
}

// ===========================================================================
// nll_loss (dense operands), targets of class indices
// ===========================================================================

struct NllArgs {
  const char* x;  // [N, C] or [C]
  const char* target;
  const char* weight;
  char* out;
  char* total_weight;
  char* grad_in;
  const char* grad_out;
  int32_t x_dt, t_dt, w_dt, out_dt, tw_dt, gi_dt, go_dt;
  int64_t N, C;
  int64_t reduction;  // 0 none, 1 mean, 2 sum
  int64_t ignore_index;
};

__global__ void nll_forward_kernel(NllArgs a) {
  const int64_t xs = itemsize_of_dev(a.x_dt), ts = itemsize_of_dev(a.t_dt), ws = itemsize_of_dev(a.w_dt),
                os = itemsize_of_dev(a.out_dt);
  float sum = 0, wsum = 0;
  for (int64_t i = threadIdx.x; i < a.N; i += blockDim.x) {
    const int64_t t = load_as<int64_t>(a.target + i * ts, a.t_dt);
    float loss = 0, w = 0;
    if (t != a.ignore_index && t >= 0 && t < a.C) {
      w = a.weight != nullptr ? load_as<float>(a.weight + t * ws, a.w_dt) : 1.0f;
      loss = -w * load_as<float>(a.x + (i * a.C + t) * xs, a.x_dt);
    }
    if (a.reduction == 0) store_as<float>(a.out + i * os, a.out_dt, loss);
    sum += loss;
    wsum += w;
  }
  sum = block_sum(sum);
  wsum = block_sum(wsum);
  if (threadIdx.x == 0) {
    if (a.total_weight != nullptr) store_as<float>(a.total_weight, a.tw_dt, a.reduction == 0 ? 0.0f : wsum);
    if (a.reduction == 1) store_as<float>(a.out, a.out_dt, sum / wsum);
    if (a.reduction == 2) store_as<float>(a.out, a.out_dt, sum);
  }
}

__global__ void nll_backward_kernel(NllArgs a) {
  const int64_t ts = itemsize_of_dev(a.t_dt), ws = itemsize_of_dev(a.w_dt), gis = itemsize_of_dev(a.gi_dt),
                gos = itemsize_of_dev(a.go_dt);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.N;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = load_as<int64_t>(a.target + i * ts, a.t_dt);
    if (t == a.ignore_index || t < 0 || t >= a.C) continue;
    const float w = a.weight != nullptr ? load_as<float>(a.weight + t * ws, a.w_dt) : 1.0f;
    float g = a.reduction == 0 ? load_as<float>(a.grad_out + i * gos, a.go_dt) : load_as<float>(a.grad_out, a.go_dt);
    if (a.reduction == 1) g /= load_as<float>(a.total_weight, a.tw_dt);
    store_as<float>(a.grad_in + (i * a.C + t) * gis, a.gi_dt, -w * g);
  }
}

void nll_geometry(const TFL_Tensor* x, const TFL_Tensor* target, int64_t* N, int64_t* C) {
  if (x->ndim == 1) {
    *N = 1;
    *C = x->sizes[0];
  } else if (x->ndim == 2) {
    *N = x->sizes[0];
    *C = x->sizes[1];
  } else {
    tfl::unimplemented("nll_loss over ", x->ndim, "-D input (nll_loss2d is not a kernel here)");
  }
  if (target->numel != *N) tfl::invalid_argument("target has ", target->numel, " elements for a batch of ", *N);
}

}  // namespace

// ===========================================================================
// Entry points
// ===========================================================================

// aten::sum(Tensor self, *, ScalarType? dtype=None) and aten::mean(...): every dim.
TFL_Error* kernel_sum(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::sum", [&](KernelCall& call) { reduce_dims(call, false, "sum", true); });
}
TFL_Error* kernel_mean(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::mean", [&](KernelCall& call) { reduce_dims(call, true, "mean", true); });
}

// aten::sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None)
TFL_Error* kernel_sum_dim(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::sum.dim_IntList", [&](KernelCall& call) { reduce_dims(call, false, "sum"); });
}

// aten::mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None)
TFL_Error* kernel_mean_dim(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::mean.dim", [&](KernelCall& call) { reduce_dims(call, true, "mean"); });
}

TFL_Error* kernel_softmax(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::_softmax", [&](KernelCall& call) { launch_softmax(call, 0, false); });
}
TFL_Error* kernel_log_softmax(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::_log_softmax", [&](KernelCall& call) { launch_softmax(call, 1, false); });
}
TFL_Error* kernel_softmax_backward(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::_softmax_backward_data", [&](KernelCall& call) { launch_softmax(call, 0, true); });
}
TFL_Error* kernel_log_softmax_backward(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::_log_softmax_backward_data",
                    [&](KernelCall& call) { launch_softmax(call, 1, true); });
}

// aten::native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps)
//   -> (Tensor, Tensor, Tensor)
TFL_Error* kernel_native_layer_norm(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::native_layer_norm", [&](KernelCall& call) {
    const TFL_Tensor* x = call.tensor(0, "input");
    int64_t M = 0;
    const int64_t N = normalized_numel(call, 1, x, &M);
    const TFL_Tensor* w = call.optional_tensor(2, "weight");
    const TFL_Tensor* b = call.optional_tensor(3, "bias");
    const TFL_Tensor* y = call.required_output(0);
    const TFL_Tensor* mean = call.output(1);
    const TFL_Tensor* rstd = call.output(2);
    LayerNormArgs a{static_cast<const char*>(x->data), data_or_null(w), data_or_null(b), static_cast<char*>(y->data),
                    mean != nullptr ? static_cast<char*>(mean->data) : nullptr,
                    rstd != nullptr ? static_cast<char*>(rstd->data) : nullptr, x->dtype,
                    w != nullptr ? w->dtype : x->dtype, b != nullptr ? b->dtype : x->dtype, y->dtype,
                    mean != nullptr ? mean->dtype : (rstd != nullptr ? rstd->dtype : TFL_DTYPE_FLOAT32), M, N,
                    call.real(4, "eps")};
    if (M == 0) return;
    if (N == 0) tfl::unimplemented("layer norm over an empty normalized shape");
    const unsigned grid = static_cast<unsigned>(std::min<int64_t>(M, 65535LL * 16));
    const unsigned threads = threads_for_row(N);
    if (x->dtype == TFL_DTYPE_FLOAT64) layer_norm_kernel<double><<<grid, threads, 0, call.stream()>>>(a);
    else layer_norm_kernel<float><<<grid, threads, 0, call.stream()>>>(a);
    call.check_launch("layer norm");
  });
}

// aten::native_layer_norm_backward(Tensor grad_out, Tensor input, SymInt[] normalized_shape, Tensor mean,
//   Tensor rstd, Tensor? weight, Tensor? bias, bool[3] output_mask) -> (Tensor, Tensor, Tensor)
TFL_Error* kernel_native_layer_norm_backward(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::native_layer_norm_backward", [&](KernelCall& call) {
    const TFL_Tensor* dy = call.tensor(0, "grad_out");
    const TFL_Tensor* x = call.tensor(1, "input");
    int64_t M = 0;
    const int64_t N = normalized_numel(call, 2, x, &M);
    const TFL_Tensor* mean = call.tensor(3, "mean");
    const TFL_Tensor* rstd = call.tensor(4, "rstd");
    const TFL_Tensor* w = call.optional_tensor(5, "weight");
    const TFL_Tensor* dx = call.output(0);
    const TFL_Tensor* dw = call.output(1);
    const TFL_Tensor* db = call.output(2);
    if (mean->dtype != rstd->dtype) tfl::invalid_argument("mean and rstd must share a dtype");
    LayerNormBackwardArgs a{static_cast<const char*>(dy->data), static_cast<const char*>(x->data),
                            static_cast<const char*>(mean->data), static_cast<const char*>(rstd->data),
                            data_or_null(w), dx != nullptr ? static_cast<char*>(dx->data) : nullptr, dy->dtype,
                            x->dtype, mean->dtype, w != nullptr ? w->dtype : x->dtype,
                            dx != nullptr ? dx->dtype : x->dtype, M, N};
    const bool f64 = x->dtype == TFL_DTYPE_FLOAT64;
    cudaStream_t s = call.stream();
    if (dx != nullptr && M > 0 && N > 0) {
      const unsigned grid = static_cast<unsigned>(std::min<int64_t>(M, 65535LL * 16));
      const unsigned threads = threads_for_row(N);
      if (f64) layer_norm_backward_input_kernel<double><<<grid, threads, 0, s>>>(a);
      else layer_norm_backward_input_kernel<float><<<grid, threads, 0, s>>>(a);
    }
    if ((dw != nullptr || db != nullptr) && N > 0) {
      if (M == 0) {
        if (dw != nullptr) fill_ref(s, ref_of(dw), 0.0);
        if (db != nullptr) fill_ref(s, ref_of(db), 0.0);
        return;
      }
      const int64_t slices = std::max<int64_t>(1, std::min<int64_t>((M + 31) / 32, std::max<int64_t>(1, 262144 / N)));
      auto run = [&](auto acc_tag) {
        using Acc = decltype(acc_tag);
        Acc* ws = static_cast<Acc*>(call.workspace(static_cast<size_t>(2 * slices * N) * sizeof(Acc)));
        layer_norm_backward_params_kernel<Acc><<<grid_for(N * slices, kThreads), kThreads, 0, s>>>(a, slices, ws,
                                                                                                  ws + slices * N);
        if (dw != nullptr)
          column_finish_kernel<Acc><<<grid_for(N, kThreads), kThreads, 0, s>>>(ws, slices, N,
                                                                               static_cast<char*>(dw->data), dw->dtype);
        if (db != nullptr)
          column_finish_kernel<Acc><<<grid_for(N, kThreads), kThreads, 0, s>>>(
              ws + slices * N, slices, N, static_cast<char*>(db->data), db->dtype);
      };
      if (f64) run(0.0);
      else run(0.0f);
    }
    call.check_launch("layer norm backward");
  });
}

// aten::native_batch_norm(input, weight, bias, running_mean, running_var, bool training, float momentum, float eps)
// and aten::_native_batch_norm_legit (same arguments, running stats mutable).
TFL_Error* kernel_native_batch_norm(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::native_batch_norm", [&](KernelCall& call) {
    batch_norm_forward(call, call.tensor(0, "input"), call.optional_tensor(1, "weight"),
                       call.optional_tensor(2, "bias"), call.optional_tensor(3, "running_mean"),
                       call.optional_tensor(4, "running_var"), call.boolean(5, "training"), call.real(6, "momentum"),
                       call.real(7, "eps"));
  });
}

// aten::_native_batch_norm_legit.no_stats(input, weight, bias, bool training, float momentum, float eps)
TFL_Error* kernel_native_batch_norm_legit_no_stats(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::_native_batch_norm_legit.no_stats", [&](KernelCall& call) {
    batch_norm_forward(call, call.tensor(0, "input"), call.optional_tensor(1, "weight"),
                       call.optional_tensor(2, "bias"), nullptr, nullptr, call.boolean(3, "training"),
                       call.real(4, "momentum"), call.real(5, "eps"));
  });
}

// aten::_native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var, float momentum, float eps)
TFL_Error* kernel_native_batch_norm_legit_no_training(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::_native_batch_norm_legit_no_training", [&](KernelCall& call) {
    batch_norm_forward(call, call.tensor(0, "input"), call.optional_tensor(1, "weight"),
                       call.optional_tensor(2, "bias"), call.tensor(3, "running_mean"), call.tensor(4, "running_var"),
                       false, call.real(5, "momentum"), call.real(6, "eps"));
  });
}

// aten::native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd,
//   bool train, float eps, bool[3] output_mask) -> (Tensor, Tensor, Tensor)
TFL_Error* kernel_native_batch_norm_backward(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::native_batch_norm_backward", [&](KernelCall& call) {
    const TFL_Tensor* dy = call.tensor(0, "grad_out");
    const TFL_Tensor* x = call.tensor(1, "input");
    const TFL_Tensor* w = call.optional_tensor(2, "weight");
    const TFL_Tensor* rm = call.optional_tensor(3, "running_mean");
    const TFL_Tensor* rv = call.optional_tensor(4, "running_var");
    const TFL_Tensor* sm = call.optional_tensor(5, "save_mean");
    const TFL_Tensor* si = call.optional_tensor(6, "save_invstd");
    const bool train = call.boolean(7, "train");
    const double eps = call.real(8, "eps");
    const TFL_Tensor* dx = call.output(0);
    const TFL_Tensor* dw = call.output(1);
    const TFL_Tensor* db = call.output(2);
    const ChannelGeom g = channel_geometry(x);
    if (g.C == 0) return;
    cudaStream_t s = call.stream();
    float* stats = static_cast<float*>(call.workspace(static_cast<size_t>(g.C) * sizeof(float) * 5));
    float* mean = stats;
    float* invstd = stats + g.C;
    if (train) {
      if (sm == nullptr || si == nullptr || sm->numel != g.C || si->numel != g.C)
        tfl::invalid_argument("training-mode backward needs save_mean and save_invstd of ", g.C, " elements");
      copy_stats_kernel<<<grid_for(g.C, kThreads), kThreads, 0, s>>>(static_cast<const char*>(sm->data), sm->dtype,
                                                                    static_cast<const char*>(si->data), si->dtype,
                                                                    g.C, mean, invstd);
    } else {
      if (rm == nullptr || rv == nullptr) tfl::invalid_argument("evaluation-mode backward needs the running stats");
      invstd_from_var_kernel<<<grid_for(g.C, kThreads), kThreads, 0, s>>>(static_cast<const char*>(rm->data),
                                                                         rm->dtype,
                                                                         static_cast<const char*>(rv->data),
                                                                         rv->dtype, eps, g.C, mean, invstd);
    }
    const int64_t slices = channel_slices(g);
    double* ws = static_cast<double*>(call.workspace(static_cast<size_t>(g.C * slices * 2) * sizeof(double)));
    ChannelSums cs{static_cast<const char*>(dy->data), static_cast<const char*>(x->data), mean, dy->dtype, x->dtype,
                   g, slices, ws, true};
    channel_sums_kernel<<<dim3(static_cast<unsigned>(g.C), static_cast<unsigned>(slices)), kThreads, 0, s>>>(cs);
    BatchNormBackwardCoef co{};
    co.ws = ws;
    co.slices = slices;
    co.C = g.C;
    co.count = g.N * g.HW;
    co.training = train;
    co.mean = mean;
    co.invstd = invstd;
    co.w = data_or_null(w);
    co.w_dt = w != nullptr ? w->dtype : TFL_DTYPE_FLOAT32;
    co.grad_w = dw != nullptr ? static_cast<char*>(dw->data) : nullptr;
    co.grad_b = db != nullptr ? static_cast<char*>(db->data) : nullptr;
    co.gw_dt = dw != nullptr ? dw->dtype : TFL_DTYPE_FLOAT32;
    co.gb_dt = db != nullptr ? db->dtype : TFL_DTYPE_FLOAT32;
    co.k0 = stats + 2 * g.C;
    co.k1 = stats + 3 * g.C;
    co.k2 = stats + 4 * g.C;
    batch_norm_backward_coef_kernel<<<grid_for(g.C, kThreads), kThreads, 0, s>>>(co);
    if (dx != nullptr && x->numel > 0) {
      BatchNormBackwardApply ap{static_cast<const char*>(dy->data), static_cast<const char*>(x->data),
                                static_cast<char*>(dx->data), dy->dtype, x->dtype, dx->dtype, mean, co.k0, co.k1,
                                co.k2, g};
      batch_norm_backward_apply_kernel<<<grid_for(x->numel, kThreads), kThreads, 0, s>>>(ap);
    }
    call.check_launch("batch norm backward");
  });
}

// aten::nll_loss_forward(Tensor self, Tensor target, Tensor? weight, int reduction, SymInt ignore_index)
//   -> (Tensor output, Tensor total_weight)
TFL_Error* kernel_nll_loss_forward(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::nll_loss_forward", [&](KernelCall& call) {
    const TFL_Tensor* x = call.tensor(0, "self");
    const TFL_Tensor* target = call.tensor(1, "target");
    const TFL_Tensor* weight = call.optional_tensor(2, "weight");
    NllArgs a{};
    nll_geometry(x, target, &a.N, &a.C);
    const TFL_Tensor* out = call.required_output(0);
    const TFL_Tensor* tw = call.output(1);
    a.x = static_cast<const char*>(x->data);
    a.target = static_cast<const char*>(target->data);
    a.weight = data_or_null(weight);
    a.out = static_cast<char*>(out->data);
    a.total_weight = tw != nullptr ? static_cast<char*>(tw->data) : nullptr;
    a.x_dt = x->dtype, a.t_dt = target->dtype, a.w_dt = weight != nullptr ? weight->dtype : x->dtype;
    a.out_dt = out->dtype, a.tw_dt = tw != nullptr ? tw->dtype : x->dtype;
    a.reduction = call.integer(3, "reduction");
    a.ignore_index = call.integer(4, "ignore_index");
    if (a.reduction < 0 || a.reduction > 2) tfl::invalid_argument("reduction must be 0, 1 or 2, got ", a.reduction);
    nll_forward_kernel<<<1, 1024, 0, call.stream()>>>(a);
    call.check_launch("nll_loss");
  });
}

// aten::nll_loss_backward(Tensor grad_output, Tensor self, Tensor target, Tensor? weight, int reduction,
//   SymInt ignore_index, Tensor total_weight) -> Tensor
TFL_Error* kernel_nll_loss_backward(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::nll_loss_backward", [&](KernelCall& call) {
    const TFL_Tensor* go = call.tensor(0, "grad_output");
    const TFL_Tensor* x = call.tensor(1, "self");
    const TFL_Tensor* target = call.tensor(2, "target");
    const TFL_Tensor* weight = call.optional_tensor(3, "weight");
    const TFL_Tensor* tw = call.tensor(6, "total_weight");
    const TFL_Tensor* gi = call.required_output(0);
    NllArgs a{};
    nll_geometry(x, target, &a.N, &a.C);
    a.grad_out = static_cast<const char*>(go->data);
    a.target = static_cast<const char*>(target->data);
    a.weight = data_or_null(weight);
    a.total_weight = static_cast<char*>(tw->data);
    a.grad_in = static_cast<char*>(gi->data);
    a.go_dt = go->dtype, a.t_dt = target->dtype, a.w_dt = weight != nullptr ? weight->dtype : x->dtype;
    a.tw_dt = tw->dtype, a.gi_dt = gi->dtype;
    a.reduction = call.integer(4, "reduction");
    a.ignore_index = call.integer(5, "ignore_index");
    if (a.reduction == 0 && go->numel != a.N) tfl::invalid_argument("grad_output must have one value per sample");
    check_cuda(cudaMemsetAsync(gi->data, 0, static_cast<size_t>(gi->numel * itemsize_of(gi->dtype)), call.stream()),
               "cudaMemsetAsync");
    if (a.N > 0) nll_backward_kernel<<<grid_for(a.N, kThreads), kThreads, 0, call.stream()>>>(a);
    call.check_launch("nll_loss backward");
  });
}

}  // namespace flcuda
