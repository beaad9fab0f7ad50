// Device basics for the GPU backend: errors that name the failed call,
// owned device allocations, and what the device is.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kascade::gpu {

// Throws kascade::Error "cuda: <what> failed: <reason>" unless status is success.
void check(cudaError_t status, const char* what);

// The device this process uses (device 0), or an Error saying why there is none.
struct DeviceInfo {
  std::string name;
  int sm_major = 0, sm_minor = 0;
  int multiprocessors = 0;
  size_t free_bytes = 0, total_bytes = 0;
  double memory_bandwidth = 0;  // bytes/s at the memory's peak clock (0: not reported)
};
DeviceInfo device_info();
// True when a CUDA device can be used; otherwise `why` says why not.
bool device_available(std::string* why = nullptr);

// One device allocation, freed on destruction. Never managed memory.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  explicit DeviceMemory(size_t bytes, const char* what);
  ~DeviceMemory();
  DeviceMemory(DeviceMemory&& other) noexcept;
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// Copies host values into a new device allocation.
template <typename T>
DeviceMemory upload(const std::vector<T>& values, const char* what) {
  DeviceMemory memory(values.size() * sizeof(T), what);
  check(cudaMemcpy(memory.data(), values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice), what);
  return memory;
}

// "1.50 GiB" style sizes for messages.
std::string gib(size_t bytes);

}  // namespace kascade::gpu
