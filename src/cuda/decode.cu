// Decode kernels: split-KV flash decoding on tensor cores, dense or over a
// gathered key list, optionally writing raw scores or computing scores only;
// the split merge; and the anchor's pooled score + exact top-k selection.
//
// One block serves up to 16 query heads of one KV group (the g heads fill the
// rows of an m16n8k16 tile; in the sketch-scoring pass its columns, eight to a
// tile: SketchScorer), so each K/V row is read once for the group. Its
// warps (two or four) stream disjoint chunks of 16 keys through their own cp.async
// pipelines (16-byte copies, swizzled tiles), keep one online-softmax state
// each, and merge at the end; splits along the keys fill the machine at small
// batch and are folded by the merge kernel, launched as a programmatic
// dependent so that its launch overlaps the attention pass.
#include <cooperative_groups.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cuda/device_common.cuh"
#include "cuda/kernels.h"
#include "cuda/radix_select.cuh"
#include "cuda/softmax_state.cuh"

namespace kascade::cuda::detail {
namespace {

constexpr int kChunkKeys = 16;  // keys per pipeline stage of a warp
constexpr int kRowsPerBlock = 16;
constexpr float kLn2 = 0.6931471805599453f;

template <int kHeadDim, DecodeMode kMode>
struct DecodeConfig {
  static constexpr bool kReadValues = decode_attends(kMode);
  static constexpr bool kSketch = kMode == DecodeMode::SketchScores;
  // A sketched chunk lands where the key tile would: its codes, then (a
  // block's first chunk) the block's lo and step; SketchScorer reads them
  // from there. Sharing the tile's space keeps four blocks a multiprocessor.
  static constexpr int kCodeBytes = kChunkKeys * kHeadDim / 2;
  // Warps per block. Passes that read V use two, so that four blocks fit a
  // multiprocessor and batch 64 x 8 KV heads runs in one wave (four-warp
  // blocks fit two per multiprocessor: two waves, each paying a block's
  // start-up and drain); the K-only pass already fits four blocks of four.
  static constexpr int kWarps = kReadValues ? 2 : 4;
  static constexpr int kThreads = kWarps * 32;
  // Sketch passes up to 128 channels keep four blocks a multiprocessor (their
  // registers capped at 128 a thread; bf16 asked for 132).
  static constexpr int kMinBlocks = kSketch && kHeadDim <= 128 ? 4 : 1;
  static constexpr int kStages = kHeadDim <= 128 ? 3 : 2;
  static constexpr int kTileBytes = kChunkKeys * kHeadDim * 2;
  static constexpr int kStageBytes = kTileBytes * (kReadValues ? 2 : 1);
  static_assert(kCodeBytes + 2 * kHeadDim * 2 <= kTileBytes, "a sketched chunk fits the key tile");
  static constexpr int kQueryBytes = kRowsPerBlock * kHeadDim * 2;
  static constexpr int kPipelineBytes = kWarps * kStages * kStageBytes;
  // The end-of-block merge reuses the pipeline buffers for per-warp outputs.
  static constexpr int kMergeBytes = kReadValues ? kWarps * kRowsPerBlock * kHeadDim * 4 : 0;
  // Per warp and row: softmax max and sum, smallest score (score modes).
  static constexpr int kStateBytes = kWarps * kRowsPerBlock * 3 * 4;
  static constexpr int kSharedBytes =
      kQueryBytes + (kPipelineBytes > kMergeBytes ? kPipelineBytes : kMergeBytes) + kStateBytes;
  // 16-byte pieces of one tile each lane copies.
  static constexpr int kPiecesPerLane = kChunkKeys * (kHeadDim / 8) / 32;
};

// The smallest and largest score of a row over this split (empty: +inf, -inf),
// from the per-warp states; the pooled selection bounds its keys with them.
template <int kWarps>
__device__ __forceinline__ void write_score_bounds(const DecodeParams& p, const float* states, int64_t head_row0,
                                                   int row, int split, float row_max) {
  float smallest = INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) smallest = fminf(smallest, states[(w * kRowsPerBlock + row) * 3 + 2]);
  float* bounds = p.score_bounds + ((head_row0 + row) * p.splits + split) * 2;
  bounds[0] = smallest;
  bounds[1] = row_max;
}

// The 16-bit pairs (e_k, e_k+4), k = 0..3, of eight 16-bit elements e0..e7.
__device__ __forceinline__ void interleave_pairs(uint4 v, uint32_t pairs[4]) {
  pairs[0] = __byte_perm(v.x, v.z, 0x5410);
  pairs[1] = __byte_perm(v.x, v.z, 0x7632);
  pairs[2] = __byte_perm(v.y, v.w, 0x5410);
  pairs[3] = __byte_perm(v.y, v.w, 0x7632);
}

// Scores from the 4-bit key sketch on the tensor cores, without widening keys
// in shared memory, keys in the tile's rows and the query heads (at most
// kMaxHeadsPerSketchBlock) in its columns: one product per 16 keys and 16
// channels for a group of up to eight (the 1.5B's 6, the 8B's 4), where heads
// as rows (16, mostly empty) took two, and a lane keeps four scores a chunk
// instead of eight. key_sketch.h's key is lo + code * step per channel, so
// q.k = q.lo + (q * step).code: per 64-key block a warp folds the block's
// step into its query fragments and computes q.lo once; per chunk each lane
// turns its code words into A fragments by masking nibbles into the mantissa
// of an offset (1024 in fp16, 128 in bf16: exact halves offset + code), which
// the block's bias takes off again. A dot product takes any channel order that
// query and key share: lane t of a quad holds channels [t, t + 1) * kHeadDim / 4
// of its keys, the kHeadDim / 8 code bytes it loads in one piece. In k-step
// 2w + h its A pairs are the word w's nibbles (2h, 2h + 4) and (2h + 1, 2h + 5),
// so its B pairs are the query's channels c, c + 4 and c + 1, c + 5 from
// c = 8 * (t * kWords + w) + 2h.
//
// Accumulator layout: s[e] is key g + 8 * (e >> 1) of the chunk and head
// 2t + (e & 1) of the block, for lane 4g + t.
template <typename T, int kHeadDim>
struct SketchScorer {
  static constexpr int kWords = kHeadDim / 32;  // code words (8 channels) of a lane per key
  static constexpr int kSteps = kHeadDim / 16;
  static constexpr bool kHalf = std::is_same_v<T, __half>;
  static constexpr uint32_t kOffsetBits = kHalf ? 0x64006400u : 0x43004300u;  // offset, offset
  static constexpr uint32_t kMinusOffsetBits = kOffsetBits | 0x80008000u;

  uint32_t query[kSteps][2];     // B fragments of head g, in the lane's channel order
  uint32_t weighted[kSteps][2];  // the same times the block's step
  float bias[2];                 // heads 2t and 2t + 1: q.lo - offset * sum(q * step)

  // Head g's fragments from the query's swizzled tile (zero rows past the group).
  __device__ __forceinline__ void load_query(const unsigned char* tile, int lane) {
    const int row = lane >> 2, t = lane & 3;
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
      uint32_t pairs[4];
      interleave_pairs(*reinterpret_cast<const uint4*>(tile + SwizzledTile<kHeadDim>::offset(row, t * kWords + w)),
                       pairs);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        query[2 * w + h][0] = pairs[2 * h];
        query[2 * w + h][1] = pairs[2 * h + 1];
      }
    }
  }

  // A block's lo and step (fp16, kHeadDim each, as staged): the weighted
  // fragments and the bias (lo is every row of its products' A).
  __device__ __forceinline__ void fold_block(const __half* params, int lane) {
    const int t = lane & 3;
    float d[4] = {0.f, 0.f, 0.f, 0.f}, offset[4] = {0.f, 0.f, 0.f, 0.f};  // q.lo; -offset * sum(q * step)
    const uint32_t minus_offset[4] = {kMinusOffsetBits, kMinusOffsetBits, kMinusOffsetBits, kMinusOffsetBits};
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
      uint32_t lo[4], step[4];
      interleave_pairs(*reinterpret_cast<const uint4*>(params + 8 * (t * kWords + w)), lo);
      interleave_pairs(*reinterpret_cast<const uint4*>(params + kHeadDim + 8 * (t * kWords + w)), step);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int k = 2 * w + h;
        weighted[k][0] = multiply(query[k][0], step[2 * h]);
        weighted[k][1] = multiply(query[k][1], step[2 * h + 1]);
        const uint32_t lo_rows[4] = {as_element(lo[2 * h]), as_element(lo[2 * h]), as_element(lo[2 * h + 1]),
                                     as_element(lo[2 * h + 1])};
        mma_16816<T>(d, lo_rows, query[k][0], query[k][1]);
        mma_16816<T>(offset, minus_offset, weighted[k][0], weighted[k][1]);
      }
    }
    bias[0] = d[0] + offset[0];
    bias[1] = d[1] + offset[1];
  }

  // Scores of the 16 keys of a staged chunk of codes (rows of kHeadDim / 2
  // bytes). Even and odd k-steps go to two accumulators, so that no product
  // waits on the one before.
  __device__ __forceinline__ void score_chunk(const unsigned char* codes, int lane, float s[4]) const {
    const int t = lane & 3;
    uint32_t words[2][kWords];  // keys g and g + 8
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const unsigned char* row = codes + (8 * j + (lane >> 2)) * (kHeadDim / 2) + t * kWords * 4;
      if constexpr (kWords % 4 == 0) {
#pragma unroll
        for (int w = 0; w < kWords; w += 4) {
          const uint4 four = *reinterpret_cast<const uint4*>(row + 4 * w);
          words[j][w] = four.x, words[j][w + 1] = four.y, words[j][w + 2] = four.z, words[j][w + 3] = four.w;
        }
      } else {
#pragma unroll
        for (int w = 0; w < kWords; w += 2) {
          const uint2 two = *reinterpret_cast<const uint2*>(row + 4 * w);
          words[j][w] = two.x, words[j][w + 1] = two.y;
        }
      }
    }
    float odd[4] = {0.f, 0.f, 0.f, 0.f};
    s[0] = s[2] = bias[0];
    s[1] = s[3] = bias[1];
#pragma unroll
    for (int w = 0; w < kWords; ++w)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t a[4] = {((words[0][w] >> (8 * h)) & 0x000f000fu) | kOffsetBits,
                               ((words[1][w] >> (8 * h)) & 0x000f000fu) | kOffsetBits,
                               ((words[0][w] >> (8 * h + 4)) & 0x000f000fu) | kOffsetBits,
                               ((words[1][w] >> (8 * h + 4)) & 0x000f000fu) | kOffsetBits};
        mma_16816<T>(h == 0 ? s : odd, a, weighted[2 * w + h][0], weighted[2 * w + h][1]);
      }
#pragma unroll
    for (int e = 0; e < 4; ++e) s[e] += odd[e];
  }

  // Exact scores of the 16 keys of a staged key tile (the block of the
  // newest key), in the same layout: the query tile's rows serve as B.
  __device__ __forceinline__ static void score_exact_chunk(uint32_t key_tile, uint32_t query_tile, int lane,
                                                           float s[4]) {
#pragma unroll
    for (int k_step = 0; k_step < kSteps; ++k_step) {
      uint32_t a[4], b[4];
      load_a_fragment<kHeadDim>(key_tile, 0, k_step, lane, a);
      load_key_fragments<kHeadDim>(query_tile, 0, k_step, lane, b);  // b[0..1]: query rows 0-7
      mma_16816<T>(s, a, b[0], b[1]);
    }
  }

 private:
  // a * b per 16-bit element; b holds fp16 (the sketch's step).
  static __device__ __forceinline__ uint32_t multiply(uint32_t a, uint32_t b) {
    const __half2 step = *reinterpret_cast<const __half2*>(&b);
    if constexpr (kHalf) {
      const __half2 product = __hmul2(*reinterpret_cast<const __half2*>(&a), step);
      return *reinterpret_cast<const uint32_t*>(&product);
    } else {
      const float2 x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&a)), y = __half22float2(step);
      return ElementTraits<T>::pack2(x.x * y.x, x.y * y.y);
    }
  }
  // An fp16 pair (the sketch's lo) as a pair of T.
  static __device__ __forceinline__ uint32_t as_element(uint32_t pair) {
    if constexpr (kHalf) {
      return pair;
    } else {
      const float2 x = __half22float2(*reinterpret_cast<const __half2*>(&pair));
      return ElementTraits<T>::pack2(x.x, x.y);
    }
  }
};

// A sketch pass's softmax states and smallest scores, one per lane and head
// column of the accumulator layout (keys g and g + 8 of every chunk), folded
// over the lanes of a column at the end: no reduction across lanes per chunk.
struct SketchColumnStates {
  SoftmaxState state[2];                    // heads 2t, 2t + 1
  float smallest[2] = {INFINITY, INFINITY};

  // Scores in log2 units, -inf for keys past the split.
  __device__ __forceinline__ void add(const float s[4]) {
#pragma unroll
    for (int parity = 0; parity < 2; ++parity) {
      const float first = s[parity], second = s[2 + parity];
      SoftmaxState& st = state[parity];
      const float new_max = fmaxf(st.max, fmaxf(first, second));
      const float reference = SoftmaxState::finite_max(new_max);
      st.sum = st.sum * exp2_approx(st.max - reference) + exp2_approx(first - reference) +
               exp2_approx(second - reference);
      st.max = new_max;
      // -inf marks a key past the split: it does not lower the smallest score.
      if (first != -INFINITY) smallest[parity] = fminf(smallest[parity], first);
      if (second != -INFINITY) smallest[parity] = fminf(smallest[parity], second);
    }
  }

  // Folds the eight lanes of each column (lanes t, t + 4, ...) and writes
  // head 2t + parity's (max, sum, smallest) to states[head * 3].
  __device__ __forceinline__ void store(float* states, int lane) {
#pragma unroll
    for (int parity = 0; parity < 2; ++parity) {
      SoftmaxState& st = state[parity];
#pragma unroll
      for (int offset = 4; offset < 32; offset <<= 1) {
        const SoftmaxState other{__shfl_xor_sync(0xffffffffu, st.max, offset),
                                 __shfl_xor_sync(0xffffffffu, st.sum, offset)};
        float self_scale, other_scale;
        st.merge(other, self_scale, other_scale);
        smallest[parity] = fminf(smallest[parity], __shfl_xor_sync(0xffffffffu, smallest[parity], offset));
      }
      if (lane < 4) {
        float* at = states + (2 * lane + parity) * 3;
        at[0] = st.max;
        at[1] = st.sum;
        at[2] = smallest[parity];
      }
    }
  }
};

// Which keys a decode pass attends: every cached key, the listed ones
// (DecodeParams::indices), or a held step's (DecodeParams::selected_lens).
enum class Keys { All, Listed, Held };

// The position of key v of a held step's virtual list, or -1 where that entry
// is no key of attention/kascade_ops.h's held_keys. The list is the selection
// S (m ascending keys of a step with selected_keys keys), then S shifted by
// age (entry m + i: S[i] + age, dropped where it reaches selected_keys or is
// already in S), then the keys added since: held_keys' keys, each once, in
// another order. S[i] + age can only equal S[j] for i < j <= i + age (the
// keys are distinct and ascending), so a binary search over those settles it.
__device__ __forceinline__ int held_position(const int* selection, int m, int selected_keys, int age, int v) {
  if (v >= 2 * m) return selected_keys + (v - 2 * m);
  const int i = v < m ? v : v - m;
  const int key = __ldg(selection + i);
  if (key < 0 || key >= selected_keys) return -1;  // not a key of the selecting step
  if (v < m) return key;
  const int shifted = key + age;
  if (age == 0 || shifted >= selected_keys) return -1;  // from selected_keys on the keys are the new ones
  int low = i + 1, high = min(i + age, m - 1);
  while (low <= high) {
    const int mid = (low + high) >> 1;
    const int other = __ldg(selection + mid);
    if (other == shifted) return -1;
    if (other < shifted) low = mid + 1; else high = mid - 1;
  }
  return shifted;
}

template <typename T, int kHeadDim, DecodeMode kMode, Keys kKeys>
__global__ void __launch_bounds__(DecodeConfig<kHeadDim, kMode>::kThreads, DecodeConfig<kHeadDim, kMode>::kMinBlocks)
    decode_attention_kernel(const DecodeParams p) {
  constexpr bool kSparse = kKeys != Keys::All;
  constexpr bool kHeld = kKeys == Keys::Held;
  using Config = DecodeConfig<kHeadDim, kMode>;
  constexpr int kDecodeWarps = Config::kWarps;
  constexpr int kDecodeThreads = Config::kThreads;
  using Tile = SwizzledTile<kHeadDim>;
  constexpr int kChunks = kHeadDim / 8;
  extern __shared__ __align__(128) unsigned char shared[];
  unsigned char* query_tile = shared;
  unsigned char* pipeline = shared + Config::kQueryBytes;
  float* states = reinterpret_cast<float*>(
      pipeline + (Config::kPipelineBytes > Config::kMergeBytes ? Config::kPipelineBytes : Config::kMergeBytes));

  // An attending pass lets the split merge after it launch now: the merge's
  // blocks wait for this grid to complete, but their launch and scheduling
  // overlap it. A score pass does not: the pooled selection after it (large
  // blocks), resident early, would take the slots of blocks of this grid,
  // sized to fill the device in one wave; it launches as this grid's blocks exit.
  // This grid may itself be a programmatic dependent (the sparse pass, of the
  // pooled selection): nothing is read before its prerequisite has completed.
  if constexpr (Config::kReadValues) asm volatile("griddepcontrol.launch_dependents;");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int split = blockIdx.x;
  const int kv_head = blockIdx.y / p.head_blocks;
  const int first_in_group = (blockIdx.y % p.head_blocks) * p.heads_per_block;
  const int n_rows = min(p.heads_per_block, p.group - first_in_group);
  const int head0 = kv_head * p.group + first_in_group;
  const int b = blockIdx.z;

  const int set_head = kSparse && p.head_map ? p.head_map[kv_head] : kv_head;
  // A held step's virtual list: its selection, the selection shifted, the new keys.
  const int held_count = kHeld ? int(min(int64_t(p.counts[b]), p.index_stride)) : 0;
  const int held_selected_keys = kHeld ? min(p.selected_lens[b], p.seq_lens[b]) : 0;
  const int held_age = kHeld ? p.seq_lens[b] - held_selected_keys : 0;
  const int n_keys = !kSparse ? p.seq_lens[b] : kHeld ? 2 * held_count + held_age : p.counts[b];
  // Keys below this come from the sketch (key_sketch.h: the block of the
  // newest key stays exact). Sketch passes split at block bounds and give a
  // warp whole blocks, four chunks in a row (chunk_start), so that a block's
  // lo/step are staged and folded into the query once.
  const int sketched_end = Config::kSketch && n_keys > 0 ? (n_keys - 1) / kSketchBlock * kSketchBlock : 0;
  constexpr int kSplitUnit = Config::kSketch ? kSketchBlock : kChunkKeys;
  const int per_split = ((n_keys + p.splits - 1) / p.splits + kSplitUnit - 1) / kSplitUnit * kSplitUnit;
  const int begin = split * per_split;
  const int end = min(n_keys, begin + per_split);
  const int n_chunks = begin < end ? (end - begin + kChunkKeys - 1) / kChunkKeys : 0;
  constexpr int kChunksPerBlock = kSketchBlock / kChunkKeys;
  int my_chunks = n_chunks > warp ? (n_chunks - warp + kDecodeWarps - 1) / kDecodeWarps : 0;
  if constexpr (Config::kSketch) {
    const int n_blocks = (n_chunks + kChunksPerBlock - 1) / kChunksPerBlock;  // chunks past `end` score nothing
    my_chunks = n_blocks > warp ? kChunksPerBlock * ((n_blocks - warp + kDecodeWarps - 1) / kDecodeWarps) : 0;
  }
  // The first key of this warp's i-th chunk.
  auto chunk_start = [&](int i) {
    if constexpr (Config::kSketch)
      return begin + (((i / kChunksPerBlock) * kDecodeWarps + warp) * kChunksPerBlock + i % kChunksPerBlock) * kChunkKeys;
    return begin + (warp + kDecodeWarps * i) * kChunkKeys;
  };

  // Element offset of the cache row of `position` (paged: through the page table).
  const int64_t kv_offset = (int64_t(b) * p.n_kv_heads + kv_head) * p.kv_head_stride;
  const int* page_row = p.page_table ? p.page_table + b * p.page_table_stride : nullptr;
  const int page_mask = (1 << p.page_shift) - 1;
  auto row_offset = [&](int position) -> int64_t {
    if (!page_row) return kv_offset + int64_t(position) * kHeadDim;
    const int64_t page = __ldg(page_row + (position >> p.page_shift));
    return (((page * p.n_kv_heads + kv_head) << p.page_shift) + (position & page_mask)) * kHeadDim;
  };
  const T* key_base = static_cast<const T*>(p.keys);
  const T* value_base = static_cast<const T*>(p.values);
  const int* index_row = nullptr;
  if constexpr (kSparse) {
    index_row = p.indices + (int64_t(b) * p.n_kv_heads + set_head) * p.index_stride;
  }
  unsigned char* warp_pipeline = pipeline + warp * Config::kStages * Config::kStageBytes;

  // Byte offset of the sketch codes of `position`, and element offset of the
  // lo/step pair of its block, laid out as the cache.
  auto sketch_offsets = [&](int position, int64_t& codes, int64_t& params) {
    if (!page_row) {
      const int64_t capacity = p.kv_head_stride / kHeadDim;
      const int64_t head = int64_t(b) * p.n_kv_heads + kv_head;
      codes = (head * capacity + position) * (kHeadDim / 2);
      params = (head * (capacity / kSketchBlock) + position / kSketchBlock) * 2 * kHeadDim;
      return;
    }
    const int64_t page = __ldg(page_row + (position >> p.page_shift));
    const int in_page = position & page_mask;
    codes = (((page * p.n_kv_heads + kv_head) << p.page_shift) + in_page) * (kHeadDim / 2);
    params = ((page * p.n_kv_heads + kv_head) * ((page_mask + 1) / kSketchBlock) + in_page / kSketchBlock) * 2 * kHeadDim;
  };

  // Sparse: lane l holds the position of key l of the warp's next chunk,
  // loaded one chunk ahead so the gather never waits on the index read. The
  // first load is issued before the query copy so that the two overlap. A
  // held list's entries that are no key hold -1.
  auto load_positions = [&](int i) {
    const int key = begin + (warp + kDecodeWarps * i) * kChunkKeys + (lane & (kChunkKeys - 1));
    if (i >= my_chunks || key >= end) return 0;
    if constexpr (kHeld) return held_position(index_row, held_count, held_selected_keys, held_age, key);
    return __ldg(index_row + key);
  };
  // Held: which keys of each chunk in the pipeline are keys (bit k of 16-bit
  // field i % kStages: key k of chunk i), set as the chunk is issued.
  static_assert(Config::kStages * kChunkKeys <= 64, "the held masks fit 64 bits");
  uint64_t held_masks = 0;
  int next_positions = 0;
  if constexpr (kSparse) next_positions = load_positions(0);

  // The g query rows (zero rows pad the tile to 16).
  const T* query = static_cast<const T*>(p.queries) + (int64_t(b) * p.n_heads + head0) * kHeadDim;
  for (int piece = threadIdx.x; piece < kRowsPerBlock * kChunks; piece += kDecodeThreads) {
    const int row = piece / kChunks, chunk = piece % kChunks;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (row < n_rows) value = *reinterpret_cast<const uint4*>(query + row * kHeadDim + chunk * 8);
    *reinterpret_cast<uint4*>(query_tile + Tile::offset(row, chunk)) = value;
  }
  __syncthreads();

  // Issues the copies of this warp's i-th chunk (called for i = 0, 1, ... in
  // order); always commits a group so that the wait counts stay uniform.
  auto issue = [&](int i) {
    if (i < my_chunks) {
      const int key0 = chunk_start(i);
      unsigned char* stage = warp_pipeline + (i % Config::kStages) * Config::kStageBytes;
      const uint32_t key_tile = shared_address(stage);
      const uint32_t value_tile = key_tile + Config::kTileBytes;
      int my_position = 0;
      if constexpr (kSparse) {
        my_position = next_positions;
        next_positions = load_positions(i + 1);
      }
      if constexpr (kHeld) {
        const int field = kChunkKeys * (i % Config::kStages);
        const uint64_t keys = __ballot_sync(0xffffffffu, my_position >= 0) & ((1u << kChunkKeys) - 1);
        held_masks = (held_masks & ~(uint64_t((1u << kChunkKeys) - 1) << field)) | (keys << field);
      }
      if (Config::kSketch && key0 < sketched_end) {
        // Codes of the 16 keys (16-byte pieces of rows), then, with a block's
        // first chunk, its lo and step.
        const uint32_t staging = key_tile;
        int64_t codes = 0, params = 0;
        sketch_offsets(key0, codes, params);
        constexpr int kCodePieces = Config::kCodeBytes / 16, kParamPieces = 2 * kHeadDim * 2 / 16;
        const int pieces = kCodePieces + (i % kChunksPerBlock == 0 ? kParamPieces : 0);
        for (int piece = lane; piece < pieces; piece += 32) {
          if (piece < kCodePieces)
            cp_async_16(staging + piece * 16, p.sketch_codes + codes + piece * 16, true);
          else
            cp_async_16(staging + piece * 16, p.sketch_params + params + (piece - kCodePieces) * 8, true);
        }
        cp_async_commit();
        return;
      }
#pragma unroll
      for (int e = 0; e < Config::kPiecesPerLane; ++e) {
        const int piece = lane + 32 * e;
        const int row = piece / kChunks, chunk = piece % kChunks;
        int position = key0 + row;
        if constexpr (kSparse) position = __shfl_sync(0xffffffffu, my_position, row);
        const bool valid = key0 + row < end && position >= 0;
        if (!valid) position = 0;
        const int64_t element = row_offset(position) + chunk * 8;
        cp_async_16(key_tile + Tile::offset(row, chunk), key_base + element, valid);
        if constexpr (Config::kReadValues)
          cp_async_16(value_tile + Tile::offset(row, chunk), value_base + element, valid);
      }
    }
    cp_async_commit();
  };

  SoftmaxState state[2];  // rows lane/4 and lane/4 + 8
  float row_min[2] = {INFINITY, INFINITY};  // smallest score seen (score modes)
  float out[kHeadDim / 8][4];
#pragma unroll
  for (int j = 0; j < kHeadDim / 8; ++j) out[j][0] = out[j][1] = out[j][2] = out[j][3] = 0.f;

  const uint32_t query_address = shared_address(query_tile);
  const int quad_row = lane >> 2, quad_col = lane & 3;
  SketchScorer<T, kHeadDim> sketch;
  SketchColumnStates columns;
  if constexpr (Config::kSketch) sketch.load_query(query_tile, lane);

#pragma unroll
  for (int i = 0; i < Config::kStages - 1; ++i) issue(i);
  for (int i = 0; i < my_chunks; ++i) {
    cp_async_wait<Config::kStages - 2>();
    __syncwarp();
    issue(i + Config::kStages - 1);
    const unsigned char* stage = warp_pipeline + (i % Config::kStages) * Config::kStageBytes;
    const uint32_t key_tile = shared_address(stage);
    const uint32_t value_tile = key_tile + Config::kTileBytes;
    const int key0 = chunk_start(i);
    if constexpr (Config::kSketch) {
      // Keys in rows, heads in columns (SketchScorer's accumulator layout).
      float scores[4] = {0.f, 0.f, 0.f, 0.f};
      if (key0 < sketched_end) {
        if (i % kChunksPerBlock == 0)
          sketch.fold_block(reinterpret_cast<const __half*>(stage + Config::kCodeBytes), lane);
        sketch.score_chunk(stage, lane, scores);
      } else {
        SketchScorer<T, kHeadDim>::score_exact_chunk(key_tile, query_address, lane, scores);
      }
      float* records = p.scores + (int64_t(b) * p.n_kv_heads + kv_head) * p.score_stride * p.score_record +
                       first_in_group;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + quad_row + 8 * (e >> 1);
        const int row = 2 * quad_col + (e & 1);
        const bool valid = key < end;
        scores[e] = valid ? scores[e] * p.scale_log2 : -INFINITY;
        if (valid && row < n_rows) {
          if (p.score_record > 0)
            records[int64_t(key) * p.score_record + row] = scores[e];
          else
            p.scores[(int64_t(b) * p.n_heads + head0 + row) * p.score_stride + key] = scores[e];
        }
      }
      columns.add(scores);
    } else {
      float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
      for (int k_step = 0; k_step < kHeadDim / 16; ++k_step) {
        uint32_t a[4], bk[4];
        load_a_fragment<kHeadDim>(query_address, 0, k_step, lane, a);
        load_key_fragments<kHeadDim>(key_tile, 0, k_step, lane, bk);
        mma_16816<T>(s[0], a, bk[0], bk[1]);
        mma_16816<T>(s[1], a, bk[2], bk[3]);
      }
      const unsigned listed = kHeld ? unsigned(held_masks >> (kChunkKeys * (i % Config::kStages))) : ~0u;
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int in_chunk = 8 * j + 2 * quad_col + (e & 1);
          const bool attended = key0 + in_chunk < end && ((listed >> in_chunk) & 1u);
          s[j][e] = attended ? s[j][e] * p.scale_log2 : -INFINITY;
        }

      if constexpr (kMode != DecodeMode::Attend) {
        // Raw scores of the real rows; dense modes only (the key is the position).
        if (p.score_record > 0) {
          // Key-major: the block's rows of key j sit side by side at record j
          // of its KV head, so the block writes one sequential stream (the 16
          // keys of a chunk are 16 consecutive records).
          float* records = p.scores + (int64_t(b) * p.n_kv_heads + kv_head) * p.score_stride * p.score_record +
                           first_in_group;
#pragma unroll
          for (int j = 0; j < 2; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int row = quad_row + 8 * (e >> 1);
              const int key = key0 + 8 * j + 2 * quad_col + (e & 1);
              if (row < n_rows && key < end) records[int64_t(key) * p.score_record + row] = s[j][e];
            }
        }
        const bool odd = quad_col & 1;
        const int row = quad_row + (odd ? 8 : 0);
        float* score_row = p.scores + (int64_t(b) * p.n_heads + head0 + row) * p.score_stride;
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const float x = __shfl_xor_sync(0xffffffffu, odd ? s[j][0] : s[j][2], 1);
          const float y = __shfl_xor_sync(0xffffffffu, odd ? s[j][1] : s[j][3], 1);
          const float four[4] = {odd ? x : s[j][0], odd ? y : s[j][1], odd ? s[j][2] : x, odd ? s[j][3] : y};
          const int key = key0 + 8 * j + 2 * (quad_col & ~1);
          if (row < n_rows && p.score_record == 0) {
            if (key + 3 < end) {
              *reinterpret_cast<float4*>(score_row + key) = make_float4(four[0], four[1], four[2], four[3]);
            } else {
#pragma unroll
              for (int e = 0; e < 4; ++e)
                if (key + e < end) score_row[key + e] = four[e];
            }
          }
#pragma unroll
          for (int e = 0; e < 4; ++e)
            if (key0 + 8 * j + 2 * quad_col + (e & 1) < end) row_min[e >> 1] = fminf(row_min[e >> 1], s[j][e]);
        }
      }

#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float chunk_max = fmaxf(fmaxf(s[0][2 * r], s[0][2 * r + 1]), fmaxf(s[1][2 * r], s[1][2 * r + 1]));
        chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, 1));
        chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, 2));
        const float new_max = fmaxf(state[r].max, chunk_max);
        const float reference = SoftmaxState::finite_max(new_max);
        const float rescale = exp2_approx(state[r].max - reference);
        state[r].max = new_max;
        float chunk_sum = 0.f;
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int e = 2 * r; e < 2 * r + 2; ++e) {
            s[j][e] = exp2_approx(s[j][e] - reference);
            chunk_sum += s[j][e];
          }
        state[r].sum = state[r].sum * rescale + chunk_sum;
        if constexpr (Config::kReadValues) {
#pragma unroll
          for (int j = 0; j < kHeadDim / 8; ++j) {
            out[j][2 * r] *= rescale;
            out[j][2 * r + 1] *= rescale;
          }
        }
      }

      if constexpr (Config::kReadValues) {
        uint32_t pa[4];
        pa[0] = ElementTraits<T>::pack2(s[0][0], s[0][1]);
        pa[1] = ElementTraits<T>::pack2(s[0][2], s[0][3]);
        pa[2] = ElementTraits<T>::pack2(s[1][0], s[1][1]);
        pa[3] = ElementTraits<T>::pack2(s[1][2], s[1][3]);
#pragma unroll
        for (int pair = 0; pair < kHeadDim / 16; ++pair) {
          uint32_t bv[4];
          load_value_fragments<kHeadDim>(value_tile, 0, pair, lane, bv);
          mma_16816<T>(out[2 * pair], pa, bv[0], bv[1]);
          mma_16816<T>(out[2 * pair + 1], pa, bv[2], bv[3]);
        }
      }
    }
  }
  cp_async_wait<0>();

  float* warp_outputs = reinterpret_cast<float*>(pipeline);  // [warp][row][dim]
  if constexpr (Config::kSketch) {
    columns.store(states + warp * kRowsPerBlock * 3, lane);
  } else {
    // Each lane holds partial sums of its quad's rows.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      state[r].sum += __shfl_xor_sync(0xffffffffu, state[r].sum, 1);
      state[r].sum += __shfl_xor_sync(0xffffffffu, state[r].sum, 2);
      row_min[r] = fminf(row_min[r], __shfl_xor_sync(0xffffffffu, row_min[r], 1));
      row_min[r] = fminf(row_min[r], __shfl_xor_sync(0xffffffffu, row_min[r], 2));
    }
    __syncthreads();  // pipelines drained: their memory now holds per-warp outputs
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = quad_row + 8 * r;
      if (quad_col == 0) {
        states[(warp * kRowsPerBlock + row) * 3] = state[r].max;
        states[(warp * kRowsPerBlock + row) * 3 + 1] = state[r].sum;
        states[(warp * kRowsPerBlock + row) * 3 + 2] = row_min[r];
      }
      if constexpr (Config::kReadValues) {
#pragma unroll
        for (int j = 0; j < kHeadDim / 8; ++j) {
          float* at = warp_outputs + (warp * kRowsPerBlock + row) * kHeadDim + 8 * j + 2 * quad_col;
          at[0] = out[j][2 * r];
          at[1] = out[j][2 * r + 1];
        }
      }
    }
  }
  __syncthreads();

  // Merge the warps; rows with no keys (an empty split) get lse -inf, output 0.
  const int64_t head_row0 = int64_t(b) * p.n_heads + head0;
  if constexpr (Config::kReadValues) {
    for (int item = threadIdx.x; item < n_rows * kHeadDim; item += kDecodeThreads) {
      const int row = item / kHeadDim, dim = item % kHeadDim;
      SoftmaxState merged;
      float value = 0.f;
#pragma unroll
      for (int w = 0; w < kDecodeWarps; ++w) {
        SoftmaxState other{states[(w * kRowsPerBlock + row) * 3], states[(w * kRowsPerBlock + row) * 3 + 1]};
        float self_scale, other_scale;
        merged.merge(other, self_scale, other_scale);
        value = value * self_scale + warp_outputs[(w * kRowsPerBlock + row) * kHeadDim + dim] * other_scale;
      }
      value = merged.sum > 0.f ? value / merged.sum : 0.f;
      const float lse2 = merged.log2_sum_exp();
      if constexpr (kMode == DecodeMode::AttendAndScores) {
        if (dim == 0) write_score_bounds<kDecodeWarps>(p, states, head_row0, row, split, merged.max);
      }
      if (p.splits == 1) {
        static_cast<T*>(p.output)[(head_row0 + row) * kHeadDim + dim] = ElementTraits<T>::from_float(value);
        if (dim == 0 && p.lse) p.lse[head_row0 + row] = lse2 * kLn2;
      } else {
        p.partial_out[((head_row0 + row) * p.splits + split) * kHeadDim + dim] = value;
        if (dim == 0) p.partial_lse[(head_row0 + row) * p.splits + split] = lse2;
      }
    }
  } else {
    for (int row = threadIdx.x; row < n_rows; row += kDecodeThreads) {
      SoftmaxState merged;
#pragma unroll
      for (int w = 0; w < kDecodeWarps; ++w) {
        SoftmaxState other{states[(w * kRowsPerBlock + row) * 3], states[(w * kRowsPerBlock + row) * 3 + 1]};
        float self_scale, other_scale;
        merged.merge(other, self_scale, other_scale);
      }
      write_score_bounds<kDecodeWarps>(p, states, head_row0, row, split, merged.max);
      const float lse2 = merged.log2_sum_exp();
      if (p.splits == 1) {
        p.lse[head_row0 + row] = lse2 * kLn2;
      } else {
        p.partial_lse[(head_row0 + row) * p.splits + split] = lse2;
      }
    }
  }
}

// One block per (sequence, query head): folds the split partials. The split
// weights 2^(lse_s - max) are computed once into shared memory (the block
// reduces the maximum and the total first), then every dimension thread sums
// its column with independent, unrolled loads: at small batch there are up
// to several hundred splits per row and few rows, so a serial
// weight-and-load loop per thread was latency-bound. Launched as a
// programmatic dependent of the attention pass, it starts before the pass has
// finished and waits here until the pass has completed and its writes are visible.
constexpr int kMergeThreads = 128;

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kMergeThreads) decode_merge_kernel(const DecodeParams p) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  extern __shared__ float split_weights[];  // [splits]
  __shared__ float warp_values[kMergeThreads / 32];
  const int64_t head_row = blockIdx.x;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float* lses = p.partial_lse + head_row * p.splits;
  float local_max = -INFINITY;
  for (int s = tid; s < p.splits; s += kMergeThreads) {
    const float lse = lses[s];
    split_weights[s] = lse;
    local_max = fmaxf(local_max, lse);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    local_max = fmaxf(local_max, __shfl_xor_sync(0xffffffffu, local_max, offset));
  if (lane == 0) warp_values[warp] = local_max;
  __syncthreads();
  PartialMerge merge;
#pragma unroll
  for (int w = 0; w < kMergeThreads / 32; ++w) merge.max_lse = fmaxf(merge.max_lse, warp_values[w]);
  __syncthreads();  // warp_values is reused for the total
  float local_total = 0.f;
  for (int s = tid; s < p.splits; s += kMergeThreads) {
    const float weight = merge.weight(split_weights[s]);
    split_weights[s] = weight;
    local_total += weight;
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) local_total += __shfl_xor_sync(0xffffffffu, local_total, offset);
  if (lane == 0) warp_values[warp] = local_total;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < kMergeThreads / 32; ++w) total += warp_values[w];
  if (tid == 0 && p.lse) p.lse[head_row] = (SoftmaxState::finite_max(merge.max_lse) + __log2f(total)) * kLn2;
  const float* partials = p.partial_out + head_row * p.splits * kHeadDim;
  for (int dim = tid; dim < kHeadDim; dim += kMergeThreads) {
    float value[4] = {0.f, 0.f, 0.f, 0.f};
    int s = 0;
    for (; s + 4 <= p.splits; s += 4) {
#pragma unroll
      for (int u = 0; u < 4; ++u) value[u] += split_weights[s + u] * partials[(s + u) * kHeadDim + dim];
    }
    for (; s < p.splits; ++s) value[0] += split_weights[s] * partials[s * kHeadDim + dim];
    const float sum = (value[0] + value[1]) + (value[2] + value[3]);
    static_cast<T*>(p.output)[head_row * kHeadDim + dim] = ElementTraits<T>::from_float(sum / total);
  }
}

constexpr int kSelectThreads = 512;

// Pooled selection: 512-thread blocks, two per multiprocessor. At batch 64
// one block per (sequence, KV head) row; at small batch a long row is cut
// among a cluster of up to kMaxPooledCluster blocks, so that batch 1 does not
// leave 124 of 132 multiprocessors idle. A block keeps its segment's bins in
// shared memory up to kSharedSegmentKeys keys, beyond that in the pooled scratch.
constexpr int kPooledThreads = 512;
constexpr int kMaxPooledCluster = 8;  // the portable cluster size
constexpr int kPooledBins = 4096;        // linear bins over the row's bounded key range
constexpr int kPooledCandidates = 1024;  // most keys the threshold bin may hold on the fast path
constexpr int kPooledPerThread = 16;     // consecutive keys per thread per index-order round
constexpr int64_t kSharedSegmentKeys = 32768;  // 64 KB of bins

// Floats before a pooled-selection block's bins in dynamic shared memory: the
// group's LSEs, padded so that the bins start 16-byte aligned.
__host__ __device__ constexpr int pooled_lse_slots(int group) { return (group + 3) / 4 * 4; }

struct PooledSelectShared {
  union {
    struct {
      unsigned int histogram[kPooledBins];
      // The threshold bin's keys in index order: key, position, keys above the
      // bin before it, chosen candidates before it.
      uint32_t key[kPooledCandidates];
      int position[kPooledCandidates];
      int above_before[kPooledCandidates];
      int chosen_before[kPooledCandidates];
    } fast;
    RadixSelectShared<kPooledThreads> fallback;  // general radix select when the bin is too full
  };
  unsigned int warp_totals[kPooledThreads / 32];
  ThresholdBin threshold;
  float row_low[kPrefillBlockRows], row_high[kPrefillBlockRows];  // per head of the group: 2^(min - lse), 2^(max - lse)
  unsigned int segment_above, segment_bin;  // this block's keys above / in the threshold bin
  unsigned int slice_total;                 // keys in this block's slice of the cluster's bins
  KeyRange bin_key_range;                   // of the threshold bin's keys (block 0)
};

// The exact threshold among the threshold bin's keys (shared.fast, in index
// order; their range in shared.bin_key_range), by 12-bit digits from the
// highest bit in which they differ; writes the chosen ones to `out` at their
// final positions and, for every bin key, the chosen ones before it.
__device__ void choose_bin_keys(PooledSelectShared& shared, unsigned int bin_take, unsigned int bin_count, int* out) {
  const int tid = threadIdx.x;
  uint32_t prefix = 0, mask = 0;
  unsigned int equal_take = bin_count;  // with mask 0 every bin key is "equal": all taken
  if (bin_take < bin_count) {
    equal_take = bin_take;
    const detail::CommonBits common = detail::common_bits(shared.bin_key_range.low, shared.bin_key_range.high);
    int high_bit = common.high_bit;
    mask = common.mask;
    prefix = common.prefix;
    while (high_bit >= 0) {
      const int width = high_bit + 1 < 12 ? high_bit + 1 : 12;
      const int digit_shift = high_bit + 1 - width;
      const uint32_t digit_mask = (1u << width) - 1u;
      high_bit = digit_shift - 1;
      for (int i = tid; i < kPooledBins; i += kPooledThreads) shared.fast.histogram[i] = 0;
      __syncthreads();
      for (unsigned int c = tid; c < bin_count; c += kPooledThreads) {
        const uint32_t key = shared.fast.key[c];
        if ((key & mask) == prefix) atomicAdd(&shared.fast.histogram[(key >> digit_shift) & digit_mask], 1u);
      }
      __syncthreads();
      detail::find_threshold_bin<kPooledThreads, kPooledBins>(shared.fast.histogram, equal_take, shared.warp_totals,
                                                              shared.threshold);
      prefix |= shared.threshold.digit << digit_shift;
      mask |= digit_mask << digit_shift;
      equal_take = shared.threshold.remaining;
      if (shared.threshold.count == equal_take) break;  // the whole sub-bin is taken
    }
  }

  // Chosen bin keys: above the threshold, or equal to it and among the first
  // equal_take equal ones in index order. Each thread owns 4 consecutive keys.
  constexpr int kPerThread = kPooledCandidates / kPooledThreads;
  const int c0 = tid * kPerThread;
  uint32_t masked[kPerThread];
  unsigned int equal_count = 0;
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    masked[e] = c0 + e < int(bin_count) ? shared.fast.key[c0 + e] & mask : 0u;
    equal_count += (c0 + e < int(bin_count) && masked[e] == prefix) ? 1u : 0u;
  }
  unsigned int total;
  unsigned int equal_rank = detail::block_exclusive_scan<kPooledThreads>(equal_count, total, shared.warp_totals);
  bool chosen[kPerThread];
  unsigned int chosen_count = 0;
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    const bool valid = c0 + e < int(bin_count);
    const bool equal = valid && masked[e] == prefix;
    chosen[e] = valid && (masked[e] > prefix || (equal && equal_rank < equal_take));
    equal_rank += equal ? 1u : 0u;
    chosen_count += chosen[e] ? 1u : 0u;
  }
  unsigned int chosen_at = detail::block_exclusive_scan<kPooledThreads>(chosen_count, total, shared.warp_totals);
#pragma unroll
  for (int e = 0; e < kPerThread; ++e) {
    if (c0 + e < int(bin_count)) {
      shared.fast.chosen_before[c0 + e] = int(chosen_at);
      if (chosen[e]) out[chosen_at + shared.fast.above_before[c0 + e]] = shared.fast.position[c0 + e];
      chosen_at += chosen[e] ? 1u : 0u;
    }
  }
}

// The blocks that select one row: a cluster of blocks (kSplit) or one block
// alone, in which case the cluster operations reduce to the block's own.
template <bool kSplit>
struct RowBlocks {
  int rank = 0, count = 1;
  __device__ RowBlocks() {
    if constexpr (kSplit) {
      rank = static_cast<int>(cooperative_groups::this_cluster().block_rank());
      count = static_cast<int>(cooperative_groups::this_cluster().num_blocks());
    }
  }
  __device__ void sync() const {
    if constexpr (kSplit) {
      cooperative_groups::this_cluster().sync();
    } else {
      __syncthreads();
    }
  }
  // `local` in the shared memory of block r.
  template <typename T>
  __device__ T* of_rank(T* local, int r) const {
    if constexpr (kSplit) return cooperative_groups::this_cluster().map_shared_rank(local, r);
    return local;
  }
};

// Exact pooled top-k in one read of the scores. The score pass bounded each
// head's scores, so every pooled value lies in [sum_i 2^(min_i - lse_i),
// sum_i 2^(max_i - lse_i)]; that key range is cut into 4096 equal bins.
// Pass 1 pools (reading the g score rows once) and histograms the pooled
// values, keeping each key's bin (2 bytes): the bin holding the k-th largest
// key is then known. (The 4-byte pooled values themselves would not stay in
// the L2 until pass 2: writing and reading them back from DRAM was a third of
// the kernel's traffic at batch 64 and 32K.)
// Pass 2, in index order over the bins, sends keys above that bin to a
// scratch list (with the number of bin keys before each) and the bin's own
// keys to shared memory; their exact pooled values are recomputed from the
// scores (the same sums, bit for bit), and a radix select finds the exact
// threshold among them (ties to the lower index). A final merge writes the
// keys above the bin and the chosen bin keys in ascending order. A bin
// holding more than kPooledCandidates keys (narrow or constant rows) falls
// back to the general radix select over the pooled row, recomputed into the
// pooled scratch.
//
// A cluster splits the row into consecutive segments, one per block: pass 1
// pools and histograms a segment, each block sums a slice of the bins over
// the cluster (distributed shared memory) and every block finds the bin from
// the slices' totals; pass 2 places each segment's keys after
// the earlier segments' (their counts are exchanged first) and sends the
// bin's keys to block 0, which finds the exact threshold; each block then
// places its own keys above the bin. A segment longer than kSharedSegmentKeys
// (params.shared_bins false) keeps its bins in its part of the pooled scratch
// row instead of shared memory.
template <bool kSplit>
__global__ void __launch_bounds__(kPooledThreads, 2) pooled_select_decode_kernel(const PooledSelectParams p) {
  asm volatile("griddepcontrol.wait;" ::: "memory");  // launched as a programmatic dependent of the score pass
  __shared__ PooledSelectShared shared;
  extern __shared__ __align__(16) float group_lse2[];  // [group] in log2 units, then the segment's bins
  const RowBlocks<kSplit> cluster;
  const int rank = cluster.rank;
  const int blocks = cluster.count;
  const int kv_head = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31;
  const int n = p.seq_lens[b];
  // This block's segment [begin, end): a multiple of 16 keys long, so float4
  // groups and index-order rounds never straddle two segments.
  const int segment = ((n + blocks - 1) / blocks + 15) / 16 * 16;
  const int begin = min(n, rank * segment);
  const int end = min(n, begin + segment);
  const int k = static_cast<int>(kascade::budget(n, p.budget.percent, p.budget.min_keys));
  const int64_t head_row0 = int64_t(b) * p.n_heads + int64_t(kv_head) * p.group;
  const int64_t set_row = int64_t(b) * p.n_kv_heads + kv_head;
  int* out = p.indices + set_row * p.index_stride;
  if (kv_head == 0 && rank == 0 && tid == 0) p.counts[b] = min(k, n);
  if (k >= n) {  // the whole row
    for (int i = begin + tid; i < end; i += kPooledThreads) out[i] = i;
    return;
  }
  float* pooled = p.pooled + set_row * p.score_stride;
  // bins[j - begin] is key j's bin.
  uint16_t* bins = p.shared_bins ? reinterpret_cast<uint16_t*>(group_lse2 + pooled_lse_slots(p.group))
                                 : reinterpret_cast<uint16_t*>(pooled) + begin;
  // Each warp folds its rows' splits: a row's LSE (from the split partials
  // when the score pass left them: a merge kernel fewer) and the bounds of
  // its scores. One warp looping over every row's few hundred splits was a
  // fifth of the kernel at batch 1.
  for (int i = tid; i < kPooledBins; i += kPooledThreads) shared.fast.histogram[i] = 0;
  if (tid == 0) shared.bin_key_range = {0xffffffffu, 0u};
  for (int r = tid >> 5; r < p.group; r += kPooledThreads / 32) {
    const float* bounds = p.score_bounds + (head_row0 + r) * p.splits * 2;
    const float* split_lse = p.partial_lse ? p.partial_lse + (head_row0 + r) * p.splits : nullptr;
    float smallest = INFINITY, largest = -INFINITY, max_lse = -INFINITY;
    for (int split = lane; split < p.splits; split += 32) {
      smallest = fminf(smallest, bounds[2 * split]);
      largest = fmaxf(largest, bounds[2 * split + 1]);
      if (split_lse) max_lse = fmaxf(max_lse, split_lse[split]);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      smallest = fminf(smallest, __shfl_xor_sync(0xffffffffu, smallest, offset));
      largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
      max_lse = fmaxf(max_lse, __shfl_xor_sync(0xffffffffu, max_lse, offset));
    }
    float lse2;
    if (split_lse) {
      const PartialMerge merge{max_lse};
      float total = 0.f;
      for (int split = lane; split < p.splits; split += 32) total += merge.weight(split_lse[split]);
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) total += __shfl_xor_sync(0xffffffffu, total, offset);
      lse2 = SoftmaxState::finite_max(max_lse) + __log2f(total);
    } else {
      constexpr float kLog2e = 1.4426950408889634f;
      lse2 = p.lse[head_row0 + r] * kLog2e;
    }
    if (lane == 0) {
      group_lse2[r] = lse2;
      shared.row_low[r] = exp2_approx(smallest - lse2);
      shared.row_high[r] = exp2_approx(largest - lse2);
    }
  }
  __syncthreads();
  // Every pooled value lies in [sum of the rows' lows, sum of their highs].
  float low = 0.f, high = 0.f;
  for (int r = 0; r < p.group; ++r) {
    low += shared.row_low[r];
    high += shared.row_high[r];
  }
  const uint32_t low_key = float_order_key(low);
  int shift = 0;
  while (((max(float_order_key(high), low_key) - low_key) >> shift) >= uint32_t(kPooledBins)) ++shift;
  // Monotone in the key; keys outside the bounds (round-off) clamp to the end bins.
  auto bin_of = [&](float pooled_value) -> uint32_t {
    const uint32_t key = float_order_key(pooled_value);
    return key <= low_key ? 0u : min((key - low_key) >> shift, uint32_t(kPooledBins - 1));
  };
  const float* scores = p.scores + head_row0 * p.score_stride;                 // row layout
  const float* records = p.scores + set_row * p.score_stride * p.score_record;  // key-major
  // Key j's pooled value, summed over the heads in pass 1's order (bit-identical).
  auto pooled_at = [&](int j) {
    float sum = 0.f;
    for (int r = 0; r < p.group; ++r) {
      const float score = p.score_record > 0 ? records[int64_t(j) * p.score_record + r] : scores[r * p.score_stride + j];
      sum += exp2_approx(score - group_lse2[r]);
    }
    return sum;
  };

  // Pass 1: pooled scores, binned and histogrammed. Two float4 groups of four
  // heads per thread per step keep eight 16-byte loads in flight.
  constexpr int kGroups = 2;
  if (p.score_record > 0) {
    // Key-major records: lane l takes keys base + 32 e + l (e < kKeys), so every
    // load instruction reads 32 consecutive records; the heads are summed in
    // the same order as the row layout's loop (identical pooled values).
    constexpr int kKeys = 4;  // 8: spills at the 64-register cap; 2 % slower at 256 threads, no faster at 512
    const int warp_id = tid >> 5;
    for (int base = begin + warp_id * 32 * kKeys; base < end; base += kPooledThreads * kKeys) {
      float sum[kKeys] = {};
      for (int q = 0; 4 * q < p.group; ++q) {
        float4 loaded[kKeys];
#pragma unroll
        for (int e = 0; e < kKeys; ++e) {
          const int j = base + 32 * e + lane;
          loaded[e] = j < end ? *reinterpret_cast<const float4*>(records + int64_t(j) * p.score_record + 4 * q)
                            : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int e = 0; e < kKeys; ++e) {
          sum[e] += exp2_approx(loaded[e].x - group_lse2[4 * q]);
          if (4 * q + 1 < p.group) sum[e] += exp2_approx(loaded[e].y - group_lse2[4 * q + 1]);
          if (4 * q + 2 < p.group) sum[e] += exp2_approx(loaded[e].z - group_lse2[4 * q + 2]);
          if (4 * q + 3 < p.group) sum[e] += exp2_approx(loaded[e].w - group_lse2[4 * q + 3]);
        }
      }
#pragma unroll
      for (int e = 0; e < kKeys; ++e) {
        const int j = base + 32 * e + lane;
        if (j < end) {
          const uint32_t bin = bin_of(sum[e]);
          bins[j - begin] = static_cast<uint16_t>(bin);
          atomicAdd(&shared.fast.histogram[bin], 1u);
        }
      }
    }
  } else
  for (int base = begin; base < end; base += kGroups * 4 * kPooledThreads) {
    float sum[kGroups][4] = {};
#pragma unroll 4
    for (int r = 0; r < p.group; ++r) {
      const float* row = scores + r * p.score_stride;
      float4 loaded[kGroups];
#pragma unroll
      for (int u = 0; u < kGroups; ++u) {
        const int j = base + 4 * (u * kPooledThreads + tid);
        // Rows are padded to a multiple of 4: a group starting below n is in bounds.
        loaded[u] = j < end ? *reinterpret_cast<const float4*>(row + j) : make_float4(0.f, 0.f, 0.f, 0.f);
      }
      const float lse2 = group_lse2[r];
#pragma unroll
      for (int u = 0; u < kGroups; ++u) {
        sum[u][0] += exp2_approx(loaded[u].x - lse2);
        sum[u][1] += exp2_approx(loaded[u].y - lse2);
        sum[u][2] += exp2_approx(loaded[u].z - lse2);
        sum[u][3] += exp2_approx(loaded[u].w - lse2);
      }
    }
#pragma unroll
    for (int u = 0; u < kGroups; ++u) {
      const int j = base + 4 * (u * kPooledThreads + tid);
      if (j < end) {
        uint32_t bin[4];
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          bin[e] = bin_of(sum[u][e]);
          if (j + e < end) atomicAdd(&shared.fast.histogram[bin[e]], 1u);
        }
        // j - begin is a multiple of 4: one 8-byte store of the four bins.
        *reinterpret_cast<uint2*>(bins + (j - begin)) = make_uint2(bin[0] | bin[1] << 16, bin[2] | bin[3] << 16);
      }
    }
  }
  // The bin holding the k-th largest key, found by every block. Block r sums
  // slice r of the bins over the cluster into its own histogram (no other
  // block reads that slice of it), with the slice's total; every block then
  // reads the totals, copies the summed slice holding the k-th key from its
  // owner and scans it. One block summing all the histograms kept the others
  // waiting at batch 1.
  if constexpr (kSplit) {
    cluster.sync();  // every segment pooled and histogrammed
    const int slice = (kPooledBins + blocks - 1) / blocks;
    const int slice_end = min(kPooledBins, (rank + 1) * slice);
    unsigned int slice_total = 0;
    for (int i = rank * slice + tid; i < slice_end; i += kPooledThreads) {
      unsigned int total = 0;
#pragma unroll
      for (int r = 0; r < kMaxPooledCluster; ++r)
        if (r < blocks) total += cluster.of_rank(shared.fast.histogram, r)[i];
      shared.fast.histogram[i] = total;
      slice_total += total;
    }
    unsigned int block_total;
    detail::block_exclusive_scan<kPooledThreads>(slice_total, block_total, shared.warp_totals);
    if (tid == 0) shared.slice_total = block_total;
    cluster.sync();  // every slice summed
    unsigned int totals[kMaxPooledCluster];
#pragma unroll
    for (int r = 0; r < kMaxPooledCluster; ++r) totals[r] = r < blocks ? *cluster.of_rank(&shared.slice_total, r) : 0u;
    unsigned int remaining = unsigned(k);
    int owner = blocks - 1;
    while (owner > 0 && remaining > totals[owner]) remaining -= totals[owner--];
    const int first = owner * slice, last = min(kPooledBins, first + slice);
    if (owner != rank) {  // this block's own copy of that slice was read by its owner before the sync
      const unsigned int* summed = cluster.of_rank(shared.fast.histogram, owner);
      for (int i = first + tid; i < last; i += kPooledThreads) shared.fast.histogram[i] = summed[i];
    }
    __syncthreads();
    detail::find_threshold_bin_in<kPooledThreads, (kPooledBins / 2 + kPooledThreads - 1) / kPooledThreads>(
        shared.fast.histogram, first, last, remaining, shared.warp_totals, shared.threshold);
  } else {
    __syncthreads();
    detail::find_threshold_bin<kPooledThreads, kPooledBins>(shared.fast.histogram, unsigned(k), shared.warp_totals,
                                                            shared.threshold);
  }
  const uint32_t threshold_bin = shared.threshold.digit;
  const unsigned int bin_take = shared.threshold.remaining;  // keys to take from the bin
  const unsigned int bin_count = shared.threshold.count;
  if (bin_count > kPooledCandidates) {
    // The bins are no longer read (in the pooled scratch they may be overwritten).
    for (int j = begin + tid; j < end; j += kPooledThreads) pooled[j] = pooled_at(j);
    cluster.sync();  // the whole pooled row is written
    if (rank == 0) select_top_k_block<kPooledThreads>(pooled, n, k, out, shared.fallback);
    return;
  }

  // Pass 2, in index order. Each thread owns kPooledPerThread consecutive keys
  // per round (two 16-byte loads of bins, issued a round ahead: in the pooled
  // scratch they come from DRAM) and marks those above the threshold bin and in it.
  constexpr int kRoundKeys = kPooledThreads * kPooledPerThread;
  struct RoundBins {
    uint4 words[2] = {};
  };
  auto fetch_round = [&](int first) {
    RoundBins round;
    if (first < end) {
      const uint4* source = reinterpret_cast<const uint4*>(bins + (first - begin));
      round.words[0] = source[0];
      round.words[1] = source[1];
    }
    return round;
  };
  // Two bins per 32-bit word, compared at once: in each 16-bit half,
  // 0x8000 + bin - t keeps bit 15 set iff bin >= t (bins are below 4096, so
  // no borrow crosses the halves).
  const uint32_t above_threshold = (threshold_bin + 1) * 0x10001u;
  const uint32_t at_threshold = threshold_bin * 0x10001u;
  auto classify_round = [&](int first, const RoundBins& round, unsigned int& above_mask, unsigned int& bin_mask) {
    const uint32_t words[8] = {round.words[0].x, round.words[0].y, round.words[0].z, round.words[0].w,
                               round.words[1].x, round.words[1].y, round.words[1].z, round.words[1].w};
    above_mask = bin_mask = 0;
#pragma unroll
    for (int i = 0; i < kPooledPerThread / 2; ++i) {
      const uint32_t biased = words[i] | 0x80008000u;
      const uint32_t above_pair = (biased - above_threshold) & 0x80008000u;
      const uint32_t in_pair = ((biased - at_threshold) & 0x80008000u) ^ above_pair;
      // Bits 15 and 31 -> bits 2i and 2i + 1.
      above_mask |= ((above_pair >> 15 | above_pair >> 30) & 3u) << (2 * i);
      bin_mask |= ((in_pair >> 15 | in_pair >> 30) & 3u) << (2 * i);
    }
    if (first + kPooledPerThread > end) {  // the segment's last round
      const unsigned int valid = first >= end ? 0u : (1u << (end - first)) - 1u;
      above_mask &= valid;
      bin_mask &= valid;
    }
  };
  // Calls visit(first, above_mask, bin_mask) for this thread's keys of every
  // round of the segment, in order (block-uniform trip count).
  auto for_each_round = [&](auto&& visit) {
    RoundBins next = fetch_round(begin + tid * kPooledPerThread);
    for (int base = begin; base < end; base += kRoundKeys) {
      const int first = base + tid * kPooledPerThread;
      const RoundBins round = next;
      next = fetch_round(first + kRoundKeys);
      unsigned int above_mask, bin_mask;
      classify_round(first, round, above_mask, bin_mask);
      visit(first, above_mask, bin_mask);
    }
  };
  // Counts first, when the segments must be placed after one another.
  unsigned int above_seen = 0, bin_seen = 0;  // block-uniform running totals
  if (blocks > 1) {
    unsigned int above_count = 0, bin_in_segment = 0;
    for_each_round([&](int, unsigned int above_mask, unsigned int bin_mask) {
      above_count += __popc(above_mask);
      bin_in_segment += __popc(bin_mask);
    });
    unsigned int total_above, total_bin;
    detail::block_exclusive_scan<kPooledThreads>(above_count, total_above, shared.warp_totals);
    detail::block_exclusive_scan<kPooledThreads>(bin_in_segment, total_bin, shared.warp_totals);
    if (tid == 0) {
      shared.segment_above = total_above;
      shared.segment_bin = total_bin;
    }
    cluster.sync();  // every segment's counts published
    for (int r = 0; r < blocks; ++r) {
      above_seen += r < rank ? *cluster.of_rank(&shared.segment_above, r) : 0u;
      bin_seen += r < rank ? *cluster.of_rank(&shared.segment_bin, r) : 0u;
    }
  }
  const unsigned int above_first = above_seen;  // this block's first entry in the scratch list
  // Keys above the bin go to the scratch list, the bin's keys to block 0's shared memory.
  int2* above = p.above + set_row * p.index_stride;
  for_each_round([&](int first, unsigned int above_mask, unsigned int bin_mask) {
    // Both counts in one scan: above in the low 16 bits, bin keys in the high.
    unsigned int total;
    const unsigned int before = detail::block_exclusive_scan<kPooledThreads>(
        __popc(above_mask) | (__popc(bin_mask) << 16), total, shared.warp_totals);
    unsigned int above_at = above_seen + (before & 0xffffu);
    unsigned int bin_at = bin_seen + (before >> 16);
    // Only the marked keys, in index order (about one in ten).
    for (unsigned int marked = above_mask | bin_mask; marked != 0; marked &= marked - 1) {
      const int e = __ffs(marked) - 1;
      if (above_mask & (1u << e)) {
        above[above_at++] = make_int2(first + e, int(bin_at));
      } else {
        cluster.of_rank(shared.fast.position, 0)[bin_at] = first + e;
        cluster.of_rank(shared.fast.above_before, 0)[bin_at] = int(above_at);
        ++bin_at;
      }
    }
    above_seen += total & 0xffffu;
    bin_seen += total >> 16;
  });
  cluster.sync();  // every bin key is in block 0, every scratch entry written
  if (rank == 0) {
    // The bin keys' exact values: at most kPooledCandidates short sums.
    uint32_t low = 0xffffffffu, high = 0u;
    for (unsigned int c = tid; c < bin_count; c += kPooledThreads) {
      const uint32_t key = float_order_key(pooled_at(shared.fast.position[c]));
      shared.fast.key[c] = key;
      low = min(low, key);
      high = max(high, key);
    }
    detail::reduce_key_range(low, high, shared.bin_key_range);
    choose_bin_keys(shared, bin_take, bin_count, out);
  }
  cluster.sync();  // block 0 has written the chosen bin keys and chosen_before

  // This block's keys above the bin move up by the chosen bin keys before them.
  const int* chosen_before = cluster.of_rank(shared.fast.chosen_before, 0);
  for (unsigned int i = above_first + tid; i < above_seen; i += kPooledThreads) {
    const int2 entry = above[i];
    out[i + (entry.y < int(bin_count) ? chosen_before[entry.y] : int(bin_take))] = entry.x;
  }
  cluster.sync();  // block 0's shared memory is read until here
}

// One block per row of the standalone top-k.
__global__ void __launch_bounds__(kSelectThreads, 2) top_k_kernel(const float* values, int64_t row_stride,
                                                                const int* lengths, const int* k, int* out,
                                                                int64_t out_stride) {
  __shared__ RadixSelectShared<kSelectThreads> select_shared;
  const int64_t row = blockIdx.x;
  select_top_k_block<kSelectThreads>(values + row * row_stride, lengths[row], k[row], out + row * out_stride,
                                     select_shared);
}

template <typename T, int kHeadDim, DecodeMode kMode, Keys kKeys>
const KernelInfo& decode_kernel_info() {
  static const KernelInfo info =
      configure_kernel(reinterpret_cast<const void*>(&decode_attention_kernel<T, kHeadDim, kMode, kKeys>),
                       DecodeConfig<kHeadDim, kMode>::kSharedBytes, DecodeConfig<kHeadDim, kMode>::kThreads,
                       "configure decode_attention_kernel");
  return info;
}

// Maps the runtime choices onto one template instance.
template <typename T, int kHeadDim>
const KernelInfo& decode_kernel_for_dim(DecodeMode mode, Keys keys) {
  if (mode != DecodeMode::Attend && keys != Keys::All) unsupported("decode mode (scores of a sparse pass)", int(mode));
  switch (mode) {
    case DecodeMode::Attend:
      return keys == Keys::Held     ? decode_kernel_info<T, kHeadDim, DecodeMode::Attend, Keys::Held>()
             : keys == Keys::Listed ? decode_kernel_info<T, kHeadDim, DecodeMode::Attend, Keys::Listed>()
                                    : decode_kernel_info<T, kHeadDim, DecodeMode::Attend, Keys::All>();
    case DecodeMode::AttendAndScores:
      return decode_kernel_info<T, kHeadDim, DecodeMode::AttendAndScores, Keys::All>();
    case DecodeMode::ScoresOnly:
      return decode_kernel_info<T, kHeadDim, DecodeMode::ScoresOnly, Keys::All>();
    case DecodeMode::SketchScores:
      return decode_kernel_info<T, kHeadDim, DecodeMode::SketchScores, Keys::All>();
  }
  unsupported("decode mode", int(mode));
}

template <typename T>
const KernelInfo& decode_kernel_for_type(int head_dim, DecodeMode mode, Keys keys) {
  return with_head_dim(head_dim, [&](auto dim) -> const KernelInfo& {
    return decode_kernel_for_dim<T, decltype(dim)::value>(mode, keys);
  });
}

const KernelInfo& decode_kernel(DType dtype, int head_dim, DecodeMode mode, Keys keys) {
  return dtype == DType::F16 ? decode_kernel_for_type<__half>(head_dim, mode, keys)
                             : decode_kernel_for_type<__nv_bfloat16>(head_dim, mode, keys);
}

template <typename T>
const void* merge_kernel_for_type(int head_dim) {
  return with_head_dim(head_dim, [&](auto dim) {
    return reinterpret_cast<const void*>(&decode_merge_kernel<T, decltype(dim)::value>);
  });
}

}  // namespace

int decode_blocks_per_sm(DType dtype, int head_dim, DecodeMode mode, bool sparse) {
  return decode_kernel(dtype, head_dim, mode, sparse ? Keys::Listed : Keys::All).blocks_per_sm;
}

void launch_decode_attention(const DecodeParams& params, DType dtype, int head_dim, DecodeMode mode,
                             bool programmatic, cudaStream_t stream) {
  const Keys keys = !params.indices ? Keys::All : params.selected_lens ? Keys::Held : Keys::Listed;
  if (params.heads_per_block > (mode == DecodeMode::SketchScores ? kMaxHeadsPerSketchBlock : kMaxHeadsPerDecodeBlock))
    unsupported("decode heads per block", params.heads_per_block);
  const KernelInfo& info = decode_kernel(dtype, head_dim, mode, keys);
  const dim3 grid(params.splits, params.n_kv_heads * params.head_blocks, params.batch);
  launch_kernel(info.kernel, grid, info.threads, info.shared_bytes, const_cast<DecodeParams*>(&params), programmatic,
                1, stream, "launch decode_attention_kernel");
}

void launch_decode_merge(const DecodeParams& params, DType dtype, int head_dim, bool programmatic,
                         cudaStream_t stream) {
  const void* kernel = dtype == DType::F16 ? merge_kernel_for_type<__half>(head_dim)
                                           : merge_kernel_for_type<__nv_bfloat16>(head_dim);
  const size_t shared_bytes = size_t(params.splits) * sizeof(float);
  if (shared_bytes > 48 * 1024) unsupported("decode splits", params.splits);
  launch_kernel(kernel, dim3(params.batch * params.n_heads), kMergeThreads, shared_bytes,
                const_cast<DecodeParams*>(&params), programmatic, 1, stream, "launch decode_merge_kernel");
}

void launch_pooled_select_decode(const PooledSelectParams& params, bool programmatic, cudaStream_t stream) {
  // At small batch rows of the longest sequence's length (score_stride) are
  // cut into segments of at least kMinPooledSegment keys, into no more blocks
  // than multiprocessors (without those limits batch 8 at 8K and 32K lost
  // 2-23 % to clusters of 4 blocks, batch 1 at 8K 12 % to clusters of 8).
  // Cutting rows further only to keep every segment's bins in shared memory
  // was slower than one block per row with the bins in DRAM (batch 64 at 64K
  // and 128K, batch 8 at 128K).
  // Segments of 4096 keys (clusters of 8 at 32K x 1) measured within 3 % of
  // these either way (H100: 2 KV heads 0.97x at 32K, 1.02x at 128K).
  constexpr int64_t kMinPooledSegment = 8192;
  const int rows = params.batch * params.n_kv_heads;
  const int64_t wanted = std::min<int64_t>(multiprocessor_count() / rows, params.score_stride / kMinPooledSegment);
  const int blocks_per_row = static_cast<int>(std::clamp<int64_t>(wanted, 1, kMaxPooledCluster));
  const int64_t segment = ((params.score_stride + blocks_per_row - 1) / blocks_per_row + 15) / 16 * 16;
  PooledSelectParams p = params;
  p.shared_bins = segment <= kSharedSegmentKeys;
  const int shared_bytes =
      static_cast<int>(pooled_lse_slots(p.group) * sizeof(float) + (p.shared_bins ? segment * sizeof(uint16_t) : 0));
  // The dynamic shared-memory limit, raised once for the largest launch (the
  // largest group has kPrefillBlockRows heads).
  constexpr int kMaxSharedBytes = pooled_lse_slots(kPrefillBlockRows) * sizeof(float) + kSharedSegmentKeys * sizeof(uint16_t);
  static const bool configured = [] {
    for (const void* kernel : {reinterpret_cast<const void*>(pooled_select_decode_kernel<false>),
                               reinterpret_cast<const void*>(pooled_select_decode_kernel<true>)})
      check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kMaxSharedBytes),
                 "cudaFuncSetAttribute (pooled_select_decode_kernel)");
    return true;
  }();
  (void)configured;
  const void* kernel = blocks_per_row == 1 ? reinterpret_cast<const void*>(pooled_select_decode_kernel<false>)
                                           : reinterpret_cast<const void*>(pooled_select_decode_kernel<true>);
  launch_kernel(kernel, dim3(blocks_per_row, p.n_kv_heads, p.batch), kPooledThreads, shared_bytes, &p, programmatic,
                blocks_per_row, stream, "launch pooled_select_decode_kernel");
}

void launch_top_k(const float* values, int64_t row_stride, const int* lengths, const int* k, int rows, int* out,
                  int64_t out_stride, cudaStream_t stream) {
  top_k_kernel<<<rows, kSelectThreads, 0, stream>>>(values, row_stride, lengths, k, out, out_stride);
  check_cuda(cudaGetLastError(), "launch top_k_kernel");
}

}  // namespace kascade::cuda::detail
