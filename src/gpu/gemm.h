// Weight products on the GPU: bf16 (or fp16) activations times a weight
// matrix (gpu/matrix.h), fp32 accumulation and output, optionally
// accumulated into the output (the residual stream), so a projection and its
// residual add are one call. Decode's few rows stream the weights through
// gpu::gemv in their stored format; more rows go through cuBLAS in bf16, a
// quantized matrix dequantized a slice of rows at a time into a bounded
// buffer.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>

#include "gpu/device.h"
#include "gpu/matrix.h"

struct cublasContext;

namespace kascade::gpu {

class Blas {
 public:
  // For quantized matrices (none: zeros): the buffer they are dequantized
  // into for cuBLAS, and their widest row, for the buffer gemv's inputs are
  // quantized into.
  explicit Blas(size_t dequantize_bytes = 0, int64_t quantized_cols = 0);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // out[t][r] = sum_c w[r][c] * x[t][c] + beta * out[t][r] for t < n, w the
  // runs of a stack (gpu/matrix.h, upload_stack) stacked by rows, or one
  // matrix; x bf16, or fp16 with half_input (converted into `converted`,
  // n * cols values, when a run's product goes through cuBLAS).
  void matmul(std::span<const Matrix> runs, const uint16_t* x, int64_t n, float* out, float beta,
              cudaStream_t stream, bool half_input = false, uint16_t* converted = nullptr);
  void matmul(const Matrix& w, const uint16_t* x, int64_t n, float* out, float beta, cudaStream_t stream,
              bool half_input = false, uint16_t* converted = nullptr) {
    matmul(std::span(&w, 1), x, n, out, beta, stream, half_input, converted);
  }

  // Whether matmul(runs, x, n, ...) runs every run as a quantized
  // matrix-vector product. Its input is then quantized_input(), which a step
  // may write directly (gpu/ops.h's *_quantized) and hand to
  // matmul_quantized: one kernel fewer than matmul's quantize-then-multiply.
  bool takes_quantized_input(std::span<const Matrix> runs, int64_t n) const;
  bool takes_quantized_input(const Matrix& w, int64_t n) const { return takes_quantized_input(std::span(&w, 1), n); }
  QuantizedRows quantized_input() const;
  // out = the runs times the n rows in quantized_input(), plus beta * out.
  void matmul_quantized(std::span<const Matrix> runs, int64_t n, float* out, float beta, cudaStream_t stream);
  void matmul_quantized(const Matrix& w, int64_t n, float* out, float beta, cudaStream_t stream) {
    matmul_quantized(std::span(&w, 1), n, out, beta, stream);
  }

  size_t workspace_bytes() const { return workspace_.bytes() + dequantized_.bytes() + quantized_input_.bytes(); }

 private:
  // One run through cuBLAS: x bf16, out [n][ldc].
  void cublas_product(const Matrix& w, const uint16_t* x, int64_t n, float* out, int64_t ldc, float beta,
                      cudaStream_t stream);
  void gemm(const uint16_t* w, int64_t rows, int64_t cols, const uint16_t* x, int64_t n, float* out, int64_t ldc,
            float beta, cudaStream_t stream);

  cublasContext* handle_ = nullptr;
  DeviceMemory workspace_;    // cuBLAS's, given up front so that no product allocates
  DeviceMemory dequantized_;      // bf16 rows of a quantized matrix
  int64_t quantized_cols_ = 0;
  DeviceMemory quantized_input_;  // gemv's input rows in int8, then their scales
};

}  // namespace kascade::gpu
