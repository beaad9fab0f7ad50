// Process memory as the kernel reports it (Linux /proc/self/status), for the
// summaries that the CLI and the benchmarks print.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kascade {

// A zero-filled buffer of anonymous memory that asks the kernel for 2 MiB
// pages (MADV_HUGEPAGE): long streaming reads, like decode attention over the
// KV cache, then miss the TLB 512x less often. Pages are touched lazily, so
// an unused tail costs no resident memory.
class LargePageBuffer {
 public:
  LargePageBuffer() = default;
  explicit LargePageBuffer(size_t bytes);
  ~LargePageBuffer();
  LargePageBuffer(LargePageBuffer&& other) noexcept;
  LargePageBuffer& operator=(LargePageBuffer&& other) noexcept;
  LargePageBuffer(const LargePageBuffer&) = delete;
  LargePageBuffer& operator=(const LargePageBuffer&) = delete;

  uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Peak resident set size (VmHWM) of this process, in bytes.
uint64_t peak_resident_bytes();

// Current resident set size (VmRSS) of this process, in bytes.
uint64_t current_resident_bytes();

// Reads one "Name:  1234 kB" field from text in the format of /proc/self/status.
// Throws kascade::Error if the field is missing or malformed.
uint64_t parse_status_field_bytes(std::string_view status_text, std::string_view field);

// "812 B", "1.50 KiB", "97.3 MiB", "215 MiB": binary units, three significant digits.
std::string format_bytes(uint64_t bytes);

}  // namespace kascade
