// The fused LSTM cell nn.LSTM runs on non-CPU devices, forward and backward,
// with ATen's semantics:
//   gates = input_gates + hidden_gates (+ input_bias + hidden_bias), [B, 4H]
//   chunks in the order i, f, g, o:  i, f, o = sigmoid(.), g = tanh(.)
//   cy = f * cx + i * g,  hy = o * tanh(cy)
//   workspace = [i, f, g, o] after the activations (what backward reads).
// Backward takes the optional grad_hy / grad_cy (absent = zero) and returns
// the gradient of the pre-activation gates, of cx, and (has_bias) the gates
// gradient summed over the batch for the biases. fp16/bf16 compute in float32.
#include <cmath>
#include <vector>

#include "../thread_pool.h"
#include "support/elementwise_launch.h"
#include "support/registry.h"

namespace flemu {
namespace {

template <class T>
using cell_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class C>
inline C sigmoid(C x) {
  if (x >= C(0)) return C(1) / (C(1) + std::exp(-x));
  const C e = std::exp(x);
  return e / (C(1) + e);
}

void require_dense(const TensorArg& t, const char* op, const char* what) {
  if (!t.is_contiguous()) invalid_argument(op, ": ", what, " must be contiguous (the kernel asks the host for dense operands)");
}

void require_shape2(const TensorArg& t, int64_t rows, int64_t cols, const char* op, const char* what) {
  if (t.ndim != 2 || t.sizes[0] != rows || t.sizes[1] != cols)
    invalid_argument(op, ": ", what, " must be ", rows, "x", cols, ", got ", t.ndim == 2 ? t.sizes[0] : -1, "x",
                     t.ndim == 2 ? t.sizes[1] : -1, " (", t.ndim, " dims)");
}

template <class Fn>
void over_rows(int64_t rows, int64_t cost, Fn&& fn) {
  const int64_t per = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(cost, 1));
  const int64_t tasks = (rows + per - 1) / per;
  if (tasks <= 1) {
    fn(int64_t{0}, rows);
    return;
  }
  ThreadPool::instance().parallel_for(tasks, [&](int64_t t) { fn(t * per, std::min(rows, (t + 1) * per)); });
}

struct CellJob {
  int64_t batch = 0, hidden = 0;
  const char* ig = nullptr;
  const char* hg = nullptr;
  const char* cx = nullptr;
  const char* ib = nullptr;  // nullptr: no bias
  const char* hb = nullptr;
  char* hy = nullptr;
  char* cy = nullptr;
  char* ws = nullptr;
};

template <class T>
void cell_forward(const CellJob& j) {
  using C = cell_t<T>;
  const int64_t H = j.hidden, G = 4 * H;
  const T* ig = reinterpret_cast<const T*>(j.ig);
  const T* hg = reinterpret_cast<const T*>(j.hg);
  const T* cx = reinterpret_cast<const T*>(j.cx);
  const T* ib = reinterpret_cast<const T*>(j.ib);
  const T* hb = reinterpret_cast<const T*>(j.hb);
  T* hy = reinterpret_cast<T*>(j.hy);
  T* cy = reinterpret_cast<T*>(j.cy);
  T* ws = reinterpret_cast<T*>(j.ws);
  over_rows(j.batch, G, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        C pre[4];
        for (int k = 0; k < 4; ++k) {
          const int64_t c = k * H + h;
          C v = static_cast<C>(ig[b * G + c]) + static_cast<C>(hg[b * G + c]);
          if (ib) v += static_cast<C>(ib[c]) + static_cast<C>(hb[c]);
          pre[k] = v;
        }
        const C i = sigmoid(pre[0]), f = sigmoid(pre[1]), g = std::tanh(pre[2]), o = sigmoid(pre[3]);
        const C c_new = f * static_cast<C>(cx[b * H + h]) + i * g;
        cy[b * H + h] = convert<T>(c_new);
        hy[b * H + h] = convert<T>(o * std::tanh(c_new));
        ws[b * G + h] = convert<T>(i);
        ws[b * G + H + h] = convert<T>(f);
        ws[b * G + 2 * H + h] = convert<T>(g);
        ws[b * G + 3 * H + h] = convert<T>(o);
      }
    }
  });
}

struct CellBackwardJob {
  int64_t batch = 0, hidden = 0;
  const char* ghy = nullptr;  // nullptr: zero
  const char* gcy = nullptr;
  const char* cx = nullptr;
  const char* cy = nullptr;
  const char* ws = nullptr;
  char* ggates = nullptr;
  char* gcx = nullptr;
  char* gbias = nullptr;  // nullptr: no bias gradient
};

template <class T>
void cell_backward(const CellBackwardJob& j) {
  using C = cell_t<T>;
  const int64_t H = j.hidden, G = 4 * H;
  const T* ghy = reinterpret_cast<const T*>(j.ghy);
  const T* gcy = reinterpret_cast<const T*>(j.gcy);
  const T* cx = reinterpret_cast<const T*>(j.cx);
  const T* cy = reinterpret_cast<const T*>(j.cy);
  const T* ws = reinterpret_cast<const T*>(j.ws);
  T* gg = reinterpret_cast<T*>(j.ggates);
  T* gcx = reinterpret_cast<T*>(j.gcx);
  over_rows(j.batch, G, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        const C i = static_cast<C>(ws[b * G + h]), f = static_cast<C>(ws[b * G + H + h]);
        const C g = static_cast<C>(ws[b * G + 2 * H + h]), o = static_cast<C>(ws[b * G + 3 * H + h]);
        const C go = ghy ? static_cast<C>(ghy[b * H + h]) : C(0);
        const C gc_in = gcy ? static_cast<C>(gcy[b * H + h]) : C(0);
        const C tc = std::tanh(static_cast<C>(cy[b * H + h]));
        const C gc = go * o * (C(1) - tc * tc) + gc_in;  // d loss / d cy
        gg[b * G + h] = convert<T>(gc * g * i * (C(1) - i));
        gg[b * G + H + h] = convert<T>(gc * static_cast<C>(cx[b * H + h]) * f * (C(1) - f));
        gg[b * G + 2 * H + h] = convert<T>(gc * i * (C(1) - g * g));
        gg[b * G + 3 * H + h] = convert<T>(go * tc * o * (C(1) - o));
        gcx[b * H + h] = convert<T>(gc * f);
      }
    }
  });
  if (j.gbias) {
    // The bias gradient sums the rounded gates gradient over the batch, as
    // ATen's grad_gates.sum(0) does.
    T* gb = reinterpret_cast<T*>(j.gbias);
    std::vector<double> acc(static_cast<size_t>(G), 0.0);
    for (int64_t b = 0; b < j.batch; ++b)
      for (int64_t c = 0; c < G; ++c) acc[static_cast<size_t>(c)] += static_cast<double>(static_cast<C>(gg[b * G + c]));
    for (int64_t c = 0; c < G; ++c) gb[c] = convert<T>(acc[static_cast<size_t>(c)]);
  }
}

}  // namespace

TFL_Error* kernel_thnn_fused_lstm_cell(const TFL_Kernel_Args* args) {
  // _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None)
  //   -> (hy, cy, workspace)
  constexpr const char* op = "_thnn_fused_lstm_cell";
  return run_kernel(args, kThnnFusedLstmCell, [&](Launch& L) {
    const TensorArg ig = L.input_tensor(0, "input_gates"), hg = L.input_tensor(1, "hidden_gates"),
                    cx = L.input_tensor(2, "cx");
    const TensorArg hy = L.output(0, "hy"), cy = L.output(1, "cy"), ws = L.output(2, "workspace");
    if (cx.ndim != 2) invalid_argument(op, ": cx must be 2-D [batch, hidden], got ", cx.ndim, " dims");
    CellJob j;
    j.batch = cx.sizes[0];
    j.hidden = cx.sizes[1];
    require_shape2(ig, j.batch, 4 * j.hidden, op, "input_gates");
    require_shape2(hg, j.batch, 4 * j.hidden, op, "hidden_gates");
    require_shape2(hy, j.batch, j.hidden, op, "hy");
    require_shape2(cy, j.batch, j.hidden, op, "cy");
    require_shape2(ws, j.batch, 4 * j.hidden, op, "workspace");
    require_same_dtype(op, ig, {&hg, &cx, &hy, &cy, &ws});
    for (const TensorArg* t : {&ig, &hg, &cx, &hy, &cy, &ws}) require_dense(*t, op, "every operand");
    const bool has_ib = L.has_input(3), has_hb = L.has_input(4);
    if (has_ib != has_hb) invalid_argument(op, ": input_bias and hidden_bias must both be given or both be None");
    if (has_ib) {
      const TensorArg ib = L.input_tensor(3, "input_bias"), hb = L.input_tensor(4, "hidden_bias");
      require_same_dtype(op, ig, {&ib, &hb});
      if (ib.numel != 4 * j.hidden || hb.numel != 4 * j.hidden)
        invalid_argument(op, ": the biases must have 4 * hidden = ", 4 * j.hidden, " elements");
      require_dense(ib, op, "input_bias");
      require_dense(hb, op, "hidden_bias");
      j.ib = ib.data;
      j.hb = hb.data;
    }
    j.ig = ig.data;
    j.hg = hg.data;
    j.cx = cx.data;
    j.hy = hy.data;
    j.cy = cy.data;
    j.ws = ws.data;
    if (j.batch == 0 || j.hidden == 0) return;
    dispatch_floating(ig.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([j] { cell_forward<T>(j); });
    });
  });
}

TFL_Error* kernel_thnn_fused_lstm_cell_backward_impl(const TFL_Kernel_Args* args) {
  // _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace, has_bias)
  //   -> (grad_gates, grad_cx, grad_bias)
  constexpr const char* op = "_thnn_fused_lstm_cell_backward_impl";
  return run_kernel(args, kThnnFusedLstmCellBackwardImpl, [&](Launch& L) {
    const TensorArg cx = L.input_tensor(2, "cx"), cy = L.input_tensor(3, "cy"), ws = L.input_tensor(4, "workspace");
    const bool has_bias = L.boolean_or(5, true, "has_bias");
    const TensorArg gg = L.output(0, "grad_gates"), gcx = L.output(1, "grad_cx");
    if (cx.ndim != 2) invalid_argument(op, ": cx must be 2-D [batch, hidden], got ", cx.ndim, " dims");
    CellBackwardJob j;
    j.batch = cx.sizes[0];
    j.hidden = cx.sizes[1];
    require_shape2(cy, j.batch, j.hidden, op, "cy");
    require_shape2(ws, j.batch, 4 * j.hidden, op, "workspace");
    require_shape2(gg, j.batch, 4 * j.hidden, op, "grad_gates");
    require_shape2(gcx, j.batch, j.hidden, op, "grad_cx");
    require_same_dtype(op, cx, {&cy, &ws, &gg, &gcx});
    for (const TensorArg* t : {&cx, &cy, &ws, &gg, &gcx}) require_dense(*t, op, "every operand");
    for (size_t k = 0; k < 2; ++k) {
      if (!L.has_input(k)) continue;
      const TensorArg g = L.input_tensor(k, k == 0 ? "grad_hy" : "grad_cy");
      require_shape2(g, j.batch, j.hidden, op, k == 0 ? "grad_hy" : "grad_cy");
      require_same_dtype(op, cx, {&g});
      require_dense(g, op, k == 0 ? "grad_hy" : "grad_cy");
      (k == 0 ? j.ghy : j.gcy) = g.data;
    }
    if (has_bias && L.has_output(2)) {  // NULL: the caller did not ask for it
      const TensorArg gb = L.output(2, "grad_bias");
      require_same_dtype(op, cx, {&gb});
      if (gb.numel != 4 * j.hidden) invalid_argument(op, ": grad_bias must have ", 4 * j.hidden, " elements");
      j.gbias = gb.data;
    }
    j.cx = cx.data;
    j.cy = cy.data;
    j.ws = ws.data;
    j.ggates = gg.data;
    j.gcx = gcx.data;
    if (j.batch == 0 || j.hidden == 0) {
      if (j.gbias == nullptr || j.hidden == 0) return;
    }
    dispatch_floating(cx.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([j] { cell_backward<T>(j); });
    });
  });
}

}  // namespace flemu
