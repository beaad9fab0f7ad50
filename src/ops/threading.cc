#include "ops/threading.h"

#include <omp.h>

#include <cblas.h>

namespace kascade::ops {

void configure_threads(int n_threads) {
  if (n_threads <= 0) n_threads = omp_get_num_procs();
  omp_set_num_threads(n_threads);
  openblas_set_num_threads(1);
}

int thread_count() { return omp_get_max_threads(); }

}  // namespace kascade::ops
