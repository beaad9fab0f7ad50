// The GPU engine's paged KV cache: per layer a pool of fp16 pages
// [page][n_kv_heads][page_size][head_dim] for keys and one for values, and
// the keys' 4-bit sketch in pages of the same indices (cuda/kascade_cuda.h,
// KeySketch: about a quarter of the keys' bytes, what Kascade's selecting layers
// rank keys from). A sequence holds a list of pages (the same indices in
// every layer) and gives them back when it ends; the decode kernels read
// through that page table.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "cuda/kascade_cuda.h"
#include "gpu/device.h"

namespace kascade::gpu {

class KvPool {
 public:
  KvPool(int n_layers, int n_kv_heads, int head_dim, int page_size, int64_t n_pages);

  uint16_t* keys(int layer) const { return keys_[size_t(layer)].as<uint16_t>(); }
  uint16_t* values(int layer) const { return values_[size_t(layer)].as<uint16_t>(); }
  cuda::KeySketch sketch(int layer) const;
  // Device arrays [layer] of keys(l) and sketch(l), for sketch_keys.
  const void* const* device_layer_keys() const { return layer_keys_.as<const void*>(); }
  const cuda::KeySketch* device_layer_sketches() const { return layer_sketches_.as<cuda::KeySketch>(); }
  int64_t n_pages() const { return n_pages_; }
  // Pages sequences may still take: the free ones less those withheld by limit().
  int64_t free_pages() const;
  int64_t usable_pages() const { return n_pages_ - withheld_; }
  // Withholds all but `pages` pages from sequences.
  void limit(int64_t pages);
  // Bytes of one page index across every layer: keys, values and the sketch.
  uint64_t page_bytes() const { return page_bytes(int(keys_.size()), n_kv_heads_, head_dim_, page_size_); }
  static uint64_t page_bytes(int n_layers, int n_kv_heads, int head_dim, int page_size);

  // n free pages, or an Error saying how many are free.
  std::vector<int> take(int64_t n);
  void give_back(const std::vector<int>& pages);
  // Copies the first n pages `from` onto `to`, in every layer.
  void copy(const std::vector<int>& to, const std::vector<int>& from, int64_t n, cudaStream_t stream) const;

 private:
  int n_kv_heads_, head_dim_, page_size_;
  int64_t page_elements_;  // of one page of one layer, keys or values
  int64_t n_pages_;
  std::vector<DeviceMemory> keys_, values_, sketch_codes_, sketch_params_;
  DeviceMemory layer_keys_, layer_sketches_;
  std::vector<int> free_;
  int64_t withheld_ = 0;  // pages limit() keeps from sequences
};

}  // namespace kascade::gpu
