// The 4-bit key sketch (src/attention/key_sketch.h) against its definition:
// per block and channel lo = fp16(min), step = fp16((max - lo) / 15), codes
// round((k - lo) / step); its scores against dot products of the dequantized
// keys; growth block by block equal to one pass.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "attention/key_sketch.h"
#include "core/half.h"

namespace kascade::attention {
namespace {

float fp16_value(float x) { return fp16_to_fp32(fp32_to_fp16(x)); }

std::vector<float> random_keys(int n_heads, int64_t n, int d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> keys(size_t(n_heads * n * d));
  for (float& x : keys) x = normal(rng);
  return keys;
}

std::vector<kernels::Rows<float>> head_rows(const std::vector<float>& keys, int n_heads, int64_t n, int d) {
  std::vector<kernels::Rows<float>> rows;
  for (int h = 0; h < n_heads; ++h) rows.push_back({keys.data() + size_t(h * n * d), d});
  return rows;
}

TEST(KeySketch, BlocksFollowTheDefinition) {
  const int d = 64;
  std::vector<float> keys = random_keys(1, kSketchBlock, d, 1);
  for (int64_t j = 0; j < kSketchBlock; ++j) {
    keys[size_t(j * d + 5)] = 40.0f + 0.01f * float(j);  // a large, slowly varying channel
    keys[size_t(j * d + 9)] = 3.0f;                      // a constant one
  }
  std::vector<float> lo(d), step(d);
  std::vector<uint8_t> codes(size_t(kSketchBlock * d / 2));
  sketch_block(kernels::Rows<float>{keys.data(), d}, d, lo.data(), step.data(), codes.data());
  const SketchBlock block{lo.data(), step.data(), codes.data()};
  std::vector<float> row(d);
  for (int c = 0; c < d; ++c) {
    float low = keys[size_t(c)], high = low;
    for (int64_t j = 0; j < kSketchBlock; ++j) {
      low = std::min(low, keys[size_t(j * d + c)]);
      high = std::max(high, keys[size_t(j * d + c)]);
    }
    ASSERT_EQ(lo[size_t(c)], fp16_value(low)) << c;
    ASSERT_EQ(step[size_t(c)], fp16_value((high - fp16_value(low)) / 15.0f)) << c;
  }
  EXPECT_EQ(step[9], 0.0f);
  for (int64_t j = 0; j < kSketchBlock; ++j) {
    dequantize_sketch_row(block, d, j, row.data());
    for (int c = 0; c < d; ++c) {
      // Half a step off at most, plus lo's and step's fp16 rounding.
      const float bound = 0.5f * step[size_t(c)] + 16 * std::abs(step[size_t(c)]) * 1e-3f + std::abs(lo[size_t(c)]) * 1e-3f;
      EXPECT_LE(std::abs(row[size_t(c)] - keys[size_t(j * d + c)]), bound + 1e-6f) << j << " " << c;
    }
  }
  // The large channel spends no resolution of the others (per-channel steps).
  for (int c = 0; c < d; ++c)
    if (c != 5) {
      EXPECT_LT(step[size_t(c)], 0.8f) << c;
    }
}

TEST(KeySketch, ScoresAreDotProductsOfTheSketchedKeys) {
  for (const int d : {32, 64, 128, 72}) {
    const int n_heads = 2;
    const int64_t n = 300;
    const std::vector<float> keys = random_keys(n_heads, n, d, 2 + uint64_t(d));
    KeySketch sketch(n_heads, d);
    sketch.extend<float>(head_rows(keys, n_heads, n, d), n);
    ASSERT_EQ(sketch.sketched(), sketched_end(n));
    ASSERT_EQ(sketch.sketched(), 256);
    const int64_t n_rows = 7, first = 50, count = 190;  // more rows than a micro-kernel, blocks crossed
    std::mt19937_64 rng(9);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> q(size_t(n_rows * d));
    for (float& x : q) x = normal(rng);
    std::vector<float> s(size_t(n_rows * count));
    std::vector<float> key(static_cast<size_t>(d));
    for (int h = 0; h < n_heads; ++h) {
      sketch.dot_rows(q.data(), n_rows, h, first, count, s.data(), count);
      for (int64_t r = 0; r < n_rows; ++r)
        for (int64_t j = first; j < first + count; ++j) {
          dequantize_sketch_row(sketch.block(h, j / kSketchBlock), d, j % kSketchBlock, key.data());
          double want = 0, magnitude = 0;
          for (int c = 0; c < d; ++c) {
            want += double(q[size_t(r * d + c)]) * key[size_t(c)];
            magnitude += std::abs(double(q[size_t(r * d + c)]) * key[size_t(c)]);
          }
          EXPECT_NEAR(s[size_t(r * count + j - first)], want, 1e-5 * magnitude + 1e-6) << d << " " << h << " " << j;
        }
    }
  }
}

TEST(KeySketch, GrowsBlockByBlockAsOnePass) {
  const int d = 64, n_heads = 3;
  const int64_t n = 5 * kSketchBlock + 7;
  const std::vector<float> keys = random_keys(n_heads, n, d, 3);
  const auto rows = head_rows(keys, n_heads, n, d);
  KeySketch once(n_heads, d), grown(n_heads, d);
  once.extend<float>(rows, n);
  for (int64_t m = 1; m <= n; m += 13) grown.extend<float>(rows, m);
  grown.extend<float>(rows, n);
  ASSERT_EQ(once.sketched(), grown.sketched());
  EXPECT_EQ(sketched_end(kSketchBlock), 0);  // the newest key's block stays exact
  EXPECT_EQ(sketched_end(kSketchBlock + 1), kSketchBlock);
  for (int h = 0; h < n_heads; ++h)
    for (int64_t b = 0; b < once.sketched() / kSketchBlock; ++b) {
      const SketchBlock x = once.block(h, b), y = grown.block(h, b);
      for (int c = 0; c < d; ++c) {
        EXPECT_EQ(x.lo[c], y.lo[c]);
        EXPECT_EQ(x.step[c], y.step[c]);
      }
      for (int64_t i = 0; i < kSketchBlock * d / 2; ++i) ASSERT_EQ(x.codes[i], y.codes[i]);
    }
  grown.clear();
  EXPECT_EQ(grown.sketched(), 0);
}

}  // namespace
}  // namespace kascade::attention
