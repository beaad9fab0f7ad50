// A Kascade calibration profile: which layers are anchors and which anchor KV
// head each reuse layer's KV head reads (KASCADE.md, "Calibration"), plus the
// model identity and weights fingerprint it was made for, the calibration
// settings, and optional statistics for reports. Stored as JSON; loading
// validates every field and names the file and field on error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kascade/shape.h"

namespace kascade {

struct ModelIdentity {
  std::string architecture;  // e.g. "llama"
  std::string name;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

struct CalibrationSettings {
  std::string dev_set;          // name or path of the development set
  int64_t n_prompts = 0;
  int64_t prompt_tokens = 0;    // tokens per prompt (or the maximum)
  int64_t selected_keys = 32;   // calibration budget (keys kept per selection)
  int64_t tile = 32;            // prefill query tile
  uint64_t seed = 0;
  // Set when the anchors are the fewest that let every reuse layer keep at
  // least this share of its own top-k mass (calibrate --reuse-floor).
  std::optional<double> reuse_floor;
};

// Why a layer selects its own keys or reuses an anchor's (the profile says so
// for each layer; calibration writes it, nothing reads it to run).
struct LayerRole {
  bool anchor = false;
  int reads = 0;           // the anchor whose sets the layer reads: itself on anchors
  // The share of its own top-k mass the layer keeps on the previous anchor's
  // sets, sim(a, j): what reuse keeps on a reuse layer, what it would have
  // kept on an anchor (absent on layer 0).
  std::optional<double> keeps;
  std::string why;
};

// The dynamic programme's best anchor set for one anchor count.
struct AnchorChoice {
  int n_anchors = 0;
  double score = 0;  // sum_j w_j * sim(anchor(j), j)
  std::vector<int> anchors;
};

struct KascadeProfile {
  ModelIdentity model;
  std::string weights_fingerprint;
  CalibrationSettings calibration;
  std::vector<int> anchors;                // ascending, starting at layer 0
  std::vector<std::vector<int>> head_map;  // [layer][kv_head] -> anchor KV head
  // Layers whose decode selections need more keys: they select wide_factor
  // times the budget (AttentionOptions::wide_factor). Ascending; may be empty.
  // Default (and where a profile file has none): default_wide_layers.
  std::vector<int> wide_layers;
  // Optional statistics (empty when absent).
  std::vector<std::vector<double>> similarity;  // [a][b]: sim(a, b), a <= b
  std::vector<double> importance;               // [layer]: w_b
  std::vector<AnchorChoice> dp_scores;          // one per anchor count tried
  std::vector<LayerRole> roles;                 // [layer], or empty
};

// Throws Error unless the profile fits the shape: anchors ascending, unique,
// starting at 0, inside [0, n_layers); head_map n_layers x n_kv_heads with
// entries in [0, n_kv_heads), identity on anchor layers; statistics sized to
// the layer count when present; roles, when present, one per layer and
// agreeing with the anchors; wide layers ascending, unique, inside the
// model; model identity matching the shape.
void validate_profile(const KascadeProfile& profile, const Shape& shape);

// Evenly spread anchors round(i * n_layers / 5), i < 5 (fewer when the model
// has fewer layers), identity head maps, default_wide_layers: the fallback
// when no calibrated profile is given.
KascadeProfile default_profile(const Shape& shape);

// The last floor(n_layers / 4) layers. Counting words over a long context
// (RULER's fwe) lost 6-11 points at a 10 % budget on Qwen2.5-Coder-1.5B and
// SmolLM2-135M, and three times the budget in these layers recovered it,
// while the same in any earlier quarter recovered nothing
// (docs/accuracy.md, "Wide layers").
std::vector<int> default_wide_layers(int n_layers);

nlohmann::json profile_to_json(const KascadeProfile& profile);
// `source` names the origin (file path) in error messages.
KascadeProfile profile_from_json(const nlohmann::json& json, std::string_view source);

// Reads and validates a profile file against the shape.
KascadeProfile load_profile(const std::string& path, const Shape& shape);
void save_profile(const KascadeProfile& profile, const std::string& path);

// Throws Error naming both fingerprints unless the profile was calibrated on
// weights with this fingerprint.
void check_fingerprint(const KascadeProfile& profile, std::string_view weights_fingerprint);

}  // namespace kascade
