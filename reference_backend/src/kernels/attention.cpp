// Fused scaled dot-product attention: the bridge's overrideable SDPA backend
// (aten::_scaled_dot_product_fused_attention_overrideable and its backward),
// one launch each way instead of the math backend's dozen.
//
// Per (batch, head), on one thread: Q, K, V (any strides, any floating dtype)
// are packed into dense buffers of the compute type (float32; float64 for
// float64), the scores S = Q K^T * scale (+ causal mask, + additive bias) and
// their row softmax are formed, and O = P V. The forward keeps each row's
// logsumexp (natural log, float32, -inf for a row that attends to nothing,
// whose output is 0); the backward recomputes P from it:
//   dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(dO * O)),
//   dQ = dS K * scale,  dK = dS^T Q * scale.
// Declined (the bridge's decomposition runs instead): attention dropout, the
// debug mask, inputs that are not 4-d, a bias of another dtype than the query,
// and a gradient for the bias.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "support/elementwise_launch.h"
#include "support/fast_math.h"
#include "support/gemm.h"
#include "support/isa.h"
#include "support/nn_common.h"
#include "support/registry.h"
#include "support/row_reduce.h"

namespace flemu {
namespace {

template <class T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

constexpr const char* kForwardOp = "_scaled_dot_product_fused_attention_overrideable";
constexpr const char* kBackwardOp = "_scaled_dot_product_fused_attention_overrideable_backward";

// A [batch, heads, rows, cols] operand; strides in elements. A bias is seen
// broadcast to [B, H, Lq, Lk] (stride 0 along its size-1 or missing dims).
struct View4 {
  char* data = nullptr;
  int64_t size[4] = {};
  int64_t stride[4] = {};

  template <class T>
  T* head(int64_t b, int64_t h) const {
    return reinterpret_cast<T*>(data) + b * stride[0] + h * stride[1];
  }
};

View4 view4(const TensorArg& t, const char* op, const char* what) {
  if (t.ndim != 4) decline(op, ": ", what, " has ", t.ndim, " dims; this kernel takes 4-d (batch, heads, sequence, features)");
  View4 v;
  v.data = t.data;
  for (int d = 0; d < 4; ++d) {
    v.size[d] = t.sizes[d];
    v.stride[d] = t.strides[d];
  }
  return v;
}

View4 broadcast_bias(const TensorArg& t, const int64_t (&shape)[4]) {
  if (t.ndim > 4) invalid_argument(kForwardOp, ": attn_bias has ", t.ndim, " dims; at most 4 broadcast to the scores");
  View4 v;
  v.data = t.data;
  for (int d = 0; d < 4; ++d) {
    const int src = d - (4 - t.ndim);
    const int64_t size = src < 0 ? 1 : t.sizes[src];
    if (size != 1 && size != shape[d])
      invalid_argument(kForwardOp, ": attn_bias of shape dim ", d, " = ", size, " does not broadcast to the scores' ", shape[d]);
    v.size[d] = shape[d];
    v.stride[d] = size == 1 ? 0 : t.strides[src];
  }
  return v;
}

// Everything a head needs, copied out of the launch for the enqueued work.
struct Attention {
  View4 q, k, v, bias, out, grad_out, fwd_out;
  View4 grad_q, grad_k, grad_v;  // backward outputs
  char* lse = nullptr;          // [B, H, Lq] float32
  int64_t lse_stride[3] = {};
  int32_t dtype = 0;  // of query, key, value (and bias)
  int64_t B = 0, H = 0, Lq = 0, Lk = 0, E = 0, Ev = 0;
  bool has_bias = false, causal = false;
  bool want_q = false, want_k = false, want_v = false;
  bool drop_third = false;  // FLEMU_FAULT=softmax_backward_wrong: rows 0, 3, 6, ... lose rowsum(dO * O)
  double scale = 1.0;
};

template <class T, class C>
[[gnu::always_inline]] inline void pack(const View4& v, int64_t b, int64_t h, int64_t rows, int64_t cols, C* dst) {
  const T* src = v.head<const T>(b, h);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) dst[i * cols + j] = convert<C>(src[i * v.stride[2] + j * v.stride[3]]);
}

// dst[cols x rows] = the head's [rows x cols] block, transposed.
template <class T, class C>
[[gnu::always_inline]] inline void pack_transposed(const View4& v, int64_t b, int64_t h, int64_t rows, int64_t cols, C* dst) {
  const T* src = v.head<const T>(b, h);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) dst[j * rows + i] = convert<C>(src[i * v.stride[2] + j * v.stride[3]]);
}

// c[n x m] (row stride ldc) = a[n x k] (element strides a_rs, a_cs) * b[k x m]
// (row stride ldb, unit column stride). A head's products are small: plain
// loops with the unit-stride loop innermost (it vectorizes) beat a library
// call's set-up below about 2^18 multiply-adds.
template <class C>
[[gnu::always_inline]] inline void head_gemm(int64_t n, int64_t m, int64_t k, const C* a, int64_t a_rs, int64_t a_cs, const C* b, int64_t ldb, C* c,
               int64_t ldc) {
  if (n * m * k > (int64_t{1} << 18)) {
    gemm_compute(n, m, k, a, a_rs, a_cs, b, ldb, 1, c, ldc, false);
    return;
  }
  // Blocks of kCols outputs stay in registers across the k loop.
  constexpr int64_t kCols = 16;
  for (int64_t i = 0; i < n; ++i) {
    C* crow = c + i * ldc;
    const C* arow = a + i * a_rs;
    int64_t j0 = 0;
    for (; j0 + kCols <= m; j0 += kCols) {
      C acc[kCols] = {};
      for (int64_t p = 0; p < k; ++p) {
        const C x = arow[p * a_cs];
        const C* brow = b + p * ldb + j0;
        for (int64_t l = 0; l < kCols; ++l) acc[l] += x * brow[l];
      }
      std::copy(acc, acc + kCols, crow + j0);
    }
    if (j0 < m) {
      C acc[kCols] = {};
      for (int64_t p = 0; p < k; ++p) {
        const C x = arow[p * a_cs];
        const C* brow = b + p * ldb + j0;
        for (int64_t l = 0; l < m - j0; ++l) acc[l] += x * brow[l];
      }
      std::copy(acc, acc + (m - j0), crow + j0);
    }
  }
}

template <class T, class C>
[[gnu::always_inline]] inline void unpack(const C* src, const View4& v, int64_t b, int64_t h, int64_t rows, int64_t cols, C factor = C(1)) {
  T* dst = v.head<T>(b, h);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) dst[i * v.stride[2] + j * v.stride[3]] = convert<T>(src[i * cols + j] * factor);
}

float* lse_row(const Attention& a, int64_t b, int64_t h) {
  return reinterpret_cast<float*>(a.lse) + b * a.lse_stride[0] + h * a.lse_stride[1];
}

// s[Lq x Lk] = q k^T * scale, masked and biased; kt is k transposed [E x Lk].
template <class T, class C>
[[gnu::always_inline]] inline void scores(const Attention& a, int64_t b, int64_t h, const C* q, const C* kt, C* s) {
  head_gemm(a.Lq, a.Lk, a.E, q, a.E, int64_t{1}, kt, a.Lk, s, a.Lk);
  const C scale = static_cast<C>(a.scale);
  const C neg_inf = -std::numeric_limits<C>::infinity();
  const T* bias = a.has_bias ? a.bias.head<const T>(b, h) : nullptr;
  for (int64_t i = 0; i < a.Lq; ++i) {
    C* row = s + i * a.Lk;
    for (int64_t j = 0; j < a.Lk; ++j) row[j] *= scale;
    if (bias != nullptr) {
      const T* brow = bias + i * a.bias.stride[2];
      for (int64_t j = 0; j < a.Lk; ++j) row[j] += convert<C>(brow[j * a.bias.stride[3]]);
    }
    if (a.causal)
      for (int64_t j = i + 1; j < a.Lk; ++j) row[j] = neg_inf;
  }
}

template <class T>
[[gnu::always_inline]] inline void forward_head(const Attention& a, int64_t b, int64_t h, std::vector<acc_t<T>>& buf) {
  using C = acc_t<T>;
  buf.resize(static_cast<size_t>(a.Lq * a.E + a.Lk * a.E + a.Lk * a.Ev + a.Lq * a.Lk + a.Lq * a.Ev));
  C* q = buf.data();
  C* k = q + a.Lq * a.E;
  C* v = k + a.Lk * a.E;
  C* s = v + a.Lk * a.Ev;
  C* o = s + a.Lq * a.Lk;
  pack<T>(a.q, b, h, a.Lq, a.E, q);
  pack_transposed<T>(a.k, b, h, a.Lk, a.E, k);
  pack<T>(a.v, b, h, a.Lk, a.Ev, v);
  scores<T>(a, b, h, q, k, s);
  float* lse = lse_row(a, b, h);
  for (int64_t i = 0; i < a.Lq; ++i) {
    C* row = s + i * a.Lk;
    const C mx = row_max<C>(a.Lk, [&](int64_t j) __attribute__((always_inline)) { return row[j]; });
    if (std::isinf(mx) && mx < 0) {  // attends to nothing
      std::fill(row, row + a.Lk, C(0));
      lse[i * a.lse_stride[2]] = -std::numeric_limits<float>::infinity();
      continue;
    }
    for (int64_t j = 0; j < a.Lk; ++j) row[j] = exp_of(row[j] - mx);
    const C sum = row_sum<C>(a.Lk, [&](int64_t j) __attribute__((always_inline)) { return row[j]; });
    const C inv = C(1) / sum;
    for (int64_t j = 0; j < a.Lk; ++j) row[j] *= inv;
    lse[i * a.lse_stride[2]] = static_cast<float>(mx + std::log(sum));
  }
  head_gemm(a.Lq, a.Ev, a.Lk, s, a.Lk, int64_t{1}, v, a.Ev, o, a.Ev);
  unpack<T>(o, a.out, b, h, a.Lq, a.Ev);
}

template <class T>
[[gnu::always_inline]] inline void backward_head(const Attention& a, int64_t b, int64_t h, std::vector<acc_t<T>>& buf) {
  using C = acc_t<T>;
  const int64_t Lq = a.Lq, Lk = a.Lk, E = a.E, Ev = a.Ev;
  buf.resize(static_cast<size_t>(Lq * E + 2 * Lk * E + Lk * Ev + 2 * Lq * Ev + 2 * Lq * Lk + Lq * E + Lk * E +
                                 Lk * Ev));
  C* q = buf.data();
  C* k = q + Lq * E;
  C* kt = k + Lk * E;
  C* vt = kt + Lk * E;
  C* go = vt + Lk * Ev;
  C* o = go + Lq * Ev;
  C* p = o + Lq * Ev;
  C* dp = p + Lq * Lk;
  C* dq = dp + Lq * Lk;
  C* dk = dq + Lq * E;
  C* dv = dk + Lk * E;
  pack<T>(a.q, b, h, Lq, E, q);
  pack<T>(a.k, b, h, Lk, E, k);
  pack_transposed<T>(a.k, b, h, Lk, E, kt);
  pack_transposed<T>(a.v, b, h, Lk, Ev, vt);
  pack<T>(a.grad_out, b, h, Lq, Ev, go);
  pack<T>(a.fwd_out, b, h, Lq, Ev, o);
  scores<T>(a, b, h, q, kt, p);
  const float* lse = lse_row(a, b, h);
  for (int64_t i = 0; i < Lq; ++i) {
    const C l = static_cast<C>(lse[i * a.lse_stride[2]]);
    C* row = p + i * Lk;
    if (std::isinf(l) && l < 0) {
      std::fill(row, row + Lk, C(0));
      continue;
    }
    for (int64_t j = 0; j < Lk; ++j) row[j] = exp_of(row[j] - l);
  }
  if (a.want_v) {
    head_gemm(Lk, Ev, Lq, p, int64_t{1}, Lk, go, Ev, dv, Ev);  // P^T dO
    unpack<T>(dv, a.grad_v, b, h, Lk, Ev);
  }
  if (!a.want_q && !a.want_k) return;
  head_gemm(Lq, Lk, Ev, go, Ev, int64_t{1}, vt, Lk, dp, Lk);  // dO V^T
  for (int64_t i = 0; i < Lq; ++i) {
    const C* gr = go + i * Ev;
    const C* orow = o + i * Ev;
    C delta = row_sum<C>(Ev, [&](int64_t e) __attribute__((always_inline)) { return gr[e] * orow[e]; });
    if (a.drop_third && i % 3 == 0) delta = 0;  // FLEMU_FAULT=softmax_backward_wrong
    C* ds = dp + i * Lk;
    const C* pr = p + i * Lk;
    for (int64_t j = 0; j < Lk; ++j) ds[j] = pr[j] * (ds[j] - delta);
  }
  const C scale = static_cast<C>(a.scale);
  if (a.want_q) {
    head_gemm(Lq, E, Lk, dp, Lk, int64_t{1}, k, E, dq, E);  // dS K
    unpack<T>(dq, a.grad_q, b, h, Lq, E, scale);
  }
  if (a.want_k) {
    head_gemm(Lk, E, Lq, dp, int64_t{1}, Lk, q, E, dk, E);  // dS^T Q
    unpack<T>(dk, a.grad_k, b, h, Lk, E, scale);
  }
}

// Runs head(b, h, buffer) for every head, split over the pool, on the ISA
// build isa.h chooses: head is an always_inline lambda over forward_head or
// backward_head, so each build has its own vectorized copy of a head.
template <class T, class Head>
void for_each_head(const Attention& a, Head&& head) {
  const int64_t heads = a.B * a.H;
  const int64_t cost = a.Lq * a.Lk * std::max(a.E, a.Ev);
  parallel_chunks(heads, grain_for(cost), [&](int64_t begin, int64_t end) {
    std::vector<acc_t<T>> buf;
    with_isa([&]() __attribute__((always_inline)) {
      for (int64_t u = begin; u < end; ++u) head(u / a.H, u % a.H, buf);
    });
  });
}

void check_heads(const Attention& a, const char* op) {
  const View4* parts[] = {&a.k, &a.v};
  for (const View4* t : parts)
    if (t->size[0] != a.B || t->size[1] != a.H)
      invalid_argument(op, ": key and value must have the query's batch and head counts (", a.B, ", ", a.H, ")");
  if (a.v.size[2] != a.Lk) invalid_argument(op, ": key and value must have the same sequence length");
  if (a.k.size[3] != a.E) invalid_argument(op, ": query and key must have the same feature size");
}

void fill_zero_i64(const Launch& L, size_t i, const char* what) {
  TensorArg t;
  if (!optional_output(L, i, what, &t) || t.numel == 0) return;
  if (t.dtype != TFL_DTYPE_INT64 || t.numel != 1) invalid_argument(kForwardOp, ": ", what, " must be one int64");
  int64_t* p = reinterpret_cast<int64_t*>(t.data);
  L.enqueue([p] { *p = 0; });
}

// Inputs shared by forward and backward: query, key, value, bias, scale.
void read_operands(const Launch& L, Attention* a, size_t q_at, size_t bias_at, size_t causal_at, size_t scale_at,
                   const char* op) {
  const TensorArg q = L.input_tensor(q_at, "query"), k = L.input_tensor(q_at + 1, "key"),
                  v = L.input_tensor(q_at + 2, "value");
  if (k.dtype != q.dtype || v.dtype != q.dtype) decline(op, ": query, key and value have different dtypes");
  a->dtype = q.dtype;
  a->q = view4(q, op, "query");
  a->k = view4(k, op, "key");
  a->v = view4(v, op, "value");
  a->B = a->q.size[0];
  a->H = a->q.size[1];
  a->Lq = a->q.size[2];
  a->E = a->q.size[3];
  a->Lk = a->k.size[2];
  a->Ev = a->v.size[3];
  check_heads(*a, op);
  TensorArg bias;
  if (optional_tensor(L, bias_at, "attn_bias", &bias)) {
    if (bias.dtype != q.dtype) decline(op, ": attn_bias is ", dtype_name(bias.dtype), ", the query ", dtype_name(q.dtype));
    const int64_t shape[4] = {a->B, a->H, a->Lq, a->Lk};
    a->bias = broadcast_bias(bias, shape);
    a->has_bias = true;
  }
  a->causal = L.boolean_or(causal_at, false, "is_causal");
  a->scale = L.has_input(scale_at) ? double_arg(L, scale_at, "scale") : 1.0 / std::sqrt(static_cast<double>(a->E));
}

void read_lse(const TensorArg& lse, Attention* a, const char* op) {
  if (lse.dtype != TFL_DTYPE_FLOAT32 || lse.ndim != 3 || lse.sizes[0] != a->B || lse.sizes[1] != a->H ||
      lse.sizes[2] != a->Lq)
    invalid_argument(op, ": logsumexp must be float32 [batch, heads, query length]");
  a->lse = lse.data;
  for (int d = 0; d < 3; ++d) a->lse_stride[d] = lse.strides[d];
}

View4 output_like(const TensorArg& t, const View4& like, int64_t cols, const char* op, const char* what) {
  View4 v = view4(t, op, what);
  if (v.size[0] != like.size[0] || v.size[1] != like.size[1] || v.size[2] != like.size[2] || v.size[3] != cols)
    invalid_argument(op, ": ", what, " has the wrong shape");
  return v;
}

}  // namespace

TFL_Error* kernel_sdpa_fused(const TFL_Kernel_Args* args) {
  // (query, key, value, attn_bias?, dropout_p, is_causal, return_debug_mask, *, scale?)
  //   -> (output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, philox_seed, philox_offset, debug_attn_mask)
  return run_kernel(args, kSdpaFused, [&](Launch& L) {
    if (double_arg(L, 4, "dropout_p") != 0.0) decline(kForwardOp, ": attention dropout is not implemented");
    if (L.boolean_or(6, false, "return_debug_mask")) decline(kForwardOp, ": the debug mask is not implemented");
    Attention a;
    read_operands(L, &a, 0, 3, 5, 7, kForwardOp);
    const TensorArg out = L.output(0, "output"), lse = L.output(1, "logsumexp");
    if (out.dtype != a.dtype) invalid_argument(kForwardOp, ": output must have the query's dtype");
    a.out = output_like(out, a.q, a.Ev, kForwardOp, "output");
    read_lse(lse, &a, kForwardOp);
    fill_zero_i64(L, 4, "philox_seed");
    fill_zero_i64(L, 5, "philox_offset");
    if (a.B * a.H * a.Lq == 0) return;
    if (a.Lk == 0) decline(kForwardOp, ": an empty key sequence");
    dispatch_floating(a.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([a] {
        for_each_head<T>(a, [&](int64_t b, int64_t h, auto& buf) __attribute__((always_inline)) {
          forward_head<T>(a, b, h, buf);
        });
      });
    });
  });
}

TFL_Error* kernel_sdpa_fused_backward(const TFL_Kernel_Args* args) {
  // (grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
  //  dropout_p, is_causal, philox_seed, philox_offset, *, scale?) -> (grad_query, grad_key, grad_value, grad_attn_bias)
  return run_kernel(args, kSdpaFusedBackward, [&](Launch& L) {
    if (double_arg(L, 12, "dropout_p") != 0.0) decline(kBackwardOp, ": attention dropout is not implemented");
    const TFL_Value& mask = L.input(5, "grad_input_mask");
    if (mask.tag != TFL_VALUE_BOOL_LIST || mask.v.bools.size != 4) invalid_argument("grad_input_mask must be a list of 4 bools");
    Attention a;
    read_operands(L, &a, 1, 4, 13, 16, kBackwardOp);
    a.drop_third = L.faulty(Fault::kSoftmaxBackwardWrong);
    if (mask.v.bools.data[3] != 0 && a.has_bias) decline(kBackwardOp, ": the gradient of attn_bias is not implemented");
    const int32_t dtype = a.dtype;
    const TensorArg grad_out = L.input_tensor(0, "grad_out"), fwd_out = L.input_tensor(6, "out");
    if (grad_out.dtype != dtype || fwd_out.dtype != dtype) decline(kBackwardOp, ": grad_out and out must have the query's dtype");
    a.grad_out = output_like(grad_out, a.q, a.Ev, kBackwardOp, "grad_out");
    a.fwd_out = output_like(fwd_out, a.q, a.Ev, kBackwardOp, "out");
    read_lse(L.input_tensor(7, "logsumexp"), &a, kBackwardOp);
    TensorArg t;
    const View4* likes[] = {&a.q, &a.k, &a.v};
    View4* grads[] = {&a.grad_q, &a.grad_k, &a.grad_v};
    bool* wants[] = {&a.want_q, &a.want_k, &a.want_v};
    const char* names[] = {"grad_query", "grad_key", "grad_value"};
    for (int i = 0; i < 3; ++i) {
      *wants[i] = mask.v.bools.data[i] != 0 && optional_output(L, i, names[i], &t) && t.numel > 0;
      if (!*wants[i]) continue;
      if (t.dtype != dtype) invalid_argument(kBackwardOp, ": ", names[i], " must have the query's dtype");
      *grads[i] = output_like(t, *likes[i], likes[i]->size[3], kBackwardOp, names[i]);
    }
    // An unrequested bias gradient is returned as zeros, not as whatever the memory held.
    if (optional_output(L, 3, "grad_attn_bias", &t) && t.numel > 0) {
      if (!t.is_contiguous()) decline(kBackwardOp, ": a strided grad_attn_bias");
      char* p = t.data;
      const size_t bytes = static_cast<size_t>(t.numel * t.itemsize);
      L.enqueue([p, bytes] { std::memset(p, 0, bytes); });
    }
    if (!(a.want_q || a.want_k || a.want_v) || a.B * a.H == 0) return;
    if (a.Lq == 0 || a.Lk == 0) decline(kBackwardOp, ": an empty query or key sequence");
    dispatch_floating(dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([a] {
        for_each_head<T>(a, [&](int64_t b, int64_t h, auto& buf) __attribute__((always_inline)) {
          backward_head<T>(a, b, h, buf);
        });
      });
    });
  });
}

}  // namespace flemu
