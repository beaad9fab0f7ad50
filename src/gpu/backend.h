// The GPU engine: the whole forward pass on one CUDA device (Hopper) behind
// engine::Backend.
//
// Weights are dequantized to bf16 at load and uploaded once (Q, K and V as
// one matrix, gate and up as one); products run through cuBLAS (gpu/gemm.h),
// the elementwise steps through gpu/ops.h, attention through the Hopper
// kernels (cuda/kascade_cuda.h): dense, or Kascade as the plan the CPU uses
// says (kascade/plan.h).
//
// The KV cache is paged (gpu/kv_pool.h): a sequence holds a list of pages.
// Decode steps batch sequences of different lengths and run as CUDA graphs
// (gpu/graph_cache.h); the decode kernels read keys and values through the
// page table. A prefill call continues a sequence (a prompt in chunks of at
// least prefill_chunk tokens, on Kascade tiles): its products in chunks of
// prefill_chunk rows, its attention over a contiguous copy of the keys and
// values so far (the prefill kernels read a contiguous cache).
//
// Not on the GPU (a one-line error says so): sliding-window models (Gemma 3),
// the comparison strategies, Kascade's refined reuse and its pooling,
// fixed-budget and own-tile ablations.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "engine/backend.h"
#include "kascade/plan.h"

namespace kascade::gpu {

// Kascade's decode steps with fewer keys attend densely on the GPU engine:
// with every layer selecting, the score, select and attend kernels of each
// layer cost more than the bytes they save. Measured on the H200
// (docs/gpu_engine.md, "Break-even"): slower than dense at every context up
// to 30K on Qwen2.5-Coder-1.5B (0.67-0.78x at batch 1, 0.88-0.93x at 16); on
// the 8B ahead only from 32K at batch 16. AttentionOptions::sparse_from
// overrides it.
inline constexpr int64_t kGpuSparseFrom = 32768;

// ... and only in a step whose sequences' keys, times the width of a layer's
// keys (KV heads x head_dim), reach this many elements: a selecting layer's
// chain of kernels has a fixed cost that few keys do not repay, and what the
// keys repay grows with the bytes a dense layer reads. Measured on the H100
// with every layer selecting (docs/gpu_engine.md, "The step rule measured"),
// synthetic 8B Q4_K (8 x 128 wide), ratio to dense: 32K x 1 0.89x, x 2 1.03x,
// x 4 1.15x, x 8 1.33x; 64K x 1 0.96x, x 2 1.15x; 131K x 1 1.07x, x 2 1.31x.
// So 96K of the 8B's keys (break-even at batch 1 lies near 82K); the 1.5B's
// 2 x 128 need 384K (at 30K x 16, 480K, it measured 1.16x). Not applied when
// AttentionOptions::sparse_from is set.
inline constexpr int64_t kGpuSparseStepKeyElements = int64_t(96) * 1024 * 1024;

// The keys a step needs together to select: kGpuSparseStepKeyElements over
// the width of a layer's keys, rounded up.
int64_t sparse_step_keys(int64_t n_kv_heads, int64_t head_dim);

// Whether a decode step selects keys: its longest sequence has reached the
// plan's sparse_from and its keys together reach step_keys_from
// (sparse_step_keys, or 0 where the user set sparse_from).
bool sparse_decode_step(const Plan& plan, int64_t longest, int64_t step_keys, int64_t step_keys_from);

// What the GPU engine's selecting layers rank keys from: the 4-bit key sketch.
// With its codes widened in half2 arithmetic, sketch scoring decodes 12-14 %
// faster than exact scoring where many keys are scored at once (H100, 8B at
// 32K x 8, 1.5B at 30K x 16) and as fast on the 8B at 32K x 1, at the same
// accuracy (docs/gpu_engine.md, "Sketch scoring"). The KV pool keeps the
// sketch beside the key pages either way. AttentionOptions::scoring overrides it.
inline constexpr Scoring kGpuScoring = Scoring::Sketch;

struct BackendOptions {
  int page_size = 64;             // positions per KV page (a power of two >= 64)
  int max_batch = 64;             // sequences one decode step may batch
  int64_t prefill_chunk = 4096;   // rows per product of a prefill; the least tokens a scheduler's chunk takes
  // KV pages take this share of the device memory left after the weights and
  // the step buffers.
  double kv_memory_fraction = 0.9;
};

std::unique_ptr<engine::Backend> make_cuda_backend(const std::string& path, const BackendOptions& options = {});

}  // namespace kascade::gpu
