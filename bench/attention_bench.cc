// Attention time per layer type, dense vs Kascade, on the default model's
// shape (30 layers, 9 heads, 3 KV heads, head_dim 64) with random data:
// prefill (in chunks, as the model runs it) and decode at 2K, 4K and 8K keys.
// Layer types: dense (the dense strategy's layers), Kascade's layer 0 (dense
// output + selection), its other anchors, and its reuse layers. First checks
// that Kascade at p = 100 reproduces dense, then prints one table of medians
// over --repeats runs and ratios to dense.
//
//   attention_bench [--contexts 2048,4096,8192] [--percent 10] [--threads 2]
//                   [--repeats 3] [--decode-steps 20] [--chunk 512] [--kv f16|f32]
//                   [--clock wall|cpu] [--phases prefill,decode] [--scoring sketch|exact]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "attention/strategies.h"
#include "core/error.h"
#include "model/kv_cache.h"
#include "ops/threading.h"

namespace {

using namespace kascade;
using namespace kascade::attention;

const Shape kShape{30, 9, 3, 64};

// Every layer's cache (the engine's KV cache), filled with random keys and values.
struct Caches {
  model::KvCache cache;

  Caches(KvType type, int64_t n, uint64_t seed)
      : cache(kShape.n_layers, kShape.n_kv_heads, kShape.head_dim, n, type) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal;
    std::vector<float> keys(size_t(n * kShape.n_kv_heads * kShape.head_dim)), values(keys.size());
    for (int l = 0; l < kShape.n_layers; ++l) {
      for (size_t i = 0; i < keys.size(); ++i) keys[i] = normal(rng), values[i] = normal(rng);
      cache.write(l, 0, n, keys.data(), values.data());
    }
  }

  LayerCache layer(int l) const { return cache.layer(l); }
};

enum LayerType { kDense, kLayer0, kAnchor, kReuse, kTypes };
const char* const kTypeNames[kTypes] = {"dense", "layer 0", "anchor", "reuse"};

// Seconds of each layer type summed over a prefill or a decode step, and how
// many layers of that type there are.
struct Times {
  double sum[kTypes] = {};
  int count[kTypes] = {};
};

// Wall time, or with --clock cpu the process CPU time (with one thread, a
// measure that other load on the machine disturbs less).
bool use_cpu_clock = false;

double now_seconds() {
  if (use_cpu_clock) {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One pass of all layers over positions [first, first + n).
void run_layers(Strategy& strategy, const Caches& caches, const std::vector<LayerType>& types,
                Phase phase, int64_t first, int64_t n, const std::vector<float>& queries,
                std::vector<float>& output, Times& times) {
  for (int l = 0; l < kShape.n_layers; ++l) {
    Step step{l, phase, queries.data(), n, first, caches.layer(l), output.data()};
    const double start = now_seconds();
    strategy.forward(step);
    times.sum[types[l]] += now_seconds() - start;
    times.count[types[l]] += 1;
  }
}

// Per-layer seconds of each type for a chunked prefill of n tokens.
Times prefill(Strategy& strategy, const Caches& caches, const std::vector<LayerType>& types,
              int64_t n, int64_t chunk, const std::vector<float>& queries) {
  Times times;
  std::vector<float> output(queries.size());
  strategy.reset();
  for (int64_t first = 0; first < n; first += chunk)
    run_layers(strategy, caches, types, Phase::Prefill, first, std::min(chunk, n - first),
               queries, output, times);
  const int n_chunks = int((n + chunk - 1) / chunk);
  for (int& count : times.count) count /= n_chunks;  // per layer, not per chunk
  return times;
}

Times decode(Strategy& strategy, const Caches& caches, const std::vector<LayerType>& types,
             int64_t n, const std::vector<float>& queries) {
  Times times;
  std::vector<float> output(size_t(kShape.n_heads * kShape.head_dim));
  run_layers(strategy, caches, types, Phase::Decode, n - 1, 1, queries, output, times);
  return times;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t m = values.size() / 2;
  return values.size() % 2 ? values[m] : 0.5 * (values[m - 1] + values[m]);
}

// Medians over runs of the per-layer time of each type (ms), and of the total.
struct Summary {
  double per_layer_ms[kTypes] = {};
  double total_ms = 0;
};

template <typename Run>
Summary measure(int repeats, Run run) {
  std::vector<double> per_type[kTypes], totals;
  for (int r = 0; r < repeats; ++r) {
    const Times t = run();
    double total = 0;
    for (int i = 0; i < kTypes; ++i) {
      if (t.count[i]) per_type[i].push_back(1e3 * t.sum[i] / (t.count[i]));
      total += t.sum[i];
    }
    totals.push_back(1e3 * total);
  }
  Summary s;
  for (int i = 0; i < kTypes; ++i)
    if (!per_type[i].empty()) s.per_layer_ms[i] = median(per_type[i]);
  s.total_ms = median(totals);
  return s;
}

// Kascade at p = 100 must reproduce dense exactly (same kernels, all keys).
void check(KvType kv) {
  const int64_t n = 700;
  const Caches caches(kv, n, 99);
  std::vector<float> queries(size_t(n * kShape.n_heads * kShape.head_dim));
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal;
  for (float& x : queries) x = 2 * normal(rng);
  AttentionOptions full;
  full.method = Method::Kascade;
  full.sparse_phases = SparsePhases::Both;
  full.all_anchors = false;
  full.budget_percent = 100;
  auto kascade = make_strategy(full, kShape);
  auto dense = make_dense(kShape);
  std::vector<float> a(queries.size()), b(queries.size());
  for (int l = 0; l < kShape.n_layers; ++l) {
    Step step{l, Phase::Prefill, queries.data(), n, 0, caches.layer(l), a.data()};
    dense->forward(step);
    step.output = b.data();
    kascade->forward(step);
    if (a != b) fail("check failed: kascade at p = 100 differs from dense at layer {}", l);
  }
  std::printf("check: kascade at p = 100 equals dense on %lld tokens x %d layers\n",
              (long long)n, kShape.n_layers);
}

}  // namespace

int main(int argc, char** argv) {
  kascade::ops::prepare_environment(argv);
  CLI::App app("Attention time per layer type, dense vs Kascade");
  std::vector<int64_t> contexts{2048, 4096, 8192};
  double percent = 10;
  int threads = 2, repeats = 3, decode_steps = 20;
  int64_t chunk = 512;
  std::string kv = "f16", clock = "wall", scoring = "sketch";
  std::vector<std::string> phases{"prefill", "decode"};
  app.add_option("--contexts", contexts, "context lengths")->delimiter(',');
  app.add_option("--percent", percent, "Kascade budget p");
  app.add_option("--threads", threads, "OpenMP threads");
  app.add_option("--repeats", repeats, "prefill runs (median)");
  app.add_option("--decode-steps", decode_steps, "decode steps (median)");
  app.add_option("--chunk", chunk, "prefill chunk (a multiple of the tile)");
  app.add_option("--phases", phases, "which phases to time")
      ->delimiter(',')
      ->check(CLI::IsMember({"prefill", "decode"}));
  app.add_option("--kv", kv, "cache type")->check(CLI::IsMember({"f16", "f32"}));
  app.add_option("--clock", clock, "wall, or cpu (process CPU time)")
      ->check(CLI::IsMember({"wall", "cpu"}));
  app.add_option("--scoring", scoring, "what anchors rank keys from at decode (the CPU engine's default: sketch)")
      ->check(CLI::IsMember({"sketch", "exact"}));
  CLI11_PARSE(app, argc, argv);
  use_cpu_clock = clock == "cpu";
  try {
    omp_set_num_threads(threads);
    const KvType type = kv == "f16" ? KvType::F16 : KvType::F32;
    check(type);

    // The paper's schedule, which has every layer type; the default mode
    // (dense prefill, every layer an anchor) runs anchor layers throughout.
    AttentionOptions options;
    options.method = Method::Kascade;
    options.sparse_phases = SparsePhases::Both;
    options.all_anchors = false;
    options.budget_percent = percent;
    options.scoring = scoring == "sketch" ? Scoring::Sketch : Scoring::Exact;
    options.profile = default_profile(kShape);
    options.profile->anchors = scale_layers(std::vector<int>{0, 2, 8, 13, 14}, kShape.n_layers);
    auto kascade = make_strategy(options, kShape);
    auto dense = make_dense(kShape);
    std::vector<LayerType> dense_types(size_t(kShape.n_layers), kDense), kascade_types;
    for (int l = 0; l < kShape.n_layers; ++l) {
      const auto& anchors = options.profile->anchors;
      const bool anchor = std::find(anchors.begin(), anchors.end(), l) != anchors.end();
      kascade_types.push_back(l == 0 ? kLayer0 : anchor ? kAnchor : kReuse);
    }
    std::printf("shape: %d layers, %d heads, %d KV heads, head_dim %d; cache %s; %d threads; "
                "p = %g%%, anchors %s (%s scoring at decode); prefill in chunks of %lld\n",
                kShape.n_layers, kShape.n_heads, kShape.n_kv_heads, kShape.head_dim, kv.c_str(),
                threads, percent, fmt::format("{}", fmt::join(options.profile->anchors, ",")).c_str(), scoring.c_str(),
                (long long)chunk);
    std::printf("\n%-7s %-8s %12s %12s %12s %12s %12s %12s %8s\n", "context", "phase",
                "dense ms/L", "layer0 ms", "anchor ms", "reuse ms", "dense total", "kascade tot",
                "speedup");
    for (int64_t n : contexts) {
      const Caches caches(type, n, uint64_t(n));
      std::vector<float> queries(size_t(std::min(chunk, n) * kShape.n_heads * kShape.head_dim));
      std::mt19937_64 rng(uint64_t(n) + 1);
      std::normal_distribution<float> normal;
      for (float& x : queries) x = 2 * normal(rng);
      for (Phase phase : {Phase::Prefill, Phase::Decode}) {
        const bool pre = phase == Phase::Prefill;
        if (std::find(phases.begin(), phases.end(), pre ? "prefill" : "decode") == phases.end())
          continue;
        const int runs = pre ? repeats : decode_steps;
        auto run = [&](Strategy& s, const std::vector<LayerType>& types) {
          return measure(runs, [&] {
            return pre ? prefill(s, caches, types, n, chunk, queries)
                       : decode(s, caches, types, n, queries);
          });
        };
        // Warm-up, then alternate so both see the same machine load.
        if (!pre) run(*dense, dense_types), run(*kascade, kascade_types);
        const Summary d = run(*dense, dense_types);
        const Summary k = run(*kascade, kascade_types);
        const double base = d.per_layer_ms[kDense];
        auto cell = [&](LayerType t) {
          return fmt::format("{:.3f} {:.2f}x", k.per_layer_ms[t], k.per_layer_ms[t] / base);
        };
        std::printf("%-7lld %-8s %12.3f %12s %12s %12s %12.1f %12.1f %7.2fx\n", (long long)n,
                    pre ? "prefill" : "decode", base, cell(kLayer0).c_str(), cell(kAnchor).c_str(),
                    cell(kReuse).c_str(), d.total_ms, k.total_ms, d.total_ms / k.total_ms);
      }
    }
    std::printf("\nms/L: attention milliseconds per layer (prefill: all chunks of the prompt; "
                "decode: one token at the full context), medians; Nx: ratio to a dense layer. "
                "Totals: all %d layers.\n",
                kShape.n_layers);
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
