// `kascade calibrate`: runs the dense model over a development set, chooses
// Kascade anchors and head maps for each requested anchor count, and writes
// the profile (the chosen count's anchors active), optionally a statistics
// file and PNG pictures. Every flag and path is checked before the model runs.
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "backends/devices.h"
#include "calibration/calibrate.h"
#include "calibration/dev_set.h"
#include "calibration/report.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/model_cache.h"
#include "core/progress.h"
#include "core/timer.h"
#include "kascade/profile.h"
#include "model/model.h"
#include "ops/threading.h"
#include "tokenizer/tokenizer.h"

namespace kascade::cli {
namespace {

namespace fs = std::filesystem;

const std::string kBuiltinDevSet = std::string(KASCADE_DATA_DIR) + "/devset/devset.txt";

struct CalibrateArgs {
  std::string model = default_model_path();
  std::string dev_set = kBuiltinDevSet;
  int64_t prompts = 0;     // 0: every document
  int64_t max_tokens = 0;  // 0: the model's context
  std::string anchors = "3..8";
  int choose = 5;
  std::string out;
  std::string plots;
  std::string stats;
  std::string device = "auto";
  int threads = 0;
  int64_t tile = 32;
  int64_t top_k = 32;
  std::optional<double> reuse_floor;
  bool choose_given = false;
  bool quiet = false;
};

int parse_count(std::string_view text, const std::string& whole) {
  int value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size())
    fail("--anchors '{}' is not a count or a range FIRST..LAST", whole);
  return value;
}

// "3..8" or "5".
std::pair<int, int> parse_anchor_range(const std::string& text) {
  const size_t dots = text.find("..");
  if (dots == std::string::npos) {
    const int n = parse_count(text, text);
    return {n, n};
  }
  return {parse_count(std::string_view(text).substr(0, dots), text),
          parse_count(std::string_view(text).substr(dots + 2), text)};
}

void print_summary(const calibration::CalibrationResult& result, int choose, std::optional<double> reuse_floor) {
  const calibration::AnchorSolution& active = result.active(choose);
  const int chosen = int(active.anchors.size());
  fmt::print("anchors  normalized score  anchor layers\n");
  for (const calibration::AnchorSolution& s : result.solutions)
    fmt::print("{:>7}  {:>16.4f}  {{{}}}{}\n", s.anchors.size(), s.normalized_score, fmt::join(s.anchors, ", "),
               !reuse_floor && int(s.anchors.size()) == chosen ? "  <- profile" : "");
  if (reuse_floor)
    fmt::print("{:>7}  {:>16.4f}  {{{}}}  <- profile: the fewest anchors whose reuse layers keep >= {} of their "
               "top-k mass\n",
               chosen, active.normalized_score, fmt::join(active.anchors, ", "), *reuse_floor);
  std::vector<std::string> remapped;
  for (size_t j = 0; j < active.head_map.size(); ++j)
    for (size_t h = 0; h < active.head_map[j].size(); ++h)
      if (active.head_map[j][h] != int(h)) remapped.push_back(fmt::format("{}.{}<-{}", j, h, active.head_map[j][h]));
  fmt::print("head map ({} anchors): {} of {} reuse heads read another anchor head{}{}\n", chosen, remapped.size(),
             (result.n_layers - chosen) * result.n_kv_heads, remapped.empty() ? "" : ": ",
             fmt::join(remapped, " "));
}

void run_calibrate(const CalibrateArgs& args) {
  Stopwatch clock;
  // Everything that can be wrong with the request fails here, before the model runs.
  const auto [min_anchors, max_anchors] = parse_anchor_range(args.anchors);
  if (args.out.empty()) fail("--out PROFILE is required");
  check_output_file(args.out, "--out", {args.model, args.dev_set});
  if (!args.stats.empty()) check_output_file(args.stats, "--stats", {args.model, args.dev_set, args.out});
  if (!args.stats.empty() && args.stats == args.out) fail("--stats and --out name the same file '{}'", args.out);
  if (!args.plots.empty()) check_output_dir(args.plots, "--plots", {args.model, args.dev_set});
  if (args.prompts < 0) fail("--prompts must not be negative, got {}", args.prompts);
  if (args.max_tokens < 0) fail("--max-tokens must not be negative, got {}", args.max_tokens);
  ops::configure_threads(args.threads);

  // Read once: the fingerprint written at the end is of what was calibrated on.
  const std::string dev_set_text = read_file(args.dev_set, "dev set");
  std::vector<calibration::DevDocument> documents = calibration::parse_dev_set(dev_set_text, args.dev_set);
  if (args.prompts > int64_t(documents.size()))
    fail("--prompts {} but dev set '{}' holds {} documents", args.prompts, args.dev_set, documents.size());
  if (args.prompts > 0) documents.resize(size_t(args.prompts));

  // The dense model runs on the CPU engine or on the GPU engine, which shows
  // its prefill layer by layer; the statistics are computed here either way.
  std::optional<model::Model> cpu_model;
  std::unique_ptr<engine::Backend> gpu;
  if (backends::selects_cuda(args.device))
    gpu = backends::make_backend("cuda", args.model);
  else
    cpu_model.emplace(model::Model::load(args.model));
  const model::Config& config = gpu ? gpu->config() : cpu_model->config();
  const gguf::File& file = gpu ? gpu->file() : cpu_model->file();
  calibration::CalibrationOptions options;
  options.statistics.tile = args.tile;
  options.statistics.top_k = args.top_k;
  options.min_anchors = min_anchors;
  options.max_anchors = max_anchors;
  options.reuse_floor = args.reuse_floor;
  if (args.reuse_floor && args.choose_given) fail("give --choose or --reuse-floor, not both");
  const int attention_layers = config.attention_shape().n_layers;
  calibration::validate(options, attention_layers);
  if (!args.reuse_floor && (args.choose < min_anchors || args.choose > max_anchors))
    fail("--choose {} is outside --anchors {}..{}", args.choose, min_anchors, max_anchors);
  if (args.max_tokens > config.context_length)
    fail("--max-tokens {} exceeds the model's context of {} tokens", args.max_tokens, config.context_length);
  const int64_t max_tokens = args.max_tokens > 0 ? args.max_tokens : config.context_length;

  const tokenizer::Tokenizer tokenizer(file);
  std::vector<std::vector<int32_t>> prompts;
  int64_t total_tokens = 0, longest = 0;
  // A prompt too short to measure would only pull every similarity towards 1.
  const int64_t shortest = calibration::shortest_measured_prompt(options.statistics);
  for (const calibration::DevDocument& document : documents) {
    std::vector<int32_t> tokens = tokenizer.encode(document.text, /*add_special_tokens=*/true);
    if (int64_t(tokens.size()) > max_tokens) tokens.resize(size_t(max_tokens));
    longest = std::max(longest, int64_t(tokens.size()));
    if (int64_t(tokens.size()) < shortest) continue;
    total_tokens += int64_t(tokens.size());
    prompts.push_back(std::move(tokens));
  }
  if (prompts.empty())
    fail("every prompt is too short to calibrate on: the longest has {} tokens, and a prompt needs at least {} "
         "(a --tile {} query tile past --top-k {} keys) for any tile to measure",
         longest, shortest, args.tile, args.top_k);
  if (prompts.size() < documents.size())
    fmt::print(stderr,
               "kascade: warning: {} of {} prompts have fewer than {} tokens, too few to measure with --tile {} and "
               "--top-k {}: left out\n",
               documents.size() - prompts.size(), documents.size(), shortest, args.tile, args.top_k);

  if (!args.quiet)
    fmt::print(stderr, "calibrating {} ({}, {} KV heads) on {} prompts, {} tokens, on the {}\n", config.name,
               config.n_local_layers() > 0 ? fmt::format("{} global layers of {}", attention_layers, config.n_layers)
                                           : fmt::format("{} layers", attention_layers),
               config.n_kv_heads, prompts.size(), total_tokens, gpu ? gpu->device_name() : "CPU");
  std::unique_ptr<ProgressBar> progress;
  if (!args.quiet) progress = std::make_unique<ProgressBar>(uint64_t(total_tokens), ProgressOptions{.label = "calibrate"});
  const auto on_progress = [&](int64_t done) {
    if (progress) progress->update(uint64_t(done));
  };
  const calibration::CalibrationResult result = gpu ? calibration::calibrate(*gpu, prompts, options, on_progress)
                                                    : calibration::calibrate(*cpu_model, prompts, options, on_progress);
  progress.reset();

  const calibration::DevSetInfo dev_set{args.dev_set == kBuiltinDevSet ? "builtin" : args.dev_set,
                                        calibration::content_fingerprint(dev_set_text), max_tokens};
  // All or nothing: every output is written in full before any is put in place.
  OutputSet outputs;
  outputs.write_file(args.out, kascade::profile_to_json(calibration::make_profile(result, options, args.choose, config,
                                                                                    file, dev_set)).dump(2) + "\n",
                     "profile");
  if (!args.stats.empty())
    outputs.write_file(args.stats,
                       calibration::statistics_json(result, options, args.choose, config, file, dev_set).dump(2) + "\n",
                       "statistics");
  if (!args.plots.empty())
    calibration::write_plots(result, options, args.choose, fs::path(args.model).stem().string(),
                             outputs.stage_directory(args.plots, "pictures"));
  outputs.commit();

  if (args.quiet) return;
  print_summary(result, args.choose, args.reuse_floor);
  fmt::print(stderr, "wrote {}{}{} in {}\n", args.out, args.stats.empty() ? "" : ", " + args.stats,
             args.plots.empty() ? "" : ", pictures in " + args.plots, format_duration(clock.seconds()));
}

}  // namespace

void register_calibrate(CLI::App& app) {
  auto args = std::make_shared<CalibrateArgs>();
  CLI::App* cmd = app.add_subcommand("calibrate", "Choose Kascade anchors and head maps on a development set");
  cmd->add_option("-m,--model", args->model, "GGUF model file")->capture_default_str();
  cmd->add_option("--dev-set", args->dev_set, "Development set ('@@@ document: SOURCE' blocks)")
      ->capture_default_str();
  cmd->add_option("--prompts", args->prompts, "Use the first N documents (0 = all)")->capture_default_str();
  cmd->add_option("--max-tokens", args->max_tokens, "Cut prompts to N tokens (0 = the model's context)")
      ->capture_default_str();
  cmd->add_option("--anchors", args->anchors, "Anchor counts to solve for: FIRST..LAST or N")->capture_default_str();
  cmd->add_option("--choose", args->choose, "Anchor count whose solution the profile activates")
      ->capture_default_str()
      ->each([args](const std::string&) { args->choose_given = true; });
  cmd->add_option("--reuse-floor", args->reuse_floor,
                  "Instead of --choose: the fewest anchors such that every reuse layer keeps at least this share of "
                  "its own top-k attention mass on its anchor's keys (0-1; the profile says each layer's share)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("-o,--out", args->out, "Profile to write (JSON)")->required();
  cmd->add_option("--plots", args->plots, "Directory for PNG pictures");
  cmd->add_option("--stats", args->stats, "Also write every statistic (JSON)");
  cmd->add_option("--device", args->device,
                  fmt::format("Where the dense model runs: {} (the statistics run on the CPU)",
                              backends::supported_devices()))
      ->capture_default_str();
  cmd->add_option("-t,--threads", args->threads, "Threads (0 = all cores)")->capture_default_str()
      ->check(count_flag(kMaxThreads));
  cmd->add_option("--tile", args->tile, "Prefill query tile T")->capture_default_str();
  cmd->add_option("--top-k", args->top_k, "Calibration budget: keys a tile keeps")->capture_default_str();
  cmd->add_flag("-q,--quiet", args->quiet, "No progress bar or summary");
  cmd->callback([args] { run_calibrate(*args); });
}

}  // namespace kascade::cli
