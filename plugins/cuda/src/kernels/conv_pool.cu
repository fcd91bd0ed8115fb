// Convolution (2-D, groups 1) as im2col + cuBLAS GEMM, max pooling with
// indices, and embedding lookups, with their backwards. Operands arrive
// dense and row-major (the descriptors declare CONTIGUOUS_INPUTS and
// CONTIGUOUS_OUTPUTS).
//
// Forward:      col[n] = im2col(x[n]) ([C*kh*kw, OH*OW]); y[n] = W col[n]
//               (one strided-batched GEMM; a 1x1/stride-1 convolution uses x
//               as col directly).
// grad_input:   gcol[n] = W^T gy[n]; gx = col2im(gcol).
// grad_weight:  gW = gy' col'^T with gy' = gy as [OC, N*OH*OW] and col' the
//               columns of every sample side by side: one GEMM.
#include <cmath>
#include <vector>

#include "block_reduce.cuh"
#include "device_access.cuh"
#include "kernel_call.h"
#include "kernel_entry_points.h"
#include "tensor_ref.h"

namespace flcuda {

void gemm_for_conv(const KernelCall& call, int32_t dtype, int64_t batch, const char* a, int64_t M, int64_t K,
                   int64_t a_sr, int64_t a_sc, int64_t a_sb, const char* b, int64_t N, int64_t b_sr, int64_t b_sc,
                   int64_t b_sb, char* c, double beta);

namespace {

constexpr int kThreads = 256;

struct ConvGeom {
  int64_t N, C, H, W, OC, KH, KW, OH, OW;
  int64_t sh, sw, ph, pw, dh, dw;
  int64_t K() const { return C * KH * KW; }
  int64_t P() const { return OH * OW; }
  bool pointwise() const { return KH == 1 && KW == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0; }
};

std::vector<int64_t> pair_arg(const KernelCall& call, size_t i, const char* what, int64_t fallback) {
  std::vector<int64_t> v = call.has_input(i) ? call.ints(i, what) : std::vector<int64_t>{};
  if (v.empty()) v = {fallback};
  if (v.size() == 1) v.push_back(v[0]);
  if (v.size() != 2) tfl::unimplemented(what, " has ", v.size(), " entries; only 2-D windows run here");
  return v;
}

ConvGeom conv_geometry(const KernelCall& call, const TFL_Tensor* x, const TFL_Tensor* w, size_t stride_i) {
  if (x->ndim != 4 || w->ndim != 4) tfl::unimplemented("only 2-D convolutions (4-D input and weight) run here");
  const std::vector<int64_t> stride = pair_arg(call, stride_i, "stride", 1);
  const std::vector<int64_t> pad = pair_arg(call, stride_i + 1, "padding", 0);
  const std::vector<int64_t> dil = pair_arg(call, stride_i + 2, "dilation", 1);
  if (call.boolean(stride_i + 3, "transposed")) tfl::unimplemented("transposed convolutions run on the fallback path");
  if (call.integer(stride_i + 5, "groups") != 1) tfl::unimplemented("grouped convolutions run on the fallback path");
  ConvGeom g{};
  g.N = x->sizes[0], g.C = x->sizes[1], g.H = x->sizes[2], g.W = x->sizes[3];
  g.OC = w->sizes[0], g.KH = w->sizes[2], g.KW = w->sizes[3];
  if (w->sizes[1] != g.C) tfl::invalid_argument("weight has ", w->sizes[1], " input channels, input has ", g.C);
  g.sh = stride[0], g.sw = stride[1], g.ph = pad[0], g.pw = pad[1], g.dh = dil[0], g.dw = dil[1];
  if (g.sh <= 0 || g.sw <= 0 || g.dh <= 0 || g.dw <= 0 || g.ph < 0 || g.pw < 0)
    tfl::invalid_argument("stride and dilation must be positive and padding non-negative");
  g.OH = window_output_size(g.H, g.KH, g.sh, g.ph, g.dh, false);
  g.OW = window_output_size(g.W, g.KW, g.sw, g.pw, g.dw, false);
  return g;
}

// col element (n, k, p) lives at n * s_n + k * s_k + p.
__global__ void im2col_kernel(const char* x, int32_t dt, ConvGeom g, char* col, int64_t s_n, int64_t s_k) {
  const int64_t K = g.C * g.KH * g.KW, P = g.OH * g.OW, total = g.N * K * P;
  const int64_t is = itemsize_of_dev(dt);
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t p = t % P;
    const int64_t k = (t / P) % K;
    const int64_t n = t / (P * K);
    const int64_t j = k % g.KW, i = (k / g.KW) % g.KH, c = k / (g.KW * g.KH);
    const int64_t oh = p / g.OW, ow = p % g.OW;
    const int64_t ih = oh * g.sh - g.ph + i * g.dh, iw = ow * g.sw - g.pw + j * g.dw;
    float v = 0.0f;
    if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W)
      v = load_as<float>(x + (((n * g.C + c) * g.H + ih) * g.W + iw) * is, dt);
    store_as<float>(col + (n * s_n + k * s_k + p) * is, dt, v);
  }
}

// Gathers, for each input element, the column entries it was copied to.
__global__ void col2im_kernel(const char* col, int32_t dt, ConvGeom g, char* x, int64_t s_n, int64_t s_k) {
  const int64_t total = g.N * g.C * g.H * g.W;
  const int64_t is = itemsize_of_dev(dt);
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t iw = t % g.W, ih = (t / g.W) % g.H, c = (t / (g.W * g.H)) % g.C, n = t / (g.W * g.H * g.C);
    float acc = 0.0f;
    for (int64_t i = 0; i < g.KH; ++i) {
      const int64_t hnum = ih + g.ph - i * g.dh;
      if (hnum < 0 || hnum % g.sh != 0) continue;
      const int64_t oh = hnum / g.sh;
      if (oh >= g.OH) continue;
      for (int64_t j = 0; j < g.KW; ++j) {
        const int64_t wnum = iw + g.pw - j * g.dw;
        if (wnum < 0 || wnum % g.sw != 0) continue;
        const int64_t ow = wnum / g.sw;
        if (ow >= g.OW) continue;
        const int64_t k = (c * g.KH + i) * g.KW + j;
        acc += load_as<float>(col + (n * s_n + k * s_k + oh * g.OW + ow) * is, dt);
      }
    }
    store_as<float>(x + t * is, dt, acc);
  }
}

// grad_bias[oc] = sum over n, p of gy[n, oc, p]; one block per channel.
__global__ void channel_sum_kernel(const char* gy, int32_t dt, int64_t N, int64_t C, int64_t P, char* out,
                                   int32_t out_dt) {
  const int64_t c = blockIdx.x;
  const int64_t is = itemsize_of_dev(dt);
  float acc = 0.0f;
  for (int64_t e = threadIdx.x; e < N * P; e += blockDim.x) {
    const int64_t n = e / P, p = e % P;
    acc += load_as<float>(gy + ((n * C + c) * P + p) * is, dt);
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) store_as<float>(out + c * itemsize_of_dev(out_dt), out_dt, acc);
}

void launch_im2col(const KernelCall& call, const TFL_Tensor* x, const ConvGeom& g, char* col, int64_t s_n,
                   int64_t s_k) {
  im2col_kernel<<<grid_for(g.N * g.K() * g.P(), kThreads), kThreads, 0, call.stream()>>>(
      static_cast<const char*>(x->data), x->dtype, g, col, s_n, s_k);
}

// ---------------------------------------------------------------------------
// max pooling
// ---------------------------------------------------------------------------

struct PoolGeom {
  int64_t planes, H, W, OH, OW, kh, kw, sh, sw, ph, pw, dh, dw;
};

PoolGeom pool_geometry(const KernelCall& call, const TFL_Tensor* x, size_t kernel_i, bool ceil_mode) {
  if (x->ndim != 3 && x->ndim != 4) tfl::invalid_argument("max_pool2d takes 3-D or 4-D input, got ", x->ndim, "-D");
  const std::vector<int64_t> k = pair_arg(call, kernel_i, "kernel_size", 1);
  std::vector<int64_t> s = call.has_input(kernel_i + 1) ? call.ints(kernel_i + 1, "stride") : std::vector<int64_t>{};
  if (s.empty()) s = k;
  if (s.size() == 1) s.push_back(s[0]);
  const std::vector<int64_t> p = pair_arg(call, kernel_i + 2, "padding", 0);
  const std::vector<int64_t> d = pair_arg(call, kernel_i + 3, "dilation", 1);
  PoolGeom g{};
  g.H = x->sizes[x->ndim - 2];
  g.W = x->sizes[x->ndim - 1];
  g.planes = g.H * g.W == 0 ? 0 : x->numel / (g.H * g.W);
  g.kh = k[0], g.kw = k[1], g.sh = s[0], g.sw = s[1], g.ph = p[0], g.pw = p[1], g.dh = d[0], g.dw = d[1];
  if (g.kh <= 0 || g.kw <= 0 || g.sh <= 0 || g.sw <= 0 || g.dh <= 0 || g.dw <= 0)
    tfl::invalid_argument("kernel_size, stride and dilation must be positive");
  g.OH = window_output_size(g.H, g.kh, g.sh, g.ph, g.dh, ceil_mode);
  g.OW = window_output_size(g.W, g.kw, g.sw, g.pw, g.dw, ceil_mode);
  return g;
}

__global__ void max_pool_kernel(const char* x, int32_t dt, PoolGeom g, char* y, int32_t y_dt, int64_t* idx) {
  const int64_t total = g.planes * g.OH * g.OW;
  const int64_t is = itemsize_of_dev(dt), ys = itemsize_of_dev(y_dt);
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t ow = t % g.OW, oh = (t / g.OW) % g.OH, plane = t / (g.OW * g.OH);
    const char* src = x + plane * g.H * g.W * is;
    float best = -INFINITY;
    int64_t best_i = -1;
    for (int64_t i = 0; i < g.kh; ++i) {
      const int64_t ih = oh * g.sh - g.ph + i * g.dh;
      if (ih < 0 || ih >= g.H) continue;
      for (int64_t j = 0; j < g.kw; ++j) {
        const int64_t iw = ow * g.sw - g.pw + j * g.dw;
        if (iw < 0 || iw >= g.W) continue;
        const float v = load_as<float>(src + (ih * g.W + iw) * is, dt);
        if (best_i < 0 || v > best || v != v) {
          best = v;
          best_i = ih * g.W + iw;
          if (v != v) break;
        }
      }
      if (best != best) break;
    }
    store_as<float>(y + t * ys, y_dt, best);
    if (idx != nullptr) idx[t] = best_i;
  }
}

__global__ void max_pool_backward_kernel(const char* gy, int32_t gy_dt, const int64_t* idx, PoolGeom g, float* gx) {
  const int64_t total = g.planes * g.OH * g.OW;
  const int64_t is = itemsize_of_dev(gy_dt);
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t plane = t / (g.OW * g.OH);
    const int64_t i = idx[t];
    if (i >= 0 && i < g.H * g.W) atomicAdd(gx + plane * g.H * g.W + i, load_as<float>(gy + t * is, gy_dt));
  }
}

// ---------------------------------------------------------------------------
// embedding
// ---------------------------------------------------------------------------

__global__ void embedding_kernel(const char* w, int32_t dt, int64_t V, int64_t D, const char* ids, int32_t id_dt,
                                 int64_t n, char* out) {
  const int64_t is = itemsize_of_dev(dt), ids_is = itemsize_of_dev(id_dt);
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n * D;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = load_as<int64_t>(ids + (t / D) * ids_is, id_dt);
    const int64_t col = t % D;
    float v = 0.0f;
    if (row >= 0 && row < V) v = load_as<float>(w + (row * D + col) * is, dt);
    store_as<float>(out + t * is, dt, v);
  }
}

__global__ void embedding_backward_kernel(const char* gy, int32_t dt, int64_t D, const char* ids, int32_t id_dt,
                                          int64_t n, int64_t V, int64_t padding_idx, float* gw) {
  const int64_t is = itemsize_of_dev(dt), ids_is = itemsize_of_dev(id_dt);
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n * D;
       t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = load_as<int64_t>(ids + (t / D) * ids_is, id_dt);
    if (row == padding_idx || row < 0 || row >= V) continue;
    atomicAdd(gw + row * D + t % D, load_as<float>(gy + t * is, dt));
  }
}

}  // namespace

// aten::convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding,
//   SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor
TFL_Error* kernel_convolution(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::convolution", [&](KernelCall& call) {
    const TFL_Tensor* x = call.tensor(0, "input");
    const TFL_Tensor* w = call.tensor(1, "weight");
    const TFL_Tensor* bias = call.optional_tensor(2, "bias");
    const ConvGeom g = conv_geometry(call, x, w, 3);
    const TFL_Tensor* y = call.required_output(0);
    if (y->ndim != 4 || y->sizes[0] != g.N || y->sizes[1] != g.OC || y->sizes[2] != g.OH || y->sizes[3] != g.OW)
      tfl::invalid_argument("output shape does not match the convolution's");
    if (x->dtype != w->dtype) tfl::unimplemented("input and weight of different dtypes");
    if (y->numel == 0) return;
    const int64_t is = itemsize_of(x->dtype);
    double beta = 0.0;
    if (bias != nullptr) {
      TensorRef b = ref_of(bias);
      // Broadcast bias over [N, OC, OH, OW].
      TensorRef bb;
      bb.data = b.data;
      bb.dtype = b.dtype;
      bb.ndim = 4;
      bb.sizes[0] = g.N, bb.sizes[1] = g.OC, bb.sizes[2] = g.OH, bb.sizes[3] = g.OW;
      bb.strides[0] = 0, bb.strides[1] = bias->ndim > 0 ? bias->strides[0] : 0, bb.strides[2] = 0, bb.strides[3] = 0;
      copy_into(call.stream(), ref_of(y), bb);
      beta = 1.0;
    }
    if (g.K() == 0) {
      if (bias == nullptr) fill_ref(call.stream(), ref_of(y), 0.0);
      return;
    }
    const char* col = static_cast<const char*>(x->data);
    if (!g.pointwise() || g.dh != 1 || g.dw != 1) {
      char* buf = static_cast<char*>(call.workspace(static_cast<size_t>(g.N * g.K() * g.P() * is)));
      launch_im2col(call, x, g, buf, g.K() * g.P(), g.P());
      col = buf;
    }
    // y[n] (OC x P) = W (OC x K) col[n] (K x P)
    gemm_for_conv(call, x->dtype, g.N, static_cast<const char*>(w->data), g.OC, g.K(), g.K(), 1, 0, col, g.P(),
                  g.P(), 1, g.K() * g.P(), static_cast<char*>(y->data), beta);
    call.check_launch("convolution");
  });
}

// aten::convolution_backward(Tensor grad_output, Tensor input, Tensor weight, SymInt[]? bias_sizes,
//   SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding,
//   SymInt groups, bool[3] output_mask) -> (Tensor, Tensor, Tensor)
TFL_Error* kernel_convolution_backward(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::convolution_backward", [&](KernelCall& call) {
    const TFL_Tensor* gy = call.tensor(0, "grad_output");
    const TFL_Tensor* x = call.tensor(1, "input");
    const TFL_Tensor* w = call.tensor(2, "weight");
    const ConvGeom g = conv_geometry(call, x, w, 4);
    if (gy->ndim != 4 || gy->sizes[0] != g.N || gy->sizes[1] != g.OC || gy->sizes[2] != g.OH || gy->sizes[3] != g.OW)
      tfl::invalid_argument("grad_output shape does not match the convolution's");
    if (x->dtype != w->dtype || gy->dtype != x->dtype) tfl::unimplemented("operands of different dtypes");
    const TFL_Tensor* gx = call.output(0);
    const TFL_Tensor* gw = call.output(1);
    const TFL_Tensor* gb = call.output(2);
    const int64_t is = itemsize_of(x->dtype);
    cudaStream_t s = call.stream();
    const int64_t K = g.K(), P = g.P();
    if (gb != nullptr && gb->numel > 0) {
      if (g.N * P == 0) fill_ref(s, ref_of(gb), 0.0);
      else channel_sum_kernel<<<static_cast<unsigned>(g.OC), kThreads, 0, s>>>(
          static_cast<const char*>(gy->data), gy->dtype, g.N, g.OC, P, static_cast<char*>(gb->data), gb->dtype);
    }
    if (gx != nullptr && gx->numel > 0) {
      if (g.OC == 0 || P == 0) {
        fill_ref(s, ref_of(gx), 0.0);
      } else if (g.pointwise() && g.dh == 1 && g.dw == 1) {
        // gx[n] (C x P) = W^T (C x OC) gy[n] (OC x P)
        gemm_for_conv(call, x->dtype, g.N, static_cast<const char*>(w->data), K, g.OC, 1, K, 0,
                      static_cast<const char*>(gy->data), P, P, 1, g.OC * P, static_cast<char*>(gx->data), 0.0);
      } else {
        char* gcol = static_cast<char*>(call.workspace(static_cast<size_t>(g.N * K * P * is)));
        gemm_for_conv(call, x->dtype, g.N, static_cast<const char*>(w->data), K, g.OC, 1, K, 0,
                      static_cast<const char*>(gy->data), P, P, 1, g.OC * P, gcol, 0.0);
        col2im_kernel<<<grid_for(gx->numel, kThreads), kThreads, 0, s>>>(gcol, x->dtype, g,
                                                                         static_cast<char*>(gx->data), K * P, P);
      }
    }
    if (gw != nullptr && gw->numel > 0) {
      if (g.N * P == 0) {
        fill_ref(s, ref_of(gw), 0.0);
      } else {
        // col' [K, N*P] and gy' [OC, N*P]; gW (OC x K) = gy' col'^T.
        const int64_t NP = g.N * P;
        char* col = static_cast<char*>(call.workspace(static_cast<size_t>(K * NP * is)));
        launch_im2col(call, x, g, col, P, NP);
        char* gyt = static_cast<char*>(call.workspace(static_cast<size_t>(g.OC * NP * is)));
        TensorRef src = ref_of(gy);  // [N, OC, OH, OW] read as [OC, N, P]
        TensorRef perm;
        perm.data = src.data;
        perm.dtype = src.dtype;
        perm.ndim = 3;
        perm.sizes[0] = g.OC, perm.sizes[1] = g.N, perm.sizes[2] = P;
        perm.strides[0] = P, perm.strides[1] = g.OC * P, perm.strides[2] = 1;
        copy_into(s, dense_ref(gyt, gy->dtype, {g.OC, g.N, P}), perm);
        gemm_for_conv(call, x->dtype, 1, gyt, g.OC, NP, NP, 1, 0, col, K, 1, NP, 0, static_cast<char*>(gw->data),
                      0.0);
      }
    }
    call.check_launch("convolution backward");
  });
}

// aten::max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0,
//   int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)
TFL_Error* kernel_max_pool2d_with_indices(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::max_pool2d_with_indices", [&](KernelCall& call) {
    const TFL_Tensor* x = call.tensor(0, "self");
    const PoolGeom g = pool_geometry(call, x, 1, call.boolean_or(5, false, "ceil_mode"));
    const TFL_Tensor* y = call.required_output(0);
    const TFL_Tensor* idx = call.output(1);
    if (idx != nullptr && idx->dtype != TFL_DTYPE_INT64) tfl::invalid_argument("indices must be int64");
    if (y->numel != g.planes * g.OH * g.OW) tfl::invalid_argument("output shape does not match the pooling's");
    if (y->numel == 0) return;
    max_pool_kernel<<<grid_for(y->numel, kThreads), kThreads, 0, call.stream()>>>(
        static_cast<const char*>(x->data), x->dtype, g, static_cast<char*>(y->data), y->dtype,
        idx != nullptr ? static_cast<int64_t*>(idx->data) : nullptr);
    call.check_launch("max_pool2d");
  });
}

// aten::max_pool2d_with_indices_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride,
//   int[2] padding, int[2] dilation, bool ceil_mode, Tensor indices) -> Tensor
TFL_Error* kernel_max_pool2d_with_indices_backward(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::max_pool2d_with_indices_backward", [&](KernelCall& call) {
    const TFL_Tensor* gy = call.tensor(0, "grad_output");
    const TFL_Tensor* x = call.tensor(1, "self");
    const PoolGeom g = pool_geometry(call, x, 2, call.boolean(6, "ceil_mode"));
    const TFL_Tensor* idx = call.tensor(7, "indices");
    const TFL_Tensor* gx = call.required_output(0);
    if (gx->dtype != TFL_DTYPE_FLOAT32) tfl::unimplemented("max_pool2d backward accumulates float32 only");
    if (idx->dtype != TFL_DTYPE_INT64 || idx->numel != gy->numel) tfl::invalid_argument("indices do not match grad_output");
    check_cuda(cudaMemsetAsync(gx->data, 0, static_cast<size_t>(gx->numel) * 4, call.stream()), "cudaMemsetAsync");
    if (gy->numel == 0) return;
    max_pool_backward_kernel<<<grid_for(gy->numel, kThreads), kThreads, 0, call.stream()>>>(
        static_cast<const char*>(gy->data), gy->dtype, static_cast<const int64_t*>(idx->data), g,
        static_cast<float*>(gx->data));
    call.check_launch("max_pool2d backward");
  });
}

// aten::embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False,
//   bool sparse=False) -> Tensor
TFL_Error* kernel_embedding(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::embedding", [&](KernelCall& call) {
    const TFL_Tensor* w = call.tensor(0, "weight");
    const TFL_Tensor* ids = call.tensor(1, "indices");
    if (w->ndim != 2) tfl::invalid_argument("weight must be 2-D");
    if (ids->dtype != TFL_DTYPE_INT64 && ids->dtype != TFL_DTYPE_INT32)
      tfl::invalid_argument("indices must be int64 or int32");
    const TFL_Tensor* out = call.required_output(0);
    if (out->dtype != w->dtype) tfl::invalid_argument("output dtype differs from weight's");
    if (out->numel == 0) return;
    embedding_kernel<<<grid_for(out->numel, kThreads), kThreads, 0, call.stream()>>>(
        static_cast<const char*>(w->data), w->dtype, w->sizes[0], w->sizes[1], static_cast<const char*>(ids->data),
        ids->dtype, ids->numel, static_cast<char*>(out->data));
    call.check_launch("embedding");
  });
}

// aten::embedding_dense_backward(Tensor grad_output, Tensor indices, SymInt num_weights, SymInt padding_idx,
//   bool scale_grad_by_freq) -> Tensor
TFL_Error* kernel_embedding_dense_backward(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::embedding_dense_backward", [&](KernelCall& call) {
    const TFL_Tensor* gy = call.tensor(0, "grad_output");
    const TFL_Tensor* ids = call.tensor(1, "indices");
    const int64_t V = call.integer(2, "num_weights");
    const int64_t padding_idx = call.integer(3, "padding_idx");
    if (call.boolean(4, "scale_grad_by_freq")) tfl::unimplemented("scale_grad_by_freq runs on the fallback path");
    const TFL_Tensor* gw = call.required_output(0);
    if (gw->dtype != TFL_DTYPE_FLOAT32) tfl::unimplemented("embedding backward accumulates float32 only");
    if (ids->dtype != TFL_DTYPE_INT64 && ids->dtype != TFL_DTYPE_INT32)
      tfl::invalid_argument("indices must be int64 or int32");
    if (gw->ndim != 2 || gw->sizes[0] != V) tfl::invalid_argument("grad_weight must be [num_weights, D]");
    const int64_t D = gw->sizes[1];
    check_cuda(cudaMemsetAsync(gw->data, 0, static_cast<size_t>(gw->numel) * 4, call.stream()), "cudaMemsetAsync");
    if (ids->numel == 0 || D == 0) return;
    embedding_backward_kernel<<<grid_for(ids->numel * D, kThreads), kThreads, 0, call.stream()>>>(
        static_cast<const char*>(gy->data), gy->dtype, D, static_cast<const char*>(ids->data), ids->dtype,
        ids->numel, V, padding_idx, static_cast<float*>(gw->data));
    call.check_launch("embedding backward");
  });
}

}  // namespace flcuda
