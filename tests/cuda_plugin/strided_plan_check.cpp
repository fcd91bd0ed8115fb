// Prints, one JSON object a line, what plugins/cuda/src/kernels/strided_plan.h
// makes of fixed layouts; test_cuda_plugin_host_logic.py holds the expected
// values. Host code only: builds with any C++17 compiler, no CUDA.
#include <cstdio>
#include <vector>

#include "strided_plan.h"

using flcuda::LayoutPlan;
using flcuda::OperandView;

namespace {

struct T {
  std::vector<int64_t> sizes, strides;
  int64_t itemsize;
  OperandView view() const {
    return OperandView{sizes.data(), strides.data(), static_cast<int32_t>(sizes.size()), itemsize};
  }
};

void print_plan(const char* name, std::vector<T> ops) {
  std::vector<OperandView> views;
  for (const T& t : ops) views.push_back(t.view());
  const LayoutPlan p = flcuda::plan_layout(views.data(), static_cast<int32_t>(views.size()));
  std::printf("{\"case\": \"%s\", \"ok\": %s, \"ndim\": %d, \"numel\": %lld, \"contiguous\": %s, \"sizes\": [",
              name, p.ok ? "true" : "false", p.ndim, static_cast<long long>(p.numel), p.contiguous ? "true" : "false");
  for (int d = 0; d < p.ndim; ++d) std::printf("%s%lld", d ? ", " : "", static_cast<long long>(p.sizes[d]));
  std::printf("], \"strides\": [");
  for (int k = 0; k < p.num_operands; ++k) {
    std::printf("%s[", k ? ", " : "");
    for (int d = 0; d < p.ndim; ++d) std::printf("%s%lld", d ? ", " : "", static_cast<long long>(p.strides[k][d]));
    std::printf("]");
  }
  std::printf("]}\n");
}

void print_blas(const char* name, int64_t rows, int64_t cols, int64_t sr, int64_t sc) {
  const flcuda::BlasOperand b = flcuda::blas_operand(rows, cols, sr, sc);
  std::printf("{\"case\": \"%s\", \"ok\": %s, \"transposed\": %s, \"ld\": %lld}\n", name, b.ok ? "true" : "false",
              b.transposed ? "true" : "false", static_cast<long long>(b.ld));
}

void print_row_major(const char* name, std::vector<int64_t> sizes, std::vector<int64_t> strides) {
  const bool dense = flcuda::is_row_major(sizes.data(), strides.data(), static_cast<int32_t>(sizes.size()));
  std::printf("{\"case\": \"%s\", \"row_major\": %s}\n", name, dense ? "true" : "false");
}

}  // namespace

int main() {
  // Dense [2, 3, 4] float32 to float32: one dim, contiguous.
  print_plan("dense", {{{2, 3, 4}, {12, 4, 1}, 4}, {{2, 3, 4}, {12, 4, 1}, 4}});
  // A bias [4] broadcast over [2, 3, 4]: dims 0 and 1 merge, stride 0 for the bias.
  print_plan("broadcast_bias", {{{2, 3, 4}, {12, 4, 1}, 4}, {{4}, {1}, 4}});
  // A transposed input [3, 2] (strides 1, 3) into a dense output.
  print_plan("transposed", {{{3, 2}, {2, 1}, 4}, {{3, 2}, {1, 3}, 4}});
  // channels_last output [2, 3, 4, 5] (NHWC strides): walked in memory order.
  print_plan("channels_last", {{{2, 3, 4, 5}, {60, 1, 15, 3}, 2}, {{2, 3, 4, 5}, {60, 1, 15, 3}, 2}});
  // Mixed itemsizes (float16 into float32): dense in elements, not bytes.
  print_plan("mixed_dtypes", {{{6}, {1}, 4}, {{6}, {1}, 2}});
  // A 0-dim scalar operand.
  print_plan("scalar_operand", {{{5}, {1}, 8}, {{}, {}, 8}});
  // An input that does not broadcast.
  print_plan("mismatch", {{{2, 3}, {3, 1}, 4}, {{2}, {1}, 4}});
  // An empty output.
  print_plan("empty", {{{0, 3}, {3, 1}, 4}, {{0, 3}, {3, 1}, 4}});
  // A sliced row view [2, 3] of a [2, 5] tensor: rows do not merge.
  print_plan("sliced", {{{2, 3}, {3, 1}, 4}, {{2, 3}, {5, 1}, 4}});

  print_row_major("dense_rows", {2, 3}, {3, 1});
  print_row_major("size1_any_stride", {4, 1}, {1, 7});  // PyTorch calls this contiguous
  print_row_major("transposed_rows", {2, 3}, {1, 2});
  print_row_major("empty_odd_strides", {5, 0}, {1, 1});  // the gradient of an empty mm
  print_row_major("padded_matrix", {2, 3}, {4, 1});

  print_blas("row_major", 3, 4, 4, 1);
  print_blas("col_major", 3, 4, 1, 3);
  print_blas("padded_rows", 3, 4, 8, 1);
  print_blas("vector_column", 5, 1, 1, 1);
  print_blas("strided_both", 3, 4, 8, 2);

  const int64_t w1 = flcuda::window_output_size(224, 7, 2, 3, 1, false);
  const int64_t w2 = flcuda::window_output_size(112, 3, 2, 1, 1, false);
  const int64_t w3 = flcuda::window_output_size(5, 2, 2, 0, 1, true);
  const int64_t w4 = flcuda::window_output_size(6, 3, 3, 1, 1, true);
  const int64_t w5 = flcuda::window_output_size(2, 5, 1, 0, 1, false);
  std::printf("{\"case\": \"windows\", \"values\": [%lld, %lld, %lld, %lld, %lld]}\n", static_cast<long long>(w1),
              static_cast<long long>(w2), static_cast<long long>(w3), static_cast<long long>(w4),
              static_cast<long long>(w5));
  return 0;
}
