// Kernels of gpu/matrix.h. The matrix-vector products give one warp to a
// weight row at a time (rows striped over the grid): its lanes stream the row
// in 16-byte loads, several in flight (bf16: the next step's issued before the
// current one is dotted, pipelined_rows), and dot them in registers with the
// same columns of up to kGemvGroup input rows (read through the read-only
// cache); the warp sums its lanes at the end. Quantized products of several
// input rows run on the tensor cores instead (mmq_kernel, further down).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "gpu/matrix.h"
#include "gpu/quantize_block.cuh"

namespace kascade::gpu {
namespace {

constexpr int kThreads = 256;                  // 8 warps, so 8 weight rows per block at a time
constexpr int64_t kMaxBlocks = 132 * 8;       // a few waves of the H200's 132 SMs
constexpr int64_t kQ4_KBlockVectors = 9;      // 144 bytes: a 16-byte header, 128 bytes of nibbles
constexpr int64_t kQ5_KBlockVectors = 11;     // 176 bytes: Q4_K's header, 32 bytes of fifth bits, the nibbles
constexpr int64_t kQ6_KBodyVectors = 13;      // 208 bytes: 128 of low nibbles, 64 of high bits, 16 scales
constexpr int kOnes = 0x01010101;             // four bytes of 1: a dot product with it sums the other's bytes

__device__ __forceinline__ float half_value(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }

// The 8 values of 16 bytes of bf16 (or fp16).
template <bool kHalf>
__device__ __forceinline__ void widen8(const uint4& v, float out[8]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 pair;
    if constexpr (kHalf)
      pair = __half22float2(reinterpret_cast<const __half2*>(&v)[i]);
    else
      pair = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162*>(&v)[i]);
    out[2 * i] = pair.x;
    out[2 * i + 1] = pair.y;
  }
}

__device__ __forceinline__ const uint16_t* q8_0_scales(const Matrix& w) {
  return reinterpret_cast<const uint16_t*>(w.data + w.rows * w.cols);
}
// Q8_0M's fp16 offsets m, after the scales.
__device__ __forceinline__ const uint16_t* q8_0m_offsets(const Matrix& w) {
  return q8_0_scales(w) + w.rows * (w.cols / 32);
}

// The fp16 d of each Q6_K block, after the blocks' bodies.
__device__ __forceinline__ const uint16_t* q6_k_d(const Matrix& w) {
  return reinterpret_cast<const uint16_t*>(w.data + w.rows * (w.cols / 256) * kQ6_KBodyVectors * 16);
}

// Signed byte k of a word.
__device__ __forceinline__ float signed_byte(uint32_t word, int k) { return float(int32_t(word << (24 - 8 * k)) >> 24); }
// Signed byte k (< 16) of 16 bytes.
__device__ __forceinline__ float vector_byte(const uint4& v, int k) {
  return signed_byte(k < 4 ? v.x : k < 8 ? v.y : k < 12 ? v.z : v.w, k & 3);
}
// Four Q6_K values (0..63, a byte each) from their words of low nibbles and
// of high bit pairs: the nibbles at `low_shift` (0 or 4), the pairs at
// `high_shift` (0, 2, 4 or 6).
__device__ __forceinline__ uint32_t q6_k_values(uint32_t low, int low_shift, uint32_t high, int high_shift) {
  return ((low >> low_shift) & 0x0f0f0f0fu) | ((high >> high_shift) & 0x03030303u) << 4;
}

// Q4_K block header (fp16 d, fp16 dmin, 12 packed bytes) as a uint4: d *
// scale and dmin * min of sub-block j, as the CPU's unpack_k_scales.
__device__ __forceinline__ int packed_byte(const uint4& header, int k) {
  const uint32_t word = k < 4 ? header.y : (k < 8 ? header.z : header.w);
  return int((word >> (8 * (k & 3))) & 0xff);
}
__device__ __forceinline__ void q4_k_scale_min(const uint4& header, int j, float& scale, float& min) {
  const float d = half_value(uint16_t(header.x & 0xffff)), dmin = half_value(uint16_t(header.x >> 16));
  int s, m;
  if (j < 4) {
    s = packed_byte(header, j) & 63;
    m = packed_byte(header, j + 4) & 63;
  } else {
    s = (packed_byte(header, j + 4) & 0x0f) | ((packed_byte(header, j - 4) >> 6) << 4);
    m = (packed_byte(header, j + 4) >> 4) | ((packed_byte(header, j) >> 6) << 4);
  }
  scale = d * float(s);
  min = dmin * float(m);
}

// Integer dots of two 16-value weight runs (four words of bytes each) with
// the input's int8 bytes at `in` and `in + gap`, and the sums of those input
// bytes (for the weights' offsets: Q4_K's min, Q6_K's 32).
struct RunDots {
  int low_dot = 0, low_sum = 0, high_dot = 0, high_sum = 0;
};
__device__ __forceinline__ RunDots run_dots(const int (&low)[4], const int (&high)[4], const int8_t* in, int gap) {
  const uint4 low_in = __ldg(reinterpret_cast<const uint4*>(in));
  const uint4 high_in = __ldg(reinterpret_cast<const uint4*>(in + gap));
  const int low_x[4] = {int(low_in.x), int(low_in.y), int(low_in.z), int(low_in.w)};
  const int high_x[4] = {int(high_in.x), int(high_in.y), int(high_in.z), int(high_in.w)};
  RunDots r;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    r.low_dot = __dp4a(low[i], low_x[i], r.low_dot);
    r.low_sum = __dp4a(kOnes, low_x[i], r.low_sum);
    r.high_dot = __dp4a(high[i], high_x[i], r.high_dot);
    r.high_sum = __dp4a(kOnes, high_x[i], r.high_sum);
  }
  return r;
}

template <int kRows>
__device__ __forceinline__ void write_rows(const float (&acc)[kRows], int64_t row, int64_t ldc, float* out,
                                           float beta) {
#pragma unroll
  for (int t = 0; t < kRows; ++t) {
    float sum = acc[t];
    for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if ((threadIdx.x & 31) == 0) {
      float* o = out + t * ldc + row;
      *o = beta == 0.0f ? sum : sum + beta * *o;
    }
  }
}

#define FOR_EACH_ROW(w)                                                                                \
  for (int64_t row = blockIdx.x * int64_t(blockDim.x >> 5) + (threadIdx.x >> 5); row < (w).rows; \
       row += int64_t(gridDim.x) * (blockDim.x >> 5))

// Resident blocks per SM a product kernel is compiled for: the registers it
// may take are bounded so that enough warps stay resident to keep loads in
// flight (one or two input rows need few registers; eight need more).
template <int kRows>
constexpr int kMinBlocks = kRows <= 2 ? 4 : 2;

// A warp's share of a product as a sequence of (row, step) items: rows
// striped over the grid as in FOR_EACH_ROW, each in `steps` steps of loads.
// The loads of the next item are issued before the current one is computed,
// so that a warp keeps bytes in flight while it does arithmetic (an 8B's
// 4096-wide bf16 row takes four steps, and a warp several rows).
// `load(row, step, loads)` fills a register set, `compute(step, loads, acc)`
// adds it to the row's accumulators; each row's sums are written once. The
// quantized kernels keep FOR_EACH_ROW: holding two sets of their loads within
// 64 registers spilled, and Q4_K, Q6_K and Q8_0 products measured up to 1.9x
// slower (H100, matrix_bench).
template <int kRows, typename Loads, typename Load, typename Compute>
__device__ __forceinline__ void pipelined_rows(int64_t rows, int64_t steps, Load load, Compute compute, int64_t ldc,
                                               float* out, float beta) {
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x >> 5);
  int64_t row = blockIdx.x * int64_t(blockDim.x >> 5) + (threadIdx.x >> 5), step = 0;
  Loads current, next;
  if (row < rows) load(row, step, current);
  float acc[kRows] = {};
  while (row < rows) {
    int64_t next_row = row, next_step = step + 1;
    if (next_step == steps) {
      next_row += warps;
      next_step = 0;
    }
    if (next_row < rows) load(next_row, next_step, next);
    compute(step, current, acc);
    if (next_step == 0) {
      write_rows<kRows>(acc, row, ldc, out, beta);
#pragma unroll
      for (int t = 0; t < kRows; ++t) acc[t] = 0;
    }
    current = next;
    row = next_row;
    step = next_step;
  }
}

// bf16 weights: each lane 8 values per load, four loads a step.
template <int kRows, bool kHalfInput>
__global__ void __launch_bounds__(kThreads, kMinBlocks<kRows>) gemv_bf16_kernel(Matrix w, const uint16_t* x, float* out, int64_t ldc, float beta) {
  constexpr int kUnroll = 4;
  struct Loads {
    uint4 vectors[kUnroll];
  };
  const int lane = threadIdx.x & 31;
  const int64_t vectors = w.cols / 8;
  const int64_t steps = (vectors + 32 * kUnroll - 1) / (32 * kUnroll);
  auto load = [&](int64_t row, int64_t step, Loads& l) {
    const uint4* weights = reinterpret_cast<const uint4*>(w.data) + row * vectors;
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = step * 32 * kUnroll + lane + 32 * u;
      l.vectors[u] = v < vectors ? __ldcs(weights + v) : make_uint4(0, 0, 0, 0);
    }
  };
  auto compute = [&](int64_t step, const Loads& l, float (&acc)[kRows]) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = step * 32 * kUnroll + lane + 32 * u;
      if (v >= vectors) break;
      float wf[8];
      widen8<false>(l.vectors[u], wf);
#pragma unroll
      for (int t = 0; t < kRows; ++t) {
        float xf[8];
        widen8<kHalfInput>(__ldg(reinterpret_cast<const uint4*>(x + t * w.cols) + v), xf);
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[t] = fmaf(wf[i], xf[i], acc[t]);
      }
    }
  };
  pipelined_rows<kRows, Loads>(w.rows, steps, load, compute, ldc, out, beta);
}

// Quantized weights against int8 activations (quantize_rows): integer dot
// products of four byte pairs per instruction (__dp4a), scaled once per run.

// Q8_0: each lane 16 quants per load (half a block), four loads in flight;
// the integer dot of the 16 pairs times the weight block's and the input
// block's scales.
// Q8_0, and Q8_0M (kOffsets): each lane takes 16 values (half a block) per
// load. Q8_0M's sum(x * (d q + m)) = dx * (d sum(q * xq) + m sum(xq)).
template <int kRows, bool kOffsets>
__global__ void __launch_bounds__(kThreads, kMinBlocks<kRows>) gemv_q8_0_kernel(Matrix w, GemvInput x, float* out, int64_t ldc, float beta) {
  constexpr int kUnroll = 4;
  const int lane = threadIdx.x & 31;
  const int64_t vectors = w.cols / 16;
  FOR_EACH_ROW(w) {
    const uint4* quants = reinterpret_cast<const uint4*>(w.data + row * w.cols);
    const uint16_t* scales = q8_0_scales(w) + row * (w.cols / 32);
    const uint16_t* offsets = kOffsets ? q8_0m_offsets(w) + row * (w.cols / 32) : nullptr;
    float acc[kRows] = {};
    for (int64_t v0 = lane; v0 < vectors; v0 += 32 * kUnroll) {
      uint4 loaded[kUnroll];
      uint16_t scale_bits[kUnroll] = {}, offset_bits[kUnroll] = {};
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t v = v0 + 32 * u;
        if (v < vectors) {
          loaded[u] = __ldcs(quants + v);
          scale_bits[u] = __ldcs(scales + v / 2);
          if constexpr (kOffsets) offset_bits[u] = __ldcs(offsets + v / 2);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t v = v0 + 32 * u;
        if (v >= vectors) break;
        const float d = half_value(scale_bits[u]);
#pragma unroll
        for (int t = 0; t < kRows; ++t) {
          const uint4 in = __ldg(reinterpret_cast<const uint4*>(x.quants + t * w.cols) + v);
          int dot = __dp4a(int(loaded[u].x), int(in.x), 0);
          dot = __dp4a(int(loaded[u].y), int(in.y), dot);
          dot = __dp4a(int(loaded[u].z), int(in.z), dot);
          dot = __dp4a(int(loaded[u].w), int(in.w), dot);
          const float dx = __ldg(x.scales + t * (w.cols / 32) + v / 2);
          if constexpr (kOffsets) {
            int sum = __dp4a(kOnes, int(in.x), 0);
            sum = __dp4a(kOnes, int(in.y), sum);
            sum = __dp4a(kOnes, int(in.z), sum);
            sum = __dp4a(kOnes, int(in.w), sum);
            acc[t] = fmaf(dx, d * float(dot) + half_value(offset_bits[u]) * float(sum), acc[t]);
          } else {
            acc[t] = fmaf(d * dx, float(dot), acc[t]);
          }
        }
      }
    }
    write_rows<kRows>(acc, row, ldc, out, beta);
  }
}

// Q4_K, and Q5_K (kFifthBits): eight lanes per 256-value block, so a warp
// covers four blocks per step. Lane part p loads the block's header and
// nibble bytes [16p, 16p + 16) of the 64-value group p / 2: their low
// nibbles are 16 values of sub-block 2 (p / 2), their high nibbles the same
// 16 places of sub-block 2 (p / 2) + 1; each run of 16 lies in one input
// block of 32. Q5_K's fifth bits of those places are bits 2 (p / 2) and 2 (p
// / 2) + 1 of its fifth-bit bytes [16 (p % 2), +16). Per run,
// sum(x * (scale * q - min)) = dx * (scale * sum(q * xq) - min * sum(xq)).
template <int kRows, bool kFifthBits>
__global__ void __launch_bounds__(kThreads, kMinBlocks<kRows>) gemv_q4_q5_k_kernel(Matrix w, GemvInput x, float* out, int64_t ldc, float beta) {
  constexpr int kUnroll = 2;
  constexpr int64_t kBlockVectors = kFifthBits ? kQ5_KBlockVectors : kQ4_KBlockVectors;
  constexpr int kFirstNibbles = kFifthBits ? 3 : 1;  // the vector where the nibbles start
  const int lane = threadIdx.x & 31, part = lane & 7, group = part >> 1;
  const int first_value = 64 * group + 16 * (part & 1);  // of the low-nibble run; the high one is 32 later
  const int64_t blocks = w.cols / 256;
  FOR_EACH_ROW(w) {
    const uint4* row_blocks = reinterpret_cast<const uint4*>(w.data) + row * blocks * kBlockVectors;
    float acc[kRows] = {};
    for (int64_t b0 = lane >> 3; b0 < blocks; b0 += 4 * kUnroll) {
      uint4 header[kUnroll], nibbles[kUnroll], fifth[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t b = b0 + 4 * u;
        if (b < blocks) {
          header[u] = __ldcs(row_blocks + b * kBlockVectors);
          nibbles[u] = __ldcs(row_blocks + b * kBlockVectors + kFirstNibbles + part);
          if constexpr (kFifthBits) fifth[u] = __ldcs(row_blocks + b * kBlockVectors + 1 + (part & 1));
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t b = b0 + 4 * u;
        if (b >= blocks) break;
        float low_scale, low_min, high_scale, high_min;
        q4_k_scale_min(header[u], 2 * group, low_scale, low_min);
        q4_k_scale_min(header[u], 2 * group + 1, high_scale, high_min);
        const uint32_t words[4] = {nibbles[u].x, nibbles[u].y, nibbles[u].z, nibbles[u].w};
        int low_q[4], high_q[4];  // the two runs' values, four a word
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          low_q[i] = int(words[i] & 0x0f0f0f0fu);
          high_q[i] = int((words[i] >> 4) & 0x0f0f0f0fu);
          if constexpr (kFifthBits) {
            const uint32_t bits = i == 0 ? fifth[u].x : i == 1 ? fifth[u].y : i == 2 ? fifth[u].z : fifth[u].w;
            low_q[i] |= int(((bits >> (2 * group)) & 0x01010101u) << 4);
            high_q[i] |= int(((bits >> (2 * group + 1)) & 0x01010101u) << 4);
          }
        }
        const int64_t column = b * 256 + first_value;
#pragma unroll
        for (int t = 0; t < kRows; ++t) {
          const RunDots r = run_dots(low_q, high_q, x.quants + t * w.cols + column, 32);
          const float* dx = x.scales + t * (w.cols / 32) + column / 32;
          acc[t] += __ldg(dx) * (low_scale * float(r.low_dot) - low_min * float(r.low_sum)) +
                    __ldg(dx + 1) * (high_scale * float(r.high_dot) - high_min * float(r.high_sum));
        }
      }
    }
    write_rows<kRows>(acc, row, ldc, out, beta);
  }
}

// Q6_K: eight lanes per 256-value block, as Q4_K. Lane part p = 4h + a
// loads low-nibble bytes [64h + 16a, +16) and high-bit bytes [32h + 16(a %
// 2), +16) of the block: with bits 2(a / 2) and 2(a / 2) + 4 of the high
// bytes they make values 16(8h + a) + i (low nibbles) and 64 later (high
// nibbles), i < 16, whose scales are the block's scales 8h + a and 8h + a + 4
// (the layout the CPU's q6_k_scalar states). Per run of 16,
// sum(x * d * scale * (q - 32)) = dx * d * scale * (sum(q * xq) - 32 sum(xq)).
template <int kRows>
__global__ void __launch_bounds__(kThreads, kMinBlocks<kRows>) gemv_q6_k_kernel(Matrix w, GemvInput x, float* out, int64_t ldc, float beta) {
  constexpr int kUnroll = 2;
  const int lane = threadIdx.x & 31, part = lane & 7, half = part >> 2, quarter = part & 3;
  const int high_shift = 2 * (quarter >> 1);
  const int first_value = 128 * half + 16 * quarter;  // of the low-nibble run; the high one is 64 later
  const int64_t blocks = w.cols / 256;
  FOR_EACH_ROW(w) {
    const uint4* row_blocks = reinterpret_cast<const uint4*>(w.data) + row * blocks * kQ6_KBodyVectors;
    const uint16_t* row_d = q6_k_d(w) + row * blocks;
    float acc[kRows] = {};
    for (int64_t b0 = lane >> 3; b0 < blocks; b0 += 4 * kUnroll) {
      uint4 low[kUnroll], high[kUnroll], scales[kUnroll];
      uint16_t d_bits[kUnroll] = {};
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t b = b0 + 4 * u;
        if (b < blocks) {
          const uint4* block = row_blocks + b * kQ6_KBodyVectors;
          low[u] = __ldcs(block + 4 * half + quarter);
          high[u] = __ldcs(block + 8 + 2 * half + (quarter & 1));
          scales[u] = __ldcs(block + 12);
          d_bits[u] = __ldcs(row_d + b);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t b = b0 + 4 * u;
        if (b >= blocks) break;
        const float d = half_value(d_bits[u]);
        const float low_scale = d * vector_byte(scales[u], 8 * half + quarter);
        const float high_scale = d * vector_byte(scales[u], 8 * half + quarter + 4);
        const uint32_t low_words[4] = {low[u].x, low[u].y, low[u].z, low[u].w};
        const uint32_t high_words[4] = {high[u].x, high[u].y, high[u].z, high[u].w};
        int low_q[4], high_q[4];  // 6-bit values, four a word
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          low_q[i] = int(q6_k_values(low_words[i], 0, high_words[i], high_shift));
          high_q[i] = int(q6_k_values(low_words[i], 4, high_words[i], high_shift + 4));
        }
        const int64_t column = b * 256 + first_value;
#pragma unroll
        for (int t = 0; t < kRows; ++t) {
          const RunDots r = run_dots(low_q, high_q, x.quants + t * w.cols + column, 64);
          const float* dx = x.scales + t * (w.cols / 32) + column / 32;
          acc[t] += __ldg(dx) * low_scale * float(r.low_dot - 32 * r.low_sum) +
                    __ldg(dx + 2) * high_scale * float(r.high_dot - 32 * r.high_sum);
        }
      }
    }
    write_rows<kRows>(acc, row, ldc, out, beta);
  }
}

// ---------------------------------------------------------------------------
// Quantized products of 2 to kMaxQuantizedGemvRows input rows on the tensor
// cores (mma.sync, int8 in, int32 out): a block of 8 warps takes 16 weight
// rows, its warps split the columns, and each 16 x 32 weight tile (16 x 16
// for Q6_K, one tile per scale) is multiplied with every input row at once,
// so the weights are read once a step for the whole batch. Each tile's
// integer dots are scaled into fp32 accumulators as gemv's are.
//
// Fragments (PTX ISA, mma.m16n8k32 / m16n8k16 with .s8): lane 4g + t holds
// weight rows g and g + 8 and input row g of an 8-row input tile, and gets
// the dots of weight rows g, g + 8 with input rows 2t, 2t + 1. The order of
// the k slots within a tile is free as long as weights and inputs agree: here
// lane t's slots are the tile's values 8t..8t+7 (k32: slots 4t..4t+3 and
// 16+4t..16+4t+3) or 4t..4t+3 (k16), so every lane loads contiguous bytes.

constexpr int kMmqWarps = 8;
constexpr int kMmqRows = 16;  // weight rows a block takes

__device__ __forceinline__ void mma_k32(const uint32_t (&a)[4], uint32_t b0, uint32_t b1, int (&c)[4]) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
      : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}
__device__ __forceinline__ void mma_k16(uint32_t a0, uint32_t a1, uint32_t b, int (&c)[4]) {
  asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%7,%7,%7};\n"
               : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
               : "r"(a0), "r"(a1), "r"(b), "r"(0));
}

// A lane's view of the input rows: tile i's row it loads (8i + g) and the two
// its results belong to (8i + 2t + e), clamped to the last row (the extra
// results are not written).
struct MmqLane {
  int g, t, n;
  int64_t cols;
  __device__ int load_row(int tile) const { return min(8 * tile + g, n - 1); }
  __device__ int result_row(int tile, int e) const { return min(8 * tile + 2 * t + e, n - 1); }
  // Input scale of the result row's 32-block at column `column`.
  __device__ float input_scale(const GemvInput& x, int tile, int e, int64_t column) const {
    return __ldg(x.scales + result_row(tile, e) * (cols / 32) + column / 32);
  }
};

// acc[i][q]: the dots of (weight row g + 8 (q / 2), input row 8i + 2t + q % 2).

// Q8_0: a unit is one 32-value block: value = d * q. Q8_0M (kOffsets):
// value = d * q + m, so a tile's sum is dx * (d * dot + m * sum of the
// input's int8 values), the sum from a second product with ones.
template <int kTiles, bool kOffsets>
__device__ __forceinline__ void mmq_q8_0_unit(const Matrix& w, const int64_t (&row)[2], int64_t block,
                                              const GemvInput& x, const MmqLane& lane, float (&acc)[kTiles][4]) {
  const int64_t column = 32 * block;
  uint2 q[2];
  float d[2], m[2] = {};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    q[r] = __ldcs(reinterpret_cast<const uint2*>(w.data + row[r] * w.cols + column) + lane.t);
    d[r] = half_value(__ldcs(q8_0_scales(w) + row[r] * (w.cols / 32) + block));
    if constexpr (kOffsets) m[r] = half_value(__ldcs(q8_0m_offsets(w) + row[r] * (w.cols / 32) + block));
  }
  const uint32_t a[4] = {q[0].x, q[1].x, q[0].y, q[1].y};
  constexpr uint32_t kOnesTile[4] = {kOnes, kOnes, kOnes, kOnes};
#pragma unroll
  for (int i = 0; i < kTiles; ++i) {
    const uint2 b = __ldg(reinterpret_cast<const uint2*>(x.quants + lane.load_row(i) * lane.cols + column) + lane.t);
    int dot[4];
    mma_k32(a, b.x, b.y, dot);
    if constexpr (kOffsets) {
      int sum[4];
      mma_k32(kOnesTile, b.x, b.y, sum);
#pragma unroll
      for (int q4 = 0; q4 < 4; ++q4)
        acc[i][q4] += lane.input_scale(x, i, q4 & 1, column) * (d[q4 >> 1] * float(dot[q4]) + m[q4 >> 1] * float(sum[q4]));
    } else {
#pragma unroll
      for (int q4 = 0; q4 < 4; ++q4)
        acc[i][q4] += lane.input_scale(x, i, q4 & 1, column) * d[q4 >> 1] * float(dot[q4]);
    }
  }
}

// Q4_K, and Q5_K (kFifthBits): a unit is one 256-value block. Sub-block j's
// values 8t..8t+7 are the low (j even) or high nibbles of the block's nibble
// bytes 32 (j / 2) + 8t..+7, Q5_K's fifth bits bit j of its fifth-bit bytes
// 8t..+7; value = scale * q - min, so a tile's sum is dx * (scale * dot -
// min * sum of the input's int8 values), the sum from a second product with ones.
template <int kTiles, bool kFifthBits>
__device__ __forceinline__ void mmq_q4_q5_k_unit(const Matrix& w, const int64_t (&row)[2], int64_t block,
                                                 const GemvInput& x, const MmqLane& lane, float (&acc)[kTiles][4]) {
  constexpr int64_t kBlockVectors = kFifthBits ? kQ5_KBlockVectors : kQ4_KBlockVectors;
  constexpr int kFirstNibbles = kFifthBits ? 3 : 1;  // the vector where the nibbles start
  const int64_t blocks = w.cols / 256;
  uint4 header[2];
  uint2 nibbles[2][4], fifth[2] = {};
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint4* b = reinterpret_cast<const uint4*>(w.data) + (row[r] * blocks + block) * kBlockVectors;
    header[r] = __ldcs(b);
#pragma unroll
    for (int pair = 0; pair < 4; ++pair)
      nibbles[r][pair] = __ldcs(reinterpret_cast<const uint2*>(b + kFirstNibbles) + 4 * pair + lane.t);
    if constexpr (kFifthBits) fifth[r] = __ldcs(reinterpret_cast<const uint2*>(b + 1) + lane.t);
  }
  constexpr uint32_t kOnesTile[4] = {kOnes, kOnes, kOnes, kOnes};
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const int shift = 4 * (j & 1);
    const uint2* n0 = &nibbles[0][j / 2];
    const uint2* n1 = &nibbles[1][j / 2];
    uint32_t a[4] = {(n0->x >> shift) & 0x0f0f0f0fu, (n1->x >> shift) & 0x0f0f0f0fu,
                     (n0->y >> shift) & 0x0f0f0f0fu, (n1->y >> shift) & 0x0f0f0f0fu};
    if constexpr (kFifthBits) {
      a[0] |= ((fifth[0].x >> j) & 0x01010101u) << 4;
      a[1] |= ((fifth[1].x >> j) & 0x01010101u) << 4;
      a[2] |= ((fifth[0].y >> j) & 0x01010101u) << 4;
      a[3] |= ((fifth[1].y >> j) & 0x01010101u) << 4;
    }
    float scale[2], min[2];
    q4_k_scale_min(header[0], j, scale[0], min[0]);
    q4_k_scale_min(header[1], j, scale[1], min[1]);
    const int64_t column = block * 256 + 32 * j;
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      const uint2 b = __ldg(reinterpret_cast<const uint2*>(x.quants + lane.load_row(i) * lane.cols + column) + lane.t);
      int dot[4], sum[4];
      mma_k32(a, b.x, b.y, dot);
      mma_k32(kOnesTile, b.x, b.y, sum);
#pragma unroll
      for (int q4 = 0; q4 < 4; ++q4)
        acc[i][q4] += lane.input_scale(x, i, q4 & 1, column) *
                      (scale[q4 >> 1] * float(dot[q4]) - min[q4 >> 1] * float(sum[q4]));
    }
  }
}

// Q6_K: a unit is one 256-value block, in 16 runs of 16 values, one scale
// each. Run s = 8h + 2c + e (h half, c quarter of the half, e which 16):
// values 4t..4t+3 have their low four bits in the low (c < 2) or high
// nibbles of bytes 64h + 32 (c % 2) + 16e + 4t..+3 and their top two bits at
// bit 2c of bytes 128 + 32h + 16e + 4t..+3; value = d * scale * (q - 32).
template <int kTiles>
__device__ __forceinline__ void mmq_q6_k_unit(const Matrix& w, const int64_t (&row)[2], int64_t block,
                                              const GemvInput& x, const MmqLane& lane, float (&acc)[kTiles][4]) {
  const int64_t blocks = w.cols / 256;
  uint32_t low[2][8], high[2][4];
  uint4 scales[2];
  float d[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint8_t* body = w.data + (row[r] * blocks + block) * kQ6_KBodyVectors * 16;
    const uint32_t* words = reinterpret_cast<const uint32_t*>(body);
#pragma unroll
    for (int k = 0; k < 8; ++k) low[r][k] = __ldcs(words + 4 * k + lane.t);  // bytes 16k + 4t
#pragma unroll
    for (int k = 0; k < 4; ++k) high[r][k] = __ldcs(words + 32 + 4 * k + lane.t);
    scales[r] = __ldcs(reinterpret_cast<const uint4*>(body) + 12);
    d[r] = half_value(__ldcs(q6_k_d(w) + row[r] * blocks + block));
  }
#pragma unroll
  for (int s = 0; s < 16; ++s) {
    const int h = s / 8, c = (s % 8) / 2, e = s % 2;
    uint32_t a[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      a[r] = __vsub4(q6_k_values(low[r][4 * h + 2 * (c % 2) + e], 4 * (c / 2), high[r][2 * h + e], 2 * c), 0x20202020u);
    }
    const float scale[2] = {d[0] * vector_byte(scales[0], s), d[1] * vector_byte(scales[1], s)};
    const int64_t column = block * 256 + 16 * s;
#pragma unroll
    for (int i = 0; i < kTiles; ++i) {
      const uint32_t b =
          __ldg(reinterpret_cast<const uint32_t*>(x.quants + lane.load_row(i) * lane.cols + column) + lane.t);
      int dot[4];
      mma_k16(a[0], a[1], b, dot);
#pragma unroll
      for (int q4 = 0; q4 < 4; ++q4)
        acc[i][q4] += lane.input_scale(x, i, q4 & 1, column) * scale[q4 >> 1] * float(dot[q4]);
    }
  }
}

template <MatrixFormat kFormat, int kTiles>
__global__ void __launch_bounds__(kMmqWarps * 32) mmq_kernel(Matrix w, GemvInput x, int n, float* out, int64_t ldc, float beta) {
  __shared__ float partial[kMmqWarps][kTiles * 4][32];
  const int warp = threadIdx.x >> 5, lane_index = threadIdx.x & 31;
  const MmqLane lane{lane_index >> 2, lane_index & 3, n, w.cols};
  const int64_t first_row = int64_t(blockIdx.x) * kMmqRows;
  const int64_t last = w.rows - 1;  // rows past it load the last one and are not written
  const int64_t row[2] = {first_row + lane.g < last ? first_row + lane.g : last,
                          first_row + lane.g + 8 < last ? first_row + lane.g + 8 : last};
  float acc[kTiles][4] = {};
  const int64_t units = kFormat == MatrixFormat::Q8_0 || kFormat == MatrixFormat::Q8_0M ? w.cols / 32 : w.cols / 256;
#pragma unroll 2
  for (int64_t unit = warp; unit < units; unit += kMmqWarps) {
    if constexpr (kFormat == MatrixFormat::Q8_0) mmq_q8_0_unit<kTiles, false>(w, row, unit, x, lane, acc);
    if constexpr (kFormat == MatrixFormat::Q8_0M) mmq_q8_0_unit<kTiles, true>(w, row, unit, x, lane, acc);
    if constexpr (kFormat == MatrixFormat::Q4_K) mmq_q4_q5_k_unit<kTiles, false>(w, row, unit, x, lane, acc);
    if constexpr (kFormat == MatrixFormat::Q5_K) mmq_q4_q5_k_unit<kTiles, true>(w, row, unit, x, lane, acc);
    if constexpr (kFormat == MatrixFormat::Q6_K) mmq_q6_k_unit<kTiles>(w, row, unit, x, lane, acc);
  }
#pragma unroll
  for (int i = 0; i < kTiles; ++i)
#pragma unroll
    for (int q4 = 0; q4 < 4; ++q4) partial[warp][4 * i + q4][lane_index] = acc[i][q4];
  __syncthreads();
  for (int k = threadIdx.x; k < kTiles * 4 * 32; k += kMmqWarps * 32) {
    const int slot = k / 32, holder = k % 32, q4 = slot % 4;
    float sum = 0;
#pragma unroll
    for (int v = 0; v < kMmqWarps; ++v) sum += partial[v][slot][holder];
    const int64_t r = first_row + holder / 4 + 8 * (q4 / 2);
    const int t = 8 * (slot / 4) + 2 * (holder % 4) + q4 % 2;
    if (r < w.rows && t < n) {
      float* o = out + t * ldc + r;
      *o = beta == 0.0f ? sum : sum + beta * *o;
    }
  }
}

template <int kTiles>
void launch_mmq(const Matrix& w, const GemvInput& x, int n, float* out, int64_t ldc, float beta, cudaStream_t stream) {
  const int blocks = int((w.rows + kMmqRows - 1) / kMmqRows);
  switch (w.format) {
    case MatrixFormat::Q8_0:
      mmq_kernel<MatrixFormat::Q8_0, kTiles><<<blocks, kMmqWarps * 32, 0, stream>>>(w, x, n, out, ldc, beta);
      return;
    case MatrixFormat::Q8_0M:
      mmq_kernel<MatrixFormat::Q8_0M, kTiles><<<blocks, kMmqWarps * 32, 0, stream>>>(w, x, n, out, ldc, beta);
      return;
    case MatrixFormat::Q4_K:
      mmq_kernel<MatrixFormat::Q4_K, kTiles><<<blocks, kMmqWarps * 32, 0, stream>>>(w, x, n, out, ldc, beta);
      return;
    case MatrixFormat::Q5_K:
      mmq_kernel<MatrixFormat::Q5_K, kTiles><<<blocks, kMmqWarps * 32, 0, stream>>>(w, x, n, out, ldc, beta);
      return;
    case MatrixFormat::Q6_K:
      mmq_kernel<MatrixFormat::Q6_K, kTiles><<<blocks, kMmqWarps * 32, 0, stream>>>(w, x, n, out, ldc, beta);
      return;
    case MatrixFormat::BF16: return;
  }
}

// Four threads per 32 input values, 8 each; the grid is rounded up to whole
// warps, so every lane reaches quantize_block's shuffles.
template <bool kHalf>
__global__ void quantize_rows_kernel(const uint16_t* x, int64_t count, QuantizedRows out) {
  const int64_t total = (count / 8 + 31) / 32 * 32;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const bool active = i < count / 8;
    float v[8] = {};
    if (active) widen8<kHalf>(reinterpret_cast<const uint4*>(x)[i], v);
    write_quantized_group(v, active, i, out);
  }
}

// The 8 values of w at (row, c0), c0 a multiple of 8, exactly as the CPU
// dequantizes them (Q4_K: fused multiply-subtract, as its AVX2 path).
__device__ __forceinline__ void values8(const Matrix& w, int64_t row, int64_t c0, float v[8]) {
  switch (w.format) {
    case MatrixFormat::BF16:
      widen8<false>(*reinterpret_cast<const uint4*>(w.data + 2 * (row * w.cols + c0)), v);
      return;
    case MatrixFormat::Q8_0:
    case MatrixFormat::Q8_0M: {  // d * q (+ m: q * d is exact, so one rounding as on the CPU)
      const uint2 raw = *reinterpret_cast<const uint2*>(w.data + row * w.cols + c0);
      const float d = half_value(q8_0_scales(w)[row * (w.cols / 32) + c0 / 32]);
      const float m = w.format == MatrixFormat::Q8_0M ? half_value(q8_0m_offsets(w)[row * (w.cols / 32) + c0 / 32]) : 0.f;
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float q = signed_byte(i < 4 ? raw.x : raw.y, i % 4);
        v[i] = w.format == MatrixFormat::Q8_0M ? __fmaf_rn(q, d, m) : q * d;  // (q * d alone keeps the CPU's -0)
      }
      return;
    }
    case MatrixFormat::Q4_K:
    case MatrixFormat::Q5_K: {  // Q5_K: Q4_K's header, fifth bits (bit sub of byte l), nibbles
      const bool fifth_bits = w.format == MatrixFormat::Q5_K;
      const int64_t block_vectors = fifth_bits ? kQ5_KBlockVectors : kQ4_KBlockVectors;
      const uint8_t* block = w.data + (row * (w.cols / 256) + c0 / 256) * block_vectors * 16;
      const int within = int(c0 % 256), sub = within / 32;
      float scale, min;
      q4_k_scale_min(*reinterpret_cast<const uint4*>(block), sub, scale, min);
      const uint8_t* nibbles = block + (fifth_bits ? 48 : 16);
      const uint2 raw = *reinterpret_cast<const uint2*>(nibbles + 32 * (sub / 2) + within % 32);
      const uint2 fifth = fifth_bits ? *reinterpret_cast<const uint2*>(block + 16 + within % 32) : make_uint2(0, 0);
      const int shift = 4 * (sub % 2);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const uint32_t byte = ((i < 4 ? raw.x : raw.y) >> (8 * (i % 4))) & 0xff;
        const uint32_t high = ((i < 4 ? fifth.x : fifth.y) >> (8 * (i % 4) + sub)) & 1;
        v[i] = __fmaf_rn(float(((byte >> shift) & 0x0f) | high << 4), scale, -min);
      }
      return;
    }
    case MatrixFormat::Q6_K: {  // the CPU's q6_k_scalar: (d * scale) * (q - 32)
      const int64_t block_index = row * (w.cols / 256) + c0 / 256;
      const uint8_t* block = w.data + block_index * kQ6_KBodyVectors * 16;
      const int group = int(c0 % 256) / 16, offset = int(c0 % 16);
      const int half = group / 8, quarter = (group % 8) / 2, first = 16 * (group % 2) + offset;
      const uint2 low = *reinterpret_cast<const uint2*>(block + 64 * half + 32 * (quarter % 2) + first);
      const uint2 high = *reinterpret_cast<const uint2*>(block + 128 + 32 * half + first);
      const int low_shift = 4 * (quarter / 2), high_shift = 2 * quarter;
      const float scale = half_value(q6_k_d(w)[block_index]) * float(int8_t(block[192 + group]));
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const uint32_t low_byte = ((i < 4 ? low.x : low.y) >> (8 * (i % 4))) & 0xff;
        const uint32_t high_byte = ((i < 4 ? high.x : high.y) >> (8 * (i % 4))) & 0xff;
        const int q = int((low_byte >> low_shift) & 0x0f) | int((high_byte >> high_shift) & 3) << 4;
        v[i] = __fmul_rn(scale, float(q - 32));
      }
      return;
    }
  }
}

__global__ void dequantize_rows_kernel(Matrix w, int64_t first, int64_t count, uint16_t* out) {
  const int64_t per_row = w.cols / 8, total = count * per_row;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / per_row, c0 = (i % per_row) * 8;
    float v[8];
    values8(w, first + r, c0, v);
    uint4 packed;
    uint32_t* words = reinterpret_cast<uint32_t*>(&packed);
#pragma unroll
    for (int k = 0; k < 4; ++k)
      words[k] = uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(v[2 * k]))) |
                 uint32_t(__bfloat16_as_ushort(__float2bfloat16_rn(v[2 * k + 1]))) << 16;
    reinterpret_cast<uint4*>(out)[i] = packed;
  }
}

__global__ void gather_rows_kernel(Matrix table, const int32_t* rows, float scale, float* x) {
  const int t = blockIdx.x;
  const int64_t row = rows[t];
  for (int64_t c0 = 8 * int64_t(threadIdx.x); c0 < table.cols; c0 += 8 * int64_t(blockDim.x)) {
    float v[8];
    values8(table, row, c0, v);
    float4* dst = reinterpret_cast<float4*>(x + t * table.cols + c0);
    dst[0] = make_float4(v[0] * scale, v[1] * scale, v[2] * scale, v[3] * scale);
    dst[1] = make_float4(v[4] * scale, v[5] * scale, v[6] * scale, v[7] * scale);
  }
}

template <int kRows>
void launch_gemv(const Matrix& w, const GemvInput& x, float* out, int64_t ldc, float beta, cudaStream_t stream) {
  const int blocks = int(std::min<int64_t>((w.rows + kThreads / 32 - 1) / (kThreads / 32), kMaxBlocks));
  switch (w.format) {
    case MatrixFormat::BF16:
      if (x.half)
        gemv_bf16_kernel<kRows, true><<<blocks, kThreads, 0, stream>>>(w, x.x, out, ldc, beta);
      else
        gemv_bf16_kernel<kRows, false><<<blocks, kThreads, 0, stream>>>(w, x.x, out, ldc, beta);
      return;
    case MatrixFormat::Q8_0:
    case MatrixFormat::Q8_0M:
    case MatrixFormat::Q4_K:
    case MatrixFormat::Q5_K:
    case MatrixFormat::Q6_K:
      if constexpr (kRows < kMaxMmqFrom) {
        if (w.format == MatrixFormat::Q8_0)
          gemv_q8_0_kernel<kRows, false><<<blocks, kThreads, 0, stream>>>(w, x, out, ldc, beta);
        if (w.format == MatrixFormat::Q8_0M)
          gemv_q8_0_kernel<kRows, true><<<blocks, kThreads, 0, stream>>>(w, x, out, ldc, beta);
        if (w.format == MatrixFormat::Q4_K)
          gemv_q4_q5_k_kernel<kRows, false><<<blocks, kThreads, 0, stream>>>(w, x, out, ldc, beta);
        if (w.format == MatrixFormat::Q5_K)
          gemv_q4_q5_k_kernel<kRows, true><<<blocks, kThreads, 0, stream>>>(w, x, out, ldc, beta);
        if (w.format == MatrixFormat::Q6_K) gemv_q6_k_kernel<kRows><<<blocks, kThreads, 0, stream>>>(w, x, out, ldc, beta);
      }
      return;
  }
}

void launch_gemv_group(const Matrix& w, const GemvInput& x, int rows, float* out, int64_t ldc, float beta,
                       cudaStream_t stream) {
  switch (rows) {
    case 1: return launch_gemv<1>(w, x, out, ldc, beta, stream);
    case 2: return launch_gemv<2>(w, x, out, ldc, beta, stream);
    case 3: return launch_gemv<3>(w, x, out, ldc, beta, stream);
    case 4: return launch_gemv<4>(w, x, out, ldc, beta, stream);
    case 5: return launch_gemv<5>(w, x, out, ldc, beta, stream);
    case 6: return launch_gemv<6>(w, x, out, ldc, beta, stream);
    case 7: return launch_gemv<7>(w, x, out, ldc, beta, stream);
    case 8: return launch_gemv<8>(w, x, out, ldc, beta, stream);
  }
}

static_assert(kGemvGroup == 8, "launch_gemv_group instantiates groups of 1..8 rows");
static_assert(kMaxMmqFrom <= kGemvGroup, "a quantized matrix's gemv rows fit one group");

}  // namespace

void gemv(const Matrix& w, const GemvInput& x, int64_t n, float* out, int64_t ldc, float beta, cudaStream_t stream) {
  if (w.format != MatrixFormat::BF16 && n >= mmq_from(w.format)) {
    if (n <= 8) return launch_mmq<1>(w, x, int(n), out, ldc, beta, stream);
    if (n <= 16) return launch_mmq<2>(w, x, int(n), out, ldc, beta, stream);
    if (n <= 32) return launch_mmq<4>(w, x, int(n), out, ldc, beta, stream);
    return launch_mmq<8>(w, x, int(n), out, ldc, beta, stream);
  }
  for (int64_t t0 = 0; t0 < n; t0 += kGemvGroup) {
    GemvInput group = x;
    if (group.x) group.x += t0 * w.cols;
    if (group.quants) {
      group.quants += t0 * w.cols;
      group.scales += t0 * (w.cols / 32);
    }
    launch_gemv_group(w, group, int(std::min<int64_t>(kGemvGroup, n - t0)), out + t0 * ldc, ldc, beta, stream);
  }
}

void quantize_rows(const uint16_t* x, bool half_input, int64_t n, int64_t cols, QuantizedRows out,
                   cudaStream_t stream) {
  const int64_t count = n * cols;
  const int blocks = int(std::clamp<int64_t>((count / 8 + 255) / 256, 1, 132 * 16));
  if (half_input)
    quantize_rows_kernel<true><<<blocks, 256, 0, stream>>>(x, count, out);
  else
    quantize_rows_kernel<false><<<blocks, 256, 0, stream>>>(x, count, out);
}

void dequantize_rows(const Matrix& w, int64_t first, int64_t count, uint16_t* out, cudaStream_t stream) {
  const int64_t vectors = count * (w.cols / 8);
  const int blocks = int(std::clamp<int64_t>((vectors + 255) / 256, 1, 132 * 16));
  dequantize_rows_kernel<<<blocks, 256, 0, stream>>>(w, first, count, out);
}

void gather_rows(const Matrix& table, const int32_t* rows, int n, float scale, float* x, cudaStream_t stream) {
  const int threads = int(std::min<int64_t>(256, (table.cols / 8 + 31) / 32 * 32));
  gather_rows_kernel<<<n, threads, 0, stream>>>(table, rows, scale, x);
}

}  // namespace kascade::gpu
