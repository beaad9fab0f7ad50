// Prefill kernels on tensor cores (flash-attention style): dense causal
// attention, attention over a tile's selected keys plus its own keys (anchor
// and reuse layers), the per-row LSE pass of an anchor, and the anchor's
// streaming pooled-score selection.
//
// All of them run on the Hopper core (wgmma + TMA, warp-specialised;
// wgmma_prefill_kernel and wgmma_tile_select_kernel below, layouts in
// wgmma_common.cuh) for head_dim 64, 128 and 256.
//
// A block holds 128 rows of one KV head (the LSE pass: 256, two query tiles
// on one key stream): row r is query q0 + r / g of head r % g, so the g heads
// of a group share every K/V chunk loaded into shared memory.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "cuda/device_common.cuh"
#include "cuda/kernels.h"
#include "cuda/radix_select.cuh"
#include "cuda/softmax_state.cuh"
#include "cuda/wgmma_common.cuh"

namespace kascade::cuda::detail {
namespace {

constexpr int kBlockRows = kPrefillBlockRows;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kLog2e = 1.4426950408889634f;

// Where a block's rows come from and which keys each may see.
struct RowInfo {
  int query = -1;  // absolute position, -1 for a padding row
  int head = 0;    // query head
};

__device__ __forceinline__ RowInfo row_info(int row, int q0, int block_queries, int group, int kv_head,
                                            int seq_len) {
  RowInfo info;
  const int q = q0 + row / group;
  if (row < block_queries * group && q < q0 + block_queries && q < seq_len) {
    info.query = q;
    info.head = kv_head * group + row % group;
  }
  return info;
}

// The call's rows of sequence b: positions [query_start, max_seq_len), row
// q - query_start for position q. Queries and output are [batch][rows][H][d],
// the LSE [batch][H][rows].
template <typename Params>  // PrefillParams or TileSelectParams
__device__ __forceinline__ int64_t query_row(const Params& p, int b, int query) {
  return int64_t(b) * (p.max_seq_len - p.query_start) + (query - p.query_start);
}
template <typename Params>
__device__ __forceinline__ int64_t lse_index(const Params& p, int b, int head, int query) {
  return (int64_t(b) * p.n_heads + head) * (p.max_seq_len - p.query_start) + (query - p.query_start);
}

// The (sequence, KV head, row block, query block) of a prefill block; the
// grid is laid out by prefill_grid. Blocks start roughly in launch order (x
// fastest): all query blocks of one KV head, heaviest first (causal work
// grows with the position), then the next head. The blocks running together
// then read one head's K/V rows, which fit the L2, rather than all heads'
// (an anchor 2-4 % faster than with all heads of a query block together).
// q_block counts from the call's first query: its queries start at
// query_start + q_block * block_queries.
struct BlockWork {
  int b = 0, kv_head = 0, row_base = 0, q_block = 0;
};

__device__ __forceinline__ BlockWork block_work(const PrefillParams& p) {
  BlockWork work;
  work.b = blockIdx.z;
  work.row_base = (blockIdx.x % p.row_blocks) * kBlockRows;
  work.kv_head = blockIdx.y;
  work.q_block = gridDim.x / p.row_blocks - 1 - blockIdx.x / p.row_blocks;
  return work;
}

// The key positions of a block: the causal prefix, or a selected list
// followed by the tile's own keys.
struct KeyList {
  const int* selected = nullptr;  // null: positions are 0, 1, ...
  int n_selected = 0;
  int own_begin = 0;  // first own key (tile start)
  int total = 0;
  __device__ __forceinline__ int position(int v) const {
    if (selected == nullptr) return v;
    return v < n_selected ? __ldg(selected + v) : own_begin + (v - n_selected);
  }
};

// The keys of query block q_block (queries q0..last_query) of sequence b and
// KV head kv_head: the causal prefix, or the tile's selected set (read
// through the head map) followed by the block's own causal keys.
template <PrefillKeys kKeys>
__device__ __forceinline__ KeyList block_keys(const PrefillParams& p, int b, int kv_head, int q_block, int q0,
                                              int last_query) {
  KeyList keys;
  if constexpr (kKeys == PrefillKeys::Causal) {
    keys.total = last_query + 1;
  } else {
    const int set_head = p.head_map ? p.head_map[kv_head] : kv_head;
    const int64_t begin = p.tile_offsets[q_block], end = p.tile_offsets[q_block + 1];
    keys.selected = p.indices + (int64_t(b) * p.n_kv_heads + set_head) * p.per_head + begin;
    keys.n_selected = static_cast<int>(end - begin);
    keys.own_begin = q0;
    keys.total = keys.n_selected + (last_query + 1 - q0);
  }
  return keys;
}

// The maximum of v[0, kCount) as a balanced tree, so that the compares'
// latencies overlap (depth log2 kCount instead of kCount).
template <int kCount>
__device__ __forceinline__ float tree_max(const float* v) {
  if constexpr (kCount == 1) {
    return v[0];
  } else {
    return fmaxf(tree_max<kCount / 2>(v), tree_max<kCount - kCount / 2>(v + kCount / 2));
  }
}

// Exponentiates the scores of row r (0 or 1) of a thread's share of a chunk's
// accumulator (score 4 j + e belongs to row e >> 1) against the row's
// reference, 2^(score * scale_log2 - reference), and returns their sum. With
// kStore the scores become those probabilities.
template <bool kStore, int kCount>
__device__ __forceinline__ float exponentiate_row(float (&scores)[kCount], int r, float scale_log2, float reference) {
  float partial[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int j = 0; j < kCount / 4; ++j)
#pragma unroll
    for (int e = 2 * r; e < 2 * r + 2; ++e) {
      const float probability = exp2_approx(fmaf(scores[4 * j + e], scale_log2, -reference));
      if constexpr (kStore) scores[4 * j + e] = probability;
      partial[(2 * j + e) & 3] += probability;
    }
  return (partial[0] + partial[1]) + (partial[2] + partial[3]);
}

// ---------------------------------------------------------------------------
// The Hopper core (wgmma + TMA, warp-specialised) for head_dim 64, 128, 256;
// see wgmma_common.cuh for layouts. Semantics: kascade_cuda.h and the CPU
// reference (attention/kascade_ops.h).

// Copies the even or odd (`parity`) 16-byte pieces of block row `row` of a
// Hopper query tile (zeros for a padding row). Two neighbouring threads share
// a row, so a warp's copies read whole 32-byte sectors, and each thread
// divides by the group size once instead of once per piece.
template <typename T, int kDim, typename Params>  // PrefillParams or TileSelectParams
__device__ __forceinline__ void copy_query_row(const Params& p, int b, int q0, int block_queries, int kv_head,
                                               int seq_len, int row_base, int row, int parity, uint32_t tile) {
  const RowInfo info = row_info(row_base + row, q0, block_queries, p.group, kv_head, seq_len);
  const bool valid = info.query >= 0;
  const T* source = static_cast<const T*>(p.queries);
  if (valid) source += (query_row(p, b, info.query) * p.n_heads + info.head) * kDim;
#pragma unroll
  for (int i = 0; i < kDim / 16; ++i) {
    const int chunk = 2 * i + parity;
    cp_async_16(tile + hopper::swizzled(row, chunk, hopper::kQueryHalfBytes), source + chunk * 8, valid);
  }
}

template <typename T, int kDim, PrefillKeys kKeys, PrefillMode kMode, bool kOverlap>
__global__ void __launch_bounds__(hopper::Config<kDim, kMode == PrefillMode::Attend>::kThreads, 1)
    wgmma_prefill_kernel(const __grid_constant__ hopper::Params params) {
  constexpr bool kReadValues = kMode == PrefillMode::Attend;
  constexpr bool kGather = kKeys == PrefillKeys::Selected;
  using Tiles = hopper::AttentionTiles<kDim>;
  using Config = hopper::Config<kDim, kReadValues>;
  constexpr int kStages = Config::kStages;
  constexpr int kChunk = Tiles::kChunk;
  const PrefillParams& p = params.p;
  extern __shared__ __align__(128) unsigned char shared[];
  const uint32_t base = (shared_address(shared) + 1023u) & ~1023u;
  const uint32_t query_tiles = base;  // one per unit
  const uint32_t stages = base + Config::kUnits * Tiles::kQueryBytes;
  const uint32_t barriers = base + Config::kBarrierOffset;
  auto key_stage = [&](int s) { return stages + s * Config::kStageBytes; };
  auto value_stage = [&](int s) { return stages + s * Config::kStageBytes + Tiles::kTileBytes; };
  auto full_keys = [&](int s) { return barriers + 8 * s; };
  auto full_values = [&](int s) { return barriers + 8 * (kStages + s); };
  auto empty_keys = [&](int s) { return barriers + 8 * (2 * kStages + s); };
  auto empty_values = [&](int s) { return barriers + 8 * (3 * kStages + s); };

  const BlockWork work = block_work(p);
  const int b = work.b, kv_head = work.kv_head, row_base = work.row_base, q_block = work.q_block;
  const int q0 = p.query_start + q_block * p.block_queries;
  const int seq_len = p.seq_lens[b];
  if (q0 >= seq_len) return;

  const int last_query = min(q0 + p.block_queries, seq_len) - 1;
  const KeyList keys = block_keys<kKeys>(p, b, kv_head, q_block, q0, last_query);
  const int n_chunks = (keys.total + kChunk - 1) / kChunk;

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      hopper::barrier_init(full_keys(s), kGather ? 128 : 1);
      hopper::barrier_init(full_values(s), kGather ? 128 : 1);
      hopper::barrier_init(empty_keys(s), Config::kConsumerWarpgroups * 128);
      hopper::barrier_init(empty_values(s), Config::kConsumerWarpgroups * 128);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  constexpr bool kProducerWarpLast = Config::kProducerWarpLast;
  const int producer_thread = kProducerWarpLast ? int(threadIdx.x) - Config::kConsumerWarpgroups * 128 : threadIdx.x;
  if (kProducerWarpLast ? producer_thread >= 0 : producer_thread < 128) {
    // Producer warpgroup (or warp).
    if constexpr (kGather) {
      static_assert(!kProducerWarpLast, "a gathering pass has a producer warpgroup");
      hopper::registers_decrease<40>();
      const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
      const int64_t kv_offset = (int64_t(b) * p.n_kv_heads + kv_head) * p.kv_head_stride;
      const T* key_base = static_cast<const T*>(p.keys) + kv_offset;
      const T* value_base = static_cast<const T*>(p.values) + kv_offset;
      // Warp w copies the chunk rows [R w, R w + R), R = kRowsPerWarp; lane
      // l fetches the position of row R w + l % R. Copy (t, u) then moves
      // 16-byte piece `lane % kPieces` of row R w + 8 t + kRowLanes u +
      // lane / kPieces, kPieces lanes per row. The lane's source column and
      // the swizzled offsets of its rows (the swizzle repeats every 8 rows)
      // are computed once, and rows past the keys repeat the block's last key
      // (masked: their probabilities are exact zeros), so that a copy is a
      // shuffle, a multiply-add and the copy. Computed per copy, the
      // addresses took 21 instructions a copy; the producer then issued a
      // third of the block's instructions and its issue rate bounded the pass.
      constexpr int kRowsPerWarp = kChunk / 4;    // 32, or 16 in 64-key chunks
      constexpr int kPieces = kDim / 8;           // 16-byte pieces of a row
      constexpr int kRowLanes = 32 / kPieces;     // rows one warp instruction copies
      constexpr int kCopies = 8 / kRowLanes;      // copies per 8-row group
      const int piece = lane % kPieces, row_lane = lane / kPieces;
      const char* key_column = reinterpret_cast<const char*>(key_base + piece * 8);
      const char* value_column = reinterpret_cast<const char*>(value_base + piece * 8);
      uint32_t row_offsets[kCopies];
#pragma unroll
      for (int u = 0; u < kCopies; ++u)
        row_offsets[u] = hopper::swizzled(kRowsPerWarp * warp + kRowLanes * u + row_lane, piece, Tiles::kHalfBytes);
      auto copy_rows = [&](uint32_t stage, const char* column, int position) {
        for (int t = 0; t < kRowsPerWarp / 8; ++t)
#pragma unroll
          for (int u = 0; u < kCopies; ++u) {
            const int row_position = __shfl_sync(0xffffffffu, position, 8 * t + kRowLanes * u + row_lane);
            cp_async_16(stage + row_offsets[u] + 1024 * t, column + int64_t(row_position) * (kDim * sizeof(T)), true);
          }
      };
      auto position_of = [&](int c) {
        const int v = c * kChunk + kRowsPerWarp * warp + lane % kRowsPerWarp;
        return v < keys.total ? keys.position(v) : last_query;
      };
      int position = position_of(0);
      for (int c = 0; c < n_chunks; ++c) {
        const int s = c % kStages;
        if (c >= kStages) hopper::barrier_wait(empty_keys(s), ((c / kStages) + 1) & 1);
        const int next = c + 1 < n_chunks ? position_of(c + 1) : last_query;
        copy_rows(key_stage(s), key_column, position);
        hopper::barrier_arrive_on_copies(full_keys(s));
        if (c >= kStages) hopper::barrier_wait(empty_values(s), ((c / kStages) + 1) & 1);
        copy_rows(value_stage(s), value_column, position);
        hopper::barrier_arrive_on_copies(full_values(s));
        position = next;
      }
      cp_async_wait<0>();
    } else {
      if constexpr (!kProducerWarpLast) hopper::registers_decrease<24>();
      if (producer_thread == 0) {
        const int row0 = (b * p.n_kv_heads + kv_head) * params.capacity;
        for (int c = 0; c < n_chunks; ++c) {
          const int s = c % kStages;
          if (c >= kStages) hopper::barrier_wait(empty_keys(s), ((c / kStages) + 1) & 1);
          const int row = row0 + c * kChunk;
          hopper::barrier_expect_bytes(full_keys(s), Tiles::kTileBytes);
#pragma unroll
          for (int h = 0; h < Tiles::kHalves; ++h)
            hopper::tma_load_2d(key_stage(s) + h * Tiles::kHalfBytes, &params.keys_map, 64 * h, row, full_keys(s));
          if constexpr (kReadValues) {
            if (c >= kStages) hopper::barrier_wait(empty_values(s), ((c / kStages) + 1) & 1);
            hopper::barrier_expect_bytes(full_values(s), Tiles::kTileBytes);
#pragma unroll
            for (int h = 0; h < Tiles::kHalves; ++h)
              hopper::tma_load_2d(value_stage(s) + h * Tiles::kHalfBytes, &params.values_map, 64 * h, row,
                                  full_values(s));
          }
        }
      }
    }
    return;
  }

  // Consumer warpgroups.
  if constexpr (!kProducerWarpLast) hopper::registers_increase<kGather ? 232 : 240>();
  const int consumer = kProducerWarpLast ? threadIdx.x : threadIdx.x - 128;
  // Warpgroup: rows [64 group, 64 group + 64), in unit group / 2's query
  // tile. Broadcast from lane 0 so that the compiler knows it is warp-uniform
  // and keeps the shared addresses and descriptors derived from it in
  // uniform registers.
  const int group = __shfl_sync(0xffffffffu, consumer >> 7, 0);
  const int unit = Config::kUnits == 1 ? 0 : group >> 1;
  const int unit_group = group - 2 * unit;  // the warpgroup's half of its unit's rows
  const uint32_t query_tile = query_tiles + unit * Tiles::kQueryBytes;
  const int t = consumer & 127;
  const int warp = t >> 5, lane = t & 31;
  const int quad_row = lane >> 2, quad_col = lane & 3;

  // This warpgroup's 64 query rows.
  copy_query_row<T, kDim>(p, b, q0, p.block_queries, kv_head, seq_len, row_base + kBlockRows * unit,
                          64 * unit_group + (t >> 1), t & 1, query_tile);
  cp_async_commit();
  cp_async_wait<0>();
  hopper::fence_proxy_async();
  hopper::named_barrier(1 + group, 128);

  RowInfo rows[2];
#pragma unroll
  for (int r = 0; r < 2; ++r)
    rows[r] = row_info(row_base + 64 * group + 16 * warp + quad_row + 8 * r, q0, p.block_queries, p.group, kv_head,
                       seq_len);
  const int unmasked_keys = kKeys == PrefillKeys::Causal ? q0 + 1 : keys.n_selected + 1;
  // Row r sees the keys [0, visible_keys[r]) of the list: the causal prefix
  // up to its query, or the selected keys and its tile's keys up to its
  // query; none for a padding row. One compare per masked score.
  int visible_keys[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int own_keys_before = kKeys == PrefillKeys::Causal ? 0 : keys.n_selected - q0;
    visible_keys[r] = rows[r].query < 0 ? 0 : min(keys.total, own_keys_before + rows[r].query + 1);
  }
  const uint64_t query_descriptor = hopper::descriptor_k_major(query_tile + 64 * unit_group * 128);

  SoftmaxState state[2];
  float out[Tiles::kOutRegisters];
#pragma unroll
  for (int i = 0; i < Tiles::kOutRegisters; ++i) out[i] = 0.f;

  // S = Q K^T of chunk c into `scores` (issued, not waited for).
  auto issue_scores = [&](int c, float (&scores)[kChunk / 2]) {
    const int s = c % kStages;
    hopper::barrier_wait(full_keys(s), (c / kStages) & 1);
    if constexpr (kGather) hopper::fence_proxy_async();  // rows written by cp.async, read by wgmma
    const uint64_t key_descriptor = hopper::descriptor_k_major(key_stage(s));
    hopper::wgmma_fence();
#pragma unroll
    for (int k = 0; k < kDim / 16; ++k)
      hopper::wgmma_ss<T>(
          scores, hopper::descriptor_advance(query_descriptor, hopper::k_step_offset(k, hopper::kQueryHalfBytes)),
          hopper::descriptor_advance(key_descriptor, hopper::k_step_offset(k, Tiles::kHalfBytes)), k > 0);
    hopper::wgmma_commit();
  };
  // Masks the scores of chunk c that a row may not see: only in chunks that
  // reach past the block's first query (rows past the sequence are never
  // stored, so they need no mask). One compare per masked score.
  auto mask_scores = [&](int c, float (&scores)[kChunk / 2]) {
    const int key0 = c * kChunk;
    if (key0 + kChunk > unmasked_keys) {
      // Score 4 j + e is key key0 + 2 quad_col + 8 j + (e & 1) of row e >> 1.
      const int bound[2] = {visible_keys[0] - key0 - 2 * quad_col, visible_keys[1] - key0 - 2 * quad_col};
#pragma unroll
      for (int j = 0; j < kChunk / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (8 * j + (e & 1) >= bound[e >> 1]) scores[4 * j + e] = -INFINITY;
    }
  };
  // The lane's maximum score of each of its two rows, in log2 units.
  auto lane_maxima = [&](const float (&scores)[kChunk / 2], float (&lane_max)[2]) {
    constexpr int kRowValues = kChunk / 4;  // scores of one row in a lane
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float row[kRowValues];
#pragma unroll
      for (int i = 0; i < kRowValues; ++i) row[i] = scores[4 * (i >> 1) + 2 * r + (i & 1)];
      lane_max[r] = tree_max<kRowValues>(row) * p.scale_log2;
    }
  };
  // Moves row r's reference to its running maximum (the lane maxima reduced
  // over the row's four lanes); returns the factor for its accumulators.
  auto move_reference = [&](int r, float lane_max) {
    float chunk_max = lane_max;
    chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, 1));
    chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, 2));
    const float new_max = fmaxf(state[r].max, chunk_max);
    const float rescale = exp2_approx(state[r].max - SoftmaxState::finite_max(new_max));
    state[r].max = new_max;
    state[r].sum *= rescale;
    return rescale;
  };
  // Scale and exponentiate chunk c's scores against the rows' references and
  // add them to the rows' sums; scores become probabilities. A row's
  // reference is its running maximum (log2 units) as of the last time it
  // moved, and no maximum is taken first: while every row of the warpgroup
  // has a reference and its chunk sum stays within kSumLimit, the chunk is
  // done (per score one FMA, ex2 and an add), and every probability, being at
  // most its row's sum, is inside fp16's range. Otherwise (the first chunk, and
  // whenever scores climb) the chunk's products are issued again from its key
  // stage, which the caller releases only after this, the references move to
  // the running maxima and the chunk is exponentiated again. Returns whether
  // the references moved; then rescale[r] is row r's factor for its
  // accumulators. (Taking each chunk's row maxima first, one more instruction
  // per score, made the attending passes 3-8 % slower.)
  constexpr float kSumLimit = 32768.f;  // 2^15
  auto exponentiate = [&](int r, float (&scores)[kChunk / 2]) {
    return exponentiate_row<true>(scores, r, p.scale_log2, SoftmaxState::finite_max(state[r].max));
  };
  // Whether this thread's rows have references and chunk sums within the
  // limit (an overflowed sum is +inf and fails the compare too).
  auto sums_fit = [&](const float (&sums)[2]) {
    return state[0].max != -INFINITY && state[1].max != -INFINITY && sums[0] <= kSumLimit && sums[1] <= kSumLimit;
  };
  auto softmax = [&](int c, float (&scores)[kChunk / 2], float (&rescale)[2]) -> bool {
    mask_scores(c, scores);
    float sums[2] = {exponentiate(0, scores), exponentiate(1, scores)};
    // The whole warpgroup decides: issuing the products again is a
    // warpgroup instruction. Named barrier 1 + group is the warpgroup's own.
    const bool moved = hopper::named_barrier_any(1 + group, 128, !sums_fit(sums));
    if (moved) {
      issue_scores(c, scores);
      hopper::wgmma_wait<0>();
      hopper::fence_registers(scores);
      mask_scores(c, scores);
      float lane_max[2];
      lane_maxima(scores, lane_max);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        rescale[r] = move_reference(r, lane_max[r]);
        sums[r] = exponentiate(r, scores);
      }
    }
    state[0].sum += sums[0];
    state[1].sum += sums[1];
    return moved;
  };
  // The LSE pass's softmax: only the sums count, and its scores stay as they
  // are, so a chunk whose sums do not fit is summed again without issuing its
  // products again (the key stage is released before this).
  auto add_sums = [&](int c, float (&scores)[kChunk / 2]) {
    mask_scores(c, scores);
    auto chunk_sum = [&](int r) {
      return exponentiate_row<false>(scores, r, p.scale_log2, SoftmaxState::finite_max(state[r].max));
    };
    float sums[2] = {chunk_sum(0), chunk_sum(1)};
    if (!__all_sync(0xffffffffu, sums_fit(sums))) {
      float lane_max[2];
      lane_maxima(scores, lane_max);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        move_reference(r, lane_max[r]);
        sums[r] = chunk_sum(r);
      }
    }
    state[0].sum += sums[0];
    state[1].sum += sums[1];
  };
  auto rescale_out = [&](const float (&rescale)[2]) {
#pragma unroll
    for (int j = 0; j < kDim / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) out[4 * j + e] *= rescale[e >> 1];
  };
  auto pack = [&](const float (&scores)[kChunk / 2], uint32_t (&pa)[kChunk / 16][4]) {
#pragma unroll
    for (int k = 0; k < kChunk / 16; ++k)
#pragma unroll
      for (int i = 0; i < 4; ++i) pa[k][i] = ElementTraits<T>::pack2(scores[8 * k + 2 * i], scores[8 * k + 2 * i + 1]);
  };
  auto fence_fragments = [&](uint32_t (&pa)[kChunk / 16][4]) {
#pragma unroll
    for (int k = 0; k < kChunk / 16; ++k)
#pragma unroll
      for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(pa[k][i])::"memory");
  };
  // Waits for chunk c's V stage; the pass's last stage gets its rows past
  // the sequence zeroed (they may hold anything, and NaN times a zero
  // probability is NaN). Both consumer warpgroups call it for every chunk.
  auto prepare_values = [&](int c) {
    const int s = c % kStages;
    const int key0 = c * kChunk;
    hopper::barrier_wait(full_values(s), (c / kStages) & 1);
    if constexpr (kGather) {
      hopper::fence_proxy_async();
    } else if (key0 + kChunk > seq_len) {
      const int first = max(seq_len - key0, 0);
      for (int piece = consumer; piece < (kChunk - first) * (kDim / 8); piece += 256) {
        const int row = first + piece / (kDim / 8), chunk = piece % (kDim / 8);
        asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(
                         value_stage(s) + hopper::swizzled(row, chunk, Tiles::kHalfBytes)),
                     "r"(0)
                     : "memory");
      }
      hopper::fence_proxy_async();
      hopper::named_barrier(3, 256);
    }
  };
  // O += P V of chunk c (issued, not waited for; prepare_values(c) first).
  auto issue_values = [&](int c, uint32_t (&pa)[kChunk / 16][4]) {
    const uint64_t value_descriptor = hopper::descriptor_mn_major(value_stage(c % kStages), Tiles::kHalfBytes);
    fence_fragments(pa);
    hopper::fence_registers(out);
    hopper::wgmma_fence();
#pragma unroll
    for (int k = 0; k < kChunk / 16; ++k)
      hopper::wgmma_rs<T>(out, pa[k], hopper::descriptor_advance(value_descriptor, k * 16 * 128), 1);
    hopper::wgmma_commit();
  };
  // Ping-pong (kOverlap, blocks of two consumer warpgroups): they take turns issuing
  // their tensor-core work (named barriers 4 and 5 pass the turn), so one
  // warpgroup's softmax runs while the other's products occupy the tensor
  // cores instead of both doing the same thing at the same time.
  constexpr bool kTurns = kOverlap && Config::kConsumerWarpgroups == 2;
  auto turn_begin = [&] {
    if constexpr (kTurns) hopper::named_barrier(4 + group, 256);
  };
  auto turn_end = [&] {
    if constexpr (kTurns) hopper::named_barrier_arrive(5 - group, 256);
  };
  if constexpr (kTurns) {
    if (group == 1) hopper::named_barrier_arrive(4, 256);  // warpgroup 0 goes first
  }

  if constexpr (!kReadValues) {
    for (int c = 0; c < n_chunks; ++c) {
      float scores[kChunk / 2];
      turn_begin();
      issue_scores(c, scores);
      turn_end();
      hopper::wgmma_wait<0>();
      hopper::fence_registers(scores);
      hopper::barrier_arrive(empty_keys(c % kStages));
      add_sums(c, scores);
    }
  } else if constexpr (!kOverlap) {
    for (int c = 0; c < n_chunks; ++c) {
      float scores[kChunk / 2], rescale[2];
      uint32_t pa[kChunk / 16][4];
      issue_scores(c, scores);
      hopper::wgmma_wait<0>();
      hopper::fence_registers(scores);
      if (softmax(c, scores, rescale)) rescale_out(rescale);
      hopper::barrier_arrive(empty_keys(c % kStages));  // after the softmax: it may issue the products again
      pack(scores, pa);
      prepare_values(c);
      issue_values(c, pa);
      hopper::wgmma_wait<0>();
      hopper::fence_registers(out);
      fence_fragments(pa);
      hopper::barrier_arrive(empty_values(c % kStages));
    }
  } else {
    // Chunk c's Q K^T is issued together with chunk c-1's P V; its softmax
    // runs while P V is on the tensor cores, and O is rescaled once P V is done.
    uint32_t pa[kChunk / 16][4];
    {
      float scores[kChunk / 2], rescale[2];
      turn_begin();
      issue_scores(0, scores);
      turn_end();
      hopper::wgmma_wait<0>();
      hopper::fence_registers(scores);
      softmax(0, scores, rescale);
      hopper::barrier_arrive(empty_keys(0));
      pack(scores, pa);
    }
    for (int c = 1; c < n_chunks; ++c) {
      float scores[kChunk / 2], rescale[2];
      prepare_values(c - 1);
      turn_begin();
      issue_scores(c, scores);
      issue_values(c - 1, pa);
      turn_end();
      hopper::wgmma_wait<1>();
      hopper::fence_registers(scores);
      const bool moved = softmax(c, scores, rescale);
      hopper::barrier_arrive(empty_keys(c % kStages));
      hopper::wgmma_wait<0>();
      hopper::fence_registers(out);
      fence_fragments(pa);
      hopper::barrier_arrive(empty_values((c - 1) % kStages));
      if (moved) rescale_out(rescale);
      pack(scores, pa);
    }
    prepare_values(n_chunks - 1);
    turn_begin();
    issue_values(n_chunks - 1, pa);
    turn_end();
    hopper::wgmma_wait<0>();
    hopper::fence_registers(out);
    fence_fragments(pa);
    hopper::barrier_arrive(empty_values((n_chunks - 1) % kStages));
  }
  if constexpr (kTurns) {
    if (group == 0) hopper::named_barrier(4, 256);  // takes warpgroup 1's last turn hand-over
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    SoftmaxState& state_row = state[r];
    state_row.sum += __shfl_xor_sync(0xffffffffu, state_row.sum, 1);
    state_row.sum += __shfl_xor_sync(0xffffffffu, state_row.sum, 2);
    const RowInfo& info = rows[r];
    if (info.query < 0) continue;
    const float lse2 = state_row.log2_sum_exp();
    if (p.lse && quad_col == 0) p.lse[lse_index(p, b, info.head, info.query)] = lse2 * kLn2;
    if constexpr (kReadValues) {
      const float inverse = state_row.sum > 0.f ? 1.f / state_row.sum : 0.f;
      T* out_row = static_cast<T*>(p.output) + (query_row(p, b, info.query) * p.n_heads + info.head) * kDim;
#pragma unroll
      for (int j = 0; j < kDim / 8; ++j) {
        const uint32_t packed = ElementTraits<T>::pack2(out[4 * j + 2 * r] * inverse, out[4 * j + 2 * r + 1] * inverse);
        *reinterpret_cast<uint32_t*>(out_row + 8 * j + 2 * quad_col) = packed;
      }
    }
  }
}

// Anchor tile selection on the Hopper core (head_dim 64, 128, 256).
// Persistent blocks take items from an atomic counter, head by head, largest
// tiles first, so that the blocks running together read one head's keys
// from the L2; an item is SelectConfig::kUnits neighbouring tiles of one KV
// head, streamed against one sequence of key chunks (each chunk is loaded
// once for all of them). For each of its tiles the block accumulates the
// pooled scores over the keys [0, s) into a slot of s floats and
// radix-selects budget(s) of them. It computes S^T = K Q^T: warpgroup w
// takes keys [64 (w % 2), 64 (w % 2) + 64) of a 128-key chunk against the
// 128 query rows of tile w / 2, so a key's pooled score
// sum_rows 2^(s - lse_row) is a sum along one accumulator row (32 values in
// a thread, then two shuffles) and no cross-warp reduction is needed.
// Thread 0 issues the key chunks by TMA, kStages - 1 ahead. Tiles
// whose rows span several 128-row blocks take one pass over the keys per row
// block, adding into their slots.
template <typename T, int kDim>
__global__ void __launch_bounds__(hopper::SelectConfig<kDim>::kThreads, 1)
    wgmma_tile_select_kernel(const __grid_constant__ hopper::SelectParams params) {
  using Tiles = hopper::SelectTiles<kDim>;
  using Config = hopper::SelectConfig<kDim>;
  constexpr int kUnits = Config::kUnits, kStages = Config::kStages, kThreads = Config::kThreads;
  constexpr int kChunk = Tiles::kChunk;
  const TileSelectParams& p = params.p;
  extern __shared__ __align__(128) unsigned char shared[];
  __shared__ int work_item;
  const uint32_t raw = shared_address(shared);
  const uint32_t base = (raw + 1023u) & ~1023u;
  const uint32_t stages = base + kUnits * Tiles::kQueryBytes;
  const uint32_t barriers = stages + kStages * Tiles::kTileBytes;
  auto full = [&](int s) { return barriers + 8 * s; };
  auto empty = [&](int s) { return barriers + 8 * (kStages + s); };
  // The radix select runs after an item's chunks are consumed: its shared
  // state lives in the (then idle) key stages.
  static_assert(kStages * Tiles::kTileBytes >= sizeof(RadixSelectShared<kThreads>), "the radix select lives in the stages");
  auto& select_shared = *reinterpret_cast<RadixSelectShared<kThreads>*>(shared + (stages - raw));

  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      hopper::barrier_init(full(s), 1);
      hopper::barrier_init(empty(s), kThreads);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  // The warpgroup, broadcast so that it counts as warp-uniform (see
  // wgmma_prefill_kernel); its tile of the item (unit) and its half of a chunk.
  const int group = __shfl_sync(0xffffffffu, threadIdx.x >> 7, 0);
  const int unit = group >> 1, half = group & 1;
  const int t = threadIdx.x & 127, unit_thread = threadIdx.x % hopper::kConsumerThreads;
  const int warp = t >> 5, lane = t & 31;
  const int quad_row = lane >> 2, quad_col = lane & 3;
  const uint32_t query_tile = base + unit * Tiles::kQueryBytes;
  const uint64_t query_descriptor = hopper::descriptor_k_major(query_tile);
  // The call's tiles: [first_tile, max_tiles), items from the last one down;
  // tile t's set is at tile_offsets[t - first_tile]. Tile 0 has no keys.
  const int max_tiles = (p.max_seq_len + p.tile - 1) / p.tile;
  const int first_tile = p.query_start / p.tile;
  const int lowest_tile = max(first_tile, 1);
  const int items_per_head = (max_tiles - first_tile + kUnits - 1) / kUnits;
  const int items = items_per_head * p.batch * p.n_kv_heads;
  auto slot_of = [&](int u) { return p.slots + (int64_t(blockIdx.x) * kUnits + u) * p.max_seq_len; };
  float* slot = slot_of(unit);
  uint32_t issued = 0, consumed = 0;  // chunks through the pipeline so far (issued: thread 0's count)

  while (true) {
    if (threadIdx.x == 0) work_item = atomicAdd(p.work_counter, 1);
    __syncthreads();
    const int item = work_item;
    __syncthreads();
    if (item >= items) return;
    const int sequence_head = item / items_per_head;
    const int b = sequence_head / p.n_kv_heads, kv_head = sequence_head % p.n_kv_heads;
    const int seq_len = p.seq_lens[b];
    int* const head_indices = p.indices + (int64_t(b) * p.n_kv_heads + kv_head) * p.per_head;

    // Tile u of the item: the keys before it (s), its budget (k), whether it
    // takes the keys pass (k < s; a tile with k >= s keeps every key). Worked
    // out again after the pass rather than kept in registers through it.
    struct UnitPlan {
      int tile, offset, keys, budget;  // offset: the tile's index in tile_offsets
      bool has_keys, selects;
    };
    auto plan = [&](int u) {
      UnitPlan made;
      made.tile = max_tiles - 1 - kUnits * (item % items_per_head) - u;
      made.keys = made.tile * p.tile;
      made.offset = made.tile - first_tile;
      made.has_keys = made.tile >= lowest_tile && made.keys < seq_len;
      made.budget =
          made.has_keys ? static_cast<int>(p.tile_offsets[made.offset + 1] - p.tile_offsets[made.offset]) : 0;
      made.selects = made.has_keys && made.budget < made.keys;
      return made;
    };
    int stream_keys = 0, passes = 0;
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      const UnitPlan tile = plan(u);
      if (tile.has_keys && !tile.selects) {
        int* out = head_indices + p.tile_offsets[tile.offset];
        for (int i = threadIdx.x; i < tile.keys; i += kThreads) out[i] = i;
      }
      if (tile.selects) {
        const int rows = min(p.tile, seq_len - tile.keys) * p.group;
        stream_keys = max(stream_keys, tile.keys);
        passes = max(passes, (rows + kBlockRows - 1) / kBlockRows);
      }
    }
    if (stream_keys == 0) continue;
    // This warpgroup's tile.
    const UnitPlan mine = plan(unit);
    const bool my_selects = mine.selects;
    const int s = mine.keys;
    const int block_queries = min(p.tile, seq_len - s);
    const int my_passes = (block_queries * p.group + kBlockRows - 1) / kBlockRows;
    const int n_chunks = (stream_keys + kChunk - 1) / kChunk;
    const int key_row0 = (b * p.n_kv_heads + kv_head) * params.capacity;
    auto issue = [&](int c) {
      const int stage = issued % kStages;
      if (issued >= kStages) hopper::barrier_wait(empty(stage), ((issued / kStages) + 1) & 1);
      ++issued;
      const uint32_t destination = stages + stage * Tiles::kTileBytes;
      hopper::barrier_expect_bytes(full(stage), Tiles::kTileBytes);
#pragma unroll
      for (int h = 0; h < Tiles::kHalves; ++h)
        hopper::tma_load_2d(destination + h * Tiles::kHalfBytes, &params.keys_map, 64 * h, key_row0 + c * kChunk,
                            full(stage));
    };

    for (int pass = 0; pass < passes; ++pass) {
      const int row_base = pass * kBlockRows;
      const bool active = my_selects && pass < my_passes;  // this warpgroup's tile has rows in this pass
      __syncthreads();  // every wgmma of the previous pass has read the query tiles
      if (active)
        copy_query_row<T, kDim>(p, b, s, block_queries, kv_head, seq_len, row_base, unit_thread >> 1, unit_thread & 1,
                                query_tile);
      cp_async_commit();
      if (threadIdx.x == 0)
        for (int c = 0; c < min(kStages - 1, n_chunks); ++c) issue(c);
      // LSE (log2 units) of the 32 query rows (accumulator columns) this
      // thread holds; padding rows get +inf, so their probabilities are 0.
      float column_lse[32];
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const RowInfo info = row_info(row_base + 8 * j + 2 * quad_col + e, s, block_queries, p.group, kv_head, seq_len);
          column_lse[2 * j + e] = active && info.query >= 0
                                      ? p.lse[lse_index(p, b, info.head, info.query)] * kLog2e
                                      : INFINITY;
        }
      cp_async_wait<0>();
      hopper::fence_proxy_async();
      __syncthreads();

      for (int c = 0; c < n_chunks; ++c) {
        if (threadIdx.x == 0 && c + kStages - 1 < n_chunks) issue(c + kStages - 1);
        // This warpgroup computes the chunk if its tile has keys there.
        const bool computes = active && c * kChunk + 64 * half < s;
        // The earlier passes' sums of this thread's two keys, loaded before
        // the products so that the load's latency hides under them rather
        // than stalling the store after them.
        const int key0 = c * kChunk + 64 * half + 16 * warp + quad_row;  // + 8 r
        float earlier[2] = {0.f, 0.f};
        if (computes && pass > 0 && quad_col == 0) {
#pragma unroll
          for (int r = 0; r < 2; ++r)
            if (key0 + 8 * r < s) earlier[r] = slot[key0 + 8 * r];
        }
        const int stage = consumed % kStages;
        const uint32_t parity = (consumed / kStages) & 1;
        ++consumed;
        hopper::barrier_wait(full(stage), parity);
        if (!computes) {
          hopper::barrier_arrive(empty(stage));
          continue;
        }
        // `consumed` is per thread to the compiler: broadcast the stage so
        // that the descriptors stay in uniform registers.
        const uint64_t key_descriptor = hopper::descriptor_k_major(
            stages + __shfl_sync(0xffffffffu, stage, 0) * Tiles::kTileBytes + 64 * half * 128);
        float scores[64];
        hopper::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kDim / 16; ++kk)
          hopper::wgmma_ss<T>(
              scores, hopper::descriptor_advance(key_descriptor, hopper::k_step_offset(kk, Tiles::kHalfBytes)),
              hopper::descriptor_advance(query_descriptor, hopper::k_step_offset(kk, hopper::kQueryHalfBytes)), kk > 0);
        hopper::wgmma_commit();
        hopper::wgmma_wait<0>();
        hopper::fence_registers(scores);
        hopper::barrier_arrive(empty(stage));
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          float total = 0.f;
#pragma unroll
          for (int j = 0; j < 16; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              total += exp2_approx(fmaf(scores[4 * j + 2 * r + e], p.scale_log2, -column_lse[2 * j + e]));
          total += __shfl_xor_sync(0xffffffffu, total, 1);
          total += __shfl_xor_sync(0xffffffffu, total, 2);
          if (quad_col == 0 && key0 + 8 * r < s) slot[key0 + 8 * r] = pass == 0 ? total : earlier[r] + total;
        }
      }
    }
    __syncthreads();  // the slots are complete; the key stages are idle
#pragma unroll
    for (int u = 0; u < kUnits; ++u) {
      const UnitPlan tile = plan(u);
      if (tile.selects)
        select_top_k_block<kThreads, 16>(slot_of(u), tile.keys, tile.budget,
                                         head_indices + p.tile_offsets[tile.offset], select_shared);
    }
    hopper::fence_proxy_async();  // generic writes to the stages before the next TMA writes
    __syncthreads();
  }
}

// The grid that block_work decodes: the query blocks of the call's queries.
dim3 prefill_grid(const PrefillParams& p) {
  const int query_blocks = (p.max_seq_len - p.query_start + p.block_queries - 1) / p.block_queries;
  return dim3(p.row_blocks * query_blocks, p.n_kv_heads, p.batch);
}

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled through the runtime's driver entry point (no -lcuda).
EncodeTiled tensor_map_encoder() {
  static const EncodeTiled encode = [] {
    void* function = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    check_cuda(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &function, 12000, cudaEnableDefault, &found),
               "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
    if (found != cudaDriverEntryPointSuccess || function == nullptr)
      unsupported("driver entry point cuTensorMapEncodeTiled, status", int(found));
    return reinterpret_cast<EncodeTiled>(function);
  }();
  return encode;
}

// [rows][head_dim] elements, boxes of 64 x chunk_keys, 128-byte swizzle;
// rows past the end read as zeros.
CUtensorMap kv_tensor_map(const void* data, DType dtype, int64_t rows, int head_dim, int chunk_keys) {
  CUtensorMap map;
  std::memset(&map, 0, sizeof(map));
  const cuuint64_t dims[2] = {cuuint64_t(head_dim), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(head_dim) * 2};
  const cuuint32_t box[2] = {64, cuuint32_t(chunk_keys)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult result = tensor_map_encoder()(
      &map, dtype == DType::F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
      const_cast<void*>(data), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) unsupported("cuTensorMapEncodeTiled result", int(result));
  return map;
}

template <typename T, int kDim, PrefillKeys kKeys, PrefillMode kMode, bool kOverlap>
const KernelInfo& wgmma_kernel_info() {
  using Config = hopper::Config<kDim, kMode == PrefillMode::Attend>;
  static const KernelInfo info =
      configure_kernel(reinterpret_cast<const void*>(&wgmma_prefill_kernel<T, kDim, kKeys, kMode, kOverlap>),
                Config::kSharedBytes, Config::kThreads, "configure wgmma_prefill_kernel");
  return info;
}

// Attending passes overlap chunk c's Q K^T and softmax with chunk c-1's P V
// unless KASCADE_WGMMA_OVERLAP=0 (A/B runs).
bool overlap_enabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("KASCADE_WGMMA_OVERLAP");
    return value == nullptr || std::string_view(value) != "0";
  }();
  return enabled;
}

template <typename T, int kDim>
const KernelInfo& wgmma_kernel_for_dim(PrefillKeys keys, PrefillMode mode) {
  const bool overlap = overlap_enabled();
  if (keys == PrefillKeys::Selected) {
    if (mode != PrefillMode::Attend) unsupported("prefill mode (LSE of a selected-key pass)", int(mode));
    return overlap ? wgmma_kernel_info<T, kDim, PrefillKeys::Selected, PrefillMode::Attend, true>()
                   : wgmma_kernel_info<T, kDim, PrefillKeys::Selected, PrefillMode::Attend, false>();
  }
  if (mode == PrefillMode::LseOnly)
    return overlap ? wgmma_kernel_info<T, kDim, PrefillKeys::Causal, PrefillMode::LseOnly, true>()
                   : wgmma_kernel_info<T, kDim, PrefillKeys::Causal, PrefillMode::LseOnly, false>();
  return overlap ? wgmma_kernel_info<T, kDim, PrefillKeys::Causal, PrefillMode::Attend, true>()
                 : wgmma_kernel_info<T, kDim, PrefillKeys::Causal, PrefillMode::Attend, false>();
}

template <typename T>
const KernelInfo& wgmma_kernel_for_type(int head_dim, PrefillKeys keys, PrefillMode mode) {
  return with_head_dim(head_dim, [&](auto dim) -> const KernelInfo& {
    return wgmma_kernel_for_dim<T, decltype(dim)::value>(keys, mode);
  });
}

// Keys per pipeline stage of the attention passes (hopper::AttentionTiles).
int attention_chunk_keys(int head_dim) {
  return with_head_dim(head_dim, [](auto dim) { return hopper::AttentionTiles<decltype(dim)::value>::kChunk; });
}

void launch_wgmma_prefill(const PrefillParams& params, DType dtype, int head_dim, PrefillKeys keys, PrefillMode mode,
                          cudaStream_t stream) {
  const KernelInfo& info = dtype == DType::F16 ? wgmma_kernel_for_type<__half>(head_dim, keys, mode)
                                               : wgmma_kernel_for_type<__nv_bfloat16>(head_dim, keys, mode);
  hopper::Params hp;
  std::memset(&hp.keys_map, 0, sizeof(hp.keys_map));
  std::memset(&hp.values_map, 0, sizeof(hp.values_map));
  hp.p = params;
  hp.capacity = static_cast<int>(params.kv_head_stride / head_dim);
  if (keys == PrefillKeys::Causal) {
    hp.p.block_queries = causal_block_queries(params.group, head_dim, mode);
    const int64_t rows = int64_t(params.batch) * params.n_kv_heads * hp.capacity;
    if (rows >= (int64_t(1) << 31)) unsupported("KV rows for the tensor map", rows);
    const int chunk_keys = attention_chunk_keys(head_dim);
    hp.keys_map = kv_tensor_map(params.keys, dtype, rows, head_dim, chunk_keys);
    if (mode == PrefillMode::Attend) hp.values_map = kv_tensor_map(params.values, dtype, rows, head_dim, chunk_keys);
  }
  const dim3 grid = prefill_grid(hp.p);
  void* arguments[] = {&hp};
  check_cuda(cudaLaunchKernel(info.kernel, grid, dim3(info.threads), arguments, info.shared_bytes, stream),
             "launch wgmma_prefill_kernel");
}

template <typename T, int kDim>
const KernelInfo& wgmma_tile_select_kernel_info() {
  static const KernelInfo info = configure_kernel(reinterpret_cast<const void*>(&wgmma_tile_select_kernel<T, kDim>),
                                           hopper::SelectConfig<kDim>::kSharedBytes,
                                           hopper::SelectConfig<kDim>::kThreads, "configure wgmma_tile_select_kernel");
  return info;
}

template <typename T>
const KernelInfo& wgmma_tile_select_kernel_for_type(int head_dim) {
  return with_head_dim(head_dim, [](auto dim) -> const KernelInfo& {
    return wgmma_tile_select_kernel_info<T, decltype(dim)::value>();
  });
}

const KernelInfo& tile_select_kernel_for(DType dtype, int head_dim) {
  return dtype == DType::F16 ? wgmma_tile_select_kernel_for_type<__half>(head_dim)
                             : wgmma_tile_select_kernel_for_type<__nv_bfloat16>(head_dim);
}

}  // namespace

void launch_prefill_attention(const PrefillParams& params, DType dtype, int head_dim, PrefillKeys keys,
                              PrefillMode mode, cudaStream_t stream) {
  launch_wgmma_prefill(params, dtype, head_dim, keys, mode, stream);
}

int causal_block_queries(int group, int head_dim, PrefillMode mode) {
  const int block_rows = with_head_dim(head_dim, [&](auto dim) {
    constexpr int kDim = decltype(dim)::value;
    return mode == PrefillMode::Attend ? hopper::Config<kDim, true>::kBlockRows
                                       : hopper::Config<kDim, false>::kBlockRows;
  });
  return std::max(1, block_rows / group);
}

int tile_select_slots(DType dtype, int head_dim) {
  const int units = with_head_dim(head_dim, [](auto dim) { return hopper::SelectConfig<decltype(dim)::value>::kUnits; });
  return multiprocessor_count() * tile_select_kernel_for(dtype, head_dim).blocks_per_sm * units;
}

void launch_tile_select(const TileSelectParams& params, DType dtype, int head_dim, cudaStream_t stream) {
  const KernelInfo& info = tile_select_kernel_for(dtype, head_dim);
  const int n_blocks = multiprocessor_count() * info.blocks_per_sm;
  check_cuda(cudaMemsetAsync(params.work_counter, 0, sizeof(int), stream), "cudaMemsetAsync(work counter)");
  hopper::SelectParams hp;
  hp.p = params;
  hp.capacity = static_cast<int>(params.kv_head_stride / head_dim);
  const int64_t rows = int64_t(params.batch) * params.n_kv_heads * hp.capacity;
  if (rows >= (int64_t(1) << 31)) unsupported("KV rows for the tensor map", rows);
  hp.keys_map = kv_tensor_map(params.keys, dtype, rows, head_dim, hopper::kSelectChunkKeys);
  void* arguments[] = {&hp};
  check_cuda(cudaLaunchKernel(info.kernel, dim3(n_blocks), dim3(info.threads), arguments, info.shared_bytes, stream),
             "launch wgmma_tile_select_kernel");
}

}  // namespace kascade::cuda::detail

