// A decoder-only transformer loaded from GGUF (llama, qwen2, qwen3), and its
// forward pass over a KV cache.
//
// Data flow of Model::forward, per step (a prefill chunk or one decode token):
//   embed -> for each layer: norm, Q/K/V projections (+bias, +Q/K norm), RoPE,
//   append K/V to the cache, attention (the sequence's strategy), output
//   projection, residual, norm, SwiGLU feed-forward, residual
//   -> final norm -> logits of the requested last positions.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "gguf/gguf.h"
#include "model/kv_cache.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"

namespace kascade::model {

enum class Architecture { Llama, Qwen2, Qwen3 };

struct Config {
  Architecture architecture = Architecture::Llama;
  std::string architecture_name;
  std::string name;
  int n_layers = 0;
  int d_model = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int ffn_dim = 0;
  int vocab_size = 0;
  int64_t context_length = 0;
  float rms_epsilon = 1e-5f;
  ops::Rope rope;

  attention::Shape attention_shape() const { return {n_layers, n_heads, n_kv_heads, head_dim}; }
};

// Reads and validates the hyperparameters; throws Error naming the key.
Config read_config(const gguf::File& file);

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;
  std::vector<float> q_bias, k_bias, v_bias;  // qwen2; empty otherwise
  std::vector<float> q_norm, k_norm;          // qwen3 per-head RMSNorm; empty otherwise
  ops::Weight q, k, v, o, gate, up, down;
};

// Receives per-layer activations during a forward pass (calibration uses it
// for layer importance). Pointers are valid only during the call.
struct ForwardObserver {
  virtual ~ForwardObserver() = default;
  // residual: the block input x_b; attention_out: after the output projection.
  virtual void on_attention_output(int layer, const float* residual, const float* attention_out,
                                   int64_t n_tokens, int d_model) = 0;
};

// Where a sequence's forward time went, accumulated over its steps.
struct TimeSplit {
  double matmul_seconds = 0;     // weight matrix products (incl. logits)
  double attention_seconds = 0;  // the attention strategy
  double total_seconds = 0;      // whole forward passes
};

// One sequence's state: its KV cache, attention strategy and position.
struct Sequence {
  KvCache cache;
  std::unique_ptr<attention::Strategy> attention;
  int64_t n_past = 0;
  TimeSplit time;

  void reset() {
    n_past = 0;
    attention->reset();
  }
};

class Model {
 public:
  static Model load(const std::string& path);

  const Config& config() const { return config_; }
  const gguf::File& file() const { return file_; }

  Sequence new_sequence(int64_t capacity, attention::KvType kv_type,
                        std::unique_ptr<attention::Strategy> strategy) const;

  // Runs `tokens` at positions [seq.n_past, seq.n_past + n) and appends their
  // K/V to the cache. Writes logits [n_logits][vocab] of the last n_logits tokens.
  void forward(Sequence& seq, std::span<const int32_t> tokens, int64_t n_logits, float* logits,
               ForwardObserver* observer = nullptr) const;

  // Prefill in chunks (aligned to the strategy's tile), calling `progress`
  // with tokens done after each chunk; returns the last token's logits.
  std::vector<float> prefill(Sequence& seq, std::span<const int32_t> tokens,
                             const std::function<void(int64_t)>& progress = {},
                             int64_t chunk_size = 512) const;

 private:
  explicit Model(gguf::File file) : file_(std::move(file)) {}

  gguf::File file_;
  Config config_;
  ops::Weight token_embedding_;
  std::vector<float> output_norm_;
  ops::Weight output_;  // the token embedding when tied
  std::vector<LayerWeights> layers_;
};

}  // namespace kascade::model
