// Sliding-window attention against the naive double-precision reference of
// tests/attention_reference.h: each query attends exactly the keys
// [max(0, p - window + 1), p] (the window written out here independently),
// over prefill chunks of uneven sizes and decode steps, fp32 and fp16 caches,
// group sizes 1 to 8, windows of 1 key to longer than the sequence. Also:
// keys older than every window of a step are never read (poisoned with NaN),
// and bad windows are rejected.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "attention/sliding_window.h"
#include "attention_reference.h"
#include "core/error.h"

namespace kascade::attention {
namespace {

std::vector<int32_t> window_keys(int64_t position, int64_t window) {
  std::vector<int32_t> keys;
  for (int64_t j = std::max<int64_t>(0, position - window + 1); j <= position; ++j) keys.push_back(int32_t(j));
  return keys;
}

class WindowReference final : public reference::Reference {
 public:
  explicit WindowReference(int64_t window) : window_(window) {}
  void expected(const reference::Problem& p, const Step& step, const Strategy& /*fast*/,
                std::vector<std::vector<int32_t>>& keys, reference::Stats& /*stats*/) override {
    for (int64_t q = 0; q < step.n_queries; ++q)
      for (int head = 0; head < p.shape.n_heads; ++head)
        keys[size_t(q * p.shape.n_heads + head)] = window_keys(step.first_position + q, window_);
  }

 private:
  int64_t window_;
};

struct Case {
  Shape shape;
  int64_t window;
  int64_t n;
  std::vector<int64_t> prefill;  // chunk sizes; decode to n after them
  KvType type;
};

class SlidingWindow : public ::testing::TestWithParam<Case> {};

TEST_P(SlidingWindow, MatchesReference) {
  const Case& c = GetParam();
  const reference::Problem problem = reference::make_problem(c.shape, c.n, c.type, 42 + uint64_t(c.window));
  const std::unique_ptr<Strategy> fast = make_sliding_window(c.shape, c.window);
  EXPECT_EQ(fast->name(), "sliding-window");
  WindowReference ref(c.window);
  reference::Stats stats;
  const std::string label = fmt::format("H{} G{} d{} window {} {}", c.shape.n_heads, c.shape.n_kv_heads,
                                        c.shape.head_dim, c.window, c.type == KvType::F16 ? "f16" : "f32");
  reference::run_and_check(*fast, ref, problem, reference::schedule(c.prefill, c.n), stats, label);
  stats.print(label);
  EXPECT_GT(stats.outputs, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SlidingWindow,
    ::testing::Values(
        // Gemma 3 270M's heads (4 on 1 KV head, d 256), a window the prompt passes.
        Case{{2, 4, 1, 256}, 64, 230, {100, 97}, KvType::F32},
        Case{{2, 4, 1, 256}, 64, 230, {150, 61}, KvType::F16},
        // Many prefill units per step (g = 1: 128 queries per unit), odd sizes.
        Case{{1, 3, 3, 40}, 37, 420, {333, 1, 70}, KvType::F32},
        Case{{2, 8, 1, 24}, 1, 90, {45, 30}, KvType::F32},
        Case{{2, 8, 2, 64}, 7, 120, {1, 2, 3, 100}, KvType::F16},
        // A window longer than the sequence: plain causal attention.
        Case{{1, 4, 2, 32}, 1000, 160, {129}, KvType::F32}));

// Positions before the first window of a step may hold anything: poisoning
// them with NaN must not change one output bit.
TEST(SlidingWindowReads, OnlyTheWindow) {
  const Shape shape{1, 4, 2, 64};
  const int64_t window = 50, n = 400, first = 300;
  for (const KvType type : {KvType::F32, KvType::F16}) {
    const reference::Problem problem = reference::make_problem(shape, n, type, 7);
    reference::LiveCache clean(problem), poisoned(problem);
    clean.write(problem, 0, n);
    poisoned.write(problem, 0, n);
    const int64_t oldest = first - window + 1;
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (int h = 0; h < shape.n_kv_heads; ++h)
      for (int64_t j = 0; j < oldest; ++j)
        for (int c = 0; c < shape.head_dim; ++c) {
          const size_t i = size_t((h * n + j) * shape.head_dim + c);
          poisoned.k[i] = poisoned.v[i] = nan;
          poisoned.k16[i] = poisoned.v16[i] = 0x7e00;
        }
    for (const int64_t n_queries : {int64_t(1), n - first}) {
      std::vector<float> outputs[2];
      for (int run = 0; run < 2; ++run) {
        const std::unique_ptr<Strategy> strategy = make_sliding_window(shape, window);
        outputs[run].assign(size_t(n_queries * shape.n_heads * shape.head_dim), 0.0f);
        Step step;
        step.phase = n_queries == 1 ? Phase::Decode : Phase::Prefill;
        step.queries = problem.query(0, first, 0);
        step.n_queries = n_queries;
        step.first_position = first;
        step.cache = (run == 0 ? clean : poisoned).layer(problem, 0);
        step.output = outputs[run].data();
        strategy->forward(step);
      }
      for (const float x : outputs[1]) ASSERT_TRUE(std::isfinite(x)) << n_queries << " queries";
      EXPECT_EQ(outputs[0], outputs[1]) << n_queries << " queries";
    }
  }
}

TEST(SlidingWindowReads, RejectsBadWindowsAndShapes) {
  EXPECT_THROW(make_sliding_window({1, 4, 1, 64}, 0), Error);
  EXPECT_THROW(make_sliding_window({1, 4, 1, 64}, -3), Error);
  EXPECT_THROW(make_sliding_window({1, 4, 3, 64}, 8), Error);
  EXPECT_THROW(make_sliding_window({0, 4, 1, 64}, 8), Error);
}

}  // namespace
}  // namespace kascade::attention
