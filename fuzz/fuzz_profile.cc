// libFuzzer target for the Kascade profile loader (kascade::profile_from_json
// and validate_profile): any bytes either load or raise kascade::Error, never
// a crash, a hang or another exception (an nlohmann exception escaping is a
// finding). A profile that loads must hold exactly the numbers the JSON
// wrote: every integer field, written back by profile_to_json, compares
// equal to the input's (a float or an out-of-range number accepted and
// truncated or wrapped fails this), and loading what was written back gives
// the same profile. It is then validated against a few shapes, its own
// included.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "kascade/profile.h"

namespace {

using nlohmann::json;

void check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "fuzz_profile: %s\n", what);
    std::abort();
  }
}

// Integer fields read from `in` equal what `out` (written back) holds.
void check_exact(const json& in, const json& out) {
  for (const char* key : {"n_layers", "n_heads", "n_kv_heads", "head_dim"})
    check(in["model"][key] == out["model"][key], "a model field changed on loading");
  check(in["anchors"] == out["anchors"], "anchors changed on loading");
  check(in["head_map"] == out["head_map"], "head_map changed on loading");
  if (in.contains("calibration"))
    for (const char* key : {"n_prompts", "prompt_tokens", "selected_keys", "tile", "seed"})
      if (in["calibration"].contains(key))
        check(in["calibration"][key] == out["calibration"][key], "a calibration field changed on loading");
  if (in.contains("dp_scores") && !in["dp_scores"].empty())
    for (size_t i = 0; i < in["dp_scores"].size(); ++i) {
      check(in["dp_scores"][i]["n_anchors"] == out["dp_scores"][i]["n_anchors"], "dp_scores n_anchors changed");
      check(in["dp_scores"][i]["anchors"] == out["dp_scores"][i]["anchors"], "dp_scores anchors changed");
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const json in = json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (in.is_discarded()) return 0;
  kascade::KascadeProfile profile;
  try {
    profile = kascade::profile_from_json(in, "fuzz-input");
  } catch (const kascade::Error&) {
    return 0;  // refusing bad input is the expected outcome for most inputs
  }
  const json out = kascade::profile_to_json(profile);
  check_exact(in, out);
  const kascade::KascadeProfile again = kascade::profile_from_json(out, "written back");
  check(again.anchors == profile.anchors && again.head_map == profile.head_map && again.model.n_layers == profile.model.n_layers &&
            again.weights_fingerprint == profile.weights_fingerprint && again.similarity == profile.similarity &&
            again.importance == profile.importance && again.dp_scores.size() == profile.dp_scores.size(),
        "loading the written profile gives another profile");
  const kascade::ModelIdentity& m = profile.model;
  for (const kascade::Shape& shape : {kascade::Shape{m.n_layers, m.n_heads, m.n_kv_heads, m.head_dim},
                                      kascade::Shape{2, 4, 2, 16}, kascade::Shape{30, 9, 3, 64}}) {
    try {
      kascade::validate_profile(profile, shape);
    } catch (const kascade::Error&) {
    }
  }
  return 0;
}
