// Host side of the CUDA kernels: validates arguments (kascade::Error naming
// the field), plans grids and split counts, carves the workspace, and chains
// the kernels that make up an anchor or reuse layer.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <string>

#include "core/error.h"
#include "cuda/kascade_cuda.h"
#include "cuda/kernels.h"

namespace kascade::cuda {

using detail::check_cuda;
using detail::kPrefillBlockRows;

namespace {

// Smallest key range of a split, dense passes (dense attention, the anchor's
// score pass) and sparse ones: 128 keys. Dense at 2 KV heads, batch 1, 1K-8K
// keys: 128 beat 256 by 1.5-5 % a decode step, 64 lost at 8K; sparse: 256
// made batch-1 reuse slower.
constexpr int kMinKeysPerSplit = 128;
// At most this many splits in a dense pass: at batch 1 more only add merge
// work (8 KV heads, dense at 32K / 64K / 128K: 0.051 / 0.082 / 0.140 ms with
// 128-132 splits, 0.049 / 0.078 / 0.136 with 32) ...
constexpr int64_t kMaxDenseSplits = 32;
// ... unless the pass would then have fewer blocks than this: with 2 KV heads
// (Qwen2.5-1.5B) 32 splits are 64 two-warp blocks at batch 1, too few loads
// in flight for HBM (1.1 TB/s at 32K). (Sparse passes at 32-127 keys a split
// to reach it measured no faster.)
constexpr int64_t kMinDenseBlocks = 256;
// Smallest key range of a sketch-scoring split: a 64-key sketch block for
// each of its block's four warps (a warp scores whole sketch blocks).
constexpr int64_t kMinSketchKeysPerSplit = 256;

// A/B switches for device runs, read once: KASCADE_SCORE_LAYOUT=rows keeps
// the anchor's raw scores one row per head at every batch, =keys forces
// key-major; KASCADE_MIN_SPLIT_KEYS overrides the dense split floor;
// KASCADE_DECODE_PDL=0 launches every decode kernel plainly (no programmatic
// dependent launches).
int score_layout_override() {  // 0: by batch, 1: rows, 2: keys
  static const int layout = [] {
    const char* value = std::getenv("KASCADE_SCORE_LAYOUT");
    if (value && std::string(value) == "rows") return 1;
    if (value && std::string(value) == "keys") return 2;
    return 0;
  }();
  return layout;
}

// Key-major scores from this many (sequence, KV head) rows up, and only for
// groups of a multiple of 4 heads (no padded record slots). At batch
// 64 (512 rows) key-major anchors are 1-2 % faster; at batch 1 and 8 (8 and 64
// rows, a pooled selection of few blocks) the row layout is 5-18 % faster.
constexpr int64_t kKeyMajorMinSets = 256;

bool key_major_scores(int64_t sets, int group) {
  const int layout = score_layout_override();
  return layout == 2 || (layout == 0 && sets >= kKeyMajorMinSets && group % 4 == 0);
}

int min_dense_split_keys() {
  static const int keys = int(detail::positive_env("KASCADE_MIN_SPLIT_KEYS", kMinKeysPerSplit));
  return keys;
}

// Decode kernels as programmatic dependent launches: a kernel's launch and
// block scheduling overlap the end of the one before it. Always for the split
// merge (1.4-2.3 us off a dense pass at batch 1 and 8); for the
// pooled selection and the sparse pass after it only when the selection has
// fewer rows than multiprocessors (2-6 % off an anchor at batch 1, up
// to 3 % at batch 8, but 0.3-2 % slower at batch 64). A call's first kernel
// is launched plainly: as a dependent of the previous call's last kernel it
// made 32 chained layers 8-10 % slower.
bool programmatic_launches() {
  static const bool programmatic = [] {
    const char* value = std::getenv("KASCADE_DECODE_PDL");
    return !(value && std::string(value) == "0");
  }();
  return programmatic;
}

float scale_log2(int head_dim) { return float(1.4426950408889634 / std::sqrt(double(head_dim))); }

void require_aligned(const void* pointer, const char* field) {
  if (reinterpret_cast<uintptr_t>(pointer) % 16 != 0) fail("cuda attention: {} is not 16-byte aligned", field);
}

void validate(const AttentionArgs& args) {
  if (args.dtype != DType::F16 && args.dtype != DType::BF16) fail("cuda attention: dtype {} is unknown", int(args.dtype));
  if (args.batch < 1) fail("cuda attention: batch {} must be >= 1", args.batch);
  if (args.n_heads < 1 || args.n_kv_heads < 1 || args.n_heads % args.n_kv_heads != 0)
    fail("cuda attention: n_heads {} must be a positive multiple of n_kv_heads {}", args.n_heads, args.n_kv_heads);
  if (args.n_heads / args.n_kv_heads > kPrefillBlockRows)
    fail("cuda attention: group size {} exceeds {}", args.n_heads / args.n_kv_heads, kPrefillBlockRows);
  if (args.head_dim != 64 && args.head_dim != 128 && args.head_dim != 256)
    fail("cuda attention: head_dim {} is not 64, 128 or 256", args.head_dim);
  if (!args.queries || !args.keys || !args.values || !args.seq_lens || !args.output)
    fail("cuda attention: queries, keys, values, seq_lens and output must all be set");
  require_aligned(args.queries, "queries");
  require_aligned(args.keys, "keys");
  require_aligned(args.values, "values");
  require_aligned(args.output, "output");
  if (args.max_seq_len < 1) fail("cuda attention: max_seq_len {} must be >= 1", args.max_seq_len);
  if (args.capacity < args.max_seq_len)
    fail("cuda attention: capacity {} is below max_seq_len {}", args.capacity, args.max_seq_len);
  if (args.query_start < 0 || args.query_start >= args.max_seq_len)
    fail("cuda attention: query_start {} is outside [0, max_seq_len {})", args.query_start, args.max_seq_len);
  if (args.page_table) {
    if (args.page_size < 16 || (args.page_size & (args.page_size - 1)) != 0)
      fail("cuda attention: page_size {} is not a power of two >= 16", args.page_size);
    if (args.page_table_stride < 1 || args.capacity != args.page_table_stride * args.page_size)
      fail("cuda attention: capacity {} is not page_table_stride {} x page_size {}", args.capacity,
           args.page_table_stride, args.page_size);
  }
}

// The cache layout admits a key sketch (blocks of 64 positions).
void require_sketch_layout(const AttentionArgs& args, const char* call) {
  if (args.page_table ? args.page_size % detail::kSketchBlock != 0 : args.capacity % detail::kSketchBlock != 0)
    fail("{}: the key sketch needs {} {} to be a multiple of {}", call, args.page_table ? "page_size" : "capacity",
         args.page_table ? args.page_size : args.capacity, detail::kSketchBlock);
}

void require_contiguous(const AttentionArgs& args, const char* call) {
  if (args.page_table) fail("{}: prefill reads a contiguous cache (page_table must be null)", call);
}

void require_whole_query(const AttentionArgs& args, const char* call) {
  if (args.query_start != 0) fail("{}: query_start {} must be 0 (it chunks a prefill)", call, args.query_start);
}

// Bump allocator over one workspace reservation.
class Carver {
 public:
  explicit Carver(char* base) : base_(base) {}
  template <typename T>
  T* take(int64_t count) {
    T* pointer = reinterpret_cast<T*>(base_ ? base_ + used_ : nullptr);
    used_ += (count * int64_t(sizeof(T)) + 255) / 256 * 256;
    return pointer;
  }
  int64_t used() const { return used_; }

 private:
  char* base_;
  int64_t used_ = 0;
};

detail::CallGeometry call_geometry(const AttentionArgs& args) {
  detail::CallGeometry g;
  g.queries = args.queries;
  g.keys = args.keys;
  g.values = args.values;
  g.kv_head_stride = args.capacity * args.head_dim;
  g.seq_lens = args.seq_lens;
  g.batch = args.batch;
  g.n_heads = args.n_heads;
  g.n_kv_heads = args.n_kv_heads;
  g.group = args.n_heads / args.n_kv_heads;
  g.max_seq_len = args.max_seq_len;
  g.scale_log2 = scale_log2(args.head_dim);
  return g;
}

detail::PagedLayout paged_layout(const AttentionArgs& args) {
  detail::PagedLayout layout;
  if (args.page_table) {
    layout.page_table = args.page_table;
    layout.page_shift = std::countr_zero(unsigned(args.page_size));
    layout.page_table_stride = args.page_table_stride;
  }
  return layout;
}

// A group's query heads in as few blocks of at most max_heads as hold them, evenly.
void split_heads(detail::DecodeParams& p, int max_heads) {
  p.head_blocks = (p.group + max_heads - 1) / max_heads;
  p.heads_per_block = (p.group + p.head_blocks - 1) / p.head_blocks;
}

detail::DecodeParams decode_params(const AttentionArgs& args) {
  detail::DecodeParams p;
  static_cast<detail::CallGeometry&>(p) = call_geometry(args);
  static_cast<detail::PagedLayout&>(p) = paged_layout(args);
  split_heads(p, detail::kMaxHeadsPerDecodeBlock);
  p.output = args.output;
  return p;
}

// As many key splits as fit the blocks in one wave over every multiprocessor
// (a partial second wave would cost a whole one), never fewer than the
// split floor (dense or sparse, above) keys per split and, in dense passes,
// never more than kMaxDenseSplits where that still gives kMinDenseBlocks.
// A score-only pass (`merged` false) is not capped: it has no merge (the
// selection folds its split LSEs), and capped, the sketch pass at batch 1 ran
// 2 blocks a multiprocessor and read at 0.9-1.1 TB/s (8 KV heads, 32K and
// 128K; dense reads at ~3). Uncapped, the sketch chain at batch 1 (H100): 8 KV
// heads 0.95x at 32K, 0.91x at 128K; 2 KV heads 1.00x / 0.95x; batch 16 1.00x.
int plan_splits(const detail::DecodeParams& p, int64_t max_keys, int blocks_per_sm, bool merged = true) {
  const bool capped = merged;
  const int64_t blocks = int64_t(p.batch) * p.n_kv_heads * p.head_blocks;
  const int64_t target = int64_t(detail::multiprocessor_count()) * blocks_per_sm;
  const int64_t wanted = target / blocks;
  const int64_t max_dense_splits = std::max(kMaxDenseSplits, (kMinDenseBlocks + blocks - 1) / blocks);
  const int64_t min_keys =
      p.indices      ? kMinKeysPerSplit
      : capped       ? std::max<int64_t>(min_dense_split_keys(), (max_keys + max_dense_splits - 1) / max_dense_splits)
      : p.sketch_codes ? kMinSketchKeysPerSplit
                       : min_dense_split_keys();
  const int64_t most = std::max<int64_t>(1, (max_keys + min_keys - 1) / min_keys);
  return static_cast<int>(std::clamp<int64_t>(wanted, 1, most));
}

// Split partials of a decode pass.
void carve_partials(Carver& carver, detail::DecodeParams& p, int head_dim) {
  p.partial_out = carver.take<float>(int64_t(p.batch) * p.n_heads * p.splits * head_dim);
  p.partial_lse = carver.take<float>(int64_t(p.batch) * p.n_heads * p.splits);
}

// One decode pass over dense or selected keys. An attending pass is merged
// into the output; a score-only pass (exact or sketched) leaves its split
// LSEs to the pooled selection, which folds them itself.
// `dependent`: launch the pass as a programmatic dependent of the stream's previous kernel.
void run_decode_pass(detail::DecodeParams p, DType dtype, int head_dim, detail::DecodeMode mode, bool dependent,
                     cudaStream_t stream) {
  detail::launch_decode_attention(p, dtype, head_dim, mode, dependent, stream);
  if (detail::decode_attends(mode) && p.splits > 1) detail::launch_decode_merge(p, dtype, head_dim, programmatic_launches(), stream);
}

// An attention pass of a standalone call (dense, or over p's index sets of
// at most max_keys keys) in as many splits as fill the device, its split
// partials at the start of the workspace.
void attend_in_splits(detail::DecodeParams p, const AttentionArgs& args, int64_t max_keys, Workspace& workspace,
                      cudaStream_t stream) {
  p.splits = plan_splits(p, max_keys, detail::decode_blocks_per_sm(args.dtype, args.head_dim, detail::DecodeMode::Attend,
                                                                   p.indices != nullptr));
  Carver sizing(nullptr);
  carve_partials(sizing, p, args.head_dim);
  Carver carver(static_cast<char*>(workspace.reserve(sizing.used())));
  carve_partials(carver, p, args.head_dim);
  run_decode_pass(p, args.dtype, args.head_dim, detail::DecodeMode::Attend, false, stream);
}

detail::PrefillParams prefill_params(const AttentionArgs& args) {
  detail::PrefillParams p;
  static_cast<detail::CallGeometry&>(p) = call_geometry(args);
  p.query_start = args.query_start;
  p.row_blocks = 1;  // block_queries: set by the launch of a causal pass
  p.output = args.output;
  return p;
}

void validate_budget(const Budget& budget, const char* call) {
  if (!kascade::valid_budget_percent(budget.percent) || budget.min_keys < 0)
    fail("{}: budget percent {} / min_keys {} out of range", call, budget.percent, budget.min_keys);
}

// Also checks the call's query_start against the sets' tiles (after validate(args)).
void validate_prefill_sets(const PrefillIndexSets& sets, const char* name, const AttentionArgs& args) {
  if (!sets.indices || !sets.tile_offsets) fail("cuda prefill: {}.indices and .tile_offsets must be set", name);
  if (sets.tile < 1 || sets.tile > 1024) fail("cuda prefill: {}.tile {} is outside [1, 1024]", name, sets.tile);
  if (sets.per_head < 0) fail("cuda prefill: {}.per_head {} is negative", name, sets.per_head);
  if (args.query_start % sets.tile != 0)
    fail("cuda prefill: query_start {} is not a multiple of {}.tile {}", args.query_start, name, sets.tile);
  if (sets.first_tile < 0 || sets.first_tile > args.query_start / sets.tile)
    fail("cuda prefill: {}.first_tile {} is outside [0, query_start / tile = {}]", name, sets.first_tile,
         args.query_start / sets.tile);
}

// The sets' offsets from the call's first tile on (the kernels index them
// from there).
const int64_t* call_tile_offsets(const PrefillIndexSets& sets, const AttentionArgs& args) {
  return sets.tile_offsets + (args.query_start / sets.tile - sets.first_tile);
}

}  // namespace

int64_t budget_keys(const Budget& budget, int64_t n) {
  return kascade::budget(n, budget.percent, budget.min_keys);
}

PrefillIndexLayout prefill_index_layout(int max_seq_len, int tile, const Budget& budget, int query_start) {
  if (tile < 1) fail("prefill_index_layout: tile {} must be >= 1", tile);
  if (max_seq_len < 1) fail("prefill_index_layout: max_seq_len {} must be >= 1", max_seq_len);
  if (query_start < 0 || query_start >= max_seq_len)
    fail("prefill_index_layout: query_start {} is outside [0, max_seq_len {})", query_start, max_seq_len);
  if (query_start % tile != 0)
    fail("prefill_index_layout: query_start {} is not a multiple of tile {}", query_start, tile);
  PrefillIndexLayout layout;
  layout.first_tile = query_start / tile;
  const int n_tiles = (max_seq_len + tile - 1) / tile - layout.first_tile;
  layout.offsets.resize(n_tiles + 1);
  layout.offsets[0] = 0;
  for (int i = 0; i < n_tiles; ++i)
    layout.offsets[i + 1] = layout.offsets[i] + budget_keys(budget, int64_t(layout.first_tile + i) * tile);
  return layout;
}

int prefill_exact_multiple(int n_heads, int n_kv_heads, int head_dim) {
  if (n_heads < 1 || n_kv_heads < 1 || n_heads % n_kv_heads != 0)
    fail("prefill_exact_multiple: n_heads {} must be a positive multiple of n_kv_heads {}", n_heads, n_kv_heads);
  const int group = n_heads / n_kv_heads;
  if (group > kPrefillBlockRows) fail("prefill_exact_multiple: group size {} exceeds {}", group, kPrefillBlockRows);
  if (head_dim != 64 && head_dim != 128 && head_dim != 256)
    fail("prefill_exact_multiple: head_dim {} is not 64, 128 or 256", head_dim);
  return std::lcm(detail::causal_block_queries(group, head_dim, detail::PrefillMode::Attend),
                  detail::causal_block_queries(group, head_dim, detail::PrefillMode::LseOnly));
}

Workspace::~Workspace() {
  if (data_) cudaFree(data_);
}

void* Workspace::reserve(size_t bytes) {
  if (bytes > capacity_) {
    if (data_) check_cuda(cudaFree(data_), "cudaFree(workspace)");
    data_ = nullptr;
    capacity_ = 0;
    check_cuda(cudaMalloc(&data_, bytes), "cudaMalloc(workspace)");
    capacity_ = bytes;
  }
  return data_;
}

void dense_decode(const AttentionArgs& args, float* lse, Workspace& workspace, cudaStream_t stream) {
  validate(args);
  require_whole_query(args, "dense_decode");
  detail::DecodeParams p = decode_params(args);
  p.lse = lse;
  attend_in_splits(p, args, args.max_seq_len, workspace, stream);
}

void anchor_decode(const AttentionArgs& args, const Budget& budget, bool dense_output,
                   const DecodeIndexSets& selection, Workspace& workspace, cudaStream_t stream) {
  validate(args);
  require_whole_query(args, "anchor_decode");
  if (!selection.indices || !selection.counts) fail("anchor_decode: selection.indices and .counts must be set");
  const int64_t max_budget = budget_keys(budget, args.max_seq_len);
  if (selection.max_keys < max_budget)
    fail("anchor_decode: selection.max_keys {} is below budget({}) = {}", selection.max_keys, args.max_seq_len,
         max_budget);
  validate_budget(budget, "anchor_decode");

  const bool sketched = !dense_output && args.key_sketch.codes;
  if (sketched) {
    require_sketch_layout(args, "anchor_decode");
    if (!args.key_sketch.params) fail("anchor_decode: key_sketch.params must be set with key_sketch.codes");
    require_aligned(args.key_sketch.codes, "key_sketch.codes");
    require_aligned(args.key_sketch.params, "key_sketch.params");
  }
  const detail::DecodeMode score_mode = dense_output ? detail::DecodeMode::AttendAndScores
                                        : sketched   ? detail::DecodeMode::SketchScores
                                                     : detail::DecodeMode::ScoresOnly;
  detail::DecodeParams scoring = decode_params(args);
  if (sketched) {
    scoring.sketch_codes = args.key_sketch.codes;
    scoring.sketch_params = args.key_sketch.params;
    // A group above eight heads reads the sketch once per block of at most eight.
    split_heads(scoring, detail::kMaxHeadsPerSketchBlock);
  }
  scoring.splits = plan_splits(scoring, args.max_seq_len,
                               detail::decode_blocks_per_sm(args.dtype, args.head_dim, score_mode, false),
                               detail::decode_attends(score_mode));
  detail::DecodeParams sparse = decode_params(args);
  sparse.indices = selection.indices;
  sparse.counts = selection.counts;
  sparse.index_stride = selection.max_keys;
  sparse.splits = plan_splits(sparse, max_budget,
                              detail::decode_blocks_per_sm(args.dtype, args.head_dim, detail::DecodeMode::Attend, true));

  const int64_t rows = int64_t(args.batch) * args.n_heads;
  const int64_t sets = int64_t(args.batch) * args.n_kv_heads;
  float* pooled = nullptr;
  int2* above = nullptr;
  auto carve = [&](Carver& carver) {
    carve_partials(carver, scoring, args.head_dim);
    carve_partials(carver, sparse, args.head_dim);
    scoring.lse = carver.take<float>(rows);
    scoring.score_stride = (int64_t(args.max_seq_len) + 3) / 4 * 4;  // rows are read as float4
    scoring.score_record = key_major_scores(sets, scoring.group) ? (scoring.group + 3) / 4 * 4 : 0;
    scoring.scores = carver.take<float>(scoring.score_record > 0 ? sets * scoring.score_stride * scoring.score_record
                                                                 : rows * scoring.score_stride);
    scoring.score_bounds = carver.take<float>(rows * scoring.splits * 2);
    pooled = carver.take<float>(sets * scoring.score_stride);
    above = carver.take<int2>(sets * selection.max_keys);
  };
  Carver sizing(nullptr);
  carve(sizing);
  Carver carver(static_cast<char*>(workspace.reserve(sizing.used())));
  carve(carver);

  run_decode_pass(scoring, args.dtype, args.head_dim, score_mode, false, stream);

  detail::PooledSelectParams select;
  static_cast<detail::CallGeometry&>(select) = call_geometry(args);
  select.scores = scoring.scores;
  select.score_stride = scoring.score_stride;
  select.score_record = scoring.score_record;
  select.score_bounds = scoring.score_bounds;
  select.splits = scoring.splits;
  select.partial_lse = scoring.splits > 1 ? scoring.partial_lse : nullptr;
  select.lse = scoring.lse;
  select.budget = budget;
  select.pooled = pooled;
  select.above = above;
  select.indices = selection.indices;
  select.counts = selection.counts;
  select.index_stride = selection.max_keys;
  const bool dependents = programmatic_launches() && sets < detail::multiprocessor_count();
  detail::launch_pooled_select_decode(select, dependents, stream);

  if (!dense_output) run_decode_pass(sparse, args.dtype, args.head_dim, detail::DecodeMode::Attend, dependents, stream);
}

void reuse_decode(const AttentionArgs& args, const DecodeIndexSets& anchor, const int* head_map,
                  Workspace& workspace, cudaStream_t stream) {
  validate(args);
  require_whole_query(args, "reuse_decode");
  if (!anchor.indices || !anchor.counts) fail("reuse_decode: anchor.indices and .counts must be set");
  if (anchor.max_keys < 1) fail("reuse_decode: anchor.max_keys {} must be >= 1", anchor.max_keys);
  detail::DecodeParams p = decode_params(args);
  p.indices = anchor.indices;
  p.counts = anchor.counts;
  p.head_map = head_map;
  p.index_stride = anchor.max_keys;
  attend_in_splits(p, args, anchor.max_keys, workspace, stream);
}

void held_decode(const AttentionArgs& args, const DecodeIndexSets& held, const int* selected_lens, int max_age,
                 Workspace& workspace, cudaStream_t stream) {
  validate(args);
  require_whole_query(args, "held_decode");
  if (!held.indices || !held.counts || !selected_lens)
    fail("held_decode: held.indices, held.counts and selected_lens must be set");
  if (held.max_keys < 1) fail("held_decode: held.max_keys {} must be >= 1", held.max_keys);
  if (max_age < 0) fail("held_decode: max_age {} is negative", max_age);
  // The pass reads the kept selection as its list: the selection, the
  // selection shifted by the steps since (as many entries, dropped where
  // they repeat) and the keys added since (held_position in decode.cu).
  detail::DecodeParams p = decode_params(args);
  p.indices = held.indices;
  p.counts = held.counts;
  p.index_stride = held.max_keys;
  p.selected_lens = selected_lens;
  attend_in_splits(p, args, std::min<int64_t>(args.max_seq_len, 2 * held.max_keys + max_age), workspace, stream);
}

void sketch_keys(const AttentionArgs& args, int new_keys, const void* const* layer_keys,
                 const KeySketch* layer_sketches, int n_layers, cudaStream_t stream) {
  if (args.dtype != DType::F16 && args.dtype != DType::BF16) fail("sketch_keys: dtype {} is unknown", int(args.dtype));
  if (args.batch < 1 || args.n_kv_heads < 1) fail("sketch_keys: batch {} and n_kv_heads {} must be >= 1", args.batch,
                                                  args.n_kv_heads);
  if (args.head_dim != 64 && args.head_dim != 128 && args.head_dim != 256)
    fail("sketch_keys: head_dim {} is not 64, 128 or 256", args.head_dim);
  if (!args.seq_lens || !layer_keys || !layer_sketches) fail("sketch_keys: seq_lens, layer_keys and layer_sketches must be set");
  if (new_keys < 1 || n_layers < 1) fail("sketch_keys: new_keys {} and n_layers {} must be >= 1", new_keys, n_layers);
  if (args.page_table && (args.page_size < 16 || (args.page_size & (args.page_size - 1)) != 0))
    fail("sketch_keys: page_size {} is not a power of two >= 16", args.page_size);
  require_sketch_layout(args, "sketch_keys");
  detail::SketchParams p;
  static_cast<detail::CallGeometry&>(p) = call_geometry(args);
  static_cast<detail::PagedLayout&>(p) = paged_layout(args);
  p.new_keys = new_keys;
  p.n_layers = n_layers;
  p.layer_keys = layer_keys;
  p.layer_sketches = layer_sketches;
  detail::launch_sketch_keys(p, args.dtype, args.head_dim, stream);
}

void top_k(const float* values, int64_t row_stride, const int* lengths, const int* k, int rows, int* out,
           int64_t out_stride, cudaStream_t stream) {
  if (!values || !lengths || !k || !out) fail("top_k: values, lengths, k and out must be set");
  if (rows < 0) fail("top_k: rows {} is negative", rows);
  if (row_stride < 0 || out_stride < 0) fail("top_k: strides must be non-negative");
  if (rows == 0) return;
  detail::launch_top_k(values, row_stride, lengths, k, rows, out, out_stride, stream);
}

void dense_prefill(const AttentionArgs& args, float* lse, Workspace& workspace, cudaStream_t stream) {
  validate(args);
  require_contiguous(args, "dense_prefill");
  (void)workspace;  // dense prefill needs no scratch
  detail::PrefillParams p = prefill_params(args);
  p.lse = lse;
  detail::launch_prefill_attention(p, args.dtype, args.head_dim, detail::PrefillKeys::Causal,
                                   detail::PrefillMode::Attend, stream);
}

void anchor_prefill(const AttentionArgs& args, const Budget& budget, bool dense_output,
                    const PrefillIndexSets& selection, Workspace& workspace, cudaStream_t stream) {
  validate(args);
  require_contiguous(args, "anchor_prefill");
  validate_prefill_sets(selection, "selection", args);
  validate_budget(budget, "anchor_prefill");
  const PrefillIndexLayout layout =
      prefill_index_layout(args.max_seq_len, selection.tile, budget, selection.first_tile * selection.tile);
  if (selection.per_head < layout.per_head())
    fail("anchor_prefill: selection.per_head {} is below the layout's {}", selection.per_head, layout.per_head());

  const int n_slots = detail::tile_select_slots(args.dtype, args.head_dim);
  const int64_t query_rows = args.max_seq_len - args.query_start;  // per sequence
  auto carve = [&](Carver& carver, float*& lse, float*& slots, int*& counter) {
    lse = carver.take<float>(int64_t(args.batch) * args.n_heads * query_rows);
    slots = carver.take<float>(int64_t(n_slots) * args.max_seq_len);
    counter = carver.take<int>(1);
  };
  float *lse, *slots;
  int* counter;
  Carver sizing(nullptr);
  carve(sizing, lse, slots, counter);
  Carver carver(static_cast<char*>(workspace.reserve(sizing.used())));
  carve(carver, lse, slots, counter);

  detail::PrefillParams rows = prefill_params(args);
  rows.lse = lse;
  detail::launch_prefill_attention(rows, args.dtype, args.head_dim, detail::PrefillKeys::Causal,
                                   dense_output ? detail::PrefillMode::Attend : detail::PrefillMode::LseOnly, stream);

  detail::TileSelectParams select;
  static_cast<detail::CallGeometry&>(select) = call_geometry(args);
  select.tile = selection.tile;
  select.query_start = args.query_start;
  select.lse = lse;
  select.indices = selection.indices;
  select.tile_offsets = call_tile_offsets(selection, args);
  select.per_head = selection.per_head;
  select.slots = slots;
  select.work_counter = counter;
  detail::launch_tile_select(select, args.dtype, args.head_dim, stream);

  if (!dense_output) reuse_prefill(args, selection, nullptr, workspace, stream);
}

void reuse_prefill(const AttentionArgs& args, const PrefillIndexSets& anchor, const int* head_map,
                   Workspace& workspace, cudaStream_t stream) {
  validate(args);
  require_contiguous(args, "reuse_prefill");
  validate_prefill_sets(anchor, "anchor", args);
  (void)workspace;  // reads the anchor's sets in place
  detail::PrefillParams p = prefill_params(args);
  p.block_queries = anchor.tile;
  p.row_blocks = (anchor.tile * p.group + kPrefillBlockRows - 1) / kPrefillBlockRows;
  p.indices = anchor.indices;
  p.tile_offsets = call_tile_offsets(anchor, args);
  p.per_head = anchor.per_head;
  p.head_map = head_map;
  detail::launch_prefill_attention(p, args.dtype, args.head_dim, detail::PrefillKeys::Selected,
                                   detail::PrefillMode::Attend, stream);
}

}  // namespace kascade::cuda
