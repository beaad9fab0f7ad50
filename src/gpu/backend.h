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
// Held selections (AttentionOptions::select_every) are decided per step, not
// per sequence as on the CPU: a step holds when it decodes the sequences of
// the step that selected, in its order, each one position on; a step of
// other sequences (one joined, one left, another decode group) selects
// afresh, as without holding.
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

// Kascade's decode steps attend densely on the GPU engine unless they read
// enough keys for selection to pay: a selecting layer's chain of kernels
// (score, select, attend) has a fixed cost that few keys do not repay, and
// what the keys repay grows with the bytes a dense layer reads. So a step
// selects when its longest sequence has kGpuSparseFrom keys and its
// sequences' keys, times the width of a layer's keys (KV heads x head_dim),
// reach kGpuSparseStepKeyElements (kGpuHeldStepKeyElements for a plan that
// holds its selections). Measured on the H100 (docs/gpu_engine.md,
// "The step rule measured"), synthetic Q4_K models, every layer selecting vs
// dense: 8B (8 x 128) 32K x 1 0.91x, x 2 1.08x; 64K x 1 1.03x; 16K x 4 1.09x;
// 8K x 4 1.01x, x 8 1.13x; 1.5B (2 x 128) 8K x 16 1.01x, x 32 1.11x; 16K x 16
// 1.10x; 30K x 1 0.70x. Shorter sequences are unmeasured. Neither applies
// when AttentionOptions::sparse_from is set: it decides alone.
inline constexpr int64_t kGpuSparseFrom = 8192;
inline constexpr int64_t kGpuSparseStepKeyElements = int64_t(64) * 1024 * 1024;  // 64K keys of 8 x 128
// A plan whose selecting layers hold their sets (select_every > 1, the
// default) runs that chain at one step in select_every and a held pass
// (about twice the budget's keys, no scoring) at the others, so it pays from
// fewer keys. Measured on the H100 (docs/gpu_engine.md, "The step rule for
// holding plans"), holding every other step vs dense: 1.5B (2 x 128) 16K x 2
// (8 Mi) 0.91x, 24K x 2 (12 Mi) 0.97x, 16K x 4 (16 Mi) 1.02x, 24K x 4 1.11x,
// 30K x 1 (7.3 Mi) 0.88x; 8B 16K x 1 (16 Mi) 1.02x, 24K x 1 1.07x.
inline constexpr int64_t kGpuHeldStepKeyElements = int64_t(16) * 1024 * 1024;

// The memory bandwidth of the device the elements were measured on (the H100
// SXM's HBM3 at its peak clock). The chain's cost is mostly not bandwidth
// (its scoring pass issues instructions at half of DRAM's rate, its selection
// and merges are latency), while a dense layer reads its keys in proportion
// to the bandwidth: so a device with more bandwidth needs proportionally more
// keys before selection pays. Such devices (more than 10 % above this) scale
// the threshold by their bandwidth: extrapolated, not measured (the H200's
// 4.8 TB/s asks for ~94K of the 8B's keys). Slower devices keep it.
inline constexpr double kGpuSparseRuleBandwidth = 3.35e12;

// The keys a step needs together to select: kGpuSparseStepKeyElements
// (kGpuHeldStepKeyElements for a plan that holds, select_every > 1), scaled
// for a device of `memory_bandwidth` bytes/s (0: unknown, not scaled), over
// the width of a layer's keys, rounded up.
int64_t sparse_step_keys(int64_t n_kv_heads, int64_t head_dim, int select_every, double memory_bandwidth);

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
