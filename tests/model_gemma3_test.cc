// The gemma3 architecture against independent references in
// tests/data/logits_gemma3 (tools/gen_gemma_golden.py regenerates them):
//  - TinyGemma3 (always): a tiny random-weight gemma3 GGUF with a 5-key
//    sliding window, two global layers, linear RoPE scaling on them, a local
//    RoPE base of its own and a final logit soft cap, against transformers'
//    float64 logits at all 150 positions: one prefill, uneven chunks, token by
//    token, an fp16 cache; Kascade at a 100% budget equals dense on the
//    global layers it is given.
//  - GemmaChatTemplate (always): the Gemma 3 template as jinja2 renders it.
//  - Gemma3Model (registered only when Gemma 3 270M is in the model cache,
//    scripts/fetch_model.sh gemma3-270m): logits of two 720-token prompts
//    (past the 512-key window) against transformers loading the same GGUF,
//    the 16-token greedy continuation, and tokenizer parity.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "attention/strategies.h"
#include "core/error.h"
#include "core/model_cache.h"
#include "model/model.h"
#include "ops/threading.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace kascade {
namespace {

const std::string kData = std::string(KASCADE_SOURCE_DIR) + "/tests/data/logits_gemma3/";

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  return nlohmann::json::parse(in);
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

int32_t argmax(const float* row, int64_t n) { return int32_t(std::max_element(row, row + n) - row); }

// ---------------------------------------------------------------------------
// Tiny random gemma3.

class TinyGemma3 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // A model this small has nothing to split; one thread keeps hundreds of
    // tiny steps clear of thread wake-ups on a busy machine.
    ops::configure_threads(1);
    model_ = std::make_unique<model::Model>(model::Model::load(kData + "tiny_gemma3.gguf"));
    meta_ = read_json(kData + "tiny_gemma3.json");
    reference_ = read_floats(kData + "tiny_gemma3.f32");
  }
  static void TearDownTestSuite() { model_.reset(); }

  // Logits of every position, the tokens run in chunks of the given sizes
  // (the last size repeats to the end).
  static std::vector<float> run(std::unique_ptr<attention::Strategy> strategy, std::vector<int64_t> chunks,
                                attention::KvType kv_type = attention::KvType::F32) {
    const std::vector<int32_t> tokens = meta_["token_ids"].get<std::vector<int32_t>>();
    const int64_t n = int64_t(tokens.size()), vocab = model_->config().vocab_size;
    model::Sequence seq = model_->new_sequence(n, kv_type, std::move(strategy));
    std::vector<float> logits(size_t(n * vocab));
    for (size_t i = 0, done = 0; done < size_t(n); ++i) {
      const size_t count = std::min<size_t>(size_t(chunks[std::min(i, chunks.size() - 1)]), size_t(n) - done);
      model_->forward(seq, std::span(tokens).subspan(done, count), int64_t(count), &logits[done * size_t(vocab)]);
      done += count;
    }
    return logits;
  }

  static std::unique_ptr<attention::Strategy> dense() {
    return attention::make_dense(model_->config().attention_shape());
  }

  // Max |ours - reference| over every logit.
  static double max_error(const std::vector<float>& ours, const std::vector<float>& reference) {
    EXPECT_EQ(ours.size(), reference.size());
    double worst = 0;
    for (size_t i = 0; i < std::min(ours.size(), reference.size()); ++i)
      worst = std::max(worst, std::abs(double(ours[i]) - double(reference[i])));
    return worst;
  }

  static std::unique_ptr<model::Model> model_;
  static nlohmann::json meta_;
  static std::vector<float> reference_;
};
std::unique_ptr<model::Model> TinyGemma3::model_;
nlohmann::json TinyGemma3::meta_;
std::vector<float> TinyGemma3::reference_;

TEST_F(TinyGemma3, ReadsTheConfig) {
  const model::Config& c = model_->config();
  EXPECT_EQ(c.architecture, model::Architecture::Gemma3);
  EXPECT_EQ(c.n_layers, meta_["n_layers"].get<int>());
  EXPECT_EQ(c.head_dim, meta_["head_dim"].get<int>());
  EXPECT_EQ(c.sliding_window, meta_["window"].get<int64_t>());
  EXPECT_EQ(c.feed_forward, model::FeedForward::GeluTanhGlu);
  EXPECT_FLOAT_EQ(c.embedding_scale, std::sqrt(float(c.d_model)));
  EXPECT_FLOAT_EQ(c.query_scale, 1.0f);
  EXPECT_FLOAT_EQ(c.final_logit_softcap, meta_["softcap"].get<float>());
  const std::string layer_types = meta_["layer_types"];  // transformers' own layout
  for (int l = 0; l < c.n_layers; ++l) EXPECT_EQ(c.is_local_layer(l), layer_types[size_t(l)] == 'L') << l;
  EXPECT_EQ(c.attention_shape().n_layers, int(std::count(layer_types.begin(), layer_types.end(), 'G')));
  EXPECT_EQ(c.local_attention_shape().n_layers, c.n_local_layers());
  // Global: linear scaling divides base^(-2i/d) by the factor; local: its own base, unscaled.
  const double factor = meta_["rope_linear_factor"], base = meta_["rope_base"], local = meta_["rope_base_swa"];
  ASSERT_EQ(c.rope.inverse_frequencies.size(), size_t(c.head_dim / 2));
  ASSERT_EQ(c.local_rope.inverse_frequencies.size(), size_t(c.head_dim / 2));
  for (int i = 0; i < c.head_dim / 2; ++i) {
    EXPECT_FLOAT_EQ(c.rope.inverse_frequencies[size_t(i)], float(std::pow(base, -2.0 * i / c.head_dim) / factor));
    EXPECT_FLOAT_EQ(c.local_rope.inverse_frequencies[size_t(i)], float(std::pow(local, -2.0 * i / c.head_dim)));
  }
}

// Every feature moves these logits by more than 10 (the generator prints by
// how much): the tolerance below is far from that and far above fp32 error.
TEST_F(TinyGemma3, MatchesTransformersAtEveryPosition) {
  const double scale = std::abs(*std::max_element(reference_.begin(), reference_.end(),
                                                  [](float a, float b) { return std::abs(a) < std::abs(b); }));
  const double tolerance = 1e-4 * scale;
  const double one_pass = max_error(run(dense(), {150}), reference_);
  const double chunked = max_error(run(dense(), {7, 1, 2, 40, 3}), reference_);
  const double token_by_token = max_error(run(dense(), {1}), reference_);
  const double f16_cache = max_error(run(dense(), {11, 64}, attention::KvType::F16), reference_);
  fmt::print("tiny gemma3, max |logit| {:.3f}; max |diff|: one pass {:.2e}, chunked {:.2e}, token by token {:.2e}, "
             "fp16 cache {:.2e}\n", scale, one_pass, chunked, token_by_token, f16_cache);
  EXPECT_LT(one_pass, tolerance);
  EXPECT_LT(chunked, tolerance);
  EXPECT_LT(token_by_token, tolerance);
  EXPECT_LT(f16_cache, 5e-3 * scale);  // keys and values rounded to fp16
}

TEST_F(TinyGemma3, KascadeAtFullBudgetEqualsDense) {
  AttentionOptions options;
  options.method = Method::Kascade;
  options.budget_percent = 100;
  options.tile = 8;
  const std::vector<float> kascade =
      run(attention::make_strategy(options, model_->config().attention_shape()), {40, 1});
  const std::vector<float> dense_logits = run(dense(), {40, 1});
  EXPECT_LT(max_error(kascade, dense_logits), 1e-4);
}

// ---------------------------------------------------------------------------
// Chat template.

TEST(GemmaChatTemplate, MatchesJinjaRendering) {
  const nlohmann::json fixture = read_json(kData + "chat_template.json");
  const tokenizer::ChatTemplate chat = tokenizer::ChatTemplate::from_jinja(fixture["template"].get<std::string>());
  EXPECT_EQ(chat.format(), tokenizer::ChatFormat::kGemma);
  EXPECT_STREQ(chat.format_name(), "gemma");
  int rendered = 0, rejected = 0;
  for (const nlohmann::json& item : fixture["cases"]) {
    std::vector<tokenizer::ChatMessage> messages;
    for (const nlohmann::json& m : item["messages"]) messages.push_back({m["role"], m["content"]});
    const bool generation = item["add_generation_prompt"];
    if (item.contains("error")) {
      EXPECT_THROW(chat.render(messages, generation), Error) << item["messages"].dump();
      ++rejected;
    } else {
      EXPECT_EQ(chat.render(messages, generation), item["expected"].get<std::string>()) << item["messages"].dump();
      ++rendered;
    }
  }
  EXPECT_GE(rendered, 16);
  EXPECT_GE(rejected, 4);
}

// ---------------------------------------------------------------------------
// Gemma 3 270M, when it is in the cache.

std::string gemma_model_path() { return cached_model_path("gemma-3-270m-q4_k_m.gguf"); }

class Gemma3Model : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ops::configure_threads(0);
    file_ = std::make_unique<gguf::File>(gguf::File::open(gemma_model_path()));
    model_ = std::make_unique<model::Model>(model::Model::load(gemma_model_path()));
  }
  static void TearDownTestSuite() {
    model_.reset();
    file_.reset();
  }
  static std::unique_ptr<gguf::File> file_;
  static std::unique_ptr<model::Model> model_;
};
std::unique_ptr<gguf::File> Gemma3Model::file_;
std::unique_ptr<model::Model> Gemma3Model::model_;

class LogitsParity : public Gemma3Model {
 public:
  explicit LogitsParity(std::string prompt) : prompt_(std::move(prompt)) {}

  void TestBody() override {
    const nlohmann::json meta = read_json(kData + prompt_ + ".json");
    const std::vector<int32_t> tokens = meta["tokens"].get<std::vector<int32_t>>();
    const std::vector<int32_t> probes = meta["probes"].get<std::vector<int32_t>>();
    const auto top_ids = meta["top_ids"].get<std::vector<std::vector<int32_t>>>();
    const int64_t columns = meta["columns"].get<int64_t>();
    const std::vector<float> golden = read_floats(kData + prompt_ + ".f32");
    const int64_t n = int64_t(tokens.size()), vocab = model_->config().vocab_size;
    ASSERT_EQ(int64_t(golden.size()), n * columns);
    ASSERT_GT(n, model_->config().sliding_window);

    const std::vector<int32_t> expected_greedy = meta["greedy"].get<std::vector<int32_t>>();
    model::Sequence seq = model_->new_sequence(n + int64_t(expected_greedy.size()), attention::KvType::F32,
                                               attention::make_dense(model_->config().attention_shape()));
    // Chunks of 90 tokens, so that windows reach back across chunk boundaries.
    // The 262144-wide logits cost more than the rest of the model: they are
    // compared at every position of the chunks that reach the window's edge
    // and beyond, and at the last 15 of each chunk before.
    constexpr int64_t kChunk = 90, kEarlyLogits = 15;
    const int64_t window = model_->config().sliding_window;
    std::vector<float> logits(size_t(kChunk * vocab));
    double max_diff = 0, sum_diff = 0, max_logit = 0, max_diff_past_window = 0;
    int64_t compared = 0, positions = 0, top1_agree = 0;
    int32_t next = -1;
    for (int64_t done = 0; done < n; done += kChunk) {
      const int64_t count = std::min(kChunk, n - done);
      const int64_t n_logits = done + count > window ? count : std::min(count, kEarlyLogits);
      model_->forward(seq, std::span(tokens).subspan(size_t(done), size_t(count)), n_logits, logits.data());
      for (int64_t i = 0; i < n_logits; ++i) {
        const int64_t t = done + count - n_logits + i;
        ++positions;
        const float* row = &logits[size_t(i * vocab)];
        const float* expected = &golden[size_t(t * columns)];
        const auto& top = top_ids[size_t(t)];
        for (int64_t c = 0; c < columns; ++c) {
          const int32_t id = c < int64_t(probes.size()) ? probes[size_t(c)] : top[size_t(c) - probes.size()];
          const double diff = std::abs(double(row[id]) - double(expected[c]));
          max_diff = std::max(max_diff, diff);
          if (t >= window) max_diff_past_window = std::max(max_diff_past_window, diff);
          max_logit = std::max(max_logit, std::abs(double(expected[c])));
          sum_diff += diff;
          ++compared;
        }
        const int32_t ours = argmax(row, vocab);
        if (ours == top[0]) {
          ++top1_agree;
        } else {
          // Only acceptable on a near tie in the reference.
          const auto it = std::find(top.begin(), top.end(), ours);
          ASSERT_NE(it, top.end()) << "position " << t << ": our top-1 " << ours << " is outside the reference top-8";
          const double margin = expected[probes.size()] - expected[probes.size() + size_t(it - top.begin())];
          EXPECT_LT(margin, 0.05) << "position " << t;
        }
        if (t == n - 1) next = ours;
      }
    }
    const double mean_diff = sum_diff / double(compared);
    fmt::print("{}: {} of {} positions ({} past the window) x {} logits, max |diff| {:.5f} ({:.5f} past the "
               "window), mean |diff| {:.6f} (max |logit| {:.2f}), top-1 agreement {}/{}\n",
               prompt_, positions, n, n - window, columns, max_diff, max_diff_past_window, mean_diff, max_logit,
               top1_agree, positions);
    // fp32 against float64 on the same dequantized weights: observed about
    // 1.5e-4 at most; a wrong norm, scale, RoPE base or window moves logits by
    // whole units.
    EXPECT_LT(max_diff, 2e-3 * max_logit);
    EXPECT_LT(mean_diff, 1e-3);
    EXPECT_GE(double(top1_agree), 0.99 * double(positions));

    // Greedy continuation through the decode path (its windows slide too).
    std::vector<int32_t> greedy;
    std::vector<float> step_logits(static_cast<size_t>(vocab));
    for (size_t i = 0; i < expected_greedy.size(); ++i) {
      greedy.push_back(next);
      const int32_t one[1] = {next};
      model_->forward(seq, one, 1, step_logits.data());
      next = argmax(step_logits.data(), vocab);
    }
    EXPECT_EQ(greedy, expected_greedy);
  }

 private:
  std::string prompt_;
};

class TokenizerParity : public Gemma3Model {
 public:
  void TestBody() override {
    const tokenizer::Tokenizer tok(*file_);
    EXPECT_EQ(tok.model(), tokenizer::TokenizerModel::kSentencePiece);
    EXPECT_FALSE(tok.add_space_prefix());
    const std::vector<tokenizer::TokenId> with_bos = tok.encode("Hello", true);
    ASSERT_FALSE(with_bos.empty());
    EXPECT_EQ(with_bos.front(), tok.bos_id());

    std::ifstream in(kData + "tokenizer.jsonl");
    ASSERT_TRUE(in);
    std::string line;
    std::getline(in, line);  // meta
    int64_t strings = 0, mismatches = 0, literal_space_differences = 0;
    while (std::getline(in, line)) {
      const nlohmann::json record = nlohmann::json::parse(line);
      const std::string text = record["text"];
      const std::vector<tokenizer::TokenId> expected = record["ids"].get<std::vector<tokenizer::TokenId>>();
      const std::vector<tokenizer::TokenId> ours = tok.encode(text, false, true);
      ++strings;
      // Known difference: Gemma's whitespace-run tokens ("  ", user-defined)
      // are matched in the raw text, as llama.cpp matches them, so a literal
      // U+2581 (SentencePiece's space symbol) typed in the text does not form
      // them; transformers normalises first. A literal U+2581 also decodes as
      // the space it stands for.
      if (text.find("\u2581") != std::string::npos) {
        literal_space_differences += ours != expected;
        continue;
      }
      if (ours != expected && ++mismatches <= 5)
        ADD_FAILURE() << "'" << text << "': " << fmt::format("[{}]", fmt::join(ours, ", ")) << " vs "
                      << fmt::format("[{}]", fmt::join(expected, ", "));
      EXPECT_EQ(tok.decode(expected), text) << "decode of '" << text << "'";
    }
    fmt::print("tokenizer: {} strings, {} differ from transformers (not counted: {} with a literal U+2581 "
               "differ)\n", strings, mismatches, literal_space_differences);
    EXPECT_GE(strings, 200);
    EXPECT_EQ(mismatches, 0);
  }
};

// Registers the real-model tests only when the model is there, so that a
// machine without it neither fails nor reports passes it did not earn.
[[maybe_unused]] const bool kRegistered = [] {
  const std::string path = gemma_model_path();
  if (!std::filesystem::exists(path)) {
    fmt::print(stderr, "note: {} not found; Gemma 3 270M parity tests not registered "
               "(scripts/fetch_model.sh gemma3-270m fetches it)\n", path);
    return false;
  }
  for (const char* prompt : {"gpl3", "python_code"})
    ::testing::RegisterTest("Gemma3Model", (std::string("LogitsParity_") + prompt).c_str(), nullptr, nullptr,
                            __FILE__, __LINE__, [prompt]() -> Gemma3Model* { return new LogitsParity(prompt); });
  ::testing::RegisterTest("Gemma3Model", "TokenizerParity", nullptr, nullptr, __FILE__, __LINE__,
                          []() -> Gemma3Model* { return new TokenizerParity(); });
  return true;
}();

}  // namespace
}  // namespace kascade
