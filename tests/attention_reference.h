// Naive double-precision references of the attention strategies, written from
// KASCADE.md and strategies.h independently of src/attention: full score rows,
// explicit softmax, sort-based top-k with ties to the lower index. A driver
// runs a fast strategy step by step and layer by layer over a random problem
// and checks, after every forward(): the keys each query and head kept
// (identical to the reference's, except for selections whose reference
// scores differ by less than float round-off, which are counted and then
// followed so later layers stay comparable), and each output against the
// reference attention over those keys, within a tolerance derived from the
// inputs (the worst element is reported).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "attention/attention.h"
#include "core/half.h"

namespace kascade::attention::reference {

inline int64_t budget(int64_t n, double percent, int64_t min_k) {
  const int64_t by_percent = int64_t(std::floor(percent * double(n) / 100.0 + 1e-9));
  return std::min(n, std::max(min_k, by_percent));
}

// A random problem: queries of every layer and position, and the keys and
// values every layer's cache will hold.
struct Problem {
  Shape shape;
  int64_t n = 0;
  KvType type = KvType::F32;
  std::vector<float> q;     // [layer][position][head][d]
  std::vector<float> k, v;  // [layer][kv_head][position][d], as stored (fp16-rounded for F16)

  int d() const { return shape.head_dim; }
  const float* query(int l, int64_t p, int head) const {
    return q.data() + ((int64_t(l) * n + p) * shape.n_heads + head) * d();
  }
  const float* key(int l, int h, int64_t j) const {
    return k.data() + ((int64_t(l) * shape.n_kv_heads + h) * n + j) * d();
  }
  const float* value(int l, int h, int64_t j) const {
    return v.data() + ((int64_t(l) * shape.n_kv_heads + h) * n + j) * d();
  }
};

// q_scale sharpens attention; every key j >= duplicate_from with
// j % duplicate_every == 0 copies key j - 1 (exact ties).
inline Problem make_problem(Shape shape, int64_t n, KvType type, uint64_t seed,
                            double q_scale = 2.0, int duplicate_every = 0,
                            int64_t duplicate_from = 1) {
  Problem problem{shape, n, type, {}, {}, {}};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  const int d = shape.head_dim;
  problem.q.resize(size_t(shape.n_layers * n * shape.n_heads * d));
  for (float& x : problem.q) x = float(q_scale) * normal(rng);
  problem.k.resize(size_t(shape.n_layers * shape.n_kv_heads * n * d));
  problem.v.resize(problem.k.size());
  for (size_t i = 0; i < problem.k.size(); ++i) {
    problem.k[i] = normal(rng);
    problem.v[i] = normal(rng);
    if (type == KvType::F16) {
      problem.k[i] = fp16_to_fp32(fp32_to_fp16(problem.k[i]));
      problem.v[i] = fp16_to_fp32(fp32_to_fp16(problem.v[i]));
    }
  }
  if (duplicate_every > 0)
    for (int l = 0; l < shape.n_layers; ++l)
      for (int h = 0; h < shape.n_kv_heads; ++h)
        for (int64_t j = std::max<int64_t>(1, duplicate_from); j < n; ++j)
          if (j % duplicate_every == 0) {
            float* row = const_cast<float*>(problem.key(l, h, j));
            std::copy(row - d, row, row);
          }
  return problem;
}

// The cache the fast code reads: positions not yet written hold NaN, so any
// read past the written prefix poisons the outputs.
struct LiveCache {
  std::vector<float> k, v;
  std::vector<uint16_t> k16, v16;

  explicit LiveCache(const Problem& problem) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    k.assign(problem.k.size(), nan);
    v.assign(problem.v.size(), nan);
    k16.assign(problem.k.size(), 0x7e00);
    v16.assign(problem.v.size(), 0x7e00);
  }

  void write(const Problem& problem, int64_t first, int64_t end) {
    const int d = problem.d();
    for (int l = 0; l < problem.shape.n_layers; ++l)
      for (int h = 0; h < problem.shape.n_kv_heads; ++h)
        for (int64_t j = first; j < end; ++j)
          for (int c = 0; c < d; ++c) {
            const size_t i = size_t(((int64_t(l) * problem.shape.n_kv_heads + h) * problem.n + j) * d + c);
            k[i] = problem.k[i];
            v[i] = problem.v[i];
            k16[i] = fp32_to_fp16(problem.k[i]);
            v16[i] = fp32_to_fp16(problem.v[i]);
          }
  }

  LayerCache layer(const Problem& problem, int l) const {
    const size_t offset = size_t(int64_t(l) * problem.shape.n_kv_heads * problem.n * problem.d());
    if (problem.type == KvType::F16)
      return {KvType::F16, k16.data() + offset, v16.data() + offset, problem.n};
    return {KvType::F32, k.data() + offset, v.data() + offset, problem.n};
  }
};

// q . k_j / sqrt(d) in double.
inline double score(const Problem& p, int l, int64_t position, int head, int64_t j) {
  const float* q = p.query(l, position, head);
  const float* k = p.key(l, head / p.shape.group(), j);
  double sum = 0;
  for (int c = 0; c < p.d(); ++c) sum += double(q[c]) * double(k[c]);
  return sum / std::sqrt(double(p.d()));
}

// Softmax of the full causal row [0, position].
inline std::vector<double> softmax_row(const Problem& p, int l, int64_t position, int head) {
  std::vector<double> row(size_t(position + 1));
  for (int64_t j = 0; j <= position; ++j) row[j] = score(p, l, position, head, j);
  const double max = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (double& x : row) sum += (x = std::exp(x - max));
  for (double& x : row) x /= sum;
  return row;
}

// The key sketch of KASCADE's cheap scorer (src/attention/key_sketch.h),
// written from its definition: per block of 64 positions and channel, lo =
// fp16(min), step = fp16((max - lo) / 15), code = round((k - lo) / step) in
// [0, 15] over the values the cache stores; the sketched key is lo + code *
// step. Keys [0, (n - 1) / 64 * 64) of a step that sees n keys are sketched.
inline double stored_key(const Problem& p, int l, int h, int64_t j, int c) {
  const float x = p.key(l, h, j)[c];
  return p.type == KvType::F16 ? double(fp16_to_fp32(fp32_to_fp16(x))) : double(x);
}

// lo, step and code of key j's channel c.
struct SketchedValue {
  float lo = 0, step = 0, code = 0;
};

inline SketchedValue sketched_value(const Problem& p, int l, int h, int64_t j, int c) {
  const int64_t first = j / 64 * 64;
  float low = float(stored_key(p, l, h, first, c)), high = low;
  for (int64_t i = first; i < first + 64; ++i) {
    low = std::min(low, float(stored_key(p, l, h, i, c)));
    high = std::max(high, float(stored_key(p, l, h, i, c)));
  }
  const float lo = fp16_to_fp32(fp32_to_fp16(low));
  const float step = fp16_to_fp32(fp32_to_fp16((high - lo) / 15.0f));
  const float code = step > 0 ? std::clamp(std::nearbyint((float(stored_key(p, l, h, j, c)) - lo) / step), 0.0f, 15.0f)
                              : 0.0f;
  return {lo, step, code};
}

// A decode query's score of key j: from the sketch below the sketched end
// (the query sees position + 1 keys), else exact. The sketch's scorer rounds
// w_c = q_c * step_c to int8 per block (scale max |w| / 127) and sums code x
// weight exactly; it rounds the query as the kernels hold it (times
// log2(e) / sqrt(d) in fp32), so this does too.
inline double sketched_score(const Problem& p, int l, int64_t position, int head, int64_t j) {
  if (j >= position / 64 * 64) return score(p, l, position, head, j);
  const float* q = p.query(l, position, head);
  const int d = p.d();
  const float factor = 1.4426950408889634f / std::sqrt(float(d));
  std::vector<SketchedValue> key(static_cast<size_t>(d));
  std::vector<float> scaled(static_cast<size_t>(d));
  float largest = 0;
  for (int c = 0; c < d; ++c) {
    key[size_t(c)] = sketched_value(p, l, head / p.shape.group(), j, c);
    scaled[size_t(c)] = q[c] * factor;
    largest = std::max(largest, std::abs(scaled[size_t(c)] * key[size_t(c)].step));
  }
  double bias = 0, sum = 0;
  for (int c = 0; c < d; ++c) {
    bias += double(scaled[size_t(c)]) * key[size_t(c)].lo;
    if (largest > 0)
      sum += double(key[size_t(c)].code) * std::nearbyint(scaled[size_t(c)] * key[size_t(c)].step * (127.0f / largest));
  }
  return (bias + double(largest / 127.0f) * sum) / double(factor) / std::sqrt(double(d));
}

// Softmax of a decode query's row [0, position] scored as sketched_score.
inline std::vector<double> sketched_softmax_row(const Problem& p, int l, int64_t position, int head) {
  std::vector<double> row(size_t(position + 1));
  for (int64_t j = 0; j <= position; ++j) row[j] = sketched_score(p, l, position, head, j);
  const double max = *std::max_element(row.begin(), row.end());
  double sum = 0;
  for (double& x : row) sum += (x = std::exp(x - max));
  for (double& x : row) x /= sum;
  return row;
}

// Attention restricted to `keys`, softmax renormalised over them.
inline std::vector<double> attend(const Problem& p, int l, int64_t position, int head,
                                  const std::vector<int32_t>& keys) {
  std::vector<double> out(size_t(p.d()), 0.0);
  if (keys.empty()) return out;
  std::vector<double> w(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) w[i] = score(p, l, position, head, keys[i]);
  const double max = *std::max_element(w.begin(), w.end());
  double sum = 0;
  for (double& x : w) sum += (x = std::exp(x - max));
  const int h = head / p.shape.group();
  for (size_t i = 0; i < keys.size(); ++i) {
    const float* v = p.value(l, h, keys[i]);
    for (int c = 0; c < p.d(); ++c) out[c] += w[i] / sum * v[c];
  }
  return out;
}

// Float error bound of attention over `keys`: score error about
// (d + 2) u sum_c |q_c k_c| / sqrt(d), doubled through the softmax, exp2 error,
// and summation error over the keys, times the largest |v|.
inline double tolerance(const Problem& p, int l, int64_t position, int head,
                        const std::vector<int32_t>& keys) {
  const double u = std::ldexp(1.0, -24);
  const float* q = p.query(l, position, head);
  const int h = head / p.shape.group();
  double score_bound = 0, v_max = 0;
  for (int32_t j : keys) {
    const float* k = p.key(l, h, j);
    const float* v = p.value(l, h, j);
    double s = 0;
    for (int c = 0; c < p.d(); ++c) {
      s += std::abs(double(q[c]) * k[c]);
      v_max = std::max(v_max, double(std::abs(v[c])));
    }
    score_bound = std::max(score_bound, s / std::sqrt(double(p.d())));
  }
  const double relative = 4.0 * (p.d() + 2) * u * score_bound + 1e-6 +
                          4.0 * double(keys.size() + p.d()) * u;
  return relative * v_max + 1e-30;
}

// Top k of scores, best first ties to the lower index, returned ascending.
inline std::vector<int32_t> top_k(const std::vector<double>& scores, int64_t k) {
  std::vector<int32_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
  order.resize(size_t(std::min<int64_t>(k, int64_t(order.size()))));
  std::sort(order.begin(), order.end());
  return order;
}

inline std::vector<int32_t> all_keys(int64_t n) {
  std::vector<int32_t> keys(static_cast<size_t>(n));
  std::iota(keys.begin(), keys.end(), 0);
  return keys;
}

// What a check found; EXPECT failures are raised where found.
struct Stats {
  int64_t selections = 0;      // reference selections compared
  int64_t near_ties = 0;       // ... that differed within round-off
  int64_t boundary_ties = 0;   // ... whose k-th and (k+1)-th best scores were exactly equal
  int64_t outputs = 0;         // output rows compared
  double worst_ratio = 0;      // max |fast - ref| / tolerance
  double worst_error = 0;      // max |fast - ref|
  std::string worst_where;

  void print(const std::string& label) const {
    std::printf("%s: %lld selections (%lld near-ties, %lld exact ties at the boundary), %lld "
                "output rows, worst |err| %.3g = %.3g of tolerance at %s\n",
                label.c_str(), (long long)selections, (long long)near_ties,
                (long long)boundary_ties, (long long)outputs, worst_error, worst_ratio,
                worst_where.c_str());
  }
};

// Compares a fast selection with the reference top k of `scores`. Sets may
// differ only by swaps whose reference scores differ, and by less than
// 1e-5 of the largest score (float round-off); an exact tie must go to the
// lower index. Returns false (with a test failure) otherwise.
inline bool check_selection(const std::vector<double>& scores, int64_t k,
                            const std::vector<int32_t>& fast, Stats& stats,
                            const std::string& where) {
  ++stats.selections;
  const std::vector<int32_t> expected = top_k(scores, k);
  if (k > 0 && k < int64_t(scores.size())) {
    std::vector<double> sorted = scores;
    std::nth_element(sorted.begin(), sorted.begin() + k, sorted.end(), std::greater<>());
    const double next = sorted[k];
    const double kth = *std::min_element(sorted.begin(), sorted.begin() + k);
    if (kth == next) ++stats.boundary_ties;
  }
  if (fast == expected) return true;
  if (fast.size() != expected.size()) {
    ADD_FAILURE() << where << ": selected " << fast.size() << " keys, expected " << expected.size();
    return false;
  }
  double scale = 0;
  for (double s : scores) scale = std::max(scale, std::abs(s));
  std::vector<int32_t> only_fast, only_expected;
  std::set_difference(fast.begin(), fast.end(), expected.begin(), expected.end(),
                      std::back_inserter(only_fast));
  std::set_difference(expected.begin(), expected.end(), fast.begin(), fast.end(),
                      std::back_inserter(only_expected));
  for (int32_t a : only_fast)
    for (int32_t b : only_expected) {
      if (a < 0 || a >= int32_t(scores.size()) || scores[a] == scores[b] ||
          std::abs(scores[a] - scores[b]) > 1e-5 * scale) {
        ADD_FAILURE() << where << ": selected key " << a << " (score " << (a >= 0 && a < int32_t(scores.size()) ? scores[a] : 0.0)
                      << ") instead of " << b << " (score " << scores[b] << ")";
        return false;
      }
    }
  ++stats.near_ties;
  return true;
}

// A reference strategy: after the fast forward() of a layer, says which keys
// each (query, head) must attend, checking (and adopting) the fast selections.
class Reference {
 public:
  virtual ~Reference() = default;
  // keys[q * H + head]
  virtual void expected(const Problem& p, const Step& step, const Strategy& fast,
                        std::vector<std::vector<int32_t>>& keys, Stats& stats) = 0;
};

struct Chunk {
  Phase phase;
  int64_t first, n;
};

// Prefill chunks of the given sizes, then decode steps to the end.
inline std::vector<Chunk> schedule(std::vector<int64_t> prefill_sizes, int64_t n_total) {
  std::vector<Chunk> chunks;
  int64_t at = 0;
  for (int64_t size : prefill_sizes) {
    chunks.push_back({Phase::Prefill, at, size});
    at += size;
  }
  for (; at < n_total; ++at) chunks.push_back({Phase::Decode, at, 1});
  return chunks;
}

// Runs `fast` over the schedule and checks every layer of every step.
inline void run_and_check(Strategy& fast, Reference& ref, const Problem& p,
                          const std::vector<Chunk>& chunks, Stats& stats,
                          const std::string& label) {
  const Shape& s = p.shape;
  const int d = p.d();
  LiveCache cache(p);
  std::vector<std::vector<int32_t>> expected;
  for (const Chunk& chunk : chunks) {
    cache.write(p, chunk.first, chunk.first + chunk.n);
    std::vector<float> queries(size_t(chunk.n * s.n_heads * d));
    std::vector<float> output(queries.size());
    for (int l = 0; l < s.n_layers; ++l) {
      std::copy(p.query(l, chunk.first, 0), p.query(l, chunk.first + chunk.n, 0), queries.begin());
      std::fill(output.begin(), output.end(), std::numeric_limits<float>::quiet_NaN());
      Step step;
      step.layer = l;
      step.phase = chunk.phase;
      step.queries = queries.data();
      step.n_queries = chunk.n;
      step.first_position = chunk.first;
      step.cache = cache.layer(p, l);
      step.output = output.data();
      fast.forward(step);
      expected.assign(size_t(chunk.n * s.n_heads), {});
      ref.expected(p, step, fast, expected, stats);
      // Rows checked in parallel (the reference is the slow part); the first
      // failure in row order is reported.
      const int64_t n_rows = chunk.n * s.n_heads;
      std::vector<std::string> failures(static_cast<size_t>(n_rows));
      std::vector<double> ratios(static_cast<size_t>(n_rows), 0.0), errors(ratios);
#pragma omp parallel for schedule(dynamic, 4)
      for (int64_t row = 0; row < n_rows; ++row) {
        const int64_t q = row / s.n_heads, position = chunk.first + q;
        const int head = int(row % s.n_heads);
        std::vector<int32_t> kept;
        fast.kept_keys(step, q, head, kept);
        const std::vector<int32_t>& keys = expected[size_t(row)];
        if (kept != keys) {
          failures[row] = fmt::format("kept {} keys, expected {}", kept.size(), keys.size());
          continue;
        }
        if (!keys.empty() && keys.back() > position) {
          failures[row] = fmt::format("key {} after the query", keys.back());
          continue;
        }
        const std::vector<double> want = attend(p, l, position, head, keys);
        const double tol = tolerance(p, l, position, head, keys);
        const float* got = output.data() + row * d;
        for (int c = 0; c < d; ++c) {
          const double err = std::abs(double(got[c]) - want[c]);
          if (!(err <= tol)) {
            failures[row] = fmt::format("element {}: {} vs {} (tolerance {})", c, got[c],
                                        want[c], tol);
            break;
          }
          if (err / tol > ratios[row]) ratios[row] = err / tol, errors[row] = err;
        }
      }
      for (int64_t row = 0; row < n_rows; ++row) {
        const std::string where = fmt::format("{} layer {} position {} head {}", label, l,
                                              chunk.first + row / s.n_heads, row % s.n_heads);
        if (!failures[row].empty()) {
          ADD_FAILURE() << where << ": " << failures[row];
          return;
        }
        if (ratios[row] > stats.worst_ratio) {
          stats.worst_ratio = ratios[row];
          stats.worst_error = errors[row];
          stats.worst_where = where;
        }
        ++stats.outputs;
      }
    }
  }
}

// Units of a step as the strategies define them: prefill tiles of `tile`
// from the first position (candidates before the tile, own tile causal),
// decode one per query (candidates all keys up to it).
struct RefUnit {
  int64_t first_query, length, start, n_candidates;
  bool own_tile;
};

inline std::vector<RefUnit> ref_units(const Step& step, int64_t tile) {
  std::vector<RefUnit> units;
  if (step.phase == Phase::Decode) {
    for (int64_t q = 0; q < step.n_queries; ++q)
      units.push_back({q, 1, step.first_position + q, step.first_position + q + 1, false});
    return units;
  }
  for (int64_t q = 0; q < step.n_queries; q += tile) {
    const int64_t start = step.first_position + q;
    units.push_back({q, std::min(tile, step.n_queries - q), start, start, true});
  }
  return units;
}

// The fast selection of a unit, read from kept_keys: the keys before the
// tile (prefill) or all of them (decode).
inline std::vector<int32_t> fast_selection(const Strategy& fast, const Step& step,
                                           const RefUnit& unit, int head) {
  std::vector<int32_t> keys;
  fast.kept_keys(step, unit.first_query, head, keys);
  if (unit.own_tile) keys.erase(std::lower_bound(keys.begin(), keys.end(), int32_t(unit.start)), keys.end());
  return keys;
}

inline void add_own_tile(const RefUnit& unit, int64_t position, std::vector<int32_t>& keys) {
  if (!unit.own_tile) return;
  for (int64_t j = unit.start; j <= position; ++j) keys.push_back(int32_t(j));
}

// ---------------------------------------------------------------------------
// Reference strategies.

class DenseRef : public Reference {
 public:
  void expected(const Problem&, const Step& step, const Strategy&,
                std::vector<std::vector<int32_t>>& keys, Stats&) override {
    const int n_heads = int(keys.size() / size_t(step.n_queries));
    for (int64_t q = 0; q < step.n_queries; ++q)
      for (int head = 0; head < n_heads; ++head)
        keys[q * n_heads + head] = all_keys(step.first_position + q + 1);
  }
};

struct KascadeSettings {
  double percent = 10;
  int64_t min_k = 128;
  int64_t tile = 32;
  std::vector<int> anchors{0};
  std::vector<std::vector<int>> head_map;  // [layer][kv head]
  std::set<int> dense{0};
  bool all_heads = false, no_remap = false, pre_softmax = false, fixed = false;
  bool sparse_prefill = true, sparse_decode = true;
  bool all_anchors = false, own_tile_in_budget = false;
  int refine = 1;  // c; refined reuse when > 1
  bool sketch = false;  // decode anchors (not dense ones) score from the key sketch
  int every = 1;        // decode anchors select at one step in `every` and hold the sets between
  std::set<int> wide;   // layers whose decode budget is wide_factor x percent (at most 100 %)
  int wide_factor = 1;
};

// Kascade (KASCADE.md): anchors pool and select, reuse layers read the last
// anchor's sets through the head map, or with refinement re-rank the anchor's
// c x budget candidates with their own queries.
class KascadeRef : public Reference {
 public:
  explicit KascadeRef(KascadeSettings settings) : k_(std::move(settings)) {}

  void expected(const Problem& p, const Step& step, const Strategy& fast,
                std::vector<std::vector<int32_t>>& keys, Stats& stats) override {
    const Shape& s = p.shape;
    const int l = step.layer, g = s.group();
    const bool sparse = step.phase == Phase::Prefill ? k_.sparse_prefill : k_.sparse_decode;
    if (!sparse || k_.dense.count(l)) {
      for (int64_t q = 0; q < step.n_queries; ++q)
        for (int head = 0; head < s.n_heads; ++head)
          keys[q * s.n_heads + head] = all_keys(step.first_position + q + 1);
      if (!sparse) return;
    }
    const std::vector<RefUnit> units = ref_units(step, k_.tile);
    const bool anchor = k_.all_anchors || std::count(k_.anchors.begin(), k_.anchors.end(), l) > 0;
    n_pools_ = k_.all_heads ? 1 : s.n_kv_heads;
    // A held step attends the layer's last selection S, S shifted by the
    // steps since (only keys before the selecting step's), and every key
    // added since; a selecting decode step's sets are held after the check below.
    const bool holds = anchor && !k_.dense.count(l) && k_.every > 1 && step.phase == Phase::Decode &&
                       step.n_queries == 1;
    Held& held = held_[l];
    const int64_t n_keys = step.first_position + 1, age = n_keys - held.selected_keys;
    if (holds && !held.sets.empty() && held.n_keys == n_keys - 1 && age < k_.every) {
      held.n_keys = n_keys;
      for (int head = 0; head < s.n_heads; ++head) {
        std::set<int32_t> kept;
        for (const int32_t key : held.sets[k_.all_heads ? 0 : head / g]) {
          kept.insert(key);
          if (key + age < held.selected_keys) kept.insert(int32_t(key + age));
        }
        for (int64_t key = held.selected_keys; key < n_keys; ++key) kept.insert(int32_t(key));
        keys[head].assign(kept.begin(), kept.end());
      }
      return;
    }
    if (anchor) select(p, step, units);
    if (k_.dense.count(l)) return;
    const bool refined = !anchor && k_.refine > 1;
    if (refined) refine(p, step, units, fast, stats);
    for (size_t u = 0; u < units.size(); ++u)
      for (int64_t t = 0; t < units[u].length; ++t)
        for (int head = 0; head < s.n_heads; ++head) {
          const int64_t q = units[u].first_query + t, position = step.first_position + q;
          std::vector<int32_t>& out = keys[q * s.n_heads + head];
          const int h = head / g;
          if (refined) {
            out = refined_[u * s.n_kv_heads + h];
          } else {
            const int pool = k_.all_heads ? 0 : (anchor || k_.no_remap) ? h : k_.head_map[l][h];
            // The fast selection shows in the first layer that attends it
            // (a dense anchor attends every key).
            Pending& pending = pending_[u * n_pools_ + pool];
            if (!pending.scores.empty()) {
              const std::vector<int32_t> fast_set = fast_selection(fast, step, units[u], head);
              const std::string where = fmt::format("anchor layer {} unit at {} pool {} (seen at layer {})",
                                                    pending.layer, pending.start, pending.pool, l);
              if (check_selection(pending.scores, pending.k, fast_set, stats, where))
                own_[u * n_pools_ + pool] = fast_set;
              pending.scores.clear();
            }
            out = own_[u * n_pools_ + pool];
          }
          add_own_tile(units[u], position, out);
        }
    if (holds) held = {n_keys, n_keys, own_};
  }

 private:
  // A reference selection not yet compared with the fast one.
  struct Pending {
    std::vector<double> scores;
    int64_t k = 0;
    int layer = 0;
    int64_t start = 0;
    int pool = 0;
  };

  // Keys a unit attends: the rolling budget (or the fixed-budget ablation's),
  // less the own tile when it counts in the budget.
  int64_t kept(const Step& step, const RefUnit& unit) const {
    const int64_t n = unit.n_candidates;
    const bool wide = step.phase == Phase::Decode && k_.wide.count(step.layer);
    const double percent = wide ? std::min(100.0, k_.percent * k_.wide_factor) : k_.percent;
    int64_t k = budget(n, percent, k_.min_k);
    if (k_.fixed && step.phase == Phase::Prefill)
      k = std::min(budget(step.first_position + step.n_queries, percent, k_.min_k), n);
    if (k_.own_tile_in_budget && unit.own_tile && k < n) k = std::max<int64_t>(0, k - unit.length);
    return k;
  }

  // An anchor: pooled scores of every unit and pool; its own sets (top
  // budget, checked against the fast ones later) and the candidates (top c x
  // budget) that refined reuse layers read.
  void select(const Problem& p, const Step& step, const std::vector<RefUnit>& units) {
    const Shape& s = p.shape;
    const int l = step.layer, g = s.group();
    own_.assign(units.size() * size_t(n_pools_), {});
    candidates_.assign(own_.size(), {});
    pending_.assign(own_.size(), {});
    const int64_t n_items = int64_t(own_.size());
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t item = 0; item < n_items; ++item) {
      const RefUnit& unit = units[size_t(item / n_pools_)];
      const int pool = int(item % n_pools_);
      const int64_t n = unit.n_candidates;
      const int64_t k = kept(step, unit);
      const int64_t c = std::min(n, k_.refine * k);
      if (k >= n) {
        own_[item] = candidates_[item] = all_keys(n);
        continue;
      }
      std::vector<double> pooled(size_t(n), 0.0);
      const int head_begin = k_.all_heads ? 0 : pool * g;
      const int head_end = k_.all_heads ? s.n_heads : head_begin + g;
      const bool sketched = k_.sketch && step.phase == Phase::Decode && !k_.dense.count(l);
      for (int64_t t = 0; t < unit.length; ++t)
        for (int head = head_begin; head < head_end; ++head) {
          const int64_t position = unit.start + t;
          if (k_.pre_softmax) {
            for (int64_t j = 0; j < n; ++j)
              pooled[j] += sketched ? sketched_score(p, l, position, head, j) : score(p, l, position, head, j);
          } else {
            const std::vector<double> row =
                sketched ? sketched_softmax_row(p, l, position, head) : softmax_row(p, l, position, head);
            for (int64_t j = 0; j < n; ++j) pooled[j] += row[j];
          }
        }
      own_[item] = top_k(pooled, k);
      candidates_[item] = c >= n ? all_keys(n) : top_k(pooled, c);
      pending_[item] = {std::move(pooled), k, l, unit.start, pool};
    }
  }

  // A refined reuse layer: every (unit, KV head) re-ranks its anchor's
  // candidates with its own rows, softmax normalised over the candidates,
  // and keeps its top budget; checked against the fast selection at once.
  void refine(const Problem& p, const Step& step, const std::vector<RefUnit>& units,
              const Strategy& fast, Stats& stats) {
    const Shape& s = p.shape;
    const int l = step.layer, g = s.group();
    refined_.assign(units.size() * size_t(s.n_kv_heads), {});
    for (size_t u = 0; u < units.size(); ++u)
      for (int h = 0; h < s.n_kv_heads; ++h) {
        const int pool = k_.all_heads ? 0 : k_.no_remap ? h : k_.head_map[l][h];
        const std::vector<int32_t>& candidates = candidates_[u * n_pools_ + pool];
        std::vector<int32_t>& set = refined_[u * s.n_kv_heads + h];
        const int64_t k = kept(step, units[u]);
        if (k >= int64_t(candidates.size())) {
          set = candidates;
          continue;
        }
        std::vector<double> pooled(candidates.size(), 0.0);
        for (int64_t t = 0; t < units[u].length; ++t)
          for (int head = h * g; head < h * g + g; ++head) {
            std::vector<double> row(candidates.size());
            double max = -std::numeric_limits<double>::infinity(), sum = 0;
            for (size_t i = 0; i < candidates.size(); ++i)
              max = std::max(max, row[i] = score(p, l, units[u].start + t, head, candidates[i]));
            for (double& x : row) sum += (x = std::exp(x - max));
            for (size_t i = 0; i < candidates.size(); ++i) pooled[i] += row[i] / sum;
          }
        // Compared in candidate positions (ascending, like the keys).
        std::vector<int32_t> fast_positions;
        for (int32_t key : fast_selection(fast, step, units[u], h * g)) {
          const auto at = std::lower_bound(candidates.begin(), candidates.end(), key);
          fast_positions.push_back(at != candidates.end() && *at == key ? int32_t(at - candidates.begin()) : -1);
        }
        const std::string where = fmt::format("refined layer {} unit at {} KV head {}", l, units[u].start, h);
        std::vector<int32_t> positions = top_k(pooled, k);
        if (check_selection(pooled, k, fast_positions, stats, where)) positions = fast_positions;
        for (int32_t i : positions) set.push_back(candidates[size_t(i)]);
      }
  }

  struct Held {
    int64_t selected_keys = 0, n_keys = 0;
    std::vector<std::vector<int32_t>> sets;  // [pool]: the selection
  };

  KascadeSettings k_;
  std::map<int, Held> held_;  // [layer]
  int n_pools_ = 1;
  // The current anchor's [unit][pool] sets: its own, and the refinement candidates.
  std::vector<std::vector<int32_t>> own_, candidates_;
  std::vector<Pending> pending_;
  std::vector<std::vector<int32_t>> refined_;  // the current layer's [unit][kv head]
};

class OracleRef : public Reference {
 public:
  OracleRef(double percent, int64_t min_k, int64_t tile, std::set<int> dense)
      : percent_(percent), min_k_(min_k), tile_(tile), dense_(std::move(dense)) {}

  void expected(const Problem& p, const Step& step, const Strategy& fast,
                std::vector<std::vector<int32_t>>& keys, Stats& stats) override {
    const Shape& s = p.shape;
    const int l = step.layer;
    const std::vector<RefUnit> units = ref_units(step, tile_);
    const int64_t n_items = int64_t(units.size()) * s.n_heads;
    std::vector<std::vector<double>> pooled(static_cast<size_t>(n_items));
    if (!dense_.count(l)) {
#pragma omp parallel for schedule(dynamic, 1)
      for (int64_t item = 0; item < n_items; ++item) {
        const RefUnit& unit = units[size_t(item / s.n_heads)];
        const int head = int(item % s.n_heads);
        const int64_t n = unit.n_candidates;
        if (budget(n, percent_, min_k_) >= n) continue;
        pooled[item].assign(size_t(n), 0.0);
        for (int64_t t = 0; t < unit.length; ++t) {
          const std::vector<double> row = softmax_row(p, l, unit.start + t, head);
          for (int64_t j = 0; j < n; ++j) pooled[item][j] += row[j];
        }
      }
    }
    for (int64_t item = 0; item < n_items; ++item) {
      const RefUnit& unit = units[size_t(item / s.n_heads)];
      const int head = int(item % s.n_heads);
      std::vector<int32_t> set = all_keys(unit.n_candidates);
      if (!pooled[item].empty()) {
        const int64_t k = budget(unit.n_candidates, percent_, min_k_);
        const std::vector<int32_t> fast_set = fast_selection(fast, step, unit, head);
        set = check_selection(pooled[item], k, fast_set, stats,
                              fmt::format("oracle layer {} unit at {} head {}", l, unit.start, head))
                  ? fast_set
                  : top_k(pooled[item], k);
      }
      for (int64_t t = 0; t < unit.length; ++t) {
        const int64_t q = unit.first_query + t, position = step.first_position + q;
        std::vector<int32_t>& out = keys[q * s.n_heads + head];
        if (dense_.count(l)) {
          out = all_keys(position + 1);
        } else {
          out = set;
          add_own_tile(unit, position, out);
        }
      }
    }
  }

 private:
  double percent_;
  int64_t min_k_, tile_;
  std::set<int> dense_;
};

class StreamingRef : public Reference {
 public:
  StreamingRef(double percent, int64_t min_k, int64_t sinks, double window_fraction)
      : percent_(percent), min_k_(min_k), sinks_(sinks), fraction_(window_fraction) {}

  void expected(const Problem& p, const Step& step, const Strategy&,
                std::vector<std::vector<int32_t>>& keys, Stats&) override {
    for (int64_t q = 0; q < step.n_queries; ++q) {
      const int64_t n = step.first_position + q + 1, k = budget(n, percent_, min_k_);
      std::vector<int32_t> set;
      for (int64_t j = 0; j < n; ++j) {
        // Sinks take at most half the budget: the window keeps the query's own key.
        const int64_t sinks = std::min(sinks_, fraction_ > 0 ? k : k / 2);
        const int64_t window = fraction_ > 0 ? int64_t(std::ceil(fraction_ * double(n))) : k - sinks;
        if (k >= n || j < sinks || j >= n - window) set.push_back(int32_t(j));
      }
      for (int head = 0; head < p.shape.n_heads; ++head) keys[q * p.shape.n_heads + head] = set;
    }
  }

 private:
  double percent_;
  int64_t min_k_, sinks_;
  double fraction_;
};

class QuestRef : public Reference {
 public:
  QuestRef(double percent, int64_t min_k, int64_t page, std::set<int> dense)
      : percent_(percent), min_k_(min_k), page_(page), dense_(std::move(dense)) {}

  void expected(const Problem& p, const Step& step, const Strategy& fast,
                std::vector<std::vector<int32_t>>& keys, Stats& stats) override {
    const Shape& s = p.shape;
    const int l = step.layer, d = p.d();
    for (int64_t q = 0; q < step.n_queries; ++q) {
      const int64_t position = step.first_position + q, n = position + 1;
      const int64_t k = budget(n, percent_, min_k_);
      for (int head = 0; head < s.n_heads; ++head) {
        std::vector<int32_t>& out = keys[q * s.n_heads + head];
        out = all_keys(n);
        if (step.phase == Phase::Prefill || dense_.count(l) || k >= n) continue;
        const int64_t n_pages = (n + page_ - 1) / page_;
        std::vector<double> scores(size_t(n_pages), 0.0);
        const float* query = p.query(l, position, head);
        for (int64_t page = 0; page < n_pages; ++page)
          for (int c = 0; c < d; ++c) {
            double hi = -1e300, lo = 1e300;
            for (int64_t j = page * page_; j < std::min(n, (page + 1) * page_); ++j) {
              hi = std::max(hi, double(p.key(l, head / s.group(), j)[c]));
              lo = std::min(lo, double(p.key(l, head / s.group(), j)[c]));
            }
            scores[page] += std::max(query[c] * hi, query[c] * lo);
          }
        std::vector<int32_t> fast_keys;
        fast.kept_keys(step, q, head, fast_keys);
        std::vector<int32_t> fast_pages;
        for (int32_t j : fast_keys)
          if (fast_pages.empty() || fast_pages.back() != j / page_) fast_pages.push_back(int32_t(j / page_));
        const int64_t n_selected = std::min(n_pages, (k + page_ - 1) / page_);
        const std::vector<int32_t> pages =
            check_selection(scores, n_selected, fast_pages, stats,
                            fmt::format("quest layer {} position {} head {}", l, position, head))
                ? fast_pages
                : top_k(scores, n_selected);
        out.clear();
        for (int32_t page : pages)
          for (int64_t j = page * page_; j < std::min(n, (page + 1) * page_); ++j)
            out.push_back(int32_t(j));
      }
    }
  }

 private:
  double percent_;
  int64_t min_k_, page_;
  std::set<int> dense_;
};

// OmniKV and LessIsMore: decode-only, one set per query shared by all heads,
// chosen at selection layers (which attend densely, so the fast choice is
// read back at the next sparse layer) and reused after them.
class SharedSetRef : public Reference {
 public:
  SharedSetRef(double percent, int64_t min_k, std::set<int> selecting, std::set<int> dense)
      : percent_(percent), min_k_(min_k), selecting_(std::move(selecting)), dense_(std::move(dense)) {}

  void expected(const Problem& p, const Step& step, const Strategy& fast,
                std::vector<std::vector<int32_t>>& keys, Stats& stats) override {
    const int l = step.layer;
    const bool decode = step.phase == Phase::Decode;
    const bool dense = !decode || dense_.count(l) || selecting_.count(l);
    if (decode && selecting_.count(l)) {
      choices_.assign(size_t(step.n_queries), {});
      for (int64_t q = 0; q < step.n_queries; ++q) {
        const int64_t position = step.first_position + q, n = position + 1;
        const int64_t k = budget(n, percent_, min_k_);
        Choice& choice = choices_[q];
        if (k >= n) {
          choice.set = all_keys(n);
          choice.checked = true;
        } else {
          choose(p, l, position, k, choice);
        }
      }
    }
    for (int64_t q = 0; q < step.n_queries; ++q) {
      const int64_t position = step.first_position + q;
      if (!dense && !choices_[q].checked) {  // first sparse layer after the selection
        Choice& choice = choices_[q];
        std::vector<int32_t> fast_set;
        fast.kept_keys(step, q, 0, fast_set);
        const std::string where = fmt::format("selection for position {} (seen at layer {})",
                                              position, l);
        if (!choice.scores.empty()) {
          if (check_selection(choice.scores, choice.k, fast_set, stats, where)) choice.set = fast_set;
        } else {
          ++stats.selections;
          EXPECT_EQ(fast_set, choice.set) << where;
        }
        choice.checked = true;
      }
      for (int head = 0; head < p.shape.n_heads; ++head)
        keys[q * p.shape.n_heads + head] = dense ? all_keys(position + 1) : choices_[q].set;
    }
  }

 protected:
  struct Choice {
    std::vector<int32_t> set;
    std::vector<double> scores;  // when set: set is their top k (near-ties allowed)
    int64_t k = 0;
    bool checked = false;
  };
  // Chooses the set of the decode query at `position` (k < position + 1 keys).
  virtual void choose(const Problem& p, int l, int64_t position, int64_t k, Choice& choice) = 0;

  double percent_;
  int64_t min_k_;
  std::set<int> selecting_, dense_;
  std::vector<Choice> choices_;
};

// OmniKV: top k by the max over all heads of the softmax probability.
class OmniKvRef : public SharedSetRef {
 public:
  using SharedSetRef::SharedSetRef;

 private:
  void choose(const Problem& p, int l, int64_t position, int64_t k, Choice& choice) override {
    choice.scores.assign(size_t(position + 1), 0.0);
    for (int head = 0; head < p.shape.n_heads; ++head) {
      const std::vector<double> row = softmax_row(p, l, position, head);
      for (size_t j = 0; j < row.size(); ++j) choice.scores[j] = std::max(choice.scores[j], row[j]);
    }
    choice.k = k;
    choice.set = top_k(choice.scores, k);
  }
};

// LessIsMore: sinks + recent window in a share of the budget; the rest filled
// by the union of per-head rankings, rank by rank, heads in order.
class LessIsMoreRef : public SharedSetRef {
 public:
  LessIsMoreRef(double percent, int64_t min_k, std::set<int> selecting, std::set<int> dense,
                int64_t sinks, double recent_fraction)
      : SharedSetRef(percent, min_k, std::move(selecting), std::move(dense)),
        sinks_(sinks),
        recent_fraction_(recent_fraction) {}

 private:
  void choose(const Problem& p, int l, int64_t position, int64_t k, Choice& choice) override {
    const int64_t n = position + 1;
    const int64_t middle = int64_t(std::floor((1.0 - recent_fraction_) * double(k)));
    const int64_t recent = k - middle;
    const int64_t sinks = recent > sinks_ ? sinks_ : 0;  // room left for the query's own key
    const int64_t lo = sinks, hi = n - (recent - sinks);
    std::set<int32_t> chosen;
    for (int64_t j = 0; j < sinks; ++j) chosen.insert(int32_t(j));
    for (int64_t j = hi; j < n; ++j) chosen.insert(int32_t(j));
    std::vector<std::vector<int32_t>> ranked;
    for (int head = 0; head < p.shape.n_heads; ++head) {
      const std::vector<double> row = softmax_row(p, l, position, head);
      std::vector<int32_t> order;
      for (int64_t j = lo; j < hi; ++j) order.push_back(int32_t(j));
      std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
      ranked.push_back(order);
    }
    int64_t added = 0;
    for (int64_t rank = 0; rank < hi - lo && added < middle; ++rank)
      for (int head = 0; head < p.shape.n_heads && added < middle; ++head)
        if (chosen.insert(ranked[head][rank]).second) ++added;
    choice.set.assign(chosen.begin(), chosen.end());
  }

  int64_t sinks_;
  double recent_fraction_;
};

}  // namespace kascade::attention::reference
