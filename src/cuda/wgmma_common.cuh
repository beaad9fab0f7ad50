// Hopper (sm_90a) prefill core: wgmma.mma_async with operands in shared
// memory (128-byte swizzle, matrix descriptors), K/V tiles loaded by the
// tensor-memory accelerator (cp.async.bulk.tensor, causal passes) or gathered
// row by row with cp.async (a tile's selected keys), mbarrier pipelines, and
// warp specialisation: two consumer warpgroups of 64 rows each and a producer
// warpgroup that moves its registers to them with setmaxnreg (the attention
// passes), or four consumer warpgroups on two query tiles and a producer warp
// (the LSE pass: Config). The tile selection has no producer: two warpgroups
// per tile, two tiles per block (SelectConfig).
//
// Covers head_dim 64, 128 and 256 (fp16, bf16): the dense causal pass, the
// anchor's LSE pass, the selected-keys-plus-own-tile pass and the anchor's
// pooled tile selection.
//
// Block rows are as in prefill.cu: 128 (query, head) rows of one KV head
// (256, two 128-row query tiles, in the LSE pass), row r = query q0 + r / g,
// head r % g. Consumer warpgroup w owns rows [64 w, 64 w + 64); keys stream
// in chunks of 128 (64 for the attention passes of head_dim 256, whose O
// accumulator takes 128 registers a thread).
//
// Shared tiles hold rows of head_dim elements as 64-element halves (each
// [rows][128 B], 16-byte chunk c of row r at chunk c ^ (r % 8)): the layout
// TMA's SWIZZLE_128B writes and wgmma's 128-byte-swizzle descriptors read.
// S = Q K^T takes both operands from shared memory (K-major); O += P V takes
// P from registers (the S accumulator layout is the A-fragment layout) and V
// from shared memory as an MN-major (transposed) operand.
#pragma once

#include <cuda.h>

#include "cuda/device_common.cuh"
#include "cuda/kernels.h"
#include "cuda/softmax_state.cuh"

namespace kascade::cuda::detail::hopper {

constexpr int kRows = kPrefillBlockRows;  // two consumer warpgroups x 64
constexpr int kConsumerThreads = 256;  // 2 consumer warpgroups (+ a producer warpgroup or warp: Config)
constexpr int kQueryHalfBytes = kRows * 128;

// Tiles of head_dim kDim in chunks of kChunk keys: kDim / 64 swizzled
// 64-element halves (four at 256; "halves" for short).
template <int kDim, int kChunkKeys>
struct Tiles {
  static_assert(kDim == 64 || kDim == 128 || kDim == 256, "the Hopper core serves head_dim 64, 128 and 256");
  static constexpr int kHalves = kDim / 64;
  static constexpr int kChunk = kChunkKeys;                // keys per pipeline stage
  static constexpr int kHalfBytes = kChunk * 128;          // one half of a K or V tile
  static constexpr int kTileBytes = kHalves * kHalfBytes;
  static constexpr int kQueryBytes = kHalves * kQueryHalfBytes;
  // O accumulators of a consumer thread: 64 rows x kDim over 128 threads.
  static constexpr int kOutRegisters = kDim / 2;
};
// The attention passes' tiles: 128-key chunks, 64 at head_dim 256 (O takes
// 128 registers a thread there, the scores another kChunk / 2).
template <int kDim>
using AttentionTiles = Tiles<kDim, kDim == 256 ? 64 : 128>;
// The tile selection's: 128-key chunks (two warpgroups x 64 keys).
constexpr int kSelectChunkKeys = 128;
template <int kDim>
using SelectTiles = Tiles<kDim, kSelectChunkKeys>;

template <int kDim, bool kReadValues>
struct Config {
  using Tile = AttentionTiles<kDim>;
  // The LSE pass (no values) up to head_dim 128 streams each key chunk once
  // for two 128-row query tiles (units): four consumer warpgroups, half the
  // key loads of two independent blocks (the selection streams two tiles the
  // same way). Four warpgroups, not two, per multiprocessor keep the
  // exponential unit busy while some wait on their products (per-block clock
  // timelines showed two warpgroups waiting on their products together; two
  // blocks of two keep four too, but load every key chunk twice: anchors 2-5 %
  // slower). Such a block has one producer warp after
  // the consumer warpgroups (wgmma needs warpgroup-aligned warps) and no
  // register moves: 544 threads x 120 registers fit the register file.
  // Otherwise a producer warpgroup comes first and hands registers to the
  // two consumer warpgroups (setmaxnreg).
  static constexpr int kUnits = !kReadValues && kDim <= 128 ? 2 : 1;
  static constexpr bool kProducerWarpLast = kUnits == 2;
  static constexpr int kConsumerWarpgroups = 2 * kUnits;
  static constexpr int kBlockRows = kUnits * kRows;
  static constexpr int kThreads = kProducerWarpLast ? kUnits * kConsumerThreads + 32 : 384;
  // Stages fit beside the query tiles in 227 KB (head_dim 256 with values: two).
  static constexpr int kStages = kReadValues ? (kDim == 256 ? 2 : 3) : 4;
  static constexpr int kStageBytes = Tile::kTileBytes * (kReadValues ? 2 : 1);
  static constexpr int kBarrierOffset = kUnits * Tile::kQueryBytes + kStages * kStageBytes;
  // + barriers, + 1 KB to align the tiles to the 1024-byte swizzle atom.
  static constexpr int kSharedBytes = kBarrierOffset + 4 * kStages * 8 + 1024;
};

// Kernel parameters: the generic prefill parameters plus the K/V tensor maps
// (2-D views [batch * G * capacity rows][head_dim], boxes of 64 x 128, 128-byte
// swizzle); the maps are unused by the gathering pass.
struct Params {
  CUtensorMap keys_map;
  CUtensorMap values_map;
  PrefillParams p;
  int capacity = 0;
};

// The anchor's tile selection. An item is kUnits neighbouring tiles of one
// KV head: two up to head_dim 128, so that each key tile brought into shared
// memory serves both (half the key loads per tile); one at 256, whose
// query tiles are twice the size. Two warpgroups per tile (keys [0, 64) and
// [64, 128) of a chunk), one block per multiprocessor, the query tiles and
// kStages key stages in shared memory (the radix select's state reuses the
// stages once an item's chunks are done).
template <int kDim>
struct SelectConfig {
  using Tile = SelectTiles<kDim>;
  static constexpr int kUnits = kDim == 256 ? 1 : 2;
  static constexpr int kThreads = kConsumerThreads * kUnits;
  static constexpr int kStages = kUnits == 2 ? 4 : 2;
  static constexpr int kSharedBytes = kUnits * Tile::kQueryBytes + kStages * Tile::kTileBytes + 2 * kStages * 8 + 1024;
};

struct SelectParams {
  CUtensorMap keys_map;
  TileSelectParams p;
  int capacity = 0;
};


__device__ __forceinline__ uint32_t swizzled(int row, int chunk, int half_bytes) {
  return static_cast<uint32_t>((chunk >> 3) * half_bytes + row * 128 + (((chunk & 7) ^ (row & 7)) << 4));
}

// Matrix descriptors, 128-byte swizzle. K-major: 8-row groups 1024 B apart
// (SBO), the leading offset unused. MN-major: 64-element blocks along N
// `leading` bytes apart (LBO), 8-row groups along K 1024 B apart (SBO).
__device__ __forceinline__ uint64_t descriptor_k_major(uint32_t address) {
  return uint64_t((address & 0x3FFFF) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}
__device__ __forceinline__ uint64_t descriptor_mn_major(uint32_t address, uint32_t leading) {
  return uint64_t((address & 0x3FFFF) >> 4) | (uint64_t(leading >> 4) << 16) | (uint64_t(1024 >> 4) << 32) |
         (uint64_t(1) << 62);
}
// The descriptor of the operand `bytes` past the one `descriptor` describes:
// one 32-bit add on the start-address field (address >> 4 in the low 14
// bits; shared memory ends below 256 KB, so the add never carries out of
// it). Rebuilding every k-step's descriptors from the address cost 36-84 of
// the 388-710 instructions of a consumer's chunk.
__device__ __forceinline__ uint64_t descriptor_advance(uint64_t descriptor, uint32_t bytes) {
  return (descriptor & 0xFFFFFFFF00000000ull) | uint32_t(uint32_t(descriptor) + (bytes >> 4));
}
// Byte offset of k-step k (16 elements) of a K-major operand stored as two
// 64-element halves `half_bytes` apart.
__device__ __forceinline__ uint32_t k_step_offset(int k, int half_bytes) {
  return static_cast<uint32_t>((k >> 2) * half_bytes + (k & 3) * 32);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accumulator reads/writes across the async window.
template <int kCount>
__device__ __forceinline__ void fence_registers(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The 64 fp32 accumulators of one m64n128 wgmma: their PTX operand list and
// their asm constraints (shared by the fp16 and bf16, SS and RS forms below).
#define KASCADE_WGMMA_ACCUMULATORS "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
// Accumulator asm constraints, eight at a time (d[i] ... d[i + 7]).
#define KASCADE_WGMMA_EIGHT(i) \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define KASCADE_WGMMA_ACCUMULATOR_OPERANDS_32 \
    KASCADE_WGMMA_EIGHT(0), KASCADE_WGMMA_EIGHT(8), KASCADE_WGMMA_EIGHT(16), KASCADE_WGMMA_EIGHT(24)
#define KASCADE_WGMMA_ACCUMULATOR_OPERANDS \
    KASCADE_WGMMA_ACCUMULATOR_OPERANDS_32, KASCADE_WGMMA_EIGHT(32), KASCADE_WGMMA_EIGHT(40), KASCADE_WGMMA_EIGHT(48), \
    KASCADE_WGMMA_EIGHT(56)

// The 32 accumulators of one m64n64 wgmma (head_dim 64's P V, head_dim 256's
// Q K^T over a 64-key chunk) and the 128 of one m64n256 (head_dim 256's P V).
#define KASCADE_WGMMA_ACCUMULATORS_32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
#define KASCADE_WGMMA_ACCUMULATORS_128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
#define KASCADE_WGMMA_ACCUMULATOR_OPERANDS_128 \
    KASCADE_WGMMA_ACCUMULATOR_OPERANDS, KASCADE_WGMMA_EIGHT(64), KASCADE_WGMMA_EIGHT(72), KASCADE_WGMMA_EIGHT(80), \
    KASCADE_WGMMA_EIGHT(88), KASCADE_WGMMA_EIGHT(96), KASCADE_WGMMA_EIGHT(104), KASCADE_WGMMA_EIGHT(112), \
    KASCADE_WGMMA_EIGHT(120)

// D (64 x 128, fp32) = A (64 x 16, shared) * B (16 x 128, shared, K-major) [+ D].
template <typename T>
__device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int accumulate);
// D (64 x 128) += A (64 x 16, registers) * B (16 x 128, shared, MN-major).
template <typename T>
__device__ __forceinline__ void wgmma_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, int accumulate);
// The same products with N = 64 (32 accumulators: Q K^T over a 64-key chunk,
// P V at head_dim 64) and, for P V, N = 256 (128 accumulators: head_dim 256).
template <typename T>
__device__ __forceinline__ void wgmma_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int accumulate);
template <typename T>
__device__ __forceinline__ void wgmma_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t desc_b, int accumulate);
template <typename T>
__device__ __forceinline__ void wgmma_rs(float (&d)[128], const uint32_t (&a)[4], uint64_t desc_b, int accumulate);

// One specialisation per form: ACCUMULATORS fp32 accumulators of a SHAPE
// wgmma, their PTX list and asm constraints, then the %-indices of the
// operands that follow them (A: a descriptor, or four registers for RS; B;
// the accumulate predicate), spelled out since the preprocessor cannot add.
#define KASCADE_WGMMA_SS(T, PTX_TYPE, ACCUMULATORS, SHAPE, ACCUMULATOR_LIST, ACCUMULATOR_OPERANDS, A, B, P) \
  template <>                                                                                               \
  __device__ __forceinline__ void wgmma_ss<T>(float (&d)[ACCUMULATORS], uint64_t desc_a, uint64_t desc_b,   \
                                              int accumulate) {                                             \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                                             \
                 "wgmma.mma_async.sync.aligned." SHAPE ".f32." PTX_TYPE "." PTX_TYPE " "                    \
                 ACCUMULATOR_LIST A ", " B ", p, 1, 1, 0, 0;\n}\n"                                          \
                 : ACCUMULATOR_OPERANDS                                                                     \
                 : "l"(desc_a), "l"(desc_b), "r"(accumulate));                                              \
  }
#define KASCADE_WGMMA_RS(T, PTX_TYPE, ACCUMULATORS, SHAPE, ACCUMULATOR_LIST, ACCUMULATOR_OPERANDS, A, B, P)      \
  template <>                                                                                                    \
  __device__ __forceinline__ void wgmma_rs<T>(float (&d)[ACCUMULATORS], const uint32_t (&a)[4], uint64_t desc_b, \
                                              int accumulate) {                                                  \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " P ", 0;\n"                                                  \
                 "wgmma.mma_async.sync.aligned." SHAPE ".f32." PTX_TYPE "." PTX_TYPE " "                         \
                 ACCUMULATOR_LIST "{" A "}, " B ", p, 1, 1, 1;\n}\n"                                             \
                 : ACCUMULATOR_OPERANDS                                                                          \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(accumulate));                    \
  }

// Every form, for one element type.
#define KASCADE_WGMMA_FORMS(T, PTX_TYPE)                                                                          \
  KASCADE_WGMMA_SS(T, PTX_TYPE, 64, "m64n128k16", KASCADE_WGMMA_ACCUMULATORS, KASCADE_WGMMA_ACCUMULATOR_OPERANDS, \
                   "%64", "%65", "%66")                                                                           \
  KASCADE_WGMMA_RS(T, PTX_TYPE, 64, "m64n128k16", KASCADE_WGMMA_ACCUMULATORS, KASCADE_WGMMA_ACCUMULATOR_OPERANDS, \
                   "%64, %65, %66, %67", "%68", "%69")                                                            \
  KASCADE_WGMMA_SS(T, PTX_TYPE, 32, "m64n64k16", KASCADE_WGMMA_ACCUMULATORS_32,                                   \
                   KASCADE_WGMMA_ACCUMULATOR_OPERANDS_32, "%32", "%33", "%34")                                    \
  KASCADE_WGMMA_RS(T, PTX_TYPE, 32, "m64n64k16", KASCADE_WGMMA_ACCUMULATORS_32,                                   \
                   KASCADE_WGMMA_ACCUMULATOR_OPERANDS_32, "%32, %33, %34, %35", "%36", "%37")                     \
  KASCADE_WGMMA_RS(T, PTX_TYPE, 128, "m64n256k16", KASCADE_WGMMA_ACCUMULATORS_128,                                \
                   KASCADE_WGMMA_ACCUMULATOR_OPERANDS_128, "%128, %129, %130, %131", "%132", "%133")

KASCADE_WGMMA_FORMS(__half, "f16")
KASCADE_WGMMA_FORMS(__nv_bfloat16, "bf16")

#undef KASCADE_WGMMA_FORMS
#undef KASCADE_WGMMA_RS
#undef KASCADE_WGMMA_SS
#undef KASCADE_WGMMA_ACCUMULATOR_OPERANDS_128
#undef KASCADE_WGMMA_ACCUMULATORS_128
#undef KASCADE_WGMMA_ACCUMULATOR_OPERANDS_32
#undef KASCADE_WGMMA_ACCUMULATORS_32
#undef KASCADE_WGMMA_ACCUMULATOR_OPERANDS
#undef KASCADE_WGMMA_ACCUMULATORS
#undef KASCADE_WGMMA_EIGHT

__device__ __forceinline__ void barrier_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void barrier_expect_bytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void barrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Arrives once every cp.async this thread issued so far has landed.
__device__ __forceinline__ void barrier_arrive_on_copies(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void barrier_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Whether `value` holds in any of the `threads` threads meeting at named
// barrier `id` (a barrier itself).
__device__ __forceinline__ bool named_barrier_any(int id, int threads, bool value) {
  uint32_t any;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, %2, %3, p;\nselp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(any)
      : "r"(uint32_t(value)), "r"(id), "r"(threads)
      : "memory");
  return any != 0;
}
__device__ __forceinline__ void tma_load_2d(uint32_t destination, const CUtensorMap* map, int x, int y, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          destination),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
      : "memory");
}
template <int kCount>
__device__ __forceinline__ void registers_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kCount));
}
template <int kCount>
__device__ __forceinline__ void registers_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kCount));
}

}  // namespace kascade::cuda::detail::hopper
