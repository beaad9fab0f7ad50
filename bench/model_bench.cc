// Whole-model throughput: prefill and decode tok/s, peak memory and where the
// time goes (weight products vs attention) per prompt length and attention
// strategy. Prints one table; medians over --repeats runs.
//
//   model_bench [--model PATH] [--lengths 512,2048,8192] [--strategies dense,kascade,kascade-refine3]
//               [--chunks 512,1024] [--threads 2] [--decode-tokens 32] [--repeats 3]
#include <algorithm>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "attention/strategies.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/model_cache.h"
#include "core/timer.h"
#include "engine/backend.h"
#include "eval/strategy_spec.h"
#include "model/fingerprint.h"
#include "model/model.h"
#include "ops/threading.h"

namespace {

using namespace kascade;

struct Measurement {
  double prefill_tokens_per_second = 0, prefill_matmul_share = 0, prefill_attention_share = 0;
  double decode_tokens_per_second = 0, decode_matmul_share = 0, decode_attention_share = 0;
  uint64_t peak_bytes = 0;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Resets the kernel's peak-RSS counter so each configuration reports its own peak.
void reset_peak_memory() { std::ofstream("/proc/self/clear_refs") << "5"; }

Measurement run_once(const model::Model& model, const AttentionOptions& options, int64_t length,
                     int64_t chunk, int64_t decode_tokens, uint64_t seed) {
  const model::Config& config = model.config();
  std::mt19937_64 rng(seed);
  std::vector<int32_t> prompt(static_cast<size_t>(length));
  for (int32_t& token : prompt) token = int32_t(rng() % uint64_t(config.vocab_size));
  reset_peak_memory();
  model::Sequence seq = model.new_sequence(length + decode_tokens, attention::KvType::F16,
                                           attention::make_strategy(engine::with_engine_defaults(options, engine::kCpuSparseFrom, engine::kCpuScoring),
                                                                    config.attention_shape()));
  std::vector<float> logits = model.prefill(seq, prompt, {}, chunk);
  const model::TimeSplit prefill = seq.time;
  Measurement m;
  m.prefill_tokens_per_second = double(length) / prefill.total_seconds;
  m.prefill_matmul_share = prefill.matmul_seconds / prefill.total_seconds;
  m.prefill_attention_share = prefill.attention_seconds / prefill.total_seconds;
  for (int64_t i = 0; i < decode_tokens; ++i) {
    const int32_t next[1] = {int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin())};
    model.forward(seq, next, 1, logits.data());
  }
  const double decode_seconds = seq.time.total_seconds - prefill.total_seconds;
  m.decode_tokens_per_second = double(decode_tokens) / decode_seconds;
  m.decode_matmul_share = (seq.time.matmul_seconds - prefill.matmul_seconds) / decode_seconds;
  m.decode_attention_share = (seq.time.attention_seconds - prefill.attention_seconds) / decode_seconds;
  m.peak_bytes = peak_resident_bytes();
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  kascade::ops::prepare_environment(argv);
  CLI::App app{"Whole-model prefill/decode throughput per prompt length and attention strategy"};
  std::string model_path = default_model_path();
  std::vector<int64_t> lengths = {512, 2048, 8000};
  std::vector<std::string> strategies = {"dense"};
  std::vector<int64_t> chunks = {512};
  std::string profile_path;
  int threads = 2;
  int64_t decode_tokens = 32;
  int repeats = 3;
  double budget = 10;
  app.add_option("--model", model_path)->capture_default_str();
  app.add_option("--lengths", lengths)->delimiter(',')->capture_default_str();
  app.add_option("--strategies", strategies)->delimiter(',')->capture_default_str();
  app.add_option("--chunks", chunks, "prefill chunk sizes to compare (tokens per forward step)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--profile", profile_path, "Kascade profile (default: the shipped one if present)");
  app.add_option("--budget", budget)->capture_default_str();
  app.add_option("--threads", threads)->capture_default_str();
  app.add_option("--decode-tokens", decode_tokens)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats)->capture_default_str()->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    ops::configure_threads(threads);
    const model::Model model = model::Model::load(model_path);
    const model::Config& config = model.config();
    // Entries as `kascade eval` names them (kascade, kascade-reuse-refine3, ...).
    if (profile_path.empty()) profile_path = model::shipped_profile_path(model_path);
    std::vector<eval::StrategySpec> specs;
    for (const std::string& name : strategies) {
      eval::StrategySpec& spec = specs.emplace_back(eval::parse_strategy_spec(name, budget));
      if (spec.options.kascade() && !profile_path.empty())
        spec.options.profile = model::load_checked_profile(profile_path, config.attention_shape(), model.file());
    }
    fmt::print("model {} ({} layers, {} heads / {} KV heads, d {}), {} threads, KV f16, medians of {} runs, "
               "{} decode tokens after the prompt\n\n",
               config.name, config.n_layers, config.n_heads, config.n_kv_heads, config.head_dim, threads, repeats,
               decode_tokens);
    fmt::print("| {:>6} | {:>5} | {:<22} | {:>12} | {:>9} | {:>9} | {:>11} | {:>9} | {:>9} | {:>9} |\n", "prompt",
               "chunk", "attention", "prefill t/s", "matmul %", "attn %", "decode t/s", "matmul %", "attn %", "peak MiB");
    fmt::print("|{:-<8}|{:-<7}|{:-<24}|{:-<14}|{:-<11}|{:-<11}|{:-<13}|{:-<11}|{:-<11}|{:-<11}|\n", "", "", "", "", "",
               "", "", "", "", "");
    for (const int64_t length : lengths) {
      if (length + decode_tokens > config.context_length)
        kascade::fail("length {} + {} decode tokens exceeds the model's context {}", length, decode_tokens,
                      config.context_length);
      for (const int64_t chunk : chunks) {
        for (const eval::StrategySpec& spec : specs) {
          std::vector<Measurement> runs;
          for (int r = 0; r < repeats; ++r)
            runs.push_back(run_once(model, spec.options, length, chunk, decode_tokens, 42 + r));
          auto med = [&](auto field) {
            std::vector<double> values;
            for (const Measurement& m : runs) values.push_back(double(m.*field));
            return median(values);
          };
          fmt::print("| {:>6} | {:>5} | {:<22} | {:>12.1f} | {:>9.1f} | {:>9.1f} | {:>11.1f} | {:>9.1f} | {:>9.1f} | {:>9.0f} |\n",
                     length, chunk, spec.label, med(&Measurement::prefill_tokens_per_second),
                     100 * med(&Measurement::prefill_matmul_share), 100 * med(&Measurement::prefill_attention_share),
                     med(&Measurement::decode_tokens_per_second), 100 * med(&Measurement::decode_matmul_share),
                     100 * med(&Measurement::decode_attention_share),
                     med(&Measurement::peak_bytes) / (1024.0 * 1024.0));
          std::fflush(stdout);
        }
      }
    }
  } catch (const kascade::Error& e) {
    fmt::print(stderr, "model_bench: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
