// Quantized matrix products against a double-precision reference over the
// dequantized weights (dequantize_row is itself checked against gguf-py in
// dequant_test): both paths (decode matrix-vector with activations split
// into int16 value and residual blocks, prefill dequantize + sgemm) for every supported weight type,
// with activations that have an outlier per block (the hard case for
// per-block activation scales); and the per-token path's promise that a
// token's result does not depend on the tokens beside it.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/half.h"
#include "ops/matmul.h"
#include "quant/types.h"

namespace kascade::ops {
namespace {

// Random blocks of `type`: random quant bits with fp16 scales (and
// minimums) of a sane size where each format keeps them, normal values for
// the float types.
std::vector<uint8_t> random_rows(TensorType type, int64_t rows, int64_t cols, std::mt19937& rng) {
  const TypeTraits& traits = type_traits(type);
  std::vector<uint8_t> data(size_t(rows * row_bytes(type, cols)));
  for (uint8_t& byte : data) byte = uint8_t(rng());
  std::normal_distribution<float> normal;
  if (type == TensorType::F32 || type == TensorType::F16 || type == TensorType::BF16) {
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float value = normal(rng);
      const uint16_t half =
          type == TensorType::F16 ? fp32_to_fp16(value) : uint16_t(std::bit_cast<uint32_t>(value) >> 16);
      if (type == TensorType::F32) std::memcpy(&data[size_t(i) * 4], &value, 4);
      else std::memcpy(&data[size_t(i) * 2], &half, 2);
    }
    return data;
  }
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  auto put_half = [&](uint8_t* at) {
    const uint16_t half = fp32_to_fp16(scale(rng));
    std::memcpy(at, &half, 2);
  };
  const int64_t n_blocks = rows * cols / traits.block_elements;
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint8_t* block = data.data() + b * traits.block_bytes;
    if (type == TensorType::Q6_K) {
      put_half(block + traits.block_bytes - 2);  // {ql, qh, scales, d}
      continue;
    }
    put_half(block);  // d first in every other format
    if (type == TensorType::Q4_1 || type == TensorType::Q5_1 || type == TensorType::Q4_K || type == TensorType::Q5_K)
      put_half(block + 2);  // m (dmin)
  }
  return data;
}

// Normal activations with a few outliers (40x), as real hidden states have.
std::vector<float> random_activations(size_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = normal(rng) * (i % 37 == 5 ? 40.0f : 1.0f);
  return values;
}

using Product = void (*)(const Weight&, const float*, int64_t, float*);

void check_type(TensorType type, int64_t n_tokens, Product product = matmul) {
  // Three 256-value groups for the K-quants: chains and groups end unevenly.
  const bool k_quant = type == TensorType::Q4_K || type == TensorType::Q5_K || type == TensorType::Q6_K;
  const int64_t kRows = 67, kCols = k_quant ? 768 : 256;
  std::mt19937 rng(unsigned(type) * 100 + unsigned(n_tokens));
  const std::vector<uint8_t> data = random_rows(type, kRows, kCols, rng);
  const Weight w{"w", type, data.data(), kRows, kCols, row_bytes(type, kCols)};
  const std::vector<float> in = random_activations(size_t(n_tokens * kCols), rng);
  std::vector<float> out(size_t(n_tokens * kRows));
  product(w, in.data(), n_tokens, out.data());

  std::vector<float> row(kCols);
  for (int64_t r = 0; r < kRows; ++r) {
    dequantize_weight_row(w, r, row.data());
    for (int64_t t = 0; t < n_tokens; ++t) {
      double want = 0, magnitude = 0;
      for (int64_t c = 0; c < kCols; ++c) {
        want += double(row[c]) * in[t * kCols + c];
        magnitude += std::abs(double(row[c]) * in[t * kCols + c]);
      }
      // fp32-level: activations are split into two int16 blocks (about 30
      // bits), products and sums run in fp32.
      EXPECT_NEAR(out[t * kRows + r], want, 2e-6 * magnitude + 1e-6)
          << type_traits(type).name << ", " << n_tokens << " tokens, row " << r;
    }
  }
}

class MatmulTypes : public ::testing::TestWithParam<TensorType> {};

TEST_P(MatmulTypes, DecodePathMatchesReference) { check_type(GetParam(), 1); }
TEST_P(MatmulTypes, FewTokensMatchReference) { check_type(GetParam(), 3); }
TEST_P(MatmulTypes, PrefillPathMatchesReference) { check_type(GetParam(), kGemmMinTokens + 3); }
TEST_P(MatmulTypes, PerTokenPathMatchesReference) {
  check_type(GetParam(), 20, matmul_per_token);
  check_type(GetParam(), 64, matmul_per_token);
}

// Several tokens through the per-token path give each token bit for bit its
// result alone, at any count (batched decode relies on it), for every
// supported type; odd row counts and, where the format allows, odd block
// counts and columns that are not a multiple of 16.
int64_t columns_for(TensorType type) {
  switch (type) {
    case TensorType::F32: case TensorType::F16: case TensorType::BF16: return 100;
    case TensorType::Q4_K: case TensorType::Q5_K: case TensorType::Q6_K: return 512;
    default: return 160;  // five 32-value blocks: the even/odd chains end unevenly
  }
}

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

TEST_P(MatmulTypes, TokensTogetherEqualEachAlone) {
  const TensorType type = GetParam();
  const int64_t rows = 37, cols = columns_for(type), max_tokens = 64;
  std::mt19937 rng(unsigned(type) + 7);
  const std::vector<uint8_t> data = random_rows(type, rows, cols, rng);
  const Weight w{"w", type, data.data(), rows, cols, row_bytes(type, cols)};
  const std::vector<float> in = random_activations(size_t(max_tokens * cols), rng);

  std::vector<float> alone(size_t(max_tokens * rows));
  for (int64_t t = 0; t < max_tokens; ++t) matmul(w, in.data() + t * cols, 1, alone.data() + t * rows);
  std::vector<int64_t> counts = {64, 33};
  for (int64_t n = 1; n <= 20; ++n) counts.push_back(n);
  for (const int64_t n : counts) {
    // Each count starts at a different token, so no batch is a prefix of another.
    const int64_t first = (n * 7) % (max_tokens - n + 1);
    std::vector<float> together(size_t(n * rows));
    matmul_per_token(w, in.data() + first * cols, n, together.data());
    for (int64_t t = 0; t < n; ++t)
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_EQ(bits(together[t * rows + r]), bits(alone[(first + t) * rows + r]))
            << type_traits(type).name << ", token " << t << " of " << n << ", row " << r;
    // Below the sgemm path, matmul is the same path.
    if (n < kGemmMinTokens) {
      std::vector<float> via_matmul(size_t(n * rows));
      matmul(w, in.data() + first * cols, n, via_matmul.data());
      ASSERT_EQ(0, std::memcmp(via_matmul.data(), together.data(), via_matmul.size() * sizeof(float)))
          << type_traits(type).name << ", " << n << " tokens";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, MatmulTypes,
                         ::testing::Values(TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q4_0,
                                           TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                                           TensorType::Q8_0, TensorType::Q4_K, TensorType::Q5_K,
                                           TensorType::Q6_K),
                         [](const auto& info) { return std::string(type_traits(info.param).name); });

}  // namespace
}  // namespace kascade::ops
