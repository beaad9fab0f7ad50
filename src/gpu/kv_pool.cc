#include "gpu/kv_pool.h"

#include <algorithm>

#include "core/error.h"

namespace kascade::gpu {

namespace {

// Per page and layer: the sketch's codes (bytes) and lo/step (fp16 elements).
int64_t code_bytes(int n_kv_heads, int head_dim, int page_size) { return int64_t(n_kv_heads) * page_size * head_dim / 2; }
int64_t param_elements(int n_kv_heads, int head_dim, int page_size) {
  return int64_t(n_kv_heads) * (page_size / 64) * 2 * head_dim;
}

}  // namespace

KvPool::KvPool(int n_layers, int n_kv_heads, int head_dim, int page_size, int64_t n_pages)
    : n_kv_heads_(n_kv_heads),
      head_dim_(head_dim),
      page_size_(page_size),
      page_elements_(int64_t(n_kv_heads) * page_size * head_dim),
      n_pages_(n_pages) {
  if (page_size % 64 != 0) fail("KV page size {} is not a multiple of the key sketch's 64 positions", page_size);
  const size_t bytes = size_t(n_pages) * size_t(page_elements_) * 2;
  std::vector<const void*> layer_keys;
  std::vector<cuda::KeySketch> layer_sketches;
  for (int l = 0; l < n_layers; ++l) {
    keys_.emplace_back(bytes, "KV cache pages (keys)");
    values_.emplace_back(bytes, "KV cache pages (values)");
    sketch_codes_.emplace_back(size_t(n_pages * code_bytes(n_kv_heads, head_dim, page_size)), "key sketch pages");
    sketch_params_.emplace_back(size_t(n_pages * param_elements(n_kv_heads, head_dim, page_size)) * 2,
                                "key sketch pages");
    layer_keys.push_back(keys_.back().data());
    layer_sketches.push_back(sketch(l));
  }
  layer_keys_ = upload(layer_keys, "key sketch layer table");
  layer_sketches_ = upload(layer_sketches, "key sketch layer table");
  for (int64_t p = n_pages - 1; p >= 0; --p) free_.push_back(int(p));
}

uint64_t KvPool::page_bytes(int n_layers, int n_kv_heads, int head_dim, int page_size) {
  const uint64_t kv = uint64_t(n_kv_heads) * page_size * head_dim * 2 * 2;
  const uint64_t sketch = uint64_t(code_bytes(n_kv_heads, head_dim, page_size)) +
                          uint64_t(param_elements(n_kv_heads, head_dim, page_size)) * 2;
  return (kv + sketch) * uint64_t(n_layers);
}

cuda::KeySketch KvPool::sketch(int layer) const {
  return {sketch_codes_[size_t(layer)].as<uint8_t>(), sketch_params_[size_t(layer)].as<uint16_t>()};
}

int64_t KvPool::free_pages() const { return std::max<int64_t>(0, int64_t(free_.size()) - withheld_); }

void KvPool::limit(int64_t pages) { withheld_ = n_pages_ - std::clamp<int64_t>(pages, 0, n_pages_); }

std::vector<int> KvPool::take(int64_t n) {
  if (n > free_pages())
    fail("the KV cache has {} free pages ({}), a sequence needs {}: end other sequences or ask for less context",
         free_pages(), gib(uint64_t(free_pages()) * page_bytes()), n);
  std::vector<int> pages(free_.end() - n, free_.end());
  free_.resize(free_.size() - size_t(n));
  return pages;
}

void KvPool::give_back(const std::vector<int>& pages) { free_.insert(free_.end(), pages.begin(), pages.end()); }

void KvPool::copy(const std::vector<int>& to, const std::vector<int>& from, int64_t n, cudaStream_t stream) const {
  const auto copy_pages = [&](const std::vector<DeviceMemory>& pool, size_t page_bytes) {
    for (const DeviceMemory& layer : pool)
      for (int64_t i = 0; i < n; ++i)
        check(cudaMemcpyAsync(layer.as<uint8_t>() + size_t(to[size_t(i)]) * page_bytes,
                              layer.as<uint8_t>() + size_t(from[size_t(i)]) * page_bytes, page_bytes,
                              cudaMemcpyDeviceToDevice, stream),
              "KV page copy");
  };
  copy_pages(keys_, size_t(page_elements_) * 2);
  copy_pages(values_, size_t(page_elements_) * 2);
  copy_pages(sketch_codes_, size_t(code_bytes(n_kv_heads_, head_dim_, page_size_)));
  copy_pages(sketch_params_, size_t(param_elements(n_kv_heads_, head_dim_, page_size_)) * 2);
}

}  // namespace kascade::gpu
