// GPU test of the CUDA attention kernels against the CPU reference
// (attention/kascade_ops.h), as GoogleTest cases under the ctest label `gpu`.
// Needs a Hopper GPU: without a CUDA device every GPU case skips (CI builds
// it and runs only the host-side budget check); bench/cuda/run_device.sh runs
// it on the GPU machine. Fresh random inputs every run (the seed is printed;
// KASCADE_TEST_SEED=N repeats a run), lengths off every tile grid, outputs
// poisoned before each call.
//
// Checks, per KASCADE.md and issue 5:
//  - outputs: relative error ||gpu - ref|| / ||ref|| <= 1e-2 against the fp32
//    CPU reference on the same (rounded) inputs; every element written;
//  - index sets: the mass they capture (pooled post-softmax scores, CPU) is at
//    least the CPU set's mass minus 1e-3, and every index that differs from
//    the CPU set is a near-tie of the k-th score (float round-off only);
//  - top_k: exactly equal to select_top_k, on inputs full of ties;
//  - budget: budget_keys equals kascade::budget;
//  - chunked prefill (query_start): the checks above, and the chunks' rows
//    bit-equal to the one-pass call's when every chunk boundary is a multiple
//    of prefill_exact_multiple (within rounding otherwise: compare_chunked);
//    on the host, the chunk index layouts and the query_start checks.
// Each check also prints a PASS/FAIL line with its numbers.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention/kascade_ops.h"
#include "attention/key_sketch.h"
#include "attention_fixtures.h"
#include "core/error.h"
#include "core/half.h"
#include "cuda/kascade_cuda.h"

namespace kc = kascade::cuda;
namespace ka = kascade::attention;

namespace {

int checks = 0, failed_checks = 0;

// The summary line of one check (bench/cuda/run_device.sh's log shows them),
// counted for the last line of the run.
void print_check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "PASS" : "FAIL", what.c_str());
  ++checks;
  if (!ok) ++failed_checks;
}

// A failed CUDA call ends the test case (GoogleTest reports the exception).
void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    const std::string message = std::string("cuda: ") + what + ": " + cudaGetErrorString(status);
    print_check(false, message);
    throw std::runtime_error(message);
  }
}

std::mt19937_64 rng;

// Device buffer of T with host mirror helpers.
template <typename T>
struct DeviceBuffer {
  T* data = nullptr;
  size_t count = 0;
  explicit DeviceBuffer(size_t n) : count(n) {
    void* pointer = nullptr;
    check_cuda(cudaMalloc(&pointer, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc");
    data = static_cast<T*>(pointer);
  }
  ~DeviceBuffer() { cudaFree(data); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  void upload(const std::vector<T>& host) { check_cuda(cudaMemcpy(data, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload"); }
  std::vector<T> download() const {
    std::vector<T> host(count);
    check_cuda(cudaMemcpy(host.data(), data, count * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return host;
  }
  void poison() { check_cuda(cudaMemset(data, 0xff, count * sizeof(T)), "poison"); }
};

// Random values rounded to the element type: bits for the GPU, exact fp32 for the CPU.
struct Tensor16 {
  std::vector<uint16_t> bits;
  std::vector<float> values;
};

uint16_t to_bits(float x, bool bf16) { return bf16 ? kascade::fp32_to_bf16(x) : kascade::fp32_to_fp16(x); }
float from_bits(uint16_t b, bool bf16) { return bf16 ? kascade::bf16_to_fp32(b) : kascade::fp16_to_fp32(b); }

// Uniform in [-scale, scale); all zeros for scale 0.
Tensor16 random_tensor(size_t n, bool bf16, float scale) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  Tensor16 t;
  t.bits.assign(n, to_bits(0.f, bf16));
  t.values.assign(n, 0.f);
  if (scale == 0.f) return t;
  for (size_t i = 0; i < n; ++i) {
    t.bits[i] = to_bits(dist(rng), bf16);
    t.values[i] = from_bits(t.bits[i], bf16);
  }
  return t;
}

// Relative L2 error over a set of rows, plus a poison check.
struct ErrorMeter {
  double diff = 0, norm = 0;
  int64_t unwritten = 0;
  void add(float gpu, float ref) {
    if (!std::isfinite(gpu)) {
      ++unwritten;
      return;
    }
    diff += double(gpu - ref) * (gpu - ref);
    norm += double(ref) * ref;
  }
  double relative() const { return std::sqrt(diff / std::max(norm, 1e-30)); }
  bool ok(double tolerance) const { return unwritten == 0 && relative() <= tolerance; }
  std::string describe() const {
    char text[96];
    std::snprintf(text, sizeof text, "rel err %.2e, non-finite %lld", relative(), static_cast<long long>(unwritten));
    return text;
  }
};

// Compares a GPU index set with the CPU one by captured pooled mass.
struct SelectionMeter {
  int64_t sets = 0, exact = 0, bad_ties = 0, short_mass = 0, malformed = 0;
  // Relative distance from the k-th pooled score within which indices may
  // differ: round-off of equal inputs, or more where the GPU rounds what the
  // CPU keeps (the sketch's widened keys, to the element type).
  float tie_tolerance = 1e-4f;
  double worst_deficit = 0;
  // pooled: CPU pooled scores over the candidates; norm: the number of rows pooled.
  void add(std::span<const int32_t> gpu, std::span<const int32_t> cpu, const std::vector<float>& pooled, double norm) {
    ++sets;
    std::vector<int32_t> sorted_gpu(gpu.begin(), gpu.end());
    bool ascending = std::is_sorted(sorted_gpu.begin(), sorted_gpu.end()) &&
                     std::adjacent_find(sorted_gpu.begin(), sorted_gpu.end()) == sorted_gpu.end();
    for (int32_t j : sorted_gpu) ascending = ascending && j >= 0 && j < int64_t(pooled.size());
    if (!ascending || gpu.size() != cpu.size()) {
      ++malformed;
      return;
    }
    if (std::equal(gpu.begin(), gpu.end(), cpu.begin())) {
      ++exact;
      return;
    }
    double gpu_mass = 0, cpu_mass = 0;
    for (int32_t j : gpu) gpu_mass += pooled[j];
    for (int32_t j : cpu) cpu_mass += pooled[j];
    const double deficit = (cpu_mass - gpu_mass) / norm;
    worst_deficit = std::max(worst_deficit, deficit);
    if (deficit > 1e-3) ++short_mass;
    // Every differing index must sit at the selection boundary (a near-tie).
    float kth = pooled[cpu[0]];
    for (int32_t j : cpu) kth = std::min(kth, pooled[j]);
    std::set<int32_t> in_cpu(cpu.begin(), cpu.end()), in_gpu(gpu.begin(), gpu.end());
    for (int32_t j : gpu)
      if (!in_cpu.count(j) && std::fabs(pooled[j] - kth) > tie_tolerance * kth + 1e-7f) ++bad_ties;
    for (int32_t j : cpu)
      if (!in_gpu.count(j) && std::fabs(pooled[j] - kth) > tie_tolerance * kth + 1e-7f) ++bad_ties;
  }
  bool ok() const { return malformed == 0 && short_mass == 0 && bad_ties == 0; }
  std::string describe() const {
    char text[160];
    std::snprintf(text, sizeof text, "%lld sets, %lld identical, worst mass deficit %.1e, non-tie differences %lld, malformed %lld",
                  static_cast<long long>(sets), static_cast<long long>(exact), worst_deficit,
                  static_cast<long long>(bad_ties), static_cast<long long>(malformed));
    return text;
  }
};

// Output checks: every element written, relative error within `tolerance`.
void expect_output(const ErrorMeter& meter, const std::string& what, double tolerance = 1e-2) {
  print_check(meter.ok(tolerance), what + ": " + meter.describe());
  EXPECT_EQ(meter.unwritten, 0) << what << ": outputs left unwritten or non-finite";
  EXPECT_LE(meter.relative(), tolerance) << what << ": relative error against the CPU reference";
}

// Index-set checks: well-formed, mass within 1e-3 of the CPU set's, differences only at near-ties.
void expect_selection(const SelectionMeter& selection, const std::string& what) {
  print_check(selection.ok(), what + ": " + selection.describe());
  EXPECT_EQ(selection.malformed, 0) << what << ": sets not ascending, out of range or of the wrong size";
  EXPECT_EQ(selection.short_mass, 0) << what << ": sets capturing less than the CPU set's mass minus 1e-3 (worst deficit "
                                     << selection.worst_deficit << ")";
  EXPECT_EQ(selection.bad_ties, 0) << what << ": indices differing from the CPU set away from the k-th score";
}

// Dense LSE: worst absolute error against the CPU's (infinite if any is not finite).
void expect_lse(double worst, const std::string& what) {
  print_check(worst <= 2e-3, what + ": worst abs err " + std::to_string(worst));
  EXPECT_LE(worst, 2e-3) << what << ": worst absolute error against the CPU LSE";
}

struct Problem {
  bool bf16;
  int n_heads, n_kv_heads, head_dim;
  std::vector<int> lens;
  // 0: constant score rows, every pooled value tied; large: peaked rows whose
  // maxima climb from chunk to chunk.
  float query_scale = 1.f;
  std::string name() const {
    char text[160];
    std::snprintf(text, sizeof text, "%s H=%d G=%d d=%d queries x%g lens=", bf16 ? "bf16" : "f16", n_heads, n_kv_heads,
                  head_dim, query_scale);
    std::string s = text;
    for (size_t i = 0; i < lens.size(); ++i) {
      if (i > 0) s += ',';
      s += std::to_string(lens[i]);
    }
    return s;
  }
  int batch() const { return int(lens.size()); }
  int group() const { return n_heads / n_kv_heads; }
  int max_len() const { return *std::max_element(lens.begin(), lens.end()); }
  kc::fixtures::Geometry geometry() const { return {bf16, batch(), n_heads, n_kv_heads, head_dim}; }
};

// The KV cache, [batch][G][capacity][d], on both sides.
struct Cache {
  int64_t capacity;
  Tensor16 keys, values;
  DeviceBuffer<uint16_t> device_keys, device_values;
  DeviceBuffer<int> seq_lens;
  // capacity: the longest sequence + 3, rounded up to capacity_multiple.
  explicit Cache(const Problem& p, int64_t capacity_multiple = 1)
      : capacity((p.max_len() + 3 + capacity_multiple - 1) / capacity_multiple * capacity_multiple),
        keys(random_tensor(size_t(p.batch()) * p.n_kv_heads * capacity * p.head_dim, p.bf16, 1.f)),
        values(random_tensor(keys.values.size(), p.bf16, 1.f)),
        device_keys(keys.bits.size()),
        device_values(values.bits.size()),
        seq_lens(p.lens.size()) {
    device_keys.upload(keys.bits);
    device_values.upload(values.bits);
    seq_lens.upload(p.lens);
  }
  int64_t head_offset(const Problem& p, int b, int h) const { return ((int64_t(b) * p.n_kv_heads + h) * capacity) * p.head_dim; }
  ka::KeyValueRows rows(const Problem& p, int b, int h) const {
    return {keys.values.data() + head_offset(p, b, h), values.values.data() + head_offset(p, b, h), p.head_dim};
  }
  kc::fixtures::DeviceCache device(const Problem& p) const {
    return {device_keys.data, device_values.data, capacity, seq_lens.data, p.max_len()};
  }
};

kc::AttentionArgs make_args(const Problem& p, const Cache& cache, const void* queries, void* output) {
  return kc::fixtures::attention_args(p.geometry(), cache.device(p), queries, output);
}

// The cache's rows copied into a shuffled pool of pages of `page_size`
// positions: the paged layout the GPU engine's KV pool uses.
struct PagedPool {
  int page_size;
  int64_t pages_per_sequence;
  DeviceBuffer<uint16_t> keys, values;
  DeviceBuffer<int> table;
  PagedPool(const Problem& p, const Cache& cache, int page_size)
      : page_size(page_size),
        pages_per_sequence((cache.capacity + page_size - 1) / page_size),
        keys(size_t(p.batch()) * pages_per_sequence * p.n_kv_heads * page_size * p.head_dim),
        values(keys.count),
        table(size_t(p.batch()) * pages_per_sequence) {
    const int d = p.head_dim, G = p.n_kv_heads;
    std::vector<int> order(table.count);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<uint16_t> pool_keys(keys.count), pool_values(values.count);
    for (int b = 0; b < p.batch(); ++b)
      for (int h = 0; h < G; ++h)
        for (int64_t pos = 0; pos < cache.capacity; ++pos) {
          const int64_t page = order[size_t(b * pages_per_sequence + pos / page_size)];
          const int64_t to = ((page * G + h) * page_size + pos % page_size) * d;
          const int64_t from = cache.head_offset(p, b, h) + pos * d;
          std::copy_n(cache.keys.bits.begin() + from, d, pool_keys.begin() + to);
          std::copy_n(cache.values.bits.begin() + from, d, pool_values.begin() + to);
        }
    keys.upload(pool_keys);
    values.upload(pool_values);
    table.upload(order);
  }
  // `flat` (over the contiguous cache) reading this pool instead.
  kc::AttentionArgs args(kc::AttentionArgs flat) const {
    flat.keys = keys.data;
    flat.values = values.data;
    flat.page_table = table.data;
    flat.page_size = page_size;
    flat.page_table_stride = pages_per_sequence;
    flat.capacity = pages_per_sequence * page_size;
    return flat;
  }
};

// CPU pooled post-softmax scores of `rows` over candidates [0, n).
std::vector<float> cpu_pooled(const ka::GroupQueries& rows, const float* keys, int d, int64_t n) {
  std::vector<float> lse(rows.n_rows());
  ka::row_lse(rows, keys, d, d, lse.data());
  std::vector<float> pooled(n, 0.f);
  ka::pool_scores(rows, keys, d, d, lse.data(), n, ka::Pooling::PostSoftmax, pooled.data());
  return pooled;
}

std::vector<int> random_head_map(int n_kv_heads) {
  std::vector<int> map(n_kv_heads);
  for (int h = 0; h < n_kv_heads; ++h) map[h] = int(rng() % n_kv_heads);  // need not be a permutation
  return map;
}

void test_decode(const Problem& p, const kc::Budget& budget) {
  const std::string name = "decode " + p.name();
  Cache cache(p);
  const int d = p.head_dim, g = p.group();
  const Tensor16 queries = random_tensor(size_t(p.batch()) * p.n_heads * d, p.bf16, p.query_scale);
  DeviceBuffer<uint16_t> device_queries(queries.bits.size()), output(queries.bits.size());
  device_queries.upload(queries.bits);
  DeviceBuffer<float> lse(size_t(p.batch()) * p.n_heads);
  kc::AttentionArgs args = make_args(p, cache, device_queries.data, output.data);
  kc::Workspace workspace;

  auto group_queries = [&](int b, int h) {
    ka::GroupQueries rows;
    rows.data = queries.values.data() + (int64_t(b) * p.n_heads + h * g) * d;
    rows.n_positions = 1;
    rows.group = g;
    rows.position_stride = int64_t(p.n_heads) * d;
    rows.head_stride = d;
    rows.first_position = p.lens[b] - 1;
    return rows;
  };
  auto reference = [&](int b, int h, const std::vector<int32_t>* indices) {
    std::vector<float> out(size_t(g) * d);
    ka::GroupOutput target{out.data(), int64_t(g) * d, d};
    if (indices) {
      ka::sparse_attention(group_queries(b, h), cache.rows(p, b, h), d, *indices, false, target);
    } else {
      ka::dense_attention(group_queries(b, h), cache.rows(p, b, h), d, target);
    }
    return out;
  };
  auto compare = [&](const std::vector<uint16_t>& gpu, int b, int h, const std::vector<float>& ref, ErrorMeter& meter) {
    for (int i = 0; i < g * d; ++i) meter.add(from_bits(gpu[(int64_t(b) * p.n_heads + h * g) * d + i], p.bf16), ref[i]);
  };

  // Dense.
  output.poison();
  lse.poison();
  kc::dense_decode(args, lse.data, workspace, nullptr);
  check_cuda(cudaDeviceSynchronize(), "dense_decode");
  {
    const std::vector<uint16_t> gpu = output.download();
    const std::vector<float> gpu_lse = lse.download();
    ErrorMeter meter;
    double worst_lse = 0;
    for (int b = 0; b < p.batch(); ++b)
      for (int h = 0; h < p.n_kv_heads; ++h) {
        compare(gpu, b, h, reference(b, h, nullptr), meter);
        std::vector<float> cpu_lse(g);
        ka::row_lse(group_queries(b, h), cache.rows(p, b, h).keys, d, d, cpu_lse.data());
        for (int r = 0; r < g; ++r) {
          const float value = gpu_lse[int64_t(b) * p.n_heads + h * g + r];
          worst_lse = std::isfinite(value) ? std::max(worst_lse, double(std::fabs(value - cpu_lse[r]))) : INFINITY;
        }
      }
    expect_output(meter, name + " dense output");
    expect_lse(worst_lse, name + " dense LSE");
  }

  // Anchor (sparse output, then layer-0 style dense output) and reuse.
  const int64_t max_keys = kc::budget_keys(budget, p.max_len());
  DeviceBuffer<int> indices(size_t(p.batch()) * p.n_kv_heads * max_keys), counts(p.batch());
  kc::DecodeIndexSets sets{indices.data, counts.data, max_keys};
  ka::SelectionRule rule;
  rule.percent = budget.percent;
  rule.min_k = budget.min_keys;
  for (bool dense_output : {false, true}) {
    const std::string label = name + (dense_output ? " anchor(layer 0)" : " anchor");
    output.poison();
    indices.poison();
    kc::anchor_decode(args, budget, dense_output, sets, workspace, nullptr);
    check_cuda(cudaDeviceSynchronize(), "anchor_decode");
    const std::vector<uint16_t> gpu = output.download();
    const std::vector<int> gpu_indices = indices.download();
    const std::vector<int> gpu_counts = counts.download();
    SelectionMeter selection;
    ErrorMeter meter;
    bool counts_ok = true;
    for (int b = 0; b < p.batch(); ++b) {
      const int64_t n = p.lens[b];
      counts_ok = counts_ok && gpu_counts[b] == kascade::budget(n, budget.percent, budget.min_keys);
      for (int h = 0; h < p.n_kv_heads; ++h) {
        std::vector<int32_t> cpu_set(rule.count(n));
        ka::anchor_decode(group_queries(b, h), cache.rows(p, b, h).keys, d, d, rule, cpu_set.data());
        const int* first = gpu_indices.data() + (int64_t(b) * p.n_kv_heads + h) * max_keys;
        std::vector<int32_t> gpu_set(first, first + std::min<int64_t>(gpu_counts[b], max_keys));
        selection.add(gpu_set, cpu_set, cpu_pooled(group_queries(b, h), cache.rows(p, b, h).keys, d, n), g);
        compare(gpu, b, h, reference(b, h, dense_output ? nullptr : &gpu_set), meter);
      }
    }
    print_check(counts_ok, label + " counts equal budget(N)");
    EXPECT_TRUE(counts_ok) << label << ": counts differ from budget(N)";
    expect_selection(selection, label + " selection");
    expect_output(meter, label + " output");
  }

  // Reuse through a head map, over the anchor's (GPU) sets.
  const std::vector<int> map = random_head_map(p.n_kv_heads);
  DeviceBuffer<int> device_map(map.size());
  device_map.upload(map);
  output.poison();
  kc::reuse_decode(args, sets, device_map.data, workspace, nullptr);
  check_cuda(cudaDeviceSynchronize(), "reuse_decode");
  {
    const std::vector<uint16_t> gpu = output.download();
    const std::vector<int> gpu_indices = indices.download();
    const std::vector<int> gpu_counts = counts.download();
    ErrorMeter meter;
    for (int b = 0; b < p.batch(); ++b)
      for (int h = 0; h < p.n_kv_heads; ++h) {
        const int* first = gpu_indices.data() + (int64_t(b) * p.n_kv_heads + map[h]) * max_keys;
        const std::vector<int32_t> set(first, first + gpu_counts[b]);
        compare(gpu, b, h, reference(b, h, &set), meter);
      }
    expect_output(meter, name + " reuse (head map) output");
  }

  // Held steps (select_every): sets selected `age` steps ago, each with a run
  // of neighbours (a copying head's, whose shift overlaps it), against
  // held_keys' lists. Ages 0 (the selecting step) to max_age.
  {
    constexpr int kMaxAge = 7;
    std::vector<int> selected_lens(p.batch()), held_counts(p.batch());
    std::vector<int> held(size_t(p.batch()) * p.n_kv_heads * max_keys, -1);
    std::vector<std::vector<int32_t>> lists(size_t(p.batch()) * p.n_kv_heads);
    for (int b = 0; b < p.batch(); ++b) {
      const int age = int(rng() % uint64_t(std::min(kMaxAge, p.lens[b] - 1) + 1));
      selected_lens[b] = p.lens[b] - age;
      held_counts[b] = int(kascade::budget(selected_lens[b], budget.percent, budget.min_keys));
      for (int h = 0; h < p.n_kv_heads; ++h) {
        std::set<int32_t> chosen;
        const int run = std::min(held_counts[b] / 2, 20);
        const int run_start = int(rng() % uint64_t(selected_lens[b] - run + 1));
        for (int i = 0; i < run; ++i) chosen.insert(run_start + i);
        while (int(chosen.size()) < held_counts[b]) chosen.insert(int32_t(rng() % uint64_t(selected_lens[b])));
        const std::vector<int32_t> set(chosen.begin(), chosen.end());
        std::copy(set.begin(), set.end(), held.begin() + (int64_t(b) * p.n_kv_heads + h) * max_keys);
        ka::held_keys(set, selected_lens[b], p.lens[b], lists[size_t(b) * p.n_kv_heads + h]);
      }
    }
    DeviceBuffer<int> device_held(held.size()), device_counts(held_counts.size()), device_lens(selected_lens.size());
    device_held.upload(held);
    device_counts.upload(held_counts);
    device_lens.upload(selected_lens);
    output.poison();
    kc::held_decode(args, {device_held.data, device_counts.data, max_keys}, device_lens.data, kMaxAge, workspace,
                    nullptr);
    check_cuda(cudaDeviceSynchronize(), "held_decode");
    const std::vector<uint16_t> gpu = output.download();
    ErrorMeter meter;
    for (int b = 0; b < p.batch(); ++b)
      for (int h = 0; h < p.n_kv_heads; ++h) compare(gpu, b, h, reference(b, h, &lists[size_t(b) * p.n_kv_heads + h]), meter);
    expect_output(meter, name + " held output");
  }
}

// The key sketch: sketch_keys bit-equal to the CPU's sketch_block, in the
// contiguous and a shuffled paged layout; an anchor scoring from it selects
// the top budget of the pooled scores over the sketched keys (near-ties
// aside), and paged selects what contiguous does.
void test_decode_sketch(const Problem& p, const kc::Budget& budget) {
  const std::string name = "sketch decode " + p.name();
  constexpr int kBlock = ka::kSketchBlock;
  Cache cache(p, kBlock);
  const int d = p.head_dim, G = p.n_kv_heads, g = p.group();
  const int64_t blocks_per_head = cache.capacity / kBlock;
  const Tensor16 queries = random_tensor(size_t(p.batch()) * p.n_heads * d, p.bf16, p.query_scale);
  DeviceBuffer<uint16_t> device_queries(queries.bits.size()), output(queries.bits.size());
  device_queries.upload(queries.bits);
  kc::AttentionArgs args = make_args(p, cache, device_queries.data, output.data);

  DeviceBuffer<uint8_t> codes(size_t(p.batch()) * G * cache.capacity * d / 2);
  DeviceBuffer<uint16_t> params(size_t(p.batch()) * G * blocks_per_head * 2 * d);
  codes.poison();
  params.poison();
  const std::vector<const void*> layer_keys{cache.device_keys.data};
  const std::vector<kc::KeySketch> layer_sketches{{codes.data, params.data}};
  DeviceBuffer<const void*> device_layer_keys(1);
  DeviceBuffer<kc::KeySketch> device_layer_sketches(1);
  device_layer_keys.upload(layer_keys);
  device_layer_sketches.upload(layer_sketches);
  kc::sketch_keys(args, p.max_len(), device_layer_keys.data, device_layer_sketches.data, 1, nullptr);
  check_cuda(cudaDeviceSynchronize(), "sketch_keys");
  const std::vector<uint8_t> gpu_codes = codes.download();
  const std::vector<uint16_t> gpu_params = params.download();

  // The CPU sketch of every complete block, and the sketched keys the CPU pools over.
  bool equal = true;
  std::vector<float> sketched_keys = cache.keys.values;
  std::vector<float> lo(d), step(d), row(d);
  std::vector<uint8_t> cpu_codes(size_t(kBlock) * d / 2);
  for (int b = 0; b < p.batch(); ++b)
    for (int h = 0; h < G; ++h)
      for (int64_t block = 0; block < p.lens[b] / kBlock; ++block) {
        const int64_t head = int64_t(b) * G + h;
        const float* keys = cache.keys.values.data() + cache.head_offset(p, b, h) + block * kBlock * d;
        ka::sketch_block(ka::kernels::Rows<float>{keys, d}, d, lo.data(), step.data(), cpu_codes.data());
        const uint16_t* gpu_block_params = gpu_params.data() + (head * blocks_per_head + block) * 2 * d;
        for (int c = 0; c < d; ++c)
          equal = equal && gpu_block_params[c] == kascade::fp32_to_fp16(lo[c]) &&
                  gpu_block_params[d + c] == kascade::fp32_to_fp16(step[c]);
        equal = equal && std::equal(cpu_codes.begin(), cpu_codes.end(),
                                    gpu_codes.begin() + (head * cache.capacity + block * kBlock) * d / 2);
        if (block < (p.lens[b] - 1) / kBlock) {
          const ka::SketchBlock view{lo.data(), step.data(), cpu_codes.data()};
          for (int64_t j = 0; j < kBlock; ++j)
            ka::dequantize_sketch_row(view, d, j,
                                      sketched_keys.data() + cache.head_offset(p, b, h) + (block * kBlock + j) * d);
        }
      }
  print_check(equal, name + " sketch bit-equal to the CPU's");
  EXPECT_TRUE(equal) << name << ": sketch_keys differs from sketch_block";

  auto group_queries = [&](int b, int h) {
    ka::GroupQueries rows;
    rows.data = queries.values.data() + (int64_t(b) * p.n_heads + h * g) * d;
    rows.n_positions = 1;
    rows.group = g;
    rows.position_stride = int64_t(p.n_heads) * d;
    rows.head_stride = d;
    rows.first_position = p.lens[b] - 1;
    return rows;
  };
  const int64_t max_keys = kc::budget_keys(budget, p.max_len());
  DeviceBuffer<int> indices(size_t(p.batch()) * G * max_keys), counts(p.batch());
  const kc::DecodeIndexSets sets{indices.data, counts.data, max_keys};
  kc::AttentionArgs sketched = args;
  sketched.key_sketch = {codes.data, params.data};
  kc::Workspace workspace;
  output.poison();
  kc::anchor_decode(sketched, budget, false, sets, workspace, nullptr);
  check_cuda(cudaDeviceSynchronize(), "anchor_decode (sketch)");
  const std::vector<int> gpu_indices = indices.download();
  const std::vector<int> gpu_counts = counts.download();
  const std::vector<uint16_t> gpu_out = output.download();
  ka::SelectionRule rule;
  rule.percent = budget.percent;
  rule.min_k = budget.min_keys;
  SelectionMeter selection;
  // The GPU rounds the weights q_c * step_c (and, bf16, lo) to the element
  // type for its tensor cores (fp16: 2^-11, bf16: 2^-8 of each term), which
  // moves scores by about that.
  selection.tie_tolerance = p.bf16 ? 1e-2f : 2e-3f;
  ErrorMeter meter;
  for (int b = 0; b < p.batch(); ++b)
    for (int h = 0; h < G; ++h) {
      const int64_t n = p.lens[b];
      // The reference: the top budget of the pooled scores over the sketched
      // keys as floats (the CPU's own scorer rounds the query weights to int8
      // instead, key_sketch.h; both approximate these scores).
      const std::vector<float> pooled =
          cpu_pooled(group_queries(b, h), sketched_keys.data() + cache.head_offset(p, b, h), d, n);
      std::vector<int32_t> cpu_set(rule.count(n));
      ka::select_top_k(pooled.data(), n, int64_t(cpu_set.size()), cpu_set.data());
      const int* first = gpu_indices.data() + (int64_t(b) * G + h) * max_keys;
      const std::vector<int32_t> gpu_set(first, first + std::min<int64_t>(gpu_counts[b], max_keys));
      selection.add(gpu_set, cpu_set, pooled, g);
      std::vector<float> out(size_t(g) * d);
      ka::sparse_attention(group_queries(b, h), cache.rows(p, b, h), d, gpu_set, false,
                           ka::GroupOutput{out.data(), int64_t(g) * d, d});
      for (int i = 0; i < g * d; ++i) meter.add(from_bits(gpu_out[(int64_t(b) * p.n_heads + h * g) * d + i], p.bf16), out[i]);
    }
  expect_selection(selection, name + " anchor selection");
  expect_output(meter, name + " anchor output");

  // The same through a shuffled pool of 64-position pages.
  const PagedPool pool(p, cache, kBlock);
  DeviceBuffer<uint8_t> paged_codes(codes.count);
  DeviceBuffer<uint16_t> paged_params(params.count);
  kc::AttentionArgs paged = pool.args(sketched);
  paged.key_sketch = {paged_codes.data, paged_params.data};
  const std::vector<const void*> paged_layer_keys{pool.keys.data};
  const std::vector<kc::KeySketch> paged_layer_sketches{paged.key_sketch};
  device_layer_keys.upload(paged_layer_keys);
  device_layer_sketches.upload(paged_layer_sketches);
  kc::sketch_keys(paged, p.max_len(), device_layer_keys.data, device_layer_sketches.data, 1, nullptr);
  DeviceBuffer<int> paged_indices(indices.count), paged_counts(counts.count);
  kc::anchor_decode(paged, budget, false, {paged_indices.data, paged_counts.data, max_keys}, workspace, nullptr);
  check_cuda(cudaDeviceSynchronize(), "anchor_decode (sketch, paged)");
  const bool paged_ok = paged_indices.download() == gpu_indices && output.download() == gpu_out;
  print_check(paged_ok, name + " paged index sets and output bit-equal");
  EXPECT_TRUE(paged_ok) << name << ": the paged sketch selects otherwise";
  // A capacity the sketch's blocks do not divide is refused.
  kc::AttentionArgs odd = sketched;
  odd.capacity = cache.capacity - 1;
  EXPECT_THROW(kc::anchor_decode(odd, budget, false, sets, workspace, nullptr), kascade::Error);
}

// The decode passes over a paged cache (pages of `page_size` positions in a
// shuffled pool) against the same passes over the contiguous cache: the same
// kernels with other addresses, so outputs and index sets must be bit-equal.
void test_decode_paged(const Problem& p, const kc::Budget& budget, int page_size) {
  const std::string name = "paged decode (pages of " + std::to_string(page_size) + ") " + p.name();
  Cache cache(p);
  const int d = p.head_dim, G = p.n_kv_heads;
  const PagedPool pool(p, cache, page_size);

  const Tensor16 queries = random_tensor(size_t(p.batch()) * p.n_heads * d, p.bf16, p.query_scale);
  DeviceBuffer<uint16_t> device_queries(queries.bits.size());
  device_queries.upload(queries.bits);
  DeviceBuffer<uint16_t> out_flat(queries.bits.size()), out_paged(queries.bits.size());
  kc::AttentionArgs flat = make_args(p, cache, device_queries.data, out_flat.data);
  kc::AttentionArgs paged = pool.args(flat);
  paged.output = out_paged.data;
  kc::Workspace workspace;
  const int64_t max_keys = kc::budget_keys(budget, p.max_len());
  DeviceBuffer<int> indices_flat(size_t(p.batch()) * G * max_keys), indices_paged(indices_flat.count);
  DeviceBuffer<int> counts_flat(p.batch()), counts_paged(p.batch());
  const kc::DecodeIndexSets sets_flat{indices_flat.data, counts_flat.data, max_keys};
  const kc::DecodeIndexSets sets_paged{indices_paged.data, counts_paged.data, max_keys};
  const std::vector<int> map = random_head_map(G);
  DeviceBuffer<int> device_map(map.size());
  device_map.upload(map);

  auto same = [&](const std::string& what) {
    check_cuda(cudaDeviceSynchronize(), what.c_str());
    const bool ok = out_flat.download() == out_paged.download();
    print_check(ok, name + " " + what + " output bit-equal");
    EXPECT_TRUE(ok) << name << " " << what;
  };
  out_flat.poison(), out_paged.poison();
  kc::dense_decode(flat, nullptr, workspace, nullptr);
  kc::dense_decode(paged, nullptr, workspace, nullptr);
  same("dense");
  for (bool dense_output : {false, true}) {
    out_flat.poison(), out_paged.poison();
    kc::anchor_decode(flat, budget, dense_output, sets_flat, workspace, nullptr);
    kc::anchor_decode(paged, budget, dense_output, sets_paged, workspace, nullptr);
    same(dense_output ? "anchor(layer 0)" : "anchor");
    const bool sets_ok = indices_flat.download() == indices_paged.download() && counts_flat.download() == counts_paged.download();
    print_check(sets_ok, name + " anchor index sets equal");
    EXPECT_TRUE(sets_ok) << name;
  }
  out_flat.poison(), out_paged.poison();
  kc::reuse_decode(flat, sets_flat, device_map.data, workspace, nullptr);
  kc::reuse_decode(paged, sets_paged, device_map.data, workspace, nullptr);
  same("reuse");
  // Prefill refuses a paged cache.
  EXPECT_THROW(kc::dense_prefill(paged, nullptr, workspace, nullptr), kascade::Error);
}

// A prefill problem on both sides: the cache, the prompt's queries
// [batch][max_len][H][d] (keys of position q are the cache rows:
// self-attention), the whole prompt's index layout and the CPU references.
struct PrefillCase {
  const Problem& p;
  kc::Budget budget;
  int tile;
  Cache cache;
  Tensor16 queries;
  kc::PrefillIndexLayout layout;  // the whole prompt's (first tile 0)
  PrefillCase(const Problem& problem, const kc::Budget& b, int t)
      : p(problem),
        budget(b),
        tile(t),
        cache(problem),
        queries(random_tensor(size_t(problem.batch()) * problem.max_len() * problem.n_heads * problem.head_dim,
                              problem.bf16, problem.query_scale)),
        layout(kc::prefill_index_layout(problem.max_len(), t, b)) {}

  ka::GroupQueries group_queries(int b, int h, int64_t first, int64_t count) const {
    ka::GroupQueries rows;
    rows.data = queries.values.data() + ((int64_t(b) * p.max_len() + first) * p.n_heads + h * p.group()) * p.head_dim;
    rows.n_positions = count;
    rows.group = p.group();
    rows.position_stride = int64_t(p.n_heads) * p.head_dim;
    rows.head_stride = p.head_dim;
    rows.first_position = first;
    return rows;
  }
  // Element i of head r of KV head h's group at position q, in [batch][max_len][H][d].
  int64_t output_index(int b, int h, int64_t q, int r, int i) const {
    return ((int64_t(b) * p.max_len() + q) * p.n_heads + h * p.group() + r) * p.head_dim + i;
  }
  // The rows of positions [first, first + count) of KV head h's group against `ref` ([count][g][d]).
  void compare_rows(const std::vector<uint16_t>& gpu, int b, int h, int64_t first, int64_t count,
                    const std::vector<float>& ref, ErrorMeter& meter) const {
    const int g = p.group(), d = p.head_dim;
    for (int64_t t = 0; t < count; ++t)
      for (int r = 0; r < g; ++r)
        for (int i = 0; i < d; ++i)
          meter.add(from_bits(gpu[size_t(output_index(b, h, first + t, r, i))], p.bf16), ref[(t * g + r) * d + i]);
  }
  std::vector<float> dense_reference(int b, int h) const {
    const int g = p.group(), d = p.head_dim;
    std::vector<float> out(size_t(p.lens[b]) * g * d);
    ka::dense_attention(group_queries(b, h, 0, p.lens[b]), cache.rows(p, b, h), d, {out.data(), int64_t(g) * d, d});
    return out;
  }
  // Tile t's set of (sequence b, KV head h) in `indices` ([batch][G][layout.per_head()]).
  std::span<const int32_t> set(const std::vector<int>& indices, int b, int h, int64_t t) const {
    const int* base = indices.data() + (int64_t(b) * p.n_kv_heads + h) * layout.per_head();
    return {base + layout.offsets[t], size_t(layout.offsets[t + 1] - layout.offsets[t])};
  }
  // CPU pooled post-softmax scores of tile t (t > 0) of (b, h) over its prefix.
  std::vector<float> tile_pooled(int b, int h, int64_t t) const {
    const int64_t s = t * tile, count = std::min<int64_t>(tile, p.lens[b] - s);
    return cpu_pooled(group_queries(b, h, s, count), cache.rows(p, b, h).keys, p.head_dim, s);
  }
};

enum class PrefillPass { Dense, Anchor, AnchorDenseOutput, Reuse };

const char* pass_name(PrefillPass pass) {
  switch (pass) {
    case PrefillPass::Dense: return "dense";
    case PrefillPass::Anchor: return "anchor";
    case PrefillPass::AnchorDenseOutput: return "anchor(layer 0)";
    case PrefillPass::Reuse: return "reuse (head map)";
  }
  return "?";
}

// A prefill pass's results over the whole prompt in the one-pass layouts
// (a chunked run's calls scattered into them). Whatever no call wrote keeps
// the poison (all bits set), as the device buffers do.
struct PrefillResult {
  std::vector<uint16_t> output;  // [batch][max_len][H][d]
  std::vector<float> lse;        // [batch][H][max_len]: dense only
  std::vector<int> indices;      // [batch][G][layout.per_head()]: anchors only
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs `pass` over the prompt as chunks starting at `starts` (ascending, the
// first 0; {0} is the one-pass call). The call of chunk [start, end) has
// query_start = start, seq_lens min(len, end), max_seq_len end, queries and
// output of its rows only, and (anchors) index sets in the chunk's layout.
// Reuse reads `anchor` (sets of any first tile) through head map `map`.
PrefillResult run_prefill(const PrefillCase& c, PrefillPass pass, const std::vector<int>& starts,
                          const kc::PrefillIndexSets* anchor, const int* map, kc::Workspace& workspace) {
  const Problem& p = c.p;
  const int B = p.batch(), H = p.n_heads, G = p.n_kv_heads, d = p.head_dim, max_len = p.max_len();
  const int64_t per_head = c.layout.per_head();
  PrefillResult result;
  result.output.assign(size_t(B) * max_len * H * d, 0xffff);
  const float poison = std::bit_cast<float>(0xffffffffu);
  result.lse.assign(size_t(B) * H * max_len, poison);
  result.indices.assign(size_t(B) * G * per_head, -1);
  for (size_t k = 0; k < starts.size(); ++k) {
    const int start = starts[k], end = k + 1 < starts.size() ? starts[k + 1] : max_len;
    const int64_t rows = end - start, row_elements = int64_t(H) * d;
    std::vector<int> lens(B);
    for (int b = 0; b < B; ++b) lens[b] = std::min(p.lens[b], end);
    DeviceBuffer<int> seq_lens(B);
    seq_lens.upload(lens);
    std::vector<uint16_t> chunk_queries(size_t(B * rows * row_elements));
    for (int b = 0; b < B; ++b)
      std::copy_n(c.queries.bits.begin() + (int64_t(b) * max_len + start) * row_elements, rows * row_elements,
                  chunk_queries.begin() + b * rows * row_elements);
    DeviceBuffer<uint16_t> queries(chunk_queries.size()), output(chunk_queries.size());
    queries.upload(chunk_queries);
    output.poison();
    DeviceBuffer<float> lse(size_t(B) * H * rows);
    lse.poison();
    // An anchor's sets in the chunk's layout (other passes: none; a dense
    // chunk may start off the tile grid).
    const bool selects = pass == PrefillPass::Anchor || pass == PrefillPass::AnchorDenseOutput;
    const kc::PrefillIndexLayout layout =
        selects ? kc::prefill_index_layout(end, c.tile, c.budget, start) : kc::PrefillIndexLayout{0, {0}};
    DeviceBuffer<int> indices(size_t(B) * G * layout.per_head());
    DeviceBuffer<int64_t> offsets(layout.offsets.size());
    offsets.upload(layout.offsets);
    indices.poison();
    const kc::PrefillIndexSets sets = kc::fixtures::prefill_index_sets(indices.data, offsets.data, layout, c.tile);

    kc::AttentionArgs args = make_args(p, c.cache, queries.data, output.data);
    args.seq_lens = seq_lens.data;
    args.max_seq_len = end;
    args.query_start = start;
    switch (pass) {
      case PrefillPass::Dense: kc::dense_prefill(args, lse.data, workspace, nullptr); break;
      case PrefillPass::Anchor:
      case PrefillPass::AnchorDenseOutput:
        kc::anchor_prefill(args, c.budget, pass == PrefillPass::AnchorDenseOutput, sets, workspace, nullptr);
        break;
      case PrefillPass::Reuse: kc::reuse_prefill(args, *anchor, map, workspace, nullptr); break;
    }
    check_cuda(cudaDeviceSynchronize(), pass_name(pass));

    const std::vector<uint16_t> chunk_output = output.download();
    for (int b = 0; b < B; ++b)
      std::copy_n(chunk_output.begin() + b * rows * row_elements, rows * row_elements,
                  result.output.begin() + (int64_t(b) * max_len + start) * row_elements);
    const std::vector<float> chunk_lse = lse.download();
    for (int64_t row = 0; row < int64_t(B) * H; ++row)
      std::copy_n(chunk_lse.begin() + row * rows, rows, result.lse.begin() + row * max_len + start);
    const std::vector<int> chunk_indices = indices.download();
    for (int64_t set = 0; set < int64_t(B) * G; ++set)
      for (size_t i = 0; i + 1 < layout.offsets.size(); ++i)
        std::copy_n(chunk_indices.begin() + set * layout.per_head() + layout.offsets[i],
                    layout.offsets[i + 1] - layout.offsets[i],
                    result.indices.begin() + set * per_head + c.layout.offsets[layout.first_tile + i]);
  }
  return result;
}

// Dense output and LSE against the CPU.
void check_dense(const PrefillCase& c, const PrefillResult& r, const std::string& name) {
  const Problem& p = c.p;
  const int d = p.head_dim, g = p.group();
  ErrorMeter meter;
  double worst_lse = 0;
  for (int b = 0; b < p.batch(); ++b)
    for (int h = 0; h < p.n_kv_heads; ++h) {
      c.compare_rows(r.output, b, h, 0, p.lens[b], c.dense_reference(b, h), meter);
      std::vector<float> cpu_lse(size_t(p.lens[b]) * g);
      ka::row_lse(c.group_queries(b, h, 0, p.lens[b]), c.cache.rows(p, b, h).keys, d, d, cpu_lse.data());
      for (int64_t t = 0; t < p.lens[b]; ++t)
        for (int i = 0; i < g; ++i) {
          const float value = r.lse[(int64_t(b) * p.n_heads + h * g + i) * p.max_len() + t];
          const double diff = std::fabs(value - cpu_lse[t * g + i]);
          worst_lse = std::isfinite(value) ? std::max(worst_lse, diff) : INFINITY;
        }
    }
  expect_output(meter, name + " dense output");
  expect_lse(worst_lse, name + " dense LSE");
}

// An anchor's sets and output against the CPU (sparse output: over the GPU's sets).
void check_anchor(const PrefillCase& c, const PrefillResult& r, bool dense_output, const std::string& label) {
  const Problem& p = c.p;
  const int d = p.head_dim, g = p.group();
  ka::SelectionRule rule;
  rule.percent = c.budget.percent;
  rule.min_k = c.budget.min_keys;
  SelectionMeter selection;
  ErrorMeter meter;
  for (int b = 0; b < p.batch(); ++b)
    for (int h = 0; h < p.n_kv_heads; ++h) {
      const ka::TileIndexSets cpu = ka::anchor_prefill(c.group_queries(b, h, 0, p.lens[b]), c.cache.rows(p, b, h).keys,
                                                       d, d, c.tile, rule);
      for (int64_t t = 0; t < cpu.n_sets(); ++t) {
        const int64_t s = t * c.tile, count = std::min<int64_t>(c.tile, p.lens[b] - s);
        const std::span<const int32_t> gpu_set = c.set(r.indices, b, h, t);
        if (s > 0) selection.add(gpu_set, cpu.set(t), c.tile_pooled(b, h, t), double(count * g));
        if (!dense_output) {
          std::vector<float> ref(size_t(count) * g * d);
          ka::sparse_attention(c.group_queries(b, h, s, count), c.cache.rows(p, b, h), d, gpu_set, true,
                               {ref.data(), int64_t(g) * d, d});
          c.compare_rows(r.output, b, h, s, count, ref, meter);
        }
      }
      if (dense_output) c.compare_rows(r.output, b, h, 0, p.lens[b], c.dense_reference(b, h), meter);
    }
  expect_selection(selection, label + " selection");
  expect_output(meter, label + " output");
}

// Reuse output against the CPU over the anchor's sets (`anchor`, whole-prompt layout) through `map`.
void check_reuse(const PrefillCase& c, const PrefillResult& r, const std::vector<int>& anchor,
                 const std::vector<int>& map, const std::string& label) {
  const Problem& p = c.p;
  const int d = p.head_dim, g = p.group();
  ErrorMeter meter;
  for (int b = 0; b < p.batch(); ++b)
    for (int h = 0; h < p.n_kv_heads; ++h)
      for (int64_t s = 0, t = 0; s < p.lens[b]; s += c.tile, ++t) {
        const int64_t count = std::min<int64_t>(c.tile, p.lens[b] - s);
        std::vector<float> ref(size_t(count) * g * d);
        ka::sparse_attention(c.group_queries(b, h, s, count), c.cache.rows(p, b, h), d, c.set(anchor, b, map[h], t),
                             true, {ref.data(), int64_t(g) * d, d});
        c.compare_rows(r.output, b, h, s, count, ref, meter);
      }
  expect_output(meter, label + " output");
}

// Device copies of whole-prompt index sets (for a reuse pass).
struct DeviceSets {
  DeviceBuffer<int> indices;
  DeviceBuffer<int64_t> offsets;
  kc::PrefillIndexSets sets;
  DeviceSets(const PrefillCase& c, const std::vector<int>& host)
      : indices(host.size()), offsets(c.layout.offsets.size()) {
    indices.upload(host);
    offsets.upload(c.layout.offsets);
    sets = kc::fixtures::prefill_index_sets(indices.data, offsets.data, c.layout, c.tile);
  }
};

void test_prefill(const Problem& p, const kc::Budget& budget, int tile) {
  const std::string name = "prefill T=" + std::to_string(tile) + " " + p.name();
  const PrefillCase c(p, budget, tile);
  kc::Workspace workspace;
  check_dense(c, run_prefill(c, PrefillPass::Dense, {0}, nullptr, nullptr, workspace), name);
  std::vector<int> anchor_indices;
  for (PrefillPass pass : {PrefillPass::Anchor, PrefillPass::AnchorDenseOutput}) {
    const PrefillResult result = run_prefill(c, pass, {0}, nullptr, nullptr, workspace);
    check_anchor(c, result, pass == PrefillPass::AnchorDenseOutput, name + " " + pass_name(pass));
    anchor_indices = result.indices;
  }
  const std::vector<int> map = random_head_map(p.n_kv_heads);
  DeviceBuffer<int> device_map(map.size());
  device_map.upload(map);
  const DeviceSets anchor(c, anchor_indices);
  const PrefillResult reuse = run_prefill(c, PrefillPass::Reuse, {0}, &anchor.sets, device_map.data, workspace);
  check_reuse(c, reuse, anchor_indices, map, name + " reuse (head map)");
}

// A chunked run against the one-pass run of the same pass. `exact` (every
// chunk start a multiple of prefill_exact_multiple): bit-equal outputs, LSE
// and index sets. Otherwise the causal passes block the chunk's rows
// differently: dense outputs and LSE within a tight tolerance, sets equal up
// to near-ties of the k-th pooled score, and sparse anchor outputs bit-equal
// on every tile whose set is equal. Reuse (tile blocks, the same sets) is
// bit-equal either way.
void compare_chunked(const PrefillCase& c, PrefillPass pass, const PrefillResult& chunked, const PrefillResult& whole,
                     bool exact, const std::string& label) {
  const Problem& p = c.p;
  const int g = p.group(), d = p.head_dim;
  const bool anchor = pass == PrefillPass::Anchor || pass == PrefillPass::AnchorDenseOutput;
  if (exact || pass == PrefillPass::Reuse) {
    const bool same_output = chunked.output == whole.output;
    print_check(same_output, label + " output bit-equal to the one-pass call's");
    EXPECT_TRUE(same_output) << label << ": output differs from the one-pass call's";
    if (pass == PrefillPass::Dense) {
      const bool same_lse = same_bits(chunked.lse, whole.lse);
      print_check(same_lse, label + " LSE bit-equal to the one-pass call's");
      EXPECT_TRUE(same_lse) << label << ": LSE differs from the one-pass call's";
    }
    if (anchor) {
      const bool same_sets = chunked.indices == whole.indices;
      print_check(same_sets, label + " index sets equal to the one-pass call's");
      EXPECT_TRUE(same_sets) << label << ": index sets differ from the one-pass call's";
    }
    return;
  }
  const double tolerance = p.bf16 ? 4e-3 : 1e-3;
  if (anchor) {
    SelectionMeter selection;
    int64_t tiles = 0, equal_tiles = 0, differing_tiles = 0;
    for (int b = 0; b < p.batch(); ++b)
      for (int h = 0; h < p.n_kv_heads; ++h)
        for (int64_t s = 0, t = 0; s < p.lens[b]; s += c.tile, ++t) {
          const std::span<const int32_t> mine = c.set(chunked.indices, b, h, t), theirs = c.set(whole.indices, b, h, t);
          const int64_t count = std::min<int64_t>(c.tile, p.lens[b] - s);
          if (t > 0) selection.add(mine, theirs, c.tile_pooled(b, h, t), double(count * g));
          if (pass != PrefillPass::Anchor) continue;
          ++tiles;
          if (!std::equal(mine.begin(), mine.end(), theirs.begin(), theirs.end())) continue;
          ++equal_tiles;
          bool same = true;
          for (int64_t q = s; q < s + count; ++q)
            for (int r = 0; r < g; ++r)
              for (int i = 0; i < d; ++i) {
                const size_t at = size_t(c.output_index(b, h, q, r, i));
                same = same && chunked.output[at] == whole.output[at];
              }
          if (!same) ++differing_tiles;
        }
    expect_selection(selection, label + " selection against the one-pass call's");
    if (pass == PrefillPass::Anchor) {
      print_check(differing_tiles == 0, label + " output bit-equal to the one-pass call's on the " +
                                            std::to_string(equal_tiles) + "/" + std::to_string(tiles) +
                                            " tiles of equal sets");
      EXPECT_EQ(differing_tiles, 0) << label << ": tiles of equal sets whose output differs from the one-pass call's";
      return;
    }
  }
  ErrorMeter meter;
  double worst_lse = 0;
  for (int b = 0; b < p.batch(); ++b)
    for (int64_t q = 0; q < p.lens[b]; ++q)
      for (int head = 0; head < p.n_heads; ++head) {
        for (int i = 0; i < d; ++i) {
          const size_t at = size_t(((int64_t(b) * p.max_len() + q) * p.n_heads + head) * d + i);
          meter.add(from_bits(chunked.output[at], p.bf16), from_bits(whole.output[at], p.bf16));
        }
        if (pass == PrefillPass::Dense) {
          const size_t at = size_t((int64_t(b) * p.n_heads + head) * p.max_len() + q);
          const double diff = std::fabs(chunked.lse[at] - whole.lse[at]);
          worst_lse = std::isfinite(chunked.lse[at]) ? std::max(worst_lse, diff) : INFINITY;
        }
      }
  expect_output(meter, label + " output against the one-pass call's", tolerance);
  if (pass == PrefillPass::Dense) {
    print_check(worst_lse <= 1e-4,
                label + " LSE against the one-pass call's: worst abs diff " + std::to_string(worst_lse));
    EXPECT_LE(worst_lse, 1e-4) << label << ": LSE against the one-pass call's";
  }
}

// Chunked prefill: the prompt as the chunks starting at `starts`, every
// pass checked against the CPU as test_prefill does and against the
// one-pass call's rows (compare_chunked). Reuse reads the one-pass anchor's
// sets in the whole-prompt layout (first tile 0); the anchors write and read
// chunk layouts. Starts off the tile grid run the dense pass only.
void test_chunked_prefill(const Problem& p, const kc::Budget& budget, int tile, const std::vector<int>& starts) {
  std::string chunks;
  for (int start : starts) {
    if (!chunks.empty()) chunks += ',';
    chunks += std::to_string(start);
  }
  const std::string name = "chunked prefill (starts " + chunks + ") T=" + std::to_string(tile) + " " + p.name();
  const PrefillCase c(p, budget, tile);
  const int multiple = kc::prefill_exact_multiple(p.n_heads, p.n_kv_heads, p.head_dim);
  const bool exact = std::all_of(starts.begin(), starts.end(), [&](int start) { return start % multiple == 0; });
  std::printf("%s: exact multiple %d, %s\n", name.c_str(), multiple,
              exact ? "bit-exact chunks" : "chunks off the causal blocks");
  const bool on_tiles = std::all_of(starts.begin(), starts.end(), [&](int start) { return start % tile == 0; });
  kc::Workspace workspace;
  std::vector<int> anchor_indices;
  for (PrefillPass pass : {PrefillPass::Dense, PrefillPass::Anchor, PrefillPass::AnchorDenseOutput}) {
    if (pass != PrefillPass::Dense && !on_tiles) return;
    const std::string label = name + " " + pass_name(pass);
    const PrefillResult whole = run_prefill(c, pass, {0}, nullptr, nullptr, workspace);
    const PrefillResult chunked = run_prefill(c, pass, starts, nullptr, nullptr, workspace);
    if (pass == PrefillPass::Dense) check_dense(c, chunked, name);
    else check_anchor(c, chunked, pass == PrefillPass::AnchorDenseOutput, label);
    compare_chunked(c, pass, chunked, whole, exact, label);
    if (pass == PrefillPass::Anchor) anchor_indices = whole.indices;
  }
  const std::vector<int> map = random_head_map(p.n_kv_heads);
  DeviceBuffer<int> device_map(map.size());
  device_map.upload(map);
  const DeviceSets anchor(c, anchor_indices);
  const std::string label = name + " " + pass_name(PrefillPass::Reuse);
  const PrefillResult whole = run_prefill(c, PrefillPass::Reuse, {0}, &anchor.sets, device_map.data, workspace);
  const PrefillResult chunked = run_prefill(c, PrefillPass::Reuse, starts, &anchor.sets, device_map.data, workspace);
  check_reuse(c, chunked, anchor_indices, map, label);
  compare_chunked(c, PrefillPass::Reuse, chunked, whole, exact, label);
}

// Standalone top-k on values with many ties (few distinct levels), negative
// values and signed zeros, one constant row and one row in a narrow range
// (all in one first-digit bin), rows at every 4-byte alignment; must equal
// select_top_k exactly.
void test_top_k() {
  const std::vector<int> lengths = {1, 2, 100, 1000, 4097, 30000, 65536, 50000, 70000, 3000};
  const int rows = int(lengths.size());
  std::vector<int> ks;
  int64_t stride = 0;
  for (int n : lengths) stride = std::max<int64_t>(stride, n);
  ++stride;  // odd: the rows start at every alignment, for the radix select's vector loads
  std::vector<float> values(size_t(rows) * stride, 0.f);
  std::uniform_real_distribution<float> narrow(1.f, 1.001f);
  for (int r = 0; r < rows; ++r) {
    const int levels = r % 2 ? 7 : 100000;
    for (int i = 0; i < lengths[r]; ++i) {
      float value;
      if (r == 7) {
        value = 0.25f;  // constant row
      } else if (r >= 8) {
        value = narrow(rng);
      } else {
        const int level = int(rng() % levels) - levels / 2;
        value = level == 0 ? ((rng() & 1) ? 0.f : -0.f) : float(level) * 0.37f;
      }
      values[size_t(r) * stride + i] = value;
    }
    ks.push_back(int(rng() % (lengths[r] + 1)));
  }
  DeviceBuffer<float> device_values(values.size());
  device_values.upload(values);
  DeviceBuffer<int> device_lengths(rows), device_k(rows), out(size_t(rows) * stride);
  device_lengths.upload(lengths);
  device_k.upload(ks);
  out.poison();
  kc::top_k(device_values.data, stride, device_lengths.data, device_k.data, rows, out.data, stride, nullptr);
  check_cuda(cudaDeviceSynchronize(), "top_k");
  const std::vector<int> gpu = out.download();
  int mismatched = 0;
  for (int r = 0; r < rows; ++r) {
    std::vector<int32_t> cpu(ks[r]);
    ka::select_top_k(values.data() + size_t(r) * stride, lengths[r], ks[r], cpu.data());
    if (!std::equal(cpu.begin(), cpu.end(), gpu.begin() + size_t(r) * stride)) ++mismatched;
  }
  print_check(mismatched == 0, "top_k with ties equals select_top_k exactly (" + std::to_string(rows - mismatched) +
                                   "/" + std::to_string(rows) + " rows)");
  EXPECT_EQ(mismatched, 0) << "rows where top_k differs from select_top_k";
}

void test_budget() {
  int mismatched = 0;
  for (double percent : {10.0, 3.0, 12.5, 100.0})
    for (int64_t min_keys : {0, 16, 128})
      for (int64_t n = 0; n < 300000; n += 1 + n / 97) {
        const kc::Budget budget{percent, min_keys};
        const int64_t gpu = kc::budget_keys(budget, n), cpu = kascade::budget(n, percent, min_keys);
        if (gpu != cpu && mismatched++ == 0)
          ADD_FAILURE() << "budget_keys(" << percent << "%, min " << min_keys << ", N=" << n << ") = " << gpu
                        << ", kascade::budget = " << cpu;
      }
  print_check(mismatched == 0, "budget_keys equals kascade::budget");
  EXPECT_EQ(mismatched, 0) << "(percent, min_keys, N) where budget_keys differs from kascade::budget";
}

// Chunk layouts: the whole prompt's layout (first tile 0) is the per-tile
// budgets; a chunk's offsets are the differences of the whole layout's from
// the chunk's first tile on.
void test_chunk_layouts() {
  int mismatched = 0;
  auto expect = [&](bool ok, const std::string& what) {
    if (!ok && mismatched++ == 0) ADD_FAILURE() << what;
  };
  for (const kc::Budget& budget : {kc::Budget{10.0, 128}, kc::Budget{10.0, 16}, kc::Budget{3.0, 0}})
    for (int tile : {3, 16, 32, 64})
      for (int max_len : {1, 5, 100, 1333, 4097}) {
        const std::string where = "tile " + std::to_string(tile) + ", max_seq_len " + std::to_string(max_len) +
                                  ", min_keys " + std::to_string(budget.min_keys);
        const kc::PrefillIndexLayout whole = kc::prefill_index_layout(max_len, tile, budget);
        const int n_tiles = (max_len + tile - 1) / tile;
        expect(whole.first_tile == 0 && int(whole.offsets.size()) == n_tiles + 1 && whole.offsets[0] == 0,
               "whole layout's shape, " + where);
        for (int t = 0; t < n_tiles && size_t(t + 1) < whole.offsets.size(); ++t)
          expect(whole.offsets[t + 1] - whole.offsets[t] == kc::budget_keys(budget, int64_t(t) * tile),
                 "whole layout's tile " + std::to_string(t) + " is not budget(t*tile), " + where);
        for (int start = 0; start < max_len; start += tile) {
          const kc::PrefillIndexLayout chunk = kc::prefill_index_layout(max_len, tile, budget, start);
          const int first = start / tile;
          const bool shape = chunk.first_tile == first && int(chunk.offsets.size()) == n_tiles - first + 1;
          expect(shape, "chunk layout's shape, query_start " + std::to_string(start) + ", " + where);
          if (!shape) continue;
          for (size_t i = 0; i < chunk.offsets.size(); ++i)
            expect(chunk.offsets[i] == whole.offsets[first + i] - whole.offsets[first],
                   "chunk offset " + std::to_string(i) + ", query_start " + std::to_string(start) + ", " + where);
        }
      }
  print_check(mismatched == 0, "prefill_index_layout: chunk offsets are the whole layout's differences");
  EXPECT_EQ(mismatched, 0);

  struct Geometry {
    int n_heads, n_kv_heads, head_dim, multiple;
  };
  // floor(128 / g) and (head_dim <= 128) floor(256 / g) queries per causal block.
  for (const Geometry& geometry : {Geometry{32, 8, 128, 64}, Geometry{16, 2, 64, 32}, Geometry{9, 3, 64, 3570},
                                   Geometry{8, 4, 256, 64}, Geometry{8, 2, 256, 32}, Geometry{24, 1, 64, 10},
                                   Geometry{16, 16, 128, 256}}) {
    const int multiple = kc::prefill_exact_multiple(geometry.n_heads, geometry.n_kv_heads, geometry.head_dim);
    const std::string what = "prefill_exact_multiple(" + std::to_string(geometry.n_heads) + ", " +
                             std::to_string(geometry.n_kv_heads) + ", " + std::to_string(geometry.head_dim) + ") = " +
                             std::to_string(multiple);
    print_check(multiple == geometry.multiple, what + ", expected " + std::to_string(geometry.multiple));
    EXPECT_EQ(multiple, geometry.multiple) << what;
  }
}

// A call that must fail validation with a kascade::Error naming `field`.
void expect_refused(const std::function<void()>& call, const std::string& field, const std::string& what) {
  std::string message;
  try {
    call();
  } catch (const kascade::Error& error) {
    message = error.what();
  }
  const bool ok = message.find(field) != std::string::npos;
  print_check(ok, what + " is refused naming " + field + ": " + (message.empty() ? "(no error)" : message));
  EXPECT_TRUE(ok) << what << ": expected an error naming " << field
                  << ", got: " << (message.empty() ? "(no error)" : message);
}

// The query_start checks. Every call here fails on the host before touching
// the device (its pointers are host memory, aligned and never read).
void test_query_start_validation() {
  alignas(256) static unsigned char memory[1024];
  kc::AttentionArgs args;
  args.batch = 2;
  args.n_heads = 8;
  args.n_kv_heads = 2;
  args.head_dim = 128;
  args.queries = args.keys = args.values = memory;
  args.output = memory;
  args.seq_lens = reinterpret_cast<const int*>(memory);
  args.capacity = 1000;
  args.max_seq_len = 1000;
  const kc::Budget budget;
  kc::Workspace workspace;
  const kc::PrefillIndexLayout chunk_layout = kc::prefill_index_layout(1000, 32, budget, 64);
  kc::PrefillIndexSets sets;
  sets.indices = reinterpret_cast<int*>(memory);
  sets.tile_offsets = reinterpret_cast<const int64_t*>(memory);
  sets.per_head = chunk_layout.per_head();
  sets.tile = 32;
  sets.first_tile = chunk_layout.first_tile;
  const kc::DecodeIndexSets decode_sets{reinterpret_cast<int*>(memory), reinterpret_cast<int*>(memory), 1000};

  auto with_start = [&](int start) {
    kc::AttentionArgs changed = args;
    changed.query_start = start;
    return changed;
  };
  auto with_sets = [&](int first_tile, int64_t per_head) {
    kc::PrefillIndexSets changed = sets;
    changed.first_tile = first_tile;
    changed.per_head = per_head;
    return changed;
  };
  expect_refused([&] { kc::dense_prefill(with_start(1000), nullptr, workspace, nullptr); }, "query_start",
                 "dense_prefill with query_start = max_seq_len");
  expect_refused([&] { kc::dense_prefill(with_start(-32), nullptr, workspace, nullptr); }, "query_start",
                 "dense_prefill with a negative query_start");
  expect_refused([&] { kc::anchor_prefill(with_start(48), budget, false, sets, workspace, nullptr); }, "query_start",
                 "anchor_prefill with query_start off the tile grid");
  expect_refused([&] { kc::reuse_prefill(with_start(48), sets, nullptr, workspace, nullptr); }, "query_start",
                 "reuse_prefill with query_start off the tile grid");
  expect_refused([&] { kc::anchor_prefill(with_start(32), budget, true, sets, workspace, nullptr); }, "first_tile",
                 "anchor_prefill with sets starting after the call's first tile");
  expect_refused([&] { kc::reuse_prefill(with_start(64), with_sets(-1, sets.per_head), nullptr, workspace, nullptr); },
                 "first_tile", "reuse_prefill with a negative first_tile");
  // A chunk's sets are too small for the whole prompt's tiles (first tile 0).
  expect_refused(
      [&] { kc::anchor_prefill(with_start(64), budget, false, with_sets(0, sets.per_head), workspace, nullptr); },
      "per_head", "anchor_prefill over a chunk-sized buffer laid out from tile 0");
  expect_refused([&] { kc::dense_decode(with_start(32), nullptr, workspace, nullptr); }, "query_start",
                 "dense_decode with a query_start");
  expect_refused([&] { kc::anchor_decode(with_start(32), budget, false, decode_sets, workspace, nullptr); },
                 "query_start", "anchor_decode with a query_start");
  expect_refused([&] { kc::reuse_decode(with_start(32), decode_sets, nullptr, workspace, nullptr); }, "query_start",
                 "reuse_decode with a query_start");
  expect_refused([&] { kc::prefill_index_layout(1000, 32, budget, 48); }, "query_start",
                 "prefill_index_layout with query_start off the tile grid");
  expect_refused([&] { kc::prefill_index_layout(1000, 32, budget, 1024); }, "query_start",
                 "prefill_index_layout with query_start past max_seq_len");
  expect_refused([&] { kc::prefill_index_layout(1000, 32, budget, -32); }, "query_start",
                 "prefill_index_layout with a negative query_start");
  expect_refused([&] { kc::prefill_exact_multiple(9, 2, 64); }, "n_kv_heads",
                 "prefill_exact_multiple with n_heads not a multiple of n_kv_heads");
}

// Cases that run kernels skip without a CUDA device (the build machines).
class KascadeCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    static const std::string missing = [] {
      int count = 0;
      const cudaError_t status = cudaGetDeviceCount(&count);
      if (status != cudaSuccess) {
        cudaGetLastError();  // clear it
        return std::string("cudaGetDeviceCount: ") + cudaGetErrorString(status);
      }
      if (count == 0) return std::string("cudaGetDeviceCount found 0 devices");
      cudaDeviceProp properties{};
      if (cudaGetDeviceProperties(&properties, 0) == cudaSuccess)
        std::printf("device 0: %s, sm_%d%d\n", properties.name, properties.major, properties.minor);
      return std::string();
    }();
    if (!missing.empty()) GTEST_SKIP() << "no CUDA device (" << missing << "); these cases need a Hopper GPU";
  }
};

const kc::Budget kStandard;  // 10%, min 128
const kc::Budget kSmall{10.0, 16};

// Host side only: runs without a GPU too.
TEST(KascadeCudaHost, BudgetKeysEqualsKascadeBudget) { test_budget(); }
TEST(KascadeCudaHost, ChunkedPrefillLayouts) { test_chunk_layouts(); }
TEST(KascadeCudaHost, ChunkedPrefillValidation) { test_query_start_validation(); }

TEST_F(KascadeCuda, TopKWithTiesEqualsSelectTopK) { test_top_k(); }

TEST_F(KascadeCuda, DecodeF16) { test_decode({false, 32, 8, 128, {1000, 4097, 130, 77, 20000}}, kStandard); }
TEST_F(KascadeCuda, PrefillF16) { test_prefill({false, 32, 8, 128, {1500, 777}}, kStandard, 32); }
TEST_F(KascadeCuda, DecodeBf16) { test_decode({true, 32, 8, 128, {1000, 4097, 130, 77, 20000}}, kStandard); }
TEST_F(KascadeCuda, PrefillBf16) { test_prefill({true, 32, 8, 128, {1500, 777}}, kStandard, 32); }

TEST_F(KascadeCuda, DecodeHeadDim64Group3) { test_decode({false, 9, 3, 64, {3001, 129, 5}}, kSmall); }
TEST_F(KascadeCuda, DecodeHeadDim256) { test_decode({true, 8, 4, 256, {2500, 700}}, kStandard); }
// g = 24: two head blocks.
TEST_F(KascadeCuda, DecodeGroup24) { test_decode({false, 24, 1, 64, {1900, 333}}, kSmall); }
// Few rows, long ones: the pooled selection splits each row over a cluster
// of 8 blocks; 77 keys leave three of them empty segments.
TEST_F(KascadeCuda, DecodeFewLongRows) { test_decode({false, 16, 2, 128, {70001, 77, 16385}}, kStandard); }
// 256 (sequence, KV head) rows with g = 4: scores key-major, as at batch 64.
TEST_F(KascadeCuda, DecodeManyRows) {
  std::vector<int> many(32);
  for (int b = 0; b < 32; ++b) many[b] = 200 + int(rng() % 1800);
  test_decode({false, 32, 8, 64, many}, kStandard);
}
// Constant score rows: the threshold bin holds every key (general radix
// select over the recomputed pooled row; ties to the lower index), in a
// cluster of 2 blocks (20000 keys) and in one block.
TEST_F(KascadeCuda, DecodeConstantScores) { test_decode({false, 8, 2, 128, {20000, 1500}, 0.f}, kStandard); }
// Segments too long for their bins to stay in shared memory: a row cut
// among 8 blocks of 37504 keys, and 67 rows of one block each.
TEST_F(KascadeCuda, DecodeLongSegments) {
  test_decode({true, 2, 1, 64, {300001}}, kStandard);
  test_decode({false, 67, 67, 64, {33000}}, kStandard);
}

TEST_F(KascadeCuda, DecodeSketchF16) { test_decode_sketch({false, 32, 8, 128, {1000, 4097, 130, 77, 20000}}, kStandard); }
TEST_F(KascadeCuda, DecodeSketchBf16Group6) { test_decode_sketch({true, 12, 2, 128, {30001, 640, 65}}, kStandard); }
TEST_F(KascadeCuda, DecodeSketchHeadDim64Group3) { test_decode_sketch({false, 9, 3, 64, {3001, 129, 5}}, kSmall); }
TEST_F(KascadeCuda, DecodeSketchHeadDim256) { test_decode_sketch({true, 8, 4, 256, {2500, 700}}, kStandard); }
// g = 12: above a sketch block's eight heads, so the sketch pass runs two blocks of six.
TEST_F(KascadeCuda, DecodeSketchGroup12) { test_decode_sketch({false, 24, 2, 128, {5001, 300}}, kStandard); }
TEST_F(KascadeCuda, DecodePagedF16) { test_decode_paged({false, 32, 8, 128, {1000, 4097, 130, 20000}}, kStandard, 64); }
TEST_F(KascadeCuda, DecodePagedBf16Group3) { test_decode_paged({true, 9, 3, 64, {3001, 129, 5}}, kSmall, 16); }
TEST_F(KascadeCuda, DecodePagedBigPages) { test_decode_paged({false, 16, 2, 128, {7001, 77}}, kStandard, 1024); }
TEST_F(KascadeCuda, PrefillHeadDim64Tile16) { test_prefill({false, 9, 3, 64, {1333, 500}}, kSmall, 16); }
TEST_F(KascadeCuda, PrefillHeadDim64Tile64) { test_prefill({true, 9, 3, 64, {1100}}, kSmall, 64); }
// head_dim 64, g = 8, two sequences.
TEST_F(KascadeCuda, PrefillHeadDim64Group8) { test_prefill({false, 16, 2, 64, {2100, 333}}, kStandard, 32); }
TEST_F(KascadeCuda, PrefillHeadDim256) { test_prefill({false, 8, 4, 256, {900, 450}}, kStandard, 64); }
// 512-row tiles: four row blocks.
TEST_F(KascadeCuda, PrefillFourRowBlocks) { test_prefill({true, 16, 1, 128, {1000}}, kSmall, 32); }
// g = 3: 192-row tiles, half a row block padding.
TEST_F(KascadeCuda, PrefillGroup3Tile64) { test_prefill({false, 12, 4, 128, {700, 333}}, kSmall, 64); }
// g = 3, 48-row tiles: mostly padding rows.
TEST_F(KascadeCuda, PrefillGroup3Tile16) { test_prefill({true, 6, 2, 128, {517}}, kSmall, 16); }
// Peaked: references move mid-row.
TEST_F(KascadeCuda, PrefillPeaked) { test_prefill({false, 8, 2, 128, {2600, 900}, 48.f}, kStandard, 32); }

// Chunked prefill (AttentionArgs::query_start): each prompt as 2-3 chunks,
// batches whose shorter sequences end before the last chunk starts. Chunk
// starts on the causal passes' blocks (prefill_exact_multiple: 64 at g = 4,
// 32 at g = 8, 64 at g = 2 and head_dim 256) must give bit-equal results; at
// g = 3 (3570) and at starts off the blocks, within rounding.
TEST_F(KascadeCuda, ChunkedPrefillF16) {
  test_chunked_prefill({false, 32, 8, 128, {1500, 777, 1210}}, kStandard, 32, {0, 640, 1152});
}
TEST_F(KascadeCuda, ChunkedPrefillBf16Tile64) {
  test_chunked_prefill({true, 32, 8, 128, {1500, 1025}}, kStandard, 64, {0, 704});
}
TEST_F(KascadeCuda, ChunkedPrefillF16Tile16) {
  test_chunked_prefill({false, 32, 8, 128, {900, 1300}}, kSmall, 16, {0, 256, 1024});
}
TEST_F(KascadeCuda, ChunkedPrefillBf16Group8) {
  test_chunked_prefill({true, 16, 2, 64, {1400, 600}}, kSmall, 32, {0, 416, 960});
}
TEST_F(KascadeCuda, ChunkedPrefillHeadDim256) {
  test_chunked_prefill({true, 8, 4, 256, {900, 450}}, kStandard, 64, {0, 384});
}
TEST_F(KascadeCuda, ChunkedPrefillPeaked) {
  test_chunked_prefill({false, 8, 2, 128, {2600, 900}, 48.f}, kStandard, 32, {0, 1024, 1920});
}
TEST_F(KascadeCuda, ChunkedPrefillGroup3Tile16) {
  test_chunked_prefill({false, 9, 3, 64, {1333, 500}}, kSmall, 16, {0, 400, 912});
}
TEST_F(KascadeCuda, ChunkedPrefillGroup3Bf16Tile64) {
  test_chunked_prefill({true, 9, 3, 64, {1100, 333}}, kSmall, 64, {0, 320, 768});
}
TEST_F(KascadeCuda, ChunkedPrefillGroup3Bf16Tile32) {
  test_chunked_prefill({true, 9, 3, 64, {1250, 900}}, kStandard, 32, {0, 544});
}
// Dense prefill at starts on no grid (37: off the 42-query blocks too).
TEST_F(KascadeCuda, ChunkedPrefillDenseAnyStart) {
  test_chunked_prefill({false, 9, 3, 64, {700, 1000}}, kSmall, 32, {0, 37, 501});
}
// g = 4 with a start (288) on the tile grid but off the LSE pass's 64-query blocks.
TEST_F(KascadeCuda, ChunkedPrefillOffBlocks) {
  test_chunked_prefill({false, 16, 4, 128, {1000, 613}}, kSmall, 32, {0, 288, 672});
}

// Seeds the inputs once per run and prints the seed; prints the checks'
// verdict last. (Not on --gtest_list_tests, whose output ctest parses.)
class RunEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* fixed = std::getenv("KASCADE_TEST_SEED");
    const uint64_t seed = fixed ? std::strtoull(fixed, nullptr, 10)
                                : uint64_t(std::chrono::high_resolution_clock::now().time_since_epoch().count());
    rng.seed(seed);
    std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  }
  void TearDown() override {
    const ::testing::UnitTest& run = *::testing::UnitTest::GetInstance();
    const bool failed = failed_checks > 0 || run.failed_test_count() > 0;
    const int skipped = run.skipped_test_count();
    std::printf("%s: %d failure(s) in %d checks, %d case(s) skipped\n",
                failed ? "FAILED" : skipped ? "PASSED, NOT ALL RUN" : "ALL PASSED", failed_checks, checks, skipped);
  }
};

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a hung or killed run still shows how far it got
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new RunEnvironment);
  return RUN_ALL_TESTS();
}
