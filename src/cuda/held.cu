// The key lists of held decode steps (kascade_cuda.h, held_decode; the CPU
// twin is attention/kascade_ops.h's held_keys): one block per (KV head,
// sequence) marks the selection, its shift and the new keys in a bitmap of the
// sequence's keys in shared memory, which removes duplicates and sorts at
// once, then writes the marked keys out in ascending order, each thread a
// contiguous run of the bitmap's words at the offset a block-wide scan gives.
#include "cuda/device_common.cuh"
#include "cuda/kernels.h"

namespace kascade::cuda::detail {
namespace {

constexpr int kHeldThreads = 512;
constexpr int kHeldWarps = kHeldThreads / 32;

__global__ void __launch_bounds__(kHeldThreads) held_keys_kernel(const HeldKeysParams p) {
  extern __shared__ unsigned held_shared[];
  unsigned* marked = held_shared + kHeldWarps;  // bit j of word w: key 32 w + j
  unsigned* warp_totals = held_shared;
  const int kv_head = blockIdx.x, b = blockIdx.y;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int n = p.seq_lens[b];
  const int selected_keys = min(p.selected_lens[b], n);
  const int age = n - selected_keys;
  const int words = (n + 31) / 32;
  const int64_t set = int64_t(b) * p.n_kv_heads + kv_head;

  for (int w = tid; w < words; w += kHeldThreads) marked[w] = 0;
  __syncthreads();
  auto mark = [&](int key) { atomicOr(&marked[key >> 5], 1u << (key & 31)); };
  const int* selection = p.selected + set * p.selected_stride;
  const int count = int(min(int64_t(p.selected_counts[b]), p.selected_stride));
  for (int i = tid; i < count; i += kHeldThreads) {
    const int key = __ldg(selection + i);
    if (key < 0 || key >= selected_keys) continue;  // not a key of the selecting step
    mark(key);
    if (key + age < selected_keys) mark(key + age);  // shifted keys from selected_keys on are the new ones
  }
  for (int key = selected_keys + tid; key < n; key += kHeldThreads) mark(key);
  __syncthreads();

  // Each thread's run of words, its keys counted, then the exclusive prefix
  // of the counts over the block.
  const int per_thread = (words + kHeldThreads - 1) / kHeldThreads;
  const int first_word = min(words, tid * per_thread), end_word = min(words, first_word + per_thread);
  int mine = 0;
  for (int w = first_word; w < end_word; ++w) mine += __popc(marked[w]);
  int inclusive = mine;
  for (int offset = 1; offset < 32; offset <<= 1) {
    const int below = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += below;
  }
  if (lane == 31) warp_totals[warp] = inclusive;
  __syncthreads();
  int before = inclusive - mine;
  for (int w = 0; w < warp; ++w) before += warp_totals[w];

  int* out = p.keys + set * p.key_stride;
  int at = before;
  for (int w = first_word; w < end_word; ++w)
    for (unsigned bits = marked[w]; bits; bits &= bits - 1) {
      if (at < p.key_stride) out[at] = 32 * w + __ffs(bits) - 1;
      ++at;
    }
  if (tid == kHeldThreads - 1) p.counts[set] = int(min(int64_t(at), p.key_stride));
}

}  // namespace

int held_keys_shared_bytes(int max_seq_len) {
  return int((kHeldWarps + (int64_t(max_seq_len) + 31) / 32) * sizeof(unsigned));
}

void launch_held_keys(const HeldKeysParams& params, cudaStream_t stream) {
  const int shared_bytes = held_keys_shared_bytes(params.max_seq_len);
  static const bool configured = [] {
    check_cuda(cudaFuncSetAttribute(reinterpret_cast<const void*>(held_keys_kernel),
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, kHeldKeysMaxSharedBytes),
               "cudaFuncSetAttribute (held_keys_kernel)");
    return true;
  }();
  (void)configured;
  launch_kernel(reinterpret_cast<const void*>(held_keys_kernel), dim3(params.n_kv_heads, params.batch), kHeldThreads,
                size_t(shared_bytes), const_cast<HeldKeysParams*>(&params), false, 1, stream,
                "launch held_keys_kernel");
}

}  // namespace kascade::cuda::detail
