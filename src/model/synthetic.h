// Synthetic models: a GGUF of a published architecture's shape with seeded
// random weights, for measuring at a model's real scale without downloading
// it (`kascade synth`). Any GGUF reader loads it: llama metadata, every
// tensor of a llama model, and a real tokenizer's metadata copied from
// another GGUF, its vocabulary padded to the preset's size with reserved
// control tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <optional>
#include <string>
#include <string_view>

#include "gguf/gguf.h"
#include "quant/types.h"

namespace kascade::model {

struct SyntheticPreset {
  std::string_view name;
  int n_layers, d_model, n_heads, n_kv_heads, head_dim, ffn_dim, vocab_size;
  int64_t context_length;
  double rope_base;
  bool llama3_rope_scaling;  // Llama 3.1's factor 8 over an 8K original context
};

std::span<const SyntheticPreset> synthetic_presets();
// Throws Error listing the presets when `name` is not one.
const SyntheticPreset& synthetic_preset(std::string_view name);

// The types of a synthetic model's weight matrices (norms stay F32): one type
// throughout (BF16, F16, F32, Q8_0, Q4_K or Q6_K), or llama.cpp's Q4_K_M mix:
// Q4_K, with Q6_K for the output matrix and for attn_v and ffn_down in the
// layers llama.cpp's rule gives more bits (the first and last eighth, and
// every third layer between).
struct SyntheticWeights {
  // Implicit: a TensorType is the one-type case.
  SyntheticWeights(TensorType type, bool q4_k_m_mix = false) : type(type), q4_k_m_mix(q4_k_m_mix) {}
  TensorType type;
  bool q4_k_m_mix;
  // The type of matrix `name` ("attn_v", "ffn_down", "output", ...) of layer `layer` of `n_layers`.
  TensorType type_of(std::string_view name, int layer, int n_layers) const;
};

// By lower-case name ("q4_k", "q4_k_m"); nullopt when `name` is not one.
std::optional<SyntheticWeights> synthetic_weights(std::string_view name);
// Their names, comma-separated, for help and error texts.
std::string synthetic_weight_names();

// Writes the model to `path` (atomically). Weights are uniform with the
// variance 1/fan_in, a pure function of (seed, tensor, element), so any
// slicing of the write gives the same file. `progress` gets bytes written.
void write_synthetic_model(const SyntheticPreset& preset, SyntheticWeights weights, uint64_t seed,
                           const gguf::File& tokenizer_source, const std::string& path,
                           const std::function<void(uint64_t done, uint64_t total)>& progress = {});

}  // namespace kascade::model
