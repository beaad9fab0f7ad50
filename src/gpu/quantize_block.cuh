// The int8 form of the quantized products' input rows (gpu/matrix.h,
// GemvInput), for every kernel that writes such rows: per 32 values a scale
// d = max|v| / 127 and the values round(v / d). One definition, so that a
// step fused with the quantization gives the bits of the two-step path.
#pragma once

#include <cstdint>

#include "gpu/matrix.h"

namespace kascade::gpu {

// A 32-value block held by 32 / kValues consecutive lanes, kValues each
// (blocks aligned to those lane groups). Every lane of the warp must call
// (the maximum travels by shuffles); lanes outside the data pass zeros.
// Returns the block's scale; `packed` gets the lane's int8 values, four to a word.
template <int kValues>
__device__ __forceinline__ float quantize_block(const float (&v)[kValues], uint32_t (&packed)[kValues / 4]) {
  float largest = 0;
#pragma unroll
  for (int k = 0; k < kValues; ++k) largest = fmaxf(largest, fabsf(v[k]));
#pragma unroll
  for (int offset = 1; offset < 32 / kValues; offset <<= 1)
    largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
  const float d = largest / 127.0f, inverse = d > 0 ? 1.0f / d : 0.0f;
#pragma unroll
  for (int w = 0; w < kValues / 4; ++w) {
    packed[w] = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k)
      packed[w] |= uint32_t(uint8_t(int8_t(__float2int_rn(v[4 * w + k] * inverse)))) << (8 * k);
  }
  return d;
}

// Group i of rows quantized 8 values a thread (four threads a block, every
// lane of the warp calling): the values quantized and, when `active`, written
// to `out` with the block's scale.
__device__ __forceinline__ void write_quantized_group(const float (&v)[8], bool active, int64_t i,
                                                      QuantizedRows out) {
  uint32_t words[2];
  const float d = quantize_block<8>(v, words);
  if (!active) return;
  reinterpret_cast<uint2*>(out.quants)[i] = make_uint2(words[0], words[1]);
  if ((i & 3) == 0) out.scales[i / 4] = d;
}

}  // namespace kascade::gpu
