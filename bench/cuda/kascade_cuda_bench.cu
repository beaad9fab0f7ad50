// Times the CUDA attention kernels (dense, anchor layer 0, anchor, reuse,
// top-k) for decode and prefill on random data and writes one CSV row per
// measurement; bench/cuda/torch_baseline.py times cuDNN on the same shapes
// and prints the combined table. Each kernel's output is poisoned before its
// first run and checked to be fully written and finite.
//
// Timing: every repetition is preceded by a 256 MB write that evicts the L2,
// is bracketed by CUDA events, and the median is reported.
//
// Usage: kascade_cuda_bench OUT.csv [decode|prefill|all|profile]
// profile: each batch-64 decode kernel a few times only, at 32K and 128K,
// for a profiler (ncu) to time the stages of an anchor layer.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "attention_fixtures.h"
#include "cuda/kascade_cuda.h"

namespace kc = kascade::cuda;

namespace {

void check(cudaError_t status, const char* what, int line) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "bench: %s failed at line %d: %s\n", what, line, cudaGetErrorString(status));
    std::exit(1);
  }
}
#define CHECK(call) check((call), #call, __LINE__)

__device__ __forceinline__ uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

// Uniform values in [-scale, scale) as fp16 or bf16 bits.
__global__ void fill_random(uint16_t* data, int64_t n, uint64_t seed, float scale, bool bf16) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float u = float(mix(seed ^ (uint64_t(i) * 0x9e3779b97f4a7c15ull)) >> 40) * (1.0f / 16777216.0f);
    const float value = (2.f * u - 1.f) * scale;
    data[i] = bf16 ? __bfloat16_as_ushort(__float2bfloat16_rn(value)) : __half_as_ushort(__float2half_rn(value));
  }
}

__global__ void fill_float(float* data, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    data[i] = float(mix(seed ^ (uint64_t(i) * 0x9e3779b97f4a7c15ull)) >> 40) * (1.0f / 16777216.0f);
}

// Reads every 16 bytes of `data` (the L2 flush that leaves only clean lines
// behind); `sink` is written only if the XOR of all of it is `never`.
__global__ void read_all(const uint4* data, int64_t n, uint32_t never, uint32_t* sink) {
  uint32_t folded = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 v = data[i];
    folded ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (folded == never) *sink = folded;
}

// Counts elements that are NaN or infinite (poison is 0xffff, a NaN in both types).
__global__ void count_bad(const uint16_t* data, int64_t n, bool bf16, unsigned long long* bad) {
  unsigned long long local = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint16_t bits = data[i];
    const bool finite = bf16 ? (bits & 0x7f80) != 0x7f80 : (bits & 0x7c00) != 0x7c00;
    local += finite ? 0 : 1;
  }
  if (local) atomicAdd(bad, local);
}

template <typename T>
T* device_alloc(int64_t count) {
  void* pointer = nullptr;
  CHECK(cudaMalloc(&pointer, std::max<int64_t>(count, 1) * sizeof(T)));
  return static_cast<T*>(pointer);
}

// Decode K and V come from one reservation made at start and reused by every
// shape, as an engine's KV pool would be. With a cudaMalloc / cudaFree per
// shape (KASCADE_BENCH_ARENA=0), shapes allocated after the batch-64 ones
// had been freed ran up to 16 % slower than the same shapes in a fresh
// process (batch-8 dense 0.287 vs 0.254 ms at 32K), and cuDNN is
// timed in a process of its own.
class KvArena {
 public:
  // Reserves `bytes`, or nothing with KASCADE_BENCH_ARENA=0 (allocate per shape).
  explicit KvArena(size_t bytes) {
    const char* flag = std::getenv("KASCADE_BENCH_ARENA");
    if (flag && std::string(flag) == "0") return;
    size_ = bytes;
    CHECK(cudaMalloc(&base_, size_));
  }
  ~KvArena() {
    if (base_) cudaFree(base_);
  }
  KvArena(const KvArena&) = delete;
  KvArena& operator=(const KvArena&) = delete;

  bool enabled() const { return base_ != nullptr; }
  uint16_t* take(int64_t count) {
    const size_t bytes = padded_bytes(count);
    if (used_ + bytes > size_) {
      std::fprintf(stderr, "bench: KV arena of %zu bytes is too small\n", size_);
      std::exit(1);
    }
    uint16_t* pointer = reinterpret_cast<uint16_t*>(base_ + used_);
    used_ += bytes;
    return pointer;
  }
  void reset() { used_ = 0; }
  static size_t padded_bytes(int64_t count) { return (size_t(count) * sizeof(uint16_t) + 255) / 256 * 256; }

 private:
  char* base_ = nullptr;
  size_t size_ = 0, used_ = 0;
};

// Times with CUDA events around each call, after evicting the L2 by reading
// a 256 MB buffer: the L2 is left holding clean lines, as the weight reads
// between two layers' attention leave it in a model. KASCADE_BENCH_FLUSH=write
// writes the buffer instead: the L2 is then full of dirty lines, whose
// write-back the timed call pays (~7 us).
struct Timer {
  cudaEvent_t start, stop;
  void* flush = nullptr;
  uint32_t* sink = nullptr;
  bool read_flush = false;
  static constexpr size_t kFlushBytes = 256u << 20;
  Timer() {
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    CHECK(cudaMalloc(&flush, kFlushBytes));
    CHECK(cudaMemset(flush, 0, kFlushBytes));
    CHECK(cudaMalloc(&sink, sizeof(uint32_t)));
    const char* mode = std::getenv("KASCADE_BENCH_FLUSH");
    read_flush = !(mode && std::string(mode) == "write");
  }
  void evict_l2(int r) {
    if (read_flush)
      read_all<<<1024, 256>>>(static_cast<const uint4*>(flush), kFlushBytes / 16, 0xffffffffu, sink);
    else
      CHECK(cudaMemsetAsync(flush, r & 0xff, kFlushBytes));
  }
  ~Timer() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaFree(flush);
    cudaFree(sink);
  }
  template <typename F>
  double median_ms(F&& run, int reps) {
    run();  // warm-up, sizes workspaces
    CHECK(cudaDeviceSynchronize());
    std::vector<float> times;
    for (int r = 0; r < reps; ++r) {
      evict_l2(r);
      CHECK(cudaEventRecord(start));
      run();
      CHECK(cudaEventRecord(stop));
      CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, start, stop));
      times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  }
};

uint64_t fresh_seed() {
  return uint64_t(std::chrono::high_resolution_clock::now().time_since_epoch().count()) * 0x2545f4914f6cdd1dull;
}

void fill(uint16_t* data, int64_t n, uint64_t seed, bool bf16, float scale = 1.f) {
  fill_random<<<1024, 256>>>(data, n, seed, scale, bf16);
  CHECK(cudaGetLastError());
}

// Poisons `output`, runs once, and fails unless every element is finite.
template <typename F>
void poison_run_check(uint16_t* output, int64_t n, bool bf16, F&& run, const char* what) {
  CHECK(cudaMemset(output, 0xff, n * sizeof(uint16_t)));
  run();
  unsigned long long* bad = device_alloc<unsigned long long>(1);
  CHECK(cudaMemset(bad, 0, sizeof *bad));
  count_bad<<<512, 256>>>(output, n, bf16, bad);
  CHECK(cudaGetLastError());
  unsigned long long host_bad = 0;
  CHECK(cudaMemcpy(&host_bad, bad, sizeof host_bad, cudaMemcpyDeviceToHost));
  CHECK(cudaFree(bad));
  if (host_bad) {
    std::fprintf(stderr, "bench: %s left %llu of %lld outputs unwritten or non-finite\n", what, host_bad,
                 static_cast<long long>(n));
    std::exit(1);
  }
}

struct Shape {
  bool bf16;
  int batch, n_heads, n_kv_heads, head_dim;
  int seq_len;
  kc::fixtures::Geometry geometry() const { return {bf16, batch, n_heads, n_kv_heads, head_dim}; }
};

// Every sequence of the batch is s.seq_len long, in a cache of that capacity.
kc::AttentionArgs make_args(const Shape& s, const uint16_t* keys, const uint16_t* values, const int* seq_lens,
                            const uint16_t* queries, uint16_t* output) {
  return kc::fixtures::attention_args(
      s.geometry(),
      {.keys = keys, .values = values, .capacity = s.seq_len, .seq_lens = seq_lens, .max_seq_len = s.seq_len},
      queries, output);
}

FILE* csv = nullptr;

void emit(const char* section, const Shape& s, const char* impl, double ms, double bytes, double flops,
          double extra_bytes) {
  std::fprintf(csv, "%s,%s,%d,%d,%d,%d,%d,%s,%.6f,%.6e,%.6e,%.1f\n", section, s.bf16 ? "bf16" : "f16", s.n_heads,
               s.n_kv_heads, s.head_dim, s.batch, s.seq_len, impl, ms, bytes, flops, extra_bytes / 1048576.0);
  std::fflush(csv);
  std::printf("%-7s %-4s H=%-2d G=%-2d d=%-3d B=%-2d N=%-6d %-8s %9.3f ms", section, s.bf16 ? "bf16" : "f16",
              s.n_heads, s.n_kv_heads, s.head_dim, s.batch, s.seq_len, impl, ms);
  if (bytes > 0) std::printf("  %6.2f TB/s", bytes / ms / 1e9);
  if (flops > 0) std::printf("  %6.1f TFLOP/s", flops / ms / 1e9);
  std::printf("  extra %.1f MB\n", extra_bytes / 1048576.0);
  std::fflush(stdout);
}

// Elements of the keys (or of the values) of a decode shape.
int64_t decode_kv_elements(const Shape& s) { return int64_t(s.batch) * s.n_kv_heads * s.seq_len * s.head_dim; }

// The 32-layer schedule: layer 0 and these layers are anchors, the rest reuse.
constexpr int kScheduleLayers = 32;
constexpr int kScheduleAnchors[] = {0, 2, 8, 13, 14};

bool schedule_anchor(int layer) {
  return std::find(std::begin(kScheduleAnchors), std::end(kScheduleAnchors), layer) != std::end(kScheduleAnchors);
}

// with_extras: also the chained 32-layer step and the standalone top-k
// (the main batch-64 shapes), which need a second KV cache from the arena.
void bench_decode(const Shape& s, const kc::Budget& budget, Timer& timer, KvArena& arena, int reps,
                  bool with_extras) {
  const int64_t kv = decode_kv_elements(s);
  const int64_t q = int64_t(s.batch) * s.n_heads * s.head_dim;
  arena.reset();
  uint16_t* keys = arena.enabled() ? arena.take(kv) : device_alloc<uint16_t>(kv);
  uint16_t* values = arena.enabled() ? arena.take(kv) : device_alloc<uint16_t>(kv);
  uint16_t* queries = device_alloc<uint16_t>(q);
  uint16_t* output = device_alloc<uint16_t>(q);
  const uint64_t seed = fresh_seed();
  fill(keys, kv, seed + 1, s.bf16);
  fill(values, kv, seed + 2, s.bf16);
  fill(queries, q, seed + 3, s.bf16);
  std::vector<int> lens(s.batch, s.seq_len);
  int* seq_lens = device_alloc<int>(s.batch);
  CHECK(cudaMemcpy(seq_lens, lens.data(), s.batch * sizeof(int), cudaMemcpyHostToDevice));
  const int64_t k = kc::budget_keys(budget, s.seq_len);
  kc::DecodeIndexSets sets;
  sets.max_keys = k;
  sets.indices = device_alloc<int>(int64_t(s.batch) * s.n_kv_heads * k);
  sets.counts = device_alloc<int>(s.batch);
  // A non-identity head map exercises head-aware reuse.
  std::vector<int> map(s.n_kv_heads);
  for (int h = 0; h < s.n_kv_heads; ++h) map[h] = (h * 3 + 1) % s.n_kv_heads;
  int* head_map = device_alloc<int>(s.n_kv_heads);
  CHECK(cudaMemcpy(head_map, map.data(), s.n_kv_heads * sizeof(int), cudaMemcpyHostToDevice));

  const kc::AttentionArgs args = make_args(s, keys, values, seq_lens, queries, output);

  const double index_bytes = double(s.batch) * s.n_kv_heads * k * 4;
  const double kv_bytes = double(kv) * 2 * 2;
  const double sparse_bytes = double(s.batch) * s.n_kv_heads * k * s.head_dim * 2 * 2;
  {
    kc::Workspace ws;
    auto run = [&] { kc::dense_decode(args, nullptr, ws, nullptr); };
    poison_run_check(output, q, s.bf16, run, "dense_decode");
    emit("decode", s, "dense", timer.median_ms(run, reps), kv_bytes, 0, double(ws.high_water()));
  }
  {
    kc::Workspace ws;
    auto run = [&] { kc::anchor_decode(args, budget, true, sets, ws, nullptr); };
    poison_run_check(output, q, s.bf16, run, "anchor_decode(layer 0)");
    emit("decode", s, "anchor0", timer.median_ms(run, reps), kv_bytes, 0, double(ws.high_water()) + index_bytes);
  }
  {
    kc::Workspace ws;
    auto run = [&] { kc::anchor_decode(args, budget, false, sets, ws, nullptr); };
    poison_run_check(output, q, s.bf16, run, "anchor_decode");
    emit("decode", s, "anchor", timer.median_ms(run, reps), kv_bytes / 2 + sparse_bytes, 0,
         double(ws.high_water()) + index_bytes);
  }
  if (s.seq_len % 64 == 0) {
    // The default's selecting layer: scores from the 4-bit key sketch
    // (codes: half a byte per key element, lo/step: 4 bytes per channel per
    // 64 keys), then exact attention over its top budget.
    uint8_t* codes = device_alloc<uint8_t>(kv / 2);
    uint16_t* params = device_alloc<uint16_t>(kv / 64 * 2);
    const void* const layer_keys_host[1] = {keys};
    const kc::KeySketch layer_sketch_host[1] = {{codes, params}};
    const void** layer_keys = device_alloc<const void*>(1);
    kc::KeySketch* layer_sketch = device_alloc<kc::KeySketch>(1);
    CHECK(cudaMemcpy(layer_keys, layer_keys_host, sizeof(layer_keys_host), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(layer_sketch, layer_sketch_host, sizeof(layer_sketch_host), cudaMemcpyHostToDevice));
    kc::sketch_keys(args, s.seq_len, layer_keys, layer_sketch, 1, nullptr);
    kc::AttentionArgs sketched = args;
    sketched.key_sketch = {codes, params};
    kc::Workspace ws;
    auto run = [&] { kc::anchor_decode(sketched, budget, false, sets, ws, nullptr); };
    poison_run_check(output, q, s.bf16, run, "anchor_decode (sketch)");
    emit("decode", s, "sketch", timer.median_ms(run, reps), double(kv) / 2 + double(kv) / 64 * 4 + sparse_bytes, 0,
         double(ws.high_water()) + index_bytes);
    for (void* pointer : {(void*)codes, (void*)params, (void*)layer_keys, (void*)layer_sketch}) CHECK(cudaFree(pointer));
  }
  {
    // A held step (select_every 2) of the anchor's sets, selected one key ago:
    // the list of the sets, their shift and the new key, then attention over it.
    std::vector<int> selected(s.batch, s.seq_len - 1);
    int* selected_lens = device_alloc<int>(s.batch);
    CHECK(cudaMemcpy(selected_lens, selected.data(), s.batch * sizeof(int), cudaMemcpyHostToDevice));
    kc::Workspace ws;
    auto run = [&] { kc::held_decode(args, sets, selected_lens, 1, ws, nullptr); };
    poison_run_check(output, q, s.bf16, run, "held_decode");
    emit("decode", s, "held", timer.median_ms(run, reps), 2 * sparse_bytes + 2 * index_bytes, 0,
         double(ws.high_water()) + index_bytes);
    CHECK(cudaFree(selected_lens));
  }
  {
    kc::Workspace ws;
    auto run = [&] { kc::reuse_decode(args, sets, head_map, ws, nullptr); };
    poison_run_check(output, q, s.bf16, run, "reuse_decode");
    emit("decode", s, "reuse", timer.median_ms(run, reps), sparse_bytes + index_bytes, 0,
         double(ws.high_water()) + index_bytes);
  }
  if (with_extras) {
    // The 32 layers back to back, as a decode step launches them (one stream,
    // no synchronisation between layers); odd layers read a second KV cache,
    // so that no layer finds the previous layer's rows in the L2. Reported
    // per layer, to compare with avg32 (per-call times) and with cuDNN chained.
    uint16_t* other_keys = arena.enabled() ? arena.take(kv) : device_alloc<uint16_t>(kv);
    uint16_t* other_values = arena.enabled() ? arena.take(kv) : device_alloc<uint16_t>(kv);
    fill(other_keys, kv, seed + 5, s.bf16);
    fill(other_values, kv, seed + 6, s.bf16);
    kc::AttentionArgs other = args;
    other.keys = other_keys;
    other.values = other_values;
    kc::Workspace first_ws, anchor_ws, reuse_ws;
    auto run = [&] {
      for (int layer = 0; layer < kScheduleLayers; ++layer) {
        const kc::AttentionArgs& layer_args = layer % 2 ? other : args;
        if (layer == 0)
          kc::anchor_decode(layer_args, budget, true, sets, first_ws, nullptr);
        else if (schedule_anchor(layer))
          kc::anchor_decode(layer_args, budget, false, sets, anchor_ws, nullptr);
        else
          kc::reuse_decode(layer_args, sets, head_map, reuse_ws, nullptr);
      }
    };
    poison_run_check(output, q, s.bf16, run, "32-layer chain");
    emit("decode", s, "chain32", timer.median_ms(run, reps) / kScheduleLayers, 0, 0,
         double(std::max({first_ws.high_water(), anchor_ws.high_water(), reuse_ws.high_water()})));
    if (!arena.enabled()) {
      CHECK(cudaFree(other_keys));
      CHECK(cudaFree(other_values));
    }
  }
  if (with_extras) {
    // The selection step alone: rows of N uniform scores, k = budget(N).
    const int rows = s.batch * s.n_kv_heads;
    float* scores = device_alloc<float>(int64_t(rows) * s.seq_len);
    fill_float<<<1024, 256>>>(scores, int64_t(rows) * s.seq_len, seed + 4);
    std::vector<int> lengths(rows, s.seq_len), ks(rows, int(k));
    int* lengths_device = device_alloc<int>(rows);
    int* k_device = device_alloc<int>(rows);
    CHECK(cudaMemcpy(lengths_device, lengths.data(), rows * sizeof(int), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(k_device, ks.data(), rows * sizeof(int), cudaMemcpyHostToDevice));
    auto run = [&] { kc::top_k(scores, s.seq_len, lengths_device, k_device, rows, sets.indices, k, nullptr); };
    emit("decode", s, "topk", timer.median_ms(run, reps), double(rows) * s.seq_len * 4, 0, 0);
    CHECK(cudaFree(scores));
    CHECK(cudaFree(lengths_device));
    CHECK(cudaFree(k_device));
  }
  if (!arena.enabled()) {
    CHECK(cudaFree(keys));
    CHECK(cudaFree(values));
  }
  for (void* pointer : {(void*)queries, (void*)output, (void*)seq_lens, (void*)sets.indices, (void*)sets.counts,
                        (void*)head_map})
    CHECK(cudaFree(pointer));
}

void bench_prefill(const Shape& s, const kc::Budget& budget, int tile, Timer& timer, int reps) {
  const int64_t kv = int64_t(s.batch) * s.n_kv_heads * s.seq_len * s.head_dim;
  const int64_t q = int64_t(s.batch) * s.seq_len * s.n_heads * s.head_dim;
  uint16_t* keys = device_alloc<uint16_t>(kv);
  uint16_t* values = device_alloc<uint16_t>(kv);
  uint16_t* queries = device_alloc<uint16_t>(q);
  uint16_t* output = device_alloc<uint16_t>(q);
  const uint64_t seed = fresh_seed();
  fill(keys, kv, seed + 1, s.bf16);
  fill(values, kv, seed + 2, s.bf16);
  fill(queries, q, seed + 3, s.bf16);
  std::vector<int> lens(s.batch, s.seq_len);
  int* seq_lens = device_alloc<int>(s.batch);
  CHECK(cudaMemcpy(seq_lens, lens.data(), s.batch * sizeof(int), cudaMemcpyHostToDevice));

  const kc::PrefillIndexLayout layout = kc::prefill_index_layout(s.seq_len, tile, budget);
  int64_t* offsets = device_alloc<int64_t>(int64_t(layout.offsets.size()));
  CHECK(cudaMemcpy(offsets, layout.offsets.data(), layout.offsets.size() * sizeof(int64_t), cudaMemcpyHostToDevice));
  const kc::PrefillIndexSets sets = kc::fixtures::prefill_index_sets(
      device_alloc<int>(int64_t(s.batch) * s.n_kv_heads * layout.per_head()), offsets, layout, tile);
  std::vector<int> map(s.n_kv_heads);
  for (int h = 0; h < s.n_kv_heads; ++h) map[h] = (h * 3 + 1) % s.n_kv_heads;
  int* head_map = device_alloc<int>(s.n_kv_heads);
  CHECK(cudaMemcpy(head_map, map.data(), s.n_kv_heads * sizeof(int), cudaMemcpyHostToDevice));

  const kc::AttentionArgs args = make_args(s, keys, values, seq_lens, queries, output);

  // FLOPs actually needed: causal dense 4*d per (row, visible key); sparse
  // rows see their tile's selected keys plus their own causal prefix.
  const double n = s.seq_len;
  const double dense_flops = 4.0 * s.head_dim * s.n_heads * s.batch * n * (n + 1) / 2;
  double sparse_pairs = 0;
  for (int64_t t = 0; t + 1 < int64_t(layout.offsets.size()); ++t) {
    const int64_t rows = std::min<int64_t>(tile, s.seq_len - t * tile);
    sparse_pairs += double(layout.offsets[t + 1] - layout.offsets[t]) * rows + double(rows) * (rows + 1) / 2;
  }
  const double sparse_flops = 4.0 * s.head_dim * s.n_heads * s.batch * sparse_pairs;
  const double index_bytes = double(s.batch) * s.n_kv_heads * sets.per_head * 4;
  {
    kc::Workspace ws;
    auto run = [&] { kc::dense_prefill(args, nullptr, ws, nullptr); };
    poison_run_check(output, q, s.bf16, run, "dense_prefill");
    emit("prefill", s, "dense", timer.median_ms(run, reps), 0, dense_flops, double(ws.high_water()));
  }
  {
    kc::Workspace ws;
    auto run = [&] { kc::anchor_prefill(args, budget, true, sets, ws, nullptr); };
    poison_run_check(output, q, s.bf16, run, "anchor_prefill(layer 0)");
    emit("prefill", s, "anchor0", timer.median_ms(run, reps), 0, dense_flops, double(ws.high_water()) + index_bytes);
  }
  {
    kc::Workspace ws;
    auto run = [&] { kc::anchor_prefill(args, budget, false, sets, ws, nullptr); };
    poison_run_check(output, q, s.bf16, run, "anchor_prefill");
    emit("prefill", s, "anchor", timer.median_ms(run, reps), 0, sparse_flops, double(ws.high_water()) + index_bytes);
  }
  {
    kc::Workspace ws;
    auto run = [&] { kc::reuse_prefill(args, sets, head_map, ws, nullptr); };
    poison_run_check(output, q, s.bf16, run, "reuse_prefill");
    emit("prefill", s, "reuse", timer.median_ms(run, reps), 0, sparse_flops, double(ws.high_water()) + index_bytes);
  }
  for (void* pointer : {(void*)keys, (void*)values, (void*)queries, (void*)output, (void*)seq_lens,
                        (void*)sets.indices, (void*)offsets, (void*)head_map})
    CHECK(cudaFree(pointer));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: kascade_cuda_bench OUT.csv [decode|prefill|all|profile|selecting]\n");
    return 2;
  }
  const std::string what = argc > 2 ? argv[2] : "all";
  csv = std::fopen(argv[1], "w");
  if (!csv) {
    std::fprintf(stderr, "bench: cannot write %s\n", argv[1]);
    return 1;
  }
  std::fprintf(csv, "section,dtype,H,G,d,batch,N,impl,ms,bytes,flops,extra_mb\n");
  Timer timer;
  const kc::Budget budget;  // 10%, min 128 keys
  try {
    // KASCADE_BENCH_N=32768 (say) limits every section to that length, fp16
    // only; KASCADE_BENCH_B=64 limits decode to that batch (A/B runs).
    const char* only = std::getenv("KASCADE_BENCH_N");
    const int only_n = only ? std::atoi(only) : 0;
    const char* only_batch_text = std::getenv("KASCADE_BENCH_B");
    const int only_batch = only_batch_text ? std::atoi(only_batch_text) : 0;
    // Decode shapes and how many timed runs each gets.
    std::vector<std::pair<Shape, int>> decode;
    if (what == "all" || what == "decode") {
      for (bool bf16 : {false, true})
        for (int batch : {64, 8, 1})
          for (int n : {8192, 32768, 65536, 131072})
            if ((only_n == 0 || (n == only_n && !bf16)) && (only_batch == 0 || batch == only_batch))
              decode.push_back({Shape{bf16, batch, 32, 8, 128, n}, 20});
      if (only_n == 0 && only_batch == 0)
        for (int n : {8192, 32768}) decode.push_back({Shape{false, 64, 9, 3, 64, n}, 20});
    }
    if (what == "profile")
      for (int n : {32768, 131072}) decode.push_back({Shape{false, 64, 32, 8, 128, n}, 1});
    // The selecting layer against dense at 8 and 2 KV heads (Llama 3.1 8B's
    // and Qwen2.5-1.5B's attention), decode at the lengths the targets name.
    if (what == "selecting")
      for (const int kv_heads : {8, 2})
        for (int batch : {64, 16, 1})
          for (int n : {32768, 131072})
            if ((only_n == 0 || n == only_n) && (only_batch == 0 || batch == only_batch))
              decode.push_back({Shape{false, batch, kv_heads == 8 ? 32 : 12, kv_heads, 128, n}, 20});
    // One KV reservation for all shapes: the largest shape's keys and values
    // (twice for shapes with the chained step).
    auto with_extras = [&](const Shape& shape, int reps) {
      return shape.batch == 64 && shape.n_heads == 32 && reps > 1;
    };
    size_t arena_bytes = 0;
    for (const auto& [shape, reps] : decode)
      arena_bytes = std::max(arena_bytes, (with_extras(shape, reps) ? 4 : 2) *
                                              KvArena::padded_bytes(decode_kv_elements(shape)));
    if (!decode.empty()) {
      KvArena arena(arena_bytes);
      for (const auto& [shape, reps] : decode) bench_decode(shape, budget, timer, arena, reps, with_extras(shape, reps));
    }
    if (what == "all" || what == "prefill") {
      for (bool bf16 : {false, true})
        for (int n : {8192, 32768, 65536, 131072})
          if (only_n == 0 || (n == only_n && !bf16))
            bench_prefill(Shape{bf16, 1, 32, 8, 128, n}, budget, 32, timer, n >= 65536 ? 3 : 5);
      if (only_n == 0) {
        for (int n : {8192, 32768}) bench_prefill(Shape{false, 1, 9, 3, 64, n}, budget, 32, timer, 5);
        // head_dim 256 (Gemma 3 4B's attention), on the Hopper core.
        for (int n : {8192, 32768}) bench_prefill(Shape{false, 1, 8, 4, 256, n}, budget, 32, timer, 5);
      }
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bench: %s\n", error.what());
    return 1;
  }
  std::fclose(csv);
  return 0;
}
