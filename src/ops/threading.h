// Thread configuration for the whole engine: OpenMP parallelises our loops,
// and OpenBLAS runs single-threaded inside them (two thread pools competing
// for the same cores would halve throughput).
#pragma once

namespace kascade::ops {

// Uses `n_threads` threads (0 = one per available core) for all parallel loops.
void configure_threads(int n_threads);
int thread_count();

}  // namespace kascade::ops
