// cuBLAS, opened with dlopen: the plugin links no cuBLAS, so the library
// loads on a machine without it, and a missing cuBLAS is a clear error at
// the first matrix product rather than an undefined symbol at load time.
//
// Looked for, in order: $FLCUDA_CUBLAS_LIBRARY (a path), libcublas.so.13
// (found already loaded, e.g. by a CUDA build of torch, or through the
// loader's search path), libcublas.so.
//
// Only the few entry points the GEMM kernels use are declared here, with the
// values of cublas_api.h (tests/cuda_plugin checks them against that header
// where it is installed).
#pragma once

#include <cuda_runtime_api.h>
#include <library_types.h>

#include <string>

namespace flcuda {

using cublasHandle_t = struct cublasContext*;
using cublasStatus_t = int;
constexpr int kCublasOpN = 0;             // CUBLAS_OP_N
constexpr int kCublasOpT = 1;             // CUBLAS_OP_T
constexpr int kCublasCompute32F = 68;     // CUBLAS_COMPUTE_32F
constexpr int kCublasCompute32FTf32 = 77; // CUBLAS_COMPUTE_32F_FAST_TF32
constexpr int kCublasCompute64F = 70;     // CUBLAS_COMPUTE_64F
constexpr int kCublasGemmDefault = -1;    // CUBLAS_GEMM_DEFAULT

struct CublasApi {
  cublasStatus_t (*create)(cublasHandle_t*);
  cublasStatus_t (*destroy)(cublasHandle_t);
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
  // cublasGemmStridedBatchedEx
  cublasStatus_t (*gemm_strided_batched)(cublasHandle_t, int transa, int transb, int m, int n, int k,
                                         const void* alpha, const void* A, cudaDataType_t Atype, int lda,
                                         long long strideA, const void* B, cudaDataType_t Btype, int ldb,
                                         long long strideB, const void* beta, void* C, cudaDataType_t Ctype,
                                         int ldc, long long strideC, int batchCount, int computeType, int algo);
  const char* (*status_string)(cublasStatus_t);
  std::string library;  // where it came from
};

// Opens cuBLAS once; returns "" on success or why it could not.
std::string cublas_open();
// The loaded API; throws TFL_ERR_UNAVAILABLE naming what was tried.
const CublasApi& cublas();
// This thread's handle for `device` (current), bound to `stream`.
cublasHandle_t cublas_handle(int32_t device, cudaStream_t stream);
// Throws TFL_ERR_DEVICE naming `what` unless status is success.
void check_cublas(cublasStatus_t status, const char* what);
void cublas_release_all();

}  // namespace flcuda
