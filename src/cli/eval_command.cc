// `kascade eval`: long-context accuracy (RULER-style tasks) and long-document
// perplexity of attention strategies on one model, printed as tables and
// written as CSV, JSON, Markdown and PNG plots. Every flag and the output
// directory are checked before the model runs.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.h"
#include "core/error.h"
#include "core/model_cache.h"
#include "core/progress.h"
#include "backends/devices.h"
#include "eval/harness.h"
#include "eval/report.h"
#include "model/fingerprint.h"
#include "ops/threading.h"
#include "tokenizer/tokenizer.h"

namespace kascade::cli {
namespace {

struct EvalArgs {
  std::string model = default_model_path();
  std::string strategies = "dense,kascade";
  std::string lengths = "1k,2k,4k,8k";
  std::string tasks;
  std::string out = "eval-out";
  std::string profile;
  std::string haystack = std::string(KASCADE_DATA_DIR) + "/haystack/haystack.txt";
  std::string kv_type = "f16";
  std::string device = "cpu";
  int threads = 0;
  bool quiet = false;
  eval::EvalOptions options;
};

std::vector<std::string> split_list(const std::string& text, std::string_view flag) {
  std::vector<std::string> items;
  size_t start = 0;
  for (;;) {
    const size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item.empty()) fail("{} has an empty entry in '{}'", flag, text);
    items.push_back(std::move(item));
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

void run_eval_command(EvalArgs& args) {
  eval::EvalOptions& options = args.options;
  options.strategies = split_list(args.strategies, "--strategies");
  options.lengths.clear();
  for (const std::string& length : split_list(args.lengths, "--lengths")) options.lengths.push_back(eval::parse_length(length));
  options.tasks = args.tasks.empty() ? std::vector<std::string>{} : split_list(args.tasks, "--tasks");
  if (args.kv_type != "f16" && args.kv_type != "f32") fail("--kv-type must be f16 or f32, got '{}'", args.kv_type);
  options.kv_type = args.kv_type == "f16" ? attention::KvType::F16 : attention::KvType::F32;
  // Everything that needs no model first, so typos fail at once.
  const eval::EvalPlan request = eval::plan_eval(options, INT64_MAX);
  // Nothing is created before the results exist; a directory holding an input is refused.
  eval::prepare_output_dir(args.out, {args.model, args.haystack, args.profile});
  if (!args.profile.empty() &&
      std::none_of(request.strategies.begin(), request.strategies.end(),
                   [](const eval::StrategySpec& spec) { return spec.options.kascade(); }))
    fmt::print(stderr, "kascade: warning: --profile is read only by kascade strategies, and --strategies lists none\n");
  const eval::Corpus corpus = eval::Corpus::load(args.haystack);
  ops::configure_threads(args.threads);

  const std::unique_ptr<engine::Backend> backend = backends::make_backend(args.device, args.model);
  const tokenizer::Tokenizer tokenizer(backend->file());
  const eval::EvalPlan plan = eval::plan_eval(options, backend->config().context_length);
  // Strategies with every layer selecting (the default) read no anchors: a
  // missing profile is worth a word only when one reuses them.
  const auto is_kascade = [](const eval::StrategySpec& spec) { return spec.options.kascade(); };
  const auto reuses = [](const eval::StrategySpec& spec) { return spec.options.kascade() && !spec.options.all_anchors; };
  if (std::any_of(plan.strategies.begin(), plan.strategies.end(), is_kascade))
    options.kascade_profile =
        model::resolve_profile(args.profile, args.model, backend->config(), backend->file(),
                               args.quiet || std::none_of(plan.strategies.begin(), plan.strategies.end(), reuses));

  std::unique_ptr<ProgressBar> progress;
  eval::EvalCallbacks callbacks;
  callbacks.on_progress = [&](uint64_t done, uint64_t total) {
    if (args.quiet) return;
    if (!progress) progress = std::make_unique<ProgressBar>(total, ProgressOptions{.label = "eval"});
    progress->update(done);
  };
  callbacks.on_result = [&](const eval::SampleResult& r) {
    if (r.failed() && !args.quiet)
      fmt::print(stderr, "\nkascade eval: {} {} sample {} with {}: {} ({})\n", r.task, r.length, r.index, r.strategy,
                 r.status, r.error);
  };
  const eval::EvalRun run = eval::run_eval(*backend, tokenizer, corpus, options, callbacks);
  if (progress) progress->finish();
  const eval::Summary summary = eval::summarize(run);
  eval::print_tables(run, summary, stdout);
  eval::write_outputs(run, summary, args.out);
  fmt::print("\nwrote results.csv, summary.csv, results.json, report.md and plots to {}\n", args.out);
}

}  // namespace

void register_eval(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  eval::EvalOptions& o = args->options;
  CLI::App* cmd = app.add_subcommand(
      "eval", "Long-context accuracy (RULER-style tasks) and perplexity of attention strategies, with tables and plots");
  cmd->add_option("-m,--model", args->model, "GGUF model file")->capture_default_str();
  cmd->add_option("--device", args->device, fmt::format("Where to run: {}", backends::supported_devices()))
      ->capture_default_str();
  cmd->add_option("--strategies", args->strategies,
                  "Comma-separated strategies: NAME[-p<percent>][-mink<keys>][-reuse][-sparse-prefill|-prefill-only]"
                  "[-refine<c>][-sketch-scoring|-exact-scoring][-from<keys>][-every<steps>]"
                  "[-all-heads-pooled|-no-remap|-pre-softmax-pooling|-fixed-budget|-own-tile-in-budget], "
                  "e.g. dense,kascade,kascade-reuse-sparse-prefill (the paper's method),omnikv,quest")
      ->capture_default_str();
  cmd->add_option("--budget", o.budget_percent, "Sparse budget in percent for entries without -p<percent>")
      ->capture_default_str();
  cmd->add_option("--lengths", args->lengths, "Comma-separated prompt lengths in tokens (1k = 1024)")
      ->capture_default_str();
  cmd->add_option("--samples", o.samples, "Samples per task and length")->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the generated samples")->capture_default_str()->check(seed_flag());
  cmd->add_option("--tasks", args->tasks,
                  fmt::format("Comma-separated tasks (default: all): {}, {}", fmt::join(eval::task_names(), ", "),
                              eval::kPerplexityTask));
  cmd->add_option("-o,--out", args->out, "Output directory")->capture_default_str();
  cmd->add_option("--profile", args->profile, "Kascade calibration profile (JSON; default: the shipped one)");
  cmd->add_option("--haystack", args->haystack, "Haystack corpus (data/haystack/haystack.txt format)")
      ->capture_default_str();
  cmd->add_option("--ppl-tail", o.perplexity_tail, "Tokens scored at the end of each perplexity document")
      ->capture_default_str();
  cmd->add_option("--time-limit", o.time_limit_seconds, "Seconds per sample and strategy before it counts as failed")
      ->capture_default_str();
  cmd->add_option("--kv-type", args->kv_type, "KV cache storage: f16 or f32")->capture_default_str();
  cmd->add_option("-t,--threads", args->threads, "Threads (0 = all cores)")->capture_default_str()
      ->check(count_flag(kMaxThreads));
  cmd->add_flag("-q,--quiet", args->quiet, "No progress bar");
  cmd->callback([args] { run_eval_command(*args); });
}

}  // namespace kascade::cli
