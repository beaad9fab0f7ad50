// Kascade inside the real model: at p = 100 every selection keeps all keys,
// so prefill logits and greedy tokens must equal dense attention's. At
// p = 10 the strategies must still run end to end and stay close to dense.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "attention/strategies.h"
#include "core/model_cache.h"
#include "model/model.h"
#include "ops/threading.h"

namespace kascade {
namespace {

std::vector<int32_t> fixture_tokens() {
  std::ifstream in(std::string(KASCADE_SOURCE_DIR) + "/tests/data/logits/apache2.json");
  return nlohmann::json::parse(in)["tokens"].get<std::vector<int32_t>>();
}

struct Outcome {
  std::vector<float> prefill_logits;
  std::vector<int32_t> greedy;
};

Outcome run(const model::Model& model, const AttentionOptions& options, const std::vector<int32_t>& prompt,
        int n_new) {
  model::Sequence seq = model.new_sequence(int64_t(prompt.size()) + n_new, attention::KvType::F32,
                                           attention::make_strategy(options, model.config().attention_shape()));
  Outcome result;
  // Chunks of 256 (a multiple of the tile) so later chunks select from earlier ones.
  std::vector<float> logits = model.prefill(seq, prompt, {}, 256);
  result.prefill_logits = logits;
  for (int i = 0; i < n_new; ++i) {
    const int32_t next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    result.greedy.push_back(next);
    const int32_t one[1] = {next};
    model.forward(seq, one, 1, logits.data());
  }
  return result;
}

class KascadeModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ops::configure_threads(0);
    model_ = std::make_unique<model::Model>(model::Model::load(default_model_path()));
    prompt_ = fixture_tokens();
    dense_ = run(*model_, AttentionOptions{}, prompt_, kNew);
  }
  static void TearDownTestSuite() { model_.reset(); }
  static constexpr int kNew = 16;
  static std::unique_ptr<model::Model> model_;
  static std::vector<int32_t> prompt_;
  static Outcome dense_;
};
std::unique_ptr<model::Model> KascadeModel::model_;
std::vector<int32_t> KascadeModel::prompt_;
Outcome KascadeModel::dense_;

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
  return worst;
}

TEST_F(KascadeModel, FullBudgetEqualsDense) {
  for (const char* name : {"kascade", "oracle-topk"}) {
    AttentionOptions options;
    set_attention_option(options, "attention", name);
    options.budget_percent = 100;
    options.min_k = 1;  // selection runs at every length, not only past 128 keys
    const Outcome sparse = run(*model_, options, prompt_, kNew);
    EXPECT_LT(max_abs_diff(sparse.prefill_logits, dense_.prefill_logits), 1e-3) << name;
    EXPECT_EQ(sparse.greedy, dense_.greedy) << name;
  }
}

TEST_F(KascadeModel, TenPercentStaysCloseToDense) {
  for (const char* name : {"kascade", "oracle-topk", "streaming", "quest", "omnikv", "lessismore"}) {
    AttentionOptions options;
    set_attention_option(options, "attention", name);
    options.budget_percent = 10;
    const Outcome sparse = run(*model_, options, prompt_, kNew);
    // The next-token distribution after a 600-token prompt keeps its top choice
    // for every strategy that attends to the recent context.
    const auto top = [](const std::vector<float>& l) { return std::max_element(l.begin(), l.end()) - l.begin(); };
    EXPECT_EQ(top(sparse.prefill_logits), top(dense_.prefill_logits)) << name;
    EXPECT_EQ(sparse.greedy.size(), size_t(kNew)) << name;
  }
}

}  // namespace
}  // namespace kascade
