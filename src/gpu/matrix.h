// Weight matrices on the GPU and the kernels that read them.
//
// A matrix keeps the file's encoding where the GPU has a kernel for it, so
// that decode streams as few bytes as the file holds: Q8_0, Q4_K and Q6_K
// stay quantized (an 8B model in Q4_K takes ~5 GB, not 16; a Q4_K_M file's
// Q6_K output and down projections stay 6.6 bits a weight). Q4_0 and Q5_0,
// whose values are d x (a small integer) per 32 as Q8_0's, are widened into
// the Q8_0 layout without loss (8.5 bits a weight, not bf16's 16), Q4_1 and
// Q5_1 (d q + m) into Q8_0M (9 bits); Q5_K stays as it is (5.5 bits). Every
// other type (F16, F32) is converted to bf16 at load. Device layouts, `rows` x
// `cols`, row-major:
//   BF16  bf16 [rows][cols]
//   Q8_0  int8 [rows][cols], then fp16 scales [rows][cols / 32]: the file's
//         34-byte blocks split so that every load is 16-byte aligned (Q4_0's
//         nibble - 8 and Q5_0's 5-bit value - 16 as the int8s, d as the scale)
//   Q8_0M Q8_0's layout, then fp16 offsets m [rows][cols / 32]: value = d q + m
//         (Q4_1's nibble and Q5_1's 5-bit value as the int8s)
//   Q4_K  the file's 144-byte blocks [rows][cols / 256], as they are (9 x 16 bytes)
//   Q5_K  the file's 176-byte blocks [rows][cols / 256], as they are (11 x 16
//         bytes: Q4_K's header, 32 bytes of fifth bits, 128 of nibbles)
//   Q6_K  the file's 210-byte blocks split the same way: their first 208 bytes
//         (low nibbles, high bits, the 16 scales: 13 x 16 bytes) [rows][cols /
//         256], then the fp16 d of each block [rows][cols / 256]
// Values are the CPU's (quant/dequant.h) to the last bit where dequantized.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "gpu/device.h"
#include "ops/matmul.h"

namespace kascade::gpu {

enum class MatrixFormat { BF16, Q8_0, Q8_0M, Q4_K, Q5_K, Q6_K };

struct Matrix {
  MatrixFormat format = MatrixFormat::BF16;
  const uint8_t* data = nullptr;
  int64_t rows = 0, cols = 0;
};

inline Matrix bf16_matrix(const uint16_t* data, int64_t rows, int64_t cols) {
  return {MatrixFormat::BF16, reinterpret_cast<const uint8_t*>(data), rows, cols};
}

// ---------------------------------------------------------------------------
// Host side: from the file's tensors to the device layout.

using WeightParts = std::vector<const ops::Weight*>;

// The format the parts are kept in when stacked in one matrix (rows of the
// first, then the next, ...): Q8_0, Q4_K or Q6_K when every part has that
// type, else BF16.
MatrixFormat device_format(const WeightParts& parts);
// Rows of the parts stacked; throws Error when their column counts differ.
int64_t stacked_rows(const WeightParts& parts);
uint64_t device_bytes(MatrixFormat format, int64_t rows, int64_t cols);
// The parts stacked, in the device layout of `format`.
std::vector<uint8_t> pack_rows(MatrixFormat format, const WeightParts& parts);

struct DeviceMatrix {
  DeviceMemory memory;
  Matrix view;
};
DeviceMatrix upload_matrix(const WeightParts& parts, const char* what);

// A stack whose parts the device keeps in different formats (a Q4_K_M file's
// Q/K/V with a Q6_K V) is not widened: it is split into runs of consecutive
// parts of one device format, each a matrix giving its rows of the product
// (Blas::matmul takes the runs' views). One run when the formats agree.
std::vector<WeightParts> format_runs(const WeightParts& parts);
uint64_t stack_device_bytes(const WeightParts& parts);
struct DeviceStack {
  std::vector<DeviceMemory> memory;
  std::vector<Matrix> runs;
};
DeviceStack upload_stack(const WeightParts& parts, const char* what);

// ---------------------------------------------------------------------------
// Kernels. x and out are [n][cols] and [n][rows] (gemv: [n][ldc]); x is
// bf16, or fp16 with half_input.

// Rows a call of gemv takes: decode's batches (and short prefill chunks). A
// BF16 matrix is read once per kGemvGroup rows; a quantized one once for
// all its rows, up to kMaxQuantizedGemvRows, beyond which
// dequantize-then-cuBLAS (gemm.h) costs less.
inline constexpr int kGemvGroup = 8;
inline constexpr int kMaxQuantizedGemvRows = 64;
inline int64_t max_gemv_rows(const Matrix& w) {
  return w.format == MatrixFormat::BF16 ? kGemvGroup : kMaxQuantizedGemvRows;
}
// Rows from which a quantized product runs on the tensor cores; fewer go
// through the integer dot-product kernel, one warp per weight row. Where the
// two cross on the H200 (synthetic Qwen2.5-1.5B, 1K context, whole decode
// steps): Q4_K at 3 rows, Q6_K about 5, Q8_0 about 8 (unmeasured: Q5_K as Q4_K, Q8_0M as Q8_0).
constexpr int mmq_from(MatrixFormat format) {
  return format == MatrixFormat::Q8_0 || format == MatrixFormat::Q8_0M ? 8 : format == MatrixFormat::Q6_K ? 5 : 3;
}
inline constexpr int kMaxMmqFrom = mmq_from(MatrixFormat::Q8_0);  // the largest

// The input rows of gemv, [n][cols]: bf16 (or fp16 with half) for a BF16
// matrix; for a quantized one, quantized by quantize_rows: per 32 values an
// fp32 scale d = max|x| / 127 and int8 round(x / d), so that the products
// run on integer dot products (4 multiply-adds an instruction) and stay
// bound by the weights' bytes at a batch of 8, not by arithmetic.
struct GemvInput {
  const uint16_t* x = nullptr;
  bool half = false;
  const int8_t* quants = nullptr;  // [n][cols]
  const float* scales = nullptr;   // [n][cols / 32]
};
struct QuantizedRows {  // where such rows are written
  int8_t* quants = nullptr;  // [n][cols]
  float* scales = nullptr;   // [n][cols / 32]
};
void quantize_rows(const uint16_t* x, bool half_input, int64_t n, int64_t cols, QuantizedRows out,
                   cudaStream_t stream);

// out[t * ldc + r] = sum_c w[r][c] * x[t][c] + beta * out[t * ldc + r] for
// t < n <= max_gemv_rows(w) (ldc >= w.rows: the rows of a stack's run),
// fp32 accumulation. A BF16 matrix, or a quantized one at
// fewer than mmq_from rows: one warp per weight row streams the row once per
// kGemvGroup input rows (quantized: exact integer dots of each 16-value run,
// __dp4a). A quantized matrix at mmq_from rows or more: integer tensor-core
// products of 16 weight rows with all the input rows at once (mma.sync),
// each block's exact dot scaled into fp32. cols a multiple of 32.
void gemv(const Matrix& w, const GemvInput& x, int64_t n, float* out, int64_t ldc, float beta, cudaStream_t stream);

// out = bf16 of rows [first, first + count) of w (bf16 [count][cols]).
void dequantize_rows(const Matrix& w, int64_t first, int64_t count, uint16_t* out, cudaStream_t stream);

// x[t][c] = float(table[rows[t]][c]) * scale for t < n: embedding rows into
// the fp32 residual stream.
void gather_rows(const Matrix& table, const int32_t* rows, int n, float scale, float* x, cudaStream_t stream);

}  // namespace kascade::gpu
