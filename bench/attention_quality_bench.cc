// How much of dense attention each strategy keeps, layer by layer, on the real
// model: the dense softmax mass on the kept keys and the relative error of
// the attention output against dense, for the prefill of a long prompt and
// for the decode steps after it. Prints one table per phase (layers x
// strategies) and writes a CSV.
//
//   attention_quality_bench [--model PATH] [--text FILE] [--tokens 8000]
//       [--strategies kascade,kascade-reuse-sparse-prefill,oracle-topk,streaming,quest,omnikv,lessismore]
//       [--budget 10] [--decode-tokens 16] [--profile P] [--csv FILE]
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "attention/strategies.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/model_cache.h"
#include "eval/strategy_spec.h"
#include "model/fingerprint.h"
#include "model/model.h"
#include "ops/threading.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace kascade;

// Per (phase, layer): sums over the reported steps, weighted by query rows.
struct LayerTotals {
  double mass = 0, min_mass = 1, error = 0, keys = 0, rows = 0;
};

class Collector final : public attention::Observer {
 public:
  void on_layer(const attention::LayerReport& r) override {
    LayerTotals& t = totals[{int(r.phase), r.layer}];
    const double rows = double(r.n_queries);
    t.mass += r.mean_kept_mass * rows;
    t.min_mass = std::min(t.min_mass, r.min_kept_mass);
    t.error += r.relative_error * rows;
    t.keys += r.mean_kept_keys * rows;
    t.rows += rows;
  }
  std::map<std::pair<int, int>, LayerTotals> totals;
};

}  // namespace

int main(int argc, char** argv) {
  kascade::ops::prepare_environment(argv);
  CLI::App app{"Per-layer kept attention mass and output error vs dense, per strategy"};
  std::string model_path = default_model_path();
  // Debian prose, the haystack that `kascade eval` fills its prompts with.
  std::string text_path = std::string(KASCADE_SOURCE_DIR) + "/data/haystack/haystack.txt";
  std::vector<std::string> strategies = {"kascade", "kascade-reuse-sparse-prefill", "oracle-topk", "streaming", "quest", "omnikv", "lessismore"};
  std::string profile_path, csv_path;
  int64_t n_tokens = 8000, decode_tokens = 16;
  double budget = 10;
  int threads = 2;
  app.add_option("--model", model_path)->capture_default_str();
  app.add_option("--text", text_path, "Long text to use as the prompt")->capture_default_str();
  app.add_option("--tokens", n_tokens, "Prompt tokens (the text is cut, or repeated, to this length)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--strategies", strategies)->delimiter(',')->capture_default_str();
  app.add_option("--budget", budget)->capture_default_str();
  app.add_option("--decode-tokens", decode_tokens)->capture_default_str();
  app.add_option("--profile", profile_path, "Kascade profile (default: the shipped one if present)");
  app.add_option("--csv", csv_path, "Also write the per-layer numbers here");
  app.add_option("--threads", threads)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    ops::configure_threads(threads);
    const model::Model model = model::Model::load(model_path);
    const model::Config& config = model.config();
    const tokenizer::Tokenizer tokenizer(model.file());
    const std::vector<int32_t> text_tokens = tokenizer.encode(read_file(text_path, "text file"), true, false);
    if (text_tokens.empty()) fail("text file '{}' is empty", text_path);
    if (n_tokens + decode_tokens > config.context_length)
      fail("{} + {} tokens exceed the model's context {}", n_tokens, decode_tokens, config.context_length);
    std::vector<int32_t> prompt;
    while (int64_t(prompt.size()) < n_tokens)
      prompt.push_back(text_tokens[prompt.size() % text_tokens.size()]);
    if (profile_path.empty()) profile_path = model::shipped_profile_path(model_path);

    std::map<std::string, Collector> results;
    for (const std::string& name : strategies) {
      AttentionOptions options = eval::parse_strategy_spec(name, budget).options;
      if (options.kascade() && !profile_path.empty())
        options.profile = model::load_checked_profile(profile_path, config.attention_shape(), model.file());
      Collector& collector = results[name];
      model::Sequence seq = model.new_sequence(
          n_tokens + decode_tokens, attention::KvType::F16,
          attention::with_diagnostics(attention::make_strategy(options, config.attention_shape()),
                                      config.attention_shape(), collector));
      fmt::print(stderr, "{}: prefill {} tokens + {} decode steps...\n", name, n_tokens, decode_tokens);
      std::vector<float> logits = model.prefill(seq, prompt);
      for (int64_t i = 0; i < decode_tokens; ++i) {
        const int32_t next[1] = {prompt[size_t(i) % prompt.size()]};  // teacher-forced continuation
        model.forward(seq, next, 1, logits.data());
      }
    }

    std::ofstream csv;
    if (!csv_path.empty()) {
      csv.open(csv_path);
      if (!csv) fail("cannot write '{}'", csv_path);
      csv << "strategy,phase,layer,kept_mass,min_kept_mass,relative_error,kept_keys\n";
    }
    fmt::print("model {}, prompt {} tokens, budget {}%, profile {}\n", config.name, n_tokens, budget,
               profile_path.empty() ? "default (evenly spread anchors)" : profile_path);
    for (const int phase : {int(attention::Phase::Prefill), int(attention::Phase::Decode)}) {
      fmt::print("\n{}: kept mass (mean over rows) / relative output error, per layer\n",
                 phase == int(attention::Phase::Prefill) ? "PREFILL" : "DECODE");
      fmt::print("| layer |");
      for (const std::string& name : strategies) fmt::print(" {:>17} |", name);
      fmt::print("\n|-------|");
      for (size_t i = 0; i < strategies.size(); ++i) fmt::print("{:-<19}|", "");
      fmt::print("\n");
      std::map<std::string, LayerTotals> average;
      // Rows are the strategies' layers: a sliding-window model's global layers, counted from 0.
      for (int layer = 0; layer < config.attention_shape().n_layers; ++layer) {
        fmt::print("| {:>5} |", layer);
        for (const std::string& name : strategies) {
          const auto& totals = results[name].totals;
          const auto it = totals.find({phase, layer});
          if (it == totals.end() || it->second.rows == 0) {
            fmt::print(" {:>17} |", "-");
            continue;
          }
          const LayerTotals& t = it->second;
          fmt::print(" {:>7.4f} / {:>7.4f} |", t.mass / t.rows, t.error / t.rows);
          LayerTotals& a = average[name];
          a.mass += t.mass / t.rows;
          a.error += t.error / t.rows;
          a.rows += 1;
          if (csv)
            csv << fmt::format("{},{},{},{:.6f},{:.6f},{:.6f},{:.1f}\n", name,
                               phase == int(attention::Phase::Prefill) ? "prefill" : "decode", layer,
                               t.mass / t.rows, t.min_mass, t.error / t.rows, t.keys / t.rows);
        }
        fmt::print("\n");
      }
      fmt::print("|  mean |");
      for (const std::string& name : strategies) {
        const LayerTotals& a = average[name];
        fmt::print(" {:>7.4f} / {:>7.4f} |", a.rows ? a.mass / a.rows : 0.0, a.rows ? a.error / a.rows : 0.0);
      }
      fmt::print("\n");
    }
  } catch (const kascade::Error& e) {
    fmt::print(stderr, "attention_quality_bench: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
