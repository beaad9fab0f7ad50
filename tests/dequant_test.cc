// Dequantization against an independent implementation: fixtures written by
// gguf-py (tools/gen_dequant_fixtures.py) for every supported type, both from
// quantized real-valued data and from random block bytes; hand-computed single
// blocks; every fp16/bf16 bit pattern against core/half.h; the SIMD kernels
// against the scalar reference; and the type table against gguf-py's.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "quant/dequant.h"
#include "quant/types.h"

namespace kascade {
namespace {

struct Fixture {
  TensorType type;
  int64_t n_values;
  std::vector<uint8_t> raw;
  std::vector<float> expected;
};

std::string fixture_path(const std::string& name) {
  return std::string(KASCADE_SOURCE_DIR) + "/tests/data/dequant/" + name;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open fixture " + path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

Fixture load_fixture(const std::string& name) {
  const std::vector<uint8_t> bytes = read_bytes(fixture_path(name));
  if (bytes.size() < 16 || std::memcmp(bytes.data(), "KDQ1", 4) != 0) {
    throw std::runtime_error("bad fixture header in " + name);
  }
  uint32_t header[3];
  std::memcpy(header, bytes.data() + 4, sizeof header);
  const auto [type_id, n_values, n_bytes] = header;
  if (bytes.size() != 16 + n_bytes + 4 * uint64_t(n_values)) {
    throw std::runtime_error("fixture size mismatch in " + name);
  }
  Fixture fixture{static_cast<TensorType>(type_id), n_values, {}, std::vector<float>(n_values)};
  fixture.raw.assign(bytes.begin() + 16, bytes.begin() + 16 + n_bytes);
  std::memcpy(fixture.expected.data(), bytes.data() + 16 + n_bytes, 4 * size_t(n_values));
  return fixture;
}

// Compares element by element. NaN must meet NaN; infinities must match;
// finite values within a few ulps of the block's largest magnitude, which
// covers an FMA rounding once where the reference rounds twice. Reports the
// worst element.
void expect_matches(const std::vector<float>& expected, const std::vector<float>& actual,
                    int64_t block_elements, const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  double worst_excess = 0;
  size_t worst_index = 0;
  size_t mismatches = 0;
  for (size_t start = 0; start < expected.size(); start += size_t(block_elements)) {
    const size_t end = std::min(expected.size(), start + size_t(block_elements));
    float block_max = 0;
    for (size_t i = start; i < end; ++i) {
      if (std::isfinite(expected[i])) block_max = std::max(block_max, std::fabs(expected[i]));
    }
    const double tolerance = 4.0 * std::numeric_limits<float>::epsilon() * block_max;
    for (size_t i = start; i < end; ++i) {
      const float e = expected[i], a = actual[i];
      bool ok;
      double excess = 0;
      if (std::isnan(e) || std::isinf(e)) {
        ok = std::isnan(e) ? std::isnan(a) : e == a;
        excess = ok ? 0 : std::numeric_limits<double>::infinity();
      } else {
        const double error = std::fabs(double(e) - double(a));
        ok = error <= tolerance;  // false for NaN
        excess = ok ? 0 : (std::isnan(a) ? std::numeric_limits<double>::infinity() : error - tolerance);
      }
      if (!ok) {
        ++mismatches;
        if (excess >= worst_excess) {
          worst_excess = excess;
          worst_index = i;
        }
      }
    }
  }
  EXPECT_EQ(mismatches, 0u) << what << ": worst element " << worst_index << " expected "
                            << expected[worst_index] << " got " << actual[worst_index];
}

const char* const kFixtures[] = {
    "f32_random.bin",     "f16_random.bin",     "f16_quantized.bin",  "bf16_random.bin",
    "bf16_quantized.bin", "q4_0_quantized.bin", "q4_0_random.bin",    "q4_1_quantized.bin",
    "q4_1_random.bin",    "q5_0_quantized.bin", "q5_0_random.bin",    "q5_1_quantized.bin",
    "q5_1_random.bin",    "q8_0_quantized.bin", "q8_0_random.bin",    "q4_k_random.bin",
    "q5_k_random.bin",    "q6_k_random.bin",
};

class DequantFixture : public testing::TestWithParam<const char*> {};

TEST_P(DequantFixture, MatchesGgufPy) {
  const Fixture fixture = load_fixture(GetParam());
  const TypeTraits& traits = type_traits(fixture.type);
  ASSERT_EQ(row_bytes(fixture.type, fixture.n_values), fixture.raw.size());

  // Poisoned output: every value must be written.
  std::vector<float> actual(fixture.expected.size(), std::numeric_limits<float>::quiet_NaN());
  dequantize_row(fixture.type, fixture.raw.data(), actual.data(), fixture.n_values);
  expect_matches(fixture.expected, actual, traits.block_elements, "dequantize_row");

  std::fill(actual.begin(), actual.end(), std::numeric_limits<float>::quiet_NaN());
  quant::dequantize_blocks_scalar(fixture.type, fixture.raw.data(), actual.data(),
                                  fixture.n_values / traits.block_elements);
  expect_matches(fixture.expected, actual, traits.block_elements, "scalar reference");
}

INSTANTIATE_TEST_SUITE_P(AllTypes, DequantFixture, testing::ValuesIn(kFixtures),
                         [](const testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           name = name.substr(0, name.find('.'));
                           return name;
                         });

TEST(DequantFixtures, CoverEverySupportedType) {
  std::vector<uint32_t> covered;
  for (const char* name : kFixtures) covered.push_back(uint32_t(load_fixture(name).type));
  for (uint32_t id = 0; id < 64; ++id) {
    const TypeTraits* traits = find_type_traits(id);
    if (traits != nullptr && traits->can_dequantize) {
      EXPECT_NE(std::find(covered.begin(), covered.end(), id), covered.end())
          << traits->name << " has no fixture";
    }
  }
}

uint16_t half_bits(float value) { return fp32_to_fp16(value); }

void put_half(std::vector<uint8_t>& block, size_t at, float value) {
  const uint16_t bits = half_bits(value);
  std::memcpy(block.data() + at, &bits, 2);
}

// Values worked out by hand from the block layouts.
TEST(DequantHandComputed, Q8_0) {
  std::vector<uint8_t> block(34);
  put_half(block, 0, 0.5f);
  for (int j = 0; j < 32; ++j) block[2 + j] = uint8_t(int8_t(j * 8 - 128));  // -128, -120, ... 120
  std::vector<float> out(32);
  dequantize_row(TensorType::Q8_0, block.data(), out.data(), 32);
  EXPECT_EQ(out[0], -64.0f);
  EXPECT_EQ(out[1], -60.0f);
  EXPECT_EQ(out[16], 0.0f);
  EXPECT_EQ(out[31], 60.0f);
}

TEST(DequantHandComputed, Q4_0AndQ4_1) {
  // Byte j holds nibble j & 15 low (value j) and 15 - j high (value j + 16).
  std::vector<uint8_t> q4_0(18), q4_1(20);
  put_half(q4_0, 0, 0.25f);
  put_half(q4_1, 0, 2.0f);
  put_half(q4_1, 2, -1.5f);
  for (int j = 0; j < 16; ++j) {
    q4_0[2 + j] = uint8_t(j | (15 - j) << 4);
    q4_1[4 + j] = uint8_t(j | (15 - j) << 4);
  }
  std::vector<float> out(32);
  dequantize_row(TensorType::Q4_0, q4_0.data(), out.data(), 32);
  EXPECT_EQ(out[0], -2.0f);     // (0 - 8) * 0.25
  EXPECT_EQ(out[15], 1.75f);    // (15 - 8) * 0.25
  EXPECT_EQ(out[16], 1.75f);    // high nibble of byte 0 is 15
  EXPECT_EQ(out[31], -2.0f);
  dequantize_row(TensorType::Q4_1, q4_1.data(), out.data(), 32);
  EXPECT_EQ(out[0], -1.5f);     // 0 * 2 - 1.5
  EXPECT_EQ(out[9], 16.5f);     // 9 * 2 - 1.5
  EXPECT_EQ(out[16], 28.5f);    // 15 * 2 - 1.5
  EXPECT_EQ(out[30], 0.5f);     // byte 14 high nibble 1
}

TEST(DequantHandComputed, Q5_0HighBits) {
  std::vector<uint8_t> block(22, 0);
  put_half(block, 0, 1.0f);
  const uint32_t high_bits = (1u << 3) | (1u << 20);  // fifth bit of values 3 and 20
  std::memcpy(block.data() + 2, &high_bits, 4);
  block[6 + 3] = 0x0f;  // value 3 low nibble 15, value 19 high nibble 0
  block[6 + 4] = 0x70;  // value 20 high nibble 7
  std::vector<float> out(32);
  dequantize_row(TensorType::Q5_0, block.data(), out.data(), 32);
  EXPECT_EQ(out[0], -16.0f);
  EXPECT_EQ(out[3], 15.0f);   // 31 - 16
  EXPECT_EQ(out[19], -16.0f);
  EXPECT_EQ(out[20], 7.0f);   // 23 - 16
}

TEST(DequantHandComputed, Q4_KSixBitScales) {
  std::vector<uint8_t> block(144, 0);
  put_half(block, 0, 0.5f);   // d
  put_half(block, 2, 0.25f);  // dmin
  uint8_t* scales = block.data() + 4;
  scales[0] = 3;                 // sub-block 0: scale 3, min 0
  scales[4] = 8;                 //              min 8
  scales[1] = 0x40 | 5;          // sub-block 1 scale 5; top bits 01 -> scale 5 high bits = 1
  scales[8] = 0x21;              // sub-block 4: scale low nibble 1, min low nibble 2
  scales[0] |= 0x80;             // sub-block 4 scale high bits 10 -> scale = 1 | 2 << 4 = 33
  scales[4] |= 0xc0;             // sub-block 4 min high bits 11 -> min = 2 | 3 << 4 = 50
  scales[9] = 0x0f;              // sub-block 5: scale low 15, min low 0, high bits from scales[1]
  uint8_t* qs = block.data() + 16;
  qs[0] = 0x2a;                  // value 0 -> 10, value 32 -> 2
  qs[64] = 0x07;                 // value 128 (sub-block 4) -> 7
  qs[64 + 1] = 0x90;             // value 129 -> 0, value 161 (sub-block 5) -> 9
  std::vector<float> out(256);
  dequantize_row(TensorType::Q4_K, block.data(), out.data(), 256);
  EXPECT_EQ(out[0], 0.5f * 3 * 10 - 0.25f * 8);   // 13
  EXPECT_EQ(out[32], 0.5f * 5 * 2 - 0.0f);         // 5
  EXPECT_EQ(out[128], 0.5f * 33 * 7 - 0.25f * 50);  // 103
  EXPECT_EQ(out[129], -0.25f * 50);
  EXPECT_EQ(out[161], 0.5f * (15 | 1 << 4) * 9);   // scale 31, min 0
}

TEST(DequantHandComputed, Q6_K) {
  std::vector<uint8_t> block(210, 0);
  put_half(block, 208, 0.125f);
  int8_t* scales = reinterpret_cast<int8_t*>(block.data() + 192);
  for (int s = 0; s < 16; ++s) scales[s] = int8_t(s - 8);
  // Value 0: low nibble 5, high bits 2 -> q = 5 | 32 = 37 - 32 = 5, scale -8.
  block[0] = 0x05;
  block[128] = 0x02;
  // Value 200 (second half, l = 8, quarter 2): low byte 64 + 8 high nibble, high byte 128 + 32 + 8 bits 4-5.
  block[64 + 8] = 0xf0;
  block[160 + 8] = 0x30;
  std::vector<float> out(256);
  dequantize_row(TensorType::Q6_K, block.data(), out.data(), 256);
  EXPECT_EQ(out[0], 0.125f * -8 * 5);
  EXPECT_EQ(out[1], 0.125f * -8 * -32);
  EXPECT_EQ(out[200], 0.125f * float(200 / 16 - 8) * (63 - 32));
}

// F16/BF16 over every bit pattern, through the SIMD and scalar paths, against core/half.h.
void expect_same_float(float expected, float actual, uint32_t bits) {
  if (std::isnan(expected)) {
    EXPECT_TRUE(std::isnan(actual)) << "bits " << bits;
    EXPECT_EQ(std::signbit(expected), std::signbit(actual)) << "bits " << bits;
  } else {
    EXPECT_EQ(std::bit_cast<uint32_t>(expected), std::bit_cast<uint32_t>(actual)) << "bits " << bits;
  }
}

TEST(DequantHalf, EveryF16BitPattern) {
  std::vector<uint16_t> all(1 << 16);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
  std::vector<float> fast(all.size()), scalar(all.size());
  dequantize_row(TensorType::F16, all.data(), fast.data(), int64_t(all.size()));
  quant::dequantize_blocks_scalar(TensorType::F16, reinterpret_cast<const uint8_t*>(all.data()),
                                  scalar.data(), int64_t(all.size()));
  for (uint32_t i = 0; i < all.size(); ++i) {
    expect_same_float(fp16_to_fp32(uint16_t(i)), fast[i], i);
    expect_same_float(fp16_to_fp32(uint16_t(i)), scalar[i], i);
    if (HasFailure()) break;
  }
}

TEST(DequantHalf, EveryBf16BitPattern) {
  std::vector<uint16_t> all(1 << 16);
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i);
  std::vector<float> out(all.size());
  dequantize_row(TensorType::BF16, all.data(), out.data(), int64_t(all.size()));
  for (uint32_t i = 0; i < all.size(); ++i) {
    expect_same_float(bf16_to_fp32(uint16_t(i)), out[i], i);
    if (HasFailure()) break;
  }
}

TEST(DequantHalf, EdgeValues) {
  const uint16_t f16[] = {0x0001, 0x03ff, 0x0400, 0x3c00, 0x7bff, 0x7c00, 0xfc00, 0x7e00, 0x8000, 0x8001};
  const uint16_t bf16[] = {0x0001, 0x3f80, 0x7f80, 0xff80, 0x7fc0, 0x8000, 0x0080};
  std::vector<float> out(10);
  dequantize_row(TensorType::F16, f16, out.data(), 10);
  EXPECT_EQ(out[0], std::ldexp(1.0f, -24));          // smallest subnormal
  EXPECT_EQ(out[1], std::ldexp(1023.0f, -24));       // largest subnormal
  EXPECT_EQ(out[2], std::ldexp(1.0f, -14));          // smallest normal
  EXPECT_EQ(out[3], 1.0f);
  EXPECT_EQ(out[4], 65504.0f);                       // largest finite
  EXPECT_EQ(out[5], std::numeric_limits<float>::infinity());
  EXPECT_EQ(out[6], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(out[7]));
  EXPECT_TRUE(out[8] == 0.0f && std::signbit(out[8]));
  EXPECT_EQ(out[9], -std::ldexp(1.0f, -24));
  dequantize_row(TensorType::BF16, bf16, out.data(), 7);
  EXPECT_EQ(out[0], std::ldexp(1.0f, -133));         // bf16 subnormal
  EXPECT_EQ(out[1], 1.0f);
  EXPECT_EQ(out[2], std::numeric_limits<float>::infinity());
  EXPECT_EQ(out[3], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(out[4]));
  EXPECT_TRUE(out[5] == 0.0f && std::signbit(out[5]));
  EXPECT_EQ(out[6], std::ldexp(1.0f, -126));         // smallest normal
}

// The SIMD kernels against the scalar reference on long random rows (finite scales).
TEST(DequantSimd, MatchesScalarOnLongRows) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-4.0f, 4.0f);
  const struct {
    TensorType type;
    std::vector<size_t> scale_fields;
  } cases[] = {{TensorType::Q4_0, {0}}, {TensorType::Q4_1, {0, 2}}, {TensorType::Q8_0, {0}},
               {TensorType::Q4_K, {0, 2}}, {TensorType::Q5_K, {0, 2}}, {TensorType::Q6_K, {208}},
               {TensorType::F16, {}}};
  for (const auto& c : cases) {
    const TypeTraits& traits = type_traits(c.type);
    const int64_t n_blocks = c.type == TensorType::F16 ? 1237 : 53;
    std::vector<uint8_t> raw(size_t(n_blocks * traits.block_bytes));
    for (auto& b : raw) b = uint8_t(byte(rng));
    for (int64_t b = 0; b < n_blocks; ++b) {
      for (size_t field : c.scale_fields) put_half(raw, size_t(b * traits.block_bytes) + field, scale(rng));
    }
    if (c.type == TensorType::F16) {  // keep the values finite: clear exponent-all-ones halves
      for (size_t i = 0; i + 1 < raw.size(); i += 2) raw[i + 1] &= 0xbf;
    }
    const int64_t n = n_blocks * traits.block_elements;
    std::vector<float> fast(static_cast<size_t>(n)), scalar(static_cast<size_t>(n));
    dequantize_row(c.type, raw.data(), fast.data(), n);
    quant::dequantize_blocks_scalar(c.type, raw.data(), scalar.data(), n_blocks);
    expect_matches(scalar, fast, traits.block_elements, std::string(traits.name));
  }
}

// The type table against gguf-py's (ggml's ids and block sizes).
TEST(TypeTraits, MatchGgufPyTable) {
  std::ifstream in(fixture_path("type_sizes.txt"));
  ASSERT_TRUE(in) << "missing type_sizes.txt";
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    uint32_t id;
    std::string name;
    int64_t block_elements, block_bytes;
    fields >> id >> name >> block_elements >> block_bytes;
    const TypeTraits* traits = find_type_traits(id);
    ASSERT_NE(traits, nullptr) << name;
    EXPECT_EQ(traits->name, name);
    EXPECT_EQ(traits->block_elements, block_elements) << name;
    // gguf-py still lists Q8_1 with two fp32 fields (40 bytes); ggml's block_q8_1
    // holds two fp16 fields (36 bytes). No GGUF file stores Q8_1 tensors.
    if (name != "Q8_1") {
      EXPECT_EQ(traits->block_bytes, block_bytes) << name;
    }
    ++checked;
  }
  EXPECT_GE(checked, 30);
}

TEST(TypeTraits, UnknownIdsAndSupport) {
  for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 42u, 1000u, 0xffffffffu}) {
    EXPECT_EQ(find_type_traits(id), nullptr) << id;
  }
  const TensorType supported[] = {TensorType::F32,  TensorType::F16,  TensorType::BF16,
                                  TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1,
                                  TensorType::Q5_0, TensorType::Q5_1, TensorType::Q4_K,
                                  TensorType::Q5_K, TensorType::Q6_K};
  int can = 0;
  for (uint32_t id = 0; id < 64; ++id) {
    const TypeTraits* traits = find_type_traits(id);
    if (traits != nullptr && traits->can_dequantize) ++can;
  }
  EXPECT_EQ(can, int(std::size(supported)));
  for (TensorType type : supported) EXPECT_TRUE(type_traits(type).can_dequantize);
}

std::string error_message(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(DequantErrors, UnsupportedAndMisSizedRows) {
  std::vector<uint8_t> raw(1024);
  std::vector<float> out(512);
  EXPECT_EQ(error_message([&] { dequantize_row(TensorType::Q2_K, raw.data(), out.data(), 256); }),
            "unsupported tensor type Q2_K");
  EXPECT_NE(error_message([&] { dequantize_row(TensorType::Q4_1, raw.data(), out.data(), 33); })
                .find("not a whole number of 32-value blocks"),
            std::string::npos);
  EXPECT_NE(error_message([&] { dequantize_row(static_cast<TensorType>(77), raw.data(), out.data(), 1); })
                .find("unknown tensor type id 77"),
            std::string::npos);
  EXPECT_EQ(row_bytes(TensorType::Q4_1, 576), 360u);
  EXPECT_EQ(row_bytes(TensorType::Q6_K, 512), 420u);
  EXPECT_NE(error_message([] { row_bytes(TensorType::Q4_K, 100); }).find("Q4_K"), std::string::npos);
  EXPECT_NE(error_message([] { row_bytes(TensorType::Q4_K, -256); }).find("Q4_K"), std::string::npos);
}

}  // namespace
}  // namespace kascade
