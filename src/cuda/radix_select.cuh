// Exact block-wide top-k selection (radix select), the GPU twin of the CPU
// reference's select_top_k: the k largest values of a row, ties broken toward
// the lower index, indices written in ascending order.
//
// The values are mapped onto order-preserving uint32 keys. The bits above the
// highest bit in which the row's smallest and largest keys differ are common
// to every key, so the k-th largest key is found digit by digit (11 bits at a
// time) below them: the first digit then spreads even a narrow distribution
// over many bins. It stops early when the bin holding the k-th key is taken
// whole, and once that bin holds few keys they are compacted into shared
// memory so later digits never re-read the row. A final pass in index order
// takes every key above the threshold and the first `remaining` equal ones.
//
// Every pass over the row is bound by the latency of its loads (the row sits
// in L2): each thread keeps 16 values in flight, as four 16-byte loads (the
// final pass: kRun values).
#pragma once

#include <cooperative_groups.h>

#include "cuda/device_common.cuh"

namespace kascade::cuda {

// The histogram bin holding the `remaining`-th largest key: its digit, the
// rank still to take inside it, and how many keys it holds.
struct ThresholdBin {
  unsigned int digit;
  unsigned int remaining;
  unsigned int count;
};

// The range of a block's keys, folded in shared memory.
struct KeyRange {
  unsigned int low, high;
};

template <int kThreads>
struct RadixSelectShared {
  static constexpr int kWarps = kThreads / 32;
  static constexpr int kBins = 2048;        // 11-bit digits
  static constexpr int kCandidates = 2048;  // keys kept in shared memory once the bin is this small
  unsigned int histogram[kBins];
  uint32_t candidates[kCandidates];
  unsigned int warp_totals[kWarps];
  unsigned int candidate_count;
  KeyRange key_range;  // of the row's keys
  ThresholdBin threshold;
};

namespace detail {

// Folds per-thread key ranges into `range` (which must hold 0xffffffff / 0
// beforehand). Ends with a barrier.
__device__ __forceinline__ void reduce_key_range(uint32_t low, uint32_t high, KeyRange& range) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    low = min(low, __shfl_xor_sync(0xffffffffu, low, offset));
    high = max(high, __shfl_xor_sync(0xffffffffu, high, offset));
  }
  if ((threadIdx.x & 31) == 0) {
    atomicMin(&range.low, low);
    atomicMax(&range.high, high);
  }
  __syncthreads();
}

// The bits above the highest one in which `low` and `high` differ are common
// to every key between them: a threshold search starts from them.
struct CommonBits {
  int high_bit;  // the highest differing bit, -1 when low == high
  uint32_t mask, prefix;
};
__device__ __forceinline__ CommonBits common_bits(uint32_t low, uint32_t high) {
  CommonBits bits;
  bits.high_bit = low == high ? -1 : 31 - __clz(low ^ high);
  bits.mask = bits.high_bit < 0 ? 0xffffffffu : bits.high_bit == 31 ? 0u : ~((2u << bits.high_bit) - 1u);
  bits.prefix = low & bits.mask;
  return bits;
}

// Exclusive prefix of `count` over the block (in thread order) and the block
// total; uses warp shuffles and one shared slot per warp. Two barriers.
template <int kThreads>
__device__ __forceinline__ unsigned int block_exclusive_scan(unsigned int count, unsigned int& total,
                                                             unsigned int* warp_totals) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  unsigned int inclusive = count;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const unsigned int up = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += up;
  }
  if (lane == 31) warp_totals[warp] = inclusive;
  __syncthreads();
  unsigned int before = 0;
  total = 0;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) {
    const unsigned int t = warp_totals[w];
    before += w < warp ? t : 0u;
    total += t;
  }
  __syncthreads();  // warp_totals is reused by the next scan
  return before + inclusive - count;
}

// Finds the bin of histogram[first, last) holding the `remaining`-th largest
// key counted from bin last - 1 down; publishes it (its absolute index) in
// `result`. Each thread owns up to kMaxPerThread consecutive bins. Ends with
// a barrier.
template <int kThreads, int kMaxPerThread>
__device__ __forceinline__ void find_threshold_bin_in(const unsigned int* histogram, int first, int last,
                                                      unsigned int remaining, unsigned int* warp_totals,
                                                      ThresholdBin& result) {
  const int per_thread = (last - first + kThreads - 1) / kThreads;
  const int top = last - 1 - static_cast<int>(threadIdx.x) * per_thread;  // this thread's highest bin
  unsigned int counts[kMaxPerThread];
  unsigned int local = 0;
#pragma unroll
  for (int j = 0; j < kMaxPerThread; ++j) {
    counts[j] = j < per_thread && top - j >= first ? histogram[top - j] : 0u;
    local += counts[j];
  }
  unsigned int total;
  unsigned int above = block_exclusive_scan<kThreads>(local, total, warp_totals);
  if (above < remaining && remaining <= above + local) {
#pragma unroll
    for (int j = 0; j < kMaxPerThread; ++j) {
      if (above < remaining && remaining <= above + counts[j]) {
        result.digit = top - j;
        result.remaining = remaining - above;
        result.count = counts[j];
      }
      above += counts[j];
    }
  }
  __syncthreads();
}

// The same over a whole histogram of kBins counts.
template <int kThreads, int kBins>
__device__ __forceinline__ void find_threshold_bin(const unsigned int* histogram, unsigned int remaining,
                                                   unsigned int* warp_totals, ThresholdBin& result) {
  static_assert(kBins % kThreads == 0, "each thread owns whole bins when scanning");
  find_threshold_bin_in<kThreads, kBins / kThreads>(histogram, 0, kBins, remaining, warp_totals, result);
}

// Calls visit(value) once for every value of values[0, n), in no particular
// order: a few leading values up to a 16-byte boundary, then float4s, four
// per thread in flight, then the last few.
template <int kThreads, typename Visit>
__device__ __forceinline__ void for_each_value(const float* values, int n, Visit&& visit) {
  constexpr int kInFlight = 4;
  const int tid = threadIdx.x;
  const int head = min(n, static_cast<int>(((16u - (reinterpret_cast<uintptr_t>(values) & 15u)) & 15u) / 4u));
  if (tid < head) visit(values[tid]);
  const float4* vectors = reinterpret_cast<const float4*>(values + head);
  const int n_vectors = (n - head) / 4;
  for (int base = 0; base < n_vectors; base += kInFlight * kThreads) {
    float4 loaded[kInFlight];
#pragma unroll
    for (int e = 0; e < kInFlight; ++e) {
      const int v = base + e * kThreads + tid;
      if (v < n_vectors) loaded[e] = vectors[v];
    }
#pragma unroll
    for (int e = 0; e < kInFlight; ++e) {
      if (base + e * kThreads + tid < n_vectors) {
        visit(loaded[e].x);
        visit(loaded[e].y);
        visit(loaded[e].z);
        visit(loaded[e].w);
      }
    }
  }
  const int tail = head + 4 * n_vectors + tid;
  if (tail < n) visit(values[tail]);
}

// Loads values[first, first + kRun) into run (kRun a multiple of 4; 0 past
// n): as float4s when the row is 16-byte aligned and the run is whole.
template <int kRun>
__device__ __forceinline__ void load_run(const float* values, int n, int first, bool aligned, float (&run)[kRun]) {
  static_assert(kRun % 4 == 0, "a run is whole float4s");
  if (aligned && first + kRun <= n) {
    const float4* vectors = reinterpret_cast<const float4*>(values + first);
#pragma unroll
    for (int v = 0; v < kRun / 4; ++v) {
      const float4 loaded = vectors[v];
      run[4 * v] = loaded.x;
      run[4 * v + 1] = loaded.y;
      run[4 * v + 2] = loaded.z;
      run[4 * v + 3] = loaded.w;
    }
  } else {
#pragma unroll
    for (int e = 0; e < kRun; ++e) run[e] = first + e < n ? values[first + e] : 0.f;
  }
}

}  // namespace detail

// Selects the k largest of values[0, n) into out[0, k) in ascending index
// order. All threads of the block must call it; it ends with a barrier.
// kRun: consecutive values a thread takes per round of the final pass (more
// loads in flight for more registers). Out of line: inlined into the tile
// selection, its registers pushed that kernel's streaming loop into spills.
template <int kThreads, int kRun = 8>
__device__ __noinline__ void select_top_k_block(const float* values, int n, int k, int* out,
                                                RadixSelectShared<kThreads>& shared) {
  using Shared = RadixSelectShared<kThreads>;
  const int tid = threadIdx.x;
  if (k >= n) {  // the whole row
    for (int i = tid; i < n; i += kThreads) out[i] = i;
    __syncthreads();
    return;
  }
  if (k <= 0) return;

  // The keys' range, reduced into shared.key_range.
  if (tid == 0) shared.key_range = {0xffffffffu, 0u};
  __syncthreads();
  uint32_t low = 0xffffffffu, high = 0u;
  detail::for_each_value<kThreads>(values, n, [&](float value) {
    const uint32_t key = float_order_key(value);
    low = min(low, key);
    high = max(high, key);
  });
  detail::reduce_key_range(low, high, shared.key_range);
  const detail::CommonBits common = detail::common_bits(shared.key_range.low, shared.key_range.high);
  int high_bit = common.high_bit;
  uint32_t mask = common.mask, prefix = common.prefix;
  unsigned int remaining = static_cast<unsigned int>(k);
  bool compacted = false;
  while (high_bit >= 0) {
    const int width = high_bit + 1 < 11 ? high_bit + 1 : 11;
    const int shift = high_bit + 1 - width;
    const uint32_t digit_mask = (1u << width) - 1u;
    high_bit = shift - 1;
    for (int i = tid; i < Shared::kBins; i += kThreads) shared.histogram[i] = 0;
    __syncthreads();
    if (compacted) {
      for (unsigned int i = tid; i < shared.candidate_count; i += kThreads) {
        const uint32_t key = shared.candidates[i];
        if ((key & mask) == prefix) atomicAdd(&shared.histogram[(key >> shift) & digit_mask], 1u);
      }
    } else {
      detail::for_each_value<kThreads>(values, n, [&](float value) {
        const uint32_t key = float_order_key(value);
        if ((key & mask) == prefix) atomicAdd(&shared.histogram[(key >> shift) & digit_mask], 1u);
      });
    }
    __syncthreads();
    detail::find_threshold_bin<kThreads, Shared::kBins>(shared.histogram, remaining, shared.warp_totals,
                                                        shared.threshold);
    prefix |= shared.threshold.digit << shift;
    mask |= digit_mask << shift;
    remaining = shared.threshold.remaining;
    const unsigned int bin_count = shared.threshold.count;
    if (bin_count == remaining) break;  // the whole bin is taken: no finer digit matters
    if (high_bit >= 0 && !compacted && bin_count <= Shared::kCandidates) {
      if (tid == 0) shared.candidate_count = 0;
      __syncthreads();
      // The matching lanes of a warp take their slots with one atomic.
      detail::for_each_value<kThreads>(values, n, [&](float value) {
        const uint32_t key = float_order_key(value);
        if ((key & mask) == prefix) {
          const auto matching = cooperative_groups::coalesced_threads();
          unsigned int slot = 0;
          if (matching.thread_rank() == 0) slot = atomicAdd(&shared.candidate_count, matching.size());
          shared.candidates[matching.shfl(slot, 0) + matching.thread_rank()] = key;
        }
      });
      __syncthreads();
      compacted = true;
    }
    __syncthreads();  // the threshold is rewritten by the next digit
  }

  // Final pass in index order: each thread owns kRun consecutive elements per round.
  const bool aligned = (reinterpret_cast<uintptr_t>(values) & 15u) == 0;
  unsigned int equal_seen = 0, taken = 0;  // block-uniform running totals
  for (int base = 0; base < n; base += kThreads * kRun) {
    const int first = base + tid * kRun;
    float run[kRun];
    detail::load_run(values, n, first, aligned, run);
    uint32_t keys[kRun];
    unsigned int equal_count = 0;
#pragma unroll
    for (int e = 0; e < kRun; ++e) {
      keys[e] = float_order_key(run[e]) & mask;
      equal_count += (first + e < n && keys[e] == prefix) ? 1u : 0u;
    }
    unsigned int equal_total;
    unsigned int equal_rank =
        equal_seen + detail::block_exclusive_scan<kThreads>(equal_count, equal_total, shared.warp_totals);
    bool take[kRun];
    unsigned int take_count = 0;
#pragma unroll
    for (int e = 0; e < kRun; ++e) {
      const bool valid = first + e < n;
      const bool equal = valid && keys[e] == prefix;
      take[e] = valid && (keys[e] > prefix || (equal && equal_rank < remaining));
      equal_rank += equal ? 1u : 0u;
      take_count += take[e] ? 1u : 0u;
    }
    unsigned int take_total;
    unsigned int position =
        taken + detail::block_exclusive_scan<kThreads>(take_count, take_total, shared.warp_totals);
#pragma unroll
    for (int e = 0; e < kRun; ++e) {
      if (take[e]) out[position++] = first + e;
    }
    equal_seen += equal_total;
    taken += take_total;
  }
  __syncthreads();
}

}  // namespace kascade::cuda
