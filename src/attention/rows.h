// The shapes every attention loop works on: the query rows of one KV group
// (a prefill tile or one decode position), where their outputs go, one KV
// head's key/value rows, how scores pool, and the exact top-k selection.
#pragma once

#include <cstdint>

namespace kascade::attention {

// The indices of the k largest of scores[0, n), written ascending into
// out_indices_ascending[0, k). Ties go to the lower index, so the result is
// unique. Linear time (radix selection on the float bits). Requires 0 <= k <= n
// and no NaN in scores; -0.0 counts as equal to +0.0.
void select_top_k(const float* scores, int64_t n, int64_t k, int32_t* out_indices_ascending);

// The query rows of one KV group for a tile of consecutive positions (prefill)
// or one position (decode).
struct GroupQueries {
  const float* data = nullptr;   // row (t, r) at data + t * position_stride + r * head_stride
  int64_t n_positions = 0;       // T for a prefill tile (fewer for the last), 1 for decode
  int group = 1;                 // g query heads that share the KV head
  int64_t position_stride = 0;   // elements between consecutive positions
  int64_t head_stride = 0;       // elements between the group's consecutive heads
  int64_t first_position = 0;    // absolute position of t = 0
  int64_t n_rows() const { return n_positions * group; }
  const float* row(int64_t t, int r) const { return data + t * position_stride + r * head_stride; }
};

// Where the outputs of a GroupQueries go (same row layout).
struct GroupOutput {
  float* data = nullptr;
  int64_t position_stride = 0;
  int64_t head_stride = 0;
  float* row(int64_t t, int r) const { return data + t * position_stride + r * head_stride; }
};

// Key/value rows of one KV head: key j at keys + j * stride (same for values).
struct KeyValueRows {
  const float* keys = nullptr;
  const float* values = nullptr;
  int64_t stride = 0;
};

enum class Pooling {
  PostSoftmax,  // sum of softmax probabilities (the method)
  PreSoftmax,   // sum of raw scores q.k / sqrt(d) (ablation)
};

}  // namespace kascade::attention
