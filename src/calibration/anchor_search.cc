// Anchor selection and head maps from calibration statistics (see anchor_search.h).
#include "calibration/anchor_search.h"

#include <limits>

#include "core/error.h"

namespace kascade::calibration {

HeadSimilarity::HeadSimilarity(int n_layers, int n_kv_heads)
    : n_layers_(n_layers),
      n_kv_heads_(n_kv_heads),
      values_(size_t(n_layers) * n_kv_heads * n_layers * n_kv_heads, 0.0) {}

int HeadSimilarity::best_source_head(int from_layer, int to_layer, int to_head) const {
  int best = 0;
  for (int h = 1; h < n_kv_heads_; ++h)
    if (at(from_layer, h, to_layer, to_head) > at(from_layer, best, to_layer, to_head)) best = h;
  return best;
}

double HeadSimilarity::layer_similarity(int from_layer, int to_layer) const {
  double sum = 0;
  for (int h = 0; h < n_kv_heads_; ++h)
    sum += at(from_layer, best_source_head(from_layer, to_layer, h), to_layer, h);
  return sum / n_kv_heads_;
}

std::vector<double> layer_similarity_matrix(const HeadSimilarity& similarity) {
  const int n = similarity.n_layers();
  std::vector<double> sim(size_t(n) * n, 0.0);
  for (int a = 0; a < n; ++a)
    for (int b = a; b < n; ++b) sim[size_t(a) * n + b] = similarity.layer_similarity(a, b);
  return sim;
}

namespace {

void check_problem(std::span<const double> sim, std::span<const double> weights) {
  const size_t n = weights.size();
  if (n == 0) fail("anchor search needs at least one layer");
  if (sim.size() != n * n)
    fail("layer similarity matrix has {} entries, expected {} for {} layers", sim.size(), n * n, n);
}

}  // namespace

std::vector<int> anchor_of_each_layer(int n_layers, std::span<const int> anchors) {
  if (anchors.empty() || anchors[0] != 0) fail("the first anchor must be layer 0");
  std::vector<int> owner(static_cast<size_t>(n_layers));
  size_t next = 0;
  for (int j = 0; j < n_layers; ++j) {
    while (next < anchors.size() && anchors[next] <= j) {
      if (next > 0 && anchors[next] <= anchors[next - 1]) fail("anchors must be strictly ascending");
      ++next;
    }
    owner[size_t(j)] = anchors[next - 1];
  }
  if (next != anchors.size()) fail("anchor layer {} is out of range for {} layers", anchors[next], n_layers);
  return owner;
}

double anchor_objective(std::span<const double> sim, std::span<const double> weights,
                        std::span<const int> anchors) {
  check_problem(sim, weights);
  const int n = int(weights.size());
  const std::vector<int> owner = anchor_of_each_layer(n, anchors);
  double total = 0;
  for (int j = 0; j < n; ++j) total += weights[size_t(j)] * sim[size_t(owner[size_t(j)]) * n + j];
  return total;
}

namespace {

constexpr double kUnreachable = -std::numeric_limits<double>::infinity();

// The dynamic programme of choose_anchors over segments whose reuse layers
// all have sim(a, j) >= floor (the others are unreachable); empty when no
// anchor set of this size qualifies.
std::vector<int> best_anchors(std::span<const double> sim, std::span<const double> weights, int n_anchors,
                              double floor) {
  const int n = int(weights.size());
  // segment[a][e] = sum_{j=a..e} w_j sim(a, j): the value of anchor a covering layers a..e.
  std::vector<double> segment(size_t(n) * n, kUnreachable);
  for (int a = 0; a < n; ++a) {
    double running = 0;
    for (int e = a; e < n; ++e) {
      if (e > a && !(sim[size_t(a) * n + e] >= floor)) break;  // e and every later layer need another anchor
      running += weights[size_t(e)] * sim[size_t(a) * n + e];
      segment[size_t(a) * n + e] = running;
    }
  }

  // best[m][e]: the best value of layers 0..e covered by m + 1 anchors, the
  // last segment ending at e; start[m][e]: where that last segment starts.
  std::vector<double> best(size_t(n_anchors) * n, kUnreachable);
  std::vector<int> start(size_t(n_anchors) * n, 0);
  for (int e = 0; e < n; ++e) best[size_t(e)] = segment[size_t(e)];  // anchor 0 covers 0..e
  for (int m = 1; m < n_anchors; ++m) {
    for (int e = m; e < n; ++e) {
      double value = kUnreachable;
      int argmax = m;
      for (int a = m; a <= e; ++a) {
        const double candidate = best[size_t(m - 1) * n + (a - 1)] + segment[size_t(a) * n + e];
        if (candidate > value) {
          value = candidate;
          argmax = a;
        }
      }
      best[size_t(m) * n + e] = value;
      start[size_t(m) * n + e] = argmax;
    }
  }
  if (best[size_t(n_anchors - 1) * n + (n - 1)] == kUnreachable) return {};

  std::vector<int> anchors(static_cast<size_t>(n_anchors));
  int end = n - 1;
  for (int m = n_anchors - 1; m >= 1; --m) {
    anchors[size_t(m)] = start[size_t(m) * n + end];
    end = anchors[size_t(m)] - 1;
  }
  anchors[0] = 0;
  return anchors;
}

}  // namespace

std::vector<int> choose_anchors(std::span<const double> sim, std::span<const double> weights,
                                int n_anchors) {
  check_problem(sim, weights);
  const int n = int(weights.size());
  if (n_anchors < 1 || n_anchors > n) fail("cannot choose {} anchors among {} layers", n_anchors, n);
  return best_anchors(sim, weights, n_anchors, kUnreachable);
}

std::vector<int> fewest_anchors_above(std::span<const double> sim, std::span<const double> weights, double floor) {
  check_problem(sim, weights);
  const int n = int(weights.size());
  for (int m = 1; m < n; ++m)
    if (std::vector<int> anchors = best_anchors(sim, weights, m, floor); !anchors.empty()) return anchors;
  std::vector<int> every_layer(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) every_layer[size_t(j)] = j;
  return every_layer;
}

std::vector<std::vector<int>> derive_head_map(const HeadSimilarity& similarity,
                                              std::span<const int> anchors) {
  const int n = similarity.n_layers();
  const std::vector<int> owner = anchor_of_each_layer(n, anchors);
  std::vector<std::vector<int>> head_map(size_t(n), std::vector<int>(size_t(similarity.n_kv_heads())));
  for (int j = 0; j < n; ++j)
    for (int h = 0; h < similarity.n_kv_heads(); ++h)
      head_map[size_t(j)][size_t(h)] =
          owner[size_t(j)] == j ? h : similarity.best_source_head(owner[size_t(j)], j, h);
  return head_map;
}

}  // namespace kascade::calibration
