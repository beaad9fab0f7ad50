// GGUF v2/v3 reader. The file is memory-mapped; metadata is parsed into typed
// values and every tensor's offset, size and alignment is checked against the
// file before any pointer into it is handed out. Hostile files (huge counts,
// offsets past the end, overlapping or unaligned tensors, bad strings) raise
// kascade::Error naming the field and file offset.
// gguf/writer.h writes GGUF files.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "quant/types.h"

namespace kascade::gguf {

// GGUF metadata value type ids.
enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

struct Value;
struct Array {
  ValueType element_type;
  std::vector<Value> items;
};
struct Value {
  ValueType type;
  std::variant<uint64_t, int64_t, double, bool, std::string, Array> data;  // ints widened
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // ggml order: dims[0] is the contiguous (row) length
  TensorType type;
  uint64_t offset;            // relative to the start of the data section
  uint64_t n_elements;
  uint64_t n_bytes;
  const uint8_t* data;        // points into the mapped file

  int64_t rows() const { return n_elements / (dims.empty() ? 1 : dims[0]); }
};

class File {
 public:
  // Maps and parses the file at `path`; throws Error on any problem.
  static File open(const std::string& path);
  // Parses an in-memory image (used by tests and the fuzzer); the buffer is copied.
  static File parse(const uint8_t* bytes, size_t size, const std::string& label = "<memory>");

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  ~File();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return metadata_; }
  const Value* find(const std::string& key) const;
  bool has(const std::string& key) const { return find(key) != nullptr; }

  // Typed getters: throw Error naming the key when it is missing or of another type.
  // Integer getters accept any integer type whose value fits.
  std::string get_string(const std::string& key) const;
  uint64_t get_uint(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;  // any float or integer type
  bool get_bool(const std::string& key) const;
  std::vector<std::string> get_string_array(const std::string& key) const;
  std::vector<double> get_float_array(const std::string& key) const;
  std::vector<int64_t> get_int_array(const std::string& key) const;
  // Getters with a default for optional keys (still type-checked when present).
  std::string get_string(const std::string& key, const std::string& fallback) const;
  uint64_t get_uint(const std::string& key, uint64_t fallback) const;
  double get_float(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key, bool fallback) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(const std::string& name) const;
  // Throws Error naming the tensor when it is missing.
  const TensorInfo& tensor(const std::string& name) const;

 private:
  File() = default;
  void parse_image(const std::string& label);

  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  const uint8_t* bytes_ = nullptr;
  uint64_t size_ = 0;
  void* mapping_ = nullptr;               // mmap base, when mapped
  std::vector<uint8_t> owned_;            // image, when parsed from memory
  std::vector<std::pair<std::string, Value>> metadata_;
  std::map<std::string, size_t> metadata_index_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> tensor_index_;
};

// A mapped file truncated while in use makes the next touch of a lost page
// raise SIGBUS. For programs: installs a SIGBUS handler that, when the fault
// lies in a File's mapping, writes one line "kascade: error: <path>: the file
// was truncated while in use ..." to stderr and exits with status 1; any
// other SIGBUS keeps the default action.
void report_truncated_files_on_sigbus();

// Human-readable rendering of a value (arrays abbreviated), for `kascade info`.
std::string to_string(const Value& value, size_t max_items = 8);
const char* value_type_name(ValueType type);
// Untrusted bytes made safe for one line of output: valid UTF-8 passes, control
// characters, quotes, backslashes and invalid bytes are escaped (\n, \x80).
std::string printable(std::string_view bytes);

}  // namespace kascade::gguf
