// Exact attention over key lists, for every strategy: dense causal attention
// (flash-style blocked online softmax, prefill parallel over (KV head, query
// block), decode over (KV head, key split) with a merge of softmax states),
// and attention restricted to per-unit index sets (+ the own tile in prefill),
// which gathers only the selected K/V rows. Internal to src/attention.
#pragma once

#include <omp.h>

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "attention/attention.h"
#include "attention/kernels.h"

namespace kascade::attention {

// Throws Error unless the step fits the shape (layer, sizes, pointers, cache).
void check_step(const Shape& shape, const Step& step);
// A unit of selection: a prefill tile of consecutive queries, or one decode
// query. Its candidates are keys [0, n_candidates); in prefill it also attends
// its own keys [start, start + length) causally.
struct Unit {
  int64_t start = 0;         // absolute position of its first query
  int64_t length = 0;        // queries in the unit
  int64_t query_offset = 0;  // index of its first query in the step
  int64_t n_candidates = 0;  // prefill: start; decode: start + 1
  bool own_tile = false;
};

// Prefill: tiles of `tile` queries from first_position (the last may be
// shorter). Decode: one unit per query.
std::vector<Unit> make_units(const Step& step, int64_t tile);

// The queries/output of one unit and KV group (or a single query head: group 1).
GroupQueries unit_queries(const Shape& shape, const Step& step, const Unit& unit, int first_head,
                          int n_heads);
GroupOutput unit_output(const Shape& shape, const Step& step, const Unit& unit, int first_head);

template <typename T>
kernels::Rows<T> key_rows(const Shape& shape, const LayerCache& cache, int kv_head) {
  return {static_cast<const T*>(cache.keys) + kv_head * cache.capacity * shape.head_dim,
          shape.head_dim};
}
template <typename T>
kernels::Rows<T> value_rows(const Shape& shape, const LayerCache& cache, int kv_head) {
  return {static_cast<const T*>(cache.values) + kv_head * cache.capacity * shape.head_dim,
          shape.head_dim};
}

// Calls f with a zero value of the cache element type (float or uint16_t).
template <typename F>
decltype(auto) with_element_type(KvType type, F&& f) {
  if (type == KvType::F16) return f(uint16_t{});
  return f(float{});
}

// Index set lookup: the ascending candidate keys of (unit, head), where head
// is a KV head or, for per-query-head sets, a query head.
using SetLookup = std::function<std::span<const int32_t>(int64_t unit, int head)>;

// Per-thread scratch of the attention loops.
struct ThreadScratch {
  kernels::Scratch queries, acc, scores, panels, extra;
  std::vector<kernels::SoftmaxState> states;
  std::vector<int64_t> limits;
  std::vector<int32_t> list;
  std::vector<float> row_values, pooled;
};

// Every KV head's keys (and values when asked) of positions
// [0, first_position + n_queries), packed once for the prefill kernels.
struct PackedStep {
  float* data = nullptr;
  int64_t key_floats = 0, value_floats = 0;  // per head
  kernels::PackedKv head(int h) const {
    float* base = data + h * (key_floats + value_floats);
    return {base, value_floats ? base + key_floats : nullptr};
  }
};

template <typename T>
PackedStep pack_step(const Shape& shape, const Step& step, bool values, kernels::Scratch& buffer);

// Packs the group's rows for the kernels (q), zeroes their accumulators
// (acc, rows x acc_stride(d)) and states, and sets each row's causal limit.
void prepare_rows(const GroupQueries& queries, int d, ThreadScratch& scratch, float** q,
                  float** acc);

// Exact attention of one group's rows (t, r) over the ascending key list,
// each row seeing the list keys <= its position, written to `out`. Packs the
// list for the prefill micro-kernels when there are many rows, else reads
// the cache directly.
template <typename T>
void attend_group(const GroupQueries& queries, kernels::Rows<T> keys, kernels::Rows<T> values,
                  const kernels::KeyList& list, int d, const GroupOutput& out,
                  ThreadScratch& scratch);

class ExactAttention {
 public:
  explicit ExactAttention(const Shape& shape) : shape_(shape) {}

  // Exact causal attention for all heads of the step.
  void dense(const Step& step);

  // Attention restricted to lookup(unit, head) (+ the own tile of units that have one),
  // per KV head (all g heads of the group share the set) or per query head.
  void restricted(const Step& step, std::span<const Unit> units, const SetLookup& lookup,
                  bool per_query_head);

  // Scratch for callers that run their own parallel loops (one per thread).
  std::vector<ThreadScratch>& thread_scratch();

 private:
  template <typename T>
  void dense_prefill(const Step& step);
  template <typename T>
  void decode_lists(const Step& step, const Unit& unit, const SetLookup& lookup,
                    bool per_query_head);
  template <typename T>
  void restricted_prefill(const Step& step, std::span<const Unit> units, const SetLookup& lookup,
                          bool per_query_head);

  Shape shape_;
  std::vector<ThreadScratch> threads_;
  kernels::Scratch packed_;  // prefill: every KV head's keys and values packed once per step
  // decode split-KV partial results
  std::vector<kernels::SoftmaxState> partial_states_;
  kernels::Scratch partial_acc_;
};

}  // namespace kascade::attention
