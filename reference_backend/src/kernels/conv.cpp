// Convolution (1-d to 3-d; groups, stride, padding, dilation, transposed with
// output_padding, optional bias) and its backward, by im2col + the blocked
// GEMM of gemm.cpp.
//
// Every case is phrased over a "big" and a "small" side: for a regular
// convolution the big side is the input and the small side the output; for a
// transposed one it is the other way round. The weight is then always a
// [C_small x (C_big/groups * K)] matrix per group, and three products cover
// forward and backward of both kinds:
//   gather:  small  = W_g   . im2col(big)           (conv fwd, transposed bwd-input)
//   scatter: big    = col2im(W_g^T . small)         (conv bwd-input, transposed fwd)
//   weight:  dW_g  += small . im2col(big)^T         (both weight gradients)
// Samples are split over the thread pool; each chunk keeps its own scratch
// and its own weight-gradient partial sum. Float32 regular convolutions go to
// oneDNN first (support/dnnl_conv.h); what it does not take runs here.
#include <algorithm>
#include <cstring>
#include <vector>

#include "support/dnnl_conv.h"
#include "support/gemm.h"
#include "support/nn_common.h"
#include "support/registry.h"

namespace flemu {
namespace {

struct ConvGeom {
  int32_t nd = 2;  // spatial dims of the call; geometry below is padded to 3
  int64_t batch = 0, groups = 1;
  int64_t cb = 0, cs = 0;    // channels of the big and small side
  int64_t cbg = 0, csg = 0;  // per group
  int64_t big[3] = {1, 1, 1}, small[3] = {1, 1, 1};
  int64_t k[3] = {1, 1, 1}, stride[3] = {1, 1, 1}, pad[3] = {0, 0, 0}, dil[3] = {1, 1, 1};
  int64_t K = 1, Lb = 1, Ls = 1;
  int64_t rows = 0;            // cbg * K: rows of a column matrix
  bool identity_cols = false;  // 1x1 kernel, stride 1, no padding: the column matrix is the big side
};

// One side of one call: sample n, channel c, spatial (padded to 3 dims).
struct SideView {
  char* data = nullptr;
  int64_t sn = 0, sc = 0;  // element strides
  int64_t st[3] = {0, 0, 0};
  int64_t size[3] = {1, 1, 1};
  bool spatial_dense = false;
};

SideView side_view(const Strided& t, int32_t nd) {
  SideView v;
  v.data = t.data;
  v.sn = t.strides[0];
  v.sc = t.strides[1];
  for (int32_t d = 0; d < nd; ++d) {
    v.size[3 - nd + d] = t.sizes[2 + d];
    v.st[3 - nd + d] = t.strides[2 + d];
  }
  v.spatial_dense = dense_from(t, 2);
  return v;
}

// A [channels x L] plane in the compute type with row stride `rs`.
template <class C>
struct Plane {
  C* ptr = nullptr;
  int64_t rs = 0;
};

template <class T, class C>
Plane<C> load_plane(const SideView& v, int64_t n, int64_t c0, int64_t cnt, int64_t L, std::vector<C>& buf) {
  if constexpr (std::is_same_v<T, C>) {
    if (v.spatial_dense) return {reinterpret_cast<C*>(v.data) + n * v.sn + c0 * v.sc, v.sc};
  }
  buf.resize(static_cast<size_t>(cnt * L));
  const T* base = reinterpret_cast<const T*>(v.data);
  for (int64_t c = 0; c < cnt; ++c) {
    C* dst = buf.data() + c * L;
    const T* src = base + n * v.sn + (c0 + c) * v.sc;
    for (int64_t a = 0; a < v.size[0]; ++a)
      for (int64_t b = 0; b < v.size[1]; ++b) {
        const T* row = src + a * v.st[0] + b * v.st[1];
        for (int64_t w = 0; w < v.size[2]; ++w) *dst++ = static_cast<C>(to_compute(row[w * v.st[2]]));
      }
  }
  return {buf.data(), L};
}

// Where a kernel writes a plane: straight into the tensor when it has the
// compute type and dense spatial dims, otherwise into `buf` (then store_plane).
template <class T, class C>
Plane<C> out_plane(const SideView& v, int64_t n, int64_t c0, int64_t cnt, int64_t L, std::vector<C>& buf) {
  if constexpr (std::is_same_v<T, C>) {
    if (v.spatial_dense) return {reinterpret_cast<C*>(v.data) + n * v.sn + c0 * v.sc, v.sc};
  }
  buf.resize(static_cast<size_t>(cnt * L));
  return {buf.data(), L};
}

template <class T, class C>
void store_plane(const SideView& v, int64_t n, int64_t c0, int64_t cnt, const Plane<C>& p) {
  T* base = reinterpret_cast<T*>(v.data);
  if (reinterpret_cast<const void*>(p.ptr) == reinterpret_cast<const void*>(base + n * v.sn + c0 * v.sc)) return;
  for (int64_t c = 0; c < cnt; ++c) {
    const C* src = p.ptr + c * p.rs;
    T* dst = base + n * v.sn + (c0 + c) * v.sc;
    for (int64_t a = 0; a < v.size[0]; ++a)
      for (int64_t b = 0; b < v.size[1]; ++b) {
        T* row = dst + a * v.st[0] + b * v.st[1];
        for (int64_t w = 0; w < v.size[2]; ++w) row[w * v.st[2]] = convert<T>(*src++);
      }
  }
}

// The range of output positions o in [0, out) with o * s + off inside [0, in).
inline void valid_range(int64_t out, int64_t in, int64_t s, int64_t off, int64_t* lo, int64_t* hi) {
  *lo = off >= 0 ? 0 : (-off + s - 1) / s;
  *hi = in - 1 - off < 0 ? 0 : std::min(out, (in - 1 - off) / s + 1);
  if (*lo > *hi) *lo = *hi;
}

// col[(c * K + kk) x Ls] from the big plane (cbg channels, row stride p.rs).
template <class C>
void im2col(const ConvGeom& g, const C* big, int64_t big_rs, C* col) {
  const int64_t D = g.big[0], H = g.big[1], W = g.big[2];
  const int64_t oD = g.small[0], oH = g.small[1], oW = g.small[2];
  C* dst = col;
  for (int64_t c = 0; c < g.cbg; ++c) {
    const C* src_c = big + c * big_rs;
    for (int64_t kd = 0; kd < g.k[0]; ++kd)
      for (int64_t kh = 0; kh < g.k[1]; ++kh)
        for (int64_t kw = 0; kw < g.k[2]; ++kw) {
          const int64_t offd = kd * g.dil[0] - g.pad[0], offh = kh * g.dil[1] - g.pad[1];
          const int64_t offw = kw * g.dil[2] - g.pad[2];
          int64_t wlo, whi;
          valid_range(oW, W, g.stride[2], offw, &wlo, &whi);
          for (int64_t od = 0; od < oD; ++od) {
            const int64_t id = od * g.stride[0] + offd;
            for (int64_t oh = 0; oh < oH; ++oh, dst += oW) {
              const int64_t ih = oh * g.stride[1] + offh;
              if (id < 0 || id >= D || ih < 0 || ih >= H) {
                std::fill(dst, dst + oW, C(0));
                continue;
              }
              const C* src = src_c + (id * H + ih) * W + offw;
              std::fill(dst, dst + wlo, C(0));
              if (g.stride[2] == 1) std::memcpy(dst + wlo, src + wlo, static_cast<size_t>(whi - wlo) * sizeof(C));
              else
                for (int64_t ow = wlo; ow < whi; ++ow) dst[ow] = src[ow * g.stride[2]];
              std::fill(dst + whi, dst + oW, C(0));
            }
          }
        }
  }
}

// The adjoint of im2col: big plane += the column matrix folded back.
template <class C>
void col2im(const ConvGeom& g, const C* col, C* big, int64_t big_rs) {
  const int64_t D = g.big[0], H = g.big[1], W = g.big[2];
  const int64_t oD = g.small[0], oH = g.small[1], oW = g.small[2];
  const C* src = col;
  for (int64_t c = 0; c < g.cbg; ++c) {
    C* dst_c = big + c * big_rs;
    for (int64_t kd = 0; kd < g.k[0]; ++kd)
      for (int64_t kh = 0; kh < g.k[1]; ++kh)
        for (int64_t kw = 0; kw < g.k[2]; ++kw) {
          const int64_t offd = kd * g.dil[0] - g.pad[0], offh = kh * g.dil[1] - g.pad[1];
          const int64_t offw = kw * g.dil[2] - g.pad[2];
          int64_t wlo, whi;
          valid_range(oW, W, g.stride[2], offw, &wlo, &whi);
          for (int64_t od = 0; od < oD; ++od) {
            const int64_t id = od * g.stride[0] + offd;
            for (int64_t oh = 0; oh < oH; ++oh, src += oW) {
              const int64_t ih = oh * g.stride[1] + offh;
              if (id < 0 || id >= D || ih < 0 || ih >= H) continue;
              C* dst = dst_c + (id * H + ih) * W + offw;
              if (g.stride[2] == 1)
                for (int64_t ow = wlo; ow < whi; ++ow) dst[ow] += src[ow];
              else
                for (int64_t ow = wlo; ow < whi; ++ow) dst[ow * g.stride[2]] += src[ow];
            }
          }
        }
  }
}

// What one pass over the samples computes.
struct ConvWork {
  ConvGeom g;
  int32_t dtype = 0;
  // Forward.
  bool gather = false;   // small = W . im2col(big)
  bool scatter = false;  // big = col2im(W^T . small)
  bool weight = false;   // dW += small . im2col(big)^T
  Strided big, small;    // the tensors of each side (for `weight`: the operands)
  Strided out_big, out_small;  // gather writes out_small, scatter writes out_big
  Strided w;             // weight (forward, input grads)
  Strided bias;          // forward bias, if has_bias
  bool has_bias = false;
  Strided grad_w;        // weight grad, if `weight`
  bool bias_grad = false;
  Strided grad_bias, bias_src;  // bias grad = sum over n and spatial of bias_src
  bool transposed = false;
};

ConvParams conv_params(const ConvGeom& g) {
  ConvParams p;
  p.nd = g.nd;
  p.groups = g.groups;
  for (int32_t d = 0; d < g.nd; ++d) {
    const int32_t at = 3 - g.nd + d;
    p.stride[d] = g.stride[at];
    p.pad[d] = g.pad[at];
    p.dil[d] = g.dil[at];
  }
  return p;
}

template <class T, class C>
void run_conv(const ConvWork& job);

// The job on oneDNN, when it takes it; false otherwise (the caller then
// computes every output, grad_input included if oneDNN wrote it already).
template <class T>
bool run_dnnl(ConvWork job) {
  if constexpr (!std::is_same_v<T, float>) {
    return false;
  } else {
    if (job.transposed) return false;
    const ConvParams p = conv_params(job.g);
    if (!job.scatter && !job.weight)
      return job.gather && !job.bias_grad &&
             dnnl_conv_forward(p, job.big, job.w, job.has_bias ? &job.bias : nullptr, job.out_small);
    // Backward of a regular convolution: big is the input, small grad_output.
    const bool with_bias = job.bias_grad && job.weight;
    if (!dnnl_conv_backward(p, job.small, job.big, job.w, job.scatter ? &job.out_big : nullptr,
                            job.weight ? &job.grad_w : nullptr, with_bias ? &job.grad_bias : nullptr))
      return false;
    if (job.bias_grad && !with_bias) {
      job.scatter = job.weight = false;
      run_conv<float, float>(job);
    }
    return true;
  }
}

// The weight as a dense [cs x rows] matrix in the compute type.
template <class T, class C>
const C* weight_matrix(const Strided& w, std::vector<C>& buf) {
  if constexpr (std::is_same_v<T, C>) {
    if (dense(w)) return reinterpret_cast<const C*>(w.data);
  }
  buf.resize(static_cast<size_t>(w.numel));
  int64_t idx[kMaxLoopDims] = {};
  for (int64_t i = 0; i < w.numel; ++i) {
    buf[static_cast<size_t>(i)] = static_cast<C>(to_compute(*reinterpret_cast<const T*>(w.data + w.offset(idx))));
    for (int32_t d = w.ndim - 1; d >= 0; --d) {
      if (++idx[d] < w.sizes[d]) break;
      idx[d] = 0;
    }
  }
  return buf.data();
}

template <class T, class C>
void store_weight(const Strided& w, const C* src) {
  int64_t idx[kMaxLoopDims] = {};
  for (int64_t i = 0; i < w.numel; ++i) {
    *reinterpret_cast<T*>(w.data + w.offset(idx)) = convert<T>(src[i]);
    for (int32_t d = w.ndim - 1; d >= 0; --d) {
      if (++idx[d] < w.sizes[d]) break;
      idx[d] = 0;
    }
  }
}

template <class T, class C>
void add_bias(const Plane<C>& p, int64_t cnt, int64_t L, const Strided& bias, int64_t c0) {
  for (int64_t c = 0; c < cnt; ++c) {
    const C b = static_cast<C>(to_compute(*reinterpret_cast<const T*>(bias.data + (c0 + c) * bias.strides[0] * sizeof(T))));
    C* row = p.ptr + c * p.rs;
    for (int64_t l = 0; l < L; ++l) row[l] += b;
  }
}

template <class T, class C>
void run_conv(const ConvWork& job) {
  const ConvGeom& g = job.g;
  const int32_t nd = g.nd;
  std::vector<C> wbuf;
  const C* W = (job.gather || job.scatter) ? weight_matrix<T, C>(job.w, wbuf) : nullptr;
  const SideView big = side_view(job.big, nd), small = side_view(job.small, nd);
  const SideView obig = job.scatter ? side_view(job.out_big, nd) : SideView{};
  const SideView osmall = job.gather ? side_view(job.out_small, nd) : SideView{};
  const int64_t rows = g.rows, Ls = g.Ls, Lb = g.Lb;
  const size_t dw_size = static_cast<size_t>(g.cs * rows);

  // Chunks of samples over the pool; small problems stay on this thread.
  const int64_t macs = g.batch * g.cs * rows * Ls;
  ThreadPool& pool = ThreadPool::instance();
  const int64_t chunks = (g.batch >= 2 && macs >= (int64_t{1} << 20)) ? std::min<int64_t>(g.batch, pool.parallelism()) : 1;
  std::vector<std::vector<C>> dw_parts(job.weight ? static_cast<size_t>(chunks) : 0);

  auto process = [&](int64_t chunk) {
    const int64_t per = (g.batch + chunks - 1) / chunks;
    const int64_t n0 = chunk * per, n1 = std::min(g.batch, n0 + per);
    std::vector<C> colbuf, bigbuf, smallbuf, outbuf;
    C* dW = nullptr;
    if (job.weight) {
      dw_parts[static_cast<size_t>(chunk)].assign(dw_size, C(0));
      dW = dw_parts[static_cast<size_t>(chunk)].data();
    }
    if (!g.identity_cols && (job.gather || job.weight || job.scatter))
      colbuf.resize(static_cast<size_t>(std::max<int64_t>(rows * Ls, 1)));
    for (int64_t n = n0; n < n1; ++n) {
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        const int64_t cb0 = grp * g.cbg, cs0 = grp * g.csg;
        const C* Wg = W ? W + cs0 * rows : nullptr;
        // The column matrix of the big side, when gather or weight need it.
        const C* col = nullptr;
        int64_t col_rs = Ls;
        if (job.gather || job.weight) {
          const Plane<C> bp = load_plane<T, C>(big, n, cb0, g.cbg, Lb, bigbuf);
          if (g.identity_cols) {
            col = bp.ptr;
            col_rs = bp.rs;
          } else {
            im2col<C>(g, bp.ptr, bp.rs, colbuf.data());
            col = colbuf.data();
          }
        }
        if (job.weight) {
          const Plane<C> sp = load_plane<T, C>(small, n, cs0, g.csg, Ls, smallbuf);
          gemm_compute(g.csg, rows, Ls, sp.ptr, sp.rs, 1, col, 1, col_rs, dW + cs0 * rows, rows, true);
        }
        if (job.gather) {
          const Plane<C> op = out_plane<T, C>(osmall, n, cs0, g.csg, Ls, outbuf);
          gemm_compute(g.csg, Ls, rows, Wg, rows, 1, col, col_rs, 1, op.ptr, op.rs, false);
          if (job.has_bias) add_bias<T, C>(op, g.csg, Ls, job.bias, cs0);
          store_plane<T, C>(osmall, n, cs0, g.csg, op);
        }
        if (job.scatter) {
          // For a regular convolution `small` is grad_output; for a
          // transposed forward it is the input: the same product either way.
          const Plane<C> sp = load_plane<T, C>(small, n, cs0, g.csg, Ls, smallbuf);
          const Plane<C> op = out_plane<T, C>(obig, n, cb0, g.cbg, Lb, outbuf);
          if (g.identity_cols) {
            gemm_compute(g.cbg, Ls, g.csg, Wg, 1, rows, sp.ptr, sp.rs, 1, op.ptr, op.rs, false);
          } else {
            gemm_compute(rows, Ls, g.csg, Wg, 1, rows, sp.ptr, sp.rs, 1, colbuf.data(), Ls, false);
            for (int64_t c = 0; c < g.cbg; ++c) std::fill(op.ptr + c * op.rs, op.ptr + c * op.rs + Lb, C(0));
            col2im<C>(g, colbuf.data(), op.ptr, op.rs);
          }
          if (job.has_bias) add_bias<T, C>(op, g.cbg, Lb, job.bias, cb0);
          store_plane<T, C>(obig, n, cb0, g.cbg, op);
        }
      }
    }
  };
  if (chunks > 1) pool.parallel_for(chunks, process);
  else process(0);

  if (job.weight) {
    std::vector<C>& total = dw_parts[0];
    for (size_t p = 1; p < dw_parts.size(); ++p)
      for (size_t i = 0; i < dw_size; ++i) total[i] += dw_parts[p][i];
    store_weight<T, C>(job.grad_w, total.data());
  }
  if (job.bias_grad) {
    // Sum over samples and positions, per channel, in double.
    const Strided& s = job.bias_src;
    const SideView v = side_view(s, nd);
    const int64_t channels = s.sizes[1];
    parallel_chunks(channels, 16, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        double acc = 0.0;
        const T* base = reinterpret_cast<const T*>(v.data);
        for (int64_t n = 0; n < s.sizes[0]; ++n)
          for (int64_t a = 0; a < v.size[0]; ++a)
            for (int64_t b = 0; b < v.size[1]; ++b) {
              const T* row = base + n * v.sn + c * v.sc + a * v.st[0] + b * v.st[1];
              for (int64_t w = 0; w < v.size[2]; ++w) acc += static_cast<double>(to_compute(row[w * v.st[2]]));
            }
        *reinterpret_cast<T*>(job.grad_bias.data + c * job.grad_bias.strides[0] * sizeof(T)) = convert<T>(acc);
      }
    });
  }
}

void enqueue_conv(const Launch& L, ConvWork job) {
  dispatch_floating(job.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    L.enqueue([job] {
      if (!run_dnnl<T>(job)) run_conv<T, acc_t<T>>(job);
    });
  });
}

void require_floating_same(const TensorArg& t, int32_t dtype, const char* what) {
  if (!dtype_is_floating(t.dtype))
    invalid_argument(what, " has dtype ", dtype_name(t.dtype), "; convolution takes floating tensors");
  if (t.dtype != dtype)
    invalid_argument(what, " has dtype ", dtype_name(t.dtype), " but the input has ", dtype_name(dtype),
                     "; convolution operands must share one dtype");
}

// Reads and checks the geometry. `big_t`/`small_t` are the tensors whose
// shapes give each side's sizes (input/output of the call).
ConvGeom make_geom(const Launch& L, const TensorArg& input, const TensorArg& weight, const TensorArg& other,
                   size_t stride_i, size_t pad_i, size_t dil_i, bool transposed, size_t outpad_i, size_t groups_i) {
  if (input.ndim < 3 || input.ndim > 5)
    fail(TFL_ERR_UNIMPLEMENTED,
         cat("convolution input has ", input.ndim, " dims; flemu takes 1-d to 3-d convolutions (3 to 5 dims)"));
  if (weight.ndim != input.ndim)
    invalid_argument("weight has ", weight.ndim, " dims but the input has ", input.ndim,
                     "; expected (out_channels, in_channels/groups, kernel...) for a ", input.ndim - 2, "-d convolution");
  ConvGeom g;
  g.nd = input.ndim - 2;
  const size_t nd = static_cast<size_t>(g.nd);
  const auto stride = int_list(L, stride_i, "stride", nd);
  const auto pad = int_list(L, pad_i, "padding", nd);
  const auto dil = int_list(L, dil_i, "dilation", nd);
  const auto outpad = int_list(L, outpad_i, "output_padding", nd);
  g.groups = int_arg(L, groups_i, "groups");
  if (g.groups < 1) invalid_argument("groups must be positive, got ", g.groups);
  g.batch = input.sizes[0];
  // The transposed call's output is the big side; its input the small one.
  const TensorArg& bigt = transposed ? other : input;
  const TensorArg& smallt = transposed ? input : other;
  if (bigt.ndim != input.ndim || smallt.ndim != input.ndim)
    invalid_argument("input and output of a ", nd, "-d convolution must both have ", input.ndim, " dims");
  g.cb = bigt.sizes[1];
  g.cs = smallt.sizes[1];
  if (g.cb % g.groups || g.cs % g.groups)
    invalid_argument("channels (", input.sizes[1], " in, ", other.sizes[1], " out) must be divisible by groups=",
                     g.groups);
  g.cbg = g.cb / g.groups;
  g.csg = g.cs / g.groups;
  if (weight.sizes[0] != g.cs || weight.sizes[1] != g.cbg)
    invalid_argument("weight has shape [", weight.sizes[0], ", ", weight.sizes[1], ", ...] but the call needs [", g.cs,
                     ", ", g.cbg, ", ...]", transposed ? " (transposed: in_channels, out_channels/groups)" : "");
  for (size_t d = 0; d < nd; ++d) {
    const size_t p = 3 - nd + d;
    g.k[p] = weight.sizes[2 + d];
    g.stride[p] = stride[d];
    g.pad[p] = pad[d];
    g.dil[p] = dil[d];
    g.big[p] = bigt.sizes[2 + d];
    g.small[p] = smallt.sizes[2 + d];
    if (stride[d] < 1 || dil[d] < 1 || pad[d] < 0)
      invalid_argument("stride and dilation must be positive and padding non-negative; got stride ", stride[d],
                       ", dilation ", dil[d], ", padding ", pad[d], " in dim ", d);
    const int64_t span = dil[d] * (g.k[p] - 1) + 1;
    const int64_t expect_small = (g.big[p] + 2 * pad[d] - span) / stride[d] + 1;
    if (!transposed && g.small[p] != std::max<int64_t>(expect_small, 0))
      invalid_argument("convolution output has size ", g.small[p], " in spatial dim ", d, "; expected ", expect_small);
    if (transposed && g.big[p] != (g.small[p] - 1) * stride[d] - 2 * pad[d] + span + outpad[d])
      invalid_argument("transposed convolution output has size ", g.big[p], " in spatial dim ", d, "; expected ",
                       (g.small[p] - 1) * stride[d] - 2 * pad[d] + span + outpad[d]);
    g.K *= g.k[p];
    g.Lb *= g.big[p];
    g.Ls *= g.small[p];
  }
  g.rows = g.cbg * g.K;
  g.identity_cols = g.K == 1 && g.Lb == g.Ls;
  for (int d = 0; d < 3; ++d) g.identity_cols = g.identity_cols && g.stride[d] == 1 && g.pad[d] == 0;
  return g;
}

}  // namespace

TFL_Error* kernel_convolution(const TFL_Kernel_Args* args) {
  // convolution(input, weight, bias?, stride, padding, dilation, transposed, output_padding, groups)
  return run_kernel(args, kConvolution, [&](Launch& L) {
    const TensorArg input = L.input_tensor(0, "input"), weight = L.input_tensor(1, "weight");
    const TensorArg out = L.output(0, "out");
    TensorArg bias;
    const bool has_bias = optional_tensor(L, 2, "bias", &bias);
    require_floating_same(input, input.dtype, "input");
    require_floating_same(weight, input.dtype, "weight");
    require_floating_same(out, input.dtype, "out");
    if (has_bias) require_floating_same(bias, input.dtype, "bias");
    const bool transposed = L.boolean_or(6, false, "transposed");
    ConvWork job;
    job.g = make_geom(L, input, weight, out, 3, 4, 5, transposed, 7, 8);
    job.dtype = input.dtype;
    job.transposed = transposed;
    if (has_bias) {
      const int64_t want = transposed ? job.g.cb : job.g.cs;
      if (bias.ndim != 1 || bias.sizes[0] != want)
        invalid_argument("bias must have shape [", want, "] (one entry per output channel), got ", bias.ndim, " dims");
      job.bias = strided(bias, "bias");
      job.has_bias = true;
    }
    if (out.numel == 0) return;
    job.w = strided(weight, "weight");
    if (!transposed) {
      job.gather = true;
      job.big = strided(input, "input");
      job.out_small = strided(out, "out");
    } else {
      job.scatter = true;
      job.small = strided(input, "input");
      job.out_big = strided(out, "out");
    }
    enqueue_conv(L, job);
  });
}

TFL_Error* kernel_convolution_backward(const TFL_Kernel_Args* args) {
  // convolution_backward(grad_output, input, weight, bias_sizes?, stride, padding, dilation,
  //                      transposed, output_padding, groups, output_mask) -> (grad_input, grad_weight, grad_bias)
  return run_kernel(args, kConvolutionBackward, [&](Launch& L) {
    const TensorArg grad = L.input_tensor(0, "grad_output"), input = L.input_tensor(1, "input");
    const TensorArg weight = L.input_tensor(2, "weight");
    require_floating_same(input, input.dtype, "input");
    require_floating_same(grad, input.dtype, "grad_output");
    require_floating_same(weight, input.dtype, "weight");
    const bool transposed = L.boolean_or(7, false, "transposed");
    const TFL_Value& mask_v = L.input(10, "output_mask");
    if (mask_v.tag != TFL_VALUE_BOOL_LIST || mask_v.v.bools.size != 3)
      invalid_argument("output_mask must be a list of 3 bools");
    const bool want[3] = {mask_v.v.bools.data[0] != 0, mask_v.v.bools.data[1] != 0, mask_v.v.bools.data[2] != 0};
    TensorArg gi, gw, gb;
    const bool has_gi = want[0] && optional_output(L, 0, "grad_input", &gi) && gi.numel > 0;
    const bool has_gw = want[1] && optional_output(L, 1, "grad_weight", &gw) && gw.numel > 0;
    const bool has_gb = want[2] && optional_output(L, 2, "grad_bias", &gb) && gb.numel > 0;
    ConvWork job;
    job.g = make_geom(L, input, weight, grad, 4, 5, 6, transposed, 8, 9);
    job.dtype = input.dtype;
    job.transposed = transposed;
    if (has_gi) require_floating_same(gi, input.dtype, "grad_input");
    if (has_gw) require_floating_same(gw, input.dtype, "grad_weight");
    if (has_gb) require_floating_same(gb, input.dtype, "grad_bias");
    const Strided sg = strided(grad, "grad_output"), si = strided(input, "input");
    job.w = strided(weight, "weight");
    // Regular: big = input, small = grad_output. Transposed: big = grad_output, small = input.
    job.big = transposed ? sg : si;
    job.small = transposed ? si : sg;
    if (has_gi) {
      if (gi.ndim != input.ndim) invalid_argument("grad_input must be shaped like the input");
      if (!transposed) {
        job.scatter = true;
        job.out_big = strided(gi, "grad_input");
      } else {
        job.gather = true;
        job.out_small = strided(gi, "grad_input");
      }
    }
    if (has_gw) {
      if (gw.ndim != weight.ndim) invalid_argument("grad_weight must be shaped like the weight");
      for (int32_t d = 0; d < gw.ndim; ++d)
        if (gw.sizes[d] != weight.sizes[d]) invalid_argument("grad_weight must be shaped like the weight");
      job.weight = true;
      job.grad_w = strided(gw, "grad_weight");
    }
    if (has_gb) {
      const int64_t channels = grad.sizes[1];
      if (gb.ndim != 1 || gb.sizes[0] != channels)
        invalid_argument("grad_bias must have shape [", channels, "], got ", gb.ndim, " dims");
      job.bias_grad = true;
      job.grad_bias = strided(gb, "grad_bias");
      job.bias_src = sg;
    }
    if (!job.scatter && !job.gather && !job.weight && !job.bias_grad) return;
    // An empty batch or empty spatial extent contributes nothing: gradients are zero.
    enqueue_conv(L, job);
  });
}

}  // namespace flemu
