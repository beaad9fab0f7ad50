// `kascade synth`: writes a synthetic model (model/synthetic.h).
#include <memory>
#include <string>

#include <fmt/format.h>

#include "cli/commands.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/model_cache.h"
#include "core/progress.h"
#include "core/timer.h"
#include "gguf/gguf.h"
#include "model/synthetic.h"
#include "ops/threading.h"

namespace kascade::cli {
namespace {

struct SynthArgs {
  std::string preset = "llama-3.1-8b";
  std::string type = "bf16";
  std::string out;
  std::string tokenizer = default_model_path();
  uint64_t seed = 0;
  int threads = 0;
  bool quiet = false;
};

void run_synth(const SynthArgs& args) {
  const model::SyntheticPreset& preset = model::synthetic_preset(args.preset);
  const std::optional<model::SyntheticWeights> weights = model::synthetic_weights(args.type);
  if (!weights) fail("--type '{}' is not a synthetic weight type ({})", args.type, model::synthetic_weight_names());
  check_output_file(args.out, "--out", {args.tokenizer});
  ops::configure_threads(args.threads);
  const gguf::File tokenizer = gguf::File::open(args.tokenizer);
  Stopwatch clock;
  ProgressBar bar(1, {.label = "synth", .unit = "MB", .show_after_seconds = 1.0});
  model::write_synthetic_model(preset, *weights, args.seed, tokenizer, args.out, [&](uint64_t done, uint64_t) {
    if (!args.quiet) bar.update(done >> 20);
  });
  bar.finish();
  if (!args.quiet) {
    const gguf::File written = gguf::File::open(args.out);
    fmt::print(stderr, "synth: wrote {} ({}, {} tensors, {:.2f} GB) in {}\n", args.out, written.get_string("general.name"),
               written.tensors().size(), double(written.file_size()) / 1e9, format_duration(clock.seconds()));
  }
}

}  // namespace

void register_synth(CLI::App& app) {
  auto args = std::make_shared<SynthArgs>();
  CLI::App* cmd = app.add_subcommand("synth", "Write a model of a published shape with seeded random weights (GGUF)");
  std::string presets;
  for (const model::SyntheticPreset& p : model::synthetic_presets())
    presets += fmt::format("{}{}", presets.empty() ? "" : ", ", p.name);
  cmd->add_option("--preset", args->preset, fmt::format("Model shape: {}", presets))->capture_default_str();
  cmd->add_option("--type", args->type, fmt::format("Weight matrix type: {}", model::synthetic_weight_names()))
      ->capture_default_str();
  cmd->add_option("-o,--out", args->out, "GGUF file to write")->required();
  cmd->add_option("--tokenizer", args->tokenizer, "GGUF whose tokenizer the model gets (vocabulary padded)")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "Seed of the weights")->capture_default_str()->check(seed_flag());
  cmd->add_option("-t,--threads", args->threads, "Threads (0 = all cores)")->capture_default_str()->check(
      count_flag(kMaxThreads));
  cmd->add_flag("-q,--quiet", args->quiet, "No progress bar or summary");
  cmd->callback([args] { run_synth(*args); });
}

}  // namespace kascade::cli
