// The 4-bit key sketch's writer (kascade_cuda.h, KeySketch; the CPU twin is
// attention/key_sketch.cc's sketch_block, which this matches bit for bit):
// one block of threads per (sketch block, KV head, sequence and layer), one
// thread per channel, two passes over the block's 64 keys (range, codes).
#include "cuda/device_common.cuh"
#include "cuda/kernels.h"

namespace kascade::cuda::detail {
namespace {

template <typename T>
__device__ __forceinline__ float to_float(T x);
template <>
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}
template <>
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename T, int kHeadDim>
__global__ void __launch_bounds__(kHeadDim) sketch_keys_kernel(const SketchParams p) {
  const int b = blockIdx.z % p.batch, layer = blockIdx.z / p.batch;
  const int kv_head = blockIdx.y;
  const int length = p.seq_lens[b];
  const int block = max(0, length - p.new_keys) / kSketchBlock + int(blockIdx.x);
  if (block >= length / kSketchBlock) return;  // incomplete, or past the call's blocks
  const int c = threadIdx.x;
  const T* keys = static_cast<const T*>(p.layer_keys[layer]);
  const KeySketch sketch = p.layer_sketches[layer];

  // Element offsets of the key rows, and of codes and lo/step, as the cache lays them out.
  const int first = block * kSketchBlock;
  int64_t key_row0, codes_row0, params;
  if (p.page_table) {
    const int64_t page = p.page_table[b * p.page_table_stride + (first >> p.page_shift)];
    const int page_size = 1 << p.page_shift;
    const int in_page = first & (page_size - 1);
    const int64_t head = page * p.n_kv_heads + kv_head;
    key_row0 = ((head << p.page_shift) + in_page) * kHeadDim;
    codes_row0 = ((head << p.page_shift) + in_page) * (kHeadDim / 2);
    params = (head * (page_size / kSketchBlock) + in_page / kSketchBlock) * 2 * kHeadDim;
  } else {
    const int64_t capacity = p.kv_head_stride / kHeadDim;
    const int64_t head = int64_t(b) * p.n_kv_heads + kv_head;
    key_row0 = (head * capacity + first) * kHeadDim;
    codes_row0 = (head * capacity + first) * (kHeadDim / 2);
    params = (head * (capacity / kSketchBlock) + block) * 2 * kHeadDim;
  }

  float low = to_float(keys[key_row0 + c]), high = low;
  for (int j = 1; j < kSketchBlock; ++j) {
    const float x = to_float(keys[key_row0 + int64_t(j) * kHeadDim + c]);
    low = fminf(low, x);
    high = fmaxf(high, x);
  }
  const __half lo_half = __float2half_rn(low);
  const float lo = __half2float(lo_half);
  const __half step_half = __float2half_rn(__fdiv_rn(high - lo, 15.0f));
  const float step = __half2float(step_half);
  sketch.params[params + c] = __half_as_ushort(lo_half);
  sketch.params[params + kHeadDim + c] = __half_as_ushort(step_half);
  for (int j = 0; j < kSketchBlock; ++j) {
    const float x = to_float(keys[key_row0 + int64_t(j) * kHeadDim + c]);
    const float q = step > 0.f ? rintf(__fdiv_rn(x - lo, step)) : 0.f;
    const unsigned code = unsigned(fminf(fmaxf(q, 0.f), 15.f));
    const unsigned odd = __shfl_down_sync(0xffffffffu, code, 1);
    if ((c & 1) == 0) sketch.codes[codes_row0 + int64_t(j) * (kHeadDim / 2) + c / 2] = uint8_t(code | (odd << 4));
  }
}

template <typename T>
const void* sketch_kernel_for_type(int head_dim) {
  return with_head_dim(head_dim, [](auto dim) {
    return reinterpret_cast<const void*>(&sketch_keys_kernel<T, decltype(dim)::value>);
  });
}

}  // namespace

void launch_sketch_keys(const SketchParams& params, DType dtype, int head_dim, cudaStream_t stream) {
  const void* kernel = dtype == DType::F16 ? sketch_kernel_for_type<__half>(head_dim)
                                           : sketch_kernel_for_type<__nv_bfloat16>(head_dim);
  // A call's new keys complete at most this many blocks of any sequence.
  const int blocks = params.new_keys / kSketchBlock + 1;
  launch_kernel(kernel, dim3(blocks, params.n_kv_heads, params.batch * params.n_layers), head_dim, 0,
                const_cast<SketchParams*>(&params), false, 1, stream, "launch sketch_keys_kernel");
}

}  // namespace kascade::cuda::detail
