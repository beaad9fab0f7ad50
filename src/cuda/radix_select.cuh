// Exact block-wide top-k selection (radix select), the GPU twin of the CPU
// reference's select_top_k: the k largest values of a row, ties broken toward
// the lower index, indices written in ascending order.
//
// Four histogram passes of 8 bits each over the order-preserving uint32 keys
// find the k-th largest key exactly; a final pass in index order takes every
// key above it and the first `remaining` keys equal to it.
#pragma once

#include "cuda/device_common.cuh"

namespace kascade::cuda {

template <int kThreads>
struct RadixSelectShared {
  static constexpr int kWarps = kThreads / 32;
  unsigned int histogram[256];
  unsigned int warp_totals[kWarps];
  unsigned int digit;
  unsigned int remaining;
};

namespace detail {

// Exclusive prefix of `count` over the block (in thread order) and the block
// total; uses warp shuffles and one shared slot per warp. Two barriers.
template <int kThreads>
__device__ __forceinline__ unsigned int block_exclusive_scan(unsigned int count, unsigned int& total,
                                                             RadixSelectShared<kThreads>& shared) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  unsigned int inclusive = count;
#pragma unroll
  for (int offset = 1; offset < 32; offset <<= 1) {
    const unsigned int up = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += up;
  }
  if (lane == 31) shared.warp_totals[warp] = inclusive;
  __syncthreads();
  unsigned int before = 0;
  total = 0;
#pragma unroll
  for (int w = 0; w < RadixSelectShared<kThreads>::kWarps; ++w) {
    const unsigned int t = shared.warp_totals[w];
    before += w < warp ? t : 0u;
    total += t;
  }
  __syncthreads();  // warp_totals is reused by the next scan
  return before + inclusive - count;
}

}  // namespace detail

// Selects the k largest of values[0, n) into out[0, k) in ascending index
// order. All threads of the block must call it; it ends with a barrier.
template <int kThreads>
__device__ void select_top_k_block(const float* values, int n, int k, int* out,
                                   RadixSelectShared<kThreads>& shared) {
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  if (k >= n) {  // the whole row
    for (int i = tid; i < n; i += kThreads) out[i] = i;
    __syncthreads();
    return;
  }
  if (k <= 0) return;

  uint32_t prefix = 0, mask = 0;
  unsigned int remaining = static_cast<unsigned int>(k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += kThreads) shared.histogram[i] = 0;
    __syncthreads();
    for (int base = 0; base < n; base += kThreads) {
      const int i = base + tid;
      uint32_t bin = 0xffffffffu;
      if (i < n) {
        const uint32_t key = float_order_key(values[i]);
        if ((key & mask) == prefix) bin = (key >> shift) & 255u;
      }
      // Values cluster in few bins: one atomic per distinct bin per warp.
      const unsigned int peers = __match_any_sync(0xffffffffu, bin);
      if (bin != 0xffffffffu && lane == __ffs(peers) - 1) atomicAdd(&shared.histogram[bin], __popc(peers));
    }
    __syncthreads();
    if (tid < 32) {
      // Lane l owns bins 255-8l .. 248-8l; scan from the top bin down.
      unsigned int counts[8];
      unsigned int local = 0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        counts[j] = shared.histogram[255 - 8 * lane - j];
        local += counts[j];
      }
      unsigned int inclusive = local;
#pragma unroll
      for (int offset = 1; offset < 32; offset <<= 1) {
        const unsigned int up = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive += up;
      }
      unsigned int above = inclusive - local;
      if (above < remaining && remaining <= inclusive) {
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          if (above + counts[j] >= remaining) {
            shared.digit = 255u - 8u * lane - j;
            shared.remaining = remaining - above;
            break;
          }
          above += counts[j];
        }
      }
    }
    __syncthreads();
    prefix |= shared.digit << shift;
    mask |= 255u << shift;
    remaining = shared.remaining;
  }

  // Final pass in index order: each thread owns 8 consecutive elements per round.
  constexpr int kPerThread = 8;
  unsigned int equal_seen = 0, taken = 0;  // block-uniform running totals
  for (int base = 0; base < n; base += kThreads * kPerThread) {
    const int first = base + tid * kPerThread;
    uint32_t keys[kPerThread];
    unsigned int equal_count = 0;
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
      keys[e] = first + e < n ? float_order_key(values[first + e]) : 0u;
      equal_count += (first + e < n && keys[e] == prefix) ? 1u : 0u;
    }
    unsigned int equal_total;
    unsigned int equal_rank = equal_seen + detail::block_exclusive_scan(equal_count, equal_total, shared);
    bool take[kPerThread];
    unsigned int take_count = 0;
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
      const bool valid = first + e < n;
      const bool equal = valid && keys[e] == prefix;
      take[e] = valid && (keys[e] > prefix || (equal && equal_rank < remaining));
      equal_rank += equal ? 1u : 0u;
      take_count += take[e] ? 1u : 0u;
    }
    unsigned int take_total;
    unsigned int position = taken + detail::block_exclusive_scan(take_count, take_total, shared);
#pragma unroll
    for (int e = 0; e < kPerThread; ++e) {
      if (take[e]) out[position++] = first + e;
    }
    equal_seen += equal_total;
    taken += take_total;
  }
  __syncthreads();
}

}  // namespace kascade::cuda
