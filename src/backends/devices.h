// Choosing the engine a front end runs on (--device): the CPU engine
// (engine/) or the GPU engine (gpu/, in a build with -DKASCADE_CUDA=ON). The
// one folder that knows both, above them.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "engine/backend.h"

namespace kascade::backends {

// "cpu", "cuda" or "auto" (the GPU when this build has CUDA and a usable
// device is present, else the CPU). Throws Error naming the problem.
std::unique_ptr<engine::Backend> make_backend(std::string_view device, const std::string& path);
// Whether `device` means the GPU engine here (cuda, or auto with a usable
// device); throws as make_backend does for a device that is not one.
bool selects_cuda(std::string_view device);
// The devices this build can run on, for --help and errors.
std::string_view supported_devices();
// One line per device this process could use now (`kascade info`).
std::string describe_devices();

}  // namespace kascade::backends
