#include "model/fingerprint.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "model/model.h"

namespace kascade::model {
namespace {

class Fnv1a64 {
 public:
  void add(const void* data, size_t size) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < size; ++i) hash_ = (hash_ ^ bytes[i]) * 0x100000001b3ull;
  }
  template <typename T>
  void add_value(const T& value) {
    add(&value, sizeof value);
  }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 0xcbf29ce484222325ull;
};

}  // namespace

std::string weights_fingerprint(const gguf::File& file) {
  constexpr uint64_t kSampleBytes = 64 * 1024;
  Fnv1a64 hash;
  for (const gguf::TensorInfo& tensor : file.tensors()) {
    hash.add(tensor.name.data(), tensor.name.size());
    hash.add_value(uint32_t(tensor.type));
    for (const int64_t dim : tensor.dims) hash.add_value(dim);
    hash.add_value(tensor.n_bytes);
    const uint64_t head = std::min(kSampleBytes, tensor.n_bytes);
    hash.add(tensor.data, head);
    const uint64_t tail = std::min(kSampleBytes, tensor.n_bytes - head);
    hash.add(tensor.data + tensor.n_bytes - tail, tail);
  }
  return fmt::format("fnv1a64:{:016x}", hash.value());
}

kascade::KascadeProfile load_checked_profile(const std::string& path, const kascade::Shape& shape,
                                               const gguf::File& file) {
  kascade::KascadeProfile profile = kascade::load_profile(path, shape);
  try {
    kascade::check_fingerprint(profile, weights_fingerprint(file));
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());  // the profile may have been picked implicitly: name it
  }
  return profile;
}

std::string shipped_profile_path(const std::string& model_path) {
  const std::string path = fmt::format("{}/profiles/{}.json", KASCADE_SOURCE_DIR,
                                       std::filesystem::path(model_path).stem().string());
  return std::filesystem::exists(path) ? path : std::string();
}

kascade::KascadeProfile resolve_profile(const std::string& profile_path, const std::string& model_path,
                                        const Config& config, const gguf::File& file, bool quiet) {
  const kascade::Shape shape = config.attention_shape();
  const std::string path = profile_path.empty() ? shipped_profile_path(model_path) : profile_path;
  if (path.empty()) {
    if (!quiet)
      fmt::print(stderr, "kascade: no calibration profile for this model (run `kascade calibrate`); "
                         "using evenly spread anchors\n");
    return kascade::default_profile(shape);
  }
  return load_checked_profile(path, shape, file);
}

}  // namespace kascade::model
