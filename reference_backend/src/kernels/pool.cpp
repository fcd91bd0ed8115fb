// Pooling and resampling over (N, C, H, W) or (C, H, W) tensors of any
// strides: max_pool2d_with_indices, avg_pool2d, _adaptive_avg_pool2d and
// upsample_nearest2d, each with its backward. Work is split over the
// (n, c) planes; sums accumulate in float (double for float64).
#include <cmath>
#include <limits>
#include <vector>

#include "support/nn_common.h"
#include "support/registry.h"

namespace flemu {
namespace {

// Planes of a 3-d or 4-d tensor; strides in elements.
struct Planes {
  char* data = nullptr;
  int64_t count = 0;     // N * C
  int64_t channels = 1;  // C, to split a plane index into (n, c)
  int64_t sn = 0, sc = 0, sh = 0, sw = 0;
  int64_t H = 0, W = 0;

  template <class T>
  T* plane(int64_t p) const {
    return reinterpret_cast<T*>(data) + (p / channels) * sn + (p % channels) * sc;
  }
};

Planes planes(const TensorArg& t, const char* what, bool allow_3d = true) {
  if (t.ndim != 4 && !(allow_3d && t.ndim == 3))
    invalid_argument(what, " must be ", allow_3d ? "3-d (C, H, W) or " : "", "4-d (N, C, H, W), got ", t.ndim, " dims");
  Planes p;
  p.data = t.data;
  const int32_t o = t.ndim - 3;  // 1 for a batch dim
  p.channels = t.sizes[o];
  p.count = (o ? t.sizes[0] : 1) * p.channels;
  p.sn = o ? t.strides[0] : 0;
  p.sc = t.strides[o];
  p.sh = t.strides[o + 1];
  p.sw = t.strides[o + 2];
  p.H = t.sizes[o + 1];
  p.W = t.sizes[o + 2];
  return p;
}

void require_same_planes(const Planes& a, const Planes& b, const char* an, const char* bn) {
  if (a.count != b.count || a.channels != b.channels)
    invalid_argument(an, " and ", bn, " must have the same batch and channel sizes");
}

void require_floating(const TensorArg& t, const char* what) {
  if (!dtype_is_floating(t.dtype)) invalid_argument(what, " must be floating, got ", dtype_name(t.dtype));
}

void require_same_dtype(const TensorArg& a, const TensorArg& b, const char* an, const char* bn) {
  if (a.dtype != b.dtype)
    invalid_argument(an, " has dtype ", dtype_name(a.dtype), " but ", bn, " has ", dtype_name(b.dtype));
}

// grad_output and grad_input of a backward kernel: floating, one dtype, the same
// batch and channels; grad_input shaped like self when self is given.
struct GradPlanes {
  Planes grad, input;
};

GradPlanes grad_planes(const TensorArg& grad, const TensorArg& gi, const TensorArg* self, bool allow_3d = true) {
  require_floating(grad, "grad_output");
  require_same_dtype(gi, grad, "grad_input", "grad_output");
  GradPlanes g{planes(grad, "grad_output", allow_3d), planes(gi, "grad_input", allow_3d)};
  require_same_planes(g.grad, g.input, "grad_output", "grad_input");
  if (self != nullptr) {
    const Planes ps = planes(*self, "self");
    if (g.input.H != ps.H || g.input.W != ps.W) invalid_argument("grad_input must be shaped like self");
  }
  return g;
}

struct Window {
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
};

Window read_window(const Launch& L, size_t k_i, size_t s_i, size_t p_i, int d_i) {
  const auto k = int_list(L, k_i, "kernel_size", 2);
  auto s = int_list(L, s_i, "stride");
  if (s.empty()) s = k;  // stride defaults to the kernel size
  else s = int_list(L, s_i, "stride", 2);
  const auto p = int_list(L, p_i, "padding", 2);
  Window w;
  w.kh = k[0];
  w.kw = k[1];
  w.sh = s[0];
  w.sw = s[1];
  w.ph = p[0];
  w.pw = p[1];
  if (d_i >= 0) {
    const auto d = int_list(L, static_cast<size_t>(d_i), "dilation", 2);
    w.dh = d[0];
    w.dw = d[1];
  }
  if (w.kh < 1 || w.kw < 1 || w.sh < 1 || w.sw < 1 || w.dh < 1 || w.dw < 1)
    invalid_argument("kernel_size, stride and dilation must be positive");
  if (w.ph < 0 || w.pw < 0) invalid_argument("padding must be non-negative, got ", w.ph, "x", w.pw);
  return w;
}

// ---------------------------------------------------------------------------
// max pool
// ---------------------------------------------------------------------------

template <class T>
void run_max_pool(const Planes& in, const Planes& out, const Planes& ind, Window w) {
  using C = acc_t<T>;
  parallel_chunks(in.count, grain_for(in.H * in.W), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const T* x = in.plane<T>(p);
      T* y = out.plane<T>(p);
      int64_t* idx = ind.plane<int64_t>(p);
      for (int64_t oh = 0; oh < out.H; ++oh) {
        int64_t h0 = oh * w.sh - w.ph;
        const int64_t h1 = std::min(h0 + (w.kh - 1) * w.dh + 1, in.H);
        while (h0 < 0) h0 += w.dh;
        for (int64_t ow = 0; ow < out.W; ++ow) {
          int64_t w0 = ow * w.sw - w.pw;
          const int64_t w1 = std::min(w0 + (w.kw - 1) * w.dw + 1, in.W);
          while (w0 < 0) w0 += w.dw;
          C best = -std::numeric_limits<C>::infinity();
          int64_t best_i = h0 * in.W + w0;
          bool nan = false;  // NaN wins; later values cannot replace it
          for (int64_t ih = h0; ih < h1 && !nan; ih += w.dh)
            for (int64_t iw = w0; iw < w1; iw += w.dw) {
              const C v = static_cast<C>(to_compute(x[ih * in.sh + iw * in.sw]));
              if (v > best || std::isnan(v)) {
                best = v;
                best_i = ih * in.W + iw;
                if (std::isnan(v)) {
                  nan = true;
                  break;
                }
              }
            }
          y[oh * out.sh + ow * out.sw] = convert<T>(best);
          idx[oh * ind.sh + ow * ind.sw] = best_i;
        }
      }
    }
  });
}

template <class T>
void run_max_pool_backward(const Planes& g, const Planes& ind, const Planes& gi) {
  using C = acc_t<T>;
  parallel_chunks(gi.count, grain_for(gi.H * gi.W), [&](int64_t p0, int64_t p1) {
    std::vector<C> acc;
    for (int64_t p = p0; p < p1; ++p) {
      acc.assign(static_cast<size_t>(gi.H * gi.W), C(0));
      const T* go = g.plane<T>(p);
      const int64_t* idx = ind.plane<int64_t>(p);
      for (int64_t oh = 0; oh < g.H; ++oh)
        for (int64_t ow = 0; ow < g.W; ++ow) {
          const int64_t i = idx[oh * ind.sh + ow * ind.sw];
          if (i < 0 || i >= gi.H * gi.W) continue;  // cannot come from max_pool2d_with_indices
          acc[static_cast<size_t>(i)] += static_cast<C>(to_compute(go[oh * g.sh + ow * g.sw]));
        }
      T* o = gi.plane<T>(p);
      for (int64_t h = 0; h < gi.H; ++h)
        for (int64_t x = 0; x < gi.W; ++x) o[h * gi.sh + x * gi.sw] = convert<T>(acc[static_cast<size_t>(h * gi.W + x)]);
    }
  });
}

// ---------------------------------------------------------------------------
// avg pool
// ---------------------------------------------------------------------------

struct AvgOpts {
  bool count_include_pad = true;
  int64_t divisor = 0;  // divisor_override as given (negative too), 0 when absent
};

// The clipped window of output (oh, ow) and its divisor, as PyTorch defines them.
struct AvgCell {
  int64_t h0, h1, w0, w1;
  double div;

  // A window wholly in the padding (ceil_mode) averages nothing: its output
  // is 0 and it passes no gradient, whatever the divisor.
  bool empty() const { return h0 >= h1 || w0 >= w1; }
};

inline AvgCell avg_cell(const Window& w, const AvgOpts& o, int64_t H, int64_t W, int64_t oh, int64_t ow) {
  int64_t h0 = oh * w.sh - w.ph, w0 = ow * w.sw - w.pw;
  int64_t h1 = std::min(h0 + w.kh, H + w.ph), w1 = std::min(w0 + w.kw, W + w.pw);
  const int64_t pool = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, H);
  w1 = std::min(w1, W);
  double div;
  if (o.divisor) div = static_cast<double>(o.divisor);
  else if (o.count_include_pad) div = static_cast<double>(pool);
  else div = static_cast<double>((h1 - h0) * (w1 - w0));
  return {h0, h1, w0, w1, div};
}

template <class T>
void run_avg_pool(const Planes& in, const Planes& out, Window w, AvgOpts o) {
  using C = acc_t<T>;
  parallel_chunks(in.count, grain_for(in.H * in.W), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const T* x = in.plane<T>(p);
      T* y = out.plane<T>(p);
      for (int64_t oh = 0; oh < out.H; ++oh)
        for (int64_t ow = 0; ow < out.W; ++ow) {
          const AvgCell c = avg_cell(w, o, in.H, in.W, oh, ow);
          C s = 0;
          for (int64_t ih = c.h0; ih < c.h1; ++ih)
            for (int64_t iw = c.w0; iw < c.w1; ++iw) s += static_cast<C>(to_compute(x[ih * in.sh + iw * in.sw]));
          y[oh * out.sh + ow * out.sw] = convert<T>(c.empty() ? C(0) : s / static_cast<C>(c.div));
        }
    }
  });
}

template <class T>
void run_avg_pool_backward(const Planes& g, const Planes& gi, Window w, AvgOpts o) {
  using C = acc_t<T>;
  parallel_chunks(gi.count, grain_for(gi.H * gi.W), [&](int64_t p0, int64_t p1) {
    std::vector<C> acc;
    for (int64_t p = p0; p < p1; ++p) {
      acc.assign(static_cast<size_t>(gi.H * gi.W), C(0));
      const T* go = g.plane<T>(p);
      for (int64_t oh = 0; oh < g.H; ++oh)
        for (int64_t ow = 0; ow < g.W; ++ow) {
          const AvgCell c = avg_cell(w, o, gi.H, gi.W, oh, ow);
          if (c.empty()) continue;
          const C v = static_cast<C>(to_compute(go[oh * g.sh + ow * g.sw])) / static_cast<C>(c.div);
          for (int64_t ih = c.h0; ih < c.h1; ++ih)
            for (int64_t iw = c.w0; iw < c.w1; ++iw) acc[static_cast<size_t>(ih * gi.W + iw)] += v;
        }
      T* out = gi.plane<T>(p);
      for (int64_t h = 0; h < gi.H; ++h)
        for (int64_t x = 0; x < gi.W; ++x) out[h * gi.sh + x * gi.sw] = convert<T>(acc[static_cast<size_t>(h * gi.W + x)]);
    }
  });
}

// ---------------------------------------------------------------------------
// adaptive avg pool
// ---------------------------------------------------------------------------

inline int64_t adaptive_start(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
inline int64_t adaptive_end(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }

template <class T>
void run_adaptive_avg(const Planes& in, const Planes& out) {
  using C = acc_t<T>;
  parallel_chunks(in.count, grain_for(in.H * in.W), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const T* x = in.plane<T>(p);
      T* y = out.plane<T>(p);
      for (int64_t oh = 0; oh < out.H; ++oh) {
        const int64_t h0 = adaptive_start(oh, in.H, out.H), h1 = adaptive_end(oh, in.H, out.H);
        for (int64_t ow = 0; ow < out.W; ++ow) {
          const int64_t w0 = adaptive_start(ow, in.W, out.W), w1 = adaptive_end(ow, in.W, out.W);
          C s = 0;
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) s += static_cast<C>(to_compute(x[ih * in.sh + iw * in.sw]));
          y[oh * out.sh + ow * out.sw] = convert<T>(s / static_cast<C>((h1 - h0) * (w1 - w0)));
        }
      }
    }
  });
}

template <class T>
void run_adaptive_avg_backward(const Planes& g, const Planes& gi) {
  using C = acc_t<T>;
  parallel_chunks(gi.count, grain_for(gi.H * gi.W), [&](int64_t p0, int64_t p1) {
    std::vector<C> acc;
    for (int64_t p = p0; p < p1; ++p) {
      acc.assign(static_cast<size_t>(gi.H * gi.W), C(0));
      const T* go = g.plane<T>(p);
      for (int64_t oh = 0; oh < g.H; ++oh) {
        const int64_t h0 = adaptive_start(oh, gi.H, g.H), h1 = adaptive_end(oh, gi.H, g.H);
        for (int64_t ow = 0; ow < g.W; ++ow) {
          const int64_t w0 = adaptive_start(ow, gi.W, g.W), w1 = adaptive_end(ow, gi.W, g.W);
          const C v = static_cast<C>(to_compute(go[oh * g.sh + ow * g.sw])) / static_cast<C>((h1 - h0) * (w1 - w0));
          for (int64_t ih = h0; ih < h1; ++ih)
            for (int64_t iw = w0; iw < w1; ++iw) acc[static_cast<size_t>(ih * gi.W + iw)] += v;
        }
      }
      T* out = gi.plane<T>(p);
      for (int64_t h = 0; h < gi.H; ++h)
        for (int64_t x = 0; x < gi.W; ++x) out[h * gi.sh + x * gi.sw] = convert<T>(acc[static_cast<size_t>(h * gi.W + x)]);
    }
  });
}

// ---------------------------------------------------------------------------
// upsample nearest
// ---------------------------------------------------------------------------

// The source index of each output index, computed in float like PyTorch's
// nearest mode so both pick the same pixel.
std::vector<int64_t> nearest_sources(int64_t out, int64_t in, double scale) {
  std::vector<int64_t> src(static_cast<size_t>(out));
  const float s = scale > 0 ? static_cast<float>(1.0 / scale) : static_cast<float>(in) / static_cast<float>(out);
  for (int64_t o = 0; o < out; ++o) {
    int64_t i;
    if (out == in) i = o;
    else if (out == 2 * in) i = o >> 1;
    else i = std::min(static_cast<int64_t>(std::floor(static_cast<float>(o) * s)), in - 1);
    src[static_cast<size_t>(o)] = i;
  }
  return src;
}

template <class T>
void run_upsample_nearest(const Planes& in, const Planes& out, double scale_h, double scale_w) {
  const std::vector<int64_t> hs = nearest_sources(out.H, in.H, scale_h), ws = nearest_sources(out.W, in.W, scale_w);
  parallel_chunks(in.count, grain_for(in.H * in.W), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const T* x = in.plane<T>(p);
      T* y = out.plane<T>(p);
      for (int64_t oh = 0; oh < out.H; ++oh) {
        const T* row = x + hs[static_cast<size_t>(oh)] * in.sh;
        T* dst = y + oh * out.sh;
        for (int64_t ow = 0; ow < out.W; ++ow) dst[ow * out.sw] = row[ws[static_cast<size_t>(ow)] * in.sw];
      }
    }
  });
}

template <class T>
void run_upsample_nearest_backward(const Planes& g, const Planes& gi, double scale_h, double scale_w) {
  using C = acc_t<T>;
  const std::vector<int64_t> hs = nearest_sources(g.H, gi.H, scale_h), ws = nearest_sources(g.W, gi.W, scale_w);
  parallel_chunks(gi.count, grain_for(gi.H * gi.W), [&](int64_t p0, int64_t p1) {
    std::vector<C> acc;
    for (int64_t p = p0; p < p1; ++p) {
      acc.assign(static_cast<size_t>(gi.H * gi.W), C(0));
      const T* go = g.plane<T>(p);
      for (int64_t oh = 0; oh < g.H; ++oh) {
        C* row = acc.data() + hs[static_cast<size_t>(oh)] * gi.W;
        for (int64_t ow = 0; ow < g.W; ++ow)
          row[ws[static_cast<size_t>(ow)]] += static_cast<C>(to_compute(go[oh * g.sh + ow * g.sw]));
      }
      T* out = gi.plane<T>(p);
      for (int64_t h = 0; h < gi.H; ++h)
        for (int64_t x = 0; x < gi.W; ++x) out[h * gi.sh + x * gi.sw] = convert<T>(acc[static_cast<size_t>(h * gi.W + x)]);
    }
  });
}

double optional_double(const Launch& L, size_t i, const char* what) {
  return L.has_input(i) ? double_arg(L, i, what) : 0.0;
}

}  // namespace

TFL_Error* kernel_max_pool2d_with_indices(const TFL_Kernel_Args* args) {
  // max_pool2d_with_indices(self, kernel_size, stride=[], padding=0, dilation=1, ceil_mode=False) -> (out, indices)
  return run_kernel(args, kMaxPool2dWithIndices, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self");
    const TensorArg out = L.output(0, "out"), ind = L.output(1, "indices");
    require_floating(self, "self");
    require_same_dtype(out, self, "out", "self");
    if (ind.dtype != TFL_DTYPE_INT64) invalid_argument("indices must be int64, got ", dtype_name(ind.dtype));
    const Window w = read_window(L, 1, 2, 3, 4);
    const Planes pi = planes(self, "self"), po = planes(out, "out"), px = planes(ind, "indices");
    require_same_planes(pi, po, "self", "out");
    require_same_planes(pi, px, "self", "indices");
    if (po.count == 0 || po.H == 0 || po.W == 0) return;
    if (pi.H == 0 || pi.W == 0) invalid_argument("max_pool2d input has an empty spatial dim");
    dispatch_floating(self.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([pi, po, px, w] { run_max_pool<T>(pi, po, px, w); });
    });
  });
}

TFL_Error* kernel_max_pool2d_with_indices_backward(const TFL_Kernel_Args* args) {
  // max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode, indices)
  return run_kernel(args, kMaxPool2dWithIndicesBackward, [&](Launch& L) {
    const TensorArg grad = L.input_tensor(0, "grad_output"), self = L.input_tensor(1, "self");
    const TensorArg ind = L.input_tensor(7, "indices");
    const TensorArg gi = L.output(0, "grad_input");
    const GradPlanes g = grad_planes(grad, gi, &self);
    const Planes pg = g.grad, po = g.input;
    if (ind.dtype != TFL_DTYPE_INT64) invalid_argument("indices must be int64, got ", dtype_name(ind.dtype));
    const Planes px = planes(ind, "indices");
    require_same_planes(pg, px, "grad_output", "indices");
    if (pg.H != px.H || pg.W != px.W) invalid_argument("indices must be shaped like grad_output");
    if (po.count == 0 || po.H * po.W == 0) return;
    dispatch_floating(grad.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([pg, px, po] { run_max_pool_backward<T>(pg, px, po); });
    });
  });
}

TFL_Error* kernel_avg_pool2d(const TFL_Kernel_Args* args) {
  // avg_pool2d(self, kernel_size, stride=[], padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None)
  return run_kernel(args, kAvgPool2d, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self"), out = L.output(0, "out");
    require_floating(self, "self");
    require_same_dtype(out, self, "out", "self");
    const Window w = read_window(L, 1, 2, 3, -1);
    AvgOpts o;
    o.count_include_pad = L.boolean_or(5, true, "count_include_pad");
    o.divisor = L.has_input(6) ? int_arg(L, 6, "divisor_override") : 0;
    if (L.has_input(6) && o.divisor == 0) invalid_argument("divisor_override must be non-zero");
    const Planes pi = planes(self, "self"), po = planes(out, "out");
    require_same_planes(pi, po, "self", "out");
    if (po.count == 0 || po.H * po.W == 0) return;
    dispatch_floating(self.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([pi, po, w, o] { run_avg_pool<T>(pi, po, w, o); });
    });
  });
}

TFL_Error* kernel_avg_pool2d_backward(const TFL_Kernel_Args* args) {
  // avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)
  return run_kernel(args, kAvgPool2dBackward, [&](Launch& L) {
    const TensorArg grad = L.input_tensor(0, "grad_output"), self = L.input_tensor(1, "self");
    const TensorArg gi = L.output(0, "grad_input");
    const GradPlanes g = grad_planes(grad, gi, &self);
    const Planes pg = g.grad, po = g.input;
    const Window w = read_window(L, 2, 3, 4, -1);
    AvgOpts o;
    o.count_include_pad = L.boolean_or(6, true, "count_include_pad");
    o.divisor = L.has_input(7) ? int_arg(L, 7, "divisor_override") : 0;
    if (L.has_input(7) && o.divisor == 0) invalid_argument("divisor_override must be non-zero");
    if (po.count == 0 || po.H * po.W == 0) return;
    dispatch_floating(grad.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([pg, po, w, o] { run_avg_pool_backward<T>(pg, po, w, o); });
    });
  });
}

TFL_Error* kernel_adaptive_avg_pool2d(const TFL_Kernel_Args* args) {
  // _adaptive_avg_pool2d(self, output_size) -> out
  return run_kernel(args, kAdaptiveAvgPool2d, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self"), out = L.output(0, "out");
    require_floating(self, "self");
    require_same_dtype(out, self, "out", "self");
    const auto size = int_list(L, 1, "output_size", 2);
    const Planes pi = planes(self, "self"), po = planes(out, "out");
    require_same_planes(pi, po, "self", "out");
    if (po.H != size[0] || po.W != size[1]) invalid_argument("out must have the spatial size output_size");
    if (po.count == 0 || po.H * po.W == 0) return;
    if (pi.H == 0 || pi.W == 0) invalid_argument("adaptive_avg_pool2d input has an empty spatial dim");
    dispatch_floating(self.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([pi, po] { run_adaptive_avg<T>(pi, po); });
    });
  });
}

TFL_Error* kernel_adaptive_avg_pool2d_backward(const TFL_Kernel_Args* args) {
  // _adaptive_avg_pool2d_backward(grad_output, self) -> grad_input
  return run_kernel(args, kAdaptiveAvgPool2dBackward, [&](Launch& L) {
    const TensorArg grad = L.input_tensor(0, "grad_output"), self = L.input_tensor(1, "self");
    const TensorArg gi = L.output(0, "grad_input");
    const GradPlanes g = grad_planes(grad, gi, &self);
    const Planes pg = g.grad, po = g.input;
    if (po.count == 0 || po.H * po.W == 0) return;
    dispatch_floating(grad.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([pg, po] { run_adaptive_avg_backward<T>(pg, po); });
    });
  });
}

TFL_Error* kernel_upsample_nearest2d(const TFL_Kernel_Args* args) {
  // upsample_nearest2d(self, output_size, scales_h=None, scales_w=None) -> out
  return run_kernel(args, kUpsampleNearest2d, [&](Launch& L) {
    const TensorArg self = L.input_tensor(0, "self"), out = L.output(0, "out");
    require_same_dtype(out, self, "out", "self");
    const Planes pi = planes(self, "self", false), po = planes(out, "out", false);
    require_same_planes(pi, po, "self", "out");
    const double sh = optional_double(L, 2, "scales_h"), sw = optional_double(L, 3, "scales_w");
    if (po.count == 0 || po.H * po.W == 0) return;
    if (pi.H == 0 || pi.W == 0) invalid_argument("upsample_nearest2d input has an empty spatial dim");
    dispatch_dtype(self.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([pi, po, sh, sw] { run_upsample_nearest<T>(pi, po, sh, sw); });
    });
  });
}

TFL_Error* kernel_upsample_nearest2d_backward(const TFL_Kernel_Args* args) {
  // upsample_nearest2d_backward(grad_output, output_size, input_size, scales_h=None, scales_w=None) -> grad_input
  return run_kernel(args, kUpsampleNearest2dBackward, [&](Launch& L) {
    const TensorArg grad = L.input_tensor(0, "grad_output"), gi = L.output(0, "grad_input");
    const GradPlanes g = grad_planes(grad, gi, nullptr, false);
    const Planes pg = g.grad, po = g.input;
    const double sh = optional_double(L, 3, "scales_h"), sw = optional_double(L, 4, "scales_w");
    if (po.count == 0 || po.H * po.W == 0) return;
    dispatch_floating(grad.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      L.enqueue([pg, po, sh, sw] { run_upsample_nearest_backward<T>(pg, po, sh, sw); });
    });
  });
}

}  // namespace flemu
