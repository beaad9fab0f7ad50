#include "eval/report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"
#include "plot/plot.h"

namespace kascade::eval {
namespace {

using Key = std::tuple<std::string, int64_t, int>;  // task, length, sample

bool is_accuracy_task(const std::string& task) { return task != kPerplexityTask; }

std::vector<std::string> accuracy_tasks(const EvalRun& run) {
  std::vector<std::string> tasks;
  for (const std::string& t : run.plan.tasks)
    if (is_accuracy_task(t)) tasks.push_back(t);
  return tasks;
}

bool has_perplexity(const EvalRun& run) {
  return std::find(run.plan.tasks.begin(), run.plan.tasks.end(), kPerplexityTask) != run.plan.tasks.end();
}

// The first plain dense entry: the reference for differences.
const StrategySpec* dense_spec(const EvalRun& run) {
  for (const StrategySpec& s : run.plan.strategies)
    if (s.options.method == Method::Dense) return &s;
  return nullptr;
}

std::vector<int64_t> table_lengths(const EvalRun& run) {
  std::vector<int64_t> lengths = run.plan.lengths;
  if (lengths.size() > 1) lengths.push_back(kAllLengths);
  return lengths;
}

std::string length_name(int64_t length) {
  if (length == kAllLengths) return "all";
  return length % 1024 == 0 ? fmt::format("{}k", length / 1024) : std::to_string(length);
}

const AccuracyCell* find_cell(const Summary& s, std::string_view task, std::string_view strategy, int64_t length) {
  for (const AccuracyCell& c : s.accuracy)
    if (c.task == task && c.strategy == strategy && c.length == length) return &c;
  return nullptr;
}

const PerplexityCell* find_ppl(const Summary& s, std::string_view strategy, int64_t length) {
  for (const PerplexityCell& c : s.perplexity)
    if (c.strategy == strategy && c.length == length) return &c;
  return nullptr;
}

std::string score_text(const AccuracyCell& c) {
  std::string text = fmt::format("{:.1f} [{:.0f}-{:.0f}]", 100 * c.score.mean, 100 * c.score.low, 100 * c.score.high);
  if (c.failures > 0) text += fmt::format(" !{}", c.failures);
  return text;
}

std::string delta_text(const Interval& d, double scale, int precision) {
  if (std::isnan(d.mean)) return "-";
  if (std::isnan(d.low)) return fmt::format("{:+.{}f} [n=1]", scale * d.mean, precision);
  return fmt::format("{:+.{}f} [{:+.{}f}, {:+.{}f}]", scale * d.mean, precision, scale * d.low, precision,
                     scale * d.high, precision);
}

std::string ppl_text(const PerplexityCell& c) {
  std::string text = c.documents > 0 ? fmt::format("{:.3f}", c.perplexity) : "n/a";
  if (c.failures > 0) text += fmt::format(" !{}", c.failures);
  return text;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string out = "\"";
  for (const char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? std::string(separator) : "") + items[i];
  return out;
}

// Rows of a plain table: first column left-aligned, the rest right-aligned.
void print_grid(std::FILE* out, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows)
    for (size_t i = 0; i < row.size(); ++i) {
      if (widths.size() <= i) widths.push_back(0);
      widths[i] = std::max(widths[i], row[i].size());
    }
  for (const auto& row : rows) {
    std::string line = "  ";
    for (size_t i = 0; i < row.size(); ++i)
      line += i == 0 ? fmt::format("{:<{}}", row[i], widths[i]) : fmt::format("  {:>{}}", row[i], widths[i]);
    fmt::print(out, "{}\n", line);
  }
}

std::string markdown_grid(const std::vector<std::vector<std::string>>& rows) {
  std::string out;
  for (size_t r = 0; r < rows.size(); ++r) {
    out += "| " + join(rows[r], " | ") + " |\n";
    if (r == 0) {
      out += "|";
      for (size_t i = 0; i < rows[r].size(); ++i) out += i == 0 ? "---|" : "---:|";
      out += "\n";
    }
  }
  return out;
}

using Grid = std::vector<std::vector<std::string>>;

Grid accuracy_grid(const EvalRun& run, const Summary& s, const std::string& task) {
  Grid rows = {{"strategy"}};
  for (const int64_t length : table_lengths(run)) rows[0].push_back(length_name(length));
  for (const StrategySpec& spec : run.plan.strategies) {
    rows.push_back({spec.label});
    for (const int64_t length : table_lengths(run)) rows.back().push_back(score_text(*find_cell(s, task, spec.label, length)));
  }
  return rows;
}

Grid delta_grid(const EvalRun& run, const Summary& s) {
  Grid rows = {{"strategy"}};
  for (const int64_t length : table_lengths(run)) rows[0].push_back(length_name(length));
  for (const StrategySpec& spec : run.plan.strategies) {
    rows.push_back({spec.label});
    for (const int64_t length : table_lengths(run))
      rows.back().push_back(delta_text(find_cell(s, kAverageTask, spec.label, length)->vs_dense, 100, 1));
  }
  return rows;
}

Grid perplexity_grid(const EvalRun& run, const Summary& s, bool deltas) {
  Grid rows = {{"strategy"}};
  for (const int64_t length : run.plan.lengths) rows[0].push_back(length_name(length));
  for (const StrategySpec& spec : run.plan.strategies) {
    rows.push_back({spec.label});
    for (const int64_t length : run.plan.lengths) {
      const PerplexityCell& c = *find_ppl(s, spec.label, length);
      rows.back().push_back(deltas ? delta_text(c.delta_percent, 1, 2) : ppl_text(c));
    }
  }
  return rows;
}

Grid failure_grid(const EvalRun& run) {
  Grid rows = {{"task", "length", "strategy", "sample", "status", "seconds", "error"}};
  for (const SampleResult& r : run.results)
    if (r.failed())
      rows.push_back({r.task, length_name(r.length), r.strategy, std::to_string(r.index), r.status,
                      fmt::format("{:.1f}", r.seconds), r.error});
  return rows;
}

}  // namespace

Summary summarize(const EvalRun& run) {
  Summary summary;
  const StrategySpec* dense = dense_spec(run);
  std::map<Key, const SampleResult*> dense_results;
  for (const SampleResult& r : run.results) {
    ++summary.runs;
    summary.failures += r.failed();
    if (dense && r.strategy == dense->label) dense_results[{r.task, r.length, r.index}] = &r;
  }
  std::vector<std::string> tasks = accuracy_tasks(run);
  if (!tasks.empty()) tasks.emplace_back(kAverageTask);
  for (const std::string& task : tasks)
    for (const StrategySpec& spec : run.plan.strategies)
      for (const int64_t length : table_lengths(run)) {
        AccuracyCell cell{task, spec.label, length, 0, 0, {}, {}};
        std::vector<double> scores, differences;
        for (const SampleResult& r : run.results) {
          if (r.strategy != spec.label || !is_accuracy_task(r.task)) continue;
          if (task != kAverageTask && r.task != task) continue;
          if (length != kAllLengths && r.length != length) continue;
          scores.push_back(r.score);
          cell.failures += r.failed();
          if (const auto it = dense_results.find({r.task, r.length, r.index}); it != dense_results.end())
            differences.push_back(r.score - it->second->score);
        }
        cell.samples = int(scores.size());
        cell.score = wilson_interval(scores);
        cell.vs_dense = paired_difference_interval(dense ? differences : std::vector<double>{});
        summary.accuracy.push_back(cell);
      }
  if (!has_perplexity(run)) return summary;
  for (const StrategySpec& spec : run.plan.strategies)
    for (const int64_t length : run.plan.lengths) {
      PerplexityCell cell{spec.label, length, 0, 0, 0, {}};
      double nll = 0;
      int64_t tokens = 0;
      std::vector<double> differences;  // per-token NLL, strategy minus dense
      for (const SampleResult& r : run.results) {
        if (r.strategy != spec.label || r.task != kPerplexityTask || r.length != length) continue;
        if (r.failed()) {
          ++cell.failures;
          continue;
        }
        ++cell.documents;
        nll += r.nll_sum;
        tokens += r.scored_tokens;
        const auto it = dense_results.find({r.task, r.length, r.index});
        if (it != dense_results.end() && !it->second->failed())
          differences.push_back(r.nll_sum / double(r.scored_tokens) -
                                it->second->nll_sum / double(it->second->scored_tokens));
      }
      cell.perplexity = tokens > 0 ? std::exp(nll / double(tokens)) : std::nan("");
      const Interval d = paired_difference_interval(differences);
      auto percent = [](double x) { return 100 * (std::exp(x) - 1); };
      cell.delta_percent = {percent(d.mean), percent(d.low), percent(d.high)};
      summary.perplexity.push_back(cell);
    }
  return summary;
}

void prepare_output_dir(const std::string& dir, std::initializer_list<std::string> inputs) {
  check_output_dir(dir, "--out", inputs);
}

void print_tables(const EvalRun& run, const Summary& s, std::FILE* out) {
  fmt::print(out, "\n{} | prompts: {} | seed {} | {} samples per task and length | {:.0f} s\n", run.model_name,
             run.prompt_format, run.options.seed, run.options.samples, run.seconds);
  const std::vector<std::string> tasks = accuracy_tasks(run);
  if (!tasks.empty()) {
    fmt::print(out, "accuracy (% of expected values recalled), mean with 95% Wilson interval; "
                    "failures score 0 (!n = n failures)\n");
    for (const std::string& task : tasks) {
      fmt::print(out, "\n{}\n", task);
      print_grid(out, accuracy_grid(run, s, task));
    }
    fmt::print(out, "\naverage over tasks\n");
    print_grid(out, accuracy_grid(run, s, std::string(kAverageTask)));
    if (dense_spec(run)) {
      fmt::print(out, "\naverage over tasks, difference to dense in points (paired 95% interval)\n");
      print_grid(out, delta_grid(run, s));
    }
  }
  if (has_perplexity(run)) {
    fmt::print(out, "\nperplexity of the last {} tokens (prefill of the rest, then decode steps)\n",
               run.options.perplexity_tail);
    print_grid(out, perplexity_grid(run, s, false));
    if (dense_spec(run)) {
      fmt::print(out, "\nperplexity change vs dense, % (paired 95% interval over documents)\n");
      print_grid(out, perplexity_grid(run, s, true));
    }
  }
  fmt::print(out, "\nfailures: {} of {} runs\n", s.failures, s.runs);
  if (s.failures > 0) print_grid(out, failure_grid(run));
}

void write_results_csv(const EvalRun& run, const std::string& path) {
  std::string out = "task,length,strategy,sample,status,score,prompt_tokens,seconds,nll_sum,scored_tokens,expected,output,error\n";
  for (const SampleResult& r : run.results)
    out += fmt::format("{},{},{},{},{},{:.4f},{},{:.3f},{:.6f},{},{},{},{}\n", r.task, r.length, csv_field(r.strategy),
                       r.index, r.status, r.score, r.prompt_tokens, r.seconds, r.nll_sum, r.scored_tokens,
                       csv_field(join(r.expected, " | ")), csv_field(r.output), csv_field(r.error));
  write_file(path, out, "results");
}

void write_summary_csv(const Summary& s, const std::string& path) {
  std::string out = "metric,task,strategy,length,n,failures,value,low,high,vs_dense,vs_dense_low,vs_dense_high\n";
  for (const AccuracyCell& c : s.accuracy)
    out += fmt::format("accuracy,{},{},{},{},{},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f},{:.4f}\n", c.task,
                       csv_field(c.strategy), c.length, c.samples, c.failures, c.score.mean, c.score.low, c.score.high,
                       c.vs_dense.mean, c.vs_dense.low, c.vs_dense.high);
  for (const PerplexityCell& c : s.perplexity)
    out += fmt::format("perplexity,ppl,{},{},{},{},{:.5f},,,{:.4f},{:.4f},{:.4f}\n", csv_field(c.strategy), c.length,
                       c.documents, c.failures, c.perplexity, c.delta_percent.mean, c.delta_percent.low,
                       c.delta_percent.high);
  write_file(path, out, "summary");
}

nlohmann::json to_json(const EvalRun& run, const Summary& s) {
  using nlohmann::json;
  auto interval = [](const Interval& i) { return json{{"mean", i.mean}, {"low", i.low}, {"high", i.high}}; };
  json strategies = json::array();
  for (const StrategySpec& spec : run.plan.strategies)
    strategies.push_back({{"label", spec.label},
                          {"strategy", method_name(spec.options.method)},
                          {"budget_percent", spec.options.budget_percent},
                          {"all_heads_pooled", spec.options.all_heads_pooled},
                          {"no_remap", spec.options.no_remap},
                          {"pre_softmax_pooling", spec.options.pre_softmax_pooling},
                          {"fixed_budget", spec.options.fixed_budget}});
  json result = {{"model", run.model_name},
                 {"context_length", run.context_length},
                 {"prompt_format", run.prompt_format},
                 {"seed", run.options.seed},
                 {"samples", run.options.samples},
                 {"lengths", run.plan.lengths},
                 {"tasks", run.plan.tasks},
                 {"strategies", strategies},
                 {"perplexity_tail", run.options.perplexity_tail},
                 {"time_limit_seconds", run.options.time_limit_seconds},
                 {"kascade_anchors", run.options.kascade_profile ? json(run.options.kascade_profile->anchors) : json()},
                 {"seconds", run.seconds},
                 {"runs", s.runs},
                 {"failures", s.failures},
                 {"confidence_intervals",
                  "95%: Wilson score interval on mean scores; normal interval on paired per-sample "
                  "differences to dense"}};
  json accuracy = json::array();
  for (const AccuracyCell& c : s.accuracy)
    accuracy.push_back({{"task", c.task}, {"strategy", c.strategy}, {"length", c.length}, {"samples", c.samples},
                        {"failures", c.failures}, {"score", interval(c.score)}, {"vs_dense", interval(c.vs_dense)}});
  json perplexity = json::array();
  for (const PerplexityCell& c : s.perplexity)
    perplexity.push_back({{"strategy", c.strategy}, {"length", c.length}, {"documents", c.documents},
                          {"failures", c.failures}, {"perplexity", c.perplexity},
                          {"delta_percent", interval(c.delta_percent)}});
  json samples = json::array();
  for (const SampleResult& r : run.results)
    samples.push_back({{"task", r.task}, {"length", r.length}, {"strategy", r.strategy}, {"sample", r.index},
                       {"status", r.status}, {"score", r.score}, {"prompt_tokens", r.prompt_tokens},
                       {"seconds", r.seconds}, {"nll_sum", r.nll_sum}, {"scored_tokens", r.scored_tokens},
                       {"expected", r.expected}, {"output", r.output}, {"error", r.error}});
  result["summary"] = {{"accuracy", accuracy}, {"perplexity", perplexity}};
  result["results"] = samples;
  return result;
}

std::vector<std::string> write_plots(const EvalRun& run, const Summary& s, const std::string& dir) {
  std::vector<std::string> written;
  auto path = [&](const std::string& name) { return (std::filesystem::path(dir) / name).string(); };
  auto accuracy_plot = [&](const std::string& task, const std::string& name, const std::string& title) {
    std::vector<plot::Series> series;
    for (const StrategySpec& spec : run.plan.strategies) {
      plot::Series line{spec.label, {}, {}, {}, {}};
      for (const int64_t length : run.plan.lengths) {
        const AccuracyCell& c = *find_cell(s, task, spec.label, length);
        line.x.push_back(double(length));
        line.y.push_back(100 * c.score.mean);
        line.y_low.push_back(100 * c.score.low);
        line.y_high.push_back(100 * c.score.high);
      }
      series.push_back(std::move(line));
    }
    plot::line_chart(path(name), title, series, "context length (tokens)", "accuracy (%)", /*log_x=*/true, 0.0, 100.0);
    written.push_back(name);
  };
  const std::vector<std::string> tasks = accuracy_tasks(run);
  if (!tasks.empty()) {
    accuracy_plot(std::string(kAverageTask), "accuracy_vs_length.png",
                  fmt::format("{}: task average vs length (95% Wilson CI)", run.model_name));
    for (const std::string& task : tasks)
      accuracy_plot(task, fmt::format("accuracy_{}.png", task), fmt::format("{}: {} (95% Wilson CI)", run.model_name, task));
  }
  if (has_perplexity(run) && dense_spec(run)) {
    std::vector<plot::Series> series;
    for (const StrategySpec& spec : run.plan.strategies) {
      plot::Series line{spec.label, {}, {}, {}, {}};
      for (const int64_t length : run.plan.lengths) {
        const PerplexityCell& c = *find_ppl(s, spec.label, length);
        line.x.push_back(double(length));
        line.y.push_back(c.delta_percent.mean);
        line.y_low.push_back(c.delta_percent.low);
        line.y_high.push_back(c.delta_percent.high);
      }
      series.push_back(std::move(line));
    }
    plot::line_chart(path("perplexity_delta_vs_length.png"),
                     fmt::format("{}: perplexity change vs dense (%, paired 95% CI)", run.model_name), series,
                     "context length (tokens)", "perplexity change (%)", /*log_x=*/true);
    written.push_back("perplexity_delta_vs_length.png");
  }
  return written;
}

std::string markdown_report(const EvalRun& run, const Summary& s, const std::vector<std::string>& plots) {
  std::string md;
  md += fmt::format("Model {} (context {}), prompts formatted as {}; seed {}; {} samples per task and length; "
                    "lengths {}; {:.0f} s in all.\n\n",
                    run.model_name, run.context_length, run.prompt_format, run.options.seed, run.options.samples,
                    fmt::join(run.plan.lengths, ", "), run.seconds);
  md += fmt::format("Failures (errors or runs over the {} s limit, scored 0 and kept in every average): {} of {} runs.\n\n",
                    run.options.time_limit_seconds, s.failures, s.runs);
  for (const std::string& plot_name : plots) md += fmt::format("![{}]({})\n", plot_name, plot_name);
  if (!plots.empty()) md += "\n";
  const std::vector<std::string> tasks = accuracy_tasks(run);
  if (!tasks.empty()) {
    md += "### Task average (accuracy %, 95% Wilson interval)\n\n" +
          markdown_grid(accuracy_grid(run, s, std::string(kAverageTask))) + "\n";
    if (dense_spec(run))
      md += "### Task average: difference to dense (points, paired 95% interval)\n\n" + markdown_grid(delta_grid(run, s)) +
            "\n";
    for (const std::string& task : tasks)
      md += fmt::format("### {} (accuracy %, 95% Wilson interval)\n\n", task) + markdown_grid(accuracy_grid(run, s, task)) +
            "\n";
  }
  if (has_perplexity(run)) {
    md += fmt::format("### Perplexity of the last {} tokens\n\n", run.options.perplexity_tail) +
          markdown_grid(perplexity_grid(run, s, false)) + "\n";
    if (dense_spec(run))
      md += "### Perplexity change vs dense (%, paired 95% interval)\n\n" + markdown_grid(perplexity_grid(run, s, true)) +
            "\n";
  }

  // The goals, checked where the run has the entries they compare.
  const StrategySpec* dense = dense_spec(run);
  const StrategySpec* kascade = nullptr;
  for (const StrategySpec& spec : run.plan.strategies) {
    const AttentionOptions& o = spec.options;
    if (o.kascade() && o.budget_percent == 10 && !o.all_heads_pooled && !o.no_remap && !o.pre_softmax_pooling &&
        !o.fixed_budget && !kascade)
      kascade = &spec;
  }
  if (dense && kascade && !tasks.empty()) {
    md += fmt::format("### Goals: {} (p = 10) against dense and the baselines at the same budget\n\n", kascade->label);
    Grid rows = {{"length", "dense", kascade->label, "difference [95%]", "within 2 points", "ahead of"}};
    for (const int64_t length : run.plan.lengths) {
      const AccuracyCell& d = *find_cell(s, kAverageTask, dense->label, length);
      const AccuracyCell& k = *find_cell(s, kAverageTask, kascade->label, length);
      std::vector<std::string> ahead;
      for (const StrategySpec& spec : run.plan.strategies) {
        const std::string name(method_name(spec.options.method));
        if ((name == "streaming" || name == "quest" || name == "omnikv") && spec.options.budget_percent == 10) {
          const AccuracyCell& other = *find_cell(s, kAverageTask, spec.label, length);
          ahead.push_back(fmt::format("{} {}", spec.label, k.score.mean > other.score.mean   ? "yes"
                                                          : k.score.mean == other.score.mean ? "tie"
                                                                                             : "no"));
        }
      }
      const bool above_chance = d.score.low > 0;
      rows.push_back({length_name(length), fmt::format("{:.1f}", 100 * d.score.mean),
                      fmt::format("{:.1f}", 100 * k.score.mean), delta_text(k.vs_dense, 100, 1),
                      !above_chance ? "dense not above chance"
                      : std::abs(k.vs_dense.mean) <= 0.02 ? "yes"
                                                          : "no",
                      ahead.empty() ? "-" : join(ahead, ", ")});
    }
    md += markdown_grid(rows) + "\n";
    if (has_perplexity(run)) {
      Grid ppl_rows = {{"length", "perplexity change [95%]", "under 1%"}};
      for (const int64_t length : run.plan.lengths) {
        const PerplexityCell& c = *find_ppl(s, kascade->label, length);
        ppl_rows.push_back({length_name(length), delta_text(c.delta_percent, 1, 2),
                            std::isnan(c.delta_percent.mean) ? "n/a" : std::abs(c.delta_percent.mean) < 1 ? "yes" : "no"});
      }
      md += markdown_grid(ppl_rows) + "\n";
    }
  }
  if (s.failures > 0) md += "### Failed runs\n\n" + markdown_grid(failure_grid(run)) + "\n";
  return md;
}

void write_outputs(const EvalRun& run, const Summary& summary, const std::string& dir) {
  // Everything into a staging directory first; the files appear in `dir` only when all are written.
  OutputSet outputs;
  const std::string staging = outputs.stage_directory(dir, "results");
  auto path = [&](const std::string& name) { return (std::filesystem::path(staging) / name).string(); };
  write_results_csv(run, path("results.csv"));
  write_summary_csv(summary, path("summary.csv"));
  write_file(path("results.json"), to_json(run, summary).dump(1) + "\n", "results");
  const std::vector<std::string> plots = write_plots(run, summary, staging);
  write_file(path("report.md"), markdown_report(run, summary, plots), "report");
  outputs.commit();
}

}  // namespace kascade::eval
