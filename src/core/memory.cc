// Reads the kernel's memory counters for this process.
#include "core/memory.h"

#include <sys/mman.h>

#include <charconv>
#include <utility>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace kascade {

namespace {

constexpr const char* kStatusPath = "/proc/self/status";

uint64_t read_status_field_bytes(std::string_view field) {
  std::ifstream file(kStatusPath);
  if (!file) fail("cannot read {} to measure memory", kStatusPath);
  std::stringstream text;
  text << file.rdbuf();
  return parse_status_field_bytes(text.str(), field);
}

}  // namespace

LargePageBuffer::LargePageBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail("cannot allocate {}", format_bytes(bytes));
  madvise(p, bytes, MADV_HUGEPAGE);  // a hint: without it the buffer still works
  data_ = static_cast<uint8_t*>(p);
}

LargePageBuffer::~LargePageBuffer() {
  if (data_) munmap(data_, size_);
}

LargePageBuffer::LargePageBuffer(LargePageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

LargePageBuffer& LargePageBuffer::operator=(LargePageBuffer&& other) noexcept {
  if (this != &other) {
    if (data_) munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

uint64_t parse_status_field_bytes(std::string_view status_text, std::string_view field) {
  size_t line_start = 0;
  while (line_start < status_text.size()) {
    size_t line_end = status_text.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = status_text.size();
    const std::string_view line = status_text.substr(line_start, line_end - line_start);
    line_start = line_end + 1;
    if (!line.starts_with(field) || line.size() <= field.size() || line[field.size()] != ':') continue;

    std::string_view value = line.substr(field.size() + 1);
    value.remove_prefix(std::min(value.find_first_not_of(" \t"), value.size()));
    uint64_t kilobytes = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), kilobytes);
    if (error != std::errc() || std::string_view(end, value.data() + value.size()) != " kB") {
      fail("{}: field {} is not of the form '<number> kB': '{}'", kStatusPath, field, line);
    }
    return kilobytes * 1024;
  }
  fail("{}: field {} not found", kStatusPath, field);
}

uint64_t peak_resident_bytes() { return read_status_field_bytes("VmHWM"); }

uint64_t current_resident_bytes() { return read_status_field_bytes("VmRSS"); }

std::string format_bytes(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = double(bytes) / 1024.0;
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  const int decimals = value < 10.0 ? 2 : value < 100.0 ? 1 : 0;
  return fmt::format("{:.{}f} {}", value, decimals, kUnits[unit]);
}

}  // namespace kascade
