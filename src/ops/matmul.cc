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
// Each block's exact fp32 activation sum carries the zero point (Q4_0, Q5_0)
// and minimum (Q4_1, Q5_1) terms.

// Activations of one token as int16 blocks.
struct QuantizedActivations {
  const int16_t* values;     // [n_blocks * 32]
  const int16_t* residuals;  // [n_blocks * 32], at scale / 32768
  const float* scale_sums;   // [n_blocks][2]: the block's scale, its exact sum
};

// 32 int32 -> 32 int16 in order (packs_epi32 interleaves 128-bit lanes).
inline void store_int16(int16_t* out, __m256i a, __m256i b, __m256i c, __m256i d) {
  const __m256i ab = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8);
  const __m256i cd = _mm256_permute4x64_epi64(_mm256_packs_epi32(c, d), 0xd8);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), ab);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16), cd);
}

// In fp32 with AVX2 (a decode step quantizes every matrix's input, serially
// before the threads start): value = rint(x / scale), and the residual
// x - value * scale comes exact out of one FMA, so value + residual / 32768
// reproduces x to about 2^-16 of the block's scale.
void quantize_activations(const float* x, int64_t n_blocks, int16_t* values, int16_t* residuals,
                          float* scale_sums) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float* block = x + b * kBlock;
    __m256 v[4], max_abs = _mm256_setzero_ps(), sum = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(block + 8 * i);
      max_abs = _mm256_max_ps(max_abs, _mm256_andnot_ps(sign, v[i]));
      sum = _mm256_add_ps(sum, v[i]);
    }
    const float largest = horizontal_max(max_abs);
    const float scale = largest / 32767.0f;
    const __m256 inverse = _mm256_set1_ps(largest > 0 ? 1.0f / scale : 0.0f);
    const __m256 scale_v = _mm256_set1_ps(scale);
    const __m256 residual_inverse = _mm256_mul_ps(inverse, _mm256_set1_ps(32768.0f));
    __m256i rounded[4], residual[4];
    for (int i = 0; i < 4; ++i) {
      const __m256 value = _mm256_round_ps(_mm256_mul_ps(v[i], inverse), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      rounded[i] = _mm256_cvtps_epi32(value);  // |value| <= 32767
      const __m256 remainder = _mm256_fnmadd_ps(value, scale_v, v[i]);  // |remainder| <= scale / 2
      residual[i] = _mm256_cvtps_epi32(_mm256_mul_ps(remainder, residual_inverse));
    }
    store_int16(values + b * kBlock, rounded[0], rounded[1], rounded[2], rounded[3]);
    store_int16(residuals + b * kBlock, residual[0], residual[1], residual[2], residual[3]);
    scale_sums[2 * b] = scale;
    scale_sums[2 * b + 1] = horizontal_sum(sum);
  }
}

// A block's 32 small integers as int16: values 0..15 and 16..31, the
// operands of madd_epi16.
struct BlockWords {
  __m256i low, high;
};

// 16 bytes of packed nibbles: low nibbles are values 0..15, high nibbles
// values 16..31 (the ggml order). Widened to 16-bit words first, so a word's
// high nibble is one shift away: three instructions for the 32 values.
inline BlockWords unpack_nibbles(const uint8_t* packed) {
  const __m256i words = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed)));
  return {_mm256_and_si256(words, _mm256_set1_epi16(0x0f)), _mm256_srli_epi16(words, 4)};
}

// 32 signed bytes.
inline BlockWords widen_bytes(const uint8_t* bytes) {
  return {_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes))),
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + 16)))};
}

// Adds 16 to value j where bit j of the 32 high bits is set (Q5 formats).
inline BlockWords add_high_bits(BlockWords nibbles, const uint8_t* packed_bits) {
  uint32_t bits;
  std::memcpy(&bits, packed_bits, 4);
  const __m256i bit_of_word = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
                                                 16384, int16_t(0x8000));
  auto sixteens = [&](uint32_t half) {
    const __m256i set = _mm256_and_si256(_mm256_set1_epi16(int16_t(half)), bit_of_word);
    return _mm256_and_si256(_mm256_cmpeq_epi16(set, bit_of_word), _mm256_set1_epi16(16));
  };
  return {_mm256_or_si256(nibbles.low, sixteens(bits & 0xffff)), _mm256_or_si256(nibbles.high, sixteens(bits >> 16))};
}

// Partial sums of one row's dot product. A row has few blocks (18 at
// d_model 576), so with one accumulator the FMA latency set the pace; even
// and odd blocks get their own chains. `offsets` lane 1 sums the blocks'
// zero-point or minimum terms (lane 0 is unused).
struct RowSums {
  __m256 values[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  __m128 offsets[2] = {_mm_setzero_ps(), _mm_setzero_ps()};

  float total() const {
    const __m128 offset = _mm_add_ps(offsets[0], offsets[1]);
    return horizontal_sum(_mm256_add_ps(values[0], values[1])) + _mm_cvtss_f32(_mm_movehdup_ps(offset));
  }
};

// Adds sum_j q[j] * x[j] over one block of 32 small integers q and
// activation block b to chain `lane`. `factors` holds
// the block's weight scale d and its offset factor (the minimum m, or the
// zero point times d): lane 1 of factors * (scale, sum) is the offset term.
inline void block_dot(BlockWords q, const QuantizedActivations& x, int64_t b, __m128 factors, RowSums& sums,
                      int lane) {
  auto products = [&](const int16_t* v) {
    const __m256i v_low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v));
    const __m256i v_high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + 16));
    return _mm256_cvtepi32_ps(
        _mm256_add_epi32(_mm256_madd_epi16(q.low, v_low), _mm256_madd_epi16(q.high, v_high)));
  };
  const __m128 scale_sum =
      _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x.scale_sums + 2 * b)));
  const __m128 scaled = _mm_mul_ps(factors, scale_sum);  // (d * scale, offset factor * sum)
  sums.offsets[lane] = _mm_add_ps(sums.offsets[lane], scaled);
  const __m256 block = _mm256_fmadd_ps(products(x.residuals + b * kBlock), _mm256_set1_ps(1.0f / 32768.0f),
                                       products(x.values + b * kBlock));
  sums.values[lane] = _mm256_fmadd_ps(block, _mm256_broadcastss_ps(scaled), sums.values[lane]);
}

// Runs block(b, lane) over a row's blocks, alternating the two chains;
// unrolled so that each chain stays in registers.
template <typename Block>
inline void for_each_block(int64_t n_blocks, Block&& block) {
  int64_t b = 0;
  for (; b + 1 < n_blocks; b += 2) {
    block(b, 0);
    block(b + 1, 1);
  }
  if (b < n_blocks) block(b, 0);
}

// Block factors (d, m) from a block that starts with fp16 d and m.
inline __m128 scale_and_min_at(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  return _mm_cvtph_ps(_mm_cvtsi32_si128(int(bits)));  // F16C
}

// Block factors (d, zero_point * d) from a block that starts with fp16 d.
inline __m128 scale_at(const uint8_t* p, float zero_point) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  const float d = _cvtsh_ss(bits);
  return _mm_setr_ps(d, zero_point * d, 0.0f, 0.0f);
}

// Layouts (ggml): Q4_0 {d, qs[16]}, Q4_1 {d, m, qs[16]}, Q5_0 {d, qh[4], qs[16]},
// Q5_1 {d, m, qh[4], qs[16]}, Q8_0 {d, qs[32]}; d and m fp16.
float dot_q4_0(const uint8_t* row, const QuantizedActivations& x, int64_t n_blocks) {
  RowSums sums;
  for_each_block(n_blocks, [&](int64_t b, int lane) {
    const uint8_t* block = row + b * 18;
    block_dot(unpack_nibbles(block + 2), x, b, scale_at(block, -8.0f), sums, lane);
  });
  return sums.total();
}

float dot_q4_1(const uint8_t* row, const QuantizedActivations& x, int64_t n_blocks) {
  RowSums sums;
  for_each_block(n_blocks, [&](int64_t b, int lane) {
    const uint8_t* block = row + b * 20;
    block_dot(unpack_nibbles(block + 4), x, b, scale_and_min_at(block), sums, lane);
  });
  return sums.total();
}

float dot_q5_0(const uint8_t* row, const QuantizedActivations& x, int64_t n_blocks) {
  RowSums sums;
  for_each_block(n_blocks, [&](int64_t b, int lane) {
    const uint8_t* block = row + b * 22;
    const BlockWords q = add_high_bits(unpack_nibbles(block + 6), block + 2);
    block_dot(q, x, b, scale_at(block, -16.0f), sums, lane);
  });
  return sums.total();
}

float dot_q5_1(const uint8_t* row, const QuantizedActivations& x, int64_t n_blocks) {
  RowSums sums;
  for_each_block(n_blocks, [&](int64_t b, int lane) {
    const uint8_t* block = row + b * 24;
    const BlockWords q = add_high_bits(unpack_nibbles(block + 8), block + 4);
    block_dot(q, x, b, scale_and_min_at(block), sums, lane);
  });
  return sums.total();
}

float dot_q8_0(const uint8_t* row, const QuantizedActivations& x, int64_t n_blocks) {
  RowSums sums;
  for_each_block(n_blocks, [&](int64_t b, int lane) {
    const uint8_t* block = row + b * 34;
    block_dot(widen_bytes(block + 2), x, b, scale_at(block, 0.0f), sums, lane);
  });
  return sums.total();
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
  std::vector<float> scale_sums(size_t(n_tokens * n_blocks * 2));
  for (int64_t t = 0; t < n_tokens; ++t)
    quantize_activations(in + t * w.cols, n_blocks, values.data() + t * w.cols,
                         residuals.data() + t * w.cols, scale_sums.data() + t * n_blocks * 2);
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
                                     scale_sums.data() + t * n_blocks * 2};
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

// Dequantize row blocks, multiply each with sgemm.
void matmul_gemm(const Weight& w, const float* in, int64_t n_tokens, float* out) {
  // Blocks of at most 384K dequantized floats (1.5 MiB): sgemm repacks the
  // activations on every call and packs the block into its own cache-sized
  // panels, so fewer, larger calls win (the down projection's 80-row blocks
  // of 128K floats ran 6-10 % slower than 144-row ones). Their count is a
  // multiple of the thread count so that every thread gets the same rows:
  // the 192-row K and V projections once ran on one thread.
  const int64_t max_rows = std::clamp<int64_t>((int64_t(384) * 1024 / w.cols) / 16 * 16, 16, 1024);
  const int64_t n_threads = std::max(1, omp_get_max_threads());
  const int64_t n_even = ((w.rows + max_rows - 1) / max_rows + n_threads - 1) / n_threads * n_threads;
  const int64_t rows_per_block = std::max<int64_t>(8, ((w.rows + n_even - 1) / n_even + 7) / 8 * 8);
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
