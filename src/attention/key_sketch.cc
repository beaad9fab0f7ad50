#include "attention/key_sketch.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "ops/simd.h"

namespace kascade::attention {
namespace {

float element(const float* p) { return *p; }
float element(const uint16_t* p) { return fp16_to_fp32(*p); }
float to_fp16_value(float x) { return fp16_to_fp32(fp32_to_fp16(x)); }
__m256 load8(const float* p) { return _mm256_loadu_ps(p); }
__m256 load8(const uint16_t* p) { return ops::load_f16x8(p); }

// Byte offset of key j's 4 code bytes of channel group m in a block: runs
// of 16 keys, each run's groups consecutive, so a run is read front to back.
int64_t code_offset(int groups, int m, int64_t j) { return ((j / 16 * groups + m) * 16 + j % 16) * 4; }

// The definition (key_sketch.h), one byte per code: codes[j * d + c]. Eight
// channels at a time where d allows; the vector min, max, division and
// rounding are the scalar ones (std::min's operand order, round to nearest
// even), so every path gives the GPU's bits.
template <typename T>
void sketch_codes(kernels::Rows<T> keys, int d, float* lo, float* step, uint8_t* codes) {
  const int d8 = d / 8 * 8;
  for (int c = 0; c < d8; c += 8) {
    __m256 low = load8(keys.row(0) + c), high = low;
    for (int64_t j = 1; j < kSketchBlock; ++j) {
      const __m256 x = load8(keys.row(j) + c);
      low = _mm256_min_ps(x, low);    // x < low ? x : low, as std::min(low, x)
      high = _mm256_max_ps(x, high);  // x > high ? x : high, as std::max(high, x)
    }
    _mm256_storeu_ps(lo + c, low);
    _mm256_storeu_ps(step + c, high);  // step holds the maximum until the pass below
  }
  for (int c = d8; c < d; ++c) {
    float low = element(keys.row(0) + c), high = low;
    for (int64_t j = 1; j < kSketchBlock; ++j) {
      const float x = element(keys.row(j) + c);
      low = std::min(low, x);
      high = std::max(high, x);
    }
    lo[c] = low;
    step[c] = high;
  }
  for (int c = 0; c < d; ++c) {
    const float high = step[c];
    lo[c] = to_fp16_value(lo[c]);
    step[c] = to_fp16_value((high - lo[c]) / 15.0f);
  }
  const __m256 zero = _mm256_setzero_ps(), fifteen = _mm256_set1_ps(15.0f);
  for (int64_t j = 0; j < kSketchBlock; ++j) {
    const T* key = keys.row(j);
    for (int c = 0; c < d8; c += 8) {
      const __m256 lo8 = _mm256_loadu_ps(lo + c), step8 = _mm256_loadu_ps(step + c);
      __m256 q = _mm256_round_ps(_mm256_div_ps(_mm256_sub_ps(load8(key + c), lo8), step8),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      q = _mm256_min_ps(_mm256_max_ps(q, zero), fifteen);
      q = _mm256_and_ps(q, _mm256_cmp_ps(step8, zero, _CMP_GT_OQ));  // no range: code 0
      const __m256i i32 = _mm256_cvttps_epi32(q);
      const __m128i i16 = _mm_packus_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + j * d + c), _mm_packus_epi16(i16, i16));
    }
    for (int c = d8; c < d; ++c) {
      const float q = step[c] > 0 ? std::nearbyint((element(key + c) - lo[c]) / step[c]) : 0.0f;
      codes[j * d + c] = uint8_t(std::clamp(q, 0.0f, 15.0f));
    }
  }
}

}  // namespace

template <typename T>
void sketch_block(kernels::Rows<T> keys, int d, float* lo, float* step, uint8_t* codes) {
  std::vector<uint8_t> bytes(size_t(kSketchBlock * d));
  sketch_codes(keys, d, lo, step, bytes.data());
  for (int64_t j = 0; j < kSketchBlock; ++j)
    for (int c = 0; c < d; c += 2)
      codes[j * d / 2 + c / 2] = uint8_t(bytes[size_t(j * d + c)] | bytes[size_t(j * d + c + 1)] << 4);
}

template void sketch_block<float>(kernels::Rows<float>, int, float*, float*, uint8_t*);
template void sketch_block<uint16_t>(kernels::Rows<uint16_t>, int, float*, float*, uint8_t*);

void dequantize_sketch_row(const SketchBlock& block, int d, int64_t row, float* out) {
  for (int c = 0; c < d; ++c) {
    const int code = (block.codes[row * d / 2 + c / 2] >> (4 * (c & 1))) & 15;
    out[c] = block.lo[c] + float(code) * block.step[c];
  }
}

SketchWeights sketch_weights(const float* q, const float* lo, const float* step, int d, int8_t* weights) {
  // Eight channels at a time, a scalar tail; |w| and q.lo in fp32.
  __m256 bias8 = _mm256_setzero_ps(), largest8 = _mm256_setzero_ps();
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const int d8 = d / 8 * 8;
  for (int c = 0; c < d8; c += 8) {
    const __m256 x = _mm256_loadu_ps(q + c);
    bias8 = _mm256_fmadd_ps(x, _mm256_loadu_ps(lo + c), bias8);
    largest8 = _mm256_max_ps(largest8, _mm256_andnot_ps(sign, _mm256_mul_ps(x, _mm256_loadu_ps(step + c))));
  }
  SketchWeights w;
  w.bias = ops::horizontal_sum(bias8);
  float largest = ops::horizontal_max(largest8);
  for (int c = d8; c < d; ++c) {
    w.bias += q[c] * lo[c];
    largest = std::max(largest, std::abs(q[c] * step[c]));
  }
  const int padded = (d + 7) / 8 * 8;
  if (largest == 0) {
    std::fill(weights, weights + padded, int8_t(0));
    return w;
  }
  w.scale = largest / 127.0f;
  const __m256 inverse = _mm256_set1_ps(127.0f / largest);
  // Round to nearest even (the default MXCSR mode, as std::nearbyint).
  for (int c = 0; c < d8; c += 8) {
    const __m256i i32 =
        _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(q + c), _mm256_loadu_ps(step + c)), inverse));
    const __m128i i16 = _mm_packs_epi32(_mm256_castsi256_si128(i32), _mm256_extracti128_si256(i32, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(weights + c), _mm_packs_epi16(i16, i16));
  }
  for (int c = d8; c < padded; ++c)
    weights[c] = c < d ? int8_t(std::nearbyint(q[c] * step[c] * (127.0f / largest))) : int8_t(0);
  return w;
}

template <typename T>
void KeySketch::extend(std::span<const kernels::Rows<T>> keys, int64_t n_keys) {
  const int64_t wanted = sketched_end(n_keys) / kSketchBlock;
  if (wanted <= n_blocks_) return;
  const int64_t block_bytes = int64_t(groups()) * kSketchBlock * 4;
  lo_.resize(size_t(n_kv_heads_));
  step_.resize(size_t(n_kv_heads_));
  codes_.resize(size_t(n_kv_heads_));
  for (int h = 0; h < n_kv_heads_; ++h) {
    lo_[size_t(h)].resize(size_t(wanted * d_));
    step_[size_t(h)].resize(size_t(wanted * d_));
    codes_[size_t(h)].resize(size_t(wanted * block_bytes));
  }
#pragma omp parallel for collapse(2) schedule(static) if ((wanted - n_blocks_) * n_kv_heads_ > 4)
  for (int h = 0; h < n_kv_heads_; ++h)
    for (int64_t b = n_blocks_; b < wanted; ++b) {
      const kernels::Rows<T>& head = keys[size_t(h)];
      std::vector<uint8_t> bytes(size_t(kSketchBlock * groups() * 8), 0);
      sketch_codes(kernels::Rows<T>{head.row(b * kSketchBlock), head.stride}, d_, lo_[size_t(h)].data() + b * d_,
                   step_[size_t(h)].data() + b * d_, bytes.data());
      // One byte per code to the scorer's groups; a last partial group is zero-padded.
      if (d_ % 8 != 0)
        for (int64_t j = kSketchBlock - 1; j >= 0; --j) {
          std::copy_backward(bytes.begin() + j * d_, bytes.begin() + (j + 1) * d_,
                             bytes.begin() + j * groups() * 8 + d_);
          std::fill(bytes.begin() + j * groups() * 8 + d_, bytes.begin() + (j + 1) * groups() * 8, uint8_t(0));
        }
      uint8_t* grouped = codes_[size_t(h)].data() + b * block_bytes;
      for (int64_t j = 0; j < kSketchBlock; ++j)
        for (int m = 0; m < groups(); ++m) {
          uint64_t eight;
          std::memcpy(&eight, bytes.data() + (j * groups() + m) * 8, 8);
          const uint32_t packed = uint32_t(eight) | uint32_t(eight >> 32) << 4;
          std::memcpy(grouped + code_offset(groups(), m, j), &packed, 4);
        }
    }
  n_blocks_ = wanted;
}

template void KeySketch::extend<float>(std::span<const kernels::Rows<float>>, int64_t);
template void KeySketch::extend<uint16_t>(std::span<const kernels::Rows<uint16_t>>, int64_t);

SketchBlock KeySketch::params(int kv_head, int64_t b) const {
  return {lo_[size_t(kv_head)].data() + b * d_, step_[size_t(kv_head)].data() + b * d_, nullptr};
}

void KeySketch::dequantize(int kv_head, int64_t position, float* out) const {
  const int64_t b = position / kSketchBlock, j = position % kSketchBlock;
  const SketchBlock block = params(kv_head, b);
  const uint8_t* grouped = codes_[size_t(kv_head)].data() + b * groups() * kSketchBlock * 4;
  for (int c = 0; c < d_; ++c) {
    const uint8_t byte = grouped[code_offset(groups(), c / 8, j) + c % 4];
    out[c] = block.lo[c] + float((byte >> (c % 8 < 4 ? 0 : 4)) & 15) * block.step[c];
  }
}

namespace {

// The rows' weights for one block: row r's int8 weights at weights[r * padded].
struct BlockWeights {
  int padded = 0;
  std::vector<int8_t> weights;
  std::vector<float> bias, scale;

  void prepare(const float* q, int64_t n_rows, const SketchBlock& block, int d) {
    padded = (d + 7) / 8 * 8;
    weights.resize(size_t(n_rows * padded));
    bias.resize(size_t(n_rows));
    scale.resize(size_t(n_rows));
    for (int64_t r = 0; r < n_rows; ++r) {
      const SketchWeights w = sketch_weights(q + r * d, block.lo, block.step, d, weights.data() + r * padded);
      bias[size_t(r)] = w.bias;
      scale[size_t(r)] = w.scale;
    }
  }
  // Four consecutive weights of row r from channel c, as one 32-bit lane.
  int32_t quad(int64_t r, int c) const {
    int32_t x;
    std::memcpy(&x, weights.data() + r * padded + c, 4);
    return x;
  }
};

// Scores of kRows rows for the 8 keys at key8 (block-relative, a multiple of
// 8) of one block: u8 codes times s8 weights (vpmaddubsw, pairs into int16),
// four groups summed in int16 (at most 4 x 2 x 2 x 15 x 127 = 30480, no
// saturation), then widened to int32 (vpmaddwd by ones).
template <int kRows>
void score_8_keys(const uint8_t* grouped, int groups, int64_t key8, const BlockWeights& w, int64_t r0,
                  __m256 (&out)[kRows]) {
  const __m256i nibble = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
  __m256i acc32[kRows];
  for (int r = 0; r < kRows; ++r) acc32[r] = _mm256_setzero_si256();
  for (int m0 = 0; m0 < groups; m0 += 4) {
    __m256i acc16[kRows];
    for (int r = 0; r < kRows; ++r) acc16[r] = _mm256_setzero_si256();
    for (int m = m0; m < std::min(groups, m0 + 4); ++m) {
      const __m256i bytes =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grouped + code_offset(groups, m, key8)));
      const __m256i low = _mm256_and_si256(bytes, nibble);
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), nibble);
      for (int r = 0; r < kRows; ++r)
        acc16[r] = _mm256_add_epi16(acc16[r], _mm256_add_epi16(_mm256_maddubs_epi16(low, _mm256_set1_epi32(w.quad(r0 + r, 8 * m))),
                                                               _mm256_maddubs_epi16(high, _mm256_set1_epi32(w.quad(r0 + r, 8 * m + 4)))));
    }
    for (int r = 0; r < kRows; ++r) acc32[r] = _mm256_add_epi32(acc32[r], _mm256_madd_epi16(acc16[r], ones));
  }
  for (int r = 0; r < kRows; ++r)
    out[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc32[r]), _mm256_set1_ps(w.scale[size_t(r0 + r)]),
                             _mm256_set1_ps(w.bias[size_t(r0 + r)]));
}

// Keys [j0, j1) of one block (block-relative) for rows [r0, r0 + kRows).
template <int kRows>
void score_block_rows(const uint8_t* grouped, int groups, int64_t j0, int64_t j1, const BlockWeights& w, int64_t r0,
                      float* s, int64_t lds) {
  for (int64_t key8 = j0 / 8 * 8; key8 < j1; key8 += 8) {
    __m256 out[kRows];
    score_8_keys<kRows>(grouped, groups, key8, w, r0, out);
    const int64_t from = std::max(key8, j0), to = std::min(key8 + 8, j1);
    for (int r = 0; r < kRows; ++r) {
      float* row = s + (r0 + r) * lds;
      if (from == key8 && to == key8 + 8) {
        _mm256_storeu_ps(row + key8 - j0, out[r]);
      } else {
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, out[r]);
        for (int64_t j = from; j < to; ++j) row[j - j0] = lanes[j - key8];
      }
    }
  }
}

// The same sums with AVX-512 VNNI: 16 keys per register, vpdpbusd adding u8
// x s8 products into int32 lanes directly; the same int32 sums and the same
// final FMA, so the same bits as the AVX2 path.
template <int kRows>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void score_block_rows_vnni(
    const uint8_t* grouped, int groups, int64_t j0, int64_t j1, const BlockWeights& w, int64_t r0, float* s,
    int64_t lds) {
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  for (int64_t key16 = j0 / 16 * 16; key16 < j1; key16 += 16) {
    __m512i acc[kRows];
    for (int r = 0; r < kRows; ++r) acc[r] = _mm512_setzero_si512();
    for (int m = 0; m < groups; ++m) {
      const __m512i bytes = _mm512_loadu_si512(grouped + code_offset(groups, m, key16));
      const __m512i low = _mm512_and_si512(bytes, nibble);
      const __m512i high = _mm512_and_si512(_mm512_srli_epi16(bytes, 4), nibble);
      for (int r = 0; r < kRows; ++r) {
        acc[r] = _mm512_dpbusd_epi32(acc[r], low, _mm512_set1_epi32(w.quad(r0 + r, 8 * m)));
        acc[r] = _mm512_dpbusd_epi32(acc[r], high, _mm512_set1_epi32(w.quad(r0 + r, 8 * m + 4)));
      }
    }
    const int64_t from = std::max(key16, j0), to = std::min(key16 + 16, j1);
    for (int r = 0; r < kRows; ++r) {
      const __m512 out = _mm512_fmadd_ps(_mm512_maskz_cvtepi32_ps(__mmask16(0xffff), acc[r]),
                                         _mm512_set1_ps(w.scale[size_t(r0 + r)]), _mm512_set1_ps(w.bias[size_t(r0 + r)]));
      float* row = s + (r0 + r) * lds;
      if (from == key16 && to == key16 + 16) {
        _mm512_storeu_ps(row + key16 - j0, out);
      } else {
        alignas(64) float lanes[16];
        _mm512_store_ps(lanes, out);
        for (int64_t j = from; j < to; ++j) row[j - j0] = lanes[j - key16];
      }
    }
  }
}

template <int kRows>
void score_rows(SketchIsa isa, const uint8_t* grouped, int groups, int64_t j0, int64_t j1, const BlockWeights& w,
                int64_t r0, float* s, int64_t lds) {
  if (isa == SketchIsa::Avx512Vnni)
    score_block_rows_vnni<kRows>(grouped, groups, j0, j1, w, r0, s, lds);
  else
    score_block_rows<kRows>(grouped, groups, j0, j1, w, r0, s, lds);
}

}  // namespace

SketchIsa best_sketch_isa() {
  static const SketchIsa best = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                        __builtin_cpu_supports("avx512vnni")
                                    ? SketchIsa::Avx512Vnni
                                    : SketchIsa::Avx2;
  return best;
}

void KeySketch::dot_rows(const float* q, int64_t n_rows, int h, int64_t first, int64_t count, float* s,
                         int64_t lds, SketchIsa isa) const {
  if (isa == SketchIsa::Avx512Vnni && best_sketch_isa() != SketchIsa::Avx512Vnni)
    fail("key sketch: this CPU has no AVX-512 VNNI");
  BlockWeights weights;
  const int64_t block_bytes = int64_t(groups()) * kSketchBlock * 4;
  for (int64_t b = first / kSketchBlock; b * kSketchBlock < first + count; ++b) {
    weights.prepare(q, n_rows, params(h, b), d_);
    const uint8_t* grouped = codes_[size_t(h)].data() + b * block_bytes;
    const int64_t j0 = std::max(first, b * kSketchBlock) - b * kSketchBlock;
    const int64_t j1 = std::min(first + count, (b + 1) * kSketchBlock) - b * kSketchBlock;
    float* out = s + (b * kSketchBlock + j0 - first);
    int64_t r0 = 0;
    for (; r0 + 4 <= n_rows; r0 += 4) score_rows<4>(isa, grouped, groups(), j0, j1, weights, r0, out, lds);
    switch (n_rows - r0) {
      case 3: score_rows<3>(isa, grouped, groups(), j0, j1, weights, r0, out, lds); break;
      case 2: score_rows<2>(isa, grouped, groups(), j0, j1, weights, r0, out, lds); break;
      case 1: score_rows<1>(isa, grouped, groups(), j0, j1, weights, r0, out, lds); break;
      default: break;
    }
  }
}

}  // namespace kascade::attention
