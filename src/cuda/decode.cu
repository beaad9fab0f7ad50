// Decode kernels: split-KV flash decoding on tensor cores, dense or over a
// gathered key list, optionally writing raw scores or computing scores only;
// the split merge; and the anchor's pooled score + exact top-k selection.
//
// One block serves up to 16 query heads of one KV group (the g heads fill the
// rows of an m16n8k16 tile), so each K/V row is read once for the group. Its
// four warps stream disjoint chunks of 16 keys through their own cp.async
// pipelines (16-byte copies, swizzled tiles), keep one online-softmax state
// each, and merge at the end; splits along the keys fill the machine at small
// batch and are folded by the merge kernel.
#include <cmath>

#include "cuda/device_common.cuh"
#include "cuda/kernels.h"
#include "cuda/radix_select.cuh"
#include "cuda/softmax_state.cuh"

namespace kascade::cuda::detail {
namespace {

constexpr int kDecodeWarps = 4;
constexpr int kDecodeThreads = kDecodeWarps * 32;
constexpr int kChunkKeys = 16;  // keys per pipeline stage of a warp
constexpr int kRowsPerBlock = 16;
constexpr float kLn2 = 0.6931471805599453f;

template <int kHeadDim, DecodeMode kMode>
struct DecodeConfig {
  static constexpr bool kReadValues = kMode != DecodeMode::ScoresOnly;
  static constexpr int kStages = kHeadDim <= 128 ? 3 : 2;
  static constexpr int kTileBytes = kChunkKeys * kHeadDim * 2;
  static constexpr int kStageBytes = kTileBytes * (kReadValues ? 2 : 1);
  static constexpr int kQueryBytes = kRowsPerBlock * kHeadDim * 2;
  static constexpr int kPipelineBytes = kDecodeWarps * kStages * kStageBytes;
  // The end-of-block merge reuses the pipeline buffers for per-warp outputs.
  static constexpr int kMergeBytes = kReadValues ? kDecodeWarps * kRowsPerBlock * kHeadDim * 4 : 0;
  static constexpr int kStateBytes = kDecodeWarps * kRowsPerBlock * 2 * 4;
  static constexpr int kSharedBytes =
      kQueryBytes + (kPipelineBytes > kMergeBytes ? kPipelineBytes : kMergeBytes) + kStateBytes;
  // 16-byte pieces of one tile each lane copies.
  static constexpr int kPiecesPerLane = kChunkKeys * (kHeadDim / 8) / 32;
};

template <typename T, int kHeadDim, DecodeMode kMode, bool kSparse>
__global__ void __launch_bounds__(kDecodeThreads) decode_attention_kernel(const DecodeParams p) {
  using Config = DecodeConfig<kHeadDim, kMode>;
  using Tile = SwizzledTile<kHeadDim>;
  constexpr int kChunks = kHeadDim / 8;
  extern __shared__ __align__(128) unsigned char shared[];
  unsigned char* query_tile = shared;
  unsigned char* pipeline = shared + Config::kQueryBytes;
  float* states = reinterpret_cast<float*>(
      pipeline + (Config::kPipelineBytes > Config::kMergeBytes ? Config::kPipelineBytes : Config::kMergeBytes));

  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int split = blockIdx.x;
  const int kv_head = blockIdx.y / p.head_blocks;
  const int first_in_group = (blockIdx.y % p.head_blocks) * p.heads_per_block;
  const int n_rows = min(p.heads_per_block, p.group - first_in_group);
  const int head0 = kv_head * p.group + first_in_group;
  const int b = blockIdx.z;

  const int n_keys = kSparse ? p.counts[b] : p.seq_lens[b];
  const int per_split = ((n_keys + p.splits - 1) / p.splits + kChunkKeys - 1) / kChunkKeys * kChunkKeys;
  const int begin = split * per_split;
  const int end = min(n_keys, begin + per_split);
  const int n_chunks = begin < end ? (end - begin + kChunkKeys - 1) / kChunkKeys : 0;
  const int my_chunks = n_chunks > warp ? (n_chunks - warp + kDecodeWarps - 1) / kDecodeWarps : 0;

  // The g query rows (zero rows pad the tile to 16).
  const T* query = static_cast<const T*>(p.queries) + (int64_t(b) * p.n_heads + head0) * kHeadDim;
  for (int piece = threadIdx.x; piece < kRowsPerBlock * kChunks; piece += kDecodeThreads) {
    const int row = piece / kChunks, chunk = piece % kChunks;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (row < n_rows) value = *reinterpret_cast<const uint4*>(query + row * kHeadDim + chunk * 8);
    *reinterpret_cast<uint4*>(query_tile + Tile::offset(row, chunk)) = value;
  }
  __syncthreads();

  const int64_t kv_offset = (int64_t(b) * p.n_kv_heads + kv_head) * p.kv_head_stride;
  const T* key_base = static_cast<const T*>(p.keys) + kv_offset;
  const T* value_base = static_cast<const T*>(p.values) + kv_offset;
  const int* index_row = nullptr;
  if constexpr (kSparse) {
    const int set_head = p.head_map ? p.head_map[kv_head] : kv_head;
    index_row = p.indices + (int64_t(b) * p.n_kv_heads + set_head) * p.index_stride;
  }
  unsigned char* warp_pipeline = pipeline + warp * Config::kStages * Config::kStageBytes;

  // Sparse: lane l holds the position of key l of the warp's next chunk,
  // loaded one chunk ahead so the gather never waits on the index read.
  auto load_positions = [&](int i) {
    const int key = begin + (warp + kDecodeWarps * i) * kChunkKeys + (lane & (kChunkKeys - 1));
    return i < my_chunks && key < end ? __ldg(index_row + key) : 0;
  };
  int next_positions = 0;
  if constexpr (kSparse) next_positions = load_positions(0);

  // Issues the copies of this warp's i-th chunk (called for i = 0, 1, ... in
  // order); always commits a group so that the wait counts stay uniform.
  auto issue = [&](int i) {
    if (i < my_chunks) {
      const int key0 = begin + (warp + kDecodeWarps * i) * kChunkKeys;
      unsigned char* stage = warp_pipeline + (i % Config::kStages) * Config::kStageBytes;
      const uint32_t key_tile = shared_address(stage);
      const uint32_t value_tile = key_tile + Config::kTileBytes;
      int my_position = 0;
      if constexpr (kSparse) {
        my_position = next_positions;
        next_positions = load_positions(i + 1);
      }
#pragma unroll
      for (int e = 0; e < Config::kPiecesPerLane; ++e) {
        const int piece = lane + 32 * e;
        const int row = piece / kChunks, chunk = piece % kChunks;
        const bool valid = key0 + row < end;
        int position = key0 + row;
        if constexpr (kSparse) position = __shfl_sync(0xffffffffu, my_position, row);
        if (!valid) position = 0;
        const int64_t element = int64_t(position) * kHeadDim + chunk * 8;
        cp_async_16(key_tile + Tile::offset(row, chunk), key_base + element, valid);
        if constexpr (Config::kReadValues)
          cp_async_16(value_tile + Tile::offset(row, chunk), value_base + element, valid);
      }
    }
    cp_async_commit();
  };

  SoftmaxState state[2];  // rows lane/4 and lane/4 + 8
  float out[kHeadDim / 8][4];
#pragma unroll
  for (int j = 0; j < kHeadDim / 8; ++j) out[j][0] = out[j][1] = out[j][2] = out[j][3] = 0.f;

  const uint32_t query_address = shared_address(query_tile);
  const int quad_row = lane >> 2, quad_col = lane & 3;

#pragma unroll
  for (int i = 0; i < Config::kStages - 1; ++i) issue(i);
  for (int i = 0; i < my_chunks; ++i) {
    cp_async_wait<Config::kStages - 2>();
    __syncwarp();
    issue(i + Config::kStages - 1);
    const unsigned char* stage = warp_pipeline + (i % Config::kStages) * Config::kStageBytes;
    const uint32_t key_tile = shared_address(stage);
    const uint32_t value_tile = key_tile + Config::kTileBytes;
    const int key0 = begin + (warp + kDecodeWarps * i) * kChunkKeys;

    float s[2][4] = {{0.f, 0.f, 0.f, 0.f}, {0.f, 0.f, 0.f, 0.f}};
#pragma unroll
    for (int k_step = 0; k_step < kHeadDim / 16; ++k_step) {
      uint32_t a[4], bk[4];
      load_a_fragment<kHeadDim>(query_address, 0, k_step, lane, a);
      load_key_fragments<kHeadDim>(key_tile, 0, k_step, lane, bk);
      mma_16816<T>(s[0], a, bk[0], bk[1]);
      mma_16816<T>(s[1], a, bk[2], bk[3]);
    }
#pragma unroll
    for (int j = 0; j < 2; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = key0 + 8 * j + 2 * quad_col + (e & 1);
        s[j][e] = key < end ? s[j][e] * p.scale_log2 : -INFINITY;
      }

    if constexpr (kMode != DecodeMode::Attend) {
      // Raw scores of the real rows; dense modes only (the key is the position).
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = quad_row + 8 * (e >> 1);
          const int key = key0 + 8 * j + 2 * quad_col + (e & 1);
          if (row < n_rows && key < end)
            p.scores[(int64_t(b) * p.n_heads + head0 + row) * p.score_stride + key] = s[j][e];
        }
    }

#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float chunk_max = fmaxf(fmaxf(s[0][2 * r], s[0][2 * r + 1]), fmaxf(s[1][2 * r], s[1][2 * r + 1]));
      chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, 1));
      chunk_max = fmaxf(chunk_max, __shfl_xor_sync(0xffffffffu, chunk_max, 2));
      const float new_max = fmaxf(state[r].max, chunk_max);
      const float reference = SoftmaxState::finite_max(new_max);
      const float rescale = exp2f(state[r].max - reference);
      state[r].max = new_max;
      float chunk_sum = 0.f;
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          s[j][e] = exp2f(s[j][e] - reference);
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
  cp_async_wait<0>();

  // Each lane holds partial sums of its quad's rows.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    state[r].sum += __shfl_xor_sync(0xffffffffu, state[r].sum, 1);
    state[r].sum += __shfl_xor_sync(0xffffffffu, state[r].sum, 2);
  }
  __syncthreads();  // pipelines drained: their memory now holds per-warp outputs

  float* warp_outputs = reinterpret_cast<float*>(pipeline);  // [warp][row][dim]
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = quad_row + 8 * r;
    if (quad_col == 0) {
      states[(warp * kRowsPerBlock + row) * 2] = state[r].max;
      states[(warp * kRowsPerBlock + row) * 2 + 1] = state[r].sum;
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
        SoftmaxState other{states[(w * kRowsPerBlock + row) * 2], states[(w * kRowsPerBlock + row) * 2 + 1]};
        float self_scale, other_scale;
        merged.merge(other, self_scale, other_scale);
        value = value * self_scale + warp_outputs[(w * kRowsPerBlock + row) * kHeadDim + dim] * other_scale;
      }
      value = merged.sum > 0.f ? value / merged.sum : 0.f;
      const float lse2 = merged.log2_sum_exp();
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
        SoftmaxState other{states[(w * kRowsPerBlock + row) * 2], states[(w * kRowsPerBlock + row) * 2 + 1]};
        float self_scale, other_scale;
        merged.merge(other, self_scale, other_scale);
      }
      const float lse2 = merged.log2_sum_exp();
      if (p.splits == 1) {
        p.lse[head_row0 + row] = lse2 * kLn2;
      } else {
        p.partial_lse[(head_row0 + row) * p.splits + split] = lse2;
      }
    }
  }
}

// One block per (sequence, query head): folds the split partials.
template <typename T, int kHeadDim, bool kWithOutput>
__global__ void __launch_bounds__(128) decode_merge_kernel(const DecodeParams p) {
  const int64_t head_row = blockIdx.x;
  const float* lses = p.partial_lse + head_row * p.splits;
  PartialMerge merge;
  for (int s = 0; s < p.splits; ++s) merge.max_lse = fmaxf(merge.max_lse, lses[s]);
  float total = 0.f;
  for (int s = 0; s < p.splits; ++s) total += merge.weight(lses[s]);
  if (threadIdx.x == 0 && p.lse) p.lse[head_row] = (SoftmaxState::finite_max(merge.max_lse) + __log2f(total)) * kLn2;
  if constexpr (kWithOutput) {
    for (int dim = threadIdx.x; dim < kHeadDim; dim += blockDim.x) {
      float value = 0.f;
      for (int s = 0; s < p.splits; ++s)
        value += merge.weight(lses[s]) * p.partial_out[(head_row * p.splits + s) * kHeadDim + dim];
      static_cast<T*>(p.output)[head_row * kHeadDim + dim] = ElementTraits<T>::from_float(value / total);
    }
  }
}

constexpr int kSelectThreads = 512;

// One block per (sequence, KV head): pooled scores into scratch, then radix select.
__global__ void __launch_bounds__(kSelectThreads, 2) pooled_select_decode_kernel(const PooledSelectParams p) {
  __shared__ RadixSelectShared<kSelectThreads> select_shared;
  extern __shared__ float group_lse2[];  // [group], log2 units
  const int kv_head = blockIdx.x, b = blockIdx.y;
  const int n = p.seq_lens[b];
  const int k = static_cast<int>(budget_of(p.budget.percent, p.budget.min_keys, n));
  const int64_t head_row0 = int64_t(b) * p.n_heads + int64_t(kv_head) * p.group;
  for (int r = threadIdx.x; r < p.group; r += kSelectThreads) group_lse2[r] = p.lse[head_row0 + r] * 1.4426950408889634f;
  __syncthreads();
  float* pooled = p.pooled + (int64_t(b) * p.n_kv_heads + kv_head) * p.score_stride;
  // The keys' range is reduced while the pooled scores are written.
  reset_key_range(select_shared);
  __syncthreads();
  uint32_t low = 0xffffffffu, high = 0u;
  // Four positions per thread per step keep 4 x g score loads in flight.
  constexpr int kUnroll = 4;
  for (int base = 0; base < n; base += kUnroll * kSelectThreads) {
    float sum[kUnroll] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 2
    for (int r = 0; r < p.group; ++r) {
      const float* scores = p.scores + (head_row0 + r) * p.score_stride;
      float loaded[kUnroll];
#pragma unroll
      for (int e = 0; e < kUnroll; ++e) {
        const int j = base + e * kSelectThreads + threadIdx.x;
        loaded[e] = j < n ? scores[j] : -INFINITY;
      }
#pragma unroll
      for (int e = 0; e < kUnroll; ++e) sum[e] += exp2f(loaded[e] - group_lse2[r]);
    }
#pragma unroll
    for (int e = 0; e < kUnroll; ++e) {
      const int j = base + e * kSelectThreads + threadIdx.x;
      if (j < n) {
        pooled[j] = sum[e];
        const uint32_t key = float_order_key(sum[e]);
        low = min(low, key);
        high = max(high, key);
      }
    }
  }
  detail::reduce_key_range(low, high, select_shared);
  select_top_k_block<kSelectThreads>(pooled, n, k, p.indices + (int64_t(b) * p.n_kv_heads + kv_head) * p.index_stride,
                                     select_shared, true);
  if (kv_head == 0 && threadIdx.x == 0) p.counts[b] = min(k, n);
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

// A kernel instance with its shared-memory size and occupancy, configured
// once (the dynamic shared-memory limit is raised on first use).
struct KernelInfo {
  const void* kernel = nullptr;
  int shared_bytes = 0;
  int blocks_per_sm = 1;
};

template <typename T, int kHeadDim, DecodeMode kMode, bool kSparse>
const KernelInfo& decode_kernel_info() {
  static const KernelInfo info = [] {
    KernelInfo made;
    made.kernel = reinterpret_cast<const void*>(&decode_attention_kernel<T, kHeadDim, kMode, kSparse>);
    made.shared_bytes = DecodeConfig<kHeadDim, kMode>::kSharedBytes;
    check_cuda(cudaFuncSetAttribute(made.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, made.shared_bytes),
               "cudaFuncSetAttribute(decode_attention_kernel)");
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&made.blocks_per_sm, made.kernel, kDecodeThreads,
                                                             made.shared_bytes),
               "cudaOccupancyMaxActiveBlocksPerMultiprocessor(decode_attention_kernel)");
    if (made.blocks_per_sm < 1) made.blocks_per_sm = 1;
    return made;
  }();
  return info;
}

// Maps the runtime choices onto one template instance.
template <typename T, int kHeadDim>
const KernelInfo& decode_kernel_for_dim(DecodeMode mode, bool sparse) {
  switch (mode) {
    case DecodeMode::Attend:
      return sparse ? decode_kernel_info<T, kHeadDim, DecodeMode::Attend, true>()
                    : decode_kernel_info<T, kHeadDim, DecodeMode::Attend, false>();
    case DecodeMode::AttendAndScores:
      if (sparse) unsupported("decode mode (scores of a sparse pass)", int(mode));
      return decode_kernel_info<T, kHeadDim, DecodeMode::AttendAndScores, false>();
    case DecodeMode::ScoresOnly:
      if (sparse) unsupported("decode mode (scores of a sparse pass)", int(mode));
      return decode_kernel_info<T, kHeadDim, DecodeMode::ScoresOnly, false>();
  }
  unsupported("decode mode", int(mode));
}

template <typename T>
const KernelInfo& decode_kernel_for_type(int head_dim, DecodeMode mode, bool sparse) {
  switch (head_dim) {
    case 64: return decode_kernel_for_dim<T, 64>(mode, sparse);
    case 128: return decode_kernel_for_dim<T, 128>(mode, sparse);
    case 256: return decode_kernel_for_dim<T, 256>(mode, sparse);
  }
  unsupported("head_dim", head_dim);
}

const KernelInfo& decode_kernel(DType dtype, int head_dim, DecodeMode mode, bool sparse) {
  return dtype == DType::F16 ? decode_kernel_for_type<__half>(head_dim, mode, sparse)
                             : decode_kernel_for_type<__nv_bfloat16>(head_dim, mode, sparse);
}

template <typename T>
const void* merge_kernel_for_type(int head_dim, bool with_output) {
  switch (head_dim) {
    case 64:
      return with_output ? reinterpret_cast<const void*>(&decode_merge_kernel<T, 64, true>)
                         : reinterpret_cast<const void*>(&decode_merge_kernel<T, 64, false>);
    case 128:
      return with_output ? reinterpret_cast<const void*>(&decode_merge_kernel<T, 128, true>)
                         : reinterpret_cast<const void*>(&decode_merge_kernel<T, 128, false>);
    case 256:
      return with_output ? reinterpret_cast<const void*>(&decode_merge_kernel<T, 256, true>)
                         : reinterpret_cast<const void*>(&decode_merge_kernel<T, 256, false>);
  }
  unsupported("head_dim", head_dim);
}

}  // namespace

int decode_blocks_per_sm(DType dtype, int head_dim, DecodeMode mode, bool sparse) {
  return decode_kernel(dtype, head_dim, mode, sparse).blocks_per_sm;
}

void launch_decode_attention(const DecodeParams& params, DType dtype, int head_dim, DecodeMode mode,
                             cudaStream_t stream) {
  const KernelInfo& info = decode_kernel(dtype, head_dim, mode, params.indices != nullptr);
  const dim3 grid(params.splits, params.n_kv_heads * params.head_blocks, params.batch);
  void* arguments[] = {const_cast<DecodeParams*>(&params)};
  check_cuda(cudaLaunchKernel(info.kernel, grid, dim3(kDecodeThreads), arguments, info.shared_bytes, stream),
             "launch decode_attention_kernel");
}

void launch_decode_merge(const DecodeParams& params, DType dtype, int head_dim, bool with_output,
                         cudaStream_t stream) {
  const void* kernel = dtype == DType::F16 ? merge_kernel_for_type<__half>(head_dim, with_output)
                                           : merge_kernel_for_type<__nv_bfloat16>(head_dim, with_output);
  void* arguments[] = {const_cast<DecodeParams*>(&params)};
  check_cuda(cudaLaunchKernel(kernel, dim3(params.batch * params.n_heads), dim3(128), arguments, 0, stream),
             "launch decode_merge_kernel");
}

void launch_pooled_select_decode(const PooledSelectParams& params, cudaStream_t stream) {
  const dim3 grid(params.n_kv_heads, params.batch);
  pooled_select_decode_kernel<<<grid, kSelectThreads, params.group * sizeof(float), stream>>>(params);
  check_cuda(cudaGetLastError(), "launch pooled_select_decode_kernel");
}

void launch_top_k(const float* values, int64_t row_stride, const int* lengths, const int* k, int rows, int* out,
                  int64_t out_stride, cudaStream_t stream) {
  top_k_kernel<<<rows, kSelectThreads, 0, stream>>>(values, row_stride, lengths, k, out, out_stride);
  check_cuda(cudaGetLastError(), "launch top_k_kernel");
}

int multiprocessor_count() {
  static const int count = [] {
    int device = 0, made = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    check_cuda(cudaDeviceGetAttribute(&made, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    return made;
  }();
  return count;
}

}  // namespace kascade::cuda::detail
