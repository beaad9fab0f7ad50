#include "core/file_io.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "core/error.h"

namespace kascade {
namespace fs = std::filesystem;

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISDIR(mode)) return "a directory";
  return "not a plain file";
}

// Waits until a read of `fd` has data or the end to report; false on an
// error (errno set). A FIFO opened without blocking reads as ended until a
// writer has come; poll waits for one, as a blocking open would.
bool wait_readable(int fd) {
  pollfd entry{fd, POLLIN, 0};
  while (::poll(&entry, 1, -1) < 0)
    if (errno != EINTR) return false;
  return true;
}

// Reads until end of file or until more than max_bytes have arrived; false on
// a read error (errno set).
bool read_up_to(int fd, uint64_t max_bytes, std::string& out, bool& over) {
  over = false;
  char buffer[1 << 16];
  for (;;) {
    if (!wait_readable(fd)) return false;
    const uint64_t room = max_bytes - std::min<uint64_t>(max_bytes, out.size()) + 1;
    const ssize_t n = ::read(fd, buffer, size_t(std::min<uint64_t>(sizeof buffer, room)));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;
    }
    if (n == 0) return true;
    out.append(buffer, size_t(n));
    if (out.size() > max_bytes) {
      over = true;
      out.resize(size_t(max_bytes));
      return true;
    }
  }
}

bool exists_here(const fs::path& path) {
  struct stat status;
  return ::lstat(path.c_str(), &status) == 0;
}

// Creates and removes a temporary where `path`'s would go; "" or the reason it cannot.
std::string probe_temporary(const std::string& path) {
  const std::string temporary = temporary_path_for(path);
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return std::strerror(errno);
  ::close(fd);
  ::unlink(temporary.c_str());
  return "";
}

// Writes `bytes` to a new file at `temporary`; "" or the reason it failed
// (the partial file is then removed).
std::string write_new_file(const std::string& temporary, std::string_view bytes) {
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) return std::strerror(errno);
  std::string problem;
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      problem = std::strerror(errno);
      break;
    }
    done += size_t(n);
  }
  if (::close(fd) != 0 && problem.empty()) problem = std::strerror(errno);
  if (!problem.empty()) ::unlink(temporary.c_str());
  return problem;
}

fs::path directory_of(const std::string& path) {
  fs::path dir = fs::path(path).parent_path();
  return dir.empty() ? fs::path(".") : dir;
}

// `path` without a trailing separator ("out/" -> "out"), so that its parent is
// the directory that holds it.
fs::path without_trailing_separator(const std::string& path) {
  fs::path p(path);
  while (!p.has_filename() && p.has_relative_path()) p = p.parent_path();
  return p;
}

}  // namespace

// ---------------------------------------------------------------------------
// Input.

InputFile::InputFile(InputFile&& other) noexcept { *this = std::move(other); }

InputFile& InputFile::operator=(InputFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    error_ = std::move(other.error_);
  }
  return *this;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

InputFile open_input_file(const std::string& path, InputKinds kinds) {
  InputFile file;
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    file.error_ = std::strerror(errno);
    return file;
  }
  struct stat status;
  if (::fstat(fd, &status) != 0) {
    file.error_ = std::strerror(errno);
  } else if (S_ISDIR(status.st_mode)) {
    file.error_ = std::strerror(EISDIR);
  } else if (S_ISFIFO(status.st_mode) && kinds == InputKinds::kRegularFilesAndPipes) {
    file.fd_ = fd;
    return file;
  } else if (!S_ISREG(status.st_mode)) {
    file.error_ = fmt::format("not a regular file ({})", file_kind(status.st_mode));
  } else {
    // Regular files ignore O_NONBLOCK; clear it all the same, so reads are plain reads.
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    file.fd_ = fd;
    file.size_ = uint64_t(status.st_size);
    return file;
  }
  ::close(fd);
  return file;
}

std::optional<std::string> read_file_up_to(const std::string& path, std::string_view what, uint64_t max_bytes,
                                           InputKinds kinds) {
  const InputFile file = open_input_file(path, kinds);
  if (!file.is_open()) fail("cannot read {} '{}': {}", what, path, file.error());
  if (file.size() > max_bytes) return std::nullopt;
  std::string bytes;
  bytes.reserve(size_t(file.size()));
  bool over = false;
  if (!read_up_to(file.fd(), max_bytes, bytes, over)) fail("cannot read {} '{}': {}", what, path, std::strerror(errno));
  if (over) return std::nullopt;  // a pipe held more, or the file grew while we read
  return bytes;
}

std::string read_file(const std::string& path, std::string_view what) {
  return *read_file_up_to(path, what, UINT64_MAX - 1);
}

std::optional<std::string> read_stream_up_to(int fd, std::string_view what, uint64_t max_bytes) {
  std::string bytes;
  bool over = false;
  if (!read_up_to(fd, max_bytes, bytes, over)) fail("cannot read {}: {}", what, std::strerror(errno));
  if (over) return std::nullopt;
  return bytes;
}

// ---------------------------------------------------------------------------
// Output.

std::string temporary_path_for(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  const std::string name = fmt::format(".kascade-{}-{}.tmp", ::getpid(), counter.fetch_add(1));
  const fs::path dir = without_trailing_separator(path).parent_path();
  return dir.empty() ? name : (dir / name).string();
}

void write_file(const std::string& path, std::string_view bytes, std::string_view what) {
  OutputSet outputs;
  outputs.write_file(path, bytes, what);
  outputs.commit();
}

void check_output_file(const std::string& path, std::string_view flag, std::initializer_list<std::string> inputs) {
  std::error_code error;
  if (path.empty()) fail("{} needs a file name", flag);
  if (fs::is_directory(path, error)) fail("{} '{}' is a directory", flag, path);
  // A device or FIFO would be replaced by a regular file (or, written to, swallow the output).
  if (fs::exists(path, error) && !fs::is_regular_file(path, error))
    fail("{} '{}' is not a regular file: refusing to replace it", flag, path);
  const fs::path name = fs::path(path).filename();
  if (name.empty()) fail("{} '{}' names a directory, not a file", flag, path);
  const fs::path dir = directory_of(path);
  if (!fs::exists(dir, error)) fail("{} '{}': directory '{}' does not exist", flag, path, dir.string());
  if (!fs::is_directory(dir, error)) fail("{} '{}': '{}' is not a directory", flag, path, dir.string());
  if (access(dir.c_str(), W_OK) != 0) fail("{} '{}': directory '{}' is not writable", flag, path, dir.string());
  const long name_max = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  if (name_max > 0 && name.native().size() > size_t(name_max))
    fail("{} '{}': the file name is {} bytes long, more than the {} its file system allows", flag, path,
         name.native().size(), name_max);
  if (fs::exists(path, error)) {
    if (access(path.c_str(), W_OK) != 0) fail("{} '{}' is not writable", flag, path);
    for (const std::string& input : inputs)
      if (!input.empty() && fs::equivalent(path, input, error))
        fail("{} '{}' is the input file '{}': refusing to overwrite it", flag, path, input);
  }
  // What the write will do first: create its temporary (a path too long, a
  // read-only file system or no inodes fail here, before the work).
  const std::string problem = probe_temporary(path);
  if (!problem.empty()) fail("{} '{}': cannot create a file in '{}': {}", flag, path, dir.string(), problem);
}

void check_output_dir(const std::string& dir, std::string_view flag, std::initializer_list<std::string> inputs) {
  std::error_code error;
  if (dir.empty()) fail("{} needs a directory name", flag);
  const fs::path target = without_trailing_separator(dir);
  if (exists_here(target)) {
    if (!fs::is_directory(target, error))
      fail("cannot create output directory '{}' ({}): it exists and is not a directory", dir, flag);
    const std::string problem = probe_temporary((target / "probe").string());
    if (!problem.empty()) fail("output directory '{}' ({}): cannot create a file in it: {}", dir, flag, problem);
    const fs::path resolved = fs::canonical(target, error);
    if (error) fail("cannot use output directory '{}' ({}): {}", dir, flag, error.message());
    for (const std::string& input : inputs) {
      if (input.empty()) continue;
      const fs::path in = fs::weakly_canonical(input, error);
      if (error) continue;
      // `resolved` is a prefix of the input, component by component.
      auto [end, unused] = std::mismatch(resolved.begin(), resolved.end(), in.begin(), in.end());
      if (end == resolved.end())
        fail("output directory '{}' ({}) holds the input file '{}': refusing to write there", dir, flag, input);
    }
    return;
  }
  // Created at the end: its nearest existing ancestor must let it be.
  fs::path ancestor = fs::absolute(target, error).lexically_normal();
  while (!ancestor.empty() && !exists_here(ancestor) && ancestor.has_relative_path()) ancestor = ancestor.parent_path();
  if (!fs::is_directory(ancestor, error))
    fail("cannot create output directory '{}' ({}): '{}': {}", dir, flag, ancestor.string(), std::strerror(ENOTDIR));
  const std::string problem = probe_temporary((ancestor / "probe").string());
  if (!problem.empty())
    fail("cannot create output directory '{}' ({}): cannot create a file in '{}': {}", dir, flag, ancestor.string(),
         problem);
  const long name_max = ::pathconf(ancestor.c_str(), _PC_NAME_MAX);
  for (const fs::path& part : target)
    if (name_max > 0 && part.native().size() > size_t(name_max))
      fail("cannot create output directory '{}' ({}): a name in it is longer than the {} bytes its file system allows",
           dir, flag, name_max);
}

OutputSet::~OutputSet() { discard(); }

void OutputSet::discard() noexcept {
  std::error_code error;
  for (const Pending& p : pending_) fs::remove_all(p.temporary, error);
  pending_.clear();
  for (auto it = created_parents_.rbegin(); it != created_parents_.rend(); ++it) fs::remove(*it, error);  // if empty
  created_parents_.clear();
}

void OutputSet::write_file(const std::string& path, std::string_view bytes, std::string_view what) {
  const std::string temporary = temporary_path_for(path);
  const std::string problem = write_new_file(temporary, bytes);
  if (!problem.empty()) fail("cannot write {} '{}': {}", what, path, problem);
  pending_.push_back({temporary, path, std::string(what), false});
}

std::string OutputSet::stage_directory(const std::string& dir, std::string_view what) {
  const fs::path target = without_trailing_separator(dir);
  std::error_code error;
  std::string staging;
  if (exists_here(target)) {
    if (!fs::is_directory(target, error)) fail("cannot write {} '{}': {}", what, dir, std::strerror(ENOTDIR));
    staging = temporary_path_for((target / "staging").string());  // hidden inside: the same file system
  } else {
    // Beside the target, in the parents made here (removed again if nothing is committed).
    std::vector<fs::path> missing;
    for (fs::path p = target.parent_path(); !p.empty() && !exists_here(p); p = p.parent_path()) {
      missing.push_back(p);
      if (!p.has_relative_path()) break;
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
      if (::mkdir(it->c_str(), 0777) != 0) fail("cannot write {} '{}': {}", what, dir, std::strerror(errno));
      created_parents_.push_back(it->string());
    }
    staging = temporary_path_for(target.string());
  }
  if (::mkdir(staging.c_str(), 0777) != 0) fail("cannot write {} '{}': {}", what, dir, std::strerror(errno));
  pending_.push_back({staging, target.string(), std::string(what), true});
  return staging;
}

void OutputSet::commit() {
  std::error_code error;
  // Every target first: one that a rename cannot replace (a directory where a
  // file goes) fails here, before anything has moved.
  const auto check_replaceable = [](const fs::path& target, const std::string& what) {
    struct stat status;
    if (::lstat(target.c_str(), &status) == 0 && S_ISDIR(status.st_mode))
      fail("cannot write {} '{}': {}", what, target.string(), std::strerror(EISDIR));
  };
  for (const Pending& p : pending_) {
    if (!p.directory) {
      check_replaceable(p.target, p.what);
    } else if (exists_here(p.target)) {
      for (const fs::directory_entry& entry : fs::directory_iterator(p.temporary, error))
        check_replaceable(fs::path(p.target) / entry.path().filename(), p.what);
    }
  }
  while (!pending_.empty()) {
    const Pending p = pending_.front();
    if (!p.directory || !exists_here(p.target)) {
      if (std::rename(p.temporary.c_str(), p.target.c_str()) != 0)
        fail("cannot write {} '{}': {}", p.what, p.target, std::strerror(errno));
    } else {
      for (const fs::directory_entry& entry : fs::directory_iterator(p.temporary, error)) {
        const fs::path to = fs::path(p.target) / entry.path().filename();
        if (std::rename(entry.path().c_str(), to.c_str()) != 0)
          fail("cannot write {} '{}': {}", p.what, to.string(), std::strerror(errno));
      }
      if (error) fail("cannot write {} '{}': {}", p.what, p.target, error.message());
      fs::remove(p.temporary, error);
    }
    pending_.erase(pending_.begin());
  }
  created_parents_.clear();  // now holding what was committed
}

}  // namespace kascade
