// The Kascade plan built from options and a profile (src/kascade/plan.h), checked
// against the rules of KASCADE.md written out by hand for a small model.
#include <gtest/gtest.h>

#include "core/error.h"
#include "kascade/budget.h"
#include "kascade/plan.h"

namespace kascade {
namespace {

// 6 layers, 2 KV heads; anchors {0, 3}; reuse layers map head h to 1 - h.
KascadeProfile two_anchor_profile(const Shape& shape) {
  KascadeProfile profile = default_profile(shape);
  profile.anchors = {0, 3};
  for (int j = 0; j < shape.n_layers; ++j)
    if (j != 0 && j != 3) profile.head_map[size_t(j)] = {1, 0};
  return profile;
}

constexpr Shape kShape{6, 4, 2, 16};

AttentionOptions kascade_options(const KascadeProfile& profile) {
  AttentionOptions options;
  options.method = Method::Kascade;
  options.profile = profile;
  options.all_anchors = false;
  options.sparse_phases = SparsePhases::Both;
  return options;
}

TEST(KascadePlan, AnchorsReuseAndHeadMaps) {
  const Plan plan(kascade_options(two_anchor_profile(kShape)), kShape);
  const int anchor_of[] = {0, 0, 0, 3, 3, 3};
  for (const Phase phase : {Phase::Prefill, Phase::Decode})
    for (int j = 0; j < 6; ++j) {
      const LayerPlan& layer = plan.layer(phase, j, 1 << 20);
      EXPECT_EQ(layer.anchor, anchor_of[j]) << j;
      const LayerAction expected = j == 0 ? LayerAction::DenseAnchor : j == 3 ? LayerAction::Anchor : LayerAction::Reuse;
      EXPECT_EQ(layer.action, expected) << j;
      const bool reuse = j != 0 && j != 3;
      EXPECT_EQ(layer.pools, (reuse ? std::vector<int>{1, 0} : std::vector<int>{0, 1})) << j;
    }
  EXPECT_EQ(plan.n_pools(), 2);
  EXPECT_EQ(plan.flat_pools(), (std::vector<int>{0, 1, 1, 0, 1, 0, 0, 1, 1, 0, 1, 0}));
  EXPECT_EQ(plan.prefill_alignment(), 32);
  EXPECT_FALSE(plan.dense_prefill());
}

TEST(KascadePlan, Ablations) {
  const KascadeProfile profile = two_anchor_profile(kShape);
  AttentionOptions options = kascade_options(profile);
  options.no_remap = true;
  const Plan no_remap(options, kShape);
  options = kascade_options(profile);
  options.all_heads_pooled = true;
  const Plan pooled(options, kShape);
  options = kascade_options(profile);
  options.dense_layers = std::vector<int>{};
  options.all_anchors = true;
  const Plan every(options, kShape);
  options = kascade_options(profile);
  options.refine_factor = 3;
  const Plan refined(options, kShape);
  for (int j = 0; j < 6; ++j) {
    EXPECT_EQ(no_remap.layer(Phase::Decode, j, 1 << 20).pools, (std::vector<int>{0, 1}));
    EXPECT_EQ(pooled.layer(Phase::Decode, j, 1 << 20).pools, (std::vector<int>{0, 0}));
    EXPECT_EQ(every.action(Phase::Decode, j, 1 << 20), LayerAction::Anchor);
    const bool reuse = j != 0 && j != 3;
    if (reuse) {
      EXPECT_EQ(refined.action(Phase::Decode, j, 1 << 20), LayerAction::RefinedReuse);
    }
  }
  EXPECT_EQ(pooled.n_pools(), 1);
  EXPECT_EQ(refined.candidate_factor(), 3);
  EXPECT_NE(no_remap.key(), pooled.key());
  // Every layer selecting holds by default; sequences that select at every
  // step do not share a decode step with those.
  EXPECT_EQ(every.select_every(), kDefaultSelectEvery);
  EXPECT_EQ(refined.select_every(), 1);
  options = kascade_options(profile);
  options.dense_layers = std::vector<int>{};
  options.all_anchors = true;
  options.select_every = 1;
  EXPECT_NE(Plan(options, kShape).key(), every.key());
}

// Which phases are sparse, and what a dense phase and the dense method do.
TEST(KascadePlan, SparsePhases) {
  AttentionOptions options = kascade_options(two_anchor_profile(kShape));
  options.sparse_phases = SparsePhases::DecodeOnly;
  const Plan decode_only(options, kShape);
  EXPECT_FALSE(decode_only.sparse(Phase::Prefill));
  EXPECT_TRUE(decode_only.sparse(Phase::Decode));
  EXPECT_TRUE(decode_only.dense_prefill());
  EXPECT_EQ(decode_only.prefill_alignment(), 1);
  for (int j = 0; j < 6; ++j) EXPECT_EQ(decode_only.action(Phase::Prefill, j, 1 << 20), LayerAction::Dense);
  EXPECT_EQ(decode_only.action(Phase::Decode, 3, 1 << 20), LayerAction::Anchor);
  options.sparse_phases = SparsePhases::PrefillOnly;
  const Plan prefill_only(options, kShape);
  EXPECT_TRUE(prefill_only.sparse(Phase::Prefill));
  EXPECT_FALSE(prefill_only.sparse(Phase::Decode));
  const Plan dense(AttentionOptions{}, kShape);
  EXPECT_FALSE(dense.sparse(Phase::Prefill) || dense.sparse(Phase::Decode));
  EXPECT_EQ(dense.key(), "dense");
  EXPECT_EQ(dense.keys(Phase::Decode, 0, 1000), 128);
}

TEST(KascadePlan, RejectsWhatDoesNotFit) {
  KascadeProfile profile = two_anchor_profile(kShape);
  AttentionOptions options = kascade_options(profile);
  options.dense_layers = std::vector<int>{6};
  EXPECT_THROW(Plan(options, kShape), Error);
  profile.head_map[1][0] = 2;  // only KV heads 0 and 1 exist
  EXPECT_THROW(Plan(kascade_options(profile), kShape), Error);
  EXPECT_THROW(Plan(kascade_options(two_anchor_profile(kShape)), Shape{7, 4, 2, 16}), Error);
  options = kascade_options(two_anchor_profile(kShape));
  options.budget_percent = 0;
  EXPECT_THROW(Plan(options, kShape), Error);
  options.budget_percent = 10;
  options.refine_factor = 2;
  options.all_anchors = true;  // refinement needs reuse layers
  EXPECT_THROW(Plan(options, kShape), Error);
}

// At decode the profile's wide layers select wide_factor times the budget,
// at most every key; prefill, the other layers, and every layer at factor 1
// select the budget. The default is 3 where every layer selects, 1 with reuse.
TEST(KascadePlan, WideLayersSelectAMultipleOfTheBudgetAtDecode) {
  KascadeProfile profile = two_anchor_profile(kShape);
  EXPECT_EQ(profile.wide_layers, (std::vector<int>{5}));  // the default: the last quarter
  EXPECT_EQ(default_wide_layers(30), (std::vector<int>{23, 24, 25, 26, 27, 28, 29}));
  EXPECT_EQ(default_wide_layers(28), (std::vector<int>{21, 22, 23, 24, 25, 26, 27}));
  EXPECT_TRUE(default_wide_layers(3).empty());
  profile.wide_layers = {3, 5};
  AttentionOptions options = kascade_options(profile);
  options.min_k = 1;
  const Plan reuse(options, kShape);  // with reuse the factor defaults to 1
  for (int j = 0; j < kShape.n_layers; ++j) EXPECT_EQ(reuse.keys(Phase::Decode, j, 2000), 200) << j;
  options.wide_factor = 3;
  const Plan wide(options, kShape);
  EXPECT_NE(wide.key(), reuse.key());  // sequences of the two run different kernels
  for (int j = 0; j < kShape.n_layers; ++j) {
    EXPECT_EQ(wide.keys(Phase::Decode, j, 2000), j == 3 || j == 5 ? 600 : 200) << j;
    EXPECT_EQ(wide.keys(Phase::Prefill, j, 2000), 200) << j;
  }
  EXPECT_EQ(wide.max_keys(2000), 600);
  options.wide_factor.reset();
  options.all_anchors = true;  // every layer selecting: the default factor, 3
  EXPECT_EQ(Plan(options, kShape).keys(Phase::Decode, 5, 2000), 600);
  options.wide_factor = 20;  // 200 %: every key
  EXPECT_EQ(Plan(options, kShape).keys(Phase::Decode, 3, 2000), 2000);
  EXPECT_THROW(wide.keys(Phase::Decode, 6, 2000), Error);
  options.wide_factor = 0;
  EXPECT_THROW(Plan(options, kShape), Error);
  options.wide_factor = 2;
  options.profile->wide_layers.clear();  // a factor set with no wide layer to apply to
  EXPECT_THROW(Plan(options, kShape), Error);
  options.wide_factor.reset();  // the default factor with none: every layer the budget
  EXPECT_EQ(Plan(options, kShape).max_keys(2000), 200);
  profile.wide_layers = {6};  // outside the model
  EXPECT_THROW(Plan(kascade_options(profile), kShape), Error);
  profile.wide_layers = {3, 3};
  EXPECT_THROW(Plan(kascade_options(profile), kShape), Error);
}

// budget(n) = min(n, max(min_k, floor(p n / 100))), with optional rounding up.
TEST(KascadeBudget, FollowsTheFormula) {
  EXPECT_EQ(budget(1000, 10, 128), 128);
  EXPECT_EQ(budget(2000, 10, 128), 200);
  EXPECT_EQ(budget(100, 10, 128), 100);  // below min_k: dense
  EXPECT_EQ(budget(1001, 10, 1), 100);
  EXPECT_EQ(budget(1000, 10, 1), 100);   // not 99 through binary round-off
  EXPECT_EQ(budget(3000, 10, 128, 64), 320);
  EXPECT_EQ(budget(1400, 10, 100, 64), 192);
  EXPECT_EQ(budget(120, 10, 100, 64), 120);  // rounding never passes n
  EXPECT_EQ(budget(0, 10, 128), 0);
  EXPECT_TRUE(valid_budget_percent(100));
  EXPECT_FALSE(valid_budget_percent(0));
  EXPECT_FALSE(valid_budget_percent(100.5));
}

}  // namespace
}  // namespace kascade
