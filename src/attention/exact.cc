// Exact attention over key lists: dense causal and restricted to index sets.
#include "attention/exact.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace kascade::attention {

using kernels::KeyList;
using kernels::SoftmaxState;

void check_step(const Shape& shape, const Step& step) {
  if (step.layer < 0 || step.layer >= shape.n_layers)
    fail("attention step: layer {} outside [0, {})", step.layer, shape.n_layers);
  if (step.n_queries <= 0) fail("attention step: {} queries", step.n_queries);
  if (step.first_position < 0) fail("attention step: first position {}", step.first_position);
  if (!step.queries || !step.output || !step.cache.keys || !step.cache.values)
    fail("attention step: null query, output or cache pointer (layer {})", step.layer);
  if (step.cache.capacity < step.first_position + step.n_queries)
    fail("attention step: cache capacity {} < {} positions (layer {})", step.cache.capacity,
         step.first_position + step.n_queries, step.layer);
}

std::vector<Unit> make_units(const Step& step, int64_t tile) {
  std::vector<Unit> units;
  if (step.phase == Phase::Decode) {
    for (int64_t q = 0; q < step.n_queries; ++q) {
      const int64_t position = step.first_position + q;
      units.push_back({position, 1, q, position + 1, false});
    }
    return units;
  }
  for (int64_t offset = 0; offset < step.n_queries; offset += tile) {
    const int64_t start = step.first_position + offset;
    units.push_back({start, std::min(tile, step.n_queries - offset), offset, start, true});
  }
  return units;
}

GroupQueries unit_queries(const Shape& shape, const Step& step, const Unit& unit, int first_head,
                          int n_heads) {
  const int64_t d = shape.head_dim;
  return {step.queries + (unit.query_offset * shape.n_heads + first_head) * d,
          unit.length,
          n_heads,
          shape.n_heads * d,
          d,
          unit.start};
}

GroupOutput unit_output(const Shape& shape, const Step& step, const Unit& unit, int first_head) {
  const int64_t d = shape.head_dim;
  return {step.output + (unit.query_offset * shape.n_heads + first_head) * d, shape.n_heads * d, d};
}

std::vector<ThreadScratch>& ExactAttention::thread_scratch() {
  const size_t n = size_t(std::max(1, omp_get_max_threads()));
  if (threads_.size() < n) threads_.resize(n);
  return threads_;
}

void prepare_rows(const GroupQueries& queries, int d, ThreadScratch& scratch, float** q,
                         float** acc) {
  const int64_t rows = queries.n_rows();
  *q = scratch.queries.get(rows * d);
  kernels::pack_queries(queries, d, *q);
  *acc = scratch.acc.get(rows * kernels::acc_stride(d));
  std::fill(*acc, *acc + rows * kernels::acc_stride(d), 0.0f);
  scratch.states.assign(size_t(rows), SoftmaxState{});
  scratch.limits.resize(size_t(rows));
  for (int64_t t = 0; t < queries.n_positions; ++t)
    for (int r = 0; r < queries.group; ++r)
      scratch.limits[t * queries.group + r] = queries.first_position + t;
}

template <typename T>
PackedStep pack_step(const Shape& shape, const Step& step, bool values, kernels::Scratch& buffer) {
  const int d = shape.head_dim, n_kv = shape.n_kv_heads;
  const int64_t end = step.first_position + step.n_queries;
  PackedStep packed;
  packed.key_floats = kernels::round_up(end, kernels::kPanelWidth) * d;
  packed.value_floats =
      values ? kernels::round_up(end, kernels::kKeyBlock) * kernels::acc_stride(d) : 0;
  packed.data = buffer.get(n_kv * (packed.key_floats + packed.value_floats));
  const int64_t n_chunks = (end + kernels::kKeyBlock - 1) / kernels::kKeyBlock;
#pragma omp parallel for schedule(static)
  for (int64_t item = 0; item < n_kv * n_chunks; ++item) {
    const int h = int(item / n_chunks);
    const int64_t first = (item % n_chunks) * kernels::kKeyBlock;
    const KeyList chunk{nullptr, first, std::min(kernels::kKeyBlock, end - first)};
    const kernels::PackedKv head = packed.head(h);
    kernels::pack_key_panels(key_rows<T>(shape, step.cache, h), chunk, d,
                             const_cast<float*>(head.key_panels) + first * d);
    if (values)
      kernels::pack_value_chunks(value_rows<T>(shape, step.cache, h), chunk, d,
                                 const_cast<float*>(head.value_chunks) +
                                     first * kernels::acc_stride(d));
  }
  return packed;
}

template PackedStep pack_step<float>(const Shape&, const Step&, bool, kernels::Scratch&);
template PackedStep pack_step<uint16_t>(const Shape&, const Step&, bool, kernels::Scratch&);

void ExactAttention::dense(const Step& step) {
  check_step(shape_, step);
  with_element_type(step.cache.type, [&]<typename T>(T) {
    if (step.phase == Phase::Decode) {
      for (const Unit& unit : make_units(step, 1)) decode_lists<T>(step, unit, nullptr, false);
    } else {
      dense_prefill<T>(step);
    }
  });
}

template <typename T>
void ExactAttention::dense_prefill(const Step& step) {
  const int d = shape_.head_dim, g = shape_.group(), n_kv = shape_.n_kv_heads;
  // Each KV head's keys and values packed once, shared by all its query blocks.
  const PackedStep packed = pack_step<T>(shape_, step, true, packed_);
  auto& threads = thread_scratch();

  // About 96 rows per block keeps the micro-kernels busy for any group size.
  const int64_t block = std::max<int64_t>(8, 96 / g);
  const int64_t n_blocks = (step.n_queries + block - 1) / block;
#pragma omp parallel
  {
    ThreadScratch& scratch = threads[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < n_kv * n_blocks; ++item) {
      const int h = int(item % n_kv);
      const int64_t offset = (n_blocks - 1 - item / n_kv) * block;  // longest rows first
      const Unit unit{step.first_position + offset, std::min(block, step.n_queries - offset),
                      offset, 0, true};
      const GroupQueries queries = unit_queries(shape_, step, unit, h * g, g);
      float *q, *acc;
      prepare_rows(queries, d, scratch, &q, &acc);
      const KeyList keys{nullptr, 0, unit.start + unit.length};
      const kernels::PackedKv head = packed.head(h);
      kernels::attend_block_rows(q, queries.n_rows(), d, key_rows<T>(shape_, step.cache, h),
                                 value_rows<T>(shape_, step.cache, h), keys,
                                 scratch.limits.data(), &head, scratch.states.data(), acc,
                                 scratch.scores);
      kernels::write_output(scratch.states.data(), acc, unit.length, g, d,
                            unit_output(shape_, step, unit, h * g));
    }
  }
}

// One decode query: each set split into chunks of keys attended in parallel,
// then the chunks' softmax states merged per set.
template <typename T>
void ExactAttention::decode_lists(const Step& step, const Unit& unit, const SetLookup& lookup,
                                  bool per_query_head) {
  const int d = shape_.head_dim, g = shape_.group();
  const int n_sets = per_query_head ? shape_.n_heads : shape_.n_kv_heads;
  const int rows = per_query_head ? 1 : g;
  const int64_t unit_index = unit.query_offset;

  // (set, first key of the list, keys) per work item
  struct Item {
    int set;
    KeyList list;
  };
  std::vector<Item> items;
  std::vector<int> first_item(size_t(n_sets) + 1);
  for (int set = 0; set < n_sets; ++set) {
    first_item[set] = int(items.size());
    KeyList whole{nullptr, 0, unit.n_candidates};
    if (lookup) {
      const std::span<const int32_t> keys = lookup(unit_index, set);
      whole = KeyList{keys.data(), 0, int64_t(keys.size())};
    }
    if (whole.count == 0) items.push_back({set, whole});  // nothing kept: zero output
    const int64_t chunk = kernels::decode_chunk_keys(whole.count);
    for (int64_t begin = 0; begin < whole.count; begin += chunk)
      items.push_back({set, KeyList{whole.indices ? whole.indices + begin : nullptr,
                                    whole.first + begin, std::min(chunk, whole.count - begin)}});
  }
  first_item[n_sets] = int(items.size());

  const int64_t n_items = int64_t(items.size());
  const int64_t ld = kernels::acc_stride(d);
  partial_states_.assign(size_t(n_items * rows), SoftmaxState{});
  float* partial_acc = partial_acc_.get(n_items * rows * ld);
  std::fill(partial_acc, partial_acc + n_items * rows * ld, 0.0f);
  auto& threads = thread_scratch();
#pragma omp parallel
  {
    ThreadScratch& scratch = threads[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < n_items; ++i) {
      const Item& item = items[i];
      const int kv_head = per_query_head ? item.set / g : item.set;
      const GroupQueries queries =
          unit_queries(shape_, step, unit, per_query_head ? item.set : item.set * g, rows);
      float* q = scratch.queries.get(rows * d);
      kernels::pack_queries(queries, d, q);
      kernels::attend_block_rows(q, rows, d, key_rows<T>(shape_, step.cache, kv_head),
                                 value_rows<T>(shape_, step.cache, kv_head), item.list, nullptr,
                                 nullptr, partial_states_.data() + i * rows,
                                 partial_acc + i * rows * ld, scratch.scores);
    }
  }
  for (int set = 0; set < n_sets; ++set) {
    const int64_t base = first_item[set];
    SoftmaxState* states = partial_states_.data() + base * rows;
    float* acc = partial_acc + base * rows * ld;
    for (int64_t i = base + 1; i < first_item[set + 1]; ++i)
      for (int r = 0; r < rows; ++r)
        states[r].merge(partial_states_[i * rows + r], acc + r * ld,
                        partial_acc + (i * rows + r) * ld, d);
    kernels::write_output(states, acc, 1, rows, d,
                          unit_output(shape_, step, unit, per_query_head ? set : set * g));
  }
}

template <typename T>
void attend_group(const GroupQueries& queries, kernels::Rows<T> keys, kernels::Rows<T> values,
                  const KeyList& list, int d, const GroupOutput& out, ThreadScratch& scratch) {
  float *q, *acc;
  prepare_rows(queries, d, scratch, &q, &acc);
  kernels::PackedKv packed;
  // Below a full micro-kernel of rows, packing costs more than it saves.
  if (queries.n_rows() >= kernels::kMaxRows) {
    const int64_t key_floats = kernels::round_up(list.count, kernels::kPanelWidth) * d;
    float* buffer = scratch.panels.get(
        key_floats + kernels::round_up(list.count, kernels::kKeyBlock) * kernels::acc_stride(d));
    kernels::pack_key_panels(keys, list, d, buffer);
    kernels::pack_value_chunks(values, list, d, buffer + key_floats);
    packed = {buffer, buffer + key_floats};
  }
  kernels::attend_block_rows(q, queries.n_rows(), d, keys, values, list, scratch.limits.data(),
                             packed.key_panels ? &packed : nullptr, scratch.states.data(), acc,
                             scratch.scores);
  kernels::write_output(scratch.states.data(), acc, queries.n_positions, queries.group, d, out);
}

template void attend_group<float>(const GroupQueries&, kernels::Rows<float>, kernels::Rows<float>,
                                  const KeyList&, int, const GroupOutput&, ThreadScratch&);
template void attend_group<uint16_t>(const GroupQueries&, kernels::Rows<uint16_t>,
                                     kernels::Rows<uint16_t>, const KeyList&, int,
                                     const GroupOutput&, ThreadScratch&);

template <typename T>
void ExactAttention::restricted_prefill(const Step& step, std::span<const Unit> units,
                                        const SetLookup& lookup, bool per_query_head) {
  const int d = shape_.head_dim, g = shape_.group();
  const int n_sets = per_query_head ? shape_.n_heads : shape_.n_kv_heads;
  const int rows = per_query_head ? 1 : g;
  const int64_t n_units = int64_t(units.size());
  auto& threads = thread_scratch();
#pragma omp parallel
  {
    ThreadScratch& scratch = threads[omp_get_thread_num()];
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < n_units * n_sets; ++item) {
      const int set = int(item % n_sets);
      const int64_t u = n_units - 1 - item / n_sets;  // longest rows first
      const Unit& unit = units[u];
      const int kv_head = per_query_head ? set / g : set;
      const std::span<const int32_t> selected = lookup(u, set);
      // Every candidate selected: the contiguous causal range, no gather.
      const int64_t end = unit.own_tile ? unit.start + unit.length : unit.n_candidates;
      KeyList list{nullptr, 0, end};
      if (int64_t(selected.size()) != unit.n_candidates) {
        scratch.list.assign(selected.begin(), selected.end());
        if (unit.own_tile)
          for (int64_t p = unit.start; p < end; ++p) scratch.list.push_back(int32_t(p));
        list = KeyList{scratch.list.data(), 0, int64_t(scratch.list.size())};
      }
      const int first_head = per_query_head ? set : set * g;
      attend_group(unit_queries(shape_, step, unit, first_head, rows),
                   key_rows<T>(shape_, step.cache, kv_head),
                   value_rows<T>(shape_, step.cache, kv_head), list, d,
                   unit_output(shape_, step, unit, first_head), scratch);
    }
  }
}

void ExactAttention::restricted(const Step& step, std::span<const Unit> units,
                                const SetLookup& lookup, bool per_query_head) {
  with_element_type(step.cache.type, [&]<typename T>(T) {
    if (step.phase == Phase::Decode) {
      for (const Unit& unit : units) decode_lists<T>(step, unit, lookup, per_query_head);
    } else {
      restricted_prefill<T>(step, units, lookup, per_query_head);
    }
  });
}

}  // namespace kascade::attention
