// Subcommands of the `kascade` CLI. Each registers its flags on the app and a
// callback that CLI11 runs when that subcommand was selected.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

namespace kascade::cli {

void register_generate(CLI::App& app);
void register_info(CLI::App& app);
void register_calibrate(CLI::App& app);  // calibrate_command.cc

// ${KASCADE_CACHE:-~/.cache/kascade}/models/SmolLM2-135M-Instruct.Q4_1.gguf
std::string default_model_path();

}  // namespace kascade::cli
