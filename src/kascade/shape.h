// The attention geometry Kascade works over: the layers the strategy
// attends (a sliding-window model's global layers only), and the heads.
#pragma once

#include <span>
#include <string_view>

namespace kascade {

struct Shape {
  int n_layers = 0;
  int n_heads = 0;     // H query heads
  int n_kv_heads = 0;  // G key/value heads
  int head_dim = 0;    // d
  int group() const { return n_heads / n_kv_heads; }  // g = H / G
};

// Throws Error unless the shape is one the attention code takes: positive
// counts, H a multiple of G, d a multiple of 8 in [8, 512].
void check_shape(const Shape& shape);

// Throws Error unless `layers` ascend strictly inside [0, n_layers); the
// message names the list `name` and the offending entry.
void check_layer_list(std::span<const int> layers, std::string_view name, int n_layers);

}  // namespace kascade
