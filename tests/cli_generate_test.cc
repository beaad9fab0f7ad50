// `kascade generate` doing its job, run as a user runs it: what it writes
// beside the text. The reference is the library's own forward pass over the
// same tokens in one prefill, a different path from the CLI's (chunked
// prefill, then one decode step per token through the scheduler).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "attention/attention.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

#include "run_kascade.h"

namespace kascade {
namespace {

namespace fs = std::filesystem;

const std::string kTinyQwen = std::string(KASCADE_SOURCE_DIR) + "/tests/data/tiny_models/qwen2_bias.gguf";

class CliGenerate : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() / fmt::format("kascade_cli_generate_{}_{}", info->name(), ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

// Row i of --logits-out is the distribution token i was sampled from: greedy,
// so token i is its argmax, and a one-pass forward over the prompt and the
// tokens before i gives the same logits at the position before token i.
TEST_F(CliGenerate, LogitsOutHoldsEachStepsLogits) {
  const std::string prompt_text = "The tiny model reads this prompt and writes";
  constexpr int kNewTokens = 6;
  const fs::path logits_file = dir_ / "logits.f32";
  const test_cli::Outcome o = test_cli::run_kascade(
      {.args = {"generate", "-m", kTinyQwen, "--raw", "-q", "-n", std::to_string(kNewTokens), "--kv-type", "f32",
                "-p", prompt_text, "--logits-out", logits_file.string()},
       .dir = dir_});
  ASSERT_TRUE(o.exited && o.status == 0) << o.err;

  const model::Model model = model::Model::load(kTinyQwen);
  const int vocab = model.config().vocab_size;
  const std::string bytes = test_cli::read_bytes(logits_file);
  ASSERT_EQ(bytes.size() % (sizeof(float) * size_t(vocab)), 0u) << bytes.size();
  const int64_t rows = int64_t(bytes.size() / (sizeof(float) * size_t(vocab)));
  // Every step up to the limit; one more where an end token stopped it early.
  ASSERT_GE(rows, 1);
  ASSERT_LE(rows, kNewTokens);
  std::vector<float> written(bytes.size() / sizeof(float));
  std::memcpy(written.data(), bytes.data(), bytes.size());

  const tokenizer::Tokenizer tokenizer(model.file());
  std::vector<int32_t> tokens = tokenizer.encode(prompt_text, /*add_special_tokens=*/true, /*parse_special=*/false);
  const int64_t n_prompt = int64_t(tokens.size());
  for (int64_t i = 0; i + 1 < rows; ++i) {
    const float* row = written.data() + i * vocab;
    tokens.push_back(int32_t(std::max_element(row, row + vocab) - row));
  }
  const int64_t n = int64_t(tokens.size());
  model::Sequence seq =
      model.new_sequence(n, attention::KvType::F32, attention::make_dense(model.config().attention_shape()));
  std::vector<float> reference(size_t(n) * size_t(vocab));
  model.forward(seq, tokens, n, reference.data());

  for (int64_t i = 0; i < rows; ++i) {
    const float* row = written.data() + i * vocab;
    const float* expected = reference.data() + (n_prompt - 1 + i) * vocab;
    double worst = 0, largest = 0;
    for (int v = 0; v < vocab; ++v) {
      ASSERT_TRUE(std::isfinite(row[v])) << "step " << i << " token " << v;
      worst = std::max(worst, std::abs(double(row[v]) - double(expected[v])));
      largest = std::max(largest, std::abs(double(expected[v])));
    }
    EXPECT_LE(worst, 1e-3 * largest) << "step " << i;
  }
}

// A model without a calibration profile (the tiny one ships none): the
// default Kascade, every layer selecting, reads no anchors and says nothing
// of it; with --reuse the evenly spread anchors are a choice worth a line.
TEST_F(CliGenerate, MissingProfileIsNamedOnlyWhereLayersReuse) {
  const auto run = [&](std::vector<std::string> attention) {
    std::vector<std::string> args = {"generate", "-m", kTinyQwen, "--raw", "-n", "2", "-p", "Some words to read"};
    args.insert(args.end(), attention.begin(), attention.end());
    return test_cli::run_kascade({.args = args, .dir = dir_});
  };
  const std::string warning = "no calibration profile for this model";
  const test_cli::Outcome selecting = run({"--attention", "kascade"});
  ASSERT_TRUE(selecting.exited && selecting.status == 0) << selecting.err;
  EXPECT_EQ(selecting.err.find(warning), std::string::npos) << selecting.err;
  const test_cli::Outcome reusing = run({"--attention", "kascade", "--reuse"});
  ASSERT_TRUE(reusing.exited && reusing.status == 0) << reusing.err;
  EXPECT_NE(reusing.err.find(warning), std::string::npos) << reusing.err;
}

}  // namespace
}  // namespace kascade
