// Subcommands of the `kascade` CLI. Each registers its flags on the app and a
// callback that CLI11 runs when that subcommand was selected.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "kascade/options.h"
#include "kascade/profile.h"
#include "model/model.h"

namespace kascade::cli {

void register_generate(CLI::App& app);
void register_info(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_calibrate(CLI::App& app);  // calibrate_command.cc
void register_eval(CLI::App& app);       // eval_command.cc
void register_synth(CLI::App& app);      // synth_command.cc
void register_serve(CLI::App& app);      // serve_command.cc

// --threads at most: libgomp crashes on absurd team sizes (100000 threads
// segfault), and more threads than cores only slow the engine down.
inline constexpr int64_t kMaxThreads = 1024;

// Checks a count flag: a whole number in [0, max] (CLI::NonNegativeNumber
// would print its bound as a 309-digit number).
CLI::Validator count_flag(int64_t max);
// A seed: a whole number in [0, 2^64 - 1]; more is refused, not clamped.
CLI::Validator seed_flag();
// A duration: seconds in [0, max]; NaN and infinities are refused.
CLI::Validator seconds_flag(double max);

// The attention flags of generate and serve (--attention, --budget, --reuse,
// ...): one per setting of kascade/options.h.
void add_attention_flags(CLI::App* cmd, AttentionOptions& options);

}  // namespace kascade::cli
