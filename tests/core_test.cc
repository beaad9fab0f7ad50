// Tests for the core helpers: memory counters, stopwatch, progress bar, the
// model cache location, whole-file reads, and output checks and writes.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <chrono>
#include <vector>

#include "core/error.h"
#include "core/file_io.h"
#include "core/memory.h"
#include "core/model_cache.h"
#include "core/progress.h"
#include "core/timer.h"

namespace kascade {
namespace {

TEST(Memory, ParsesStatusFields) {
  const std::string status =
      "Name:\tcore_test\nVmPeak:\t  200000 kB\nVmHWM:\t    5120 kB\nVmRSS:\t    4096 kB\n";
  EXPECT_EQ(parse_status_field_bytes(status, "VmHWM"), 5120u * 1024);
  EXPECT_EQ(parse_status_field_bytes(status, "VmRSS"), 4096u * 1024);
  // "VmHWM" must not match a longer field name that merely starts with it.
  EXPECT_EQ(parse_status_field_bytes("VmHWMX:\t1 kB\nVmHWM:\t2 kB\n", "VmHWM"), 2048u);
}

TEST(Memory, RejectsMissingOrMalformedFields) {
  EXPECT_THROW(parse_status_field_bytes("VmRSS:\t10 kB\n", "VmHWM"), Error);
  EXPECT_THROW(parse_status_field_bytes("VmHWM:\tlots kB\n", "VmHWM"), Error);
  EXPECT_THROW(parse_status_field_bytes("VmHWM:\t10 MB\n", "VmHWM"), Error);
  try {
    parse_status_field_bytes("", "VmHWM");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("VmHWM"), std::string::npos) << error.what();
  }
}

TEST(Memory, PeakFollowsATouchedAllocation) {
  const uint64_t before = current_resident_bytes();
  EXPECT_GT(before, 0u);
  constexpr size_t kBytes = 64u << 20;
  std::vector<char> block(kBytes);
  std::memset(block.data(), 1, block.size());  // touch every page so it is resident
  const uint64_t during = current_resident_bytes();
  EXPECT_GE(during, before + kBytes * 9 / 10);
  EXPECT_GE(peak_resident_bytes(), during);
  // Keep the block alive past the measurements.
  EXPECT_EQ(block[kBytes / 2], 1);
}

TEST(Memory, FormatsBytes) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.00 KiB");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(uint64_t(97.3 * 1024 * 1024)), "97.3 MiB");
  EXPECT_EQ(format_bytes(215ull << 20), "215 MiB");
  EXPECT_EQ(format_bytes(2ull << 30), "2.00 GiB");
}

TEST(Stopwatch, MeasuresASleep) {
  Stopwatch stopwatch;
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const double elapsed = stopwatch.seconds();
  EXPECT_GE(elapsed, 0.029);
  EXPECT_LT(elapsed, 5.0);
  EXPECT_NEAR(stopwatch.milliseconds(), stopwatch.seconds() * 1e3, 5.0);
  stopwatch.restart();
  EXPECT_LT(stopwatch.seconds(), elapsed);
}

TEST(Progress, FormatsDurations) {
  EXPECT_EQ(format_duration(0.42), "0.4s");
  EXPECT_EQ(format_duration(42.0), "42s");
  EXPECT_EQ(format_duration(187.0), "3m07s");
  EXPECT_EQ(format_duration(2 * 3600 + 5 * 60 + 10), "2h05m");
}

TEST(Progress, FormatsLines) {
  // 5 of 10 in 2 s: half the bar, 2.50 tok/s, 5 left at that rate = 2 s.
  EXPECT_EQ(format_progress_line("prefill", "tok", 5, 10, 2.0),
            "prefill [###############...............] 5/10 2.50 tok/s ETA 2.0s");
  EXPECT_EQ(format_progress_line("prefill", "tok", 0, 10, 1.0),
            "prefill [..............................] 0/10 -- tok/s");
  EXPECT_EQ(format_progress_line("", "doc", 8192, 8192, 4.0),
            "[##############################] 8192/8192 2048 doc/s in 4.0s");
}

// Reads back what a bar wrote to a temporary file.
std::string read_all(std::FILE* file) {
  std::fflush(file);
  std::rewind(file);
  std::string text;
  char buffer[4096];
  size_t count;
  while ((count = std::fread(buffer, 1, sizeof buffer, file)) > 0) text.append(buffer, count);
  return text;
}

TEST(Progress, ForcedBarThrottlesRedrawsAndEndsTheLine) {
  std::FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  {
    ProgressBar bar(10, {.label = "eval", .unit = "doc", .force = true,
                         .redraw_interval_seconds = 3600.0, .stream = file});
    EXPECT_TRUE(bar.enabled());
    for (int i = 0; i < 9; ++i) bar.advance();
    bar.update(1000);  // clamped to the total
  }  // the destructor finishes the bar
  const std::string text = read_all(file);
  std::fclose(file);
  // One draw for the first update (the rest fall in the interval), one at the finish.
  EXPECT_EQ(std::count(text.begin(), text.end(), '\r'), 2) << text;
  EXPECT_NE(text.find("eval [###...........................] 1/10"), std::string::npos) << text;
  EXPECT_NE(text.find("10/10"), std::string::npos) << text;
  EXPECT_EQ(text.find("1000"), std::string::npos) << text;
  EXPECT_EQ(text.back(), '\n');
}

TEST(Progress, SilentWhenNotATerminalOrTooShort) {
  std::FILE* file = std::tmpfile();
  ASSERT_NE(file, nullptr);
  {
    ProgressBar not_a_terminal(10, {.label = "x", .stream = file});
    EXPECT_FALSE(not_a_terminal.enabled());
    not_a_terminal.update(5);
    ProgressBar short_step(10, {.label = "y", .force = true, .show_after_seconds = 3600.0,
                                .stream = file});
    short_step.update(5);
    short_step.finish();
  }
  EXPECT_EQ(read_all(file), "");
  std::fclose(file);
}

// Sets an environment variable for one scope, restoring the old value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(ModelCache, KascadeCacheElseHome) {
  const ScopedEnv home("HOME", "/home/someone");
  {
    const ScopedEnv cache("KASCADE_CACHE", "/data/models cache");
    EXPECT_EQ(cached_model_path("m.gguf"), "/data/models cache/models/m.gguf");
    EXPECT_EQ(default_model_path(), "/data/models cache/models/SmolLM2-135M-Instruct.Q4_1.gguf");
  }
  const ScopedEnv cache("KASCADE_CACHE", nullptr);
  EXPECT_EQ(cached_model_path("m.gguf"), "/home/someone/.cache/kascade/models/m.gguf");
  const ScopedEnv no_home("HOME", nullptr);
  EXPECT_EQ(cached_model_path("m.gguf"), "./.cache/kascade/models/m.gguf");
}

TEST(ReadFile, ReturnsEveryByte) {
  const std::string path = testing::TempDir() + "/core_test_read_file." + std::to_string(::getpid());
  std::string bytes(200000, 'x');  // several read buffers
  bytes[0] = '\0';
  bytes[123457] = '\n';
  bytes.back() = '\xff';
  std::ofstream(path, std::ios::binary) << bytes;
  EXPECT_EQ(read_file(path, "test file"), bytes);
  std::ofstream(path, std::ios::binary | std::ios::trunc).flush();
  EXPECT_EQ(read_file(path, "test file"), "");
  std::filesystem::remove(path);
}

std::string read_error(const std::string& path) {
  try {
    read_file(path, "prompt file");
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(ReadFile, NamesTheFileAndTheReason) {
  const std::string missing = testing::TempDir() + "/core_test_no_such_file";
  EXPECT_EQ(read_error(missing), "cannot read prompt file '" + missing + "': No such file or directory");
  // A directory is refused by type.
  EXPECT_EQ(read_error(testing::TempDir()), "cannot read prompt file '" + testing::TempDir() + "': Is a directory");
}

TEST(WriteFile, ReplacesTheWholeFile) {
  const std::string path = testing::TempDir() + "/core_test_write_file." + std::to_string(::getpid());
  std::string bytes(200000, 'y');
  bytes[7] = '\0';
  write_file(path, bytes, "test file");
  EXPECT_EQ(read_file(path, "test file"), bytes);
  write_file(path, "short", "test file");  // a shorter file leaves no tail of the old one
  EXPECT_EQ(read_file(path, "test file"), "short");
  std::filesystem::remove(path);
}

std::string write_error(const std::string& path) {
  try {
    write_file(path, "new contents", "profile");
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(WriteFile, FailureKeepsWhatWasThereAndLeavesNoTemporary) {
  const std::filesystem::path dir =
      std::filesystem::path(testing::TempDir()) / ("core_test_write_dir." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "target_is_a_directory");
  const std::string missing_dir = (dir / "no_such_dir" / "out.json").string();
  EXPECT_EQ(write_error(missing_dir), "cannot write profile '" + missing_dir + "': No such file or directory");
  // The rename over a directory fails; the directory and its contents survive.
  std::ofstream((dir / "target_is_a_directory" / "kept").string()) << "old";
  const std::string directory_target = (dir / "target_is_a_directory").string();
  EXPECT_EQ(write_error(directory_target), "cannot write profile '" + directory_target + "': Is a directory");
  EXPECT_EQ(read_file((dir / "target_is_a_directory" / "kept").string(), "kept"), "old");
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) entries += entry.exists();
  EXPECT_EQ(entries, 1) << "a temporary file was left behind";
  std::filesystem::remove_all(dir);
}

// A scratch directory per test, removed afterwards.
class FileIo : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::path(testing::TempDir()) /
           ("core_test_file_io_" + std::string(testing::UnitTest::GetInstance()->current_test_info()->name()) + "." +
            std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code error;
    std::filesystem::permissions(dir_ / "read_only", std::filesystem::perms::owner_all, error);
    std::filesystem::remove_all(dir_);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  size_t entries(const std::filesystem::path& dir) const {
    return size_t(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()));
  }

  std::filesystem::path dir_;
};

std::string error_of(const auto& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

// A FIFO would block the open until a writer came, /dev/zero would never
// end: both are refused at once, by type, before anything is read.
TEST_F(FileIo, InputsMustBeRegularFiles) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(error_of([&] { read_file(path("fifo"), "prompt file"); }),
            "cannot read prompt file '" + path("fifo") + "': not a regular file (a FIFO)");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(error_of([&] { read_file("/dev/zero", "haystack"); }),
            "cannot read haystack '/dev/zero': not a regular file (a character device)");
  const InputFile fifo = open_input_file(path("fifo"));
  EXPECT_FALSE(fifo.is_open());
  EXPECT_EQ(open_input_file(dir_.string()).error(), "Is a directory");
  std::ofstream(path("file")) << "12345";
  const InputFile file = open_input_file(path("file"));
  ASSERT_TRUE(file.is_open()) << file.error();
  EXPECT_EQ(file.size(), 5u);
}

TEST_F(FileIo, ReadsStopAtTheLimit) {
  std::ofstream(path("file")) << "12345";
  EXPECT_EQ(read_file_up_to(path("file"), "prompt file", 5), "12345");
  EXPECT_EQ(read_file_up_to(path("file"), "prompt file", 4), std::nullopt);
  const int zero = ::open("/dev/zero", O_RDONLY);
  ASSERT_GE(zero, 0);
  EXPECT_EQ(read_stream_up_to(zero, "standard input", 100000), std::nullopt);  // endless, yet it returns
  ::close(zero);
  const int empty = ::open("/dev/null", O_RDONLY);
  EXPECT_EQ(read_stream_up_to(empty, "standard input", 10), "");
  ::close(empty);
}

// A prompt may come from a FIFO or a pipe (`-f <(cmd)`, `-f /dev/stdin`):
// read once, bounded, waiting for a writer that comes late, as `cat` does.
TEST_F(FileIo, PromptsMayComeFromPipes) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  const auto write_later = [&](std::string text) {
    return std::thread([this, text] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      const int fd = ::open(path("fifo").c_str(), O_WRONLY);  // waits for the reader
      if (fd < 0) return;
      [[maybe_unused]] const ssize_t n = ::write(fd, text.data(), text.size());
      ::close(fd);
    });
  };
  std::thread writer = write_later("a prompt");
  EXPECT_EQ(read_file_up_to(path("fifo"), "prompt file", 100, InputKinds::kRegularFilesAndPipes), "a prompt");
  writer.join();
  writer = write_later(std::string(1000, 'x'));
  EXPECT_EQ(read_file_up_to(path("fifo"), "prompt file", 100, InputKinds::kRegularFilesAndPipes), std::nullopt);
  writer.join();
  // An anonymous pipe through /dev/fd, its writer already gone.
  int ends[2];
  ASSERT_EQ(::pipe(ends), 0);
  ASSERT_EQ(::write(ends[1], "piped", 5), 5);
  ::close(ends[1]);
  EXPECT_EQ(read_file_up_to("/dev/fd/" + std::to_string(ends[0]), "prompt file", 100,
                            InputKinds::kRegularFilesAndPipes),
            "piped");
  ::close(ends[0]);
  // Devices are still refused; FIFOs are, where pipes are not asked for.
  EXPECT_EQ(error_of([&] { read_file_up_to("/dev/zero", "prompt file", 100, InputKinds::kRegularFilesAndPipes); }),
            "cannot read prompt file '/dev/zero': not a regular file (a character device)");
  EXPECT_FALSE(open_input_file(path("fifo")).is_open());
}

TEST_F(FileIo, OutputFileChecks) {
  EXPECT_NE(error_of([&] { check_output_file("/dev/full", "--stats"); }).find("is not a regular file"),
            std::string::npos);
  // The longest name the file system takes works (its temporary has a short
  // name of its own); one byte more fails before any work.
  const std::string longest = path(std::string(255, 'p'));
  EXPECT_NO_THROW(check_output_file(longest, "--out"));
  write_file(longest, "ok", "profile");
  EXPECT_EQ(read_file(longest, "profile"), "ok");
  EXPECT_NE(error_of([&] { check_output_file(path(std::string(256, 'p')), "--out"); }).find("256 bytes long"),
            std::string::npos);
  std::ofstream(path("model.gguf")) << "weights";
  std::filesystem::create_symlink(path("model.gguf"), path("link.json"));
  EXPECT_NE(error_of([&] { check_output_file(path("link.json"), "--out", {path("model.gguf")}); })
                .find("is the input file"),
            std::string::npos);
  EXPECT_EQ(entries(dir_), 3u) << "a check left a file behind";
}

TEST_F(FileIo, OutputDirectoryChecksCreateNothing) {
  std::filesystem::create_directories(dir_ / "models");
  std::ofstream(path("models/model.gguf")) << "weights";
  // A directory holding an input, at any depth, or an input itself.
  EXPECT_NE(error_of([&] { check_output_dir(path("models"), "--out", {path("models/model.gguf")}); })
                .find("holds the input file"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_output_dir(dir_.string(), "--out", {path("models/model.gguf")}); })
                .find("holds the input file"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_output_dir(path("models/model.gguf"), "--out"); }).find("not a directory"),
            std::string::npos);
  EXPECT_NE(error_of([&] { check_output_dir(path("models/model.gguf/out"), "--out"); }).find("Not a directory"),
            std::string::npos);
  EXPECT_NO_THROW(check_output_dir(path("new/deeper/out"), "--out", {path("models/model.gguf")}));
  EXPECT_NO_THROW(check_output_dir(path("models"), "--out", {path("elsewhere.gguf")}));
  EXPECT_EQ(entries(dir_), 1u) << "a check created something";
  if (geteuid() != 0) {  // root writes anywhere
    std::filesystem::create_directories(dir_ / "read_only");
    std::filesystem::permissions(dir_ / "read_only", std::filesystem::perms::owner_read | std::filesystem::perms::owner_exec);
    EXPECT_NE(error_of([&] { check_output_dir(path("read_only"), "--out"); }).find("not writable"), std::string::npos);
    EXPECT_NE(error_of([&] { check_output_dir(path("read_only/new"), "--out"); }).find("not writable"),
              std::string::npos);
  }
}

// Outputs appear together or not at all: a failure on the last leaves the
// earlier ones as they were and no temporary or directory behind.
TEST_F(FileIo, OutputSetIsAllOrNothing) {
  std::ofstream(path("profile.json")) << "old profile";
  std::filesystem::create_directories(dir_ / "plots" / "b.png");  // a directory where a file goes
  {
    OutputSet outputs;
    outputs.write_file(path("profile.json"), "new profile", "profile");
    const std::string staging = outputs.stage_directory(path("plots"), "pictures");
    write_file(staging + "/a.png", "a", "PNG");
    write_file(staging + "/b.png", "b", "PNG");
    EXPECT_NE(error_of([&] { outputs.commit(); }).find("b.png"), std::string::npos);
  }
  EXPECT_EQ(read_file(path("profile.json"), "profile"), "old profile");
  EXPECT_FALSE(std::filesystem::exists(dir_ / "plots" / "a.png"));
  EXPECT_EQ(entries(dir_), 2u);
  EXPECT_EQ(entries(dir_ / "plots"), 1u);

  // A failed write: nothing committed, no directory made.
  {
    OutputSet outputs;
    const std::string staging = outputs.stage_directory(path("new/deeper/out"), "results");
    write_file(staging + "/results.csv", "rows", "results");
    EXPECT_THROW(outputs.write_file(path("missing/stats.json"), "x", "statistics"), Error);
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ / "new"));

  // Success: a new directory with its parents, files into an existing one.
  std::filesystem::remove_all(dir_ / "plots" / "b.png");
  {
    OutputSet outputs;
    outputs.write_file(path("profile.json"), "new profile", "profile");
    write_file(outputs.stage_directory(path("plots"), "pictures") + "/a.png", "a", "PNG");
    write_file(outputs.stage_directory(path("new/deeper/out"), "results") + "/results.csv", "rows", "results");
    outputs.commit();
  }
  EXPECT_EQ(read_file(path("profile.json"), "profile"), "new profile");
  EXPECT_EQ(read_file(path("plots/a.png"), "PNG"), "a");
  EXPECT_EQ(read_file(path("new/deeper/out/results.csv"), "results"), "rows");
  EXPECT_EQ(entries(dir_), 3u);
  EXPECT_EQ(entries(dir_ / "plots"), 1u);
  EXPECT_EQ(entries(dir_ / "new" / "deeper"), 1u);
}

}  // namespace
}  // namespace kascade
