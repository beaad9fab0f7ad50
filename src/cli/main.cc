// The `kascade` command line: one frontend over the core library.
//   kascade generate   stream a completion (prompt text, file or stdin; chat or raw)
//   kascade info       print a GGUF file's metadata and tensor table
//   kascade eval       long-context accuracy and perplexity of attention strategies
//   kascade calibrate  choose Kascade anchors and head maps for a model
//   kascade synth      write a model of a published shape with random weights
// Every error from bad input is one line on stderr and a non-zero exit.
#include <cstdio>
#include <new>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "core/error.h"
#include "ops/threading.h"

int main(int argc, char** argv) {
  kascade::ops::use_short_spin_waits(argv);
  CLI::App app{"kascade: long-context LLM inference with Kascade sparse attention"};
  app.require_subcommand(1);
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return fmt::format("kascade: {} (see --help)\n", e.what());
  });
  kascade::cli::register_generate(app);
  kascade::cli::register_info(app);
  kascade::cli::register_calibrate(app);
  kascade::cli::register_eval(app);
  kascade::cli::register_synth(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kascade::Error& e) {
    std::fflush(stdout);
    fmt::print(stderr, "kascade: error: {}\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    fmt::print(stderr, "kascade: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "kascade: internal error: {}\n", e.what());
    return 2;
  }
  return 0;
}
