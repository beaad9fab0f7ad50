// The attention step of the forward pass, behind one interface.
//
// The model calls Strategy::forward once per layer per step (a prefill chunk
// or one decode token), in layer order, after it has written this step's keys
// and values into the layer's cache. A strategy turns the step's queries into
// attention outputs; strategies with cross-layer state (Kascade anchors and
// their index sets) keep it inside the strategy object, which belongs to one
// sequence, exactly as the KV cache does.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kascade/plan.h"

namespace kascade::attention {

enum class KvType { F32, F16 };

using kascade::Shape;

// One layer's key/value cache, head-major: element i of the key of KV head h
// at position p is keys[(h * capacity + p) * head_dim + i] (same for values),
// stored as fp32 or fp16 according to `type`.
struct LayerCache {
  KvType type = KvType::F32;
  const void* keys = nullptr;
  const void* values = nullptr;
  int64_t capacity = 0;
};

using kascade::Phase;

struct Step {
  int layer = 0;
  Phase phase = Phase::Prefill;
  // [n_queries][n_heads][head_dim], RoPE applied, not yet scaled by 1/sqrt(d).
  const float* queries = nullptr;
  int64_t n_queries = 0;
  // Absolute position of queries[0]; the cache holds positions
  // [0, first_position + n_queries) and query q sees keys [0, first_position + q].
  int64_t first_position = 0;
  LayerCache cache;
  // [n_queries][n_heads][head_dim]; every element is written.
  float* output = nullptr;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string_view name() const = 0;
  // Prefill chunks must start at multiples of this many positions (a Kascade
  // query tile); the model rounds its chunk size to it. Dense returns 1.
  virtual int64_t prefill_alignment() const { return 1; }
  // Forget all cross-layer state: a new sequence starts at position 0.
  virtual void reset() {}
  // True when prefill steps attend densely and leave no state that later
  // steps read, so a sequence prefilled with dense attention can continue
  // with this strategy (the eval harness shares one prefill among them).
  virtual bool dense_prefill() const { return false; }
  virtual void forward(const Step& step) = 0;
  // Diagnostics (off the fast path): the keys, ascending, that query q of the
  // step just passed to forward() attended with query head `head`. The
  // default, dense, is every key up to the query's position.
  virtual void kept_keys(const Step& step, int64_t q, int head, std::vector<int32_t>& keys) const;
};

std::unique_ptr<Strategy> make_dense(const Shape& shape);

// What one layer's attention kept at one step, measured against dense.
struct LayerReport {
  int layer = 0;
  Phase phase = Phase::Prefill;
  int64_t first_position = 0;
  int64_t n_queries = 0;
  double mean_kept_mass = 0;  // dense softmax mass on the kept keys, mean over rows and heads
  double min_kept_mass = 0;   // ... and its minimum
  double mean_kept_keys = 0;  // keys attended, mean over rows and heads
  double relative_error = 0;  // ||out - dense|| / ||dense|| over the step's outputs
};

class Observer {
 public:
  virtual ~Observer() = default;
  virtual void on_layer(const LayerReport& report) = 0;
};

// Wraps a strategy so that each forward() is also compared with dense
// attention and reported to `observer` (several times slower: for reports).
std::unique_ptr<Strategy> with_diagnostics(std::unique_ptr<Strategy> inner, const Shape& shape,
                                           Observer& observer);

}  // namespace kascade::attention
