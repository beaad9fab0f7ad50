// The layer schedule built from a profile (src/kascade/schedule.h), checked
// against the rules of KASCADE.md written out by hand for a small model.
#include <gtest/gtest.h>

#include "core/error.h"
#include "kascade/budget.h"
#include "kascade/schedule.h"

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

TEST(KascadeSchedule, AnchorsReuseAndHeadMaps) {
  const Schedule schedule(two_anchor_profile(kShape), kShape);
  const int anchor_of[] = {0, 0, 0, 3, 3, 3};
  for (int j = 0; j < 6; ++j) {
    EXPECT_EQ(schedule.anchor_of(j), anchor_of[j]) << j;
    EXPECT_EQ(schedule.is_anchor(j), j == 0 || j == 3) << j;
    EXPECT_EQ(schedule.is_dense(j), j == 0) << j;
    const bool reuse = j != 0 && j != 3;
    EXPECT_EQ(schedule.pool(j, 0), reuse ? 1 : 0) << j;
    EXPECT_EQ(schedule.pool(j, 1), reuse ? 0 : 1) << j;
  }
  EXPECT_EQ(schedule.n_pools(), 2);
}

TEST(KascadeSchedule, Ablations) {
  const KascadeProfile profile = two_anchor_profile(kShape);
  const Schedule no_remap(profile, kShape, {.no_remap = true});
  const Schedule pooled(profile, kShape, {.all_heads_pooled = true});
  const Schedule every(profile, kShape, {.dense_layers = {}, .all_anchors = true});
  for (int j = 0; j < 6; ++j) {
    EXPECT_EQ(no_remap.pool(j, 0), 0);
    EXPECT_EQ(no_remap.pool(j, 1), 1);
    EXPECT_EQ(pooled.pool(j, 1), 0);
    EXPECT_TRUE(every.is_anchor(j));
    EXPECT_FALSE(every.is_dense(j));
  }
  EXPECT_EQ(pooled.n_pools(), 1);
}

TEST(KascadeSchedule, RejectsWhatDoesNotFit) {
  KascadeProfile profile = two_anchor_profile(kShape);
  EXPECT_THROW(Schedule(profile, kShape, {.dense_layers = {6}}), Error);
  profile.head_map[1][0] = 2;  // only KV heads 0 and 1 exist
  EXPECT_THROW(Schedule(profile, kShape), Error);
  EXPECT_THROW(Schedule(two_anchor_profile(kShape), Shape{7, 4, 2, 16}), Error);
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
