// A fingerprint of a model's weights, stored in calibration profiles so a
// profile is never applied to another model. It hashes every tensor's name,
// type, shape and size plus the first and last 64 KiB of its data: cheap on
// multi-gigabyte files, and any re-quantization or different checkpoint
// changes it.
#pragma once

#include <string>

#include "attention/kascade_profile.h"
#include "gguf/gguf.h"

namespace kascade::model {

// "fnv1a64:" followed by 16 hex digits.
std::string weights_fingerprint(const gguf::File& file);

// The profile at `path`, read for `shape` and checked against the weights of
// `file`; a fingerprint mismatch is an Error that names the path.
attention::KascadeProfile load_checked_profile(const std::string& path, const attention::Shape& shape,
                                               const gguf::File& file);

}  // namespace kascade::model
