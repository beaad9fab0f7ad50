// Runs the built `kascade` binary (KASCADE_BINARY) as a user runs it, for the
// tests of its behaviour on bad input (cli_errors_test, bad_input_test):
// standard streams from and to files or special files, signals at their
// defaults as a shell leaves them, a time limit past which it is killed.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;

namespace kascade::test_cli {

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const std::filesystem::path& path, std::string_view bytes) {
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

// stdin: /dev/null, `input_file`, /dev/zero, none, or a pipe holding
// `input_text` (at most a pipe's 64 KiB) whose writer has closed it.
enum class Input { kNull, kFile, kZero, kClosed, kPipe };
enum class Output { kFile, kFull, kClosed, kBrokenPipe };        // stdout: dir/stdout.txt, /dev/full, none, a dead pipe

struct Launch {
  std::vector<std::string> args;        // after the program name
  std::filesystem::path dir;            // stdout.txt and stderr.txt go here
  std::vector<std::string> env = {};    // "NAME=value" replaces or adds; a bare "NAME" removes
  Input input = Input::kNull;
  std::filesystem::path input_file = {};
  std::string input_text = {};
  Output output = Output::kFile;
  std::chrono::seconds time_limit = std::chrono::seconds(60);
};

// What one run did.
struct Outcome {
  std::string command;     // for failure messages
  bool exited = false;     // returned from main or called exit, rather than killed by a signal
  int status = 0;          // the exit status, or the signal
  bool timed_out = false;  // killed at the time limit
  std::string out, err;    // out: with Output::kFile only
};

inline Outcome run_kascade(const Launch& launch) {
  Outcome outcome;
  outcome.command = "kascade";
  for (const std::string& arg : launch.args) outcome.command += " '" + arg + "'";
  const std::string out_path = launch.dir / "stdout.txt", err_path = launch.dir / "stderr.txt";
  const std::string in_path = launch.input_file;

  std::vector<std::string> arg_strings{KASCADE_BINARY};
  arg_strings.insert(arg_strings.end(), launch.args.begin(), launch.args.end());
  std::vector<std::string> env_strings;
  std::copy_if(launch.env.begin(), launch.env.end(), std::back_inserter(env_strings),
               [](const std::string& e) { return e.find('=') != std::string::npos; });
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const std::string_view name = text.substr(0, text.find('='));
    const bool replaced = std::any_of(launch.env.begin(), launch.env.end(), [&](const std::string& e) {
      return std::string_view(e).substr(0, e.find('=')) == name;
    });
    if (!replaced) env_strings.emplace_back(text);
  }
  std::vector<char*> argv, envp;
  for (std::string& s : arg_strings) argv.push_back(s.data());
  for (std::string& s : env_strings) envp.push_back(s.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  int input_pipe[2] = {-1, -1};
  switch (launch.input) {
    case Input::kNull: posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0); break;
    case Input::kFile: posix_spawn_file_actions_addopen(&actions, 0, in_path.c_str(), O_RDONLY, 0); break;
    case Input::kZero: posix_spawn_file_actions_addopen(&actions, 0, "/dev/zero", O_RDONLY, 0); break;
    case Input::kClosed: posix_spawn_file_actions_addclose(&actions, 0); break;
    case Input::kPipe:
      // Filled before the spawn: the text must fit the pipe's buffer.
      if (launch.input_text.size() > 65536) ADD_FAILURE() << "a pipe's input must be at most 64 KiB";
      if (pipe(input_pipe) != 0) ADD_FAILURE() << "pipe: " << std::strerror(errno);
      if (write(input_pipe[1], launch.input_text.data(), launch.input_text.size()) !=
          ssize_t(launch.input_text.size()))
        ADD_FAILURE() << "cannot fill the input pipe: " << std::strerror(errno);
      close(input_pipe[1]);
      posix_spawn_file_actions_adddup2(&actions, input_pipe[0], 0);
      posix_spawn_file_actions_addclose(&actions, input_pipe[0]);
      break;
  }
  int pipe_fds[2] = {-1, -1};
  switch (launch.output) {
    case Output::kFile:
      posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      break;
    case Output::kFull: posix_spawn_file_actions_addopen(&actions, 1, "/dev/full", O_WRONLY, 0); break;
    case Output::kClosed: posix_spawn_file_actions_addclose(&actions, 1); break;
    case Output::kBrokenPipe:
      // A pipe whose reader is gone before the first write, like `kascade ... | head -c 0`.
      if (pipe(pipe_fds) != 0) ADD_FAILURE() << "pipe: " << std::strerror(errno);
      close(pipe_fds[0]);
      posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
      posix_spawn_file_actions_addclose(&actions, pipe_fds[1]);
      break;
  }
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF);

  pid_t pid = 0;
  const int spawn_error = posix_spawn(&pid, KASCADE_BINARY, &actions, &attributes, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (pipe_fds[1] >= 0) close(pipe_fds[1]);
  if (input_pipe[0] >= 0) close(input_pipe[0]);
  if (spawn_error != 0) {
    ADD_FAILURE() << "cannot run " << KASCADE_BINARY << ": " << std::strerror(spawn_error);
    return outcome;
  }
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + launch.time_limit;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      outcome.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  outcome.exited = WIFEXITED(status);
  outcome.status = outcome.exited ? WEXITSTATUS(status) : WTERMSIG(status);
  if (launch.output == Output::kFile) outcome.out = read_bytes(out_path);
  outcome.err = read_bytes(err_path);
  return outcome;
}

}  // namespace kascade::test_cli
