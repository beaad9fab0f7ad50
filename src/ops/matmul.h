// Matrix products with (possibly quantized) weights: y = W x for every token.
//
// Weights stay in their file encoding. Two paths, chosen by the number of
// tokens because their costs scale differently:
//  - few tokens (decode): each weight row is dotted straight from its
//    quantized blocks with integer products against activations split into
//    int16 blocks of values and residuals (fp32-level accuracy; legacy quant
//    types, others are dequantized per row). Each weight block is read once
//    for all the tokens, and each token's result is the same bit for bit
//    whatever the other tokens are (matmul_per_token);
//  - many tokens (prefill): blocks of weight rows are dequantized to fp32
//    and multiplied with OpenBLAS sgemm, so each dequantized row is reused
//    by every token of the chunk and the step is bound by arithmetic.
#pragma once

#include <cstdint>
#include <string>

#include "quant/types.h"

namespace kascade::ops {

// A weight matrix of `rows` output features by `cols` input features, row-major,
// each row `row_bytes` bytes of `type` (GGUF dims are [cols, rows]).
struct Weight {
  std::string name;
  TensorType type = TensorType::F32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  uint64_t row_bytes = 0;

  const uint8_t* row(int64_t r) const { return data + uint64_t(r) * row_bytes; }
};

// out[t][r] = sum_c w[r][c] * in[t][c] for t < n_tokens; `in` is
// [n_tokens][w.cols], `out` is [n_tokens][w.rows]. Multithreaded (OpenMP).
void matmul(const Weight& w, const float* in, int64_t n_tokens, float* out);

// The few-token path at any number of tokens: out[t] is bit for bit what
// matmul gives for token t alone. For batched decode, whose results must not
// depend on the batch (matmul at kGemmMinTokens or more tokens takes sgemm,
// whose rounding does).
void matmul_per_token(const Weight& w, const float* in, int64_t n_tokens, float* out);

// Copies row `r` of `w` dequantized to fp32 (`out` has w.cols floats).
void dequantize_weight_row(const Weight& w, int64_t r, float* out);

// Tokens at or above which matmul takes the dequantize + sgemm path.
inline constexpr int64_t kGemmMinTokens = 16;

}  // namespace kascade::ops
