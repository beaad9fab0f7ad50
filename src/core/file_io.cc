#include "core/read_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace kascade {
namespace {

struct CloseFile {
  void operator()(std::FILE* file) const { std::fclose(file); }
};

}  // namespace

std::string read_file(const std::string& path, std::string_view what) {
  const std::unique_ptr<std::FILE, CloseFile> file(std::fopen(path.c_str(), "rb"));
  if (!file) fail("cannot read {} '{}': {}", what, path, std::strerror(errno));
  std::string bytes;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) bytes.append(buffer, n);
  // fread sets errno on failure (POSIX), e.g. EISDIR for a directory.
  if (std::ferror(file.get())) fail("cannot read {} '{}': {}", what, path, std::strerror(errno));
  return bytes;
}

}  // namespace kascade
