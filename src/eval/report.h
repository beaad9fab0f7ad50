// What `kascade eval` shows and writes: per-cell summaries with confidence
// intervals (eval/statistics.h), the terminal table, CSV (one row per sample
// and strategy; one per summary cell), JSON (settings, summary and every
// sample with its reply), a Markdown report, and PNG plots (accuracy against
// length per strategy, perplexity change against length).
#pragma once

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "eval/harness.h"
#include "eval/statistics.h"

namespace kascade::eval {

inline constexpr std::string_view kAverageTask = "average";  // every accuracy task pooled
inline constexpr int64_t kAllLengths = 0;

// Scores of one strategy on one task ("average": all accuracy tasks) at one
// length (kAllLengths: pooled). Failures count as 0 and are included.
struct AccuracyCell {
  std::string task, strategy;
  int64_t length = 0;
  int samples = 0, failures = 0;
  Interval score;     // mean recall with its Wilson interval, in [0, 1]
  Interval vs_dense;  // paired difference to dense; NaN without a dense entry
};

// Perplexity of one strategy at one length over the documents it scored;
// failures are counted, and have no NLL to contribute.
struct PerplexityCell {
  std::string strategy;
  int64_t length = 0;
  int documents = 0, failures = 0;
  double perplexity = 0;
  Interval delta_percent;  // 100 * (ppl / ppl_dense - 1), paired over documents; NaN without dense
};

struct Summary {
  std::vector<AccuracyCell> accuracy;
  std::vector<PerplexityCell> perplexity;
  int failures = 0, runs = 0;
};

Summary summarize(const EvalRun& run);

// Checks, before any work, that the outputs can go to `dir` (created by
// write_outputs when missing): check_output_dir's checks, which refuse a
// directory that is or holds one of `inputs` (model, haystack, profile).
// Throws Error naming the directory; creates nothing.
void prepare_output_dir(const std::string& dir, std::initializer_list<std::string> inputs = {});

void print_tables(const EvalRun& run, const Summary& summary, std::FILE* out);
void write_results_csv(const EvalRun& run, const std::string& path);
void write_summary_csv(const Summary& summary, const std::string& path);
nlohmann::json to_json(const EvalRun& run, const Summary& summary);
// accuracy_vs_length.png, accuracy_<task>.png, perplexity_delta_vs_length.png
// in `dir`; returns the file names written.
std::vector<std::string> write_plots(const EvalRun& run, const Summary& summary, const std::string& dir);
// Tables, plots and the checks against the goals, in Markdown.
std::string markdown_report(const EvalRun& run, const Summary& summary, const std::vector<std::string>& plots);

// All of the above into `dir`: results.csv, summary.csv, results.json, report.md, plots.
// All or nothing: they are written in a staging directory and moved into
// `dir` (created with its parents when missing) only when every one is written.
void write_outputs(const EvalRun& run, const Summary& summary, const std::string& dir);

}  // namespace kascade::eval
