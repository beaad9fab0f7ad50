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
 for (const int d : {64, 72}) {  // eight channels at a time, and a scalar tail
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
  // Every code is the definition's, bit for bit (the GPU's sketch is compared with these).
  for (int64_t j = 0; j < kSketchBlock; ++j)
    for (int c = 0; c < d; ++c) {
      const float x = keys[size_t(j * d + c)];
      const float q = step[size_t(c)] > 0 ? std::nearbyint((x - lo[size_t(c)]) / step[size_t(c)]) : 0.0f;
      const int want = int(std::clamp(q, 0.0f, 15.0f));
      ASSERT_EQ((codes[size_t(j * d / 2 + c / 2)] >> (4 * (c & 1))) & 15, want) << d << " " << j << " " << c;
    }
 }
}

// The integer rule written out plainly: per row and block, int8 weights of
// q_c * step_c scaled by 127 / max, exact integer sums of code x weight.
double integer_rule_score(const float* q, const KeySketch& sketch, int h, int64_t j, int d) {
  const SketchBlock block = sketch.params(h, j / kSketchBlock);
  std::vector<float> key(static_cast<size_t>(d));
  sketch.dequantize(h, j, key.data());
  float largest = 0;
  for (int c = 0; c < d; ++c) largest = std::max(largest, std::abs(q[c] * block.step[c]));
  double bias = 0;
  int64_t sum = 0;
  for (int c = 0; c < d; ++c) {
    bias += double(q[c]) * block.lo[c];
    if (block.step[c] == 0 || largest == 0) continue;
    const int64_t code = std::lround((key[size_t(c)] - block.lo[c]) / block.step[c]);
    sum += code * int64_t(std::nearbyint(q[c] * block.step[c] * (127.0f / largest)));
  }
  return bias + double(largest / 127.0f) * double(sum);
}

TEST(KeySketch, ScoresFollowTheIntegerRuleAndTheSketchedKeys) {
  for (const int d : {32, 64, 128, 72, 36}) {
    const int n_heads = 2;
    const int64_t n = 300;
    std::vector<float> keys = random_keys(n_heads, n, d, 2 + uint64_t(d));
    for (int64_t j = 0; j < n; ++j) keys[size_t(j * d + 3)] += 30.0f;  // an outlier channel, as Qwen2.5's
    KeySketch sketch(n_heads, d);
    sketch.extend<float>(head_rows(keys, n_heads, n, d), n);
    ASSERT_EQ(sketch.sketched(), sketched_end(n));
    ASSERT_EQ(sketch.sketched(), 256);
    for (const int64_t n_rows : {int64_t(1), int64_t(3), int64_t(7)})  // rows past one micro-kernel
      for (const auto& [first, count] : {std::pair<int64_t, int64_t>{50, 190}, {0, 256}, {67, 3}}) {
        std::mt19937_64 rng(9 + uint64_t(n_rows));
        std::normal_distribution<float> normal(0.0f, 1.0f);
        std::vector<float> q(size_t(n_rows * d));
        for (float& x : q) x = normal(rng);
        std::vector<float> s(size_t(n_rows * count), -1e30f);
        std::vector<float> key(static_cast<size_t>(d));
        for (int h = 0; h < n_heads; ++h) {
          sketch.dot_rows(q.data(), n_rows, h, first, count, s.data(), count);
          // Every instruction set this CPU has gives the same bits (the same integer sums).
          std::vector<float> avx2(s.size(), -1e30f);
          sketch.dot_rows(q.data(), n_rows, h, first, count, avx2.data(), count, SketchIsa::Avx2);
          ASSERT_EQ(avx2, s) << d << " " << h << " " << n_rows << " " << first;
          for (int64_t r = 0; r < n_rows; ++r)
            for (int64_t j = first; j < first + count; ++j) {
              const float* qr = q.data() + r * d;
              sketch.dequantize(h, j, key.data());
              const SketchBlock block = sketch.params(h, j / kSketchBlock);
              double exact = 0, magnitude = 0, codes = 0, largest = 0;
              for (int c = 0; c < d; ++c) {
                exact += double(qr[c]) * key[size_t(c)];
                magnitude += std::abs(double(qr[c]) * key[size_t(c)]);
                if (block.step[c] > 0) codes += (key[size_t(c)] - block.lo[c]) / block.step[c];
                largest = std::max(largest, std::abs(double(qr[c]) * block.step[c]));
              }
              const float got = s[size_t(r * count + j - first)];
              EXPECT_NEAR(got, integer_rule_score(qr, sketch, h, j, d), 1e-5 * magnitude + 1e-5)
                  << d << " " << h << " " << r << " " << j;
              // Each weight is off by at most half a step of max |q_c step_c| / 127.
              EXPECT_NEAR(got, exact, 0.5 * largest / 127 * codes + 1e-5 * magnitude + 1e-5)
                  << d << " " << h << " " << r << " " << j;
            }
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
      const SketchBlock x = once.params(h, b), y = grown.params(h, b);
      for (int c = 0; c < d; ++c) {
        EXPECT_EQ(x.lo[c], y.lo[c]);
        EXPECT_EQ(x.step[c], y.step[c]);
      }
      // Both equal the row-major sketch of the same keys (the GPU's layout).
      std::vector<float> lo(d), step(d), a(d), z(d), want(d);
      std::vector<uint8_t> codes(size_t(kSketchBlock * d / 2));
      sketch_block(kernels::Rows<float>{rows[size_t(h)].row(b * kSketchBlock), d}, d, lo.data(), step.data(),
                   codes.data());
      for (int64_t j = 0; j < kSketchBlock; ++j) {
        once.dequantize(h, b * kSketchBlock + j, a.data());
        grown.dequantize(h, b * kSketchBlock + j, z.data());
        dequantize_sketch_row(SketchBlock{lo.data(), step.data(), codes.data()}, d, j, want.data());
        ASSERT_EQ(a, want) << h << " " << j;
        ASSERT_EQ(z, want) << h << " " << j;
      }
    }
  grown.clear();
  EXPECT_EQ(grown.sketched(), 0);
}

}  // namespace
}  // namespace kascade::attention
