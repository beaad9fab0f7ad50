// Which calibration profile a model runs with, and the fingerprint of a
// model's weights, stored in calibration profiles so a
// profile is never applied to another model. It hashes every tensor's name,
// type, shape and size plus the first and last 64 KiB of its data: cheap on
// multi-gigabyte files, and any re-quantization or different checkpoint
// changes it.
#pragma once

#include <string>

#include "gguf/gguf.h"
#include "kascade/profile.h"

namespace kascade::model {

// "fnv1a64:" followed by 16 hex digits.
std::string weights_fingerprint(const gguf::File& file);

// The profile at `path`, read for `shape` and checked against the weights of
// `file`; a fingerprint mismatch is an Error that names the path.
kascade::KascadeProfile load_checked_profile(const std::string& path, const kascade::Shape& shape,
                                               const gguf::File& file);

// The profile shipped for a model file: profiles/<file stem>.json in the
// source tree (empty when there is none).
std::string shipped_profile_path(const std::string& model_path);

struct Config;
// The calibration profile for a Kascade run: `profile_path` when given, else
// the one shipped for the model, else evenly spread anchors (with a warning
// on stderr unless quiet). A profile made for other weights is an error
// naming the profile.
kascade::KascadeProfile resolve_profile(const std::string& profile_path, const std::string& model_path,
                                        const Config& config, const gguf::File& file, bool quiet);

}  // namespace kascade::model
