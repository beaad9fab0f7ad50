// make_backend: the one place that knows which backends this build has (the
// GPU engine only with -DKASCADE_CUDA=ON).
#include "backends/devices.h"

#include <omp.h>

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#ifdef KASCADE_HAVE_CUDA
#include "gpu/backend.h"
#include "gpu/device.h"
#endif

namespace kascade::backends {

using engine::Backend;
using engine::make_cpu_backend;

std::string_view supported_devices() {
#ifdef KASCADE_HAVE_CUDA
  return "cpu, cuda, auto";
#else
  return "cpu, auto (this build has no CUDA: configure with -DKASCADE_CUDA=ON for cuda)";
#endif
}

std::string describe_devices() {
  std::string lines = fmt::format("cpu: {} threads\n", std::max(1, omp_get_max_threads()));
#ifdef KASCADE_HAVE_CUDA
  std::string why;
  if (gpu::device_available(&why)) {
    const gpu::DeviceInfo info = gpu::device_info();
    lines += fmt::format("cuda: {} (compute {}.{}, {} multiprocessors, {} free of {})\n", info.name, info.sm_major,
                         info.sm_minor, info.multiprocessors, gpu::gib(info.free_bytes), gpu::gib(info.total_bytes));
  } else {
    lines += fmt::format("cuda: not usable: {}\n", why);
  }
#else
  lines += "cuda: not in this build (configure with -DKASCADE_CUDA=ON)\n";
#endif
  return lines;
}

bool selects_cuda(std::string_view device) {
  if (device == "cpu") return false;
#ifdef KASCADE_HAVE_CUDA
  if (device == "cuda") return true;
  if (device == "auto") return gpu::device_available();
#else
  if (device == "auto") return false;
  if (device == "cuda") fail("--device cuda: this build has no CUDA support (configure with -DKASCADE_CUDA=ON)");
#endif
  fail("--device '{}' is not a device (devices: {})", device, supported_devices());
}

std::unique_ptr<Backend> make_backend(std::string_view device, const std::string& path) {
#ifdef KASCADE_HAVE_CUDA
  if (selects_cuda(device)) return gpu::make_cuda_backend(path);
#else
  selects_cuda(device);  // throws for cuda and for what is not a device
#endif
  return make_cpu_backend(path);
}

}  // namespace kascade::backends
