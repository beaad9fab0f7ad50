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

// Activations quantized to int8 in blocks of 32, as the integer dot products
// need them. scaled_sum = scale * sum(q) carries the offset terms of the
// Q4_1/Q5_1 (min) and Q4_0/Q5_0 (zero point) encodings.
struct ActivationBlock {
  float scale;
  float scaled_sum;
  int8_t q[kBlock];
};

void quantize_activations(const float* x, int64_t n, ActivationBlock* blocks) {
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float* v = x + b * kBlock;
    __m256 amax = _mm256_setzero_ps();
    const __m256 sign_bit = _mm256_set1_ps(-0.0f);
    for (int i = 0; i < kBlock; i += 8) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, _mm256_loadu_ps(v + i)));
    const float max_abs = horizontal_max(amax);
    const float scale = max_abs / 127.0f;
    const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
    int sum = 0;
    for (int i = 0; i < kBlock; ++i) {
      const int q = int(std::nearbyint(v[i] * inverse));
      blocks[b].q[i] = int8_t(q);
      sum += q;
    }
    blocks[b].scale = scale;
    blocks[b].scaled_sum = scale * float(sum);
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
  const __m256i bit_of_byte = _mm256_set1_epi64x(0x8040201008040201);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit_of_byte), bit_of_byte);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// Sum over 32 lanes of unsigned weight bytes times signed activation bytes, as 8 floats.
inline __m256 dot_unsigned_signed(__m256i weights, __m256i activations) {
  const __m256i pairs = _mm256_maddubs_epi16(weights, activations);
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}

inline __m256i load_activations(const ActivationBlock& a) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.q));
}

// Dot products of one quantized weight row with one quantized activation
// row. `offset` gathers the per-block constant terms so the vector loop
// stays a single fused multiply-add per block.
float dot_q4_0(const uint8_t* row, const ActivationBlock* a, int64_t n_blocks) {
  __m256 acc = _mm256_setzero_ps();
  float offset = 0;
  for (int64_t b = 0; b < n_blocks; ++b, row += 18) {
    uint16_t d_bits;
    std::memcpy(&d_bits, row, 2);
    const float d = fp16_to_fp32(d_bits);
    const __m256 products = dot_unsigned_signed(unpack_nibbles(row + 2), load_activations(a[b]));
    acc = _mm256_fmadd_ps(products, _mm256_set1_ps(d * a[b].scale), acc);
    offset -= 8.0f * d * a[b].scaled_sum;
  }
  return horizontal_sum(acc) + offset;
}

float dot_q4_1(const uint8_t* row, const ActivationBlock* a, int64_t n_blocks) {
  __m256 acc = _mm256_setzero_ps();
  float offset = 0;
  for (int64_t b = 0; b < n_blocks; ++b, row += 20) {
    uint16_t d_bits, m_bits;
    std::memcpy(&d_bits, row, 2);
    std::memcpy(&m_bits, row + 2, 2);
    const __m256 products = dot_unsigned_signed(unpack_nibbles(row + 4), load_activations(a[b]));
    acc = _mm256_fmadd_ps(products, _mm256_set1_ps(fp16_to_fp32(d_bits) * a[b].scale), acc);
    offset += fp16_to_fp32(m_bits) * a[b].scaled_sum;
  }
  return horizontal_sum(acc) + offset;
}

float dot_q5_0(const uint8_t* row, const ActivationBlock* a, int64_t n_blocks) {
  __m256 acc = _mm256_setzero_ps();
  float offset = 0;
  for (int64_t b = 0; b < n_blocks; ++b, row += 22) {
    uint16_t d_bits;
    std::memcpy(&d_bits, row, 2);
    const float d = fp16_to_fp32(d_bits);
    const __m256i weights = _mm256_or_si256(unpack_nibbles(row + 6), expand_high_bits(row + 2));
    acc = _mm256_fmadd_ps(dot_unsigned_signed(weights, load_activations(a[b])),
                          _mm256_set1_ps(d * a[b].scale), acc);
    offset -= 16.0f * d * a[b].scaled_sum;
  }
  return horizontal_sum(acc) + offset;
}

float dot_q5_1(const uint8_t* row, const ActivationBlock* a, int64_t n_blocks) {
  __m256 acc = _mm256_setzero_ps();
  float offset = 0;
  for (int64_t b = 0; b < n_blocks; ++b, row += 24) {
    uint16_t d_bits, m_bits;
    std::memcpy(&d_bits, row, 2);
    std::memcpy(&m_bits, row + 2, 2);
    const __m256i weights = _mm256_or_si256(unpack_nibbles(row + 8), expand_high_bits(row + 4));
    acc = _mm256_fmadd_ps(dot_unsigned_signed(weights, load_activations(a[b])),
                          _mm256_set1_ps(fp16_to_fp32(d_bits) * a[b].scale), acc);
    offset += fp16_to_fp32(m_bits) * a[b].scaled_sum;
  }
  return horizontal_sum(acc) + offset;
}

float dot_q8_0(const uint8_t* row, const ActivationBlock* a, int64_t n_blocks) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b, row += 34) {
    uint16_t d_bits;
    std::memcpy(&d_bits, row, 2);
    const __m256i weights = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2));
    // maddubs needs an unsigned operand: move the weights' signs onto the activations.
    const __m256i products = _mm256_maddubs_epi16(_mm256_sign_epi8(weights, weights),
                                                   _mm256_sign_epi8(load_activations(a[b]), weights));
    const __m256 sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(products, _mm256_set1_epi16(1)));
    acc = _mm256_fmadd_ps(sums, _mm256_set1_ps(fp16_to_fp32(d_bits) * a[b].scale), acc);
  }
  return horizontal_sum(acc);
}

using IntegerDot = float (*)(const uint8_t*, const ActivationBlock*, int64_t);

IntegerDot integer_dot_for(TensorType type) {
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

void matvec_integer(const Weight& w, IntegerDot dot, const float* in, int64_t n_tokens, float* out) {
  const int64_t n_blocks = w.cols / kBlock;
  std::vector<ActivationBlock> activations(size_t(n_blocks * n_tokens));
  for (int64_t t = 0; t < n_tokens; ++t) quantize_activations(in + t * w.cols, w.cols, &activations[t * n_blocks]);
  const int64_t n_tasks = (w.rows + kRowsPerTask - 1) / kRowsPerTask;
#pragma omp parallel for schedule(static)
  for (int64_t task = 0; task < n_tasks; ++task) {
    const int64_t end = std::min(w.rows, (task + 1) * kRowsPerTask);
    for (int64_t r = task * kRowsPerTask; r < end; ++r)
      for (int64_t t = 0; t < n_tokens; ++t)
        out[t * w.rows + r] = dot(w.row(r), &activations[t * n_blocks], n_blocks);
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
  if (IntegerDot dot = integer_dot_for(w.type); dot && w.cols % kBlock == 0)
    return matvec_integer(w, dot, in, n_tokens, out);
  matvec_float(w, in, n_tokens, out);
}

}  // namespace kascade::ops
