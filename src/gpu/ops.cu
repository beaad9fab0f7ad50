// Kernels of gpu/ops.h: memory-bound steps, one row (token) per block where a
// row needs a reduction, grid-strided loops elsewhere.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "gpu/ops.h"
#include "gpu/quantize_block.cuh"

namespace kascade::gpu {
namespace {

constexpr int kRowThreads = 256;

__device__ __forceinline__ uint16_t to_bf16(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
__device__ __forceinline__ uint16_t to_f16(float x) { return __half_as_ushort(__float2half_rn(x)); }
// x rounded to bf16, as a float.
__device__ __forceinline__ float bf16_value(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// Sum of `value` over the block (every thread gets it); `scratch` holds one float per warp.
__device__ float block_sum(float value, float* scratch) {
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(0xffffffffu, value, offset);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  float total = 0;
  for (int w = 0; w < int(blockDim.x >> 5); ++w) total += scratch[w];
  __syncthreads();  // scratch is reused by the next call
  return total;
}

enum class NormOutput { InPlace, Bf16, Quantized };
struct NormTarget {
  uint16_t* bf16 = nullptr;
  QuantizedRows quantized;
};

// One row per block; every thread loads its float4s once, into registers
// (all issued before any is used), for both the sum and the scaled write.
// Consecutive threads hold consecutive float4s, so 8 of them hold a
// 32-value block of the quantized output.
template <NormOutput kOut, int kVectors>
__global__ void rms_norm_kernel(float* x, const float* weight, int dim, float epsilon, NormTarget out) {
  __shared__ float scratch[1024 / 32];
  float4* row = reinterpret_cast<float4*>(x + int64_t(blockIdx.x) * dim);
  const int vectors = dim / 4;
  float4 v[kVectors];
  float squares = 0;
#pragma unroll
  for (int i = 0; i < kVectors; ++i) {
    const int at = threadIdx.x + i * blockDim.x;
    v[i] = at < vectors ? row[at] : make_float4(0, 0, 0, 0);
  }
#pragma unroll
  for (int i = 0; i < kVectors; ++i) squares += v[i].x * v[i].x + v[i].y * v[i].y + v[i].z * v[i].z + v[i].w * v[i].w;
  const float scale = rsqrtf(block_sum(squares, scratch) / float(dim) + epsilon);
  const float4* w = reinterpret_cast<const float4*>(weight);
#pragma unroll
  for (int i = 0; i < kVectors; ++i) {
    const int at = threadIdx.x + i * blockDim.x;
    const bool active = at < vectors;  // no lane leaves early: the quantized output shuffles
    const float4 g = active ? w[at] : make_float4(0, 0, 0, 0);
    const float4 y = make_float4(v[i].x * scale * g.x, v[i].y * scale * g.y, v[i].z * scale * g.z, v[i].w * scale * g.w);
    if constexpr (kOut == NormOutput::InPlace) {
      if (active) row[at] = y;
    } else if constexpr (kOut == NormOutput::Bf16) {
      if (active) {
        uint2 packed;
        packed.x = uint32_t(to_bf16(y.x)) | (uint32_t(to_bf16(y.y)) << 16);
        packed.y = uint32_t(to_bf16(y.z)) | (uint32_t(to_bf16(y.w)) << 16);
        reinterpret_cast<uint2*>(out.bf16 + int64_t(blockIdx.x) * dim)[at] = packed;
      }
    } else {
      const float values[4] = {bf16_value(y.x), bf16_value(y.y), bf16_value(y.z), bf16_value(y.w)};
      uint32_t packed[1];
      const float d = quantize_block<4>(values, packed);
      if (active) {
        const int64_t first = int64_t(blockIdx.x) * dim + 4 * at;
        *reinterpret_cast<uint32_t*>(out.quantized.quants + first) = packed[0];
        if ((at & 7) == 0) out.quantized.scales[first / 32] = d;
      }
    }
  }
}

template <NormOutput kOut>
void launch_rms_norm(float* x, const float* weight, int n, int dim, float epsilon, NormTarget out,
                     cudaStream_t stream) {
  const int vectors = dim / 4;
  const int threads = std::min(1024, (vectors + 31) / 32 * 32);
  const int per_thread = (vectors + threads - 1) / threads;
  if (per_thread <= 1) rms_norm_kernel<kOut, 1><<<n, threads, 0, stream>>>(x, weight, dim, epsilon, out);
  else if (per_thread <= 2) rms_norm_kernel<kOut, 2><<<n, threads, 0, stream>>>(x, weight, dim, epsilon, out);
  else if (per_thread <= 4) rms_norm_kernel<kOut, 4><<<n, threads, 0, stream>>>(x, weight, dim, epsilon, out);
  else rms_norm_kernel<kOut, 8><<<n, threads, 0, stream>>>(x, weight, dim, epsilon, out);  // dim <= 32768
}

// One token per block: its Q, K and V row in shared memory through every step.
__global__ void qkv_kernel(QkvStep p) {
  extern __shared__ float row[];
  const int t = blockIdx.x, d = p.head_dim;
  const int q_dim = p.n_heads * d, kv_dim = p.n_kv_heads * d, width = q_dim + 2 * kv_dim;
  const float* in = p.qkv + int64_t(t) * width;
  for (int i = threadIdx.x; i < width; i += blockDim.x) {
    float value = in[i];
    if (p.q_bias) {
      if (i < q_dim) value += p.q_bias[i];
      else if (i < q_dim + kv_dim) value += p.k_bias[i - q_dim];
      else value += p.v_bias[i - q_dim - kv_dim];
    }
    row[i] = value;
  }
  __syncthreads();

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  const int rotated_heads = p.n_heads + p.n_kv_heads;  // Q heads, then K heads
  if (p.q_norm) {  // per-head RMSNorm of Q and K, one warp per head
    for (int head = warp; head < rotated_heads; head += warps) {
      float* x = row + head * d;
      const float* weight = head < p.n_heads ? p.q_norm : p.k_norm;
      float squares = 0;
      for (int i = lane; i < d; i += 32) squares += x[i] * x[i];
      for (int offset = 16; offset > 0; offset >>= 1) squares += __shfl_xor_sync(0xffffffffu, squares, offset);
      const float scale = rsqrtf(squares / float(d) + p.norm_epsilon);
      __syncwarp();
      for (int i = lane; i < d; i += 32) x[i] = x[i] * scale * weight[i];
    }
    __syncthreads();
  }

  // RoPE on every (head, pair): the pair's angle once (in double, as on the
  // CPU), then every head's rotation.
  const int pairs = p.rope_dim / 2;
  float* cosines = row + width;
  float* sines = cosines + pairs;
  const double position = double(p.positions[t]);
  for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
    double sine, cosine;
    sincos(position * double(p.inverse_frequencies[i]), &sine, &cosine);
    cosines[i] = float(cosine);
    sines[i] = float(sine);
  }
  __syncthreads();
  for (int item = threadIdx.x; item < rotated_heads * pairs; item += blockDim.x) {
    const int head = item / pairs, i = item % pairs;
    float* x = row + head * d;
    const int a = p.interleaved_rope ? 2 * i : i, b = p.interleaved_rope ? 2 * i + 1 : i + pairs;
    const float x0 = x[a], x1 = x[b], c = cosines[i], s = sines[i];
    x[a] = x0 * c - x1 * s;
    x[b] = x0 * s + x1 * c;
  }
  __syncthreads();

  uint16_t* queries = p.queries + int64_t(t) * q_dim;
  for (int i = threadIdx.x; i < q_dim; i += blockDim.x) queries[i] = to_f16(row[i] * p.query_scale);
  const int pos = p.positions[t];
  const int sequence = p.sequence_of ? p.sequence_of[t] : 0;
  const int64_t page = p.page_table[int64_t(sequence) * p.page_table_stride + (pos >> p.page_shift)];
  const int in_page = pos & ((1 << p.page_shift) - 1);
  for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
    const int h = i / d, c = i % d;
    const uint16_t key = to_f16(row[q_dim + i]), value = to_f16(row[q_dim + kv_dim + i]);
    const int64_t at = (((page * p.n_kv_heads + h) << p.page_shift) + in_page) * d + c;
    p.key_pages[at] = key;
    p.value_pages[at] = value;
    if (p.contiguous_keys) {
      const int64_t flat = (int64_t(h) * p.contiguous_capacity + pos) * d + c;
      p.contiguous_keys[flat] = key;
      p.contiguous_values[flat] = value;
    }
  }
}

__device__ __forceinline__ float gated_value(float g, float u, bool gelu) {
  if (gelu) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    return 0.5f * g * (1.0f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g))) * u;
  }
  return g / (1.0f + expf(-g)) * u;
}

__global__ void gated_kernel(const float* gate_up, int n, int ffn, bool gelu, uint16_t* out) {
  const int64_t count = int64_t(n) * ffn;
  for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count; idx += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = idx / ffn, i = idx % ffn;
    out[idx] = to_bf16(gated_value(gate_up[t * 2 * ffn + i], gate_up[t * 2 * ffn + ffn + i], gelu));
  }
}

// Eight values per thread, four threads per 32-value block; the grid is
// rounded up to whole warps, so every lane reaches quantize_block's shuffles.
__global__ void gated_quantized_kernel(const float* gate_up, int n, int ffn, bool gelu, QuantizedRows out) {
  const int64_t groups = int64_t(n) * ffn / 8, total = (groups + 31) / 32 * 32;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const bool active = i < groups;
    float v[8] = {};
    if (active) {
      const int64_t t = 8 * i / ffn, c0 = 8 * i % ffn;
      const float* gate = gate_up + t * 2 * ffn + c0;
#pragma unroll
      for (int k = 0; k < 8; ++k) v[k] = bf16_value(gated_value(gate[k], gate[ffn + k], gelu));
    }
    write_quantized_group(v, active, i, out);
  }
}

__global__ void half_to_bfloat_kernel(const uint16_t* in, int64_t count, uint16_t* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = to_bf16(__half2float(__ushort_as_half(in[i])));
}

__global__ void soft_cap_kernel(float* x, int64_t count, float cap) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = cap * tanhf(x[i] / cap);
}

// One thread per 16 bytes (8 values) of a position's head row, keys and values.
__global__ void gather_kv_pages_kernel(PagedKv kv, int64_t n, uint16_t* keys, uint16_t* values, int64_t capacity) {
  const int vectors = kv.head_dim / 8;
  const int64_t total = int64_t(kv.n_kv_heads) * n * vectors, page_mask = (int64_t(1) << kv.page_shift) - 1;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int v = int(i % vectors);
    const int64_t position = (i / vectors) % n;
    const int head = int(i / vectors / n);
    const int64_t page = kv.page_table[position >> kv.page_shift];
    const int64_t from = ((page * kv.n_kv_heads + head) << kv.page_shift | (position & page_mask)) * kv.head_dim;
    const int64_t to = (head * capacity + position) * kv.head_dim;
    reinterpret_cast<uint4*>(keys + to)[v] = reinterpret_cast<const uint4*>(kv.key_pages + from)[v];
    reinterpret_cast<uint4*>(values + to)[v] = reinterpret_cast<const uint4*>(kv.value_pages + from)[v];
  }
}

int stride_blocks(int64_t count) { return int(std::min<int64_t>((count + 255) / 256, 132 * 16)); }

}  // namespace

void rms_norm(const float* x, const float* weight, int n, int dim, float epsilon, uint16_t* out,
              cudaStream_t stream) {
  launch_rms_norm<NormOutput::Bf16>(const_cast<float*>(x), weight, n, dim, epsilon, {.bf16 = out}, stream);
}

void rms_norm_quantized(const float* x, const float* weight, int n, int dim, float epsilon, QuantizedRows out,
                        cudaStream_t stream) {
  launch_rms_norm<NormOutput::Quantized>(const_cast<float*>(x), weight, n, dim, epsilon, {.quantized = out}, stream);
}

void rms_norm_in_place(float* x, const float* weight, int n, int dim, float epsilon, cudaStream_t stream) {
  launch_rms_norm<NormOutput::InPlace>(x, weight, n, dim, epsilon, {}, stream);
}

void qkv_step(const QkvStep& step, cudaStream_t stream) {
  // The token's row, then the rotation's cosines and sines.
  const size_t bytes = (size_t(step.n_heads + 2 * step.n_kv_heads) * step.head_dim + step.rope_dim) * sizeof(float);
  if (bytes > 48 * 1024) cudaFuncSetAttribute(qkv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
  // Few tokens (decode): wide blocks, so that each thread's loads are few.
  qkv_kernel<<<step.n, step.n <= 64 ? 1024 : kRowThreads, bytes, stream>>>(step);
}

void gather_kv_pages(const PagedKv& kv, int64_t n, uint16_t* keys, uint16_t* values, int64_t capacity,
                     cudaStream_t stream) {
  gather_kv_pages_kernel<<<stride_blocks(int64_t(kv.n_kv_heads) * n * (kv.head_dim / 8)), 256, 0, stream>>>(
      kv, n, keys, values, capacity);
}

void gated_activation(const float* gate_up, int n, int ffn, bool gelu, uint16_t* out, cudaStream_t stream) {
  gated_kernel<<<stride_blocks(int64_t(n) * ffn), 256, 0, stream>>>(gate_up, n, ffn, gelu, out);
}

void gated_activation_quantized(const float* gate_up, int n, int ffn, bool gelu, QuantizedRows out,
                                cudaStream_t stream) {
  gated_quantized_kernel<<<stride_blocks((int64_t(n) * ffn / 8 + 31) / 32 * 32), 256, 0, stream>>>(gate_up, n, ffn,
                                                                                                   gelu, out);
}

void half_to_bfloat(const uint16_t* in, int64_t count, uint16_t* out, cudaStream_t stream) {
  half_to_bfloat_kernel<<<stride_blocks(count), 256, 0, stream>>>(in, count, out);
}

void soft_cap(float* x, int64_t count, float cap, cudaStream_t stream) {
  soft_cap_kernel<<<stride_blocks(count), 256, 0, stream>>>(x, count, cap);
}

}  // namespace kascade::gpu
