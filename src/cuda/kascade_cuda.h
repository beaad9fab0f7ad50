// Host API of the CUDA attention kernels: dense and Kascade (anchor, reuse)
// attention for decode and prefill, and an exact top-k, on Hopper (sm_90a).
//
// Semantics are KASCADE.md's and the CPU reference's (attention/kascade_ops.h).
// All pointers are device pointers unless a field says otherwise; every call
// is asynchronous on the given stream. Arguments are validated on the host and
// bad ones raise kascade::Error naming the field.
//
// Layouts (elements of `dtype` unless noted):
//   KV cache   keys/values [batch][n_kv_heads][capacity][head_dim], or paged
//              (decode; see AttentionArgs::page_table)
//   decode     queries/output [batch][n_heads][head_dim]
//   prefill    queries/output [batch][rows][n_heads][head_dim]
//   LSE        fp32, natural log: decode [batch][n_heads],
//              prefill [batch][n_heads][rows]
//   where rows = max_seq_len - query_start (max_seq_len when not chunked).
// Sequences in a batch may have different lengths (seq_lens, device int32).
// Decode: the query of sequence b sees keys [0, seq_lens[b]). Prefill: query
// q sees keys [0, q]. A prefill call computes the queries at positions
// [query_start, seq_lens[b]) (AttentionArgs::query_start; 0: the whole
// prompt), row i of queries, output and LSE being position query_start + i;
// the cache holds the keys and values of [0, seq_lens[b]), the earlier
// chunks' and the call's own. Rows of positions >= seq_lens[b] are not
// written (a sequence with seq_lens[b] <= query_start has none).
//
// Chunked prefill: a prompt prefilled as chunks [0, c1), [c1, c2), ... (the
// call of chunk [c, e) with query_start = c and seq_lens[b] = min(length, e),
// max_seq_len their maximum) attends exactly the keys of the one-pass call:
// dense rows [0, q]; anchors the same selection (each tile's pooled scores
// over its whole prefix, with the rows' LSE over [0, q]); reuse the anchor's
// sets. Kascade calls need query_start to be a multiple of the tile, and
// their index sets need only cover the chunk's tiles (prefill_index_layout
// with query_start); dense calls take any query_start. When every chunk
// boundary c1, c2, ... is a multiple of prefill_exact_multiple() (and of the
// tile), every output, LSE and index set of the chunks is bit-equal to the
// one-pass call's rows. Otherwise the causal passes (dense attention, the
// anchor's LSE pass) group the rows into blocks differently, which changes
// their rounding: results agree to rounding, and an anchor may pick another
// key at a near-tie of a k-th pooled score. A reuse pass (blocks of a tile)
// is bit-equal at any tile multiple, given the same sets.
//
// Budget: budget(N) = min(N, max(min_k, floor(percent * N / 100))), exactly as
// the CPU reference computes it; the kernels do not round it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kascade::cuda {

enum class DType { F16, BF16 };

struct Budget {
  double percent = 10.0;
  int64_t min_keys = 128;
};

// The number of keys selected out of n visible ones (host side; the kernels
// evaluate the same expression on the device).
int64_t budget_keys(const Budget& budget, int64_t n);

// A layer's 4-bit key sketch (attention/key_sketch.h: per block of 64
// positions and channel lo = fp16(min), step = fp16((max - lo) / 15), codes
// round((k - lo) / step), channel 2i in the low nibble of byte i), laid out
// like the cache: contiguous, codes [batch][n_kv_heads][capacity][head_dim / 2]
// and params [batch][n_kv_heads][capacity / 64][2][head_dim] fp16 (lo, then
// step); paged, codes [page][n_kv_heads][page_size][head_dim / 2] and params
// [page][n_kv_heads][page_size / 64][2][head_dim]. Needs capacity
// (contiguous) or page_size (paged) a multiple of 64.
struct KeySketch {
  uint8_t* codes = nullptr;
  uint16_t* params = nullptr;
};

// Geometry and tensors of one attention layer call.
struct AttentionArgs {
  DType dtype = DType::F16;
  int batch = 0;
  int n_heads = 0;     // H query heads
  int n_kv_heads = 0;  // G key/value heads (H % G == 0)
  int head_dim = 0;    // 64, 128 or 256
  const void* queries = nullptr;
  const void* keys = nullptr;
  const void* values = nullptr;
  int64_t capacity = 0;         // positions allocated per (sequence, KV head) in the cache
  const int* seq_lens = nullptr;  // [batch], each in [1, capacity]
  int max_seq_len = 0;          // host copy of max(seq_lens): sizes grids and workspaces
  void* output = nullptr;
  // Paged KV cache (decode only; null: the contiguous layout above). keys and
  // values then point at a pool of pages [page][n_kv_heads][page_size][head_dim],
  // and position p of sequence b lives in page page_table[b * page_table_stride
  // + p / page_size]; capacity is page_table_stride * page_size. Index sets
  // stay logical positions.
  const int* page_table = nullptr;
  int page_size = 0;  // a power of two, >= 16
  int64_t page_table_stride = 0;
  // Prefill only (decode takes 0): the position of the call's first query row,
  // in [0, max_seq_len), the same for the whole batch (chunked prefill; see
  // the header comment). Kascade prefill: a multiple of the index sets' tile.
  int query_start = 0;
  // Decode anchors (anchor_decode without dense output): when set, keys
  // [0, (seq_lens[b] - 1) / 64 * 64) are scored from this sketch of the keys
  // (written by sketch_keys), the rest from the keys.
  KeySketch key_sketch;
};

// Decode index sets: [batch][n_kv_heads][max_keys] int32, ascending; the
// sets of sequence b hold counts[b] = budget(seq_lens[b]) indices each.
struct DecodeIndexSets {
  int* indices = nullptr;
  int* counts = nullptr;  // [batch]
  int64_t max_keys = 0;
};

// Prefill index sets, per (sequence, KV head, query tile t): budget(t*tile)
// ascending indices in [0, t*tile), stored at indices[(b*G + h)*per_head +
// offsets[t - first_tile]]. They cover the tiles [first_tile, n_tiles), n_tiles
// = ceil(max_seq_len / tile); a call writes or reads those of its queries,
// [query_start / tile, n_tiles), so first_tile must be at most query_start /
// tile. Build the layout with prefill_index_layout.
struct PrefillIndexSets {
  int* indices = nullptr;
  const int64_t* tile_offsets = nullptr;  // device copy of PrefillIndexLayout::offsets
  int64_t per_head = 0;
  int tile = 32;
  int first_tile = 0;  // PrefillIndexLayout::first_tile
};

struct PrefillIndexLayout {
  int first_tile = 0;  // query_start / tile
  // [n_tiles - first_tile + 1]: offsets[i] = sum of budget(t*tile) over the
  // tiles first_tile <= t < first_tile + i (for a chunk: the differences of
  // the whole prompt's offsets from its first tile on).
  std::vector<int64_t> offsets;
  int64_t per_head() const { return offsets.back(); }
};
// The layout of the tiles [query_start / tile, ceil(max_seq_len / tile)) of
// a call's queries (its max_seq_len and query_start): a whole prompt's with
// query_start 0, a chunk's otherwise. query_start must be a multiple of tile
// in [0, max_seq_len).
PrefillIndexLayout prefill_index_layout(int max_seq_len, int tile, const Budget& budget, int query_start = 0);

// The query blocks of the causal prefill passes (dense attention, the
// anchor's LSE pass) for g = n_heads / n_kv_heads: floor(128 / g) and, up to
// head_dim 128, floor(256 / g) queries; this returns their least common
// multiple (256 / g for g a power of two up to 128, e.g. 64 at g = 4, but
// 3570 at g = 3). Chunks whose boundaries are all multiples of it (and of
// the tile) reproduce the one-pass call bit for bit (see the header comment).
int prefill_exact_multiple(int n_heads, int n_kv_heads, int head_dim);

// Scratch memory owned by the caller, grown on demand (growth synchronises
// the device; run a call once ahead to size it). high_water() reports the
// peak bytes held.
class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace();
  // A region of at least `bytes`, 256-byte aligned, valid until the next reserve().
  void* reserve(size_t bytes);
  size_t high_water() const { return capacity_; }

 private:
  void* data_ = nullptr;
  size_t capacity_ = 0;
};

// Dense decode (split-KV flash decoding). Writes `lse` when non-null.
void dense_decode(const AttentionArgs& args, float* lse, Workspace& workspace, cudaStream_t stream);

// Anchor decode: pooled post-softmax scores over the g heads of each KV
// head, exact top budget(N) per KV head into `selection`, then attention over
// the selected keys. With dense_output (layer 0) the output is dense
// attention instead and the scores come from the same pass.
void anchor_decode(const AttentionArgs& args, const Budget& budget, bool dense_output,
                   const DecodeIndexSets& selection, Workspace& workspace, cudaStream_t stream);

// Writes the sketch of the blocks the call's last new_keys positions
// complete (for each sequence b, blocks [(seq_lens[b] - new_keys) / 64,
// seq_lens[b] / 64)), for n_layers layers at once: layer l's keys are at
// layer_keys[l] and its sketch is layer_sketches[l] (device arrays; args.keys
// and the sketch in args are not read). The layout (contiguous or paged),
// geometry and seq_lens are the args'. Bit-equal to the CPU's sketch_block.
void sketch_keys(const AttentionArgs& args, int new_keys, const void* const* layer_keys,
                 const KeySketch* layer_sketches, int n_layers, cudaStream_t stream);

// Reuse decode: attention over the anchor's keys; KV head h reads the set of
// anchor head head_map[h] (device [n_kv_heads]; null means identity).
void reuse_decode(const AttentionArgs& args, const DecodeIndexSets& anchor, const int* head_map,
                  Workspace& workspace, cudaStream_t stream);

// Held decode (AttentionOptions::select_every): attention of each (sequence
// b, KV head h) over attention/kascade_ops.h's held_keys: h's set in `held`
// (an anchor_decode selection, its counts per sequence), made when the
// sequence had selected_lens[b] keys (device [batch]), that set shifted by
// the seq_lens[b] - selected_lens[b] steps since (at most max_age), and the
// keys added since, in one sparse pass that reads the set as that list.
void held_decode(const AttentionArgs& args, const DecodeIndexSets& held, const int* selected_lens, int max_age,
                 Workspace& workspace, cudaStream_t stream);

// Exact top-k of each row (ties to the lower index), ascending indices:
// row r has lengths[r] values at values + r*row_stride and writes
// min(k[r], lengths[r]) indices at out + r*out_stride.
void top_k(const float* values, int64_t row_stride, const int* lengths, const int* k, int rows, int* out,
           int64_t out_stride, cudaStream_t stream);

// Dense causal prefill (flash attention on tensor cores). Writes `lse` when non-null.
void dense_prefill(const AttentionArgs& args, float* lse, Workspace& workspace, cudaStream_t stream);

// Anchor prefill: per-row LSE, pooled post-softmax tile scores with a
// per-tile top budget(s) selected as the scores stream (never materialising
// the pooled-score tensor), then attention over selected keys + own tile.
// With dense_output (layer 0) the output is dense causal attention.
void anchor_prefill(const AttentionArgs& args, const Budget& budget, bool dense_output,
                    const PrefillIndexSets& selection, Workspace& workspace, cudaStream_t stream);

// Reuse prefill: each tile attends the anchor tile's keys (through head_map)
// plus its own keys causally.
void reuse_prefill(const AttentionArgs& args, const PrefillIndexSets& anchor, const int* head_map,
                   Workspace& workspace, cudaStream_t stream);

}  // namespace kascade::cuda
