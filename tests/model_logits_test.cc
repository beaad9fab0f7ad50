// Logits parity of the forward pass with an independent implementation:
// tests/data/logits holds, for three 600-token prompts, the logits that
// Hugging Face transformers computes from the same GGUF file (regenerate with
// tools/gen_logits_golden.py) and its greedy 32-token continuation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/model_cache.h"
#include "model/model.h"
#include "ops/threading.h"

namespace kascade {
namespace {

const std::string kData = std::string(KASCADE_SOURCE_DIR) + "/tests/data/logits/";

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  return nlohmann::json::parse(in);
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

class LogitsParity : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    ops::configure_threads(0);
    model_ = std::make_unique<model::Model>(model::Model::load(default_model_path()));
  }
  static void TearDownTestSuite() { model_.reset(); }
  static std::unique_ptr<model::Model> model_;
};
std::unique_ptr<model::Model> LogitsParity::model_;

TEST_P(LogitsParity, MatchesTransformers) {
  const nlohmann::json meta = read_json(kData + GetParam() + ".json");
  const std::vector<int32_t> tokens = meta["tokens"].get<std::vector<int32_t>>();
  const std::vector<int32_t> probes = meta["probes"].get<std::vector<int32_t>>();
  const auto top_ids = meta["top_ids"].get<std::vector<std::vector<int32_t>>>();
  const int64_t columns = meta["columns"].get<int64_t>();
  const std::vector<float> golden = read_floats(kData + GetParam() + ".f32");
  const int64_t n = int64_t(tokens.size());
  ASSERT_EQ(int64_t(golden.size()), n * columns);
  const int vocab = model_->config().vocab_size;

  model::Sequence seq = model_->new_sequence(n + 64, attention::KvType::F32,
                                             attention::make_dense(model_->config().attention_shape()));
  std::vector<float> logits(size_t(n) * size_t(vocab));
  model_->forward(seq, tokens, n, logits.data());

  double max_diff = 0, sum_diff = 0, max_logit = 0;
  int64_t compared = 0, top1_agree = 0;
  for (int64_t t = 0; t < n; ++t) {
    const float* row = &logits[size_t(t * vocab)];
    const float* expected = &golden[size_t(t * columns)];
    for (int64_t c = 0; c < columns; ++c) {
      const int32_t id = c < int64_t(probes.size()) ? probes[size_t(c)] : top_ids[size_t(t)][size_t(c - probes.size())];
      const double diff = std::abs(double(row[id]) - double(expected[c]));
      max_diff = std::max(max_diff, diff);
      max_logit = std::max(max_logit, std::abs(double(expected[c])));
      sum_diff += diff;
      ++compared;
    }
    const int32_t ours = int32_t(std::max_element(row, row + vocab) - row);
    if (ours == top_ids[size_t(t)][0]) {
      ++top1_agree;
    } else {
      // A disagreement is only acceptable on a near tie in the reference.
      const auto& top = top_ids[size_t(t)];
      const auto it = std::find(top.begin(), top.end(), ours);
      ASSERT_NE(it, top.end()) << "position " << t << ": our top-1 " << ours << " is outside the reference top-8";
      const double margin = expected[probes.size()] - expected[probes.size() + size_t(it - top.begin())];
      EXPECT_LT(margin, 0.05) << "position " << t;
    }
  }
  const double mean_diff = sum_diff / double(compared);
  fmt::print("{}: {} positions, max |diff| {:.5f}, mean |diff| {:.6f} (max |logit| {:.2f}), top-1 agreement {}/{}\n",
             GetParam(), n, max_diff, mean_diff, max_logit, top1_agree, n);
  EXPECT_LT(max_diff, 0.02 * max_logit);
  EXPECT_LT(mean_diff, 0.01);
  EXPECT_GE(double(top1_agree), 0.99 * double(n));

  // Greedy continuation through the decode path.
  const std::vector<int32_t> expected_greedy = meta["greedy"].get<std::vector<int32_t>>();
  std::vector<int32_t> greedy;
  const float* last = &logits[size_t((n - 1) * vocab)];
  int32_t next = int32_t(std::max_element(last, last + vocab) - last);
  std::vector<float> step_logits(static_cast<size_t>(vocab));
  for (size_t i = 0; i < expected_greedy.size(); ++i) {
    greedy.push_back(next);
    const int32_t one[1] = {next};
    model_->forward(seq, one, 1, step_logits.data());
    next = int32_t(std::max_element(step_logits.begin(), step_logits.end()) - step_logits.begin());
  }
  EXPECT_EQ(greedy, expected_greedy);
}

INSTANTIATE_TEST_SUITE_P(Prompts, LogitsParity, ::testing::Values("gpl3", "apache2", "python_code"));

}  // namespace
}  // namespace kascade
