// The key/value cache of one sequence: per layer, keys and values head-major
// ([kv_head][position][head_dim]) so that attention streams each head's keys
// contiguously. fp16 storage halves the bytes decode must read.
#pragma once

#include <cstdint>

#include "attention/attention.h"
#include "core/memory.h"

namespace kascade::model {

class KvCache {
 public:
  KvCache() = default;
  KvCache(int n_layers, int n_kv_heads, int head_dim, int64_t capacity, attention::KvType type);

  int64_t capacity() const { return capacity_; }
  attention::KvType type() const { return type_; }
  uint64_t bytes() const;

  // Stores keys/values [n][n_kv_heads][head_dim] at positions [first_position, first_position + n).
  void write(int layer, int64_t first_position, int64_t n, const float* keys, const float* values);
  // Copies positions [0, n) of every layer from `source`, a cache of the same
  // layers, heads, head size and element type.
  void copy_prefix(const KvCache& source, int64_t n);
  attention::LayerCache layer(int layer) const;

 private:
  uint8_t* layer_keys(int layer) const { return storage_.data() + 2 * size_t(layer) * layer_bytes_; }

  int n_layers_ = 0;
  int n_kv_heads_ = 0;
  int head_dim_ = 0;
  int64_t capacity_ = 0;
  attention::KvType type_ = attention::KvType::F16;
  size_t element_bytes_ = 2;
  size_t layer_bytes_ = 0;  // of keys (or values) of one layer
  LargePageBuffer storage_;  // per layer: keys, then values
};

}  // namespace kascade::model
