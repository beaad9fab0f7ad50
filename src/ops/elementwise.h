// Per-token vector operations of the transformer block. Row-major [n][dim].
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kascade::ops {

// out[t] = x[t] / rms(x[t]) * weight, for n rows of `dim`.
void rms_norm(const float* x, const float* weight, float* out, int64_t n, int64_t dim, float epsilon);

// x[t] += y[t] elementwise over n * dim values.
void add_in_place(float* x, const float* y, int64_t count);

// gate = silu(gate) * up, elementwise (the SwiGLU feed-forward's middle).
void silu_multiply(float* gate, const float* up, int64_t count);

// gate = gelu_tanh(gate) * up, elementwise (Gemma's gated feed-forward), with
// GELU's tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_tanh_multiply(float* gate, const float* up, int64_t count);

// x[i] *= factor over count values.
void scale(float* x, float factor, int64_t count);

// x[i] = cap * tanh(x[i] / cap) over count values (logit soft-capping), cap > 0.
void soft_cap(float* x, float cap, int64_t count);

// x[t][i] += bias[i] for n rows of `dim`.
void add_bias(float* x, const float* bias, int64_t n, int64_t dim);

enum class RopeStyle {
  Interleaved,  // rotates pairs (2i, 2i+1): GGUF llama (its Q/K weights are permuted to match)
  Neox,         // rotates pairs (i, i + rope_dim/2): qwen2, qwen3
};

// Rotary position embedding tables: inverse frequencies per pair, already
// divided by any per-frequency factors (llama3 scaling) and position scale.
struct Rope {
  RopeStyle style = RopeStyle::Interleaved;
  int rope_dim = 0;  // leading dimensions of each head that rotate
  std::vector<float> inverse_frequencies;  // rope_dim / 2 values

  // Rotates `n_heads` heads of `head_dim` of each row t at position positions[t].
  void apply(float* x, std::span<const int64_t> positions, int n_heads, int head_dim) const;
};

}  // namespace kascade::ops
