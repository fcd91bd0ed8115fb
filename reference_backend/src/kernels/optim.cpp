// Fused optimizer steps: _fused_adam_, _fused_adamw_ and _fused_sgd_ (lr as
// float or as a device tensor, grad_scale / found_inf for AMP), one launch
// per parameter group, split over the thread pool in chunks that may cross
// tensors.
//
// The per-element arithmetic follows torch.optim's single-tensor reference
// step by step, in float (double for float64 parameters), so a fused step
// matches the unfused one on the CPU to a few ulps.
#include <cmath>
#include <vector>

#include "support/isa.h"
#include "support/nn_common.h"
#include "support/registry.h"

namespace flemu {
namespace {

// A list argument: tensor descriptors, NULL entries allowed for optional lists.
std::vector<const TFL_Tensor*> tensor_list(const Launch& L, size_t i, const char* what) {
  const TFL_Value& v = L.input(i, what);
  if (v.tag != TFL_VALUE_TENSOR_LIST) invalid_argument("argument ", i, " (", what, ") must be a tensor list, got tag ", v.tag);
  return std::vector<const TFL_Tensor*>(v.v.tensors.data, v.v.tensors.data + v.v.tensors.size);
}

// True when the tensor covers a dense block of memory in some dim order.
bool dense_any_order(const TensorArg& t) {
  if (t.numel == 0) return true;  // whatever its strides: there is nothing to stream
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
  for (int32_t d = 0; d < t.ndim; ++d)
    if (t.sizes[d] != 1) dims.emplace_back(t.strides[d], t.sizes[d]);
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto& [st, sz] : dims) {
    if (st != expected) return false;
    expected *= sz;
  }
  return true;
}

bool same_layout(const TensorArg& a, const TensorArg& b) {
  if (a.ndim != b.ndim || a.dtype != b.dtype) return false;
  for (int32_t d = 0; d < a.ndim; ++d)
    if (a.sizes[d] != b.sizes[d] || (a.sizes[d] != 1 && a.strides[d] != b.strides[d])) return false;
  return true;
}

// One tensor of the group: its operands (same dense layout), element count.
struct Slot {
  char* ptr[5] = {};      // param, grad, state 1, state 2, state 3 (as the optimizer defines them)
  const char* step = nullptr;  // float32 step count (Adam)
  int64_t numel = 0;
};

// A reference to an optional 1-element tensor read on the stream.
struct ScalarRef {
  const char* data = nullptr;
  int32_t dtype = 0;
  bool present = false;
  double get() const { return loader_f64(dtype)(data); }
};

ScalarRef scalar_ref(const Launch& L, size_t i, const char* what) {
  ScalarRef r;
  TensorArg t;
  if (!optional_tensor(L, i, what, &t)) return r;
  if (t.numel != 1) invalid_argument(what, " must hold one element, got ", t.numel);
  if (!dtype_is_floating(t.dtype)) invalid_argument(what, " must be floating, got ", dtype_name(t.dtype));
  r.data = t.data;
  r.dtype = t.dtype;
  r.present = true;
  return r;
}

// Validates the lists (same length, same layout per index; `optional_lists`
// may be empty) and fills the slots. Declines layouts it cannot stream.
std::vector<Slot> collect(const Launch& L, const std::vector<std::vector<const TFL_Tensor*>>& lists,
                          const char* const* names, int32_t* dtype) {
  const size_t n = lists[0].size();
  std::vector<Slot> slots(n);
  for (size_t k = 1; k < lists.size(); ++k)
    if (!lists[k].empty() && lists[k].size() != n)
      invalid_argument(names[k], " has ", lists[k].size(), " tensors but ", names[0], " has ", n);
  for (size_t i = 0; i < n; ++i) {
    const TensorArg p = L.tensor(lists[0][i], names[0]);
    if (!dtype_is_floating(p.dtype)) invalid_argument(names[0], " must be floating, got ", dtype_name(p.dtype));
    if (i == 0) *dtype = p.dtype;
    if (p.dtype != *dtype) invalid_argument("every tensor in ", names[0], " must share one dtype");
    if (!dense_any_order(p))
      fail(TFL_ERR_UNIMPLEMENTED, cat(names[0], "[", i, "] is not dense; the fused step streams dense tensors"));
    slots[i].ptr[0] = p.data;
    slots[i].numel = p.numel;
    for (size_t k = 1; k < lists.size(); ++k) {
      if (lists[k].empty()) continue;
      const TensorArg t = L.tensor(lists[k][i], names[k]);
      if (!same_layout(t, p))
        fail(TFL_ERR_UNIMPLEMENTED,
             cat(names[k], "[", i, "] does not have the dtype, shape and strides of ", names[0], "[", i, "]"));
      slots[i].ptr[k] = t.data;
    }
  }
  return slots;
}

// Runs fn(slot, begin, end) over all elements of all slots in chunks.
template <class Fn>
void for_chunks(const std::vector<Slot>& slots, Fn&& fn) {
  constexpr int64_t kChunk = int64_t{1} << 15;
  struct Piece {
    size_t slot;
    int64_t begin, end;
  };
  std::vector<Piece> pieces;
  for (size_t s = 0; s < slots.size(); ++s)
    for (int64_t b = 0; b < slots[s].numel; b += kChunk) pieces.push_back({s, b, std::min(slots[s].numel, b + kChunk)});
  if (pieces.empty()) return;
  if (pieces.size() == 1) {
    fn(slots[pieces[0].slot], pieces[0].begin, pieces[0].end);
    return;
  }
  ThreadPool::instance().parallel_for(static_cast<int64_t>(pieces.size()), [&](int64_t i) {
    const Piece& p = pieces[static_cast<size_t>(i)];
    fn(slots[p.slot], p.begin, p.end);
  });
}

// ---------------------------------------------------------------------------
// Adam / AdamW
// ---------------------------------------------------------------------------

struct AdamJob {
  std::vector<Slot> slots;  // ptr: param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq
  ScalarRef lr_tensor, grad_scale, found_inf;
  double lr = 0, beta1 = 0, beta2 = 0, weight_decay = 0, eps = 0;
  bool amsgrad = false, maximize = false, adamw = false;
};

// Elements per block: each step of the update is a separate tight loop over
// a block of float values (so it vectorizes), and a block stays in L1. The
// loops over a chunk's blocks run in the widest build of with_isa (isa.h);
// the helpers they call are always inlined so that each build vectorizes its
// own copy.
constexpr int64_t kBlock = 256;

template <class T, class C>
[[gnu::always_inline]] inline void load_block(const T* src, int64_t n, C* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<C>(to_compute(src[i]));
}

template <class T, class C>
[[gnu::always_inline]] inline void store_block(const C* src, int64_t n, T* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = convert<T>(src[i]);
}

// A block of the gradient as the update reads it: unscaled by grad_scale (and
// written back unscaled, as PyTorch's fused optimizers leave it), negated to
// maximize.
template <class T, class C>
[[gnu::always_inline]] inline void load_grad_block(T* grad, int64_t n, bool scaled, C scale, bool maximize, C* g) {
  load_block(grad, n, g);
  if (scaled) {
    for (int64_t i = 0; i < n; ++i) g[i] = g[i] / scale;
    store_block(g, n, grad);
  }
  if (maximize)
    for (int64_t i = 0; i < n; ++i) g[i] = -g[i];
}

template <class T>
void run_adam(const AdamJob& j) {
  using C = acc_t<T>;
  if (j.found_inf.present && j.found_inf.get() == 1.0) return;  // AMP skipped this step
  const double lr = j.lr_tensor.present ? j.lr_tensor.get() : j.lr;
  const bool scaled = j.grad_scale.present;
  const C scale = scaled ? static_cast<C>(j.grad_scale.get()) : C(1);
  const C w = static_cast<C>(1.0 - j.beta1), beta2 = static_cast<C>(j.beta2), beta2c = static_cast<C>(1.0 - j.beta2);
  const C wd = static_cast<C>(j.weight_decay), decay = static_cast<C>(1.0 - lr * j.weight_decay);
  const C eps = static_cast<C>(j.eps);
  const bool l2 = j.weight_decay != 0.0 && !j.adamw, decoupled = j.weight_decay != 0.0 && j.adamw;
  for_chunks(j.slots, [&](const Slot& s, int64_t b, int64_t e) {
    const double step = static_cast<double>(*reinterpret_cast<const float*>(s.step));
    const double bc1 = 1.0 - std::pow(j.beta1, step), bc2 = 1.0 - std::pow(j.beta2, step);
    const C neg_step_size = static_cast<C>(-(lr / bc1));
    const C bc2_sqrt = static_cast<C>(std::sqrt(bc2));
    T* param = reinterpret_cast<T*>(s.ptr[0]);
    T* grad = reinterpret_cast<T*>(s.ptr[1]);
    T* m = reinterpret_cast<T*>(s.ptr[2]);
    T* v = reinterpret_cast<T*>(s.ptr[3]);
    T* vmax = reinterpret_cast<T*>(s.ptr[4]);
    with_isa([&]() __attribute__((always_inline)) {
      alignas(64) C g[kBlock], p[kBlock], mv[kBlock], vv[kBlock], d[kBlock];
      for (int64_t i0 = b; i0 < e; i0 += kBlock) {
        const int64_t n = std::min(kBlock, e - i0);
        load_grad_block(grad + i0, n, scaled, scale, j.maximize, g);
        load_block(param + i0, n, p);
        if (l2)
          for (int64_t i = 0; i < n; ++i) g[i] = g[i] + wd * p[i];
        if (decoupled)
          for (int64_t i = 0; i < n; ++i) p[i] = p[i] * decay;
        // exp_avg.lerp_(grad, 1 - beta1)
        load_block(m + i0, n, mv);
        if (w < C(0.5))
          for (int64_t i = 0; i < n; ++i) mv[i] = mv[i] + w * (g[i] - mv[i]);
        else
          for (int64_t i = 0; i < n; ++i) mv[i] = g[i] - (g[i] - mv[i]) * (C(1) - w);
        store_block(mv, n, m + i0);
        // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        load_block(v + i0, n, vv);
        for (int64_t i = 0; i < n; ++i) vv[i] = vv[i] * beta2 + beta2c * g[i] * g[i];
        store_block(vv, n, v + i0);
        const C* sq = vv;
        if (j.amsgrad) {
          load_block(vmax + i0, n, d);
          for (int64_t i = 0; i < n; ++i) d[i] = (d[i] > vv[i] || d[i] != d[i]) ? d[i] : vv[i];
          store_block(d, n, vmax + i0);
          sq = d;
        }
        // param.addcdiv_(exp_avg, sqrt(s) / bias_correction2_sqrt + eps, value=-step_size)
        for (int64_t i = 0; i < n; ++i) p[i] = p[i] + neg_step_size * (mv[i] / (std::sqrt(sq[i]) / bc2_sqrt + eps));
        store_block(p, n, param + i0);
      }
    });
  });
}

void launch_adam(const Launch& L, bool adamw, bool tensor_lr) {
  static const char* const kNames[] = {"self", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs"};
  AdamJob j;
  j.adamw = adamw;
  j.amsgrad = L.boolean_or(11, false, "amsgrad");
  j.maximize = L.boolean_or(12, false, "maximize");
  std::vector<std::vector<const TFL_Tensor*>> lists;
  for (size_t k = 0; k < 5; ++k) lists.push_back(tensor_list(L, k, kNames[k]));
  if (!j.amsgrad) lists[4].clear();
  else if (lists[4].size() != lists[0].size())
    invalid_argument("amsgrad needs one max_exp_avg_sqs tensor per parameter, got ", lists[4].size());
  for (size_t k = 1; k < 4; ++k)
    if (lists[k].size() != lists[0].size())
      invalid_argument(kNames[k], " has ", lists[k].size(), " tensors but self has ", lists[0].size());
  int32_t dtype = TFL_DTYPE_FLOAT32;
  j.slots = collect(L, lists, kNames, &dtype);
  const auto steps = tensor_list(L, 5, "state_steps");
  if (steps.size() != j.slots.size())
    invalid_argument("state_steps has ", steps.size(), " tensors but self has ", j.slots.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    const TensorArg st = L.tensor(steps[i], "state_steps");
    if (st.dtype != TFL_DTYPE_FLOAT32 || st.numel != 1)
      invalid_argument("state_steps[", i, "] must be a one-element float32 tensor on the device, got ", dtype_name(st.dtype),
                       " with ", st.numel, " elements");
    j.slots[i].step = st.data;
  }
  if (tensor_lr) j.lr_tensor = scalar_ref(L, 6, "lr");
  else j.lr = double_arg(L, 6, "lr");
  j.beta1 = double_arg(L, 7, "beta1");
  j.beta2 = double_arg(L, 8, "beta2");
  j.weight_decay = double_arg(L, 9, "weight_decay");
  j.eps = double_arg(L, 10, "eps");
  j.grad_scale = scalar_ref(L, 13, "grad_scale");
  j.found_inf = scalar_ref(L, 14, "found_inf");
  if (j.slots.empty()) return;
  dispatch_floating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    L.enqueue([j] { run_adam<T>(j); });
  });
}

// ---------------------------------------------------------------------------
// SGD
// ---------------------------------------------------------------------------

struct SgdJob {
  std::vector<Slot> slots;  // ptr: param, grad, momentum_buffer
  ScalarRef lr_tensor, grad_scale, found_inf;
  double lr = 0, weight_decay = 0, momentum = 0, dampening = 0;
  bool nesterov = false, maximize = false, first = false;
};

template <class T>
void run_sgd(const SgdJob& j) {
  using C = acc_t<T>;
  if (j.found_inf.present && j.found_inf.get() == 1.0) return;
  const double lr = j.lr_tensor.present ? j.lr_tensor.get() : j.lr;
  const bool scaled = j.grad_scale.present;
  const C scale = scaled ? static_cast<C>(j.grad_scale.get()) : C(1);
  const C neg_lr = static_cast<C>(-lr), wd = static_cast<C>(j.weight_decay), mom = static_cast<C>(j.momentum);
  const C damp = static_cast<C>(1.0 - j.dampening);
  const bool use_momentum = j.momentum != 0.0;
  for_chunks(j.slots, [&](const Slot& s, int64_t b, int64_t e) {
    T* param = reinterpret_cast<T*>(s.ptr[0]);
    T* grad = reinterpret_cast<T*>(s.ptr[1]);
    T* buf = reinterpret_cast<T*>(s.ptr[2]);
    with_isa([&]() __attribute__((always_inline)) {
      alignas(64) C g[kBlock], p[kBlock], bv[kBlock];
      for (int64_t i0 = b; i0 < e; i0 += kBlock) {
        const int64_t n = std::min(kBlock, e - i0);
        load_grad_block(grad + i0, n, scaled, scale, j.maximize, g);
        load_block(param + i0, n, p);
        if (j.weight_decay != 0.0)
          for (int64_t i = 0; i < n; ++i) g[i] = g[i] + wd * p[i];
        if (use_momentum) {
          if (j.first) {
            for (int64_t i = 0; i < n; ++i) bv[i] = g[i];
          } else {
            load_block(buf + i0, n, bv);
            for (int64_t i = 0; i < n; ++i) bv[i] = bv[i] * mom + damp * g[i];
          }
          store_block(bv, n, buf + i0);
          // The reference reads the buffer back in its dtype.
          load_block(buf + i0, n, bv);
          if (j.nesterov)
            for (int64_t i = 0; i < n; ++i) g[i] = g[i] + mom * bv[i];
          else
            for (int64_t i = 0; i < n; ++i) g[i] = bv[i];
        }
        for (int64_t i = 0; i < n; ++i) p[i] = p[i] + neg_lr * g[i];
        store_block(p, n, param + i0);
      }
    });
  });
}

void launch_sgd(const Launch& L, bool tensor_lr) {
  static const char* const kNames[] = {"self", "grads", "momentum_buffer_list"};
  SgdJob j;
  j.weight_decay = double_arg(L, 3, "weight_decay");
  j.momentum = double_arg(L, 4, "momentum");
  if (tensor_lr) j.lr_tensor = scalar_ref(L, 5, "lr");
  else j.lr = double_arg(L, 5, "lr");
  j.dampening = double_arg(L, 6, "dampening");
  j.nesterov = L.boolean_or(7, false, "nesterov");
  j.maximize = L.boolean_or(8, false, "maximize");
  j.first = L.boolean_or(9, false, "is_first_step");
  j.grad_scale = scalar_ref(L, 10, "grad_scale");
  j.found_inf = scalar_ref(L, 11, "found_inf");
  std::vector<std::vector<const TFL_Tensor*>> lists;
  for (size_t k = 0; k < 3; ++k) lists.push_back(tensor_list(L, k, kNames[k]));
  if (lists[1].size() != lists[0].size())
    invalid_argument("grads has ", lists[1].size(), " tensors but self has ", lists[0].size());
  if (j.momentum == 0.0) lists[2].clear();
  else if (lists[2].size() != lists[0].size())
    invalid_argument("momentum needs one momentum buffer per parameter, got ", lists[2].size());
  int32_t dtype = TFL_DTYPE_FLOAT32;
  j.slots = collect(L, lists, kNames, &dtype);
  if (j.slots.empty()) return;
  dispatch_floating(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    L.enqueue([j] { run_sgd<T>(j); });
  });
}

}  // namespace

TFL_Error* kernel_fused_adam(const TFL_Kernel_Args* args) {
  return run_kernel(args, kFusedAdam, [&](Launch& L) { launch_adam(L, false, false); });
}
TFL_Error* kernel_fused_adam_tensor_lr(const TFL_Kernel_Args* args) {
  return run_kernel(args, kFusedAdamTensorLr, [&](Launch& L) { launch_adam(L, false, true); });
}
TFL_Error* kernel_fused_adamw(const TFL_Kernel_Args* args) {
  return run_kernel(args, kFusedAdamw, [&](Launch& L) { launch_adam(L, true, false); });
}
TFL_Error* kernel_fused_adamw_tensor_lr(const TFL_Kernel_Args* args) {
  return run_kernel(args, kFusedAdamwTensorLr, [&](Launch& L) { launch_adam(L, true, true); });
}
TFL_Error* kernel_fused_sgd(const TFL_Kernel_Args* args) {
  return run_kernel(args, kFusedSgd, [&](Launch& L) { launch_sgd(L, false); });
}
TFL_Error* kernel_fused_sgd_tensor_lr(const TFL_Kernel_Args* args) {
  return run_kernel(args, kFusedSgdTensorLr, [&](Launch& L) { launch_sgd(L, true); });
}

}  // namespace flemu
