#include "model/fingerprint.h"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "core/error.h"

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

attention::KascadeProfile load_checked_profile(const std::string& path, const attention::Shape& shape,
                                               const gguf::File& file) {
  attention::KascadeProfile profile = attention::load_profile(path, shape);
  try {
    attention::check_fingerprint(profile, weights_fingerprint(file));
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());  // the profile may have been picked implicitly: name it
  }
  return profile;
}

}  // namespace kascade::model
