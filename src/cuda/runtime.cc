// The CUDA runtime helpers every kernel file and the host API use: errors
// that name the call, kernel configuration (shared memory, occupancy),
// launches with programmatic dependence and clusters, the device's size.
#include <cstdlib>

#include "core/error.h"
#include "cuda/kernels.h"

namespace kascade::cuda::detail {

void unsupported(const char* what, int64_t value) { fail("cuda kernels: unsupported {}: {}", what, value); }

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("cuda: {} failed: {}", what, cudaGetErrorString(status));
}

int64_t positive_env(const char* name, int64_t fallback) {
  const char* value = std::getenv(name);
  const int64_t parsed = value ? std::atoll(value) : 0;
  return parsed > 0 ? parsed : fallback;
}

KernelInfo configure_kernel(const void* kernel, int shared_bytes, int threads, const char* what) {
  KernelInfo made{kernel, shared_bytes, threads, 1};
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared_bytes), what);
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&made.blocks_per_sm, kernel, threads, shared_bytes), what);
  if (made.blocks_per_sm < 1) made.blocks_per_sm = 1;
  return made;
}

void launch_kernel(const void* kernel, dim3 grid, int threads, size_t shared_bytes, void* arguments, bool programmatic,
                   int cluster_blocks, cudaStream_t stream, const char* what) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(threads);
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  cudaLaunchAttribute attributes[2] = {};
  if (programmatic) {
    attributes[config.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[config.numAttrs++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_blocks > 1) {
    attributes[config.numAttrs].id = cudaLaunchAttributeClusterDimension;
    attributes[config.numAttrs++].val.clusterDim = {static_cast<unsigned>(cluster_blocks), 1, 1};
  }
  config.attrs = attributes;
  void* argument_list[] = {arguments};
  check_cuda(cudaLaunchKernelExC(&config, kernel, argument_list), what);
}

int multiprocessor_count() {
  static const int count = [] {
    int device = 0, made = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    check_cuda(cudaDeviceGetAttribute(&made, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    return made;
  }();
  return count;
}

}  // namespace kascade::cuda::detail
