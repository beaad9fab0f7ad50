#include "model/kv_cache.h"

#include <immintrin.h>

#include <cstring>

#include "core/error.h"
#include "core/half.h"

namespace kascade::model {
namespace {

void store_f16(uint16_t* dst, const float* src, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

}  // namespace

KvCache::KvCache(int n_layers, int n_kv_heads, int head_dim, int64_t capacity, attention::KvType type)
    : n_layers_(n_layers),
      n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      capacity_(capacity),
      type_(type),
      element_bytes_(type == attention::KvType::F16 ? 2 : 4),
      layer_bytes_(size_t(n_kv_heads) * size_t(capacity) * size_t(head_dim) * element_bytes_),
      storage_(2 * size_t(n_layers) * layer_bytes_) {}

uint64_t KvCache::bytes() const { return storage_.size(); }

void KvCache::write(int layer, int64_t first_position, int64_t n, const float* keys, const float* values) {
  if (first_position + n > capacity_)
    fail("sequence of {} tokens does not fit the KV cache of {} positions", first_position + n, capacity_);
  for (int h = 0; h < n_kv_heads_; ++h) {
    for (int64_t t = 0; t < n; ++t) {
      const size_t element = (size_t(h) * size_t(capacity_) + size_t(first_position + t)) * size_t(head_dim_);
      const float* key = keys + (t * n_kv_heads_ + h) * head_dim_;
      const float* value = values + (t * n_kv_heads_ + h) * head_dim_;
      uint8_t* key_dst = layer_keys(layer) + element * element_bytes_;
      uint8_t* value_dst = key_dst + layer_bytes_;
      if (type_ == attention::KvType::F16) {
        store_f16(reinterpret_cast<uint16_t*>(key_dst), key, head_dim_);
        store_f16(reinterpret_cast<uint16_t*>(value_dst), value, head_dim_);
      } else {
        std::memcpy(key_dst, key, size_t(head_dim_) * sizeof(float));
        std::memcpy(value_dst, value, size_t(head_dim_) * sizeof(float));
      }
    }
  }
}

void KvCache::copy_prefix(const KvCache& source, int64_t n) {
  if (source.n_layers_ != n_layers_ || source.n_kv_heads_ != n_kv_heads_ ||
      source.head_dim_ != head_dim_ || source.type_ != type_)
    fail("KV cache copy between caches of different shapes or element types");
  if (n < 0 || n > source.capacity_ || n > capacity_)
    fail("KV cache copy of {} positions between caches of {} and {}", n, source.capacity_, capacity_);
  const size_t row_bytes = size_t(head_dim_) * element_bytes_;
  for (int layer = 0; layer < n_layers_; ++layer)
    for (size_t half = 0; half < 2; ++half)  // keys, then values
      for (int h = 0; h < n_kv_heads_; ++h)
        std::memcpy(layer_keys(layer) + half * layer_bytes_ + size_t(h) * size_t(capacity_) * row_bytes,
                    source.layer_keys(layer) + half * source.layer_bytes_ +
                        size_t(h) * size_t(source.capacity_) * row_bytes,
                    size_t(n) * row_bytes);
}

attention::LayerCache KvCache::layer(int layer) const {
  return {type_, layer_keys(layer), layer_keys(layer) + layer_bytes_, capacity_};
}

}  // namespace kascade::model
