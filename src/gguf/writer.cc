#include "gguf/writer.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "core/file_io.h"

namespace kascade::gguf {
namespace {

class Bytes {
 public:
  explicit Bytes(std::vector<uint8_t>& out) : out_(out) {}
  template <typename T>
  void put(T value) {
    // resize + memcpy: GCC 12 misreads a range insert from a scalar as out of bounds.
    const size_t at = out_.size();
    out_.resize(at + sizeof value);
    std::memcpy(out_.data() + at, &value, sizeof value);
  }
  void string(const std::string& text) {
    put<uint64_t>(text.size());
    out_.insert(out_.end(), text.begin(), text.end());
  }
  // A value's payload (its type id is written by the caller).
  void value(const Value& v) {
    switch (v.type) {
      case ValueType::UINT8: return put<uint8_t>(uint8_t(std::get<uint64_t>(v.data)));
      case ValueType::INT8: return put<int8_t>(int8_t(std::get<int64_t>(v.data)));
      case ValueType::UINT16: return put<uint16_t>(uint16_t(std::get<uint64_t>(v.data)));
      case ValueType::INT16: return put<int16_t>(int16_t(std::get<int64_t>(v.data)));
      case ValueType::UINT32: return put<uint32_t>(uint32_t(std::get<uint64_t>(v.data)));
      case ValueType::INT32: return put<int32_t>(int32_t(std::get<int64_t>(v.data)));
      case ValueType::FLOAT32: return put<float>(float(std::get<double>(v.data)));
      case ValueType::BOOL: return put<uint8_t>(std::get<bool>(v.data) ? 1 : 0);
      case ValueType::STRING: return string(std::get<std::string>(v.data));
      case ValueType::UINT64: return put<uint64_t>(std::get<uint64_t>(v.data));
      case ValueType::INT64: return put<int64_t>(std::get<int64_t>(v.data));
      case ValueType::FLOAT64: return put<double>(std::get<double>(v.data));
      case ValueType::ARRAY: {
        const Array& array = std::get<Array>(v.data);
        put<uint32_t>(uint32_t(array.element_type));
        put<uint64_t>(array.items.size());
        for (const Value& item : array.items) {
          if (item.type != array.element_type) fail("GGUF writer: array item of another type");
          value(item);
        }
        return;
      }
    }
    fail("GGUF writer: unknown value type {}", uint32_t(v.type));
  }

 private:
  std::vector<uint8_t>& out_;
};

uint64_t align_up(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

template <typename T, typename F>
Value array_of(ValueType type, const std::vector<T>& values, F make) {
  Array array{type, {}};
  array.items.reserve(values.size());
  for (const T& v : values) array.items.push_back(Value{type, make(v)});
  return Value{ValueType::ARRAY, std::move(array)};
}

}  // namespace

Writer::Writer(uint64_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) fail("GGUF alignment {} is not a power of two", alignment);
  if (alignment != 32) add_uint32("general.alignment", uint32_t(alignment));
}

Writer& Writer::add(const std::string& key, Value value) {
  for (const auto& [existing, _] : metadata_)
    if (existing == key) fail("GGUF writer: metadata key '{}' added twice", key);
  metadata_.emplace_back(key, std::move(value));
  return *this;
}

Writer& Writer::add_uint32(const std::string& key, uint32_t value) { return add(key, {ValueType::UINT32, uint64_t(value)}); }
Writer& Writer::add_int32(const std::string& key, int32_t value) { return add(key, {ValueType::INT32, int64_t(value)}); }
Writer& Writer::add_uint64(const std::string& key, uint64_t value) { return add(key, {ValueType::UINT64, value}); }
Writer& Writer::add_float32(const std::string& key, float value) { return add(key, {ValueType::FLOAT32, double(value)}); }
Writer& Writer::add_bool(const std::string& key, bool value) { return add(key, {ValueType::BOOL, value}); }
Writer& Writer::add_string(const std::string& key, const std::string& value) { return add(key, {ValueType::STRING, value}); }
Writer& Writer::add_strings(const std::string& key, const std::vector<std::string>& values) {
  return add(key, array_of(ValueType::STRING, values, [](const std::string& v) { return v; }));
}
Writer& Writer::add_int32s(const std::string& key, const std::vector<int32_t>& values) {
  return add(key, array_of(ValueType::INT32, values, [](int32_t v) { return int64_t(v); }));
}
Writer& Writer::add_float32s(const std::string& key, const std::vector<float>& values) {
  return add(key, array_of(ValueType::FLOAT32, values, [](float v) { return double(v); }));
}

Writer& Writer::add_tensor(const std::string& name, std::vector<int64_t> dims, TensorType type, Fill fill) {
  if (dims.empty() || dims.size() > 4) fail("GGUF writer: tensor '{}' has {} dimensions", name, dims.size());
  uint64_t rows = 1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] <= 0) fail("GGUF writer: tensor '{}' has dimension {}", name, dims[i]);
    if (i > 0) rows *= uint64_t(dims[i]);
  }
  for (const Tensor& t : tensors_)
    if (t.name == name) fail("GGUF writer: tensor '{}' added twice", name);
  const uint64_t n_bytes = row_bytes(type, dims[0]) * rows;
  tensors_.push_back({name, std::move(dims), type, data_bytes_, n_bytes, std::move(fill)});
  data_bytes_ = align_up(data_bytes_ + n_bytes, alignment_);
  return *this;
}

Writer& Writer::add_tensor(const std::string& name, std::vector<int64_t> dims, TensorType type,
                           std::span<const uint8_t> bytes) {
  auto copy = std::make_shared<std::vector<uint8_t>>(bytes.begin(), bytes.end());
  add_tensor(name, std::move(dims), type, [copy](uint64_t offset, std::span<uint8_t> out) {
    std::memcpy(out.data(), copy->data() + offset, out.size());
  });
  if (tensors_.back().n_bytes != bytes.size()) {
    const uint64_t expected = tensors_.back().n_bytes;
    data_bytes_ = tensors_.back().offset;
    tensors_.pop_back();
    fail("GGUF writer: tensor '{}' needs {} bytes, got {}", name, expected, bytes.size());
  }
  return *this;
}

std::vector<uint8_t> Writer::header() const {
  std::vector<uint8_t> out{'G', 'G', 'U', 'F'};
  Bytes b(out);
  b.put<uint32_t>(3);
  b.put<uint64_t>(tensors_.size());
  b.put<uint64_t>(metadata_.size());
  for (const auto& [key, value] : metadata_) {
    b.string(key);
    b.put<uint32_t>(uint32_t(value.type));
    b.value(value);
  }
  for (const Tensor& t : tensors_) {
    b.string(t.name);
    b.put<uint32_t>(uint32_t(t.dims.size()));
    for (const int64_t dim : t.dims) b.put<uint64_t>(uint64_t(dim));
    b.put<uint32_t>(uint32_t(t.type));
    b.put<uint64_t>(t.offset);
  }
  out.resize(align_up(out.size(), alignment_), 0);
  return out;
}

std::vector<uint8_t> Writer::bytes() const {
  std::vector<uint8_t> out = header();
  const size_t data_start = out.size();
  out.resize(data_start + data_bytes_, 0);
  for (const Tensor& t : tensors_) t.fill(0, std::span<uint8_t>(out.data() + data_start + t.offset, t.n_bytes));
  return out;
}

File Writer::parse(const std::string& label) const {
  const std::vector<uint8_t> image = bytes();
  return File::parse(image.data(), image.size(), label);
}

void Writer::write(const std::string& path, const std::function<void(uint64_t, uint64_t)>& progress) const {
  // A short name of its own: any target name the file system takes works.
  const std::string partial = temporary_path_for(path);
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Closer> file(std::fopen(partial.c_str(), "wb"));
  if (!file) fail("cannot write '{}': {}", partial, std::strerror(errno));
  auto put = [&](const uint8_t* data, size_t n) {
    if (n && std::fwrite(data, 1, n, file.get()) != n) {
      const std::string why = std::strerror(errno);
      file.reset();
      std::filesystem::remove(partial);
      fail("cannot write '{}': {}", partial, why);
    }
  };
  const std::vector<uint8_t> head = header();
  put(head.data(), head.size());
  constexpr uint64_t kSlice = uint64_t(64) << 20;
  std::vector<uint8_t> slice;
  uint64_t written = 0;
  for (const Tensor& t : tensors_) {
    const uint64_t row = row_bytes(t.type, t.dims[0]);
    const uint64_t slice_bytes = std::max(row, kSlice / row * row);
    for (uint64_t offset = 0; offset < t.n_bytes; offset += slice_bytes) {
      const uint64_t n = std::min(slice_bytes, t.n_bytes - offset);
      slice.assign(size_t(n), 0);
      t.fill(offset, slice);
      put(slice.data(), slice.size());
      written += n;
      if (progress) progress(written, data_bytes_);
    }
    const uint64_t padding = align_up(t.offset + t.n_bytes, alignment_) - (t.offset + t.n_bytes);
    slice.assign(size_t(padding), 0);
    put(slice.data(), slice.size());
  }
  if (std::fflush(file.get()) != 0 || fsync(fileno(file.get())) != 0) {
    const std::string why = std::strerror(errno);
    file.reset();
    std::filesystem::remove(partial);
    fail("cannot write '{}': {}", partial, why);
  }
  file.reset();
  std::error_code error;
  std::filesystem::rename(partial, path, error);
  if (error) {
    std::filesystem::remove(partial);
    fail("cannot rename '{}' to '{}': {}", partial, path, error.message());
  }
}

}  // namespace kascade::gguf
