// What the memory system allows a reuse layer in decode, without attention
// arithmetic: reading a p % subset of a layer's cached key/value rows at
// random sorted positions, against streaming all of them. Rows are fp16,
// head_dim 64 (128 bytes of key, 128 of value per position), 3 KV heads, 30
// layers visited in turn (so nothing stays in the caches), split over the
// threads as the engine splits decode. Two layouts of a layer's cache:
// "separate" (the engine's: all keys of a head, then all values) and
// "interleaved" (a position's key and value side by side, 256 contiguous
// bytes), and for each, the key-only stream an anchor's scoring pass reads.
//
//   kv_gather_bench [--context 8192] [--percent 10] [--threads 2] [--repeats 15]
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/memory.h"
#include "core/timer.h"
#include "ops/threading.h"

namespace {

using kascade::Stopwatch;

constexpr int kLayers = 30, kHeads = 3;
constexpr size_t kRowBytes = 128;  // fp16 x 64

// Where position p of head h keeps its key and value within one layer.
struct Layout {
  bool interleaved = false;
  int64_t context = 0;
  size_t key(int h, int64_t p) const {
    return interleaved ? (size_t(h) * context + p) * 2 * kRowBytes : (size_t(h) * context + p) * kRowBytes;
  }
  size_t value(int h, int64_t p) const {
    return interleaved ? key(h, p) + kRowBytes : (size_t(kHeads + h) * context + p) * kRowBytes;
  }
};

// Sums the bytes of one 128-byte row into acc (the loads cannot be dropped).
inline __m256i read_row(const uint8_t* row, __m256i acc) {
  for (size_t c = 0; c < kRowBytes; c += 32)
    acc = _mm256_add_epi8(acc, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c)));
  return acc;
}

inline void prefetch_row(const uint8_t* row) {
  _mm_prefetch(reinterpret_cast<const char*>(row), _MM_HINT_T0);
  _mm_prefetch(reinterpret_cast<const char*>(row) + 64, _MM_HINT_T0);
}

// Seconds per layer to read, for every head, the rows at `positions[h]`
// (keys, and values unless keys_only), each head's list cut in two halves
// spread over the threads, prefetching 16 positions ahead as the kernels do.
double read_rows(const uint8_t* cache, size_t layer_bytes, const Layout& layout,
                 const std::vector<std::vector<int32_t>>& positions, bool keys_only, int threads) {
  constexpr int64_t kAhead = 16;
  int sink = 0;
  const Stopwatch stopwatch;
  for (int layer = 0; layer < kLayers; ++layer) {
    const uint8_t* base = cache + size_t(layer) * layer_bytes;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(+ : sink)
    for (int item = 0; item < 2 * kHeads; ++item) {
      const int h = item / 2;
      const std::vector<int32_t>& list = positions[size_t(h)];
      const int64_t half = int64_t(list.size()) / 2;
      const int64_t begin = item % 2 ? half : 0, end = item % 2 ? int64_t(list.size()) : half;
      __m256i acc = _mm256_setzero_si256();
      for (int64_t i = begin; i < end; ++i) {
        if (i + kAhead < end) {
          prefetch_row(base + layout.key(h, list[size_t(i + kAhead)]));
          if (!keys_only) prefetch_row(base + layout.value(h, list[size_t(i + kAhead)]));
        }
        acc = read_row(base + layout.key(h, list[size_t(i)]), acc);
        if (!keys_only) acc = read_row(base + layout.value(h, list[size_t(i)]), acc);
      }
      sink += _mm256_extract_epi32(acc, 0);
    }
  }
  const double seconds = stopwatch.seconds() / kLayers;
  if (sink == 42) std::printf(" ");  // keeps the reads
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  kascade::ops::prepare_environment(argv);
  CLI::App app{"Random-row gather vs streaming of a decode KV cache (memory only)"};
  int64_t context = 8192;
  double percent = 10;
  int threads = 2, repeats = 15;
  app.add_option("--context", context, "cached positions")->check(CLI::Range(int64_t(256), int64_t(1) << 20));
  app.add_option("--percent", percent, "share of positions gathered")->check(CLI::Range(0.1, 100.0));
  app.add_option("--threads", threads, "threads")->check(CLI::Range(1, 256));
  app.add_option("--repeats", repeats, "runs (median)")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  const size_t layer_bytes = size_t(2 * kHeads) * size_t(context) * kRowBytes;
  kascade::LargePageBuffer cache(size_t(kLayers) * layer_bytes);
  std::memset(cache.data(), 1, cache.size());

  std::mt19937 rng(5);
  std::vector<int32_t> all(static_cast<size_t>(context));
  std::iota(all.begin(), all.end(), 0);
  const size_t kept = std::max<size_t>(2, size_t(double(context) * percent / 100));
  std::vector<std::vector<int32_t>> sparse(kHeads), dense(kHeads, all);
  for (auto& list : sparse) {
    std::shuffle(all.begin(), all.end(), rng);
    list.assign(all.begin(), all.begin() + ptrdiff_t(kept));
    std::sort(list.begin(), list.end());
  }

  std::printf("context %lld, %zu of %lld positions gathered per head (%.3g %%), %d threads, "
              "fp16 rows of 128 bytes, %d layers x %d KV heads; us per layer, medians of %d\n\n",
              (long long)context, kept, (long long)context, percent, threads, kLayers, kHeads, repeats);
  std::printf("%-12s %14s %14s %14s %12s\n", "layout", "stream K+V", "gather K+V", "stream K only",
              "gather/stream");
  for (const bool interleaved : {false, true}) {
    const Layout layout{interleaved, context};
    std::vector<double> stream, gather, keys;
    for (int r = 0; r < repeats; ++r) {
      stream.push_back(read_rows(cache.data(), layer_bytes, layout, dense, false, threads));
      gather.push_back(read_rows(cache.data(), layer_bytes, layout, sparse, false, threads));
      keys.push_back(read_rows(cache.data(), layer_bytes, layout, dense, true, threads));
    }
    auto median = [](std::vector<double> v) {
      std::nth_element(v.begin(), v.begin() + ptrdiff_t(v.size() / 2), v.end());
      return v[v.size() / 2] * 1e6;
    };
    const double s = median(stream), g = median(gather), k = median(keys);
    std::printf("%-12s %14.1f %14.1f %14.1f %11.3fx\n", interleaved ? "interleaved" : "separate", s, g,
                k, g / s);
  }
  return 0;
}
