// Process memory as the kernel reports it (Linux /proc/self/status), for the
// summaries that the CLI and the benchmarks print.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kascade {

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
