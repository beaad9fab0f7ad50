// The GPU engine against the CPU engine on the same GGUF (label `gpu`;
// skipped without a CUDA device): prefill logits within a relative tolerance
// (bf16 weights and products on the GPU, fp32 on the CPU), greedy tokens
// equal wherever the CPU's choice is not a near-tie, Kascade as well as dense,
// batched decode of sequences of different lengths equal to each alone, and
// the one-line errors for what the GPU does not run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>

#include "core/error.h"
#include "core/model_cache.h"
#include "engine/backend.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "gpu/backend.h"
#include "gpu/device.h"
#include "model/fingerprint.h"
#include "model/synthetic.h"
#include "ops/threading.h"

namespace kascade {
namespace {

// ||a - b|| / ||b||.
double relative_error(std::span<const float> a, std::span<const float> b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

int32_t argmax(std::span<const float> logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// The gap between the best and second-best logit.
float margin(std::span<const float> logits) {
  std::vector<float> top(logits.begin(), logits.end());
  std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<>());
  return top[0] - top[1];
}

std::vector<int32_t> random_tokens(int64_t n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int32_t& t : tokens) t = int32_t(rng() % uint64_t(std::min(vocab, 30000)));
  return tokens;
}

struct Run {
  std::vector<float> prefill_logits;
  std::vector<int32_t> tokens;                // greedy continuation
  std::vector<std::vector<float>> logits;     // at each greedy step
};

// Prefill, then `steps` greedy decode steps.
Run greedy(engine::Backend& backend, const attention::StrategyOptions& attention, std::span<const int32_t> prompt,
           int steps) {
  auto seq = backend.new_sequence({int64_t(prompt.size()) + steps, attention, attention::KvType::F16});
  Run run;
  run.prefill_logits = backend.prefill(*seq, prompt, {}, 512);
  std::vector<float> logits = run.prefill_logits;
  for (int i = 0; i < steps; ++i) {
    const int32_t next = argmax(logits);
    run.tokens.push_back(next);
    run.logits.push_back(logits);
    engine::BackendSequence* one[] = {seq.get()};
    backend.decode(one, std::span(&next, 1), logits.data());
  }
  return run;
}

// GPU against CPU: logits within `tolerance`, tokens equal until the CPU's
// choice is a near-tie (margin under 3x the largest logit difference seen).
void expect_parity(const Run& gpu, const Run& cpu, double tolerance, const std::string& what) {
  const double prefill_error = relative_error(gpu.prefill_logits, cpu.prefill_logits);
  EXPECT_LT(prefill_error, tolerance) << what << ": prefill logits";
  double worst = prefill_error;
  size_t compared = 0;
  for (size_t i = 0; i < cpu.tokens.size(); ++i) {
    float largest = 0;
    for (size_t v = 0; v < cpu.logits[i].size(); ++v)
      largest = std::max(largest, std::abs(gpu.logits[i][v] - cpu.logits[i][v]));
    if (margin(cpu.logits[i]) < 3 * largest) break;  // a near-tie: the continuations may part here
    ASSERT_EQ(gpu.tokens[i], cpu.tokens[i]) << what << ": greedy token " << i;
    worst = std::max(worst, relative_error(gpu.logits[i], cpu.logits[i]));
    ++compared;
  }
  std::printf("%s: logits relative error %.4f (worst over prefill and %zu decode steps), tokens equal\n", what.c_str(),
              worst, compared);
  EXPECT_GT(compared, 0u) << what << ": the first token was already a near-tie";
}

// A byte-level tokenizer to give synthetic models (no model file needed).
const gguf::File& tokenizer_source() {
  static const gguf::File file = [] {
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    for (int b = 0; b < 256; ++b) {
      tokens.push_back(fmt::format("<0x{:02X}>", b));
      types.push_back(6);
    }
    tokens.push_back("</s>");
    types.push_back(3);
    gguf::Writer writer;
    writer.add_string("tokenizer.ggml.model", "llama")
        .add_strings("tokenizer.ggml.tokens", tokens)
        .add_int32s("tokenizer.ggml.token_type", types)
        .add_float32s("tokenizer.ggml.scores", std::vector<float>(tokens.size(), 0.0f))
        .add_uint32("tokenizer.ggml.eos_token_id", 256);
    return writer.parse("<test tokenizer>");
  }();
  return file;
}

// A synthetic llama of `layers` layers, 256 wide, 4/2 heads of 64, vocab 4096, written once per type.
std::string synthetic_model(TensorType type, int layers) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            fmt::format("gpu_engine_{}_{}.gguf", type_traits(type).name, layers))
                               .string();
  if (!std::filesystem::exists(path)) {
    model::SyntheticPreset preset = model::synthetic_preset("tiny");
    preset.n_layers = layers;
    preset.vocab_size = 4096;
    model::write_synthetic_model(preset, type, 3, tokenizer_source(), path);
  }
  return path;
}

class GpuEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!gpu::device_available(&why)) GTEST_SKIP() << "no usable CUDA device: " << why;
    ops::configure_threads(0);
  }
};

attention::StrategyOptions dense() { return {}; }

attention::StrategyOptions kascade_options(const engine::Backend& backend, double percent, int64_t min_k) {
  attention::StrategyOptions o;
  o.name = "kascade";
  o.budget_percent = percent;
  o.min_k = min_k;
  o.profile = default_profile(backend.config().attention_shape());
  return o;
}

// A synthetic llama (4 layers, 256 wide, 4/2 heads of 64) in bf16 and Q8_0.
TEST_F(GpuEngine, SyntheticModelMatchesTheCpu) {
  for (const TensorType type : {TensorType::BF16, TensorType::Q8_0}) {
    const std::string path = synthetic_model(type, 4);
    auto cpu = engine::make_cpu_backend(path);
    auto gpu = gpu::make_cuda_backend(path);
    const std::vector<int32_t> prompt = random_tokens(700, cpu->config().vocab_size, 5);
    expect_parity(greedy(*gpu, dense(), prompt, 12), greedy(*cpu, dense(), prompt, 12), 0.03,
                  fmt::format("synthetic {} dense", type_traits(type).name));
    // Budget 10 % with min_k 32: sparse selections from 320 keys on.
    const auto kascade = kascade_options(*cpu, 10, 32);
    expect_parity(greedy(*gpu, kascade, prompt, 12), greedy(*cpu, kascade, prompt, 12), 0.03,
                  fmt::format("synthetic {} kascade", type_traits(type).name));
  }
}

// Sequences of different lengths in one decode step give what each gives alone.
TEST_F(GpuEngine, BatchedDecodeEqualsEachAlone) {
  auto gpu = gpu::make_cuda_backend(synthetic_model(TensorType::BF16, 6));
  const int vocab = gpu->config().vocab_size;
  for (const attention::StrategyOptions& options : {dense(), kascade_options(*gpu, 10, 64)}) {
    std::vector<std::vector<int32_t>> prompts = {random_tokens(90, vocab, 1), random_tokens(1500, vocab, 2),
                                                 random_tokens(777, vocab, 3)};
    std::vector<std::unique_ptr<engine::BackendSequence>> batch, alone;
    std::vector<int32_t> next_batch, next_alone;
    for (const auto& prompt : prompts) {
      for (auto* list : {&batch, &alone}) {
        list->push_back(gpu->new_sequence({int64_t(prompt.size()) + 8, options, attention::KvType::F16}));
        const std::vector<float> logits = gpu->prefill(*list->back(), prompt, {}, 512);
        (list == &batch ? next_batch : next_alone).push_back(argmax(logits));
      }
    }
    ASSERT_EQ(next_batch, next_alone);
    std::vector<float> logits(prompts.size() * static_cast<size_t>(vocab)), one(static_cast<size_t>(vocab));
    for (int step = 0; step < 6; ++step) {
      std::vector<engine::BackendSequence*> sequences;
      for (auto& s : batch) sequences.push_back(s.get());
      gpu->decode(sequences, next_batch, logits.data());
      for (size_t i = 0; i < prompts.size(); ++i) {
        engine::BackendSequence* single[] = {alone[i].get()};
        gpu->decode(single, std::span(&next_alone[i], 1), one.data());
        const std::span<const float> batched(logits.data() + i * vocab, size_t(vocab));
        EXPECT_LT(relative_error(batched, one), 1e-3) << options.name << " sequence " << i << " step " << step;
        next_batch[i] = argmax(batched);
        next_alone[i] = argmax(one);
      }
      EXPECT_EQ(next_batch, next_alone) << options.name << " step " << step;
    }
  }
}

// The default model on long prompts: dense and Kascade at the shipped profile.
TEST_F(GpuEngine, DefaultModelMatchesTheCpu) {
  const std::string path = default_model_path();
  ASSERT_TRUE(std::filesystem::exists(path)) << "the default model is not at " << path
                                             << " (scripts/fetch_model.sh; KASCADE_CACHE moves it)";
  auto cpu = engine::make_cpu_backend(path);
  auto gpu = gpu::make_cuda_backend(path);
  attention::StrategyOptions kascade = kascade_options(*cpu, 10, 128);
  kascade.profile = model::resolve_profile("", path, cpu->config(), cpu->file(), true);
  for (const int64_t length : {int64_t(1000), int64_t(4000), int64_t(8000)}) {
    const std::vector<int32_t> prompt = random_tokens(length, cpu->config().vocab_size, uint64_t(length));
    expect_parity(greedy(*gpu, dense(), prompt, 8), greedy(*cpu, dense(), prompt, 8), 0.05,
                  fmt::format("default model {} tokens dense", length));
    expect_parity(greedy(*gpu, kascade, prompt, 8), greedy(*cpu, kascade, prompt, 8), 0.05,
                  fmt::format("default model {} tokens kascade", length));
  }
}

TEST_F(GpuEngine, RefusesWhatItDoesNotRun) {
  auto gpu = gpu::make_cuda_backend(synthetic_model(TensorType::BF16, 4));
  attention::StrategyOptions quest;
  quest.name = "quest";
  EXPECT_THROW(gpu->new_sequence({100, quest, attention::KvType::F16}), Error);
  attention::StrategyOptions refined = kascade_options(*gpu, 10, 128);
  refined.refine_factor = 3;
  EXPECT_THROW(gpu->new_sequence({100, refined, attention::KvType::F16}), Error);
  EXPECT_THROW(gpu->new_sequence({int64_t(1) << 40, dense(), attention::KvType::F16}), Error);
  auto seq = gpu->new_sequence({100, dense(), attention::KvType::F16});
  const std::vector<int32_t> prompt = random_tokens(50, gpu->config().vocab_size, 9);
  gpu->prefill(*seq, prompt, {}, 512);
  EXPECT_THROW(gpu->prefill(*seq, prompt, {}, 512), Error);  // one prefill per sequence
}

}  // namespace
}  // namespace kascade
