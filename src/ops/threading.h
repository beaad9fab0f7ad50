// Thread configuration for the whole engine: OpenMP parallelises our loops,
// and OpenBLAS runs single-threaded inside them (two thread pools competing
// for the same cores would halve throughput).
#pragma once

namespace kascade::ops {

// Uses `n_threads` threads (0 = one per available core) for all parallel loops.
void configure_threads(int n_threads);
int thread_count();

// Settings the runtime libraries read once, when they are loaded, so that
// they can only be changed by re-executing the program (/proc/self/exe, same
// arguments). Call it first in main; if exec fails the program continues
// with the libraries' defaults. It sets what is not set already:
//
// GOMP_SPINCOUNT=10000 (unless OMP_WAIT_POLICY is set). A decode token passes
// about 250 OpenMP barriers. libgomp's default is to spin about 300,000
// times at each before sleeping, so when other programs share the cores a
// waiting thread burns the time slice its partner needs. 512-token decode /
// prefill tok/s on the 2-core VM (single runs, noisy): beside a two-core
// build, 12 / 136 by default against 33 / 198 with 10,000 spins; beside two
// busy loops, 0.5-23 / 88-160 against 5-50 / 204-217. On an idle machine
// 10,000 spins measure the same as the default (passive waiting costs a
// quarter of the decode speed there).
//
// OPENBLAS_CORETYPE, where OpenBLAS fell back to a generic core. It picks its
// kernels from the CPU's model number; a virtual machine that hides it (the
// 2-core Xeon VM reports "Intel Xeon Processor") gets Prescott's SSE3
// kernels: sgemm at 33 GFLOPS on one core there against 152 with the
// SkylakeX kernels the CPU can run (512 x 256 x 1536), the whole prefill of
// Qwen2.5-Coder-1.5B four times slower. This names the core the CPU's
// features allow: SkylakeX with AVX-512 F, BW, VL and DQ, else Haswell with
// AVX2 and FMA.
void prepare_environment(char** argv);

}  // namespace kascade::ops
