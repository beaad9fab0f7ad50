// The one online-softmax state every kernel shares (dense, anchor, reuse,
// split-KV merges). Scores are kept in log2 units (q.k * log2(e)/sqrt(d)) so
// that exp2 is a single instruction; a state is (max, sum of 2^(s - max)),
// and an output accumulator in the same scale travels beside it. `max` may
// trail the true maximum (the prefill passes move it only on a row's first
// chunk and when a chunk's sum passes 2^15): every use holds for any
// reference.
#pragma once

#include <cmath>

namespace kascade::cuda {

struct SoftmaxState {
  float max = -INFINITY;
  float sum = 0.f;

  // 2^max with an empty state (max = -inf) contributing nothing and never NaN.
  __device__ __forceinline__ static float finite_max(float m) { return m == -INFINITY ? 0.f : m; }

  // Log2-sum-exp of the row so far (-inf when empty).
  __device__ __forceinline__ float log2_sum_exp() const {
    return sum > 0.f ? max + __log2f(sum) : -INFINITY;
  }

  // Folds in another state; returns the factors by which this state's and
  // the other's accumulators must be multiplied.
  __device__ __forceinline__ void merge(const SoftmaxState& other, float& self_scale, float& other_scale) {
    const float merged_max = fmaxf(max, other.max);
    const float reference = finite_max(merged_max);
    self_scale = exp2f(max - reference);
    other_scale = exp2f(other.max - reference);
    sum = sum * self_scale + other.sum * other_scale;
    max = merged_max;
  }
};

// Combines normalised partial outputs o_s with log2-sum-exps lse_s (split-KV
// partials, per-warp partials): weights 2^(lse_s - max lse).
struct PartialMerge {
  float max_lse = -INFINITY;
  __device__ __forceinline__ float weight(float lse) const {
    return exp2f(lse - SoftmaxState::finite_max(max_lse));
  }
};

}  // namespace kascade::cuda
