#include "attention/key_sketch.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"

namespace kascade::attention {
namespace {

float element(const float* p) { return *p; }
float element(const uint16_t* p) { return fp16_to_fp32(*p); }
float to_fp16_value(float x) { return fp16_to_fp32(fp32_to_fp16(x)); }

}  // namespace

template <typename T>
void sketch_block(kernels::Rows<T> keys, int d, float* lo, float* step, uint8_t* codes) {
  for (int c = 0; c < d; ++c) {
    float low = element(keys.row(0) + c), high = low;
    for (int64_t j = 1; j < kSketchBlock; ++j) {
      const float x = element(keys.row(j) + c);
      low = std::min(low, x);
      high = std::max(high, x);
    }
    lo[c] = to_fp16_value(low);
    step[c] = to_fp16_value((high - lo[c]) / 15.0f);
  }
  const auto code = [&](const T* key, int c) {
    const float q = step[c] > 0 ? std::nearbyint((element(key + c) - lo[c]) / step[c]) : 0.0f;
    return unsigned(std::clamp(q, 0.0f, 15.0f));
  };
  for (int64_t j = 0; j < kSketchBlock; ++j)
    for (int c = 0; c < d; c += 2)
      codes[j * d / 2 + c / 2] = uint8_t(code(keys.row(j), c) | code(keys.row(j), c + 1) << 4);
}

template void sketch_block<float>(kernels::Rows<float>, int, float*, float*, uint8_t*);
template void sketch_block<uint16_t>(kernels::Rows<uint16_t>, int, float*, float*, uint8_t*);

void dequantize_sketch_row(const SketchBlock& block, int d, int64_t row, float* out) {
  for (int c = 0; c < d; ++c) {
    const int code = (block.codes[row * d / 2 + c / 2] >> (4 * (c & 1))) & 15;
    out[c] = block.lo[c] + float(code) * block.step[c];
  }
}

template <typename T>
void KeySketch::extend(std::span<const kernels::Rows<T>> keys, int64_t n_keys) {
  const int64_t wanted = sketched_end(n_keys) / kSketchBlock;
  if (wanted <= n_blocks_) return;
  lo_.resize(size_t(n_kv_heads_));
  step_.resize(size_t(n_kv_heads_));
  codes_.resize(size_t(n_kv_heads_));
  for (int h = 0; h < n_kv_heads_; ++h) {
    lo_[size_t(h)].resize(size_t(wanted * d_));
    step_[size_t(h)].resize(size_t(wanted * d_));
    codes_[size_t(h)].resize(size_t(wanted * kSketchBlock * d_ / 2));
  }
#pragma omp parallel for collapse(2) schedule(static) if ((wanted - n_blocks_) * n_kv_heads_ > 4)
  for (int h = 0; h < n_kv_heads_; ++h)
    for (int64_t b = n_blocks_; b < wanted; ++b) {
      const kernels::Rows<T>& head = keys[size_t(h)];
      sketch_block(kernels::Rows<T>{head.row(b * kSketchBlock), head.stride}, d_, lo_[size_t(h)].data() + b * d_,
                   step_[size_t(h)].data() + b * d_, codes_[size_t(h)].data() + b * kSketchBlock * d_ / 2);
    }
  n_blocks_ = wanted;
}

template void KeySketch::extend<float>(std::span<const kernels::Rows<float>>, int64_t);
template void KeySketch::extend<uint16_t>(std::span<const kernels::Rows<uint16_t>>, int64_t);

SketchBlock KeySketch::block(int kv_head, int64_t b) const {
  return {lo_[size_t(kv_head)].data() + b * d_, step_[size_t(kv_head)].data() + b * d_,
          codes_[size_t(kv_head)].data() + b * kSketchBlock * d_ / 2};
}

// Per block: s = q.lo + sum_c (q_c step_c) code_c, the codes of 8 channels
// (4 bytes) widened to floats once per key and shared by every row.
void KeySketch::dot_rows(const float* q, int64_t n_rows, int h, int64_t first, int64_t count, float* s,
                         int64_t lds) const {
  const int d = d_;
  std::vector<float> scaled(static_cast<size_t>(n_rows * d)), bias(static_cast<size_t>(n_rows));
  const __m128i nibble = _mm_set1_epi8(0x0f);
  for (int64_t b = first / kSketchBlock; b * kSketchBlock < first + count; ++b) {
    const SketchBlock blk = block(h, b);
    for (int64_t r = 0; r < n_rows; ++r) {
      float sum = 0;
      for (int c = 0; c < d; ++c) {
        scaled[size_t(r * d + c)] = q[r * d + c] * blk.step[c];
        sum += q[r * d + c] * blk.lo[c];
      }
      bias[size_t(r)] = sum;
    }
    const int64_t j0 = std::max(first, b * kSketchBlock), j1 = std::min(first + count, (b + 1) * kSketchBlock);
    for (int64_t j = j0; j < j1; ++j) {
      const uint8_t* codes = blk.codes + (j - b * kSketchBlock) * d / 2;
      __m256 acc[kernels::kMaxRows];
      for (int64_t r0 = 0; r0 < n_rows; r0 += kernels::kMaxRows) {
        const int64_t rows = std::min<int64_t>(kernels::kMaxRows, n_rows - r0);
        for (int64_t r = 0; r < rows; ++r) acc[r] = _mm256_setzero_ps();
        for (int c = 0; c < d; c += 8) {
          int32_t packed;
          std::memcpy(&packed, codes + c / 2, 4);
          const __m128i bytes = _mm_cvtsi32_si128(packed);
          const __m128i low = _mm_and_si128(bytes, nibble);
          const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble);
          const __m256 k = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_unpacklo_epi8(low, high)));
          for (int64_t r = 0; r < rows; ++r)
            acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(scaled.data() + (r0 + r) * d + c), k, acc[r]);
        }
        for (int64_t r = 0; r < rows; ++r)
          s[(r0 + r) * lds + (j - first)] = bias[size_t(r0 + r)] + kernels::horizontal_sum(acc[r]);
      }
    }
  }
}

}  // namespace kascade::attention
