// Internal interface between the host API (api.cc, which validates and
// plans) and the kernel files (*.cu, which instantiate templates and launch).
// Plain C++: no CUDA device code, no fmt (nvcc's front end rejects fmt's
// compile-time format strings), so errors are raised through unsupported().
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/kascade_cuda.h"
#include "kascade/budget.h"


namespace kascade::cuda::detail {

// Rows of a prefill block: row r is query q0 + r / g of head r % g, so a
// group has at most this many heads (api.cc's validate enforces it).
constexpr int kPrefillBlockRows = 128;

// Runtime helpers (runtime.cc).
// Raises kascade::Error("unsupported <what>: <value>").
[[noreturn]] void unsupported(const char* what, int64_t value);
// Raises kascade::Error naming the failed CUDA call.
void check_cuda(cudaError_t status, const char* what);
// The positive integer in environment variable `name` (an A/B switch for
// device runs; api.cc lists them), else `fallback`.
int64_t positive_env(const char* name, int64_t fallback);

// A kernel instance with its dynamic shared memory, threads and occupancy.
struct KernelInfo {
  const void* kernel = nullptr;
  int shared_bytes = 0;
  int threads = 0;
  int blocks_per_sm = 1;
};
// Raises the kernel's dynamic shared-memory limit to shared_bytes and reads
// its occupancy; call it once per instance (a function-local static).
KernelInfo configure_kernel(const void* kernel, int shared_bytes, int threads, const char* what);
// One launch: `programmatic` makes it a programmatic dependent of the
// stream's previous kernel (its blocks are scheduled while that kernel
// finishes and wait for it in griddepcontrol.wait); cluster_blocks > 1
// groups the blocks along x into clusters.
void launch_kernel(const void* kernel, dim3 grid, int threads, size_t shared_bytes, void* arguments, bool programmatic,
                   int cluster_blocks, cudaStream_t stream, const char* what);
// The device's multiprocessors (read once).
int multiprocessor_count();

// Calls f(std::integral_constant<int, D>{}) for the head dimension D (64, 128
// or 256) that head_dim names: the one switch from a runtime head_dim to the
// kernel templates instantiated for it.
template <typename F>
decltype(auto) with_head_dim(int head_dim, F&& f) {
  switch (head_dim) {
    case 64: return f(std::integral_constant<int, 64>{});
    case 128: return f(std::integral_constant<int, 128>{});
    case 256: return f(std::integral_constant<int, 256>{});
  }
  unsupported("head_dim", head_dim);
}

// What every kernel's parameters share: the call's tensors and geometry,
// filled once from AttentionArgs (api.cc, call_geometry).
struct CallGeometry {
  const void* queries = nullptr;
  const void* keys = nullptr;
  const void* values = nullptr;
  int64_t kv_head_stride = 0;  // capacity * head_dim elements
  const int* seq_lens = nullptr;
  int batch = 0, n_heads = 0, n_kv_heads = 0, group = 0;
  int max_seq_len = 0;
  float scale_log2 = 0.f;  // log2(e) / sqrt(head_dim)
};

// Where a paged cache keeps its rows (page_table null: contiguous): position
// p of sequence b is row p % 2^page_shift of page
// page_table[b * page_table_stride + (p >> page_shift)].
struct PagedLayout {
  const int* page_table = nullptr;
  int page_shift = 0;
  int64_t page_table_stride = 0;
};

// Decode kernels come in four modes: attention only; attention that also
// writes every raw score (layer 0: dense output, scores for selection);
// scores only, reading K alone (the first pass of an anchor layer); and
// scores only with the keys below the sketched end read from the 4-bit key
// sketch (kascade_cuda.h's KeySketch: an anchor's cheap first pass).
enum class DecodeMode { Attend, AttendAndScores, ScoresOnly, SketchScores };

// Query heads one block serves: the rows of an m16n8k16 tile, or in the
// sketch pass its columns (decode.cu's SketchScorer).
inline constexpr int kMaxHeadsPerDecodeBlock = 16;
inline constexpr int kMaxHeadsPerSketchBlock = 8;

// Whether a mode attends (reads V, writes outputs): its split partials are
// merged and the merge may launch early; the other modes only score.
KASCADE_HOST_DEVICE constexpr bool decode_attends(DecodeMode mode) {
  return mode == DecodeMode::Attend || mode == DecodeMode::AttendAndScores;
}

// Queries [batch][n_heads][head_dim].
struct DecodeParams : CallGeometry, PagedLayout {
  // Sparse key lists (null for dense): indices[(b*G + head_map[h])*index_stride + j], j < counts[b].
  const int* indices = nullptr;
  const int* counts = nullptr;
  const int* head_map = nullptr;  // null: identity
  int64_t index_stride = 0;
  // Held steps (set with indices): each list is a selection made when
  // sequence b had selected_lens[b] keys, and the pass attends
  // attention/kascade_ops.h's held_keys of it: the selection, the selection
  // shifted by the steps since, and the keys added since.
  const int* selected_lens = nullptr;
  int heads_per_block = 0;  // query heads of one group handled by one block (the limits above)
  int head_blocks = 0;      // ceil(group / heads_per_block)
  int splits = 1;           // key splits per (sequence, head block)
  void* output = nullptr;   // used when splits == 1
  float* lse = nullptr;     // natural-log LSE [batch][n_heads], optional
  float* partial_out = nullptr;  // [batch][n_heads][splits][head_dim], normalised
  float* partial_lse = nullptr;  // [batch][n_heads][splits], log2 units
  // Raw scores in log2 units. score_record == 0: one row per head,
  // [batch][n_heads][score_stride]; score_record > 0 (a multiple of 4, >= group):
  // key-major, [batch][n_kv_heads][score_stride][score_record], the g scores
  // of a key side by side (one write stream per block, one float4 per key
  // and 4 heads for the pooled selection).
  float* scores = nullptr;
  int64_t score_stride = 0;      // a multiple of 4 (rows are read as float4)
  int score_record = 0;
  float* score_bounds = nullptr;  // [batch][n_heads][splits][2]: smallest, largest score of the split
  // SketchScores: the layer's key sketch, laid out as the cache (KeySketch).
  const uint8_t* sketch_codes = nullptr;
  const uint16_t* sketch_params = nullptr;
};

// The key sketch's block (kascade_cuda.h, KeySketch).
constexpr int kSketchBlock = 64;

// sketch_keys: per (sequence, KV head, layer) the blocks that the call's last
// new_keys positions complete.
// Contiguous (no page table): capacity = kv_head_stride / head_dim.
struct SketchParams : CallGeometry, PagedLayout {
  int new_keys = 0;
  int n_layers = 0;
  const void* const* layer_keys = nullptr;  // [layer]
  const KeySketch* layer_sketches = nullptr;  // [layer]
};
void launch_sketch_keys(const SketchParams& params, DType dtype, int head_dim, cudaStream_t stream);

// The decode launches take `programmatic`: launch the kernel as a
// programmatic dependent of the stream's previous kernel, whatever it is (its
// blocks are scheduled while that kernel finishes and wait for it to complete
// before reading anything).
int decode_blocks_per_sm(DType dtype, int head_dim, DecodeMode mode, bool sparse);
void launch_decode_attention(const DecodeParams& params, DType dtype, int head_dim, DecodeMode mode,
                             bool programmatic, cudaStream_t stream);
// Folds the split partials of an attending pass into output and lse. Call it
// right after launch_decode_attention (which lets it start early).
void launch_decode_merge(const DecodeParams& params, DType dtype, int head_dim, bool programmatic,
                         cudaStream_t stream);

// Pooled post-softmax scores of each KV head (sum over its g query heads of
// 2^(s - lse)) and the exact top budget(n) per (sequence, KV head).
struct PooledSelectParams : CallGeometry {
  const float* scores = nullptr;  // log2 units, laid out as DecodeParams::scores
  int64_t score_stride = 0;       // a multiple of 4
  int score_record = 0;           // as DecodeParams::score_record
  const float* score_bounds = nullptr;  // [batch][n_heads][splits][2], as DecodeParams
  int splits = 1;
  // The rows' LSEs: from the score pass's split partials (log2 units,
  // [batch][n_heads][splits]) when it left them, else lse (natural,
  // [batch][n_heads]).
  const float* partial_lse = nullptr;
  const float* lse = nullptr;
  Budget budget;
  // Scratch [batch][n_kv_heads][score_stride]: the pooled row when the
  // threshold bin overflows, and the bins of segments too long for shared memory.
  float* pooled = nullptr;
  int2* above = nullptr;    // scratch [batch][n_kv_heads][index_stride]
  int* indices = nullptr;   // [batch][n_kv_heads][index_stride]
  int* counts = nullptr;    // [batch]
  int64_t index_stride = 0;
  bool shared_bins = true;  // set by launch_pooled_select_decode
};
void launch_pooled_select_decode(const PooledSelectParams& params, bool programmatic, cudaStream_t stream);

void launch_top_k(const float* values, int64_t row_stride, const int* lengths, const int* k, int rows, int* out,
                  int64_t out_stride, cudaStream_t stream);

// Prefill attention. Rows of a block are (query, head) pairs of one KV head:
// row r is query q0 + r / group, head r % group. Keys are either the causal
// prefix (dense) or a tile's selected list followed by its own keys.
enum class PrefillKeys { Causal, Selected };
enum class PrefillMode { Attend, LseOnly };

// Queries, output and LSE hold the rows of positions [query_start,
// max_seq_len): position q is row q - query_start of its sequence's
// max_seq_len - query_start rows. Blocks are laid out from query_start on
// (block i: queries query_start + i * block_queries ...).
// Queries [batch][max_seq_len - query_start][n_heads][head_dim].
struct PrefillParams : CallGeometry {
  int query_start = 0;    // first query position (Selected: a multiple of block_queries)
  int block_queries = 0;  // queries per block: a tile when Selected; causal: set by the launch (causal_block_queries)
  int row_blocks = 0;     // blocks per (query block, KV head): ceil(block_queries*group/128)
  // Selected: the keys of query block i (tile query_start / block_queries + i)
  // are indices[(b*G + head_map[h])*per_head + tile_offsets[i] ... tile_offsets[i+1])
  // followed by the tile's own positions.
  const int* indices = nullptr;
  const int64_t* tile_offsets = nullptr;
  int64_t per_head = 0;
  const int* head_map = nullptr;
  void* output = nullptr;
  float* lse = nullptr;  // natural [batch][n_heads][max_seq_len - query_start], optional (required for LseOnly)
};
void launch_prefill_attention(const PrefillParams& params, DType dtype, int head_dim, PrefillKeys keys,
                              PrefillMode mode, cudaStream_t stream);
// Queries per block of a causal pass of `mode` (its block rows / group).
int causal_block_queries(int group, int head_dim, PrefillMode mode);

// Anchor prefill selection: persistent blocks take tiles (largest prefix
// first), accumulate the tile's pooled scores over [0, s) into a private slot
// and radix-select budget(s) of them. The tiles are those of the queries
// [query_start, max_seq_len), rows as in PrefillParams.
// Queries as PrefillParams'.
struct TileSelectParams : CallGeometry {
  int tile = 0;
  int query_start = 0;         // a multiple of tile
  const float* lse = nullptr;  // natural [batch][n_heads][max_seq_len - query_start]
  // Tile t (>= query_start / tile) keeps tile_offsets[i+1] - tile_offsets[i]
  // keys at tile_offsets[i], i = t - query_start / tile.
  int* indices = nullptr;
  const int64_t* tile_offsets = nullptr;
  int64_t per_head = 0;
  float* slots = nullptr;  // [n_blocks][max_seq_len]
  int* work_counter = nullptr;
};
// How many slots (of max_seq_len floats each) the tile selection uses.
int tile_select_slots(DType dtype, int head_dim);
void launch_tile_select(const TileSelectParams& params, DType dtype, int head_dim, cudaStream_t stream);

}  // namespace kascade::cuda::detail
