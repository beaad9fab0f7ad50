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

void Blas::matmul(const Matrix& w, const uint16_t* x, int64_t n, float* out, float beta, cudaStream_t stream,
                  bool half_input, uint16_t* converted) {
  // Decode's few rows: the weight-streaming kernel reads the matrix once per
  // group of rows at nearly full bandwidth, where cuBLAS leaves about a
  // quarter unused.
  if (n <= max_gemv_rows(w)) {
    if (w.format == MatrixFormat::BF16) return gemv(w, {.x = x, .half = half_input}, n, out, beta, stream);
    if (w.cols > quantized_cols_) fail("Blas::matmul: no buffer for {} quantized input columns", w.cols);
    quantize_rows(x, half_input, n, w.cols, quantized_input(), stream);
    return matmul_quantized(w, n, out, beta, stream);
  }
  if (half_input) {
    if (!converted) fail("Blas::matmul: an fp16 input of {} rows needs a conversion buffer", n);
    half_to_bfloat(x, n * w.cols, converted, stream);
    x = converted;
  }
  if (w.format == MatrixFormat::BF16)
    return gemm(reinterpret_cast<const uint16_t*>(w.data), w.rows, w.cols, x, n, out, w.rows, beta, stream);
  const int64_t slice = int64_t(dequantized_.bytes() / (2 * size_t(w.cols)));
  if (slice < 1) fail("Blas::matmul: no buffer to dequantize a {} x {} matrix into", w.rows, w.cols);
  auto* rows = dequantized_.as<uint16_t>();
  for (int64_t first = 0; first < w.rows; first += slice) {
    const int64_t count = std::min(slice, w.rows - first);
    dequantize_rows(w, first, count, rows, stream);
    gemm(rows, count, w.cols, x, n, out + first, w.rows, beta, stream);
  }
}

QuantizedRows Blas::quantized_input() const {
  auto* quants = quantized_input_.as<int8_t>();
  return {quants, reinterpret_cast<float*>(quants + kMaxQuantizedGemvRows * quantized_cols_)};
}

void Blas::matmul_quantized(const Matrix& w, int64_t n, float* out, float beta, cudaStream_t stream) {
  if (!takes_quantized_input(w, n))
    fail("Blas::matmul_quantized: a {} x {} matrix at {} rows takes no quantized input", w.rows, w.cols, n);
  const QuantizedRows input = quantized_input();
  gemv(w, {.quants = input.quants, .scales = input.scales}, n, out, beta, stream);
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
