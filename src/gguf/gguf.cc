// GGUF v2/v3 reader. Every length, count and offset read from the file is
// checked against the bytes that remain before anything is allocated or
// dereferenced, so a hostile or truncated file ends in one Error that names
// the file, the field and its byte offset. Layout facts (from the GGUF spec):
// magic "GGUF", u32 version, u64 tensor count, u64 metadata count, metadata
// key/value pairs, tensor infos, padding to `general.alignment`, tensor data.
#include "gguf/gguf.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <limits>
#include <numeric>
#include <utility>

#include "core/error.h"
#include "core/file_io.h"

namespace kascade::gguf {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF is read in place as little-endian");

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint32_t kMaxDims = 4;          // ggml's limit
constexpr uint64_t kMaxKeyBytes = 65535;  // the spec's limit for keys
constexpr int kMaxArrayDepth = 8;         // bounds recursion on nested arrays
// Caps the memory a small file can make us spend on parsed values (each takes
// ~50 bytes); the largest real vocabularies need ~1.5M.
constexpr uint64_t kMaxMetadataValues = uint64_t(1) << 24;
constexpr size_t kMaxNameInMessage = 96;

// Mapped files, for the SIGBUS report (report_truncated_files_on_sigbus): a
// fixed table of atomics, which a signal handler may read.
struct MappedRegion {
  std::atomic<uintptr_t> base{0};
  std::atomic<size_t> size{0};
  std::atomic<const char*> message{nullptr};  // one line, '\n'-terminated
  std::atomic<size_t> message_length{0};
};
constexpr int kMappedRegions = 64;
MappedRegion g_mapped[kMappedRegions];

void register_mapping(const void* base, size_t size, const std::string& path);
void unregister_mapping(const void* base);

// Smallest on-disk size of one key/value pair (key length, type, 1-byte value)
// and one tensor info (name length, n_dims, type, offset): bounds the counts.
constexpr uint64_t kMinMetadataBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;

bool is_known_value_type(uint32_t id) { return id <= static_cast<uint32_t>(ValueType::FLOAT64); }

bool is_integer_type(ValueType type) {
  switch (type) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::UINT16: case ValueType::INT16:
    case ValueType::UINT32: case ValueType::INT32: case ValueType::UINT64: case ValueType::INT64:
      return true;
    default:
      return false;
  }
}

uint64_t min_encoded_bytes(ValueType type) {
  switch (type) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    case ValueType::STRING: return 8;      // the length
    case ValueType::ARRAY: return 4 + 8;   // element type and count
  }
  return 1;
}

// Length of the valid UTF-8 sequence starting at bytes[i], or 0 if there is none.
size_t utf8_sequence_length(std::string_view bytes, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(bytes[k]); };
  const uint8_t lead = byte(i);
  size_t length;
  uint8_t second_min = 0x80, second_max = 0xbf;  // narrowed to rule out overlongs and surrogates
  if (lead < 0x80) return 1;
  if (lead >= 0xc2 && lead <= 0xdf) {
    length = 2;
  } else if (lead >= 0xe0 && lead <= 0xef) {
    length = 3;
    if (lead == 0xe0) second_min = 0xa0;
    if (lead == 0xed) second_max = 0x9f;
  } else if (lead >= 0xf0 && lead <= 0xf4) {
    length = 4;
    if (lead == 0xf0) second_min = 0x90;
    if (lead == 0xf4) second_max = 0x8f;
  } else {
    return 0;
  }
  if (i + length > bytes.size()) return 0;
  if (byte(i + 1) < second_min || byte(i + 1) > second_max) return 0;
  for (size_t k = 2; k < length; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xbf) return 0;
  }
  return length;
}

std::string name_for_message(std::string_view name) {
  if (name.size() <= kMaxNameInMessage) return printable(name);
  return printable(name.substr(0, kMaxNameInMessage)) + "...";
}

// Cursor over the image; every read checks the bytes that remain.
class Reader {
 public:
  Reader(const uint8_t* bytes, uint64_t size, const std::string& label)
      : bytes_(bytes), size_(size), label_(label) {}

  uint64_t offset() const { return offset_; }
  uint64_t remaining() const { return size_ - offset_; }

  // What is being read (a metadata key, a tensor), named in every message.
  void set_context(std::string context) { context_ = std::move(context); }

  template <typename... Args>
  [[noreturn]] void fail_at(uint64_t offset, fmt::format_string<Args...> format,
                            Args&&... args) const {
    const std::string message = fmt::format(format, std::forward<Args>(args)...);
    if (context_.empty()) fail("{}: {} (at offset {})", label_, message, offset);
    fail("{}: {}: {} (at offset {})", label_, context_, message, offset);
  }

  template <typename T>
  T read(std::string_view what) {
    if (sizeof(T) > remaining()) {
      fail_at(offset_, "file ends inside the {}: {} bytes needed, {} left", what, sizeof(T),
              remaining());
    }
    T value;
    std::memcpy(&value, bytes_ + offset_, sizeof value);
    offset_ += sizeof value;
    return value;
  }

  std::string read_string(std::string_view what) {
    const uint64_t at = offset_;
    const uint64_t length = read<uint64_t>(what);
    if (length > remaining()) {
      fail_at(at, "{} length {} exceeds the {} bytes left", what, length, remaining());
    }
    std::string text(reinterpret_cast<const char*>(bytes_ + offset_), size_t(length));
    offset_ += length;
    return text;
  }

 private:
  const uint8_t* bytes_;
  uint64_t size_;
  uint64_t offset_ = 0;
  const std::string& label_;
  std::string context_;
};

// Reads typed metadata values, bounding nesting depth and the total number of
// values so that a small file cannot make us allocate without limit.
class MetadataReader {
 public:
  explicit MetadataReader(Reader& reader) : reader_(reader) {}

  ValueType read_type() {
    const uint64_t at = reader_.offset();
    const uint32_t id = reader_.read<uint32_t>("value type");
    if (!is_known_value_type(id)) reader_.fail_at(at, "unknown value type {}", id);
    return static_cast<ValueType>(id);
  }

  // Reads the value of one key/value pair.
  Value read_entry(ValueType type) {
    count_values(1);
    return read_value(type, 0);
  }

 private:
  Value read_value(ValueType type, int depth) {
    switch (type) {
      case ValueType::UINT8: return {type, uint64_t{reader_.read<uint8_t>("UINT8 value")}};
      case ValueType::INT8: return {type, int64_t{reader_.read<int8_t>("INT8 value")}};
      case ValueType::UINT16: return {type, uint64_t{reader_.read<uint16_t>("UINT16 value")}};
      case ValueType::INT16: return {type, int64_t{reader_.read<int16_t>("INT16 value")}};
      case ValueType::UINT32: return {type, uint64_t{reader_.read<uint32_t>("UINT32 value")}};
      case ValueType::INT32: return {type, int64_t{reader_.read<int32_t>("INT32 value")}};
      case ValueType::UINT64: return {type, uint64_t{reader_.read<uint64_t>("UINT64 value")}};
      case ValueType::INT64: return {type, int64_t{reader_.read<int64_t>("INT64 value")}};
      case ValueType::FLOAT32: return {type, double{reader_.read<float>("FLOAT32 value")}};
      case ValueType::FLOAT64: return {type, reader_.read<double>("FLOAT64 value")};
      case ValueType::BOOL: {
        const uint64_t at = reader_.offset();
        const uint8_t byte = reader_.read<uint8_t>("BOOL value");
        if (byte > 1) reader_.fail_at(at, "BOOL value {} is neither 0 nor 1", byte);
        return {type, byte == 1};
      }
      case ValueType::STRING: return {type, reader_.read_string("string")};
      case ValueType::ARRAY: return {type, read_array(depth)};
    }
    reader_.fail_at(reader_.offset(), "unknown value type {}", static_cast<uint32_t>(type));
  }

  Array read_array(int depth) {
    const uint64_t at = reader_.offset();
    if (depth >= kMaxArrayDepth) reader_.fail_at(at, "arrays nested deeper than {}", kMaxArrayDepth);
    const ValueType element_type = read_type();
    const uint64_t count = reader_.read<uint64_t>("array length");
    if (count > reader_.remaining() / min_encoded_bytes(element_type)) {
      reader_.fail_at(at, "array of {} {} values cannot fit in the {} bytes left", count,
                      value_type_name(element_type), reader_.remaining());
    }
    count_values(count);
    Array array{element_type, {}};
    array.items.reserve(size_t(std::min<uint64_t>(count, 1 << 16)));
    for (uint64_t i = 0; i < count; ++i) array.items.push_back(read_value(element_type, depth + 1));
    return array;
  }

  void count_values(uint64_t count) {
    if (count > kMaxMetadataValues - values_) {
      reader_.fail_at(reader_.offset(), "the file holds more than {} metadata values",
                      kMaxMetadataValues);
    }
    values_ += count;
  }

  Reader& reader_;
  uint64_t values_ = 0;
};

uint64_t alignment_from(const Value& value, const Reader& reader, uint64_t at) {
  uint64_t alignment = 0;
  if (const auto* u = std::get_if<uint64_t>(&value.data)) {
    alignment = *u;
  } else if (const auto* i = std::get_if<int64_t>(&value.data); i && *i > 0) {
    alignment = uint64_t(*i);
  } else if (!is_integer_type(value.type)) {
    reader.fail_at(at, "{} value, expected an integer", value_type_name(value.type));
  }
  if (!std::has_single_bit(alignment)) {
    reader.fail_at(at, "alignment {} is not a nonzero power of two", to_string(value));
  }
  return alignment;
}

std::string describe_type(const Value& value) {
  if (const auto* array = std::get_if<Array>(&value.data)) {
    return fmt::format("an array of {}", value_type_name(array->element_type));
  }
  return value_type_name(value.type);
}

void append_value(std::string& out, const Value& value, size_t max_items) {
  std::visit(
      [&](const auto& data) {
        using T = std::decay_t<decltype(data)>;
        if constexpr (std::is_same_v<T, uint64_t> || std::is_same_v<T, int64_t>) {
          fmt::format_to(std::back_inserter(out), "{}", data);
        } else if constexpr (std::is_same_v<T, double>) {
          // A float32 prints as its shortest float form (1e-05, not 9.99999974e-06).
          if (value.type == ValueType::FLOAT32) {
            fmt::format_to(std::back_inserter(out), "{}", float(data));
          } else {
            fmt::format_to(std::back_inserter(out), "{}", data);
          }
        } else if constexpr (std::is_same_v<T, bool>) {
          out += data ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::string>) {
          out += '"';
          out += printable(data);
          out += '"';
        } else {
          out += '[';
          const size_t shown = std::min(max_items, data.items.size());
          for (size_t i = 0; i < shown; ++i) {
            if (i > 0) out += ", ";
            append_value(out, data.items[i], max_items);
          }
          if (shown < data.items.size()) {
            fmt::format_to(std::back_inserter(out), "{}... {} more", shown > 0 ? ", " : "",
                           data.items.size() - shown);
          }
          out += ']';
        }
      },
      value.data);
}

}  // namespace

std::string printable(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const uint8_t byte = static_cast<uint8_t>(bytes[i]);
    switch (byte) {
      case '\n': out += "\\n"; ++i; continue;
      case '\t': out += "\\t"; ++i; continue;
      case '\r': out += "\\r"; ++i; continue;
      case '\\': out += "\\\\"; ++i; continue;
      case '"': out += "\\\""; ++i; continue;
      default: break;
    }
    const size_t length = utf8_sequence_length(bytes, i);
    if (length == 0 || byte < 0x20 || byte == 0x7f) {
      fmt::format_to(std::back_inserter(out), "\\x{:02x}", byte);
      ++i;
    } else {
      out.append(bytes.substr(i, length));
      i += length;
    }
  }
  return out;
}

const char* value_type_name(ValueType type) {
  switch (type) {
    case ValueType::UINT8: return "UINT8";
    case ValueType::INT8: return "INT8";
    case ValueType::UINT16: return "UINT16";
    case ValueType::INT16: return "INT16";
    case ValueType::UINT32: return "UINT32";
    case ValueType::INT32: return "INT32";
    case ValueType::FLOAT32: return "FLOAT32";
    case ValueType::BOOL: return "BOOL";
    case ValueType::STRING: return "STRING";
    case ValueType::ARRAY: return "ARRAY";
    case ValueType::UINT64: return "UINT64";
    case ValueType::INT64: return "INT64";
    case ValueType::FLOAT64: return "FLOAT64";
  }
  return "UNKNOWN";
}

std::string to_string(const Value& value, size_t max_items) {
  std::string out;
  append_value(out, value, max_items);
  return out;
}

namespace {

void register_mapping(const void* base, size_t size, const std::string& path) {
  const std::string line =
      fmt::format("kascade: error: {}: the file was truncated while in use (it is memory-mapped)\n", printable(path));
  char* message = new char[line.size()];
  std::memcpy(message, line.data(), line.size());
  for (MappedRegion& region : g_mapped) {
    uintptr_t expected = 0;
    if (region.base.compare_exchange_strong(expected, reinterpret_cast<uintptr_t>(base))) {
      region.message_length.store(line.size());
      region.message.store(message);
      region.size.store(size);
      return;
    }
  }
  delete[] message;  // more files than slots: that one is not reported
}

void unregister_mapping(const void* base) {
  for (MappedRegion& region : g_mapped)
    if (region.base.load() == reinterpret_cast<uintptr_t>(base)) {
      region.size.store(0);
      delete[] region.message.exchange(nullptr);
      region.base.store(0);
      return;
    }
}

void on_sigbus(int, siginfo_t* info, void*) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (const MappedRegion& region : g_mapped) {
    const uintptr_t base = region.base.load();
    if (base == 0 || address < base || address - base >= region.size.load()) continue;
    if (const char* message = region.message.load()) {
      [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, message, region.message_length.load());
    }
    ::_exit(1);
  }
  // Not a mapped file's page: the default action, when the access repeats.
  ::signal(SIGBUS, SIG_DFL);
}

}  // namespace

void report_truncated_files_on_sigbus() {
  struct sigaction action {};
  action.sa_sigaction = on_sigbus;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, nullptr);
}

File File::open(const std::string& path) {
  // Non-blocking, type checked before reading: a FIFO or device is refused, not waited on.
  const InputFile input = open_input_file(path);
  if (!input.is_open()) fail("{}: cannot open: {}", path, input.error());
  if (input.size() == 0) fail("{}: empty file, not a GGUF file", path);
  void* mapping = ::mmap(nullptr, size_t(input.size()), PROT_READ, MAP_PRIVATE, input.fd(), 0);
  const int map_error = errno;
  if (mapping == MAP_FAILED) fail("{}: cannot map: {}", path, std::strerror(map_error));
  // (the mapping keeps the file open when `input` closes it)

  File file;
  file.path_ = path;
  file.mapping_ = mapping;
  file.bytes_ = static_cast<const uint8_t*>(mapping);
  file.size_ = input.size();
  register_mapping(mapping, file.size_, path);
  file.parse_image(path);
  return file;
}

File File::parse(const uint8_t* bytes, size_t size, const std::string& label) {
  File file;
  file.path_ = label;
  file.owned_.assign(bytes, bytes + size);
  file.bytes_ = file.owned_.data();
  file.size_ = size;
  file.parse_image(label);
  return file;
}

File::File(File&& other) noexcept { *this = std::move(other); }

File& File::operator=(File&& other) noexcept {
  if (this == &other) return *this;
  if (mapping_ != nullptr) {
    unregister_mapping(mapping_);
    ::munmap(mapping_, size_t(size_));
  }
  path_ = std::move(other.path_);
  version_ = other.version_;
  alignment_ = other.alignment_;
  bytes_ = std::exchange(other.bytes_, nullptr);
  size_ = std::exchange(other.size_, 0);
  mapping_ = std::exchange(other.mapping_, nullptr);
  owned_ = std::move(other.owned_);  // moving a vector keeps its buffer, so pointers stay valid
  metadata_ = std::move(other.metadata_);
  metadata_index_ = std::move(other.metadata_index_);
  tensors_ = std::move(other.tensors_);
  tensor_index_ = std::move(other.tensor_index_);
  return *this;
}

File::~File() {
  if (mapping_ != nullptr) {
    unregister_mapping(mapping_);
    ::munmap(mapping_, size_t(size_));
  }
}

void File::parse_image(const std::string& label) {
  Reader reader(bytes_, size_, label);

  if (size_ < sizeof kMagic || std::memcmp(bytes_, kMagic, sizeof kMagic) != 0) {
    fail("{}: not a GGUF file (no \"GGUF\" magic at offset 0)", label);
  }
  reader.read<uint32_t>("magic");
  const uint64_t version_at = reader.offset();
  version_ = reader.read<uint32_t>("version");
  if (version_ != 2 && version_ != 3) {
    const uint32_t swapped = __builtin_bswap32(version_);
    if (swapped == 2 || swapped == 3) {
      reader.fail_at(version_at, "big-endian GGUF files are not supported");
    }
    reader.fail_at(version_at, "unsupported GGUF version {}", version_);
  }

  const uint64_t counts_at = reader.offset();
  const uint64_t tensor_count = reader.read<uint64_t>("tensor count");
  const uint64_t metadata_count = reader.read<uint64_t>("metadata count");
  if (metadata_count > reader.remaining() / kMinMetadataBytes) {
    reader.fail_at(counts_at + 8, "metadata count {} cannot fit in the {} bytes left",
                   metadata_count, reader.remaining());
  }
  if (tensor_count > (reader.remaining() - metadata_count * kMinMetadataBytes) / kMinTensorInfoBytes) {
    reader.fail_at(counts_at, "tensor count {} cannot fit in the {} bytes left", tensor_count,
                   reader.remaining());
  }

  MetadataReader metadata_reader(reader);
  metadata_.reserve(size_t(std::min<uint64_t>(metadata_count, 1 << 12)));
  for (uint64_t i = 0; i < metadata_count; ++i) {
    const uint64_t key_at = reader.offset();
    reader.set_context(fmt::format("metadata entry {}", i));
    std::string key = reader.read_string("key");
    if (key.empty()) reader.fail_at(key_at, "empty key");
    reader.set_context(fmt::format("metadata key '{}'", name_for_message(key)));
    if (key.size() > kMaxKeyBytes) reader.fail_at(key_at, "key longer than {} bytes", kMaxKeyBytes);
    if (metadata_index_.count(key) != 0) reader.fail_at(key_at, "duplicate key");
    const ValueType type = metadata_reader.read_type();
    const uint64_t value_at = reader.offset();
    Value value = metadata_reader.read_entry(type);
    if (key == "general.alignment") alignment_ = alignment_from(value, reader, value_at);
    metadata_index_.emplace(key, metadata_.size());
    metadata_.emplace_back(std::move(key), std::move(value));
  }

  // Tensor infos. Each info's offset is kept for messages about later checks.
  std::vector<uint64_t> info_offsets;
  tensors_.reserve(size_t(std::min<uint64_t>(tensor_count, 1 << 12)));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    const uint64_t info_at = reader.offset();
    reader.set_context(fmt::format("tensor {}", i));
    TensorInfo info;
    info.name = reader.read_string("name");
    if (info.name.empty()) reader.fail_at(info_at, "empty name");
    reader.set_context(fmt::format("tensor '{}'", name_for_message(info.name)));
    if (tensor_index_.count(info.name) != 0) reader.fail_at(info_at, "duplicate tensor name");
    const uint64_t dims_at = reader.offset();
    const uint32_t n_dims = reader.read<uint32_t>("dimension count");
    if (n_dims > kMaxDims) {
      reader.fail_at(dims_at, "{} dimensions, at most {} are supported", n_dims, kMaxDims);
    }
    uint64_t n_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim_at = reader.offset();
      const uint64_t dim = reader.read<uint64_t>("dimension");
      if (dim == 0 || dim > uint64_t(std::numeric_limits<int64_t>::max())) {
        reader.fail_at(dim_at, "dimension {} is {}, must be positive", d, int64_t(dim));
      }
      if (n_elements > uint64_t(std::numeric_limits<int64_t>::max()) / dim) {
        reader.fail_at(dim_at, "element count overflows at dimension {}", d);
      }
      n_elements *= dim;
      info.dims.push_back(int64_t(dim));
    }
    const uint64_t type_at = reader.offset();
    const uint32_t type_id = reader.read<uint32_t>("tensor type");
    const TypeTraits* traits = find_type_traits(type_id);
    if (traits == nullptr) reader.fail_at(type_at, "unknown tensor type id {}", type_id);
    info.type = static_cast<TensorType>(type_id);
    info.offset = reader.read<uint64_t>("data offset");
    const uint64_t row_length = info.dims.empty() ? 1 : uint64_t(info.dims[0]);
    if (row_length % uint64_t(traits->block_elements) != 0) {
      reader.fail_at(type_at, "row length {} is not a multiple of the {} block size {}",
                     row_length, traits->name, traits->block_elements);
    }
    const uint64_t blocks = n_elements / uint64_t(traits->block_elements);
    if (blocks > std::numeric_limits<uint64_t>::max() / uint64_t(traits->block_bytes)) {
      reader.fail_at(type_at, "byte size overflows");
    }
    info.n_elements = n_elements;
    info.n_bytes = blocks * uint64_t(traits->block_bytes);
    info.data = nullptr;
    tensor_index_.emplace(info.name, tensors_.size());
    tensors_.push_back(std::move(info));
    info_offsets.push_back(info_at);
  }
  reader.set_context("");

  // The data section starts at the next multiple of the alignment.
  const uint64_t header_end = reader.offset();
  if (header_end > std::numeric_limits<uint64_t>::max() - (alignment_ - 1)) {
    reader.fail_at(header_end, "data section start overflows with alignment {}", alignment_);
  }
  const uint64_t data_start = (header_end + alignment_ - 1) / alignment_ * alignment_;
  const uint64_t data_bytes = data_start <= size_ ? size_ - data_start : 0;

  for (size_t i = 0; i < tensors_.size(); ++i) {
    TensorInfo& info = tensors_[i];
    reader.set_context(fmt::format("tensor '{}'", name_for_message(info.name)));
    if (info.offset % alignment_ != 0) {
      reader.fail_at(info_offsets[i], "data offset {} is not a multiple of the alignment {}",
                     info.offset, alignment_);
    }
    if (info.offset > data_bytes || info.n_bytes > data_bytes - info.offset) {
      reader.fail_at(info_offsets[i],
                     "{} bytes of data at data offset {} run past the end of the file "
                     "({} bytes, data section at {})",
                     info.n_bytes, info.offset, size_, data_start);
    }
    info.data = bytes_ + data_start + info.offset;
  }

  std::vector<size_t> by_offset(tensors_.size());
  std::iota(by_offset.begin(), by_offset.end(), size_t{0});
  std::sort(by_offset.begin(), by_offset.end(),
            [&](size_t a, size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const TensorInfo& before = tensors_[by_offset[k - 1]];
    const TensorInfo& after = tensors_[by_offset[k]];
    if (before.offset + before.n_bytes > after.offset) {
      reader.set_context(fmt::format("tensor '{}'", name_for_message(after.name)));
      reader.fail_at(info_offsets[by_offset[k]], "data overlaps the data of tensor '{}'",
                     name_for_message(before.name));
    }
  }
}

const Value* File::find(const std::string& key) const {
  const auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

namespace {

const Value& require(const File& file, const std::string& key) {
  const Value* value = file.find(key);
  if (value == nullptr) fail("{}: metadata key '{}' is missing", file.path(), key);
  return *value;
}

[[noreturn]] void fail_type(const File& file, const std::string& key, const Value& value,
                            std::string_view expected) {
  fail("{}: metadata key '{}' is {}, expected {}", file.path(), key, describe_type(value),
       expected);
}

const Array& require_array(const File& file, const std::string& key, std::string_view expected) {
  const Value& value = require(file, key);
  const Array* array = std::get_if<Array>(&value.data);
  if (array == nullptr) fail_type(file, key, value, expected);
  return *array;
}

// Integer conversions shared by scalar getters and array getters; `where`
// names the key (and item) in messages.
uint64_t to_uint(const File& file, const std::string& where, const Value& value) {
  if (const auto* u = std::get_if<uint64_t>(&value.data)) return *u;
  if (const auto* i = std::get_if<int64_t>(&value.data)) {
    if (*i < 0) fail("{}: metadata key '{}' is {}, expected a non-negative value", file.path(), where, *i);
    return uint64_t(*i);
  }
  fail_type(file, where, value, "an unsigned integer");
}

int64_t to_int(const File& file, const std::string& where, const Value& value) {
  if (const auto* i = std::get_if<int64_t>(&value.data)) return *i;
  if (const auto* u = std::get_if<uint64_t>(&value.data)) {
    if (*u > uint64_t(std::numeric_limits<int64_t>::max())) {
      fail("{}: metadata key '{}' is {}, too large for a signed 64-bit integer", file.path(), where, *u);
    }
    return int64_t(*u);
  }
  fail_type(file, where, value, "an integer");
}

double to_float(const File& file, const std::string& where, const Value& value) {
  if (const auto* f = std::get_if<double>(&value.data)) return *f;
  if (const auto* u = std::get_if<uint64_t>(&value.data)) return double(*u);
  if (const auto* i = std::get_if<int64_t>(&value.data)) return double(*i);
  fail_type(file, where, value, "a number");
}

std::string item_name(const std::string& key, size_t index) {
  return fmt::format("{}[{}]", key, index);
}

}  // namespace

std::string File::get_string(const std::string& key) const {
  const Value& value = require(*this, key);
  const auto* text = std::get_if<std::string>(&value.data);
  if (text == nullptr) fail_type(*this, key, value, "STRING");
  return *text;
}

uint64_t File::get_uint(const std::string& key) const { return to_uint(*this, key, require(*this, key)); }

int64_t File::get_int(const std::string& key) const { return to_int(*this, key, require(*this, key)); }

double File::get_float(const std::string& key) const {
  return to_float(*this, key, require(*this, key));
}

bool File::get_bool(const std::string& key) const {
  const Value& value = require(*this, key);
  const auto* flag = std::get_if<bool>(&value.data);
  if (flag == nullptr) fail_type(*this, key, value, "BOOL");
  return *flag;
}

std::vector<std::string> File::get_string_array(const std::string& key) const {
  const Array& array = require_array(*this, key, "an array of STRING");
  if (array.element_type != ValueType::STRING) {
    fail_type(*this, key, require(*this, key), "an array of STRING");
  }
  std::vector<std::string> result;
  result.reserve(array.items.size());
  for (const Value& item : array.items) result.push_back(std::get<std::string>(item.data));
  return result;
}

std::vector<double> File::get_float_array(const std::string& key) const {
  const Array& array = require_array(*this, key, "an array of numbers");
  std::vector<double> result;
  result.reserve(array.items.size());
  for (size_t i = 0; i < array.items.size(); ++i) {
    result.push_back(to_float(*this, item_name(key, i), array.items[i]));
  }
  return result;
}

std::vector<int64_t> File::get_int_array(const std::string& key) const {
  const Array& array = require_array(*this, key, "an array of integers");
  std::vector<int64_t> result;
  result.reserve(array.items.size());
  for (size_t i = 0; i < array.items.size(); ++i) {
    result.push_back(to_int(*this, item_name(key, i), array.items[i]));
  }
  return result;
}

std::string File::get_string(const std::string& key, const std::string& fallback) const {
  return has(key) ? get_string(key) : fallback;
}

uint64_t File::get_uint(const std::string& key, uint64_t fallback) const {
  return has(key) ? get_uint(key) : fallback;
}

double File::get_float(const std::string& key, double fallback) const {
  return has(key) ? get_float(key) : fallback;
}

bool File::get_bool(const std::string& key, bool fallback) const {
  return has(key) ? get_bool(key) : fallback;
}

const TensorInfo* File::find_tensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& File::tensor(const std::string& name) const {
  const TensorInfo* info = find_tensor(name);
  if (info == nullptr) fail("{}: tensor '{}' not found", path_, name);
  return *info;
}

}  // namespace kascade::gguf
