// Where the forward pass runs. The generation loop, the eval harness and the
// server drive a Backend: the CPU engine (model::Model) or the GPU engine
// (src/gpu), chosen by --device. A backend owns the weights; each sequence
// it makes owns its KV cache and attention state.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "kascade/options.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace kascade::engine {

// One sequence on a backend.
class BackendSequence {
 public:
  virtual ~BackendSequence() = default;
  virtual int64_t position() const = 0;  // tokens it holds
  virtual int64_t capacity() const = 0;  // tokens it can hold
  virtual uint64_t kv_bytes() const = 0;
  virtual std::string_view attention_name() const = 0;
  // Forward time, split by kind (products, attention), summed over its steps.
  virtual model::TimeSplit time() const = 0;
};

struct SequenceOptions {
  int64_t capacity = 0;
  AttentionOptions attention;  // a Kascade profile already resolved
  attention::KvType kv_type = attention::KvType::F16;  // the CPU's choice; the GPU stores fp16
};

// One layer of a prefill as calibration reads it (kascade calibrate
// --device cuda): host copies in fp32, valid during the call.
struct PrefillLayerView {
  int layer = 0;
  int64_t first_position = 0, n_tokens = 0;
  const float* queries = nullptr;  // [n_tokens][n_heads][head_dim], RoPE applied, not scaled by 1/sqrt(d)
  const float* keys = nullptr;     // [n_kv_heads][key_capacity][head_dim]: positions [0, first_position + n_tokens)
  int64_t key_capacity = 0;
  const float* residual = nullptr;       // [n_tokens][d_model]: the layer's input
  const float* attention_out = nullptr;  // [n_tokens][d_model]: what its attention adds to the input
};
using PrefillObserver = std::function<void(const PrefillLayerView&)>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const model::Config& config() const = 0;
  virtual const gguf::File& file() const = 0;  // metadata, tokenizer, weights fingerprint
  virtual std::string device_name() const = 0;
  // Bytes of weight matrices one decode step reads, as this backend stores
  // them (the embedding is only gathered, unless it is the output matrix too).
  virtual uint64_t decode_weight_bytes() const = 0;
  // Device memory held, by kind (weights, KV cache, buffers); empty when
  // there is nothing beyond the process's own memory (the CPU).
  virtual std::string memory_report() const { return {}; }

  // Throws Error when the options do not fit (capacity, memory, a strategy
  // this backend does not run).
  virtual std::unique_ptr<BackendSequence> new_sequence(const SequenceOptions& options) = 0;
  // Runs tokens after what the sequence holds, in chunks of about chunk_size
  // (progress gets tokens done after each); returns the last token's logits.
  virtual std::vector<float> prefill(BackendSequence& sequence, std::span<const int32_t> tokens,
                                     const std::function<void(int64_t)>& progress, int64_t chunk_size) = 0;
  // One token per sequence in one batched step: logits [n][vocab].
  virtual void decode(std::span<BackendSequence* const> sequences, std::span<const int32_t> tokens,
                      float* logits) = 0;
  // Prefills all of `tokens` into the empty sequence, whose attention must be
  // dense, in one chunk, and shows the observer each layer in order. Backends
  // that do not offer it throw.
  virtual void observe_prefill(BackendSequence& sequence, std::span<const int32_t> tokens,
                               const PrefillObserver& observer) {
    (void)sequence, (void)tokens, (void)observer;
    fail("this device does not show its prefill layer by layer");
  }
  // The sequence's attention prefills densely and keeps no state from it
  // (attention::Strategy::dense_prefill): a dense prefill may be copied in.
  virtual bool dense_prefill(const BackendSequence& sequence) const = 0;
  // Copies every position of `from` into the empty `to` (of the same backend).
  virtual void copy_prefix(BackendSequence& to, const BackendSequence& from) = 0;

  // What a scheduler needs to share the backend among requests.
  //
  // KV memory in tokens: all of it, what live sequences have taken, and what
  // a sequence of `capacity` tokens takes (the GPU rounds up to whole pages).
  // new_sequence fails when kv_tokens_for(capacity) > kv_tokens_free(). A
  // sequence returns its tokens when it is destroyed.
  virtual int64_t kv_tokens_total() const = 0;
  virtual int64_t kv_tokens_free() const = 0;
  virtual int64_t kv_tokens_for(int64_t capacity) const { return capacity; }
  // Lowers the KV memory that sequences may take to `tokens` (a server's
  // --kv-tokens); never raises it above what the backend has.
  virtual void limit_kv_tokens(int64_t tokens) = 0;
  // Prefill continues a sequence that already holds tokens, so a long prompt
  // goes in chunks between other sequences' decode steps. Chunks must start
  // at multiples of this (a Kascade tile):
  virtual int64_t prefill_alignment(const BackendSequence& sequence) const { return 1; }
  // The fewest tokens a chunk should take where the prompt has them (the
  // GPU's products and attention need long chunks to fill the device).
  virtual int64_t min_prefill_chunk() const { return 1; }
  // Sequences with equal keys may share one decode call (the GPU batches only
  // sequences with the same attention settings; the CPU batches any).
  virtual std::string decode_group(const BackendSequence& sequence) const { return {}; }
  // The most sequences one decode call takes.
  virtual int64_t max_decode_batch() const { return INT64_MAX; }
};

// Kascade's decode steps with fewer keys attend densely on the CPU engine
// (below it scoring, selecting and gathering cost more than they save; the
// measurement is in docs/benchmarks.md). AttentionOptions::sparse_from
// overrides it.
inline constexpr int64_t kCpuSparseFrom = 1024;

// What the CPU engine's selecting layers rank keys from: the key sketch's
// integer scorer decodes faster than exact scoring at the same accuracy
// (docs/benchmarks.md). AttentionOptions::scoring overrides it.
inline constexpr Scoring kCpuScoring = Scoring::Sketch;

// The options with the engine's defaults filled in where they are unset.
inline AttentionOptions with_engine_defaults(AttentionOptions options, int64_t sparse_from, Scoring scoring) {
  if (!options.sparse_from) options.sparse_from = sparse_from;
  if (!options.scoring) options.scoring = scoring;
  return options;
}

// The CPU engine over the model at `path`.
std::unique_ptr<Backend> make_cpu_backend(const std::string& path);

}  // namespace kascade::engine
