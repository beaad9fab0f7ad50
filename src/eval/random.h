// A small seeded random generator for the eval task generators. The standard
// distributions are implementation-defined, so the same seed would give other
// prompts with another standard library; this one is fully specified
// (SplitMix64 with rejection sampling), so samples are the same everywhere.
#pragma once

#include <cstdint>
#include <string_view>

namespace kascade::eval {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, n), n > 0, without modulo bias.
  uint64_t below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t value;
    do value = next();
    while (value >= limit);
    return value % n;
  }
  // Uniform in [lo, hi].
  int64_t between(int64_t lo, int64_t hi) { return lo + int64_t(below(uint64_t(hi - lo) + 1)); }
  // Uniform in [0, 1).
  double unit() { return double(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// One seed per (run seed, labels...): a sample's draws do not depend on which
// other tasks, lengths or samples the run includes.
inline uint64_t mix_seed(uint64_t seed, std::string_view label, uint64_t a = 0, uint64_t b = 0) {
  uint64_t h = 0xcbf29ce484222325ull ^ seed;  // FNV-1a over the label, then SplitMix rounds
  for (const char c : label) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
  Rng rng(h ^ (a * 0x9e3779b97f4a7c15ull) ^ (b + 0x632be59bd9b4e019ull));
  rng.next();
  return rng.next();
}

}  // namespace kascade::eval
