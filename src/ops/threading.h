// Thread configuration for the whole engine: OpenMP parallelises our loops,
// and OpenBLAS runs single-threaded inside them (two thread pools competing
// for the same cores would halve throughput).
#pragma once

namespace kascade::ops {

// Uses `n_threads` threads (0 = one per available core) for all parallel loops.
void configure_threads(int n_threads);
int thread_count();

// A decode token passes about 250 OpenMP barriers. libgomp's default is to
// spin about 300,000 times at each before sleeping, so when other programs
// share the cores a waiting thread burns the time slice its partner needs.
// 512-token decode / prefill tok/s on the 2-core VM (single runs, noisy):
// beside a two-core build, 12 / 136 by default against 33 / 198 with 10,000
// spins; beside two busy loops, 0.5-23 / 88-160 against 5-50 / 204-217. On
// an idle machine 10,000 spins measure the same as the default (passive
// waiting costs a quarter of the decode speed there). libgomp reads its
// environment once, when it is loaded, so unless OMP_WAIT_POLICY or
// GOMP_SPINCOUNT is already set, this sets GOMP_SPINCOUNT=10000 and
// re-executes the program (/proc/self/exe, same arguments). Call it first in
// main; if exec fails the program continues with libgomp's defaults.
void use_short_spin_waits(char** argv);

}  // namespace kascade::ops
