#include "gpu/gemm.h"

#include <cublas_v2.h>

#include <algorithm>

#include "core/error.h"
#include "gpu/ops.h"

namespace kascade::gpu {
namespace {

void check_blas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) fail("cublas: {} failed: {}", what, cublasGetStatusString(status));
}

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

}  // namespace

Blas::Blas(size_t dequantize_bytes, int64_t quantized_cols)
    : workspace_(kWorkspaceBytes, "the cuBLAS workspace"), quantized_cols_(quantized_cols) {
  if (dequantize_bytes > 0) dequantized_ = DeviceMemory(dequantize_bytes, "the dequantized-weights buffer");
  if (quantized_cols > 0)
    quantized_input_ = DeviceMemory(size_t(kMaxQuantizedGemvRows * quantized_cols) * (1 + sizeof(float)),
                                    "the quantized-input buffer");
  check_blas(cublasCreate(&handle_), "cublasCreate");
  check_blas(cublasSetWorkspace(handle_, workspace_.data(), workspace_.bytes()), "cublasSetWorkspace");
}

Blas::~Blas() {
  if (handle_) cublasDestroy(handle_);
}

namespace {

int64_t stacked_rows(std::span<const Matrix> runs) {
  int64_t rows = 0;
  for (const Matrix& w : runs) rows += w.rows;
  return rows;
}

}  // namespace

void Blas::matmul(std::span<const Matrix> runs, const uint16_t* x, int64_t n, float* out, float beta,
                  cudaStream_t stream, bool half_input, uint16_t* converted) {
  const int64_t ldc = stacked_rows(runs);
  bool quantized = false;                            // x quantized into quantized_input() yet
  const uint16_t* bf16_x = half_input ? nullptr : x;  // x as cuBLAS takes it, once needed
  int64_t first = 0;
  for (const Matrix& w : runs) {
    float* run_out = out + first;
    first += w.rows;
    // Decode's few rows: the weight-streaming kernels read the matrix once per
    // group of rows at nearly full bandwidth, where cuBLAS leaves about a
    // quarter unused.
    if (n <= max_gemv_rows(w)) {
      if (w.format == MatrixFormat::BF16) {
        gemv(w, {.x = x, .half = half_input}, n, run_out, ldc, beta, stream);
        continue;
      }
      if (w.cols > quantized_cols_) fail("Blas::matmul: no buffer for {} quantized input columns", w.cols);
      if (!quantized) quantize_rows(x, half_input, n, w.cols, quantized_input(), stream);
      quantized = true;
      const QuantizedRows input = quantized_input();
      gemv(w, {.quants = input.quants, .scales = input.scales}, n, run_out, ldc, beta, stream);
      continue;
    }
    if (!bf16_x) {
      if (!converted) fail("Blas::matmul: an fp16 input of {} rows needs a conversion buffer", n);
      half_to_bfloat(x, n * w.cols, converted, stream);
      bf16_x = converted;
    }
    cublas_product(w, bf16_x, n, run_out, ldc, beta, stream);
  }
}

void Blas::cublas_product(const Matrix& w, const uint16_t* x, int64_t n, float* out, int64_t ldc, float beta,
                          cudaStream_t stream) {
  if (w.format == MatrixFormat::BF16)
    return gemm(reinterpret_cast<const uint16_t*>(w.data), w.rows, w.cols, x, n, out, ldc, beta, stream);
  const int64_t slice = int64_t(dequantized_.bytes() / (2 * size_t(w.cols)));
  if (slice < 1) fail("Blas::matmul: no buffer to dequantize a {} x {} matrix into", w.rows, w.cols);
  auto* rows = dequantized_.as<uint16_t>();
  for (int64_t first = 0; first < w.rows; first += slice) {
    const int64_t count = std::min(slice, w.rows - first);
    dequantize_rows(w, first, count, rows, stream);
    gemm(rows, count, w.cols, x, n, out + first, ldc, beta, stream);
  }
}

bool Blas::takes_quantized_input(std::span<const Matrix> runs, int64_t n) const {
  for (const Matrix& w : runs)
    if (w.format == MatrixFormat::BF16 || n > max_gemv_rows(w) || w.cols > quantized_cols_) return false;
  return true;
}

QuantizedRows Blas::quantized_input() const {
  auto* quants = quantized_input_.as<int8_t>();
  return {quants, reinterpret_cast<float*>(quants + kMaxQuantizedGemvRows * quantized_cols_)};
}

void Blas::matmul_quantized(std::span<const Matrix> runs, int64_t n, float* out, float beta, cudaStream_t stream) {
  if (!takes_quantized_input(runs, n))
    fail("Blas::matmul_quantized: a stack of {} rows at {} input rows takes no quantized input", stacked_rows(runs), n);
  const QuantizedRows input = quantized_input();
  const int64_t ldc = stacked_rows(runs);
  int64_t first = 0;
  for (const Matrix& w : runs) {
    gemv(w, {.quants = input.quants, .scales = input.scales}, n, out + first, ldc, beta, stream);
    first += w.rows;
  }
}

// out (ldc apart per input row) = w [rows][cols] times x [n][cols], plus beta * out.
void Blas::gemm(const uint16_t* w, int64_t rows, int64_t cols, const uint16_t* x, int64_t n, float* out, int64_t ldc,
                float beta, cudaStream_t stream) {
  // Column-major view: out^T [rows x n] = w (stored [rows][cols], so op T of a
  // cols x rows matrix) times x^T [cols x n].
  const float alpha = 1.0f;
  check_blas(cublasSetStream(handle_, stream), "cublasSetStream");
  check_blas(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, int(rows), int(n), int(cols), &alpha, w, CUDA_R_16BF,
                          int(cols), x, CUDA_R_16BF, int(cols), &beta, out, CUDA_R_32F, int(ldc), CUBLAS_COMPUTE_32F,
                          CUBLAS_GEMM_DEFAULT),
             "cublasGemmEx");
}

}  // namespace kascade::gpu
