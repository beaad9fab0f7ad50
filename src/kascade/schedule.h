// The layer schedule of Kascade (KASCADE.md, "Anchor, reuse, dense layers"),
// built once from a profile: which layers are anchors, which attend densely,
// which anchor each reuse layer reads and through which head map. The CPU
// strategy and the GPU backend both run from it.
#pragma once

#include <vector>

#include "kascade/profile.h"
#include "kascade/shape.h"

namespace kascade {

struct ScheduleOptions {
  std::vector<int> dense_layers{0};  // attend densely (an anchor among them still selects)
  bool all_anchors = false;          // every layer an anchor (no reuse)
  bool all_heads_pooled = false;     // one selection pool shared by every KV head
  bool no_remap = false;             // reuse KV head h reads anchor pool h
};

class Schedule {
 public:
  // Throws Error unless the profile fits the shape and the dense layers lie in it.
  Schedule(const KascadeProfile& profile, const Shape& shape, const ScheduleOptions& options = {});

  int n_layers() const { return int(anchor_of_.size()); }
  bool is_anchor(int layer) const { return anchor_of_[size_t(layer)] == layer; }
  // The layer's output is dense attention (an anchor among these still selects).
  bool is_dense(int layer) const { return dense_[size_t(layer)]; }
  // The most recent anchor at or before the layer (itself on anchors).
  int anchor_of(int layer) const { return anchor_of_[size_t(layer)]; }
  // Selection pools an anchor fills: one per KV head, or one for all.
  int n_pools() const { return n_pools_; }
  // The pool of its anchor that KV head h of the layer reads.
  int pool(int layer, int kv_head) const { return pools_[size_t(layer)][size_t(kv_head)]; }
  // pool(layer, h) for every h, as the GPU kernels take it.
  const std::vector<int>& pools(int layer) const { return pools_[size_t(layer)]; }

 private:
  std::vector<int> anchor_of_;
  std::vector<bool> dense_;
  std::vector<std::vector<int>> pools_;  // [layer][kv head]
  int n_pools_ = 0;
};

}  // namespace kascade
