// End-to-end speed of a backend (CPU or GPU engine): the prefill of one
// prompt per context length, then decode steps of a batch of sequences at
// that context (copies of the prefilled one), per attention strategy.
// Prints one table with medians (of decode steps after each kind of step's
// eager and captured runs), the weight-streaming floor of a decode step
// (weights plus the KV bytes dense attention reads, at --bandwidth) and, for
// each Kascade row, its speedup over dense in the same run.
//
//   engine_bench [--model PATH] [--device cuda] [--contexts 1024,32768]
//       [--batches 1,16] [--strategies dense,kascade] [--decode-steps 16]
//       [--repeats 3] [--bandwidth 4.3e12] [--budget 10]
#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "core/error.h"
#include "core/model_cache.h"
#include "core/timer.h"
#include "backends/devices.h"
#include "eval/strategy_spec.h"
#include "model/fingerprint.h"
#include "ops/threading.h"

namespace {

using namespace kascade;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace

int main(int argc, char** argv) {
  ops::prepare_environment(argv);
  CLI::App app{"End-to-end prefill and batched decode speed of the CPU or GPU engine"};
  std::string model_path = default_model_path(), device = "auto", profile_path;
  std::vector<int64_t> contexts = {1024, 8192};
  std::vector<int> batches = {1};
  std::vector<std::string> strategies = {"dense", "kascade"};
  int decode_steps = 16, repeats = 3, threads = 0;
  double bandwidth = 4.3e12, budget = 10;
  app.add_option("--model", model_path)->capture_default_str();
  app.add_option("--device", device, "cpu, cuda or auto")->capture_default_str();
  app.add_option("--contexts", contexts, "Prompt lengths")->delimiter(',')->capture_default_str();
  app.add_option("--batches", batches, "Sequences per decode step")->delimiter(',')->capture_default_str();
  app.add_option("--strategies", strategies, "Eval entry names")->delimiter(',')->capture_default_str();
  app.add_option("--decode-steps", decode_steps)->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "Prefills timed (median)")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--bandwidth", bandwidth, "Memory bandwidth for the floor, bytes/s")->capture_default_str();
  app.add_option("--budget", budget)->capture_default_str();
  app.add_option("--profile", profile_path, "Kascade profile (default: the shipped one, else spread anchors)");
  app.add_option("--threads", threads)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    ops::configure_threads(threads);
    Stopwatch load_clock;
    const std::unique_ptr<engine::Backend> backend = backends::make_backend(device, model_path);
    const model::Config& c = backend->config();
    fmt::print("{} on {}: {} layers, d_model {}, {}/{} heads of {}, FFN {}, vocab {}; loaded in {:.1f} s\n", c.name,
               backend->device_name(), c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_dim,
               c.vocab_size, load_clock.seconds());
    const uint64_t weights = backend->decode_weight_bytes();
    const uint64_t kv_per_token = uint64_t(c.n_layers) * c.n_kv_heads * c.head_dim * 2 * 2;  // fp16 K + V
    fmt::print("weight matrices {:.2f} GB as streamed, KV {} KiB per token; floor = (weights + batch x context x KV) / "
               "{:.2g} B/s\n",
               double(weights) / 1e9, kv_per_token / 1024, bandwidth);
    if (const std::string memory = backend->memory_report(); !memory.empty()) fmt::print("{}\n", memory);
    fmt::print("\n");

    std::vector<eval::StrategySpec> specs;
    for (const std::string& name : strategies) {
      eval::StrategySpec& spec = specs.emplace_back(eval::parse_strategy_spec(name, budget));
      if (spec.options.kascade())
        spec.options.profile = model::resolve_profile(profile_path, model_path, c, backend->file(), true);
    }
    fmt::print("| {:<22} | {:>7} | {:>5} | {:>12} | {:>10} | {:>14} | {:>11} | {:>10} | {:>13} |\n", "attention", "context",
               "batch", "prefill tok/s", "prefill s", "decode ms/step", "decode tok/s", "floor ms", "vs dense p/d");
    fmt::print("|{:-<24}|{:-<9}|{:-<7}|{:-<14}|{:-<12}|{:-<16}|{:-<13}|{:-<12}|{:-<15}|\n", "", "", "", "", "", "", "",
               "", "");
    std::map<std::pair<int64_t, int>, double> dense_step;  // (context, batch) -> dense decode seconds
    std::map<int64_t, double> dense_prefill;                // context -> dense prefill seconds
    std::mt19937_64 rng(7);
    for (const int64_t context : contexts) {
      std::vector<int32_t> prompt(static_cast<size_t>(context));
      for (int32_t& t : prompt) t = int32_t(rng() % uint64_t(std::min(c.vocab_size, 30000)));
      const int64_t capacity = context + decode_steps + 1;
      for (const eval::StrategySpec& spec : specs) {
        std::vector<double> prefill_seconds;
        std::unique_ptr<engine::BackendSequence> prefilled;
        std::vector<float> logits;
        for (int r = 0; r < repeats; ++r) {
          prefilled.reset();  // its pages back before the next one
          prefilled = backend->new_sequence({capacity, spec.options, attention::KvType::F16});
          Stopwatch clock;
          logits = backend->prefill(*prefilled, prompt, {}, 1024);
          prefill_seconds.push_back(clock.seconds());
        }
        const double prefill = median(prefill_seconds);
        if (spec.options.method == Method::Dense) dense_prefill[context] = prefill;
        for (const int batch : batches) {
          std::vector<std::unique_ptr<engine::BackendSequence>> owned;
          std::vector<engine::BackendSequence*> sequences;
          try {
            for (int b = 0; b < batch; ++b) {
              owned.push_back(backend->new_sequence({capacity, spec.options, attention::KvType::F16}));
              backend->copy_prefix(*owned.back(), *prefilled);
              sequences.push_back(owned.back().get());
            }
          } catch (const Error& e) {  // e.g. a KV cache too small for this batch
            fmt::print("| {:<22} | {:>7} | {:>5} | {:>12.0f} | {:>10.3f} | does not fit: {}\n", spec.label, context, batch,
                       double(context) / prefill, prefill, e.what());
            continue;
          }
          std::vector<int32_t> tokens(static_cast<size_t>(batch), 1);
          std::vector<float> out(static_cast<size_t>(batch) * c.vocab_size);
          std::vector<double> steps;
          for (int s = 0; s < decode_steps; ++s) {
            Stopwatch clock;
            backend->decode(sequences, tokens, out.data());
            steps.push_back(clock.seconds());
          }
          // A step of a new kind runs eagerly (it sizes buffers), the next is
          // captured as a graph: those of each kind are left out. A plan that
          // holds its selections (select_every N) alternates N kinds of step,
          // so its time is the median over runs of N steps of their mean.
          const int cycle = select_every_or_default(spec.options);
          steps.erase(steps.begin(), steps.begin() + std::min<ptrdiff_t>(std::ssize(steps), 2 * cycle));
          std::vector<double> cycles;
          for (size_t i = 0; i + size_t(cycle) <= steps.size(); i += size_t(cycle)) {
            double sum = 0;
            for (int j = 0; j < cycle; ++j) sum += steps[i + size_t(j)];
            cycles.push_back(sum / cycle);
          }
          if (cycles.empty()) fail("--decode-steps {} leaves no timed run of {} steps", decode_steps, cycle);
          const double step = median(cycles);
          if (spec.options.method == Method::Dense) dense_step[{context, batch}] = step;
          const double floor = double(weights + uint64_t(batch) * uint64_t(context) * kv_per_token) / bandwidth;
          const auto dense = dense_step.find({context, batch});
          const auto dense_fill = dense_prefill.find(context);
          fmt::print("| {:<22} | {:>7} | {:>5} | {:>12.0f} | {:>10.3f} | {:>14.3f} | {:>11.1f} | {:>10.3f} | {:>13} |\n",
                     spec.label, context, batch, double(context) / prefill, prefill, 1e3 * step, batch / step,
                     1e3 * floor,
                     spec.options.method == Method::Dense || dense == dense_step.end()
                         ? std::string("-")
                         : fmt::format("{:.2f}x/{:.2f}x", dense_fill->second / prefill, dense->second / step));
          std::fflush(stdout);
        }
      }
    }
    if (const std::string memory = backend->memory_report(); !memory.empty()) fmt::print("\nafter the runs: {}\n", memory);
  } catch (const Error& e) {
    fmt::print(stderr, "engine_bench: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
