// GGUF v3 writer: metadata of any value type, and tensors whose bytes are
// produced while the file is written (streamed, so a multi-gigabyte model
// never sits in memory). Used by `kascade synth` and by the tests and fuzzers
// that need well-formed files; tests/gguf_builder.h writes the hostile ones.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace kascade::gguf {

class Writer {
 public:
  // Writes a slice of a tensor's data into `out` (zeroed beforehand): whole
  // rows, `offset` the slice's byte offset inside the tensor.
  using Fill = std::function<void(uint64_t offset, std::span<uint8_t> out)>;

  explicit Writer(uint64_t alignment = 32);

  // Metadata, in the order added (a key added twice is an error). Every
  // adder returns the writer, so calls chain.
  Writer& add(const std::string& key, Value value);
  Writer& add_uint32(const std::string& key, uint32_t value);
  Writer& add_int32(const std::string& key, int32_t value);
  Writer& add_uint64(const std::string& key, uint64_t value);
  Writer& add_float32(const std::string& key, float value);
  Writer& add_bool(const std::string& key, bool value);
  Writer& add_string(const std::string& key, const std::string& value);
  Writer& add_strings(const std::string& key, const std::vector<std::string>& values);
  Writer& add_int32s(const std::string& key, const std::vector<int32_t>& values);
  Writer& add_float32s(const std::string& key, const std::vector<float>& values);

  // dims in ggml order (dims[0] is the row length, a multiple of the type's block).
  Writer& add_tensor(const std::string& name, std::vector<int64_t> dims, TensorType type, Fill fill);
  // A tensor from bytes held by the caller (copied).
  Writer& add_tensor(const std::string& name, std::vector<int64_t> dims, TensorType type,
                  std::span<const uint8_t> bytes);

  uint64_t data_bytes() const { return data_bytes_; }

  // Writes a temporary beside `path` (temporary_path_for) and renames it, so
  // a failure leaves no partial file; `progress` gets the bytes of tensor
  // data written so far.
  void write(const std::string& path, const std::function<void(uint64_t done, uint64_t total)>& progress = {}) const;
  // The whole image in memory, and parsed back (small files: tests, fuzzers).
  std::vector<uint8_t> bytes() const;
  File parse(const std::string& label = "<memory>") const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;
    TensorType type;
    uint64_t offset, n_bytes;
    Fill fill;
  };
  std::vector<uint8_t> header() const;  // everything up to the data section, padded

  uint64_t alignment_;
  std::vector<std::pair<std::string, Value>> metadata_;
  std::vector<Tensor> tensors_;
  uint64_t data_bytes_ = 0;
};

}  // namespace kascade::gguf
