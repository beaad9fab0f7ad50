// Writes GGUF images byte by byte for tests: well-formed ones and, since
// every count, type id and offset can be set freely, hostile ones.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace kascade::test_gguf {

// Value and tensor type ids as raw numbers, so tests can also write bad ones.
constexpr uint32_t kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
                   kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12;
constexpr uint32_t kTypeF32 = 0, kTypeQ4_0 = 2, kTypeQ4_1 = 3, kTypeQ8_0 = 8, kTypeQ2_K = 10;

// Little-endian byte sink.
struct Bytes {
  std::vector<uint8_t> data;

  template <typename T>
  Bytes& put(T value) {
    const auto* p = reinterpret_cast<const uint8_t*>(&value);
    data.insert(data.end(), p, p + sizeof value);
    return *this;
  }
  Bytes& str(std::string_view text) {
    put<uint64_t>(text.size());
    data.insert(data.end(), text.begin(), text.end());
    return *this;
  }
  Bytes& raw(const Bytes& other) {
    data.insert(data.end(), other.data.begin(), other.data.end());
    return *this;
  }
};

template <typename T>
Bytes scalar(T value) {
  return Bytes().put(value);
}

inline Bytes string_value(std::string_view text) { return Bytes().str(text); }

// An array value: element type, count, then the encoded items.
inline Bytes array_value(uint32_t element_type, uint64_t count, const Bytes& items) {
  return Bytes().put(element_type).put(count).raw(items);
}

// Builds GGUF images: header, metadata, tensor infos, padding, data.
// Counts default to the real ones; tests override them to lie.
struct GgufBuilder {
  uint32_t version = 3;
  uint64_t alignment = 32;  // pads the data section; add the key separately to declare it
  std::optional<uint64_t> tensor_count, metadata_count;
  Bytes metadata, infos, data;
  uint64_t n_metadata = 0, n_tensors = 0;

  GgufBuilder& kv(std::string_view key, uint32_t type, const Bytes& value) {
    metadata.str(key).put(type).raw(value);
    ++n_metadata;
    return *this;
  }
  GgufBuilder& tensor(std::string_view name, const std::vector<uint64_t>& dims, uint32_t type,
                      uint64_t offset) {
    infos.str(name).put(uint32_t(dims.size()));
    for (uint64_t dim : dims) infos.put(dim);
    infos.put(type).put(offset);
    ++n_tensors;
    return *this;
  }
  std::vector<uint8_t> build() const {
    Bytes out;
    out.data = {'G', 'G', 'U', 'F'};
    out.put(version).put(tensor_count.value_or(n_tensors)).put(metadata_count.value_or(n_metadata));
    out.raw(metadata).raw(infos);
    while (out.data.size() % alignment != 0) out.data.push_back(0);
    out.raw(data);
    return out.data;
  }
};

}  // namespace kascade::test_gguf
