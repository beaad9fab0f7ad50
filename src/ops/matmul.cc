// Quantized matrix products; see matmul.h for the two paths and why.
#include "ops/matmul.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include <cblas.h>

#include "core/error.h"
#include "core/half.h"
#include "ops/simd.h"

namespace kascade::ops {
namespace {

constexpr int kBlock = 32;  // values per block of every legacy quant type

// Dot products of one quantized weight row with the activations. Each
// 32-value block of activations becomes two int16 blocks: the values rounded
// at scale max/32767, and the rounding residual at 1/32768 of that scale
// (about 30 bits in all, fp32-level accuracy even beside the huge outlier
// channels of LLM activations). The weight integers are widened once and
// multiply both with madd_epi16: fewer instructions than widening every
// weight to fp32, so the matrix-vector product gets closer to memory speed.
// `sums` holds each block's exact fp32 activation sum, which carries the zero
// point (Q4_0, Q5_0) and minimum (Q4_1, Q5_1) terms.

// Activations of one token as int16 blocks.
struct QuantizedActivations {
  const int16_t* values;     // [n_blocks * 32]
  const int16_t* residuals;  // [n_blocks * 32], at scale / 32768
  const float* scales;       // [n_blocks]
  const float* sums;         // [n_blocks], exact
};

void quantize_activations(const float* x, int64_t n_blocks, int16_t* values, int16_t* residuals,
                          float* scales, float* sums) {
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* block = x + b * kBlock;
    float max_abs = 0, sum = 0;
    for (int j = 0; j < kBlock; ++j) max_abs = std::max(max_abs, std::fabs(block[j])), sum += block[j];
    const double scale = max_abs / 32767.0;
    const double inverse = max_abs > 0 ? 32767.0 / max_abs : 0.0;
    for (int j = 0; j < kBlock; ++j) {
      const double value = std::nearbyint(block[j] * inverse);  // |value| <= 32767
      values[b * kBlock + j] = int16_t(value);
      // |block[j] - value * scale| <= scale / 2, so the residual fits in 16384.
      residuals[b * kBlock + j] = int16_t(std::lrint((block[j] - value * scale) * inverse * 32768.0));
    }
    scales[b] = float(scale);
    sums[b] = sum;
  }
}

// 16 bytes of packed nibbles -> 32 bytes: low nibbles are values 0..15,
// high nibbles values 16..31 (the ggml order).
inline __m256i unpack_nibbles(const uint8_t* packed) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(packed));
  const __m128i low_mask = _mm_set1_epi8(0x0f);
  const __m128i low = _mm_and_si128(bytes, low_mask);
  const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), low_mask);
  return _mm256_set_m128i(high, low);
}

// 32 high bits (bit j for value j) -> 32 bytes holding 0x10 where the bit is set.
inline __m256i expand_high_bits(const uint8_t* packed_bits) {
  uint32_t bits;
  std::memcpy(&bits, packed_bits, 4);
  const __m256i shuffle = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                            0x0101010101010101, 0x0000000000000000);
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(int(bits)), shuffle);
  const __m256i bit_of_byte = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit_of_byte), bit_of_byte);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// sum_j q[j] * x[j] over one block of 32 small integers q (signed or
// unsigned bytes) and the activation block, times `scale` (the weight scale),
// added to acc.
template <bool kSigned>
inline __m256 block_dot(__m256i q, const QuantizedActivations& x, int64_t b, float scale,
                        __m256 acc) {
  const __m128i low = _mm256_castsi256_si128(q), high = _mm256_extracti128_si256(q, 1);
  const __m256i q_low = kSigned ? _mm256_cvtepi8_epi16(low) : _mm256_cvtepu8_epi16(low);
  const __m256i q_high = kSigned ? _mm256_cvtepi8_epi16(high) : _mm256_cvtepu8_epi16(high);
  auto products = [&](const int16_t* v) {
    const __m256i v_low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v));
    const __m256i v_high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + 16));
    return _mm256_cvtepi32_ps(
        _mm256_add_epi32(_mm256_madd_epi16(q_low, v_low), _mm256_madd_epi16(q_high, v_high)));
  };
  const float block_scale = scale * x.scales[b];
  acc = _mm256_fmadd_ps(products(x.values + b * kBlock), _mm256_set1_ps(block_scale), acc);
  return _mm256_fmadd_ps(products(x.residuals + b * kBlock),
                         _mm256_set1_ps(block_scale * (1.0f / 32768.0f)), acc);
}

inline float half_at(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return _cvtsh_ss(bits);  // F16C
}

// Layouts (ggml): Q4_0 {d, qs[16]}, Q4_1 {d, m, qs[16]}, Q5_0 {d, qh[4], qs[16]},
// Q5_1 {d, m, qh[4], qs[16]}, Q8_0 {d, qs[32]}; d and m fp16.
float dot_q4_0(const uint8_t* row, const QuantizedActivations& x, int64_t n_blocks) {
  __m256 acc = _mm256_setzero_ps();
  float offset = 0;
  for (int64_t b = 0; b < n_blocks; ++b, row += 18) {
    const float d = half_at(row);
    acc = block_dot<false>(unpack_nibbles(row + 2), x, b, d, acc);
    offset -= 8.0f * d * x.sums[b];
  }
  return horizontal_sum(acc) + offset;
}

float dot_q4_1(const uint8_t* row, const QuantizedActivations& x, int64_t n_blocks) {
  __m256 acc = _mm256_setzero_ps();
  float offset = 0;
  for (int64_t b = 0; b < n_blocks; ++b, row += 20) {
    acc = block_dot<false>(unpack_nibbles(row + 4), x, b, half_at(row), acc);
    offset += half_at(row + 2) * x.sums[b];
  }
  return horizontal_sum(acc) + offset;
}

float dot_q5_0(const uint8_t* row, const QuantizedActivations& x, int64_t n_blocks) {
  __m256 acc = _mm256_setzero_ps();
  float offset = 0;
  for (int64_t b = 0; b < n_blocks; ++b, row += 22) {
    const float d = half_at(row);
    const __m256i q = _mm256_or_si256(unpack_nibbles(row + 6), expand_high_bits(row + 2));
    acc = block_dot<false>(q, x, b, d, acc);
    offset -= 16.0f * d * x.sums[b];
  }
  return horizontal_sum(acc) + offset;
}

float dot_q5_1(const uint8_t* row, const QuantizedActivations& x, int64_t n_blocks) {
  __m256 acc = _mm256_setzero_ps();
  float offset = 0;
  for (int64_t b = 0; b < n_blocks; ++b, row += 24) {
    const __m256i q = _mm256_or_si256(unpack_nibbles(row + 8), expand_high_bits(row + 4));
    acc = block_dot<false>(q, x, b, half_at(row), acc);
    offset += half_at(row + 2) * x.sums[b];
  }
  return horizontal_sum(acc) + offset;
}

float dot_q8_0(const uint8_t* row, const QuantizedActivations& x, int64_t n_blocks) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b, row += 34) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2));
    acc = block_dot<true>(q, x, b, half_at(row), acc);
  }
  return horizontal_sum(acc);
}

using BlockDot = float (*)(const uint8_t*, const QuantizedActivations&, int64_t);

BlockDot block_dot_for(TensorType type) {
  switch (type) {
    case TensorType::Q4_0: return dot_q4_0;
    case TensorType::Q4_1: return dot_q4_1;
    case TensorType::Q5_0: return dot_q5_0;
    case TensorType::Q5_1: return dot_q5_1;
    case TensorType::Q8_0: return dot_q8_0;
    default: return nullptr;
  }
}

// Rows per work item of the matrix-vector path: enough to amortise
// scheduling, small enough to balance two threads on the output projection.
constexpr int64_t kRowsPerTask = 32;
// How far ahead (in rows) the matrix-vector product prefetches weights.
constexpr int64_t kPrefetchRows = 4;

void matvec_blocks(const Weight& w, BlockDot dot, const float* in, int64_t n_tokens, float* out) {
  const int64_t n_blocks = w.cols / kBlock;
  std::vector<int16_t> values(size_t(n_tokens * w.cols)), residuals(values.size());
  std::vector<float> scales(size_t(n_tokens * n_blocks)), sums(scales.size());
  for (int64_t t = 0; t < n_tokens; ++t)
    quantize_activations(in + t * w.cols, n_blocks, values.data() + t * w.cols,
                         residuals.data() + t * w.cols, scales.data() + t * n_blocks,
                         sums.data() + t * n_blocks);
  const int64_t n_tasks = (w.rows + kRowsPerTask - 1) / kRowsPerTask;
#pragma omp parallel for schedule(static)
  for (int64_t task = 0; task < n_tasks; ++task) {
    const int64_t end = std::min(w.rows, (task + 1) * kRowsPerTask);
    for (int64_t r = task * kRowsPerTask; r < end; ++r) {
      // The hardware prefetcher alone leaves each row's first block waiting on memory.
      if (r + kPrefetchRows < w.rows)
        for (uint64_t byte = 0; byte < w.row_bytes; byte += 64)
          _mm_prefetch(reinterpret_cast<const char*>(w.row(r + kPrefetchRows) + byte), _MM_HINT_T0);
      for (int64_t t = 0; t < n_tokens; ++t) {
        const QuantizedActivations x{values.data() + t * w.cols, residuals.data() + t * w.cols,
                                     scales.data() + t * n_blocks, sums.data() + t * n_blocks};
        out[t * w.rows + r] = dot(w.row(r), x, n_blocks);
      }
    }
  }
}

// Float weights and the K-quants: dequantize each row, then an fp32 dot.
void matvec_float(const Weight& w, const float* in, int64_t n_tokens, float* out) {
  const int64_t n_tasks = (w.rows + kRowsPerTask - 1) / kRowsPerTask;
#pragma omp parallel
  {
    std::vector<float> row(size_t(w.cols));
#pragma omp for schedule(static)
    for (int64_t task = 0; task < n_tasks; ++task) {
      const int64_t end = std::min(w.rows, (task + 1) * kRowsPerTask);
      for (int64_t r = task * kRowsPerTask; r < end; ++r) {
        const float* values = reinterpret_cast<const float*>(w.row(r));
        if (w.type != TensorType::F32) {
          dequantize_row(w.type, w.row(r), row.data(), w.cols);
          values = row.data();
        }
        for (int64_t t = 0; t < n_tokens; ++t) out[t * w.rows + r] = dot_f32(values, in + t * w.cols, w.cols);
      }
    }
  }
}

// Dequantize row blocks sized to stay in L2, multiply each with sgemm.
void matmul_gemm(const Weight& w, const float* in, int64_t n_tokens, float* out) {
  const int64_t rows_per_block = std::clamp<int64_t>((int64_t(128) * 1024 / w.cols) / 16 * 16, 16, 256);
  const int64_t n_row_blocks = (w.rows + rows_per_block - 1) / rows_per_block;
#pragma omp parallel
  {
    std::vector<float> block(size_t(rows_per_block * w.cols));
#pragma omp for schedule(dynamic, 1)
    for (int64_t rb = 0; rb < n_row_blocks; ++rb) {
      const int64_t first = rb * rows_per_block;
      const int64_t count = std::min(rows_per_block, w.rows - first);
      for (int64_t r = 0; r < count; ++r) dequantize_weight_row(w, first + r, block.data() + r * w.cols);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n_tokens), int(count), int(w.cols), 1.0f, in,
                  int(w.cols), block.data(), int(w.cols), 0.0f, out + first, int(w.rows));
    }
  }
}

}  // namespace

void dequantize_weight_row(const Weight& w, int64_t r, float* out) {
  if (w.type == TensorType::F32)
    std::memcpy(out, w.row(r), size_t(w.cols) * sizeof(float));
  else
    dequantize_row(w.type, w.row(r), out, w.cols);
}

void matmul(const Weight& w, const float* in, int64_t n_tokens, float* out) {
  if (n_tokens >= kGemmMinTokens) return matmul_gemm(w, in, n_tokens, out);
  if (BlockDot dot = block_dot_for(w.type)) return matvec_blocks(w, dot, in, n_tokens, out);
  matvec_float(w, in, n_tokens, out);
}

}  // namespace kascade::ops
