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

// The scalar reference for the same conversion.
void dequantize_blocks_scalar(TensorType type, const uint8_t* src, float* dst, int64_t n_blocks);

}  // namespace kascade::quant
