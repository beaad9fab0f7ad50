#include "gpu/gemm.h"

#include <cublas_v2.h>

#include "core/error.h"
#include "gpu/ops.h"

namespace kascade::gpu {
namespace {

void check_blas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) fail("cublas: {} failed: {}", what, cublasGetStatusString(status));
}

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

}  // namespace

Blas::Blas() : workspace_(kWorkspaceBytes, "the cuBLAS workspace") {
  check_blas(cublasCreate(&handle_), "cublasCreate");
  check_blas(cublasSetWorkspace(handle_, workspace_.data(), workspace_.bytes()), "cublasSetWorkspace");
}

Blas::~Blas() {
  if (handle_) cublasDestroy(handle_);
}

void Blas::matmul(const Matrix& w, const uint16_t* x, int64_t n, float* out, float beta, cudaStream_t stream) {
  // Decode's few rows: the weight-streaming kernel reads the matrix once at
  // nearly full bandwidth, where cuBLAS leaves about a quarter unused.
  if (n <= kMaxGemvRows && w.cols % 8 == 0) return gemv(w.data, w.rows, w.cols, x, false, int(n), out, beta, stream);
  // Column-major view: out^T [rows x n] = w (stored [rows][cols], so op T of a
  // cols x rows matrix) times x^T [cols x n].
  const float alpha = 1.0f;
  check_blas(cublasSetStream(handle_, stream), "cublasSetStream");
  check_blas(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, int(w.rows), int(n), int(w.cols), &alpha, w.data,
                          CUDA_R_16BF, int(w.cols), x, CUDA_R_16BF, int(w.cols), &beta, out, CUDA_R_32F, int(w.rows),
                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
             "cublasGemmEx");
}

}  // namespace kascade::gpu
