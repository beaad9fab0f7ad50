// Choosing Kascade anchor layers and head maps from calibration statistics
// (KASCADE.md, "Calibration"): the head-pair similarity S(a,h'->b,h), the
// layer similarity with remapping sim(a,b) = mean_h max_h' S(a,h'->b,h), the
// exact dynamic programme over contiguous anchor segments, and the head map
// each reuse layer reads through.
#pragma once

#include <span>
#include <vector>

namespace kascade::calibration {

// S(a, h' -> b, h) for layers a <= b: how much of layer b's (KV head h)
// attention mass the index set of layer a (KV head h') keeps, relative to b's
// own set. Entries with a > b are unused and stay 0.
class HeadSimilarity {
 public:
  HeadSimilarity() = default;
  HeadSimilarity(int n_layers, int n_kv_heads);

  int n_layers() const { return n_layers_; }
  int n_kv_heads() const { return n_kv_heads_; }

  double& at(int from_layer, int from_head, int to_layer, int to_head) {
    return values_[index(from_layer, from_head, to_layer, to_head)];
  }
  double at(int from_layer, int from_head, int to_layer, int to_head) const {
    return values_[index(from_layer, from_head, to_layer, to_head)];
  }
  // Row-major [from_layer][from_head][to_layer][to_head].
  std::span<const double> values() const { return values_; }
  std::span<double> values() { return values_; }

  // argmax_h' S(from_layer, h' -> to_layer, to_head), ties to the lower h'.
  int best_source_head(int from_layer, int to_layer, int to_head) const;
  // sim(a, b) = mean over b's heads h of max_h' S(a, h' -> b, h).
  double layer_similarity(int from_layer, int to_layer) const;

 private:
  size_t index(int a, int h_from, int b, int h_to) const {
    return ((size_t(a) * n_kv_heads_ + h_from) * n_layers_ + b) * n_kv_heads_ + h_to;
  }

  int n_layers_ = 0;
  int n_kv_heads_ = 0;
  std::vector<double> values_;
};

// sim(a, b) for all layers, row-major [a][b]; entries with a > b are 0.
std::vector<double> layer_similarity_matrix(const HeadSimilarity& similarity);

// The objective sum_j w_j * sim(anchor(j), j), anchor(j) the last anchor <= j.
// anchors ascending, anchors[0] == 0; sim row-major [a][b] over n = w.size() layers.
double anchor_objective(std::span<const double> sim, std::span<const double> weights,
                        std::span<const int> anchors);

// The anchor set of n_anchors layers (layer 0 first) that maximises
// anchor_objective, by a dynamic programme over the last segment [a, e]:
//   best[m][e] = max_a best[m-1][a-1] + sum_{j=a..e} w_j sim(a, j),
// O(n_anchors * L^2). Among equal scores the later segments start as early as
// possible (deterministic). Requires 1 <= n_anchors <= L.
std::vector<int> choose_anchors(std::span<const double> sim, std::span<const double> weights,
                                int n_anchors);

// Reuse only where the statistics say it keeps enough: the fewest anchors
// such that every reuse layer j keeps at least `floor` of its own top-k mass
// on its anchor's sets, sim(anchor(j), j) >= floor; among the qualifying
// sets of that size, the largest objective (ties as choose_anchors). Every
// layer an anchor always qualifies.
std::vector<int> fewest_anchors_above(std::span<const double> sim, std::span<const double> weights, double floor);

// head_map[j][h] = argmax_h' S(anchor(j), h' -> j, h) (ties to the lower h'),
// the identity on anchor layers.
std::vector<std::vector<int>> derive_head_map(const HeadSimilarity& similarity,
                                              std::span<const int> anchors);

// The anchor each layer reuses: the last anchor <= j.
std::vector<int> anchor_of_each_layer(int n_layers, std::span<const int> anchors);

}  // namespace kascade::calibration
