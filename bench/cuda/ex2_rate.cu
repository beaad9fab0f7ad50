// ex2.approx.f32 against ex2.approx.f16x2: exponentials per clock per SM (run 67).
// nvcc -O3 -gencode arch=compute_90a,code=sm_90a -o ex2_rate bench/cuda/ex2_rate.cu
#include <cstdio>
#include <cuda_fp16.h>
constexpr int kIters = 4096;
__global__ void rate_f32(float* sink, long long* cycles) {
  float x[8];
  for (int i = 0; i < 8; ++i) x[i] = 0.1f * (threadIdx.x % 7 + i);
  __syncthreads();
  long long t0 = clock64();
  for (int it = 0; it < kIters; ++it)
#pragma unroll
    for (int i = 0; i < 8; ++i) asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(x[i]) : "f"(-x[i]));
  __syncthreads();
  long long t1 = clock64();
  float s = 0; for (int i = 0; i < 8; ++i) s += x[i];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = s;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}
__global__ void rate_f16x2(float* sink, long long* cycles) {
  unsigned x[8];
  for (int i = 0; i < 8; ++i) { __half2 h = __floats2half2_rn(0.1f * (threadIdx.x % 7 + i), 0.05f * i); x[i] = *reinterpret_cast<unsigned*>(&h); }
  __syncthreads();
  long long t0 = clock64();
  for (int it = 0; it < kIters; ++it)
#pragma unroll
    for (int i = 0; i < 8; ++i) asm volatile("ex2.approx.f16x2 %0, %1;" : "=r"(x[i]) : "r"(x[i] ^ 0x80008000u));
  __syncthreads();
  long long t1 = clock64();
  float s = 0; for (int i = 0; i < 8; ++i) { __half2 h = *reinterpret_cast<__half2*>(&x[i]); s += __low2float(h) + __high2float(h); }
  sink[blockIdx.x * blockDim.x + threadIdx.x] = s;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}
int main() {
  int sms; cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  float* sink; long long* cyc; cudaMalloc(&sink, sms * 1024 * 4); cudaMalloc(&cyc, sms * 8);
  long long host[256];
  for (int pass = 0; pass < 2; ++pass) {
    for (int v = 0; v < 2; ++v) {
      if (v == 0) rate_f32<<<sms, 1024>>>(sink, cyc); else rate_f16x2<<<sms, 1024>>>(sink, cyc);
      cudaMemcpy(host, cyc, sms * 8, cudaMemcpyDeviceToHost);
      long long m = 0; for (int i = 0; i < sms; ++i) m += host[i]; m /= sms;
      const double elems = 1024.0 * kIters * 8 * (v == 0 ? 1 : 2);
      if (pass == 1) printf("%s: %.2f exponentials/clk/SM (%lld clk)\n", v == 0 ? "ex2.approx.f32   " : "ex2.approx.f16x2 ", elems / m, m);
    }
  }
  return 0;
}
