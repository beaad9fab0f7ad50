// Where a strategy loses a needle, layer by layer: one sample of an eval
// needle task is prefilled, then its expected answer is teacher-forced token
// by token. At the query that predicts each answer token, every layer and
// query head reports the dense softmax mass on the needle's tokens and how
// much of that mass the strategy's kept keys hold, with the probability the
// model gave the right token. Each strategy runs with its own hidden states.
//
//   needle_trace [--model PATH] [--task niah_single] [--length 2048]
//       [--index 0] [--seed 0] [--strategies dense,kascade,oracle-topk]
//       [--budget 10] [--profile P] [--csv FILE] [--png PREFIX]
//
// Prints, per strategy, the right token's probability at each answer step
// and a layers x answer-steps table of the needle mass kept (summed over
// heads, as a share of the dense needle mass). --png draws that table as a
// heatmap per strategy; --csv writes every (step, layer, head).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "attention/strategies.h"
#include "core/error.h"
#include "core/half.h"
#include "core/model_cache.h"
#include "eval/corpus.h"
#include "eval/harness.h"
#include "eval/strategy_spec.h"
#include "eval/tasks.h"
#include "model/fingerprint.h"
#include "model/model.h"
#include "ops/threading.h"
#include "plot/plot.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace kascade;

// What one query head saw at one answer step of one layer.
struct HeadTrace {
  double needle_mass = 0;       // dense softmax mass on the needle's tokens
  double kept_needle_mass = 0;  // ... on those the strategy kept
  double kept_mass = 0;         // dense mass on every kept key
};

// Wraps a strategy; after each forward() it measures the rows of the queries
// at `probe_positions` against their dense softmax (double precision).
class NeedleProbe final : public attention::Strategy {
 public:
  NeedleProbe(std::unique_ptr<attention::Strategy> inner, const kascade::Shape& shape,
              std::vector<int32_t> needle, std::vector<int64_t> probe_positions)
      : inner_(std::move(inner)),
        shape_(shape),
        needle_(std::move(needle)),
        probes_(std::move(probe_positions)),
        traces_(probes_.size(), std::vector<std::vector<HeadTrace>>(size_t(shape.n_layers))) {}

  std::string_view name() const override { return inner_->name(); }
  int64_t prefill_alignment() const override { return inner_->prefill_alignment(); }
  void reset() override { inner_->reset(); }
  void kept_keys(const attention::Step& step, int64_t q, int head, std::vector<int32_t>& keys) const override {
    inner_->kept_keys(step, q, head, keys);
  }

  void forward(const attention::Step& step) override {
    inner_->forward(step);
    for (size_t i = 0; i < probes_.size(); ++i) {
      const int64_t q = probes_[i] - step.first_position;
      if (q < 0 || q >= step.n_queries) continue;
      auto& heads = traces_[i][size_t(step.layer)];
      heads.resize(size_t(shape_.n_heads));
      for (int head = 0; head < shape_.n_heads; ++head) heads[size_t(head)] = measure(step, q, head);
    }
  }

  // [probe][layer][head]
  const std::vector<std::vector<std::vector<HeadTrace>>>& traces() const { return traces_; }

 private:
  float key(const attention::LayerCache& cache, int kv_head, int64_t position, int c) const {
    const int64_t at = (kv_head * cache.capacity + position) * shape_.head_dim + c;
    if (cache.type == attention::KvType::F16) return fp16_to_fp32(static_cast<const uint16_t*>(cache.keys)[at]);
    return static_cast<const float*>(cache.keys)[at];
  }

  HeadTrace measure(const attention::Step& step, int64_t q, int head) const {
    const int d = shape_.head_dim, kv_head = head / shape_.group();
    const int64_t position = step.first_position + q;
    const float* query = step.queries + (q * shape_.n_heads + head) * d;
    std::vector<double> p(size_t(position + 1));
    double max = -INFINITY;
    for (int64_t j = 0; j <= position; ++j) {
      double s = 0;
      for (int c = 0; c < d; ++c) s += double(query[c]) * key(step.cache, kv_head, j, c);
      p[size_t(j)] = s / std::sqrt(double(d));
      max = std::max(max, p[size_t(j)]);
    }
    double sum = 0;
    for (double& x : p) sum += (x = std::exp(x - max));
    for (double& x : p) x /= sum;
    std::vector<int32_t> kept;
    inner_->kept_keys(step, q, head, kept);
    std::vector<bool> is_kept(p.size(), false);
    for (int32_t j : kept) is_kept[size_t(j)] = true;
    HeadTrace trace;
    for (int32_t j : needle_) {
      if (j > position) continue;
      trace.needle_mass += p[size_t(j)];
      if (is_kept[size_t(j)]) trace.kept_needle_mass += p[size_t(j)];
    }
    for (int32_t j : kept) trace.kept_mass += p[size_t(j)];
    return trace;
  }

  std::unique_ptr<attention::Strategy> inner_;
  kascade::Shape shape_;
  std::vector<int32_t> needle_;
  std::vector<int64_t> probes_;
  std::vector<std::vector<std::vector<HeadTrace>>> traces_;
};

// Token positions whose text overlaps an occurrence of any of `values`.
std::vector<int32_t> needle_positions(const tokenizer::Tokenizer& tokenizer, std::span<const int32_t> prompt,
                                      const std::vector<std::string>& values) {
  std::string text;
  std::vector<size_t> token_end;
  for (const int32_t id : prompt) {
    text += tokenizer.decode(std::span(&id, 1));
    token_end.push_back(text.size());
  }
  std::vector<int32_t> positions;
  for (const std::string& value : values)
    for (size_t at = text.find(value); at != std::string::npos; at = text.find(value, at + 1)) {
      for (size_t t = 0; t < token_end.size(); ++t) {
        const size_t begin = t == 0 ? 0 : token_end[t - 1];
        if (begin < at + value.size() && token_end[t] > at) positions.push_back(int32_t(t));
      }
    }
  std::sort(positions.begin(), positions.end());
  positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
  return positions;
}

double softmax_probability(std::span<const float> logits, int32_t token) {
  const float top = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (const float l : logits) sum += std::exp(double(l) - top);
  return std::exp(double(logits[size_t(token)]) - top) / sum;
}

}  // namespace

int main(int argc, char** argv) {
  ops::prepare_environment(argv);
  CLI::App app{"Per-layer needle mass kept by each strategy while the answer is teacher-forced"};
  std::string model_path = default_model_path();
  std::string haystack_path = std::string(KASCADE_SOURCE_DIR) + "/data/haystack/haystack.txt";
  std::string task = "niah_single", profile_path, csv_path, png_prefix;
  std::vector<std::string> strategies = {"dense", "kascade", "oracle-topk"};
  int64_t length = 2048;
  int index = 0, threads = 0;
  uint64_t seed = 0;
  double budget = 10;
  app.add_option("--model", model_path)->capture_default_str();
  app.add_option("--task", task, "A needle task of `kascade eval`")->capture_default_str();
  app.add_option("--length", length, "Prompt length in tokens")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--index", index, "Sample index")->capture_default_str();
  app.add_option("--seed", seed, "Seed of the samples (as kascade eval --seed)")->capture_default_str();
  app.add_option("--strategies", strategies, "Eval strategy entries (e.g. kascade-refine3)")
      ->delimiter(',')->capture_default_str();
  app.add_option("--budget", budget)->capture_default_str();
  app.add_option("--profile", profile_path, "Kascade profile (default: the shipped one if present)");
  app.add_option("--csv", csv_path, "Write every (strategy, step, layer, head) here");
  app.add_option("--png", png_prefix, "Write PREFIX<strategy>.png heatmaps");
  app.add_option("--threads", threads, "Threads (0 = all cores)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    ops::configure_threads(threads);
    const model::Model model = model::Model::load(model_path);
    const model::Config& config = model.config();
    const kascade::Shape shape = config.attention_shape();
    const tokenizer::Tokenizer tokenizer(model.file());
    const eval::Corpus corpus = eval::Corpus::load(haystack_path);
    const eval::PromptFormat format(tokenizer);
    const eval::PromptCounter count = [&](const std::string& user, const std::string& prefix) {
      return int64_t(format.encode(user, prefix).size());
    };
    const eval::Sample sample = eval::make_sample(task, length, index, seed, corpus, count);
    const std::vector<int32_t> prompt = format.encode(sample.user_message, sample.answer_prefix);
    const std::vector<int32_t> needle = needle_positions(tokenizer, prompt, sample.expected);
    if (needle.empty()) fail("task '{}' has no needle text in its prompt", task);
    // The reply continues the answer prefix ("... is") with a space, then the value.
    const std::vector<int32_t> answer = tokenizer.encode(" " + sample.expected.front(), false);
    std::vector<int64_t> probes;  // the query predicting answer token i
    for (size_t i = 0; i < answer.size(); ++i) probes.push_back(int64_t(prompt.size() + i) - 1);
    if (profile_path.empty()) profile_path = model::shipped_profile_path(model_path);
    fmt::print("{} {} tokens, sample {}: answer '{}' ({} tokens), needle tokens {}..{} (depth {:.0f} %)\n", task,
               prompt.size(), index, sample.expected.front(), answer.size(), needle.front(), needle.back(),
               100.0 * double(needle.front()) / double(prompt.size()));

    std::ofstream csv;
    if (!csv_path.empty()) {
      csv.open(csv_path);
      if (!csv) fail("cannot write '{}'", csv_path);
      csv << "strategy,step,layer,head,needle_mass,kept_needle_mass,kept_mass,p_answer\n";
    }
    for (const std::string& entry : strategies) {
      eval::StrategySpec spec = eval::parse_strategy_spec(entry, budget);
      if (spec.options.kascade() && !profile_path.empty())
        spec.options.profile = model::load_checked_profile(profile_path, shape, model.file());
      auto probe = std::make_unique<NeedleProbe>(attention::make_strategy(spec.options, shape), shape, needle, probes);
      const NeedleProbe& traced = *probe;
      model::Sequence seq = model.new_sequence(int64_t(prompt.size() + answer.size()), attention::KvType::F16,
                                               std::move(probe));
      std::vector<float> logits = model.prefill(seq, prompt);
      std::vector<double> p_answer;
      for (size_t i = 0; i < answer.size(); ++i) {
        p_answer.push_back(softmax_probability(logits, answer[i]));
        if (i + 1 < answer.size()) model.forward(seq, std::span(&answer[i], 1), 1, logits.data());
      }

      // Needle mass kept per (layer, step): summed over heads, relative to dense.
      std::vector<std::vector<double>> share(size_t(shape.n_layers), std::vector<double>(answer.size()));
      for (size_t i = 0; i < answer.size(); ++i)
        for (int l = 0; l < shape.n_layers; ++l) {
          double needle_mass = 0, kept = 0;
          const auto& heads = traced.traces()[i][size_t(l)];
          for (size_t h = 0; h < heads.size(); ++h) {
            needle_mass += heads[h].needle_mass;
            kept += heads[h].kept_needle_mass;
            if (csv)
              csv << fmt::format("{},{},{},{},{:.6g},{:.6g},{:.6g},{:.6g}\n", entry, i, l, h, heads[h].needle_mass,
                                 heads[h].kept_needle_mass, heads[h].kept_mass, p_answer[i]);
          }
          share[size_t(l)][i] = needle_mass > 0 ? kept / needle_mass : NAN;
        }
      fmt::print("\n{}: p(answer token) per step:", entry);
      for (double p : p_answer) fmt::print(" {:.3f}", p);
      fmt::print("\n  layer | needle mass kept, share of dense (per answer step) | dense needle mass (step 0, sum over heads)\n");
      for (int l = 0; l < shape.n_layers; ++l) {
        fmt::print("  {:>5} |", l);
        for (double s : share[size_t(l)]) fmt::print(" {:>5.2f}", s);
        double mass = 0;
        for (const HeadTrace& h : traced.traces()[0][size_t(l)]) mass += h.needle_mass;
        fmt::print(" | {:.3f}\n", mass);
      }
      if (!png_prefix.empty()) {
        std::vector<std::string> steps;
        for (size_t i = 0; i < answer.size(); ++i) steps.push_back(tokenizer.decode(std::span(&answer[i], 1)));
        plot::heatmap(png_prefix + entry + ".png",
                      fmt::format("{}: needle mass kept, share of dense ({} {} tok, sample {})", entry, task,
                                  prompt.size(), index),
                      share, "answer token (teacher-forced)", "layer", 0, 1, steps);
      }
    }
  } catch (const Error& e) {
    fmt::print(stderr, "needle_trace: error: {}\n", e.what());
    return 1;
  }
  return 0;
}
