#include "kascade/shape.h"

#include "core/error.h"

namespace kascade {

void check_shape(const Shape& shape) {
  if (shape.n_layers <= 0) fail("attention shape: n_layers {} must be positive", shape.n_layers);
  if (shape.n_heads <= 0 || shape.n_kv_heads <= 0)
    fail("attention shape: head counts {} / {} must be positive", shape.n_heads, shape.n_kv_heads);
  if (shape.n_heads % shape.n_kv_heads != 0)
    fail("attention shape: {} query heads are not a multiple of {} KV heads", shape.n_heads, shape.n_kv_heads);
  if (shape.head_dim < 8 || shape.head_dim > 512 || shape.head_dim % 8 != 0)
    fail("attention shape: head_dim {} must be a multiple of 8 in [8, 512]", shape.head_dim);
}

void check_layer_list(std::span<const int> layers, std::string_view name, int n_layers) {
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] < 0 || layers[i] >= n_layers) fail("{}[{}] = {} outside [0, {})", name, i, layers[i], n_layers);
    if (i > 0 && layers[i] <= layers[i - 1])
      fail("{} must be strictly ascending ({}[{}] = {} after {})", name, name, i, layers[i], layers[i - 1]);
  }
}

}  // namespace kascade
