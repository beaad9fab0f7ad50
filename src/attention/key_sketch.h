// Kascade's cheap scorer (ours, beyond the paper): a 4-bit copy of one
// layer's keys that a selecting layer ranks keys from at decode, reading a
// quarter of the fp16 key bytes (0.28 with its ranges), before it attends
// its top budget exactly.
//
// Keys are sketched in blocks of kSketchBlock consecutive positions per KV
// head. For each channel c of a block: lo_c = the block's smallest value,
// step_c = (largest - lo_c) / 15 (both rounded to fp16), and each key's code
// round((k_c - lo_c) / step_c) in [0, 15] (0 where step_c is 0). The key the
// scorer sees is lo_c + code * step_c. Quantizing per channel, not per key,
// is what keeps the ranking: models put large, slowly varying values in a few
// key channels (Qwen2.5's biased low-frequency RoPE pairs), which a per-key
// scale would spread over every channel (measured on Qwen2.5-Coder-1.5B at
// 3K tokens: per-channel blocks keep 99.96 % of the exact top-10 % pooled
// mass, per-key 4-bit rows 96.2 %, 4 % on layer 0).
//
// The CPU scores a block in integers: per query row q and block it rounds
// the weights w_c = q_c * step_c to int8 (scale = max_c |w_c| / 127) and
// sums code * weight exactly, so score = q.lo + scale * sum_c code_c w8_c
// (sketch_weights); u8 x s8 products run at four times the rate of fp32
// FMAs. The GPU splits the score the same way on its tensor cores: per block
// the weights q_c * step_c in the cache's element type and q.lo in fp32, the
// codes exact as B fragments (cuda/decode.cu, SketchScorer); both are checked
// against the dequantized keys' dot products.
//
// Only complete blocks are sketched: a decode step with N keys scores keys
// [0, sketched_end(N)) from the sketch and the rest, the block that holds the
// newest key, exactly. The GPU keeps the same sketch beside its KV pages
// (gpu/kv_pool.h) and its scorer follows the same rule.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "attention/kernels.h"

namespace kascade::attention {

inline constexpr int64_t kSketchBlock = 64;

// Keys [0, sketched_end(n)) of a step that sees n keys come from the sketch.
inline int64_t sketched_end(int64_t n_keys) {
  return n_keys > 0 ? (n_keys - 1) / kSketchBlock * kSketchBlock : 0;
}

// One block of one KV head: lo[d], step[d] (fp16 values as floats),
// codes[kSketchBlock][d / 2] (channel 2i in the low nibble of byte i).
struct SketchBlock {
  const float* lo = nullptr;
  const float* step = nullptr;
  const uint8_t* codes = nullptr;
};

// Sketches the kSketchBlock keys at keys.row(0 .. kSketchBlock - 1).
template <typename T>
void sketch_block(kernels::Rows<T> keys, int d, float* lo, float* step, uint8_t* codes);

// The sketched key of `position` (block-relative) as floats: lo + code * step.
void dequantize_sketch_row(const SketchBlock& block, int d, int64_t row, float* out);

// One query row's integer weights for one block: score_j = bias + scale *
// sum_c code_jc * weights[c]. Writes weights[0, round_up(d, 8)), zero past d.
struct SketchWeights {
  float bias = 0, scale = 0;
};
SketchWeights sketch_weights(const float* q, const float* lo, const float* step, int d, int8_t* weights);

// The scorer's instruction set: AVX2 everywhere, AVX-512 VNNI where the CPU
// has it (the same int32 sums, the same output bits).
enum class SketchIsa { Avx2, Avx512Vnni };
SketchIsa best_sketch_isa();

// The sketch of one layer's keys, grown as the sequence's blocks complete.
// Its codes are kept in the CPU scorer's layout: per block, runs of 16 keys;
// per run, groups of 8 channels; per group the run's 16 keys x 4 bytes (byte
// i of a key: channel 8m + i in the low nibble, 8m + 4 + i in the high one),
// so 16 (or 8) keys of a group are one load whose nibbles meet 4 consecutive
// weights, and a run is read front to back.
class KeySketch {
 public:
  KeySketch() = default;
  KeySketch(int n_kv_heads, int head_dim) : n_kv_heads_(n_kv_heads), d_(head_dim) {}

  // Sketches the complete blocks of keys [0, sketched_end(n_keys)) not yet sketched.
  template <typename T>
  void extend(std::span<const kernels::Rows<T>> keys, int64_t n_keys);
  int64_t sketched() const { return n_blocks_ * kSketchBlock; }
  void clear() { n_blocks_ = 0; }

  // lo and step of block b (codes is null: their layout is the scorer's).
  SketchBlock params(int kv_head, int64_t b) const;
  // The sketched key at `position` (< sketched()) as floats: lo + code * step.
  void dequantize(int kv_head, int64_t position, float* out) const;
  // Raw scores (log2 units, as kernels::dot_rows) of the packed query rows q
  // [n_rows][d] against keys [first, first + count) of KV head h, all
  // sketched, by the integer rule above (sketch_weights per row and block).
  void dot_rows(const float* q, int64_t n_rows, int h, int64_t first, int64_t count, float* s, int64_t lds,
                SketchIsa isa = best_sketch_isa()) const;

 private:
  int n_kv_heads_ = 0;
  int d_ = 0;
  int64_t n_blocks_ = 0;
  int groups() const { return (d_ + 7) / 8; }
  // [kv head][block][d] each, and [kv head][block][run][groups()][16][4].
  std::vector<std::vector<float>> lo_, step_;
  std::vector<std::vector<uint8_t>> codes_;
};

}  // namespace kascade::attention
