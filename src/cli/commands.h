// Subcommands of the `kascade` CLI. Each registers its flags on the app and a
// callback that CLI11 runs when that subcommand was selected.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "attention/kascade_profile.h"
#include "model/model.h"

namespace kascade::cli {

void register_generate(CLI::App& app);
void register_info(CLI::App& app);
void register_calibrate(CLI::App& app);  // calibrate_command.cc
void register_eval(CLI::App& app);       // eval_command.cc

// --threads at most: libgomp crashes on absurd team sizes (100000 threads
// segfault), and more threads than cores only slow the engine down.
inline constexpr int64_t kMaxThreads = 1024;

// Checks a count flag: a whole number in [0, max] (CLI::NonNegativeNumber
// would print its bound as a 309-digit number).
CLI::Validator count_flag(int64_t max);

// The calibration profile for a kascade run: `profile_path` when given, else
// the one shipped for the model (profiles/<model file stem>.json), else evenly
// spread anchors (with a warning unless quiet). A profile made for other
// weights is an error naming the profile.
attention::KascadeProfile resolve_kascade_profile(const std::string& profile_path, const std::string& model_path,
                                                 const model::Model& model, bool quiet);

}  // namespace kascade::cli
