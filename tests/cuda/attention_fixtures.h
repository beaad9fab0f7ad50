// Setup shared by the GPU test (tests/cuda/kascade_cuda_test.cc) and the
// CUDA benchmark (bench/cuda/kascade_cuda_bench.cu): the AttentionArgs of one
// call and the prefill index sets over a device copy of their layout. Plain
// C++ (no CUDA syntax), so that both g++ and nvcc compile it.
#pragma once

#include <cstdint>

#include "cuda/kascade_cuda.h"

namespace kascade::cuda::fixtures {

// The shape of one attention call.
struct Geometry {
  bool bf16 = false;
  int batch = 0;
  int n_heads = 0;     // H
  int n_kv_heads = 0;  // G
  int head_dim = 0;
};

// A KV cache on the device: keys and values [batch][n_kv_heads][capacity][head_dim],
// seq_lens [batch], and the host's copy of their maximum.
struct DeviceCache {
  const void* keys = nullptr;
  const void* values = nullptr;
  int64_t capacity = 0;
  const int* seq_lens = nullptr;
  int max_seq_len = 0;
};

inline AttentionArgs attention_args(const Geometry& geometry, const DeviceCache& cache, const void* queries,
                                    void* output) {
  AttentionArgs args;
  args.dtype = geometry.bf16 ? DType::BF16 : DType::F16;
  args.batch = geometry.batch;
  args.n_heads = geometry.n_heads;
  args.n_kv_heads = geometry.n_kv_heads;
  args.head_dim = geometry.head_dim;
  args.queries = queries;
  args.keys = cache.keys;
  args.values = cache.values;
  args.capacity = cache.capacity;
  args.seq_lens = cache.seq_lens;
  args.max_seq_len = cache.max_seq_len;
  args.output = output;
  return args;
}

// Prefill index sets in `indices` ([batch][n_kv_heads][layout.per_head()])
// for tiles of `tile` queries (the layout's, from its first tile on);
// device_offsets is a device copy of layout.offsets.
inline PrefillIndexSets prefill_index_sets(int* indices, const int64_t* device_offsets,
                                           const PrefillIndexLayout& layout, int tile) {
  PrefillIndexSets sets;
  sets.indices = indices;
  sets.tile_offsets = device_offsets;
  sets.per_head = layout.per_head();
  sets.tile = tile;
  sets.first_tile = layout.first_tile;
  return sets;
}

}  // namespace kascade::cuda::fixtures
