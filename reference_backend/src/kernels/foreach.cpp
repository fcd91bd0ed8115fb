// The _foreach_* ops torch.optim's foreach (multi-tensor) Adam, AdamW and SGD
// use: one launch per list instead of one per tensor. Functional overloads
// write fresh outputs; the derived in-place overloads (no outputs) write the
// `self` list. Each element is computed as PyTorch's per-tensor CPU kernel
// computes it (same operation order, float for float16/bfloat16/float32), so
// foreach and single-tensor optimizer steps agree to the last bit or two.
#include <array>
#include <cmath>
#include <vector>

#include "support/nn_common.h"
#include "support/registry.h"

namespace flemu {
namespace {

enum class Op {
  AddScalar,        // self + s
  AddList,          // self + alpha * other
  MulScalar,        // self * s
  DivScalar,        // self / s
  DivScalarList,    // self / s[i]
  LerpScalar,       // lerp(self, end, weight)
  AddcmulScalar,    // self + value * t1 * t2
  AddcdivScalar,    // self + value * t1 / t2
  AddcdivScalarList,
  Sqrt,
  Neg,
  MaximumList,
  Zero,
};

constexpr int kMaxOperands = 4;  // out, self, and up to two more lists

// One tensor of the lists: a dense item (every operand dense with one
// layout) runs as a flat loop over its data pointers; any other keeps its
// operands' layouts in the job's `layouts`.
struct Item {
  char* data[kMaxOperands] = {};
  int64_t numel = 0;
  double scalar = 0;    // the per-tensor scalar of the ScalarList overloads
  int32_t layout = -1;  // index into ForeachJob::layouts; -1: dense
};

struct ForeachJob {
  Op op = Op::Zero;
  int32_t dtype = 0;
  int nops = 0;  // operands per item, out first
  double scalar = 0, alpha = 1;
  std::vector<Item> items;
  std::vector<std::array<Strided, kMaxOperands>> layouts;
};

std::vector<const TFL_Tensor*> list_arg(const Launch& L, size_t i, const char* what) {
  const TFL_Value& v = L.input(i, what);
  if (v.tag != TFL_VALUE_TENSOR_LIST) invalid_argument("argument ", i, " (", what, ") must be a tensor list, got tag ", v.tag);
  return std::vector<const TFL_Tensor*>(v.v.tensors.data, v.v.tensors.data + v.v.tensors.size);
}

std::vector<double> scalar_list_arg(const Launch& L, size_t i, const char* what) {
  const TFL_Value& v = L.input(i, what);
  if (v.tag == TFL_VALUE_DOUBLE_LIST) return std::vector<double>(v.v.doubles.data, v.v.doubles.data + v.v.doubles.size);
  if (v.tag == TFL_VALUE_INT_LIST) return std::vector<double>(v.v.ints.data, v.v.ints.data + v.v.ints.size);
  invalid_argument("argument ", i, " (", what, ") must be a list of scalars, got tag ", v.tag);
}

bool same_dense_layout(const Strided& a, const Strided& b) {
  if (a.ndim != b.ndim) return false;
  for (int32_t d = 0; d < a.ndim; ++d)
    if (a.sizes[d] != b.sizes[d] || (a.sizes[d] != 1 && a.strides[d] != b.strides[d])) return false;
  return dense(a);
}

template <class C>
inline C apply(Op op, C a, C b, C c, C s, C alpha) {
  switch (op) {
    case Op::AddScalar: return a + s;
    case Op::AddList: return a + alpha * b;
    case Op::MulScalar: return a * s;
    case Op::DivScalar:
    case Op::DivScalarList: return a / s;
    case Op::LerpScalar: return s < C(0.5) ? a + s * (b - a) : b - (b - a) * (C(1) - s);
    case Op::AddcmulScalar: return a + s * b * c;
    case Op::AddcdivScalar:
    case Op::AddcdivScalarList: return a + s * b / c;
    case Op::Sqrt: return std::sqrt(a);
    case Op::Neg: return -a;
    case Op::MaximumList: return a != a ? a : b != b ? b : a > b ? a : b;  // NaN propagates
    case Op::Zero: return C(0);
  }
  return a;
}

template <class T>
void run_item(const ForeachJob& j, const Item& it, int64_t begin, int64_t end) {
  using C = acc_t<T>;
  const C s = static_cast<C>(j.op == Op::DivScalarList || j.op == Op::AddcdivScalarList ? it.scalar : j.scalar);
  const C alpha = static_cast<C>(j.alpha);
  if (it.layout < 0) {
    T* out = reinterpret_cast<T*>(it.data[0]);
    const T* a = j.nops > 1 ? reinterpret_cast<const T*>(it.data[1]) : nullptr;
    const T* b = j.nops > 2 ? reinterpret_cast<const T*>(it.data[2]) : nullptr;
    const T* c = j.nops > 3 ? reinterpret_cast<const T*>(it.data[3]) : nullptr;
    for (int64_t i = begin; i < end; ++i) {
      const C av = a ? static_cast<C>(to_compute(a[i])) : C(0);
      const C bv = b ? static_cast<C>(to_compute(b[i])) : C(0);
      const C cv = c ? static_cast<C>(to_compute(c[i])) : C(0);
      out[i] = convert<T>(apply<C>(j.op, av, bv, cv, s, alpha));
    }
    return;
  }
  const std::array<Strided, kMaxOperands>& ops = j.layouts[static_cast<size_t>(it.layout)];
  Cursor cur[kMaxOperands] = {Cursor(ops[0], begin), Cursor(ops[j.nops > 1 ? 1 : 0], begin),
                              Cursor(ops[j.nops > 2 ? 2 : 0], begin), Cursor(ops[j.nops > 3 ? 3 : 0], begin)};
  for (int64_t i = begin; i < end; ++i) {
    C v[kMaxOperands] = {};
    for (int k = 1; k < j.nops; ++k) v[k] = static_cast<C>(to_compute(*reinterpret_cast<const T*>(cur[k].ptr)));
    *reinterpret_cast<T*>(cur[0].ptr) = convert<T>(apply<C>(j.op, v[1], v[2], v[3], s, alpha));
    for (int k = 0; k < j.nops; ++k) cur[k].next();
  }
}

template <class T>
void run_foreach(const ForeachJob& j) {
  constexpr int64_t kChunk = int64_t{1} << 15;
  struct Piece {
    size_t item;
    int64_t begin, end;
  };
  std::vector<Piece> pieces;
  for (size_t i = 0; i < j.items.size(); ++i)
    for (int64_t b = 0; b < j.items[i].numel; b += kChunk)
      pieces.push_back({i, b, std::min(j.items[i].numel, b + kChunk)});
  auto body = [&](int64_t p) {
    const Piece& pc = pieces[static_cast<size_t>(p)];
    run_item<T>(j, j.items[pc.item], pc.begin, pc.end);
  };
  if (pieces.size() <= 1) {
    for (size_t p = 0; p < pieces.size(); ++p) body(static_cast<int64_t>(p));
    return;
  }
  ThreadPool::instance().parallel_for(static_cast<int64_t>(pieces.size()), body);
}

// Reads the lists (self first, then `extra` more lists), the outputs (or
// self for the in-place overloads) and checks they line up.
void launch_foreach(const Launch& L, Op op, int extra_lists, size_t scalar_i, bool scalar_list) {
  ForeachJob j;
  j.op = op;
  std::vector<std::vector<const TFL_Tensor*>> lists;
  static const char* const kNames[] = {"self", "other", "tensor2"};
  for (int k = 0; k <= extra_lists; ++k) lists.push_back(list_arg(L, static_cast<size_t>(k), kNames[k]));
  const size_t n = lists[0].size();
  for (int k = 1; k <= extra_lists; ++k)
    if (lists[static_cast<size_t>(k)].size() != n)
      invalid_argument("tensor lists must have the same length, got ", n, " and ", lists[static_cast<size_t>(k)].size());
  std::vector<double> scalars;
  if (scalar_list) {
    scalars = scalar_list_arg(L, scalar_i, "scalars");
    if (scalars.size() != n) invalid_argument("scalars has ", scalars.size(), " entries for ", n, " tensors");
  } else if (scalar_i > 0) {
    j.scalar = L.scalar(scalar_i, "scalar").to_double();
  }
  if (op == Op::AddList) j.alpha = L.has_input(2) ? L.scalar(2, "alpha").to_double() : 1.0;
  const bool in_place = L.num_outputs() == 0;
  if (!in_place && L.num_outputs() != n) invalid_argument("expected ", n, " outputs, got ", L.num_outputs());
  j.nops = op == Op::Zero ? 1 : 2 + extra_lists;
  j.items.resize(n);
  std::array<Strided, kMaxOperands> ops;
  for (size_t i = 0; i < n; ++i) {
    Item& it = j.items[i];
    const TensorArg self = L.tensor(lists[0][i], "self");
    if (!dtype_is_floating(self.dtype)) invalid_argument("_foreach_ kernels take floating tensors, got ", dtype_name(self.dtype));
    if (i == 0) j.dtype = self.dtype;
    if (self.dtype != j.dtype)
      fail(TFL_ERR_UNIMPLEMENTED, "the tensors of one list have different dtypes; flemu's _foreach_ kernels take one");
    const TensorArg out = in_place ? self : L.output(i, "out");
    if (out.dtype != j.dtype || out.numel != self.numel) invalid_argument("output ", i, " must be shaped like self[", i, "]");
    ops[0] = strided(out, "out");
    if (op != Op::Zero) ops[1] = strided(self, "self");
    for (int k = 1; k <= extra_lists; ++k) {
      const TensorArg t = L.tensor(lists[static_cast<size_t>(k)][i], kNames[k]);
      if (t.dtype != j.dtype)
        fail(TFL_ERR_UNIMPLEMENTED, cat(kNames[k], "[", i, "] has dtype ", dtype_name(t.dtype), ", self has ",
                                        dtype_name(j.dtype)));
      bool same = t.ndim == self.ndim;
      for (int32_t d = 0; same && d < t.ndim; ++d) same = t.sizes[d] == self.sizes[d];
      if (!same) invalid_argument(kNames[k], "[", i, "] must have the shape of self[", i, "]");
      ops[static_cast<size_t>(1 + k)] = strided(t, kNames[k]);
    }
    bool dense_item = true;
    for (int k = 0; k < j.nops; ++k) {
      it.data[k] = ops[static_cast<size_t>(k)].data;
      dense_item = dense_item && same_dense_layout(ops[static_cast<size_t>(k)], ops[0]);
    }
    it.numel = out.numel;
    if (!dense_item) {
      it.layout = static_cast<int32_t>(j.layouts.size());
      j.layouts.push_back(ops);
    }
    if (scalar_list) it.scalar = scalars[i];
  }
  if (n == 0) return;
  dispatch_floating(j.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    L.enqueue([j = std::move(j)] { run_foreach<T>(j); });
  });
}

}  // namespace

// Argument positions: lists first, then the scalar(s).
TFL_Error* kernel_foreach_add_scalar(const TFL_Kernel_Args* a) {
  return run_kernel(a, kForeachAddScalar, [&](Launch& L) { launch_foreach(L, Op::AddScalar, 0, 1, false); });
}
TFL_Error* kernel_foreach_add_list(const TFL_Kernel_Args* a) {
  return run_kernel(a, kForeachAddList, [&](Launch& L) { launch_foreach(L, Op::AddList, 1, 0, false); });
}
TFL_Error* kernel_foreach_mul_scalar(const TFL_Kernel_Args* a) {
  return run_kernel(a, kForeachMulScalar, [&](Launch& L) { launch_foreach(L, Op::MulScalar, 0, 1, false); });
}
TFL_Error* kernel_foreach_div_scalar(const TFL_Kernel_Args* a) {
  return run_kernel(a, kForeachDivScalar, [&](Launch& L) { launch_foreach(L, Op::DivScalar, 0, 1, false); });
}
TFL_Error* kernel_foreach_div_scalar_list(const TFL_Kernel_Args* a) {
  return run_kernel(a, kForeachDivScalarList, [&](Launch& L) { launch_foreach(L, Op::DivScalarList, 0, 1, true); });
}
TFL_Error* kernel_foreach_lerp_scalar(const TFL_Kernel_Args* a) {
  return run_kernel(a, kForeachLerpScalar, [&](Launch& L) { launch_foreach(L, Op::LerpScalar, 1, 2, false); });
}
TFL_Error* kernel_foreach_addcmul_scalar(const TFL_Kernel_Args* a) {
  return run_kernel(a, kForeachAddcmulScalar, [&](Launch& L) { launch_foreach(L, Op::AddcmulScalar, 2, 3, false); });
}
TFL_Error* kernel_foreach_addcdiv_scalar(const TFL_Kernel_Args* a) {
  return run_kernel(a, kForeachAddcdivScalar, [&](Launch& L) { launch_foreach(L, Op::AddcdivScalar, 2, 3, false); });
}
TFL_Error* kernel_foreach_addcdiv_scalar_list(const TFL_Kernel_Args* a) {
  return run_kernel(a, kForeachAddcdivScalarList,
                    [&](Launch& L) { launch_foreach(L, Op::AddcdivScalarList, 2, 3, true); });
}
TFL_Error* kernel_foreach_sqrt(const TFL_Kernel_Args* a) {
  return run_kernel(a, kForeachSqrt, [&](Launch& L) { launch_foreach(L, Op::Sqrt, 0, 0, false); });
}
TFL_Error* kernel_foreach_neg(const TFL_Kernel_Args* a) {
  return run_kernel(a, kForeachNeg, [&](Launch& L) { launch_foreach(L, Op::Neg, 0, 0, false); });
}
TFL_Error* kernel_foreach_maximum_list(const TFL_Kernel_Args* a) {
  return run_kernel(a, kForeachMaximumList, [&](Launch& L) { launch_foreach(L, Op::MaximumList, 1, 0, false); });
}
TFL_Error* kernel_foreach_zero(const TFL_Kernel_Args* a) {
  return run_kernel(a, kForeachZero, [&](Launch& L) { launch_foreach(L, Op::Zero, 0, 0, false); });
}

}  // namespace flemu
