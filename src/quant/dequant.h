// Block dequantization kernels behind dequantize_row. Two versions per type:
// a scalar one written straight from the ggml block layout (the reference),
// and the one dequantize_row runs, which uses AVX2/F16C for the common types
// when the build targets them. Tests hold the two against each other.
#pragma once

#include <cstdint>

#include "quant/types.h"

namespace kascade::quant {

// Converts `n_blocks` whole blocks of `type` at `src` to fp32 at `dst`.
// Throws Error for a type that cannot be dequantized; does no other checks.
void dequantize_blocks(TensorType type, const uint8_t* src, float* dst, int64_t n_blocks);

// Q4_K and Q5_K's 8 six-bit scales and mins of a 256-value block (the 12
// bytes after d and dmin): d * scale and dmin * min of each 32-value sub-block.
void unpack_k_scales(const uint8_t* packed, float d, float dmin, float* scales, float* mins);

// The scalar reference for the same conversion.
void dequantize_blocks_scalar(TensorType type, const uint8_t* src, float* dst, int64_t n_blocks);

}  // namespace kascade::quant
