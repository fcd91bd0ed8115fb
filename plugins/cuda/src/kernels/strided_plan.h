// Host-side layout planning for elementwise kernels, free of CUDA so it can be
// unit-tested on any machine: the output's shape, each operand's byte strides
// (broadcast operands get stride 0), size-1 dimensions dropped, dimensions
// ordered by the output's strides and adjacent ones merged where every
// operand allows it. A kernel then walks at most kPlanDims dimensions.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

namespace flcuda {

constexpr int kPlanDims = 8;      // dimensions a kernel walks after merging
constexpr int kPlanOperands = 4;  // output + up to three inputs

// One operand as the planner sees it: sizes and strides in elements.
struct OperandView {
  const int64_t* sizes;
  const int64_t* strides;
  int32_t ndim;
  int64_t itemsize;
};

struct LayoutPlan {
  bool ok = true;  // false: more than kPlanDims dimensions remain after merging
  int32_t ndim = 0;
  int64_t numel = 0;
  int32_t num_operands = 0;
  int64_t sizes[kPlanDims] = {};
  int64_t strides[kPlanOperands][kPlanDims] = {};  // bytes
  // True when every operand is dense in the output's order with its own
  // itemsize (ndim <= 1 and stride == itemsize, or numel <= 1).
  bool contiguous = false;
};

// Plans `ops[0]` (the output, whose shape leads) and the inputs, each of
// which broadcasts to the output's shape right-aligned (PyTorch's rule).
// Returns ok = false when an input does not broadcast.
inline LayoutPlan plan_layout(const OperandView* ops, int32_t num_ops) {
  LayoutPlan plan;
  plan.num_operands = num_ops;
  const OperandView& out = ops[0];
  const int32_t nd = out.ndim;
  plan.numel = 1;
  for (int32_t d = 0; d < nd; ++d) plan.numel *= out.sizes[d];
  // Per output dim: size and each operand's byte stride.
  std::vector<int64_t> sizes(static_cast<size_t>(nd));
  std::vector<std::vector<int64_t>> strides(static_cast<size_t>(num_ops), std::vector<int64_t>(static_cast<size_t>(nd), 0));
  for (int32_t d = 0; d < nd; ++d) sizes[static_cast<size_t>(d)] = out.sizes[d];
  for (int32_t k = 0; k < num_ops; ++k) {
    const OperandView& op = ops[k];
    if (op.ndim > nd) {
      plan.ok = false;
      return plan;
    }
    for (int32_t j = 0; j < op.ndim; ++j) {
      const int32_t d = nd - op.ndim + j;
      if (op.sizes[j] == out.sizes[d]) {
        strides[static_cast<size_t>(k)][static_cast<size_t>(d)] = op.sizes[j] == 1 ? 0 : op.strides[j] * op.itemsize;
      } else if (op.sizes[j] == 1) {
        strides[static_cast<size_t>(k)][static_cast<size_t>(d)] = 0;
      } else {
        plan.ok = false;
        return plan;
      }
    }
  }
  if (plan.numel <= 1) {
    plan.ndim = 0;
    plan.contiguous = true;
    return plan;
  }
  // Keep dims of size > 1, ordered outermost first by the output's stride
  // (stable, so a row-major output keeps its order).
  std::vector<int32_t> order;
  for (int32_t d = 0; d < nd; ++d)
    if (sizes[static_cast<size_t>(d)] != 1) order.push_back(d);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return strides[0][static_cast<size_t>(a)] > strides[0][static_cast<size_t>(b)];
  });
  // Merge from the innermost dim outwards.
  std::vector<int64_t> msizes;
  std::vector<std::vector<int64_t>> mstrides(static_cast<size_t>(num_ops));
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const size_t d = static_cast<size_t>(*it);
    bool merge = !msizes.empty();
    for (int32_t k = 0; merge && k < num_ops; ++k) {
      const int64_t inner_stride = mstrides[static_cast<size_t>(k)].back();
      merge = strides[static_cast<size_t>(k)][d] == inner_stride * msizes.back();
    }
    if (merge) {
      msizes.back() *= sizes[d];
    } else {
      msizes.push_back(sizes[d]);
      for (int32_t k = 0; k < num_ops; ++k) mstrides[static_cast<size_t>(k)].push_back(strides[static_cast<size_t>(k)][d]);
    }
  }
  const int32_t md = static_cast<int32_t>(msizes.size());
  if (md > kPlanDims) {
    plan.ok = false;
    return plan;
  }
  plan.ndim = md;
  // Stored outermost first.
  for (int32_t i = 0; i < md; ++i) {
    plan.sizes[i] = msizes[static_cast<size_t>(md - 1 - i)];
    for (int32_t k = 0; k < num_ops; ++k)
      plan.strides[k][i] = mstrides[static_cast<size_t>(k)][static_cast<size_t>(md - 1 - i)];
  }
  plan.contiguous = md == 1;
  for (int32_t k = 0; plan.contiguous && k < num_ops; ++k)
    plan.contiguous = plan.strides[k][0] == ops[k].itemsize;
  return plan;
}

// True when a tensor is dense and row-major. As in PyTorch, the strides of
// size-1 dimensions do not matter, and an empty tensor (no element to
// address) is dense whatever its strides.
inline bool is_row_major(const int64_t* sizes, const int64_t* strides, int32_t ndim) {
  for (int32_t d = 0; d < ndim; ++d)
    if (sizes[d] == 0) return true;
  int64_t expected = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    if (sizes[d] != 1 && strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

// Output size of a convolution or pooling window along one dimension.
inline int64_t window_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t dilation,
                                  bool ceil_mode) {
  const int64_t span = dilation * (kernel - 1) + 1;
  int64_t num = in + 2 * pad - span;
  if (num < 0) return 0;
  int64_t out = (ceil_mode ? (num + stride - 1) / stride : num / stride) + 1;
  // PyTorch's rule: the last window must start inside the input or the left padding.
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

// How a 2-D matrix view [rows, cols] with element strides (sr, sc) is handed
// to a column-major BLAS: `transposed` says it is read as the transpose of
// a column-major matrix with leading dimension `ld`. ok = false when neither
// layout fits (the caller copies it dense first).
struct BlasOperand {
  bool ok;
  bool transposed;
  int64_t ld;
};

inline BlasOperand blas_operand(int64_t rows, int64_t cols, int64_t sr, int64_t sc) {
  // Row-major (unit column stride): the column-major view of its transpose.
  if ((sc == 1 || cols == 1) && sr >= std::max<int64_t>(1, cols)) return {true, true, sr};
  if (rows == 1 && sc == 1) return {true, true, std::max<int64_t>(1, cols)};
  // Column-major (unit row stride).
  if ((sr == 1 || rows == 1) && sc >= std::max<int64_t>(1, rows)) return {true, false, sc};
  if (cols == 1 && sr == 1) return {true, false, std::max<int64_t>(1, rows)};
  return {false, false, 0};
}

}  // namespace flcuda
