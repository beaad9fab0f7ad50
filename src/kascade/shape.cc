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

}  // namespace kascade
