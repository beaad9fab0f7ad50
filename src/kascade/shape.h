// The attention geometry Kascade works over: the layers the strategy
// attends (a sliding-window model's global layers only), and the heads.
#pragma once

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

}  // namespace kascade
