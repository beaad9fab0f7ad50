// The `kascade` command line: one frontend over the core library.
//   kascade generate   stream a completion (prompt text, file or stdin; chat or raw)
//   kascade info       print a GGUF file's metadata and tensor table
//   kascade tokenize   print the token ids of a text
//   kascade eval       long-context accuracy and perplexity of attention strategies
//   kascade calibrate  choose Kascade anchors and head maps for a model
//   kascade synth      write a model of a published shape with random weights
//   kascade serve      an OpenAI-compatible HTTP server with continuous batching
// Every error from bad input is one line on stderr and a non-zero exit; so is
// output that could not be written (a full disk, a closed stdout). A closed
// pipe ends the program quietly by SIGPIPE, as for other filters.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <system_error>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "ops/threading.h"

namespace {

// A standard stream started closed (`>&-`) would hand its number to the next
// file opened, and the program's output would land in that file. Each closed
// one gets /dev/null opened in the direction it cannot be used in, so the
// number stays taken, every write to stdout fails (EBADF), reported as lost
// output, and stdin reads as empty.
void occupy_closed_standard_streams() {
  for (const int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) {
    if (::fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    // stdin: read-only, so that a closed stdin reads as empty.
    const int opened = ::open("/dev/null", O_RDONLY);
    if (opened >= 0 && opened != fd) {
      ::dup2(opened, fd);
      ::close(opened);
    }
  }
}

// One line on stderr; never throws (stderr may be the stream that failed).
int report(const std::string& line, int status) {
  std::fputs(line.c_str(), stderr);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  occupy_closed_standard_streams();
  kascade::ops::prepare_environment(argv);
  kascade::gguf::report_truncated_files_on_sigbus();
  CLI::App app{"kascade: long-context LLM inference with Kascade sparse attention"};
  app.require_subcommand(1);
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return fmt::format("kascade: {} (see --help)\n", e.what());
  });
  kascade::cli::register_generate(app);
  kascade::cli::register_info(app);
  kascade::cli::register_tokenize(app);
  kascade::cli::register_calibrate(app);
  kascade::cli::register_eval(app);
  kascade::cli::register_synth(app);
  kascade::cli::register_serve(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int status = app.exit(e);
    if (status != 0) return status;
  } catch (const kascade::Error& e) {
    std::fflush(stdout);
    return report(fmt::format("kascade: error: {}\n", e.what()), 1);
  } catch (const std::bad_alloc&) {
    return report("kascade: error: out of memory\n", 1);
  } catch (const std::system_error& e) {  // fmt::print to a stream that failed
    if (std::ferror(stdout))
      return report(fmt::format("kascade: error: cannot write to standard output: {}\n", e.code().message()), 1);
    return report(fmt::format("kascade: error: {}\n", e.what()), 1);
  } catch (const std::exception& e) {
    return report(fmt::format("kascade: internal error: {}\n", e.what()), 2);
  }
  // Buffered output that cannot be written now would be lost at exit without a word.
  if (std::fflush(stdout) != 0 || std::ferror(stdout))
    return report(fmt::format("kascade: error: cannot write to standard output: {}\n", std::strerror(errno)), 1);
  return 0;
}
