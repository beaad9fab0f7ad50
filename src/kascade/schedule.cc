#include "kascade/schedule.h"

#include <algorithm>

#include "core/error.h"

namespace kascade {

Schedule::Schedule(const KascadeProfile& profile, const Shape& shape, const ScheduleOptions& options)
    : anchor_of_(size_t(shape.n_layers)),
      dense_(size_t(shape.n_layers), false),
      pools_(size_t(shape.n_layers), std::vector<int>(size_t(shape.n_kv_heads))),
      n_pools_(options.all_heads_pooled ? 1 : shape.n_kv_heads) {
  validate_profile(profile, shape);
  for (const int layer : options.dense_layers) {
    if (layer < 0 || layer >= shape.n_layers) fail("dense layer {} outside [0, {})", layer, shape.n_layers);
    dense_[size_t(layer)] = true;
  }
  for (int j = 0, a = 0; j < shape.n_layers; ++j) {
    if (options.all_anchors || std::binary_search(profile.anchors.begin(), profile.anchors.end(), j)) a = j;
    anchor_of_[size_t(j)] = a;
    for (int h = 0; h < shape.n_kv_heads; ++h)
      pools_[size_t(j)][size_t(h)] = options.all_heads_pooled            ? 0
                                     : a == j || options.no_remap         ? h
                                                                          : profile.head_map[size_t(j)][size_t(h)];
  }
}

}  // namespace kascade
