// What calibration writes: the Kascade profile (kascade/profile.h
// owns its format), a statistics file with everything the profile has no
// field for (head-pair similarities, the head map of every anchor count,
// sparsity), and PNG pictures of the similarity matrix, layer importance and
// per-head sparsity. Every output is a pure function of the result, so equal
// inputs give byte-identical files.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "calibration/calibrate.h"
#include "kascade/profile.h"
#include "model/model.h"

namespace kascade::calibration {

// Where the development prompts came from.
struct DevSetInfo {
  std::string name;         // "builtin" or the path given
  std::string fingerprint;  // hash of the file's bytes
  int64_t max_tokens = 0;   // prompts were cut to this many tokens
};

// FNV-1a 64 of the bytes, as "fnv1a64:" + 16 hex digits.
std::string content_fingerprint(std::string_view bytes);

// The profile whose active anchors and head map are the solution with
// `chosen_anchors` anchors; the statistics and every count's DP score ride along.
kascade::KascadeProfile make_profile(const CalibrationResult& result, const CalibrationOptions& options,
                                       int chosen_anchors, const model::Config& config, const gguf::File& file,
                                       const DevSetInfo& dev_set);

nlohmann::json statistics_json(const CalibrationResult& result, const CalibrationOptions& options,
                               int chosen_anchors, const model::Config& config, const gguf::File& file,
                               const DevSetInfo& dev_set);

// Writes dir/similarity.png (sim(a,b)), importance.png (w_b), sparsity.png
// (mass kept per layer and KV head at both budgets) and anchor_scores.png (the
// DP's best score per anchor count); `model_name` titles them.
void write_plots(const CalibrationResult& result, const CalibrationOptions& options, int chosen_anchors,
                 const std::string& model_name, const std::string& dir);

}  // namespace kascade::calibration
