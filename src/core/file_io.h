// Whole-file input and output with errors that name the file: a missing,
// unreadable or directory path is a one-line Error. Inputs are opened without
// blocking and must be regular files (a FIFO would hang the open, /dev/zero
// would never end), except where a text is read once, bounded (a prompt):
// there pipes and FIFOs are read too, as `-f /dev/stdin` and `-f <(cmd)`
// give them. Outputs are checked before any work, written in full to
// a temporary and renamed into place, so a failed write (disk full, killed
// process) never leaves a truncated file where a good one was; OutputSet
// makes several outputs (files and directories of files) all-or-nothing.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kascade {

// What an input may be: a regular file (mapped, or read more than once:
// models, profiles, dev sets), or also a pipe or FIFO (read once, bounded).
enum class InputKinds { kRegularFiles, kRegularFilesAndPipes };

// A file opened for reading by open_input_file: owns the descriptor.
class InputFile {
 public:
  InputFile() = default;
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&& other) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  bool is_open() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  uint64_t size() const { return size_; }  // at the time of the open; 0 for a pipe
  // Why the open failed: the system's words ("No such file or directory",
  // "Is a directory") or "not a regular file (a FIFO)".
  const std::string& error() const { return error_; }

 private:
  friend InputFile open_input_file(const std::string& path, InputKinds kinds);
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string error_;
};

// Opens `path` for reading without ever blocking: the open is non-blocking
// and the file type is checked with fstat before anything is read, so a
// socket, terminal or device (and a pipe or FIFO, unless `kinds` takes them)
// is refused instead of waited on. A pipe or FIFO stays non-blocking; the
// reads below wait for its writer. Every reader of a named input (models,
// prompts, profiles, dev sets, haystacks) goes through here. Check
// is_open(); error() says why not.
InputFile open_input_file(const std::string& path, InputKinds kinds = InputKinds::kRegularFiles);

// The file's bytes. `what` names the file in errors, e.g. "prompt file":
// "cannot read prompt file 'notes': Is a directory".
std::string read_file(const std::string& path, std::string_view what);

// At most `max_bytes` of the file: nullopt when it holds more (the size is
// checked before reading, and reading stops at max_bytes + 1). Errors as
// read_file. A FIFO with no writer is waited on, as `cat` waits for one.
std::optional<std::string> read_file_up_to(const std::string& path, std::string_view what, uint64_t max_bytes,
                                           InputKinds kinds = InputKinds::kRegularFiles);

// At most `max_bytes` read from the open descriptor (a pipe, a terminal):
// nullopt when there is more, having read only max_bytes + 1. Throws Error
// "cannot read <what>: <reason>" on a read error.
std::optional<std::string> read_stream_up_to(int fd, std::string_view what, uint64_t max_bytes);

// The name write_file and OutputSet write `path` under before renaming it:
// a short hidden name in the same directory, unique in this process, so any
// target name the file system accepts also works for its temporary.
std::string temporary_path_for(const std::string& path);

// Writes `bytes` to a temporary file beside `path`, then renames it over
// `path`. On any failure the temporary is removed, `path` is untouched and an
// Error says "cannot write <what> '<path>': <reason>".
void write_file(const std::string& path, std::string_view bytes, std::string_view what);

// Checks, before any work, that an output file can be created or replaced:
// a name the file system accepts, not a directory or other non-regular file
// (a device would be replaced by a regular file), its directory exists and a
// temporary can be created there, and it is not (or does not resolve,
// through links, to) one of `inputs`. Errors name `flag`.
void check_output_file(const std::string& path, std::string_view flag, std::initializer_list<std::string> inputs = {});

// The same for an output directory, which is created only when the outputs
// are written (OutputSet::stage_directory): it is a directory or can be
// created (its nearest existing ancestor is a writable directory), files can
// be created in it, and it is not and does not hold (at any depth) one of
// `inputs`. Errors name `flag`.
void check_output_dir(const std::string& dir, std::string_view flag, std::initializer_list<std::string> inputs = {});

// Outputs written all-or-nothing. Each file is written in full to a
// temporary beside its target, and each output directory is filled in a
// staging directory (beside it when it does not exist yet, hidden inside it
// when it does); only commit() puts them in place, by renames that need no
// space. Destroying the set without commit() removes every temporary, so a
// failure on any output leaves every earlier file as it was and creates no
// directory.
class OutputSet {
 public:
  OutputSet() = default;
  OutputSet(const OutputSet&) = delete;
  OutputSet& operator=(const OutputSet&) = delete;
  ~OutputSet();

  // Writes the temporary of `path`; errors as write_file.
  void write_file(const std::string& path, std::string_view bytes, std::string_view what);
  // An empty staging directory whose files commit() moves into `dir`
  // (renaming the whole staging directory when `dir` does not exist).
  std::string stage_directory(const std::string& dir, std::string_view what);
  // Renames everything into place. Every target is checked first (a
  // directory where a file goes fails before anything moves); throws Error
  // naming the output that failed.
  void commit();

 private:
  struct Pending {
    std::string temporary, target, what;
    bool directory = false;
  };
  void discard() noexcept;

  std::vector<Pending> pending_;
  std::vector<std::string> created_parents_;  // made for staging directories, deepest last
};

}  // namespace kascade
