// Synthetic models (src/model/synthetic.h): what `kascade synth` writes loads
// as the preset's shape, its weights have the promised distribution in every
// type, the tokenizer is the source's (padded with reserved control tokens),
// and Llama 3.1's RoPE divisors follow the published rule.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "gguf/writer.h"
#include "model/model.h"
#include "model/synthetic.h"
#include "quant/types.h"
#include "tokenizer/tokenizer.h"

namespace kascade::model {
namespace {

// A small byte-level tokenizer source: 256 byte tokens, an end token.
gguf::File tokenizer_source() {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(fmt::format("<0x{:02X}>", b));
    types.push_back(6);  // byte
  }
  tokens.push_back("</s>");
  types.push_back(3);
  static gguf::Writer writer;
  writer = gguf::Writer();
  writer.add_string("tokenizer.ggml.model", "llama")
      .add_strings("tokenizer.ggml.tokens", tokens)
      .add_int32s("tokenizer.ggml.token_type", types)
      .add_float32s("tokenizer.ggml.scores", std::vector<float>(tokens.size(), 0.0f))
      .add_uint32("tokenizer.ggml.eos_token_id", 256);
  return writer.parse("<tokenizer source>");
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("kascade_synth_" + name)).string();
}

TEST(SyntheticModel, TinyLoadsInEveryTypeWithTheRightDistribution) {
  const SyntheticPreset& preset = synthetic_preset("tiny");
  for (const TensorType type :
       {TensorType::BF16, TensorType::F16, TensorType::F32, TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K}) {
    const std::string path = temp_path(std::string(type_traits(type).name) + ".gguf");
    write_synthetic_model(preset, type, 7, tokenizer_source(), path);
    const Model model = Model::load(path);
    const Config& c = model.config();
    EXPECT_EQ(c.n_layers, preset.n_layers);
    EXPECT_EQ(c.d_model, preset.d_model);
    EXPECT_EQ(c.n_heads, preset.n_heads);
    EXPECT_EQ(c.n_kv_heads, preset.n_kv_heads);
    EXPECT_EQ(c.head_dim, preset.head_dim);
    EXPECT_EQ(c.ffn_dim, preset.ffn_dim);
    EXPECT_EQ(c.vocab_size, 257);  // the source's vocabulary (preset size 0)
    // ffn_down: rows of ffn_dim values, uniform in [-a, a] with a = sqrt(3 / ffn_dim).
    const gguf::TensorInfo& down = model.file().tensor("blk.1.ffn_down.weight");
    EXPECT_EQ(down.type, type);
    std::vector<float> values(size_t(down.n_elements));
    for (int64_t r = 0; r < down.rows(); ++r)
      dequantize_row(type, down.data + r * row_bytes(type, down.dims[0]), values.data() + r * down.dims[0], down.dims[0]);
    const double a = std::sqrt(3.0 / preset.ffn_dim);
    double sum = 0, squares = 0;
    std::set<float> levels;
    for (const float v : values) {
      ASSERT_LE(std::abs(v), a * 1.01) << type_traits(type).name;
      sum += v;
      squares += double(v) * v;
      if (levels.size() < 1000) levels.insert(v);
    }
    const double n = double(values.size());
    EXPECT_NEAR(sum / n, 0.0, 0.02 * a) << type_traits(type).name;
    // Uniform on [-a, a] has variance a^2 / 3; 16 levels (Q4_K) a little more.
    EXPECT_NEAR(squares / n, a * a / 3, 0.1 * a * a) << type_traits(type).name;
    if (type == TensorType::Q4_K) {
      EXPECT_EQ(levels.size(), 16u);
    }
    if (type == TensorType::Q6_K) {
      EXPECT_EQ(levels.size(), 64u);
    }
    // It runs: a forward pass gives finite logits.
    Sequence seq = model.new_sequence(8, attention::KvType::F32, attention::make_dense(c.attention_shape()));
    std::vector<float> logits(size_t(c.vocab_size));
    const int32_t tokens[] = {1, 2, 3};
    model.forward(seq, tokens, 1, logits.data());
    for (const float l : logits) ASSERT_TRUE(std::isfinite(l));
    std::filesystem::remove(path);
  }
}

// llama.cpp's Q4_K_M: Q6_K for the output and, in layers 0-1, 14-15 and every third from 4 (of 16),
// for attn_v and ffn_down; Q4_K everywhere else.
TEST(SyntheticModel, Q4KMixGivesTheMoreBitsLayersQ6K) {
  SyntheticPreset preset = synthetic_preset("tiny");
  preset.n_layers = 16;
  const std::string path = temp_path("q4_k_m.gguf");
  const std::optional<SyntheticWeights> weights = synthetic_weights("q4_k_m");
  ASSERT_TRUE(weights.has_value());
  write_synthetic_model(preset, *weights, 5, tokenizer_source(), path);
  const Model model = Model::load(path);
  const gguf::File& file = model.file();
  const std::set<int> six_bit_layers = {0, 1, 4, 7, 10, 13, 14, 15};
  for (int l = 0; l < 16; ++l) {
    const TensorType more = six_bit_layers.contains(l) ? TensorType::Q6_K : TensorType::Q4_K;
    EXPECT_EQ(file.tensor(fmt::format("blk.{}.attn_v.weight", l)).type, more) << l;
    EXPECT_EQ(file.tensor(fmt::format("blk.{}.ffn_down.weight", l)).type, more) << l;
    for (const char* name : {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"})
      EXPECT_EQ(file.tensor(fmt::format("blk.{}.{}.weight", l, name)).type, TensorType::Q4_K) << l << name;
  }
  EXPECT_EQ(file.tensor("output.weight").type, TensorType::Q6_K);
  EXPECT_EQ(file.tensor("token_embd.weight").type, TensorType::Q4_K);
  EXPECT_EQ(file.get_string("general.name"), "synthetic tiny (Q4_K_M, seed 5)");
  EXPECT_FALSE(synthetic_weights("q5_k_m").has_value());
  std::filesystem::remove(path);
}

TEST(SyntheticModel, SameSeedSameFile) {
  const std::string a = temp_path("a.gguf"), b = temp_path("b.gguf"), c = temp_path("c.gguf");
  write_synthetic_model(synthetic_preset("tiny"), TensorType::Q8_0, 1, tokenizer_source(), a);
  write_synthetic_model(synthetic_preset("tiny"), TensorType::Q8_0, 1, tokenizer_source(), b);
  write_synthetic_model(synthetic_preset("tiny"), TensorType::Q8_0, 2, tokenizer_source(), c);
  const gguf::File fa = gguf::File::open(a), fb = gguf::File::open(b), fc = gguf::File::open(c);
  const gguf::TensorInfo &ta = fa.tensor("blk.0.attn_q.weight"), &tb = fb.tensor("blk.0.attn_q.weight"),
                         &tc = fc.tensor("blk.0.attn_q.weight");
  EXPECT_EQ(std::memcmp(ta.data, tb.data, ta.n_bytes), 0);
  EXPECT_NE(std::memcmp(ta.data, tc.data, ta.n_bytes), 0);
  for (const std::string& p : {a, b, c}) std::filesystem::remove(p);
}

TEST(SyntheticModel, PadsTheVocabularyWithReservedControlTokens) {
  SyntheticPreset preset = synthetic_preset("tiny");
  preset.vocab_size = 300;
  const std::string path = temp_path("padded.gguf");
  write_synthetic_model(preset, TensorType::BF16, 0, tokenizer_source(), path);
  const Model model = Model::load(path);
  EXPECT_EQ(model.config().vocab_size, 300);
  const std::vector<std::string> tokens = model.file().get_string_array("tokenizer.ggml.tokens");
  ASSERT_EQ(tokens.size(), 300u);
  EXPECT_EQ(tokens[257], "<|reserved_special_token_0|>");
  EXPECT_EQ(model.file().get_int_array("tokenizer.ggml.token_type")[299], 3);
  EXPECT_EQ(model.file().get_float_array("tokenizer.ggml.scores").size(), 300u);
  const tokenizer::Tokenizer tokenizer(model.file());
  EXPECT_TRUE(tokenizer.is_special(299));
  for (const int32_t id : tokenizer.encode("hi there", false)) EXPECT_LT(id, 257);  // text never hits the padding
  preset.vocab_size = 100;  // smaller than the source's 257
  EXPECT_THROW(write_synthetic_model(preset, TensorType::BF16, 0, tokenizer_source(), path), Error);
  std::filesystem::remove(path);
}

// Llama 3.1: divisor 1 for wavelengths under 8192 / 4, 8 over 8192, smooth between.
TEST(SyntheticModel, Llama3RopeDivisors) {
  const std::string path = temp_path("rope.gguf");
  write_synthetic_model(synthetic_preset("tiny"), TensorType::BF16, 0, tokenizer_source(), path);
  const gguf::File file = gguf::File::open(path);
  const gguf::TensorInfo& rope = file.tensor("rope_freqs.weight");
  ASSERT_EQ(rope.n_elements, 32u);
  const float* divisors = reinterpret_cast<const float*>(rope.data);
  for (int i = 0; i < 32; ++i) {
    const double wavelength = 2 * M_PI * std::pow(500000.0, 2.0 * i / 64);
    if (wavelength < 2048) EXPECT_EQ(divisors[i], 1.0f) << i;
    else if (wavelength > 8192) EXPECT_EQ(divisors[i], 8.0f) << i;
    else EXPECT_TRUE(divisors[i] > 1.0f && divisors[i] < 8.0f) << i;
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace kascade::model
