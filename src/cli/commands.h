// Subcommands of the `kascade` CLI. Each registers its flags on the app and a
// callback that CLI11 runs when that subcommand was selected.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "attention/kascade_profile.h"
#include "model/model.h"

namespace kascade::cli {

void register_generate(CLI::App& app);
void register_info(CLI::App& app);
void register_calibrate(CLI::App& app);  // calibrate_command.cc
void register_eval(CLI::App& app);       // eval_command.cc

// ${KASCADE_CACHE:-~/.cache/kascade}/models/SmolLM2-135M-Instruct.Q4_1.gguf
std::string default_model_path();

// The calibration profile for a kascade run: `profile_path` when given, else
// the one shipped for the model (profiles/<model file stem>.json), else evenly
// spread anchors (with a warning unless quiet). A profile made for other
// weights is an error.
attention::KascadeProfile resolve_kascade_profile(const std::string& profile_path, const std::string& model_path,
                                                 const model::Model& model, bool quiet);

}  // namespace kascade::cli
