// The GPU engine against the CPU engine on the same GGUF (label `gpu`;
// skipped without a CUDA device): prefill logits within a relative tolerance
// (bf16 weights and products on the GPU, fp32 on the CPU), greedy tokens
// equal wherever the CPU's choice is not a near-tie, Kascade as well as dense,
// Kascade at a 100 % budget equal to dense, batched decode of sequences of
// different lengths equal to each alone, calibration's statistics equal to
// the CPU's, and the one-line errors for what the GPU does not run. Random
// models attend almost uniformly, so their Kascade selections sit on
// near-ties that bf16 rounding flips: they get a loose
// tolerance; the real model a tight one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <random>

#include "calibration/calibrate.h"
#include "calibration/dev_set.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/half.h"
#include "core/model_cache.h"
#include "engine/backend.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "gpu/backend.h"
#include "gpu/device.h"
#include "gpu/gemm.h"
#include "gpu/matrix.h"
#include "gpu/ops.h"
#include "model/fingerprint.h"
#include "model/synthetic.h"
#include "ops/matmul.h"
#include "ops/threading.h"
#include "quant/types.h"
#include "tokenizer/tokenizer.h"

#include "../tiny_vocabulary.h"

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

// Whether the GPU's logits may rank another token above the CPU's choice:
// a token v can overtake the top one only if its gap to it is under the two
// logits' combined error; with a safety factor of 2 that is a near-tie.
bool near_tie(std::span<const float> gpu, std::span<const float> cpu) {
  const size_t top = size_t(argmax(cpu));
  const float top_error = std::abs(gpu[top] - cpu[top]);
  for (size_t v = 0; v < cpu.size(); ++v)
    if (v != top && cpu[top] - cpu[v] < 2 * (top_error + std::abs(gpu[v] - cpu[v]))) return true;
  return false;
}

std::vector<int32_t> random_tokens(int64_t n, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (int32_t& t : tokens) t = int32_t(rng() % uint64_t(std::min(vocab, 30000)));
  return tokens;
}

struct GreedyRun {
  std::vector<float> prefill_logits;
  std::vector<int32_t> tokens;                // greedy continuation
  std::vector<std::vector<float>> logits;     // at each greedy step
};

// Prefill, then `steps` greedy decode steps.
GreedyRun greedy(engine::Backend& backend, const AttentionOptions& attention, std::span<const int32_t> prompt,
           int steps) {
  auto seq = backend.new_sequence({int64_t(prompt.size()) + steps, attention, attention::KvType::F16});
  GreedyRun run;
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
// choice is a near-tie. Returns how many decode tokens were compared.
size_t expect_parity(const GreedyRun& gpu, const GreedyRun& cpu, double tolerance, const std::string& what) {
  const double prefill_error = relative_error(gpu.prefill_logits, cpu.prefill_logits);
  EXPECT_LT(prefill_error, tolerance) << what << ": prefill logits";
  double worst = prefill_error;
  size_t compared = 0;
  for (size_t i = 0; i < cpu.tokens.size(); ++i) {
    if (near_tie(gpu.logits[i], cpu.logits[i])) break;  // the continuations may part here
    EXPECT_EQ(gpu.tokens[i], cpu.tokens[i]) << what << ": greedy token " << i;
    if (gpu.tokens[i] != cpu.tokens[i]) break;
    worst = std::max(worst, relative_error(gpu.logits[i], cpu.logits[i]));
    ++compared;
  }
  std::printf("%s: logits relative error %.4f (worst over prefill and %zu decode steps), tokens equal\n", what.c_str(),
              worst, compared);
  return compared;
}

// A byte-level tokenizer to give synthetic models (no model file needed).
const gguf::File& tokenizer_source() {
  static const gguf::File file = [] {
    test_vocab::Vocabulary vocabulary("llama");
    vocabulary.byte_fallback().token("</s>", test_vocab::kControl).id("eos", 256);
    return vocabulary.file("<test tokenizer>");
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

AttentionOptions dense() { return {}; }

AttentionOptions kascade_options(const engine::Backend& backend, double percent, int64_t min_k) {
  AttentionOptions o;
  o.method = Method::Kascade;
  o.sparse_phases = SparsePhases::Both;  // the method with reuse: the defaults are a subset
  o.all_anchors = false;
  o.budget_percent = percent;
  o.min_k = min_k;
  o.profile = default_profile(backend.config().attention_shape());
  return o;
}

// A synthetic llama (4 layers, 256 wide, 4/2 heads of 64) in bf16, Q8_0 and
// Q4_K (the quantized ones kept quantized on the device).
TEST_F(GpuEngine, SyntheticModelMatchesTheCpu) {
  for (const TensorType type : {TensorType::BF16, TensorType::Q8_0, TensorType::Q4_K}) {
    const std::string path = synthetic_model(type, 4);
    auto cpu = engine::make_cpu_backend(path);
    auto gpu = gpu::make_cuda_backend(path);
    const std::vector<int32_t> prompt = random_tokens(700, cpu->config().vocab_size, 5);
    EXPECT_GT(expect_parity(greedy(*gpu, dense(), prompt, 12), greedy(*cpu, dense(), prompt, 12), 0.03,
                            fmt::format("synthetic {} dense", type_traits(type).name)),
              0u);
    // Budget 10 % with min_k 32: sparse selections from 320 keys on.
    const auto kascade = kascade_options(*cpu, 10, 32);
    expect_parity(greedy(*gpu, kascade, prompt, 12), greedy(*cpu, kascade, prompt, 12), 0.15,
                  fmt::format("synthetic {} kascade", type_traits(type).name));
    // Every key kept: Kascade's passes must give dense attention.
    const GreedyRun dense_run = greedy(*gpu, dense(), prompt, 6);
    const GreedyRun full = greedy(*gpu, kascade_options(*cpu, 100, 32), prompt, 6);
    EXPECT_LT(relative_error(full.prefill_logits, dense_run.prefill_logits), 0.01) << "kascade at 100 %";
    EXPECT_EQ(full.tokens, dense_run.tokens) << "kascade at 100 %";
  }
}

// Sequences of different lengths decoded in one batch: each row is the same
// sequence decoded alone on the GPU, and stays near the CPU engine's
// (teacher-forced: both sides continue with the CPU's token). Five sequences:
// the quantized models' products run on the tensor cores (gpu::mmq_from), the
// bf16 one's through gemv. Batched and alone differ in how attention splits
// its keys (by the batch): each split rounds its probabilities to 16 bits
// against its own maximum, and the activations' rounding (bf16, and the
// quantized models' int8 inputs, steps of 1/127 of a 32-block's largest value)
// carries that through 6 layers: measured up to 0.68 % (bf16) and 3.4 % (Q4_K,
// Q6_K), while their products equal the single-row ones
// (TensorCoreProductsEqualTheDotKernelRowByRow). Against the CPU likewise
// (measured up to 3.5 % for Q4_K); a row of another sequence or position
// differs by tens of percent.
TEST_F(GpuEngine, BatchedDecodeMatchesTheCpu) {
  for (const TensorType type : {TensorType::BF16, TensorType::Q4_K, TensorType::Q6_K}) {
    const std::string path = synthetic_model(type, 6);
    auto gpu = gpu::make_cuda_backend(path);
    auto cpu = engine::make_cpu_backend(path);
    const int vocab = gpu->config().vocab_size;
    const double bound = type == TensorType::BF16 ? 0.03 : 0.05;
    for (const AttentionOptions& options : {dense(), kascade_options(*gpu, 100, 64)}) {
      const std::vector<std::vector<int32_t>> prompts = {random_tokens(90, vocab, 1), random_tokens(1500, vocab, 2),
                                                         random_tokens(777, vocab, 3), random_tokens(300, vocab, 4),
                                                         random_tokens(1100, vocab, 5)};
      std::vector<std::unique_ptr<engine::BackendSequence>> on_gpu, alone_on_gpu, on_cpu;
      for (const auto& prompt : prompts) {
        const engine::SequenceOptions sequence{int64_t(prompt.size()) + 8, options, attention::KvType::F16};
        on_gpu.push_back(gpu->new_sequence(sequence));
        alone_on_gpu.push_back(gpu->new_sequence(sequence));
        on_cpu.push_back(cpu->new_sequence(sequence));
        gpu->prefill(*on_gpu.back(), prompt, {}, 512);
        gpu->prefill(*alone_on_gpu.back(), prompt, {}, 512);
        cpu->prefill(*on_cpu.back(), prompt, {}, 512);
      }
      std::vector<float> batched(prompts.size() * static_cast<size_t>(vocab)), alone(static_cast<size_t>(vocab)),
          reference(static_cast<size_t>(vocab));
      std::vector<int32_t> tokens = {5, 6, 7, 8, 9};
      for (int step = 0; step < 6; ++step) {
        std::vector<engine::BackendSequence*> sequences;
        for (auto& s : on_gpu) sequences.push_back(s.get());
        gpu->decode(sequences, tokens, batched.data());
        for (size_t i = 0; i < prompts.size(); ++i) {
          const std::string what = fmt::format("{} {} p={} sequence {} step {}", type_traits(type).name,
                                               method_name(options.method), options.budget_percent, i, step);
          engine::BackendSequence* gpu_single[] = {alone_on_gpu[i].get()};
          gpu->decode(gpu_single, std::span(&tokens[i], 1), alone.data());
          engine::BackendSequence* cpu_single[] = {on_cpu[i].get()};
          cpu->decode(cpu_single, std::span(&tokens[i], 1), reference.data());
          const std::span<const float> row(batched.data() + i * vocab, size_t(vocab));
          EXPECT_LT(relative_error(row, alone), bound) << what << ": batched against alone";
          EXPECT_LT(relative_error(row, reference), bound) << what << ": against the CPU";
          tokens[i] = argmax(reference);
        }
      }
    }
  }
}

// Held selections (select_every 2: every other decode step attends each
// layer's last selection, shifted, plus the new keys): alone and batched, the
// GPU holds at the steps the CPU holds, with the CPU's lists (logits within
// the Kascade bound); the first step selects as without holding, the held
// ones differ from selecting afresh.
TEST_F(GpuEngine, HeldSelectionsMatchTheCpu) {
  const std::string path = synthetic_model(TensorType::Q8_0, 4);
  auto gpu = gpu::make_cuda_backend(path);
  auto cpu = engine::make_cpu_backend(path);
  const int vocab = gpu->config().vocab_size;
  AttentionOptions fresh;
  fresh.method = Method::Kascade;
  fresh.budget_percent = 10;
  fresh.min_k = 32;
  fresh.sparse_from = 1;  // every step selects or holds, on both engines
  fresh.select_every = 1;
  AttentionOptions held = fresh;
  held.select_every = 2;

  // GPU against CPU, teacher-forced with the CPU's tokens (the synthetic
  // model's greedy continuations soon reach near-ties): alone, then a batch
  // of three lengths.
  const auto expect_cpu_logits = [&](const std::vector<std::vector<int32_t>>& prompts, const std::string& what) {
    std::vector<std::unique_ptr<engine::BackendSequence>> on_gpu, on_cpu;
    std::vector<engine::BackendSequence*> batch;
    for (const auto& p : prompts) {
      const engine::SequenceOptions sequence{int64_t(p.size()) + 8, held, attention::KvType::F16};
      on_gpu.push_back(gpu->new_sequence(sequence));
      on_cpu.push_back(cpu->new_sequence(sequence));
      gpu->prefill(*on_gpu.back(), p, {}, 512);
      cpu->prefill(*on_cpu.back(), p, {}, 512);
      batch.push_back(on_gpu.back().get());
    }
    std::vector<float> from_gpu(prompts.size() * size_t(vocab)), reference(static_cast<size_t>(vocab));
    std::vector<int32_t> tokens(prompts.size(), 11);
    double worst = 0;
    for (int step = 0; step < 6; ++step) {
      gpu->decode(batch, tokens, from_gpu.data());
      for (size_t i = 0; i < prompts.size(); ++i) {
        engine::BackendSequence* one[] = {on_cpu[i].get()};
        cpu->decode(one, std::span(&tokens[i], 1), reference.data());
        const double error = relative_error(std::span(from_gpu.data() + i * vocab, size_t(vocab)), reference);
        EXPECT_LT(error, 0.15) << what << ": sequence " << i << " step " << step;
        worst = std::max(worst, error);
        tokens[i] = argmax(reference);
      }
    }
    std::printf("held, %s: logits relative error %.4f (worst over 6 steps)\n", what.c_str(), worst);
  };
  expect_cpu_logits({random_tokens(1500, vocab, 7)}, "alone");
  expect_cpu_logits({random_tokens(1200, vocab, 8), random_tokens(2100, vocab, 9), random_tokens(1650, vocab, 10)},
                    "batched");

  const std::vector<int32_t> prompt = random_tokens(1500, vocab, 7);
  const GreedyRun gpu_held = greedy(*gpu, held, prompt, 3);
  const GreedyRun gpu_fresh = greedy(*gpu, fresh, prompt, 3);
  ASSERT_EQ(gpu_fresh.tokens[0], gpu_held.tokens[0]);
  // logits[1] follow the first decode step (it selects), logits[2] the second (it holds).
  EXPECT_LT(relative_error(gpu_held.logits[1], gpu_fresh.logits[1]), 1e-6) << "a selecting step";
  EXPECT_GT(relative_error(gpu_held.logits[2], gpu_fresh.logits[2]), 1e-3) << "a held step";
}

// A random weight matrix in the file encoding of `type` (BF16, F16, Q8_0,
// Q4_K or Q6_K), with its bytes: scales and mins of either sign, every quant value.
struct HostWeight {
  std::vector<uint8_t> bytes;
  ops::Weight weight;
};
HostWeight random_weight(TensorType type, int64_t rows, int64_t cols, std::mt19937_64& rng) {
  HostWeight h;
  const uint64_t row_size = row_bytes(type, cols);
  h.bytes.resize(size_t(row_size * uint64_t(rows)));
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  const auto put_half = [](uint8_t* at, float v) {
    const uint16_t bits = fp32_to_fp16(v);
    std::memcpy(at, &bits, 2);
  };
  switch (type) {
    case TensorType::BF16:
      for (size_t i = 0; i < h.bytes.size(); i += 2) {
        const uint16_t bits = fp32_to_bf16(value(rng));
        std::memcpy(h.bytes.data() + i, &bits, 2);
      }
      break;
    case TensorType::F16:
      for (size_t i = 0; i < h.bytes.size(); i += 2) put_half(h.bytes.data() + i, value(rng));
      break;
    case TensorType::Q8_0:
      for (size_t b = 0; b < h.bytes.size(); b += 34) {
        put_half(h.bytes.data() + b, value(rng) / 127.0f);
        for (int i = 0; i < 32; ++i) h.bytes[b + 2 + size_t(i)] = uint8_t(rng());
      }
      break;
    case TensorType::Q4_0:  // d, then 16 bytes of nibbles
    case TensorType::Q5_0:  // d, the fifth bits, then the nibbles
    case TensorType::Q4_1:  // d, m, then the nibbles
    case TensorType::Q5_1: {  // d, m, the fifth bits, then the nibbles
      const bool offset = type == TensorType::Q4_1 || type == TensorType::Q5_1;
      const size_t size = size_t(type_traits(type).block_bytes);
      for (size_t b = 0; b < h.bytes.size(); b += size) {
        put_half(h.bytes.data() + b, value(rng) / 16.0f);
        if (offset) put_half(h.bytes.data() + b + 2, value(rng));
        for (size_t i = offset ? 4 : 2; i < size; ++i) h.bytes[b + i] = uint8_t(rng());
      }
      break;
    }
    case TensorType::Q4_K:
    case TensorType::Q5_K:  // d, dmin, then scales, (fifth bits,) nibbles
      for (size_t b = 0, size = type == TensorType::Q4_K ? 144 : 176; b < h.bytes.size(); b += size) {
        put_half(h.bytes.data() + b, value(rng) / 1000.0f);
        put_half(h.bytes.data() + b + 2, value(rng) / 1000.0f);
        for (size_t i = 4; i < size; ++i) h.bytes[b + i] = uint8_t(rng());
      }
      break;
    case TensorType::Q6_K:  // nibbles, high bits and signed scales random; d last
      for (size_t b = 0; b < h.bytes.size(); b += 210) {
        for (int i = 0; i < 208; ++i) h.bytes[b + size_t(i)] = uint8_t(rng());
        put_half(h.bytes.data() + b + 208, value(rng) / 4000.0f);
      }
      break;
    default: fail("random_weight: no {}", type_traits(type).name);
  }
  h.weight = {fmt::format("random {}", type_traits(type).name), type, h.bytes.data(), rows, cols, row_size};
  return h;
}

// The device layout on the host: quantized types keep their values (the
// packed rows dequantize, by the layout matrix.h states, to the CPU's values;
// Q4_0 and Q5_0 in the Q8_0 layout).
TEST(GpuMatrixHost, PackingKeepsTheValues) {
  std::mt19937_64 rng(3);
  for (const TensorType type : {TensorType::BF16, TensorType::Q8_0, TensorType::Q4_0, TensorType::Q5_0,
                                TensorType::Q4_1, TensorType::Q5_1, TensorType::Q4_K, TensorType::Q5_K,
                                TensorType::Q6_K}) {
    const HostWeight a = random_weight(type, 3, 512, rng), b = random_weight(type, 2, 512, rng);
    const gpu::MatrixFormat format = gpu::device_format({&a.weight, &b.weight});
    const std::vector<uint8_t> packed = gpu::pack_rows(format, {&a.weight, &b.weight});
    ASSERT_EQ(packed.size(), gpu::device_bytes(format, 5, 512));
    std::vector<float> expected(512);
    for (int64_t r = 0; r < 5; ++r) {
      const ops::Weight& w = r < 3 ? a.weight : b.weight;
      ops::dequantize_weight_row(w, r < 3 ? r : r - 3, expected.data());
      for (int64_t c = 0; c < 512; ++c) {
        float got = 0;
        if (format == gpu::MatrixFormat::BF16) {
          got = bf16_to_fp32(reinterpret_cast<const uint16_t*>(packed.data())[r * 512 + c]);
        } else if (format == gpu::MatrixFormat::Q8_0 || format == gpu::MatrixFormat::Q8_0M) {
          uint16_t scale, offset = 0;
          std::memcpy(&scale, packed.data() + 5 * 512 + 2 * (r * 16 + c / 32), 2);
          if (format == gpu::MatrixFormat::Q8_0M) std::memcpy(&offset, packed.data() + 5 * 512 + 2 * 5 * 16 + 2 * (r * 16 + c / 32), 2);
          got = float(int8_t(packed[size_t(r * 512 + c)])) * fp16_to_fp32(scale) + fp16_to_fp32(offset);
        } else if (format == gpu::MatrixFormat::Q4_K || format == gpu::MatrixFormat::Q5_K) {
          const size_t block_bytes = type == TensorType::Q4_K ? 144 : 176;
          std::vector<float> row(512);
          dequantize_row(type, packed.data() + r * 2 * block_bytes, row.data(), 512);
          got = row[size_t(c)];
        } else {
          // Each block's 208-byte body and its d, put back together.
          std::vector<uint8_t> block(210);
          std::memcpy(block.data(), packed.data() + (r * 2 + c / 256) * 208, 208);
          std::memcpy(block.data() + 208, packed.data() + 5 * 2 * 208 + 2 * (r * 2 + c / 256), 2);
          std::vector<float> values(256);
          dequantize_row(TensorType::Q6_K, block.data(), values.data(), 256);
          got = values[size_t(c % 256)];
        }
        ASSERT_EQ(got, expected[size_t(c)]) << type_traits(type).name << " row " << r << " column " << c;
      }
    }
  }
  // Mixed formats stack in bf16 as one matrix; as a stack, each run keeps its
  // format. Types that share the Q8_0 layout stack in it.
  const HostWeight q8 = random_weight(TensorType::Q8_0, 2, 256, rng), q4 = random_weight(TensorType::Q4_K, 2, 256, rng);
  const HostWeight q4_0 = random_weight(TensorType::Q4_0, 2, 256, rng);
  EXPECT_EQ(gpu::device_format({&q8.weight, &q4.weight}), gpu::MatrixFormat::BF16);
  EXPECT_EQ(gpu::device_format({&q4_0.weight, &q8.weight}), gpu::MatrixFormat::Q8_0);
  EXPECT_EQ(gpu::device_format({&q4_0.weight, &q4.weight}), gpu::MatrixFormat::BF16);
  EXPECT_EQ(gpu::format_runs({&q4_0.weight, &q8.weight, &q4.weight}).size(), 2u);
}

// Where the GPU's Kascade selects at decode: from kGpuSparseFrom keys in the
// longest sequence and sparse_step_keys in the step, at the measured points
// of kGpuSparseFrom's comment (selecting at every step) and
// kGpuHeldStepKeyElements' (the default, holding every other step), on the
// H100 they were measured on; a device with more bandwidth needs more keys; a
// sparse_from the user sets alone decides.
TEST(GpuDecodeRule, SelectsWhereTheStepsKeysRepayTheChain) {
  AttentionOptions set_by_user;
  set_by_user.method = Method::Kascade;
  set_by_user.sparse_from = 0;
  AttentionOptions holding = set_by_user;  // the default
  holding.sparse_from.reset();
  AttentionOptions every_step = holding;
  every_step.select_every = 1;
  constexpr double kH100 = 2.0 * 2619e6 * 5120 / 8;  // its HBM3: 2619 MHz, 5120 bits, as the device reports them
  const auto sparse = [&](const AttentionOptions& options, const Shape& shape, int64_t context, int64_t batch) {
    const Plan plan(engine::with_engine_defaults(options, gpu::kGpuSparseFrom, gpu::kGpuScoring), shape);
    const int64_t step_keys = gpu::sparse_step_keys(shape.n_kv_heads, shape.head_dim, plan.select_every(), kH100);
    return gpu::sparse_decode_step(plan, context, context * batch, step_keys);
  };
  const Shape llama8b{32, 32, 8, 128}, qwen15b{28, 12, 2, 128};
  EXPECT_EQ(gpu::sparse_step_keys(8, 128, 1, kH100), 65536);
  EXPECT_EQ(gpu::sparse_step_keys(2, 128, 1, kH100), 262144);
  EXPECT_EQ(gpu::sparse_step_keys(3, 100, 1, kH100), 223697);  // rounded up
  EXPECT_EQ(gpu::sparse_step_keys(8, 128, 1, 0), 65536);       // bandwidth not reported
  EXPECT_EQ(gpu::sparse_step_keys(8, 128, 1, 2.0e12), 65536);  // slower memory keeps the measured rule
  EXPECT_EQ(gpu::sparse_step_keys(8, 128, 1, 4.8e12), 93903);  // an H200: 64 Mi x 4.8 / 3.35
  EXPECT_EQ(gpu::sparse_step_keys(8, 128, 2, kH100), 16384);   // holding: 16 Mi elements
  EXPECT_EQ(gpu::sparse_step_keys(2, 128, 4, kH100), 65536);
  EXPECT_FALSE(sparse(every_step, llama8b, 32768, 1));  // 0.91x dense when selecting
  EXPECT_TRUE(sparse(every_step, llama8b, 32768, 2));   // 1.08x
  EXPECT_TRUE(sparse(every_step, llama8b, 65536, 1));   // 1.03x
  EXPECT_TRUE(sparse(every_step, llama8b, 16384, 4));   // 1.09x
  EXPECT_FALSE(sparse(every_step, llama8b, 8192, 4));   // 1.01x
  EXPECT_TRUE(sparse(every_step, llama8b, 8192, 8));    // 1.13x
  EXPECT_FALSE(sparse(every_step, llama8b, 4096, 64));  // below kGpuSparseFrom a sequence: unmeasured
  EXPECT_FALSE(sparse(every_step, qwen15b, 30000, 1));  // 0.70x
  EXPECT_FALSE(sparse(every_step, qwen15b, 8192, 16));  // 1.01x
  EXPECT_TRUE(sparse(every_step, qwen15b, 8192, 32));   // 1.11x
  EXPECT_TRUE(sparse(every_step, qwen15b, 16384, 16));  // 1.10x
  EXPECT_TRUE(sparse(every_step, qwen15b, 30000, 16));  // 1.24x
  EXPECT_TRUE(sparse(holding, qwen15b, 8192, 16));      // 1.15x
  EXPECT_FALSE(sparse(holding, qwen15b, 30000, 1));     // 0.88x
  EXPECT_FALSE(sparse(holding, qwen15b, 24576, 2));     // 0.97x
  EXPECT_TRUE(sparse(holding, qwen15b, 16384, 4));      // 1.02x
  EXPECT_TRUE(sparse(holding, qwen15b, 24576, 4));      // 1.11x
  EXPECT_TRUE(sparse(holding, qwen15b, 30000, 16));     // 1.53x
  EXPECT_FALSE(sparse(holding, llama8b, 8192, 1));      // 0.95x
  EXPECT_TRUE(sparse(holding, llama8b, 16384, 1));      // 1.02x
  EXPECT_TRUE(sparse(holding, llama8b, 32768, 1));      // 1.12x
  EXPECT_FALSE(sparse(holding, llama8b, 4096, 64));     // below kGpuSparseFrom a sequence: unmeasured
  const Plan from0(engine::with_engine_defaults(set_by_user, gpu::kGpuSparseFrom, gpu::kGpuScoring), llama8b);
  EXPECT_TRUE(gpu::sparse_decode_step(from0, 1024, 1, 0));
  EXPECT_FALSE(gpu::sparse_decode_step(Plan(AttentionOptions{}, llama8b), 1 << 20, 1 << 24, 0));  // dense attention
}

// A stack's runs: consecutive parts the device keeps in one format (a Q4_K_M
// file's Q/K/V: Q and K in Q4_K, V in Q6_K), and the bytes they take.
TEST(GpuMatrixHost, StacksSplitIntoRunsOfOneFormat) {
  std::mt19937_64 rng(4);
  const HostWeight q = random_weight(TensorType::Q4_K, 8, 512, rng), k = random_weight(TensorType::Q4_K, 2, 512, rng),
                   v = random_weight(TensorType::Q6_K, 2, 512, rng), f = random_weight(TensorType::BF16, 3, 512, rng),
                   h = random_weight(TensorType::F16, 1, 512, rng);
  const std::vector<gpu::WeightParts> qkv = gpu::format_runs({&q.weight, &k.weight, &v.weight});
  ASSERT_EQ(qkv.size(), 2u);
  EXPECT_EQ(qkv[0], (gpu::WeightParts{&q.weight, &k.weight}));
  EXPECT_EQ(qkv[1], (gpu::WeightParts{&v.weight}));
  EXPECT_EQ(gpu::stack_device_bytes({&q.weight, &k.weight, &v.weight}),
            gpu::device_bytes(gpu::MatrixFormat::Q4_K, 10, 512) + gpu::device_bytes(gpu::MatrixFormat::Q6_K, 2, 512));
  // Types the device widens to bf16 share a run; a run between two of one format splits them.
  EXPECT_EQ(gpu::format_runs({&f.weight, &h.weight}).size(), 1u);
  EXPECT_EQ(gpu::format_runs({&q.weight, &v.weight, &k.weight}).size(), 3u);
  EXPECT_EQ(gpu::format_runs({&q.weight}).size(), 1u);
  const HostWeight narrow = random_weight(TensorType::Q4_K, 1, 256, rng);
  EXPECT_THROW(gpu::format_runs({&q.weight, &narrow.weight}), Error);
}

// Worst relative error of out[t][r] (the product added to 0.5) against the
// double-precision sums of `values` [rows][cols] times the n input rows x
// (bf16 bits, or fp16 with half_input), row r's inputs rounded to bf16 first
// where rounded(r) (cuBLAS takes an fp16 input so).
double worst_product_error(const std::vector<float>& values, int64_t rows, int64_t cols,
                           const std::vector<uint16_t>& x, bool half_input, int64_t n, const std::vector<float>& out,
                           const std::function<bool(int64_t)>& rounded) {
  double worst = 0;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0.5, magnitude = 0;
      for (int64_t k = 0; k < cols; ++k) {
        const uint16_t bits = x[size_t(t * cols + k)];
        float xv = half_input ? fp16_to_fp32(bits) : bf16_to_fp32(bits);
        if (rounded(r)) xv = bf16_to_fp32(fp32_to_bf16(xv));
        const double term = double(values[size_t(r * cols + k)]) * xv;
        sum += term;
        magnitude += std::abs(term);
      }
      worst = std::max(worst, std::abs(out[size_t(t * rows + r)] - sum) / magnitude);
    }
  return worst;
}

std::vector<uint16_t> random_input(int64_t count, bool half_input, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint16_t> x(static_cast<size_t>(count));
  for (uint16_t& v : x) v = half_input ? fp32_to_fp16(dist(rng)) : fp32_to_bf16(dist(rng));
  return x;
}

std::vector<float> download(const gpu::DeviceMemory& memory, size_t count) {
  std::vector<float> out(count);
  gpu::check(cudaMemcpy(out.data(), memory.data(), count * sizeof(float), cudaMemcpyDeviceToHost), "download");
  return out;
}

// The products in every device format (the streaming kernel for decode's
// rows, cuBLAS above, a quantized matrix dequantized in slices) against
// double-precision sums of the CPU's dequantized values. bf16: fp32
// accumulation of exact products. Quantized: cuBLAS reads the weights rounded
// to bf16 (relative 2^-9 a term); gemv and mmq read the inputs rounded to int8
// steps of a 32-block's largest magnitude / 127.
TEST_F(GpuEngine, ProductsMatchDoublePrecision) {
  std::mt19937_64 rng(11);
  gpu::Blas blas(size_t(1) << 20, 14336);  // a small buffer, so that big matrices go through in several slices
  for (const TensorType type : {TensorType::BF16, TensorType::Q8_0, TensorType::Q4_0, TensorType::Q5_0,
                                TensorType::Q4_1, TensorType::Q5_1, TensorType::Q4_K, TensorType::Q5_K,
                                TensorType::Q6_K}) {
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{1000, 4096}, {333, 14336}, {4100, 256}}) {
      const HostWeight host = random_weight(type, rows, cols, rng);
      const gpu::DeviceMatrix w = gpu::upload_matrix({&host.weight}, "test weights");
      std::vector<float> values(size_t(rows * cols));
      for (int64_t r = 0; r < rows; ++r) ops::dequantize_weight_row(host.weight, r, values.data() + r * cols);
      for (const int64_t n : {1, 2, 3, 8, 9, 16, 32, 40, 64, 65}) {
        for (const bool half_input : {false, true}) {
          const std::vector<uint16_t> x = random_input(n * cols, half_input, rng);
          const gpu::DeviceMemory device_x = gpu::upload(x, "test input");
          const gpu::DeviceMemory device_out = gpu::upload(std::vector<float>(size_t(n * rows), 0.5f), "test output");
          const gpu::DeviceMemory converted(x.size() * 2, "test conversion");
          blas.matmul(w.view, device_x.as<uint16_t>(), n, device_out.as<float>(), 1.0f, nullptr, half_input,
                      converted.as<uint16_t>());
          const bool rounded = half_input && n > gpu::max_gemv_rows(w.view);
          const double worst = worst_product_error(values, rows, cols, x, half_input, n,
                                                   download(device_out, size_t(n * rows)),
                                                   [&](int64_t) { return rounded; });
          const double tolerance = type == TensorType::BF16 ? 2e-5 : 4e-3;
          EXPECT_LT(worst, tolerance) << type_traits(type).name << " " << rows << "x" << cols << " n=" << n
                                      << (half_input ? " fp16 input" : "");
        }
      }
    }
  }
}

// The tensor-core product of n rows (mmq) against the integer dot-product
// kernel on each row alone, from the same int8 inputs: both sum exact integer
// dots scaled in fp32, so they differ only in the order of fp32 sums.
TEST_F(GpuEngine, TensorCoreProductsEqualTheDotKernelRowByRow) {
  std::mt19937_64 rng(12);
  for (const TensorType type :
       {TensorType::Q8_0, TensorType::Q4_1, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{1000, 4096}, {333, 14336}, {4100, 256}}) {
      const HostWeight host = random_weight(type, rows, cols, rng);
      const gpu::DeviceMatrix w = gpu::upload_matrix({&host.weight}, "test weights");
      constexpr int64_t kMaxRows = gpu::kMaxQuantizedGemvRows;
      const std::vector<uint16_t> x = random_input(kMaxRows * cols, false, rng);
      const gpu::DeviceMemory device_x = gpu::upload(x, "test input");
      const gpu::DeviceMemory quants(size_t(kMaxRows * cols), "test quants");
      const gpu::DeviceMemory scales(size_t(kMaxRows * cols / 32) * sizeof(float), "test scales");
      gpu::quantize_rows(device_x.as<uint16_t>(), false, kMaxRows, cols, {quants.as<int8_t>(), scales.as<float>()},
                         nullptr);
      const gpu::GemvInput input{nullptr, false, quants.as<int8_t>(), scales.as<float>()};
      const gpu::DeviceMemory one_row(size_t(rows) * sizeof(float), "test row output");
      std::vector<std::vector<float>> alone;  // row t through the dot kernel
      for (int64_t t = 0; t < kMaxRows; ++t) {
        gpu::GemvInput row = input;
        row.quants += t * cols;
        row.scales += t * (cols / 32);
        gpu::gemv(w.view, row, 1, one_row.as<float>(), rows, 0.0f, nullptr);
        alone.push_back(download(one_row, size_t(rows)));
      }
      const int from = gpu::mmq_from(w.view.format);
      for (const int64_t n : {int64_t(from), int64_t(from + 1), int64_t(8), int64_t(9), int64_t(16), int64_t(33),
                              kMaxRows}) {
        const gpu::DeviceMemory out(size_t(n * rows) * sizeof(float), "test output");
        gpu::gemv(w.view, input, n, out.as<float>(), rows, 0.0f, nullptr);
        const std::vector<float> together = download(out, size_t(n * rows));
        for (int64_t t = 0; t < n; ++t)
          EXPECT_LT(relative_error(std::span(together).subspan(size_t(t * rows), size_t(rows)), alone[size_t(t)]),
                    1e-5)
              << type_traits(type).name << " " << rows << "x" << cols << " n=" << n << " row " << t;
      }
    }
  }
}

// A stack whose parts the device keeps in different formats: each run gives
// its rows of one output, through every product path (gemv, mmq, cuBLAS) and
// through the quantized input written once for all runs (the fused norm's).
TEST_F(GpuEngine, MixedStacksMatchDoublePrecision) {
  std::mt19937_64 rng(13);
  const int64_t cols = 1024;
  gpu::Blas blas(size_t(1) << 20, cols);
  for (const std::vector<TensorType>& types : {std::vector{TensorType::Q4_K, TensorType::Q4_K, TensorType::Q6_K},
                                              std::vector{TensorType::BF16, TensorType::Q8_0}}) {
    const int64_t part_rows[] = {300, 50, 70};
    std::vector<HostWeight> hosts;
    hosts.reserve(types.size());
    gpu::WeightParts parts;
    for (size_t i = 0; i < types.size(); ++i) {
      hosts.push_back(random_weight(types[i], part_rows[i], cols, rng));
      parts.push_back(&hosts.back().weight);
    }
    const gpu::DeviceStack stack = gpu::upload_stack(parts, "test stack");
    ASSERT_EQ(stack.runs.size(), 2u);
    const int64_t rows = gpu::stacked_rows(parts), first_of_last = rows - stack.runs.back().rows;
    std::vector<float> values(size_t(rows * cols));
    int64_t row = 0;
    for (const ops::Weight* w : parts)
      for (int64_t r = 0; r < w->rows; ++r) ops::dequantize_weight_row(*w, r, values.data() + (row++) * cols);
    const std::string what = std::string(type_traits(types.front()).name) + " stack";
    for (const int64_t n : {1, 3, 5, 9, 40, 70}) {
      for (const bool half_input : {false, true}) {
        const std::vector<uint16_t> x = random_input(n * cols, half_input, rng);
        const gpu::DeviceMemory device_x = gpu::upload(x, "test input");
        const gpu::DeviceMemory device_out = gpu::upload(std::vector<float>(size_t(n * rows), 0.5f), "test output");
        const gpu::DeviceMemory converted(x.size() * 2, "test conversion");
        blas.matmul(stack.runs, device_x.as<uint16_t>(), n, device_out.as<float>(), 1.0f, nullptr, half_input,
                    converted.as<uint16_t>());
        const auto rounded = [&](int64_t r) {
          return half_input && n > gpu::max_gemv_rows(stack.runs[r < first_of_last ? 0 : 1]);
        };
        EXPECT_LT(worst_product_error(values, rows, cols, x, half_input, n, download(device_out, size_t(n * rows)),
                                      rounded),
                  4e-3)
            << what << " n=" << n << (half_input ? " fp16 input" : "");
        if (!blas.takes_quantized_input(stack.runs, n)) continue;
        const gpu::DeviceMemory fused_out = gpu::upload(std::vector<float>(size_t(n * rows), 0.5f), "test output");
        gpu::quantize_rows(device_x.as<uint16_t>(), half_input, n, cols, blas.quantized_input(), nullptr);
        blas.matmul_quantized(stack.runs, n, fused_out.as<float>(), 1.0f, nullptr);
        EXPECT_LT(worst_product_error(values, rows, cols, x, half_input, n, download(fused_out, size_t(n * rows)),
                                      [](int64_t) { return false; }),
                  4e-3)
            << what << " quantized input, n=" << n << (half_input ? " fp16 input" : "");
      }
    }
  }
}

// Dequantizing on the device gives the bf16 rows the host packs, bit for
// bit; gathering rows gives their values times the scale.
TEST_F(GpuEngine, DequantizeAndGatherMatchTheHost) {
  std::mt19937_64 rng(12);
  for (const TensorType type : {TensorType::BF16, TensorType::Q8_0, TensorType::Q4_0, TensorType::Q4_1,
                                TensorType::Q5_1, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
    const HostWeight host = random_weight(type, 300, 1024, rng);
    const gpu::DeviceMatrix w = gpu::upload_matrix({&host.weight}, "test weights");
    const std::vector<uint8_t> expected = gpu::pack_rows(gpu::MatrixFormat::BF16, {&host.weight});
    const gpu::DeviceMemory out(200 * 1024 * 2, "test output");
    gpu::dequantize_rows(w.view, 77, 200, out.as<uint16_t>(), nullptr);
    std::vector<uint8_t> got(out.bytes());
    gpu::check(cudaMemcpy(got.data(), out.data(), got.size(), cudaMemcpyDeviceToHost), "download");
    EXPECT_TRUE(std::equal(got.begin(), got.end(), expected.begin() + 77 * 1024 * 2)) << type_traits(type).name;

    const std::vector<int32_t> rows = {5, 299, 0, 5};
    const gpu::DeviceMemory device_rows = gpu::upload(rows, "test rows");
    const gpu::DeviceMemory gathered(rows.size() * 1024 * sizeof(float), "test output");
    gpu::gather_rows(w.view, device_rows.as<int32_t>(), int(rows.size()), 0.5f, gathered.as<float>(), nullptr);
    std::vector<float> x(rows.size() * 1024), row(1024);
    gpu::check(cudaMemcpy(x.data(), gathered.data(), x.size() * sizeof(float), cudaMemcpyDeviceToHost), "download");
    for (size_t t = 0; t < rows.size(); ++t) {
      ops::dequantize_weight_row(host.weight, rows[t], row.data());
      for (size_t c = 0; c < 1024; ++c)
        ASSERT_EQ(x[t * 1024 + c], row[c] * 0.5f) << type_traits(type).name << " token " << t << " column " << c;
    }
  }
}

// The steps that write a quantized product's input themselves (the norm and
// the gated activation before decode's products) give the bits of the two
// steps they replace: the bf16 step, then quantize_rows.
TEST_F(GpuEngine, FusedQuantizedInputsMatchTwoSteps) {
  std::mt19937_64 rng(13);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  const auto fill = [&](std::vector<float>& v) { for (float& f : v) f = dist(rng); };
  const auto bytes_of = [](const gpu::DeviceMemory& m) {
    std::vector<uint8_t> host(m.bytes());
    gpu::check(cudaMemcpy(host.data(), m.data(), host.size(), cudaMemcpyDeviceToHost), "download");
    return host;
  };
  struct Quantized {
    gpu::DeviceMemory quants, scales;
    Quantized(int64_t values) : quants(size_t(values), "test quants"), scales(size_t(values / 32) * 4, "test scales") {}
    gpu::QuantizedRows rows() const { return {quants.as<int8_t>(), scales.as<float>()}; }
  };
  const int n = 3;
  // 576 wide: 144 float4s on 160 threads (idle lanes); 14336: four float4s a thread.
  for (const int dim : {576, 4096, 14336}) {
    std::vector<float> x(size_t(n) * dim), weight(static_cast<size_t>(dim));
    fill(x);
    fill(weight);
    const gpu::DeviceMemory device_x = gpu::upload(x, "test rows"), device_weight = gpu::upload(weight, "test norm");
    const gpu::DeviceMemory normed(size_t(n) * dim * 2, "test normed");
    Quantized two_steps(int64_t(n) * dim), fused(int64_t(n) * dim);
    gpu::rms_norm(device_x.as<float>(), device_weight.as<float>(), n, dim, 1e-5f, normed.as<uint16_t>(), nullptr);
    gpu::quantize_rows(normed.as<uint16_t>(), false, n, dim, two_steps.rows(), nullptr);
    gpu::rms_norm_quantized(device_x.as<float>(), device_weight.as<float>(), n, dim, 1e-5f, fused.rows(), nullptr);
    EXPECT_EQ(bytes_of(fused.quants), bytes_of(two_steps.quants)) << "norm, " << dim << " wide";
    EXPECT_EQ(bytes_of(fused.scales), bytes_of(two_steps.scales)) << "norm, " << dim << " wide";
  }
  const int ffn = 1056;  // 33 blocks of 32 a row: the rows' blocks straddle warps
  for (const bool gelu : {false, true}) {
    std::vector<float> gate_up(size_t(n) * 2 * ffn);
    fill(gate_up);
    const gpu::DeviceMemory device_gate_up = gpu::upload(gate_up, "test gate/up");
    const gpu::DeviceMemory activated(size_t(n) * ffn * 2, "test activated");
    Quantized two_steps(int64_t(n) * ffn), fused(int64_t(n) * ffn);
    gpu::gated_activation(device_gate_up.as<float>(), n, ffn, gelu, activated.as<uint16_t>(), nullptr);
    gpu::quantize_rows(activated.as<uint16_t>(), false, n, ffn, two_steps.rows(), nullptr);
    gpu::gated_activation_quantized(device_gate_up.as<float>(), n, ffn, gelu, fused.rows(), nullptr);
    EXPECT_EQ(bytes_of(fused.quants), bytes_of(two_steps.quants)) << (gelu ? "GELU" : "SiLU");
    EXPECT_EQ(bytes_of(fused.scales), bytes_of(two_steps.scales)) << (gelu ? "GELU" : "SiLU");
  }
}

// `length` tokens of the haystack from token `offset` on (a real model is
// confident on real text; random tokens leave it at near-ties).
std::vector<int32_t> prose(const std::vector<int32_t>& haystack, int64_t offset, int64_t length) {
  if (offset + length > int64_t(haystack.size())) fail("the haystack has only {} tokens", haystack.size());
  return {haystack.begin() + offset, haystack.begin() + offset + length};
}

// The default model on ten long prompts (1K-8K tokens from different places
// of the haystack): dense, Kascade with reuse at the shipped profile, and the
// default's every layer selecting, held at every other step.
TEST_F(GpuEngine, DefaultModelMatchesTheCpu) {
  const std::string path = default_model_path();
  ASSERT_TRUE(std::filesystem::exists(path)) << "the default model is not at " << path
                                             << " (scripts/fetch_model.sh; KASCADE_CACHE moves it)";
  auto cpu = engine::make_cpu_backend(path);
  auto gpu = gpu::make_cuda_backend(path);
  const tokenizer::Tokenizer tokenizer(cpu->file());
  std::string haystack_path = std::string(KASCADE_SOURCE_DIR) + "/data/haystack/haystack.txt";
  if (!std::filesystem::exists(haystack_path)) haystack_path = "data/haystack/haystack.txt";  // another checkout
  const std::vector<int32_t> haystack = tokenizer.encode(read_file(haystack_path, "haystack"), true);
  AttentionOptions kascade = kascade_options(*cpu, 10, 128);
  kascade.profile = model::resolve_profile("", path, cpu->config(), cpu->file(), true);
  // The CPU's threshold on both engines: left to its step rule, the GPU
  // decodes steps this small densely, and its logits would then differ from
  // the CPU's selecting ones by Kascade's own error (11-19 % on some prompts).
  kascade.sparse_from = engine::kCpuSparseFrom;
  AttentionOptions held;
  held.method = Method::Kascade;
  held.profile = kascade.profile;
  held.sparse_from = engine::kCpuSparseFrom;
  held.select_every = 2;
  size_t compared = 0, runs = 0;  // decode tokens compared before a near-tie, over all prompts
  const int64_t lengths[] = {1000, 8000, 2000, 7000, 3000, 6000, 4000, 5000, 1500, 8000};
  for (size_t p = 0; p < std::size(lengths); ++p) {
    const std::vector<int32_t> prompt = prose(haystack, 1000 + int64_t(p) * 30011, lengths[p]);
    for (const AttentionOptions& options : {dense(), kascade, held}) {
      compared += expect_parity(greedy(*gpu, options, prompt, 8), greedy(*cpu, options, prompt, 8), 0.05,
                                fmt::format("default model, prompt {}, {} tokens, {}{}", p, lengths[p],
                                            method_name(options.method),
                                            options.select_every.value_or(1) > 1 ? " held" : ""));
      ++runs;
    }
  }
  // Near-ties end a comparison early; most runs must get through most steps.
  EXPECT_GE(compared, runs * 8 / 2) << "too few decode tokens compared: the prompts leave the model at near-ties";
}

// `kascade calibrate --device cuda`: the GPU's dense prefill, shown layer by
// layer, gives the statistics the CPU engine gives (fp16 queries and keys
// against fp32 ones: the tile minima and the top-k sets move a little, the
// anchor choice must not lose against the CPU's own).
TEST_F(GpuEngine, CalibrationMatchesTheCpu) {
  const std::string path = default_model_path();
  ASSERT_TRUE(std::filesystem::exists(path)) << "the default model is not at " << path;
  const model::Model cpu = model::Model::load(path);
  auto gpu = gpu::make_cuda_backend(path);
  const tokenizer::Tokenizer tokenizer(cpu.file());
  const std::string dev_set = std::string(KASCADE_SOURCE_DIR) + "/data/devset/devset.txt";
  const auto documents = calibration::parse_dev_set(read_file(dev_set, "dev set"), dev_set);
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < 3; ++i) {
    std::vector<int32_t> tokens = tokenizer.encode(documents[i].text, true);
    tokens.resize(std::min<size_t>(tokens.size(), 700 + 150 * i));
    prompts.push_back(std::move(tokens));
  }
  calibration::CalibrationOptions options;
  const calibration::CalibrationResult on_cpu = calibration::calibrate(cpu, prompts, options);
  const calibration::CalibrationResult on_gpu = calibration::calibrate(*gpu, prompts, options);

  const auto max_and_mean = [](std::span<const double> a, std::span<const double> b) {
    double largest = 0, sum = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      largest = std::max(largest, std::abs(a[i] - b[i]));
      sum += std::abs(a[i] - b[i]);
    }
    return std::pair{largest, sum / double(a.size())};
  };
  const auto [head_max, head_mean] = max_and_mean(on_gpu.head_similarity.values(), on_cpu.head_similarity.values());
  EXPECT_LT(head_mean, 0.01);
  EXPECT_LT(head_max, 0.15);
  const auto [layer_max, layer_mean] = max_and_mean(on_gpu.layer_similarity, on_cpu.layer_similarity);
  EXPECT_LT(layer_mean, 0.01);
  EXPECT_LT(layer_max, 0.08);
  const auto [captured_max, captured_mean] = max_and_mean(on_gpu.captured_top_k, on_cpu.captured_top_k);
  EXPECT_LT(captured_mean, 0.005);
  EXPECT_LT(captured_max, 0.03);
  for (size_t l = 0; l < on_cpu.importance.size(); ++l)
    EXPECT_NEAR(on_gpu.importance[l], on_cpu.importance[l], 0.02 * on_cpu.importance[l] + 1e-4) << "layer " << l;
  EXPECT_EQ(on_gpu.prompt_tokens, on_cpu.prompt_tokens);
  EXPECT_EQ(on_gpu.top_k_tiles, on_cpu.top_k_tiles);
  // The GPU's anchors, scored on the CPU's statistics, within 1 % of the CPU's best.
  for (int m = options.min_anchors; m <= options.max_anchors; ++m) {
    const double cpu_best = on_cpu.solution(m).score;
    const double gpu_choice =
        calibration::anchor_objective(on_cpu.layer_similarity, on_cpu.importance, on_gpu.solution(m).anchors);
    EXPECT_GE(gpu_choice, 0.99 * cpu_best) << m << " anchors";
  }
}

TEST_F(GpuEngine, RefusesWhatItDoesNotRun) {
  auto gpu = gpu::make_cuda_backend(synthetic_model(TensorType::BF16, 4));
  AttentionOptions quest;
  quest.method = Method::Quest;
  EXPECT_THROW(gpu->new_sequence({100, quest, attention::KvType::F16}), Error);
  AttentionOptions refined = kascade_options(*gpu, 10, 128);
  refined.refine_factor = 3;
  EXPECT_THROW(gpu->new_sequence({100, refined, attention::KvType::F16}), Error);
  EXPECT_THROW(gpu->new_sequence({int64_t(1) << 40, dense(), attention::KvType::F16}), Error);
  // Kascade's sparse prefill continues a sequence only on a tile boundary.
  const AttentionOptions kascade = kascade_options(*gpu, 10, 32);
  auto seq = gpu->new_sequence({200, kascade, attention::KvType::F16});
  const std::vector<int32_t> prompt = random_tokens(50, gpu->config().vocab_size, 9);
  gpu->prefill(*seq, prompt, {}, 512);
  EXPECT_THROW(gpu->prefill(*seq, prompt, {}, 512), Error);
  // One decode step runs one attention setting: not dense beside Kascade, nor
  // the default's step rule beside a sparse_from the user set to its value.
  AttentionOptions set_from = kascade;
  set_from.sparse_from = gpu::kGpuSparseFrom;
  const std::vector<int32_t> tokens{1, 1};
  std::vector<float> logits(2 * size_t(gpu->config().vocab_size));
  for (const AttentionOptions& other : {dense(), set_from}) {
    auto first = gpu->new_sequence({100, kascade, attention::KvType::F16});
    auto second = gpu->new_sequence({100, other, attention::KvType::F16});
    gpu->prefill(*first, prompt, {}, 512);
    gpu->prefill(*second, prompt, {}, 512);
    EXPECT_NE(gpu->decode_group(*first), gpu->decode_group(*second));  // the scheduler keeps them apart
    engine::BackendSequence* both[] = {first.get(), second.get()};
    EXPECT_THROW(gpu->decode(both, tokens, logits.data()), Error) << method_name(other.method);
  }
}

// A prompt prefilled in chunks (as the scheduler sends a long one) gives the
// logits of one pass, and decode goes on the same (teacher-forced), dense
// and Kascade with its sparse prefill. Chunks on multiples of 128 keep the
// attention kernels' rows bit-equal (prefill_exact_multiple is 128 at this
// shape); what may differ is the products' rounding at other row counts.
TEST_F(GpuEngine, ChunkedPrefillMatchesOnePass) {
  auto gpu = gpu::make_cuda_backend(synthetic_model(TensorType::BF16, 4));
  const std::vector<int32_t> prompt = random_tokens(1700, gpu->config().vocab_size, 21);
  for (const AttentionOptions& options : {dense(), kascade_options(*gpu, 10, 32)}) {
    const GreedyRun one_pass = greedy(*gpu, options, prompt, 6);
    auto seq = gpu->new_sequence({int64_t(prompt.size()) + 6, options, attention::KvType::F16});
    std::vector<float> logits;
    for (size_t start = 0; start < prompt.size(); start += 512)
      logits = gpu->prefill(*seq, std::span(prompt).subspan(start, std::min<size_t>(512, prompt.size() - start)), {},
                            512);
    const double tolerance = options.method == Method::Dense ? 1e-3 : 0.05;
    double worst = relative_error(logits, one_pass.prefill_logits);
    EXPECT_LT(worst, tolerance) << method_name(options.method) << " prefill";
    for (size_t i = 0; i < one_pass.tokens.size(); ++i) {
      engine::BackendSequence* one[] = {seq.get()};
      gpu->decode(one, std::span(&one_pass.tokens[i], 1), logits.data());
      if (i + 1 < one_pass.logits.size()) {
        const double error = relative_error(logits, one_pass.logits[i + 1]);
        EXPECT_LT(error, tolerance) << method_name(options.method) << " decode step " << i;
        worst = std::max(worst, error);
      }
    }
    std::printf("chunked prefill %s: logits relative error %.2e against one pass\n", std::string(method_name(options.method)).c_str(), worst);
  }
}

}  // namespace
}  // namespace kascade
