#include "gpu/kv_pool.h"

#include <algorithm>

#include "core/error.h"

namespace kascade::gpu {

KvPool::KvPool(int n_layers, int n_kv_heads, int head_dim, int page_size, int64_t n_pages)
    : page_elements_(int64_t(n_kv_heads) * page_size * head_dim), n_pages_(n_pages) {
  const size_t bytes = size_t(n_pages) * size_t(page_elements_) * 2;
  for (int l = 0; l < n_layers; ++l) {
    keys_.emplace_back(bytes, "KV cache pages (keys)");
    values_.emplace_back(bytes, "KV cache pages (values)");
  }
  for (int64_t p = n_pages - 1; p >= 0; --p) free_.push_back(int(p));
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
  const size_t bytes = size_t(page_elements_) * 2;
  for (const std::vector<DeviceMemory>* pool : {&keys_, &values_})
    for (const DeviceMemory& layer : *pool)
      for (int64_t i = 0; i < n; ++i)
        check(cudaMemcpyAsync(layer.as<uint16_t>() + int64_t(to[size_t(i)]) * page_elements_,
                              layer.as<uint16_t>() + int64_t(from[size_t(i)]) * page_elements_, bytes,
                              cudaMemcpyDeviceToDevice, stream),
              "KV page copy");
}

}  // namespace kascade::gpu
