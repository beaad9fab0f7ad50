#include "ops/threading.h"

#include <omp.h>
#include <unistd.h>

#include <cblas.h>
#include <cstdlib>

namespace kascade::ops {

void configure_threads(int n_threads) {
  if (n_threads <= 0) n_threads = omp_get_num_procs();
  omp_set_num_threads(n_threads);
  openblas_set_num_threads(1);
}

int thread_count() { return omp_get_max_threads(); }

void use_short_spin_waits(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT")) return;
  if (setenv("GOMP_SPINCOUNT", "10000", 0) != 0) return;
  execv("/proc/self/exe", argv);  // returns only on failure
}

}  // namespace kascade::ops
