// Diagnostics: what a strategy's attention kept, measured against dense
// attention (kept softmax mass, output error). Off the fast path.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "attention/exact.h"
#include "attention/scoring.h"

namespace kascade::attention {

void Strategy::kept_keys(const Step& step, int64_t q, int head, std::vector<int32_t>& keys) const {
  keys.resize(size_t(step.first_position + q + 1));
  std::iota(keys.begin(), keys.end(), 0);
}

namespace {

class DiagnosticStrategy final : public Strategy {
 public:
  DiagnosticStrategy(std::unique_ptr<Strategy> inner, const Shape& shape, Observer& observer)
      : inner_(std::move(inner)), shape_(shape), dense_(shape), observer_(observer) {}

  std::string_view name() const override { return inner_->name(); }
  int64_t prefill_alignment() const override { return inner_->prefill_alignment(); }
  void reset() override { inner_->reset(); }
  void kept_keys(const Step& step, int64_t q, int head, std::vector<int32_t>& keys) const override {
    inner_->kept_keys(step, q, head, keys);
  }

  void forward(const Step& step) override {
    inner_->forward(step);
    LayerReport report;
    report.layer = step.layer;
    report.phase = step.phase;
    report.first_position = step.first_position;
    report.n_queries = step.n_queries;
    report.relative_error = output_error(step);
    with_element_type(step.cache.type, [&]<typename T>(T) { kept_mass<T>(step, report); });
    observer_.on_layer(report);
  }

 private:
  double output_error(const Step& step) {
    const int64_t n = step.n_queries * shape_.n_heads * shape_.head_dim;
    dense_output_.resize(size_t(n));
    Step dense_step = step;
    dense_step.output = dense_output_.data();
    dense_.dense(dense_step);
    double diff = 0, norm = 0;
    for (int64_t i = 0; i < n; ++i) {
      diff += std::pow(double(step.output[i]) - dense_output_[i], 2);
      norm += std::pow(double(dense_output_[i]), 2);
    }
    return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  }

  // Dense softmax mass of each row's kept keys: the row's exact LSE from the
  // scoring code, then the kept keys' scores.
  template <typename T>
  void kept_mass(const Step& step, LayerReport& report) {
    const int d = shape_.head_dim, g = shape_.group(), n_kv = shape_.n_kv_heads;
    const PackedStep packed = pack_step<T>(shape_, step, false, panels_);
    const std::vector<Unit> units = make_units(step, 32);
    const int64_t n_items = int64_t(units.size()) * n_kv;
    std::vector<double> mass(size_t(step.n_queries * shape_.n_heads));
    std::vector<int64_t> kept(mass.size());
    auto& threads = dense_.thread_scratch();
#pragma omp parallel
    {
      ThreadScratch& scratch = threads[omp_get_thread_num()];
      std::vector<int32_t> keys;
      std::vector<float> lse, scores;
#pragma omp for schedule(dynamic, 1)
      for (int64_t item = 0; item < n_items; ++item) {
        const Unit& unit = units[item / n_kv];
        const int h = int(item % n_kv);
        const GroupQueries rows = unit_queries(shape_, step, unit, h * g, g);
        std::vector<float> q(size_t(rows.n_rows() * d));
        kernels::pack_queries(rows, d, q.data());
        lse.resize(size_t(rows.n_rows()));
        score_prefill_group(q.data(), rows, 0, d, packed.head(h).key_panels, Pooling::PostSoftmax,
                            false, nullptr, 0, lse.data(), scratch);
        for (int64_t t = 0; t < unit.length; ++t)
          for (int r = 0; r < g; ++r) {
            const int64_t query = unit.query_offset + t;
            const int head = h * g + r;
            inner_->kept_keys(step, query, head, keys);
            scores.resize(keys.size() + 1);
            kernels::dot_rows(q.data() + (t * g + r) * d, 1, d, key_rows<T>(shape_, step.cache, h),
                              kernels::KeyList{keys.data(), 0, int64_t(keys.size())},
                              scores.data(), int64_t(scores.size()));
            double sum = 0;
            const double lse2 = double(lse[t * g + r]) / std::log(2.0);
            for (size_t i = 0; i < keys.size(); ++i) sum += std::exp2(double(scores[i]) - lse2);
            mass[query * shape_.n_heads + head] = sum;
            kept[query * shape_.n_heads + head] = int64_t(keys.size());
          }
      }
    }
    report.min_kept_mass = *std::min_element(mass.begin(), mass.end());
    report.mean_kept_mass = std::accumulate(mass.begin(), mass.end(), 0.0) / double(mass.size());
    report.mean_kept_keys =
        double(std::accumulate(kept.begin(), kept.end(), int64_t(0))) / double(kept.size());
  }

  std::unique_ptr<Strategy> inner_;
  Shape shape_;
  ExactAttention dense_;
  Observer& observer_;
  std::vector<float> dense_output_;
  kernels::Scratch panels_;
};

}  // namespace

std::unique_ptr<Strategy> with_diagnostics(std::unique_ptr<Strategy> inner, const Shape& shape,
                                           Observer& observer) {
  check_shape(shape);
  return std::make_unique<DiagnosticStrategy>(std::move(inner), shape, observer);
}

}  // namespace kascade::attention
