// Dequantization of the ggml block formats we support. The scalar kernels are
// written from the block layouts and keep ggml's order of operations
// (scale products first) so they agree with other implementations to the last
// bit or two; the AVX2/F16C kernels cover the types models mostly ship in
// (F16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K) and are tested against the scalar ones.
#include "quant/dequant.h"

#include <bit>
#include <cstring>

#if defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>
#define KASCADE_DEQUANT_AVX2 1
#endif

#include "core/error.h"
#include "core/half.h"

namespace kascade::quant {
namespace {

static_assert(std::endian::native == std::endian::little,
              "GGUF blocks are little-endian and read in place");

// Blocks are packed back to back at odd sizes, so multi-byte fields are unaligned.
float load_fp16(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return fp16_to_fp32(bits);
}

uint32_t load_u32(const uint8_t* p) {
  uint32_t value;
  std::memcpy(&value, p, sizeof value);
  return value;
}

constexpr int64_t kBlock32 = 32;
constexpr int64_t kBlockK = 256;

void f32_scalar(const uint8_t* __restrict src, float* __restrict dst, int64_t n) {
  if (n > 0) std::memcpy(dst, src, size_t(n) * sizeof(float));
}

void f16_scalar(const uint8_t* __restrict src, float* __restrict dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = load_fp16(src + 2 * i);
}

void bf16_scalar(const uint8_t* __restrict src, float* __restrict dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    uint16_t bits;
    std::memcpy(&bits, src + 2 * i, sizeof bits);
    dst[i] = bf16_to_fp32(bits);
  }
}

// The kernels take __restrict pointers and loop over runs of values that share
// a scale, one simple expression each: the promise that `dst` does not alias
// the byte source lets the compiler keep block fields in registers and
// vectorize where it can.

// Q4_0 (18 bytes): fp16 scale d, then 16 bytes whose low nibbles hold values
// 0..15 and high nibbles values 16..31; value = (nibble - 8) * d.
void q4_0_scalar(const uint8_t* __restrict src, float* __restrict dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 18, dst += kBlock32) {
    const float d = load_fp16(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; ++j) dst[j] = float((qs[j] & 0x0f) - 8) * d;
    for (int j = 0; j < 16; ++j) dst[j + 16] = float((qs[j] >> 4) - 8) * d;
  }
}

// Q4_1 (20 bytes): scale d, minimum m, nibbles as Q4_0; value = nibble * d + m.
void q4_1_scalar(const uint8_t* __restrict src, float* __restrict dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 20, dst += kBlock32) {
    const float d = load_fp16(src);
    const float m = load_fp16(src + 2);
    const uint8_t* qs = src + 4;
    for (int j = 0; j < 16; ++j) dst[j] = float(qs[j] & 0x0f) * d + m;
    for (int j = 0; j < 16; ++j) dst[j + 16] = float(qs[j] >> 4) * d + m;
  }
}

// Q5_0 (22 bytes): d, a 32-bit word whose bit j is the fifth bit of value j,
// nibbles as Q4_0; value = (5-bit q - 16) * d.
void q5_0_scalar(const uint8_t* __restrict src, float* __restrict dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 22, dst += kBlock32) {
    const float d = load_fp16(src);
    const uint32_t high = load_u32(src + 2);
    const uint8_t* qs = src + 6;
    for (int j = 0; j < 16; ++j) {
      dst[j] = float(int((qs[j] & 0x0f) | ((high >> j) & 1) << 4) - 16) * d;
    }
    for (int j = 0; j < 16; ++j) {
      dst[j + 16] = float(int((qs[j] >> 4) | ((high >> (j + 16)) & 1) << 4) - 16) * d;
    }
  }
}

// Q5_1 (24 bytes): d, m, high-bit word, nibbles; value = 5-bit q * d + m.
void q5_1_scalar(const uint8_t* __restrict src, float* __restrict dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 24, dst += kBlock32) {
    const float d = load_fp16(src);
    const float m = load_fp16(src + 2);
    const uint32_t high = load_u32(src + 4);
    const uint8_t* qs = src + 8;
    for (int j = 0; j < 16; ++j) dst[j] = float((qs[j] & 0x0f) | ((high >> j) & 1) << 4) * d + m;
    for (int j = 0; j < 16; ++j) {
      dst[j + 16] = float((qs[j] >> 4) | ((high >> (j + 16)) & 1) << 4) * d + m;
    }
  }
}

// Q8_0 (34 bytes): scale d, then 32 signed bytes; value = q * d.
void q8_0_scalar(const uint8_t* __restrict src, float* __restrict dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 34, dst += kBlock32) {
    const float d = load_fp16(src);
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < 32; ++j) dst[j] = float(qs[j]) * d;
  }
}

// Q4_K and Q5_K pack 8 six-bit scales and 8 six-bit mins into 12 bytes:
// bytes 0-3 hold scales 0-3 and bytes 4-7 mins 0-3 in their low 6 bits; the
// top 2 bits of those bytes are the high bits of scales/mins 4-7, whose low
// 4 bits sit in the nibbles of bytes 8-11. Yields d * scale and dmin * min
// for each 32-value sub-block.
void unpack_k_scales(const uint8_t* packed, float d, float dmin, float* scales, float* mins) {
  for (int j = 0; j < 8; ++j) {
    int scale, min;
    if (j < 4) {
      scale = packed[j] & 63;
      min = packed[j + 4] & 63;
    } else {
      scale = (packed[j + 4] & 0x0f) | ((packed[j - 4] >> 6) << 4);
      min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
    }
    scales[j] = d * float(scale);
    mins[j] = dmin * float(min);
  }
}

// Q4_K (144 bytes): d, dmin, 12 bytes of scales/mins, 128 bytes of nibbles.
// Each 32 bytes of nibbles hold two 32-value sub-blocks (low nibbles, then
// high); value = (d * scale) * q - dmin * min.
void q4_k_scalar(const uint8_t* __restrict src, float* __restrict dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 144) {
    float scales[8], mins[8];
    unpack_k_scales(src + 4, load_fp16(src), load_fp16(src + 2), scales, mins);
    for (int sub = 0; sub < 8; ++sub, dst += 32) {
      const uint8_t* qs = src + 16 + 32 * (sub / 2);
      const int shift = 4 * (sub % 2);
      for (int l = 0; l < 32; ++l) dst[l] = scales[sub] * float((qs[l] >> shift) & 0x0f) - mins[sub];
    }
  }
}

// Q5_K (176 bytes): as Q4_K with 32 bytes of fifth bits before the nibbles:
// bit s of byte l is the fifth bit of value l in sub-block s.
void q5_k_scalar(const uint8_t* __restrict src, float* __restrict dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 176) {
    float scales[8], mins[8];
    unpack_k_scales(src + 4, load_fp16(src), load_fp16(src + 2), scales, mins);
    const uint8_t* high = src + 16;
    for (int sub = 0; sub < 8; ++sub, dst += 32) {
      const uint8_t* qs = src + 48 + 32 * (sub / 2);
      const int shift = 4 * (sub % 2);
      for (int l = 0; l < 32; ++l) {
        const int q = ((qs[l] >> shift) & 0x0f) | ((high[l] >> sub) & 1) << 4;
        dst[l] = scales[sub] * float(q) - mins[sub];
      }
    }
  }
}

// Q6_K (210 bytes): 128 bytes of low nibbles, 64 bytes of 2-bit high parts,
// 16 signed 8-bit scales (one per 16 values), then d. Each half of the block
// (128 values) uses 64 low-nibble bytes and 32 high-part bytes; its quarter k
// (32 values, l = 0..31) takes low nibbles from byte l + 32 * (k % 2) (low
// nibble for k < 2, high for k >= 2) and bits 2k..2k+1 of high byte l.
// value = (d * scale) * (q - 32).
void q6_k_scalar(const uint8_t* __restrict src, float* __restrict dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 210) {
    const float d = load_fp16(src + 208);
    for (int group = 0; group < 16; ++group, dst += 16) {  // 16 values share a scale
      const int half = group / 8, quarter = (group % 8) / 2, first = 16 * (group % 2);
      const uint8_t* low = src + 64 * half + 32 * (quarter % 2) + first;
      const uint8_t* high = src + 128 + 32 * half + first;
      const int low_shift = 4 * (quarter / 2), high_shift = 2 * quarter;
      const float scale = d * float(int8_t(src[192 + group]));
      for (int i = 0; i < 16; ++i) {
        const int q = ((low[i] >> low_shift) & 0x0f) | ((high[i] >> high_shift) & 3) << 4;
        dst[i] = scale * float(q - 32);
      }
    }
  }
}

#ifdef KASCADE_DEQUANT_AVX2

float load_fp16_f16c(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return _cvtsh_ss(bits);
}

// Widens 8 unsigned bytes (the low half of `bytes`) to 8 floats.
__m256 widen_u8(__m128i bytes) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes)); }

void f16_avx2(const uint8_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i halves = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(halves));
  }
  f16_scalar(src + 2 * i, dst + i, n - i);
}

void q4_0_avx2(const uint8_t* src, float* dst, int64_t n_blocks) {
  const __m128i low_mask = _mm_set1_epi8(0x0f);
  const __m256i eight = _mm256_set1_epi32(8);
  for (int64_t b = 0; b < n_blocks; ++b, src += 18, dst += kBlock32) {
    const __m256 d = _mm256_set1_ps(load_fp16_f16c(src));
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2));
    const __m128i low = _mm_and_si128(packed, low_mask);
    const __m128i high = _mm_and_si128(_mm_srli_epi16(packed, 4), low_mask);
    const __m128i quarters[4] = {low, _mm_srli_si128(low, 8), high, _mm_srli_si128(high, 8)};
    for (int k = 0; k < 4; ++k) {
      const __m256i q = _mm256_sub_epi32(_mm256_cvtepu8_epi32(quarters[k]), eight);
      _mm256_storeu_ps(dst + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
    }
  }
}

void q4_1_avx2(const uint8_t* src, float* dst, int64_t n_blocks) {
  const __m128i low_mask = _mm_set1_epi8(0x0f);
  for (int64_t b = 0; b < n_blocks; ++b, src += 20, dst += kBlock32) {
    const __m256 d = _mm256_set1_ps(load_fp16_f16c(src));
    const __m256 m = _mm256_set1_ps(load_fp16_f16c(src + 2));
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 4));
    const __m128i low = _mm_and_si128(packed, low_mask);
    const __m128i high = _mm_and_si128(_mm_srli_epi16(packed, 4), low_mask);
    _mm256_storeu_ps(dst + 0, _mm256_fmadd_ps(widen_u8(low), d, m));
    _mm256_storeu_ps(dst + 8, _mm256_fmadd_ps(widen_u8(_mm_srli_si128(low, 8)), d, m));
    _mm256_storeu_ps(dst + 16, _mm256_fmadd_ps(widen_u8(high), d, m));
    _mm256_storeu_ps(dst + 24, _mm256_fmadd_ps(widen_u8(_mm_srli_si128(high, 8)), d, m));
  }
}

void q8_0_avx2(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t b = 0; b < n_blocks; ++b, src += 34, dst += kBlock32) {
    const __m256 d = _mm256_set1_ps(load_fp16_f16c(src));
    for (int k = 0; k < 4; ++k) {
      const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + 2 + 8 * k));
      const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
      _mm256_storeu_ps(dst + 8 * k, _mm256_mul_ps(q, d));
    }
  }
}

// Stores scale * q - min for 32 unsigned byte quants.
void store_u8x32(__m256i q, __m256 scale, __m256 min, float* dst) {
  const __m128i low = _mm256_castsi256_si128(q), high = _mm256_extracti128_si256(q, 1);
  _mm256_storeu_ps(dst + 0, _mm256_fmsub_ps(widen_u8(low), scale, min));
  _mm256_storeu_ps(dst + 8, _mm256_fmsub_ps(widen_u8(_mm_srli_si128(low, 8)), scale, min));
  _mm256_storeu_ps(dst + 16, _mm256_fmsub_ps(widen_u8(high), scale, min));
  _mm256_storeu_ps(dst + 24, _mm256_fmsub_ps(widen_u8(_mm_srli_si128(high, 8)), scale, min));
}

__m256i load_256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

void q4_k_avx2(const uint8_t* src, float* dst, int64_t n_blocks) {
  const __m256i low_mask = _mm256_set1_epi8(0x0f);
  for (int64_t b = 0; b < n_blocks; ++b, src += 144, dst += kBlockK) {
    float scales[8], mins[8];
    unpack_k_scales(src + 4, load_fp16_f16c(src), load_fp16_f16c(src + 2), scales, mins);
    for (int pair = 0; pair < 4; ++pair) {
      const __m256i packed = load_256(src + 16 + 32 * pair);
      const __m256i low = _mm256_and_si256(packed, low_mask);
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low_mask);
      store_u8x32(low, _mm256_set1_ps(scales[2 * pair]), _mm256_set1_ps(mins[2 * pair]),
                  dst + 64 * pair);
      store_u8x32(high, _mm256_set1_ps(scales[2 * pair + 1]), _mm256_set1_ps(mins[2 * pair + 1]),
                  dst + 64 * pair + 32);
    }
  }
}

void q5_k_avx2(const uint8_t* src, float* dst, int64_t n_blocks) {
  const __m256i low_mask = _mm256_set1_epi8(0x0f);
  const __m256i sixteen = _mm256_set1_epi8(16);
  for (int64_t b = 0; b < n_blocks; ++b, src += 176, dst += kBlockK) {
    float scales[8], mins[8];
    unpack_k_scales(src + 4, load_fp16_f16c(src), load_fp16_f16c(src + 2), scales, mins);
    const __m256i high_bits = load_256(src + 16);
    for (int sub = 0; sub < 8; ++sub) {
      const __m256i packed = load_256(src + 48 + 32 * (sub / 2));
      const __m256i nibbles =
          _mm256_and_si256(sub % 2 == 0 ? packed : _mm256_srli_epi16(packed, 4), low_mask);
      const __m256i bit = _mm256_set1_epi8(char(1 << sub));
      const __m256i has_bit = _mm256_cmpeq_epi8(_mm256_and_si256(high_bits, bit), bit);
      const __m256i q = _mm256_or_si256(nibbles, _mm256_and_si256(has_bit, sixteen));
      store_u8x32(q, _mm256_set1_ps(scales[sub]), _mm256_set1_ps(mins[sub]), dst + 32 * sub);
    }
  }
}

void q6_k_avx2(const uint8_t* src, float* dst, int64_t n_blocks) {
  const __m256i low_mask = _mm256_set1_epi8(0x0f);
  const __m256i two_bits = _mm256_set1_epi8(3);
  const __m256i offset = _mm256_set1_epi8(32);
  for (int64_t b = 0; b < n_blocks; ++b, src += 210) {
    const float d = load_fp16_f16c(src + 208);
    for (int half = 0; half < 2; ++half, dst += 128) {
      const __m256i low0 = load_256(src + 64 * half);
      const __m256i low1 = load_256(src + 64 * half + 32);
      const __m256i high = load_256(src + 128 + 32 * half);
      const __m256i nibbles[4] = {low0, low1, _mm256_srli_epi16(low0, 4), _mm256_srli_epi16(low1, 4)};
      for (int quarter = 0; quarter < 4; ++quarter) {
        const __m256i top = _mm256_and_si256(
            _mm256_srl_epi16(high, _mm_cvtsi32_si128(2 * quarter)), two_bits);
        const __m256i q = _mm256_sub_epi8(
            _mm256_or_si256(_mm256_and_si256(nibbles[quarter], low_mask), _mm256_slli_epi16(top, 4)),
            offset);
        const int8_t* scale_bytes = reinterpret_cast<const int8_t*>(src + 192 + 8 * half + 2 * quarter);
        const __m256 scale0 = _mm256_set1_ps(d * float(scale_bytes[0]));
        const __m256 scale1 = _mm256_set1_ps(d * float(scale_bytes[1]));
        const __m128i first = _mm256_castsi256_si128(q), second = _mm256_extracti128_si256(q, 1);
        float* out = dst + 32 * quarter;
        _mm256_storeu_ps(out + 0, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(first)), scale0));
        _mm256_storeu_ps(out + 8, _mm256_mul_ps(
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(first, 8))), scale0));
        _mm256_storeu_ps(out + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(second)), scale1));
        _mm256_storeu_ps(out + 24, _mm256_mul_ps(
            _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(second, 8))), scale1));
      }
    }
  }
}

#endif  // KASCADE_DEQUANT_AVX2

[[noreturn]] void fail_unsupported(TensorType type) {
  const TypeTraits* traits = find_type_traits(static_cast<uint32_t>(type));
  if (traits == nullptr) fail("unknown tensor type id {}", static_cast<uint32_t>(type));
  fail("unsupported tensor type {}", traits->name);
}

}  // namespace

void dequantize_blocks_scalar(TensorType type, const uint8_t* src, float* dst, int64_t n_blocks) {
  switch (type) {
    case TensorType::F32: return f32_scalar(src, dst, n_blocks);
    case TensorType::F16: return f16_scalar(src, dst, n_blocks);
    case TensorType::BF16: return bf16_scalar(src, dst, n_blocks);
    case TensorType::Q4_0: return q4_0_scalar(src, dst, n_blocks);
    case TensorType::Q4_1: return q4_1_scalar(src, dst, n_blocks);
    case TensorType::Q5_0: return q5_0_scalar(src, dst, n_blocks);
    case TensorType::Q5_1: return q5_1_scalar(src, dst, n_blocks);
    case TensorType::Q8_0: return q8_0_scalar(src, dst, n_blocks);
    case TensorType::Q4_K: return q4_k_scalar(src, dst, n_blocks);
    case TensorType::Q5_K: return q5_k_scalar(src, dst, n_blocks);
    case TensorType::Q6_K: return q6_k_scalar(src, dst, n_blocks);
    default: fail_unsupported(type);
  }
}

void dequantize_blocks(TensorType type, const uint8_t* src, float* dst, int64_t n_blocks) {
#ifdef KASCADE_DEQUANT_AVX2
  switch (type) {
    case TensorType::F16: return f16_avx2(src, dst, n_blocks);
    case TensorType::Q4_0: return q4_0_avx2(src, dst, n_blocks);
    case TensorType::Q4_1: return q4_1_avx2(src, dst, n_blocks);
    case TensorType::Q8_0: return q8_0_avx2(src, dst, n_blocks);
    case TensorType::Q4_K: return q4_k_avx2(src, dst, n_blocks);
    case TensorType::Q5_K: return q5_k_avx2(src, dst, n_blocks);
    case TensorType::Q6_K: return q6_k_avx2(src, dst, n_blocks);
    default: break;
  }
#endif
  dequantize_blocks_scalar(type, src, dst, n_blocks);
}

}  // namespace kascade::quant
