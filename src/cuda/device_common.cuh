// Device building blocks shared by every attention kernel: element types,
// 16-byte async copies, swizzled shared-memory tiles, ldmatrix and the
// m16n8k16 tensor-core product (fp32 accumulate). Kernels are written in
// these terms so that dense, anchor and reuse paths share one inner loop.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace kascade::cuda {

// Element type traits: the PTX name used by mma and the packed conversion
// of two fp32 values (low index in the low half, as the mma layouts expect).
template <typename T>
struct ElementTraits;

template <>
struct ElementTraits<__half> {
  __device__ static __forceinline__ uint32_t pack2(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  __device__ static __forceinline__ __half from_float(float x) { return __float2half_rn(x); }
};

template <>
struct ElementTraits<__nv_bfloat16> {
  __device__ static __forceinline__ uint32_t pack2(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&h);
  }
  __device__ static __forceinline__ __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
};

// D += A * B for one m16n8k16 tile: A 16x16 row-major (4 regs), B 16x8
// column-major (2 regs), D 16x8 fp32 (4 regs). Layouts follow the PTX ISA:
// lane = 4*group + t; A regs hold (row group | group+8, cols 2t..2t+1 | +8),
// B regs hold (k 2t..2t+1 | +8, col group), D holds (row group | group+8,
// cols 2t, 2t+1).
template <typename T>
__device__ __forceinline__ void mma_16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma_16816<__half>(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma_16816<__nv_bfloat16>(float d[4], const uint32_t a[4], uint32_t b0,
                                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t shared_address(const void* pointer) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// 16-byte global -> shared copy that bypasses L1; when `valid` is false the
// destination is zero-filled and nothing is read (tails of key ranges).
__device__ __forceinline__ void cp_async_16(uint32_t destination, const void* source, bool valid) {
  const int source_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(destination), "l"(source),
               "r"(source_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t address, uint32_t r[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t address, uint32_t r[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

// A shared-memory tile of rows of kHeadDim 16-bit elements. The 16-byte
// chunk c of row r lives at chunk c ^ (r % 8): the eight rows one ldmatrix
// reads then fall in eight different bank groups (rows are a multiple of
// 128 bytes long, so without the swizzle all eight would collide).
template <int kHeadDim>
struct SwizzledTile {
  static constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
  static_assert(kChunks >= 8, "the swizzle needs rows of at least 128 bytes");
  __device__ static __forceinline__ uint32_t offset(int row, int chunk) {
    return static_cast<uint32_t>(row * kHeadDim * 2 + ((chunk ^ (row & 7)) << 4));
  }
};

// Loads the A fragment (16 rows x 16 columns starting at column 16*k_step)
// of a swizzled row-major tile whose 16 rows start at `row0`.
template <int kHeadDim>
__device__ __forceinline__ void load_a_fragment(uint32_t tile, int row0, int k_step, int lane, uint32_t a[4]) {
  const int matrix = lane >> 3;
  const int row = row0 + ((matrix & 1) << 3) + (lane & 7);
  const int chunk = 2 * k_step + (matrix >> 1);
  ldmatrix_x4(tile + SwizzledTile<kHeadDim>::offset(row, chunk), a);
}

// Loads B fragments for S = Q K^T: keys [key0, key0+16) of a swizzled key
// tile, dimensions [16*k_step, 16*k_step+16). b[0..1] serve keys key0..+7,
// b[2..3] keys key0+8..+15.
template <int kHeadDim>
__device__ __forceinline__ void load_key_fragments(uint32_t tile, int key0, int k_step, int lane, uint32_t b[4]) {
  const int matrix = lane >> 3;
  const int row = key0 + ((matrix >> 1) << 3) + (lane & 7);
  const int chunk = 2 * k_step + (matrix & 1);
  ldmatrix_x4(tile + SwizzledTile<kHeadDim>::offset(row, chunk), b);
}

// Loads B fragments for O += P V: keys [key0, key0+16) of a swizzled value
// tile, dimensions [16*pair, 16*pair+16). b[0..1] serve dimensions
// 16*pair..+7, b[2..3] dimensions 16*pair+8..+15.
template <int kHeadDim>
__device__ __forceinline__ void load_value_fragments(uint32_t tile, int key0, int pair, int lane, uint32_t b[4]) {
  const int matrix = lane >> 3;
  const int row = key0 + ((matrix & 1) << 3) + (lane & 7);
  const int chunk = 2 * pair + (matrix >> 1);
  ldmatrix_x4_trans(tile + SwizzledTile<kHeadDim>::offset(row, chunk), b);
}

// 2^x in one MUFU instruction (exp2f is four: it keeps denormal results).
// Denormal results flush to zero: probabilities below 2^-126 of the row
// maximum, far under fp16/bf16 resolution and under any pooled sum that matters.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Order-preserving map of a float onto uint32 (larger float, larger key).
// -0.0 maps like +0.0, as the CPU reference counts them equal.
__device__ __forceinline__ uint32_t float_order_key(float x) {
  uint32_t bits = __float_as_uint(x);
  if (bits == 0x80000000u) bits = 0;
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

}  // namespace kascade::cuda
