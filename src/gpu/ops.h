// The elementwise steps of the forward pass on the GPU, beside the products
// (gpu/matrix.h, gpu/gemm.h) and the attention kernels (cuda/kascade_cuda.h). Each mirrors
// its CPU twin in ops/elementwise.h (same formulas, fp32 arithmetic; RoPE
// angles in double as on the CPU); tests/gpu compares them. Plain C++
// declarations: the kernels live in ops.cu. bf16 and fp16 tensors are passed
// as their raw 16-bit patterns (uint16_t).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/matrix.h"

namespace kascade::gpu {

// out[t] = bf16(x[t] * weight / sqrt(mean(x[t]^2) + epsilon)) for n rows of dim.
void rms_norm(const float* x, const float* weight, int n, int dim, float epsilon, uint16_t* out,
              cudaStream_t stream);

// rms_norm in place on fp32 rows (Gemma's post-attention and post-FFN norms).
void rms_norm_in_place(float* x, const float* weight, int n, int dim, float epsilon, cudaStream_t stream);

// rms_norm's bf16 values, quantized for a quantized product (quantize_rows'
// bits) in the same pass: decode's norm and its product's input in one
// kernel. dim a multiple of 32.
void rms_norm_quantized(const float* x, const float* weight, int n, int dim, float epsilon, QuantizedRows out,
                        cudaStream_t stream);

// From the fused QKV product to attention's inputs, one step per token: bias,
// per-head Q/K RMSNorm, RoPE and the query scale on Q and K, then Q to its
// fp16 buffer and K/V to the fp16 paged cache (and to a contiguous copy for a
// prefill's attention).
struct QkvStep {
  const float* qkv = nullptr;  // [n][q_dim + 2 * kv_dim], Q then K then V
  int n = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  const float *q_bias = nullptr, *k_bias = nullptr, *v_bias = nullptr;  // optional
  const float *q_norm = nullptr, *k_norm = nullptr;                     // optional, [head_dim]
  float norm_epsilon = 1e-6f;
  const float* inverse_frequencies = nullptr;  // [rope_dim / 2]
  int rope_dim = 0;
  bool interleaved_rope = true;  // pairs (2i, 2i+1); false: (i, i + rope_dim / 2)
  float query_scale = 1.0f;
  const int* positions = nullptr;  // [n]
  uint16_t* queries = nullptr;     // fp16 [n][n_heads][head_dim]
  // Paged cache, fp16 [page][n_kv_heads][page_size][head_dim]; token t writes
  // position positions[t] of sequence sequence_of[t] (null: all sequence 0)
  // through page_table[sequence * page_table_stride + position / page_size].
  uint16_t *key_pages = nullptr, *value_pages = nullptr;
  const int* page_table = nullptr;
  int64_t page_table_stride = 0;
  int page_shift = 0;
  const int* sequence_of = nullptr;
  // Optional contiguous copy, fp16 [n_kv_heads][contiguous_capacity][head_dim],
  // row positions[t] (a prefill's keys and values for the prefill kernels).
  uint16_t *contiguous_keys = nullptr, *contiguous_values = nullptr;
  int64_t contiguous_capacity = 0;
};
void qkv_step(const QkvStep& step, cudaStream_t stream);

// One sequence's keys and values in one layer's pool of fp16 pages
// [page][n_kv_heads][page_size][head_dim], page_size = 1 << page_shift.
struct PagedKv {
  const uint16_t *key_pages = nullptr, *value_pages = nullptr;
  const int* page_table = nullptr;  // the sequence's pages, in order
  int page_shift = 0, n_kv_heads = 0, head_dim = 0;
};
// Positions [0, n) into the contiguous layout [n_kv_heads][capacity][head_dim]
// the prefill kernels read: a chunk's earlier positions.
void gather_kv_pages(const PagedKv& kv, int64_t n, uint16_t* keys, uint16_t* values, int64_t capacity,
                     cudaStream_t stream);

// out[t][i] = bf16(act(gate_up[t][i]) * gate_up[t][ffn + i]), act SiLU (or
// GELU-tanh), for n rows of the fused gate/up product [n][2 * ffn].
void gated_activation(const float* gate_up, int n, int ffn, bool gelu, uint16_t* out, cudaStream_t stream);
// The same bf16 values, quantized as quantize_rows would (ffn a multiple of 32).
void gated_activation_quantized(const float* gate_up, int n, int ffn, bool gelu, QuantizedRows out,
                                cudaStream_t stream);

// out[i] = bf16(float(in[i])), in fp16: the attention output into the next product.
void half_to_bfloat(const uint16_t* in, int64_t count, uint16_t* out, cudaStream_t stream);

// x[i] = cap * tanh(x[i] / cap) (final logit soft-capping).
void soft_cap(float* x, int64_t count, float cap, cudaStream_t stream);

}  // namespace kascade::gpu
