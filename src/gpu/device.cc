#include "gpu/device.h"

#include <fmt/format.h>

#include "core/error.h"

namespace kascade::gpu {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) fail("cuda: {} failed: {}", what, cudaGetErrorString(status));
}

bool device_available(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    if (why) *why = status != cudaSuccess ? cudaGetErrorString(status) : "no CUDA device";
    cudaGetLastError();  // clear the sticky error of a failed query
    return false;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || prop.major < 9) {
    if (why) *why = fmt::format("device 0 ({}) is compute capability {}.{}; the kernels need 9.0 (Hopper)", prop.name,
                                prop.major, prop.minor);
    return false;
  }
  return true;
}

DeviceInfo device_info() {
  std::string why;
  if (!device_available(&why)) fail("no usable CUDA device: {}", why);
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  DeviceInfo info;
  info.name = prop.name;
  info.sm_major = prop.major;
  info.sm_minor = prop.minor;
  info.multiprocessors = prop.multiProcessorCount;
  check(cudaMemGetInfo(&info.free_bytes, &info.total_bytes), "cudaMemGetInfo");
  int clock_khz = 0, bus_bits = 0;
  if (cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0) == cudaSuccess &&
      cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0) == cudaSuccess)
    info.memory_bandwidth = 2.0 * clock_khz * 1e3 * bus_bits / 8;  // two transfers a clock
  return info;
}

DeviceMemory::DeviceMemory(size_t bytes, const char* what) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t status = cudaMalloc(&data_, bytes);
  if (status != cudaSuccess) {
    cudaGetLastError();
    size_t free_bytes = 0, total = 0;
    cudaMemGetInfo(&free_bytes, &total);
    fail("cannot allocate {} on the GPU for {} ({} free of {})", gib(bytes), what, gib(free_bytes), gib(total));
  }
}

DeviceMemory::~DeviceMemory() {
  if (data_) cudaFree(data_);
}

DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept : data_(other.data_), bytes_(other.bytes_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    if (data_) cudaFree(data_);
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

std::string gib(size_t bytes) { return fmt::format("{:.2f} GiB", double(bytes) / double(1ull << 30)); }

}  // namespace kascade::gpu
