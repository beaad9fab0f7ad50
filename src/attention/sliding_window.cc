// Sliding-window attention (see sliding_window.h). Per (KV head, unit of
// queries): the unit's rows are scored against the union of their windows,
// each row's scores outside its own window are zeroed after the softmax over
// the window, and the probabilities multiply the same union of values.
#include "attention/sliding_window.h"

#include <omp.h>

#include <algorithm>
#include <cstring>

#include "attention/exact.h"
#include "core/error.h"

namespace kascade::attention {
namespace {

using kernels::KeyList;

// Query rows (positions x group) per prefill unit: enough rows for the
// micro-kernels to reuse each packed key, few enough positions that the
// union of the unit's windows stays close to one window.
constexpr int64_t kUnitRows = 128;

struct UnitScratch {
  kernels::Scratch queries, scores, key_panels, value_chunks, acc;
};

class SlidingWindowStrategy final : public Strategy {
 public:
  SlidingWindowStrategy(const Shape& shape, int64_t window) : shape_(shape), window_(window) {
    check_shape(shape);
    if (window < 1) fail("sliding window of {} keys: it must hold at least 1 key", window);
  }

  std::string_view name() const override { return "sliding-window"; }

  void forward(const Step& step) override {
    check_step(shape_, step);
    with_element_type(step.cache.type, [&]<typename T>(T) { run<T>(step); });
  }

  void kept_keys(const Step& step, int64_t q, int /*head*/, std::vector<int32_t>& keys) const override {
    const int64_t position = step.first_position + q;
    keys.clear();
    for (int64_t j = first_key(position); j <= position; ++j) keys.push_back(int32_t(j));
  }

 private:
  int64_t first_key(int64_t position) const { return std::max<int64_t>(0, position - window_ + 1); }

  template <typename T>
  void run(const Step& step) {
    const int n_kv = shape_.n_kv_heads;
    // Decode steps make one unit per query; prefill tiles of consecutive queries.
    const std::vector<Unit> units = make_units(step, std::max<int64_t>(1, kUnitRows / shape_.group()));
    const int64_t n_items = int64_t(units.size()) * n_kv;
    threads_.resize(std::max(threads_.size(), size_t(std::max(1, omp_get_max_threads()))));
#pragma omp parallel if (n_items > 1)
    {
      UnitScratch& scratch = threads_[size_t(omp_get_thread_num())];
#pragma omp for schedule(dynamic, 1)
      for (int64_t item = 0; item < n_items; ++item)
        attend_unit<T>(step, units[size_t(item / n_kv)], int(item % n_kv), scratch);
    }
  }

  template <typename T>
  void attend_unit(const Step& step, const Unit& unit, int kv_head, UnitScratch& scratch) const {
    const int d = shape_.head_dim, g = shape_.group();
    const GroupQueries queries = unit_queries(shape_, step, unit, kv_head * g, g);
    const int64_t rows = queries.n_rows();
    const int64_t first = first_key(unit.start);
    const KeyList list{nullptr, first, unit.start + unit.length - first};
    const int64_t lds = kernels::round_up(list.count, kernels::kPanelWidth);
    const int64_t ld_acc = kernels::acc_stride(d);
    const kernels::Rows<T> keys = key_rows<T>(shape_, step.cache, kv_head);
    const kernels::Rows<T> values = value_rows<T>(shape_, step.cache, kv_head);
    // Below a full micro-kernel of rows, packing costs more than it saves (decode).
    const bool packed = rows >= kernels::kMaxRows;

    float* q = scratch.queries.get(rows * d);
    kernels::pack_queries(queries, d, q);  // log2 domain, 1/sqrt(d) folded in
    float* scores = scratch.scores.get(rows * lds);
    if (packed) {
      float* panels = scratch.key_panels.get(lds * d);
      kernels::pack_key_panels(keys, list, d, panels);
      kernels::qk_panels(q, rows, d, panels, list.count, scores, lds);
    } else {
      kernels::dot_rows(q, rows, d, keys, list, scores, lds);
    }

    // Row (t, r) keeps list entries [first_key(p) - first, p - first] for its position p.
    for (int64_t t = 0; t < queries.n_positions; ++t) {
      const int64_t position = unit.start + t;
      const int64_t begin = first_key(position) - first, end = position - first + 1;
      for (int r = 0; r < g; ++r) {
        float* row = scores + (t * g + r) * lds;
        const float max = kernels::max_of(row + begin, end - begin);
        const float inverse = 1.0f / kernels::exp2_shift_sum(row + begin, end - begin, max);
        for (int64_t i = begin; i < end; ++i) row[i] *= inverse;
        std::fill(row, row + begin, 0.0f);
        std::fill(row + end, row + list.count, 0.0f);
      }
    }

    float* acc = scratch.acc.get(rows * ld_acc);
    std::fill(acc, acc + rows * ld_acc, 0.0f);
    if (packed) {
      float* chunks = scratch.value_chunks.get(kernels::round_up(list.count, kernels::kKeyBlock) * ld_acc);
      kernels::pack_value_chunks(values, list, d, chunks);
      for (int64_t b0 = 0; b0 < list.count; b0 += kernels::kKeyBlock)
        kernels::pv_packed(scores + b0, lds, rows, chunks + b0 * ld_acc,
                           std::min(kernels::kKeyBlock, list.count - b0), d, acc, ld_acc);
    } else {
      kernels::pv_direct(scores, lds, rows, values, list, d, acc, ld_acc);
    }

    const GroupOutput out = unit_output(shape_, step, unit, kv_head * g);
    for (int64_t t = 0; t < queries.n_positions; ++t)
      for (int r = 0; r < g; ++r)
        std::memcpy(out.row(t, r), acc + (t * g + r) * ld_acc, size_t(d) * sizeof(float));
  }

  Shape shape_;
  int64_t window_;
  std::vector<UnitScratch> threads_;  // one per OpenMP thread
};

}  // namespace

std::unique_ptr<Strategy> make_sliding_window(const Shape& shape, int64_t window) {
  return std::make_unique<SlidingWindowStrategy>(shape, window);
}

}  // namespace kascade::attention
