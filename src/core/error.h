// Error type for everything that comes from outside the program (files, flags,
// requests). Messages are one line and say what is wrong and where; the CLI
// prints them as they are and exits non-zero. Internal invariants use assert.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace kascade {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace kascade
