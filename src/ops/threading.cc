#include "ops/threading.h"

#include <omp.h>
#include <unistd.h>

#include <cblas.h>
#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <string_view>

namespace kascade::ops {

void configure_threads(int n_threads) {
  if (n_threads <= 0) n_threads = omp_get_num_procs();
  omp_set_num_threads(n_threads);
  openblas_set_num_threads(1);
}

int thread_count() { return omp_get_max_threads(); }

namespace {

// The OpenBLAS core this CPU can run best among those its generic fallback
// would miss, or null when OpenBLAS's own choice stands.
const char* better_openblas_core() {
  const std::string_view chosen = openblas_get_corename();
  constexpr std::string_view kGeneric[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom",
                                           "Sandybridge", "Katmai", "Coppermine", "Northwood", "Banias"};
  if (std::find(std::begin(kGeneric), std::end(kGeneric), chosen) == std::end(kGeneric)) return nullptr;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return nullptr;
}

}  // namespace

void prepare_environment(char** argv) {
  bool changed = false;
  if (!std::getenv("OMP_WAIT_POLICY") && !std::getenv("GOMP_SPINCOUNT"))
    changed |= setenv("GOMP_SPINCOUNT", "10000", 0) == 0;
  if (!std::getenv("OPENBLAS_CORETYPE"))
    if (const char* core = better_openblas_core()) changed |= setenv("OPENBLAS_CORETYPE", core, 0) == 0;
  if (changed) execv("/proc/self/exe", argv);  // returns only on failure
}

}  // namespace kascade::ops
