// A fingerprint of a model's weights, stored in calibration profiles so a
// profile is never applied to another model. It hashes every tensor's name,
// type, shape and size plus the first and last 64 KiB of its data: cheap on
// multi-gigabyte files, and any re-quantization or different checkpoint
// changes it.
#pragma once

#include <string>

#include "gguf/gguf.h"

namespace kascade::model {

// "fnv1a64:" followed by 16 hex digits.
std::string weights_fingerprint(const gguf::File& file);

}  // namespace kascade::model
