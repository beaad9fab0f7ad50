// A decoder-only transformer loaded from GGUF (llama, qwen2, qwen3, gemma3),
// and its forward pass over a KV cache.
//
// Data flow of Model::forward, per step (a prefill chunk or one decode token):
//   embed (gemma3: x sqrt(d_model)) -> for each layer: norm, Q/K/V projections
//   (+bias, +Q/K norm), RoPE, append K/V to the cache, attention, output
//   projection (gemma3: + post-attention norm), residual, norm, gated
//   feed-forward (SwiGLU; gemma3: GELU-tanh, + post-FFN norm), residual
//   -> final norm -> logits of the requested last positions (gemma2-style
//   final soft cap when the file sets one).
//
// Attention per layer: a model with sliding-window layers (gemma3: all but
// every 6th) runs those with the sequence's own dense windowed attention
// (attention/sliding_window.h) and its local RoPE; the sequence's strategy
// (dense, Kascade, ...) attends the other, global, layers only. Strategies,
// their shape (Config::attention_shape) and the ForwardObserver number just
// the global layers, 0, 1, ... in model order; for models without local
// layers that is every layer, numbered as in the file. The KV cache keeps
// every position for every layer, local ones included.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "attention/attention.h"
#include "core/memory.h"
#include "gguf/gguf.h"
#include "model/kv_cache.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"

namespace kascade::model {

enum class Architecture { Llama, Qwen2, Qwen3, Gemma3 };

// The gated feed-forward's activation: act(gate) * up.
enum class FeedForward { SwiGlu, GeluTanhGlu };

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
  ops::Rope rope;  // of the global layers (every layer when there are no local ones)
  FeedForward feed_forward = FeedForward::SwiGlu;
  float embedding_scale = 1.0f;  // gemma3: sqrt(d_model)
  // Multiplies the queries so that attention's 1/sqrt(head_dim) becomes the
  // model's 1/sqrt(query_pre_attn_scalar) (gemma3 27B); 1 otherwise.
  float query_scale = 1.0f;
  float final_logit_softcap = 0;  // logits become cap * tanh(logit / cap); 0 = none

  // Local layers (gemma3): layer l is local unless (l + 1) is a multiple of
  // sliding_window_pattern; it attends its last sliding_window keys, rotated
  // with local_rope. sliding_window 0: no local layers.
  int64_t sliding_window = 0;
  int sliding_window_pattern = 0;
  ops::Rope local_rope;

  bool is_local_layer(int layer) const {
    return sliding_window > 0 && (layer + 1) % sliding_window_pattern != 0;
  }
  int n_local_layers() const { return sliding_window > 0 ? n_layers - n_layers / sliding_window_pattern : 0; }
  // The layers the sequence's strategy attends (the global ones).
  kascade::Shape attention_shape() const {
    return {n_layers - n_local_layers(), n_heads, n_kv_heads, head_dim};
  }
  // The local layers, for the sliding-window attention.
  kascade::Shape local_attention_shape() const { return {n_local_layers(), n_heads, n_kv_heads, head_dim}; }
};

// Reads and validates the hyperparameters; throws Error naming the key.
Config read_config(const gguf::File& file);

struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;
  std::vector<float> q_bias, k_bias, v_bias;  // qwen2; empty otherwise
  std::vector<float> q_norm, k_norm;          // qwen3, gemma3 per-head RMSNorm; empty otherwise
  std::vector<float> post_attention_norm, post_ffn_norm;  // gemma3; empty otherwise
  ops::Weight q, k, v, o, gate, up, down;
};

// Every weight of a model: matrices as views of the file's tensors (their
// file encoding), norms and biases as fp32.
struct Weights {
  ops::Weight token_embedding;
  std::vector<float> output_norm;
  ops::Weight output;  // the token embedding when tied
  std::vector<LayerWeights> layers;
};

// Reads and checks every tensor the config needs (shapes, supported types);
// throws Error naming the tensor. The matrices point into `file`.
Weights read_weights(const gguf::File& file, const Config& config);

// Receives per-layer activations during a forward pass (calibration uses it
// for layer importance). Pointers are valid only during the call.
struct ForwardObserver {
  virtual ~ForwardObserver() = default;
  // Global layers only, numbered as the strategy numbers them. residual: the
  // block input x_b; attention_out: what the attention adds to it (after the
  // output projection and any post-attention norm).
  virtual void on_attention_output(int layer, const float* residual, const float* attention_out,
                                   int64_t n_tokens, int d_model) = 0;
};

// Where a sequence's forward time went, accumulated over its steps.
struct TimeSplit {
  double matmul_seconds = 0;     // weight matrix products (incl. logits)
  double attention_seconds = 0;  // the attention strategy
  double total_seconds = 0;      // whole forward passes
};

// The activations of one forward step, [n tokens][width] each, named by
// role. They grow to the largest step a sequence has run and are reused, so
// a decode token allocates nothing.
struct Activations {
  std::vector<float> x, normed, projected;  // d_model wide
  std::vector<float> q, attended;           // n_heads * head_dim
  std::vector<float> k, v;                  // n_kv_heads * head_dim
  std::vector<float> gate, up;              // ffn_dim
  int64_t tokens = 0;                       // rows every buffer holds
};

// One sequence's state: its KV cache, attention strategy, position and
// activation buffers.
struct Sequence {
  KvCache cache;
  std::unique_ptr<attention::Strategy> attention;        // the global layers
  std::unique_ptr<attention::Strategy> local_attention;  // sliding-window layers; null without them
  int64_t n_past = 0;
  TimeSplit time;
  Activations activations;

  void reset() {
    n_past = 0;
    attention->reset();
    if (local_attention) local_attention->reset();
  }
};

class Model {
 public:
  static Model load(const std::string& path);

  const Config& config() const { return config_; }
  const gguf::File& file() const { return file_; }

  // `strategy` attends the global layers (built for config().attention_shape()).
  Sequence new_sequence(int64_t capacity, attention::KvType kv_type,
                        std::unique_ptr<attention::Strategy> strategy) const;

  // Runs `tokens` at positions [seq.n_past, seq.n_past + n) and appends their
  // K/V to the cache. Writes logits [n_logits][vocab] of the last n_logits tokens.
  void forward(Sequence& seq, std::span<const int32_t> tokens, int64_t n_logits, float* logits,
               ForwardObserver* observer = nullptr) const;

  // One decode step of several sequences together: tokens[i] goes to
  // seqs[i] at its next position. The weight products run on all n tokens at
  // once ([n][width] activations in `scratch`, which grows and is reused),
  // so each weight byte is read once per step rather than once per sequence;
  // RoPE, the cache write and attention run per sequence with its own cache
  // and strategy. Writes logits [n][vocab]. Each sequence gets exactly the
  // numbers forward() would give it alone: the products take the per-token
  // path (ops::matmul_per_token) at any batch size, as a lone decode token does.
  void decode(std::span<Sequence* const> seqs, std::span<const int32_t> tokens, float* logits,
              Activations& scratch) const;

  // Prefill in chunks (aligned to the strategy's tile), calling `progress`
  // with tokens done after each chunk; returns the last token's logits.
  std::vector<float> prefill(Sequence& seq, std::span<const int32_t> tokens,
                             const std::function<void(int64_t)>& progress = {},
                             int64_t chunk_size = 512) const;

 private:
  explicit Model(gguf::File file) : file_(std::move(file)) {}

  // Moves the weight matrices from the file mapping into large pages.
  void move_weights_to_large_pages();

  // The products of a step's rows: all rows at once (a prefill chunk), or
  // per token (a batched decode: each row rounds as it would alone).
  using Product = std::function<void(const ops::Weight& weight, const float* in, float* out)>;
  // Writes the rows' K/V (a.k, a.v) into their caches and attends their
  // queries (a.q) into a.attended, for model layer `layer`, numbered
  // `strategy_layer` among the layers of its kind (local or global).
  using Attend = std::function<void(int layer, bool local, int strategy_layer)>;
  // Every layer over the step's rows, row t at position positions[t], from
  // the embeddings in a.x: the attention half (norm, QKV, RoPE, `attend`,
  // output projection, residual) and the feed-forward half (norm, gated FFN,
  // residual). The one layer body of forward and decode.
  void run_layers(std::span<const int64_t> positions, Activations& a, const Product& project, const Attend& attend,
                  ForwardObserver* observer) const;
  // x = the embeddings of the tokens.
  void embed(std::span<const int32_t> tokens, float* x) const;
  // logits = the output head over n rows of x (final norm, product, soft cap).
  void output_head(const float* x, int64_t n, float* normed, const Product& project, float* logits) const;

  gguf::File file_;
  LargePageBuffer weight_pages_;  // the matrices' bytes, which the ops::Weights point into
  Config config_;
  Weights weights_;
};

}  // namespace kascade::model
