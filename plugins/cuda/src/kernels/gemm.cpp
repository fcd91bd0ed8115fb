// Matrix products through cuBLAS: mm, addmm, bmm. Operands are read in the
// layout they arrive in whenever cuBLAS can take it (row-major or
// column-major, e.g. the transposed weight of a linear layer, with any batch
// stride); anything else is first copied dense into workspace. Results are
// written dense (the descriptors declare TFL_KERNEL_CONTIGUOUS_OUTPUTS).
//
// cuBLAS is column-major: a row-major C = A B is computed as C^T = B^T A^T.
#include <climits>

#include "../cublas_loader.h"
#include "kernel_call.h"
#include "kernel_entry_points.h"
#include "tensor_ref.h"

namespace flcuda {

namespace {

// One batched matrix operand: rows x cols with element strides.
struct Matrix {
  const char* data;
  int64_t rows, cols;
  int64_t sr, sc, sb;  // row, column and batch strides in elements
};

cudaDataType_t cuda_type(int32_t dtype) {
  switch (dtype) {
    case TFL_DTYPE_FLOAT32: return CUDA_R_32F;
    case TFL_DTYPE_FLOAT16: return CUDA_R_16F;
    case TFL_DTYPE_BFLOAT16: return CUDA_R_16BF;
    case TFL_DTYPE_FLOAT64: return CUDA_R_64F;
    default: tfl::unimplemented("matrix products run float32, float16, bfloat16 and float64, got dtype ", dtype);
  }
}

void check_int(int64_t v, const char* what) {
  if (v > INT_MAX) tfl::unimplemented(what, " = ", v, " exceeds cuBLAS's 32-bit sizes");
}

// The operand as cuBLAS reads it, densified into workspace when needed.
struct BlasArg {
  const char* data;
  int op;
  int64_t ld, stride;
};

BlasArg blas_arg(const KernelCall& call, const Matrix& m, int64_t batch, int32_t dtype) {
  const BlasOperand b = blas_operand(m.rows, m.cols, m.sr, m.sc);
  if (b.ok) return {m.data, b.transposed ? kCublasOpN : kCublasOpT, b.ld, m.sb};
  // Dense row-major copy: [batch, rows, cols].
  const int64_t es = itemsize_of(dtype);
  char* dense = static_cast<char*>(call.workspace(static_cast<size_t>(batch * m.rows * m.cols * es)));
  TensorRef src;
  src.data = const_cast<char*>(m.data);
  src.dtype = dtype;
  src.ndim = 3;
  src.sizes[0] = batch, src.sizes[1] = m.rows, src.sizes[2] = m.cols;
  src.strides[0] = m.sb, src.strides[1] = m.sr, src.strides[2] = m.sc;
  copy_into(call.stream(), dense_ref(dense, dtype, {batch, m.rows, m.cols}), src);
  return {dense, kCublasOpN, std::max<int64_t>(1, m.cols), m.rows * m.cols};
}

// C[b] = alpha A[b] B[b] + beta C[b], C dense row-major [batch, M, N].
void gemm(const KernelCall& call, int32_t dtype, int64_t batch, const Matrix& A, const Matrix& B, char* C,
          double alpha, double beta) {
  const int64_t M = A.rows, K = A.cols, N = B.cols;
  if (B.rows != K) tfl::invalid_argument("inner dimensions differ: ", K, " and ", B.rows);
  if (batch == 0 || M == 0 || N == 0) return;
  check_int(M, "rows");
  check_int(N, "columns");
  check_int(K, "inner size");
  check_int(batch, "batch");
  const cudaDataType_t type = cuda_type(dtype);
  if (K == 0) {
    // Nothing to multiply: C = beta C (an addmm of empty matrices is beta * self).
    const TensorRef c = dense_ref(C, dtype, {batch, M, N});
    if (beta == 0.0) {
      fill_ref(call.stream(), c, 0.0);
    } else if (beta != 1.0) {
      scale_into(call.stream(), c, c, beta);
    }
    return;
  }
  const BlasArg a = blas_arg(call, A, batch, dtype);
  const BlasArg b = blas_arg(call, B, batch, dtype);
  check_int(a.ld, "leading dimension");
  check_int(b.ld, "leading dimension");
  const CublasApi& api = cublas();
  cublasHandle_t handle = cublas_handle(call.device(), call.stream());
  const bool f64 = dtype == TFL_DTYPE_FLOAT64;
  const int compute = f64 ? kCublasCompute64F
                          : (dtype == TFL_DTYPE_FLOAT32 && runtime().tf32 ? kCublasCompute32FTf32 : kCublasCompute32F);
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  const void* alpha_p = f64 ? static_cast<const void*>(&alpha) : static_cast<const void*>(&alpha_f);
  const void* beta_p = f64 ? static_cast<const void*>(&beta) : static_cast<const void*>(&beta_f);
  check_cublas(api.gemm_strided_batched(handle, b.op, a.op, static_cast<int>(N), static_cast<int>(M),
                                        static_cast<int>(K), alpha_p, b.data, type, static_cast<int>(b.ld), b.stride,
                                        a.data, type, static_cast<int>(a.ld), a.stride, beta_p, C, type,
                                        static_cast<int>(N), M * N, static_cast<int>(batch), compute,
                                        kCublasGemmDefault),
               "cublasGemmStridedBatchedEx");
}

Matrix matrix2d(const TFL_Tensor* t, const char* what) {
  if (t->ndim != 2) tfl::invalid_argument(what, " must be 2-D, got ", t->ndim, " dimensions");
  return {static_cast<const char*>(t->data), t->sizes[0], t->sizes[1], t->strides[0], t->strides[1], 0};
}

Matrix matrix3d(const TFL_Tensor* t, const char* what) {
  if (t->ndim != 3) tfl::invalid_argument(what, " must be 3-D, got ", t->ndim, " dimensions");
  return {static_cast<const char*>(t->data), t->sizes[1], t->sizes[2], t->strides[1], t->strides[2], t->strides[0]};
}

void check_dense_output(const TFL_Tensor* out) {
  if (!is_row_major(out->sizes, out->strides, out->ndim))
    tfl::invalid_argument("the output must be dense row-major (the kernel declares CONTIGUOUS_OUTPUTS)");
}

}  // namespace

// aten::mm(Tensor self, Tensor mat2) -> Tensor
TFL_Error* kernel_mm(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::mm", [&](KernelCall& call) {
    const TFL_Tensor* a = call.tensor(0, "self");
    const TFL_Tensor* b = call.tensor(1, "mat2");
    const TFL_Tensor* out = call.required_output(0);
    check_dense_output(out);
    gemm(call, out->dtype, 1, matrix2d(a, "self"), matrix2d(b, "mat2"), static_cast<char*>(out->data), 1.0, 0.0);
  });
}

// aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor
TFL_Error* kernel_addmm(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::addmm", [&](KernelCall& call) {
    const TFL_Tensor* self = call.tensor(0, "self");
    const TFL_Tensor* a = call.tensor(1, "mat1");
    const TFL_Tensor* b = call.tensor(2, "mat2");
    const double beta = call.real_or(3, 1.0, "beta");
    const double alpha = call.real_or(4, 1.0, "alpha");
    const TFL_Tensor* out = call.required_output(0);
    check_dense_output(out);
    if (self->memory_kind != TFL_MEMORY_DEVICE) tfl::unimplemented("self must be in device memory");
    // out = self (broadcast), then out = alpha a b + beta out. With beta 0,
    // self is ignored (NaNs in it do not propagate), as PyTorch does.
    if (beta != 0.0 && self->data != out->data) copy_into(call.stream(), ref_of(out), ref_of(self));
    gemm(call, out->dtype, 1, matrix2d(a, "mat1"), matrix2d(b, "mat2"), static_cast<char*>(out->data), alpha, beta);
  });
}

// aten::bmm(Tensor self, Tensor mat2) -> Tensor
TFL_Error* kernel_bmm(const TFL_Kernel_Args* args) {
  return run_kernel(args, "aten::bmm", [&](KernelCall& call) {
    const TFL_Tensor* a = call.tensor(0, "self");
    const TFL_Tensor* b = call.tensor(1, "mat2");
    const TFL_Tensor* out = call.required_output(0);
    check_dense_output(out);
    if (a->ndim != 3 || b->ndim != 3 || a->sizes[0] != b->sizes[0])
      tfl::invalid_argument("bmm takes two 3-D tensors with the same batch size");
    gemm(call, out->dtype, a->sizes[0], matrix3d(a, "self"), matrix3d(b, "mat2"), static_cast<char*>(out->data), 1.0,
         0.0);
  });
}

// Used by the convolution: out[b] (dense [M, N]) = A[b] B[b] with the given
// strides (see conv_pool.cu).
void gemm_for_conv(const KernelCall& call, int32_t dtype, int64_t batch, const char* a, int64_t M, int64_t K,
                   int64_t a_sr, int64_t a_sc, int64_t a_sb, const char* b, int64_t N, int64_t b_sr, int64_t b_sc,
                   int64_t b_sb, char* c, double beta) {
  gemm(call, dtype, batch, Matrix{a, M, K, a_sr, a_sc, a_sb}, Matrix{b, K, N, b_sr, b_sc, b_sb}, c, 1.0, beta);
}

}  // namespace flcuda
