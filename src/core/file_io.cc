#include "core/file_io.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

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

void write_file(const std::string& path, std::string_view bytes, std::string_view what) {
  // Beside the target (rename does not cross filesystems), unique per process.
  const std::string temporary = path + ".tmp-" + std::to_string(getpid());
  std::string problem;
  if (std::FILE* file = std::fopen(temporary.c_str(), "wb")) {
    if (std::fwrite(bytes.data(), 1, bytes.size(), file) != bytes.size() || std::fflush(file) != 0)
      problem = std::strerror(errno);
    if (std::fclose(file) != 0 && problem.empty()) problem = std::strerror(errno);
    if (problem.empty() && std::rename(temporary.c_str(), path.c_str()) != 0) problem = std::strerror(errno);
    if (!problem.empty()) std::remove(temporary.c_str());
  } else {
    problem = std::strerror(errno);
  }
  if (!problem.empty()) fail("cannot write {} '{}': {}", what, path, problem);
}

void check_output_file(const std::string& path, std::string_view flag, std::initializer_list<std::string> inputs) {
  namespace fs = std::filesystem;
  std::error_code error;
  if (path.empty()) fail("{} needs a file name", flag);
  if (fs::is_directory(path, error)) fail("{} '{}' is a directory", flag, path);
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::exists(dir, error)) fail("{} '{}': directory '{}' does not exist", flag, path, dir.string());
  if (!fs::is_directory(dir, error)) fail("{} '{}': '{}' is not a directory", flag, path, dir.string());
  if (access(dir.c_str(), W_OK) != 0) fail("{} '{}': directory '{}' is not writable", flag, path, dir.string());
  if (fs::exists(path, error)) {
    if (access(path.c_str(), W_OK) != 0) fail("{} '{}' is not writable", flag, path);
    for (const std::string& input : inputs)
      if (!input.empty() && fs::equivalent(path, input, error))
        fail("{} '{}' is the input file '{}': refusing to overwrite it", flag, path, input);
  }
}

}  // namespace kascade
