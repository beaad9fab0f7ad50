// Weight products on the GPU: bf16 activations times bf16 weights, fp32
// accumulation and output, optionally accumulated into the output (the
// residual stream), so a projection and its residual add are one call.
// Up to gpu::kMaxGemvRows rows (decode) stream the weights through
// gpu::gemv; more rows go through cuBLAS.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/device.h"

struct cublasContext;

namespace kascade::gpu {

// A weight matrix on the device: `rows` output features of `cols` inputs, bf16, row-major.
struct Matrix {
  const uint16_t* data = nullptr;
  int64_t rows = 0, cols = 0;
};

class Blas {
 public:
  Blas();
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // out[t][r] = sum_c w[r][c] * x[t][c] + beta * out[t][r] for t < n.
  void matmul(const Matrix& w, const uint16_t* x, int64_t n, float* out, float beta, cudaStream_t stream);

 private:
  cublasContext* handle_ = nullptr;
  DeviceMemory workspace_;  // cuBLAS's, given up front so that no product allocates
};

}  // namespace kascade::gpu
