// Kascade profiles: validation, defaults, JSON load/save (see profile.h).
#include "kascade/profile.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>
#include <type_traits>
#include <utility>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file_io.h"

namespace kascade {

using nlohmann::json;

void validate_profile(const KascadeProfile& profile, const Shape& shape) {
  const int L = shape.n_layers, G = shape.n_kv_heads;
  const ModelIdentity& model = profile.model;
  if (model.n_layers != L || model.n_heads != shape.n_heads || model.n_kv_heads != G ||
      model.head_dim != shape.head_dim)
    fail("profile: made for {} layers, {} heads, {} KV heads, head_dim {}; the model has {}, {}, "
         "{}, {}",
         model.n_layers, model.n_heads, model.n_kv_heads, model.head_dim, L, shape.n_heads, G,
         shape.head_dim);
  if (profile.anchors.empty() || profile.anchors[0] != 0)
    fail("profile: anchors must start at layer 0");
  check_layer_list(profile.anchors, "profile: anchors", L);
  check_layer_list(profile.wide_layers, "profile: wide_layers", L);
  if (int(profile.head_map.size()) != L)
    fail("profile: head_map has {} rows, expected one per layer ({})", profile.head_map.size(), L);
  for (int j = 0; j < L; ++j) {
    const std::vector<int>& row = profile.head_map[j];
    if (int(row.size()) != G)
      fail("profile: head_map[{}] has {} entries, expected one per KV head ({})", j, row.size(), G);
    const bool anchor = std::binary_search(profile.anchors.begin(), profile.anchors.end(), j);
    for (int h = 0; h < G; ++h) {
      if (row[h] < 0 || row[h] >= G)
        fail("profile: head_map[{}][{}] = {} outside [0, {})", j, h, row[h], G);
      if (anchor && row[h] != h)
        fail("profile: head_map[{}] must be the identity on anchor layer {} (entry {} is {})", j,
             j, h, row[h]);
    }
  }
  if (!profile.similarity.empty()) {
    if (int(profile.similarity.size()) != L)
      fail("profile: similarity has {} rows, expected {}", profile.similarity.size(), L);
    for (int a = 0; a < L; ++a)
      if (int(profile.similarity[a].size()) != L)
        fail("profile: similarity[{}] has {} entries, expected {}", a, profile.similarity[a].size(),
             L);
  }
  if (!profile.importance.empty() && int(profile.importance.size()) != L)
    fail("profile: importance has {} entries, expected {}", profile.importance.size(), L);
  for (size_t i = 0; i < profile.dp_scores.size(); ++i)
    for (int a : profile.dp_scores[i].anchors)
      if (a < 0 || a >= L) fail("profile: dp_scores[{}] names layer {} outside [0, {})", i, a, L);
  if (!profile.roles.empty()) {
    if (int(profile.roles.size()) != L)
      fail("profile: roles has {} entries, expected one per layer ({})", profile.roles.size(), L);
    int anchor = 0;  // the last anchor <= j
    for (int j = 0; j < L; ++j) {
      const LayerRole& role = profile.roles[size_t(j)];
      const bool is_anchor = std::binary_search(profile.anchors.begin(), profile.anchors.end(), j);
      if (is_anchor) anchor = j;
      if (role.anchor != is_anchor)
        fail("profile: roles[{}] says {} but layer {} is {}an anchor", j, role.anchor ? "anchor" : "reuse", j,
             is_anchor ? "" : "not ");
      if (role.reads != anchor) fail("profile: roles[{}] reads layer {}, but its anchor is layer {}", j, role.reads, anchor);
      if (role.keeps && !(*role.keeps >= 0 && *role.keeps <= 1))
        fail("profile: roles[{}].keeps = {} is not a share in [0, 1]", j, *role.keeps);
    }
  }
  if (profile.calibration.reuse_floor &&
      !(*profile.calibration.reuse_floor >= 0 && *profile.calibration.reuse_floor <= 1))
    fail("profile: calibration.reuse_floor = {} is not a share in [0, 1]", *profile.calibration.reuse_floor);
}

KascadeProfile default_profile(const Shape& shape) {
  KascadeProfile profile;
  profile.model = {"", "", shape.n_layers, shape.n_heads, shape.n_kv_heads, shape.head_dim};
  constexpr int kAnchors = 5;
  for (int i = 0; i < kAnchors; ++i) {
    // round(4 L / 5) reaches L for models of one or two layers
    const int layer = std::min(int(std::lround(double(i) * shape.n_layers / kAnchors)),
                               shape.n_layers - 1);
    if (profile.anchors.empty() || layer > profile.anchors.back()) profile.anchors.push_back(layer);
  }
  std::vector<int> identity(size_t(shape.n_kv_heads));
  for (int h = 0; h < shape.n_kv_heads; ++h) identity[h] = h;
  profile.head_map.assign(size_t(shape.n_layers), identity);
  profile.wide_layers = default_wide_layers(shape.n_layers);
  return profile;
}

std::vector<int> default_wide_layers(int n_layers) {
  std::vector<int> layers;
  for (int j = n_layers - n_layers / 4; j < n_layers; ++j) layers.push_back(j);
  return layers;
}

json profile_to_json(const KascadeProfile& profile) {
  const ModelIdentity& m = profile.model;
  const CalibrationSettings& c = profile.calibration;
  json out;
  out["model"] = {{"architecture", m.architecture}, {"name", m.name},
                  {"n_layers", m.n_layers},         {"n_heads", m.n_heads},
                  {"n_kv_heads", m.n_kv_heads},     {"head_dim", m.head_dim}};
  out["weights_fingerprint"] = profile.weights_fingerprint;
  out["calibration"] = {{"dev_set", c.dev_set},
                        {"n_prompts", c.n_prompts},
                        {"prompt_tokens", c.prompt_tokens},
                        {"selected_keys", c.selected_keys},
                        {"tile", c.tile},
                        {"seed", c.seed}};
  if (c.reuse_floor) out["calibration"]["reuse_floor"] = *c.reuse_floor;
  out["anchors"] = profile.anchors;
  out["head_map"] = profile.head_map;
  out["wide_layers"] = profile.wide_layers;
  if (!profile.similarity.empty()) out["similarity"] = profile.similarity;
  if (!profile.importance.empty()) out["importance"] = profile.importance;
  if (!profile.dp_scores.empty()) {
    json scores = json::array();
    for (const AnchorChoice& choice : profile.dp_scores)
      scores.push_back(
          {{"n_anchors", choice.n_anchors}, {"score", choice.score}, {"anchors", choice.anchors}});
    out["dp_scores"] = scores;
  }
  if (!profile.roles.empty()) {
    json roles = json::array();
    for (size_t j = 0; j < profile.roles.size(); ++j) {
      const LayerRole& role = profile.roles[j];
      json entry = {{"layer", j}, {"role", role.anchor ? "anchor" : "reuse"}, {"reads", role.reads}};
      if (role.keeps) entry["keeps"] = *role.keeps;
      entry["why"] = role.why;
      roles.push_back(entry);
    }
    out["roles"] = roles;
  }
  return out;
}

namespace {

template <typename T>
struct IsVector : std::false_type {};
template <typename T>
struct IsVector<std::vector<T>> : std::true_type {};

// Typed access to JSON fields with errors naming the source and field path.
// Integers are read exactly: 1.5 or 2^32 + 2 for an int field is an error,
// never a truncated or wrapped value.
class Reader {
 public:
  explicit Reader(std::string_view source) : source_(source) {}

  const json& field(const json& object, const std::string& key, const std::string& path) const {
    if (!object.is_object()) fail("{}: {} is not an object", source_, path);
    auto it = object.find(key);
    if (it == object.end()) fail("{}: missing field {}.{}", source_, path, key);
    return *it;
  }

  template <typename T>
  T get(const json& value, const std::string& path) const {
    if constexpr (IsVector<T>::value) {
      if (!value.is_array()) fail("{}: field {} has the wrong type ({}, not an array)", source_, path, value.type_name());
      T items;
      items.reserve(value.size());
      for (size_t i = 0; i < value.size(); ++i)
        items.push_back(get<typename T::value_type>(value[i], fmt::format("{}[{}]", path, i)));
      return items;
    } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      return integer<T>(value, path);
    } else {
      try {
        return value.get<T>();
      } catch (const json::exception&) {
        fail("{}: field {} has the wrong type ({})", source_, path, value.type_name());
      }
    }
  }

  template <typename T>
  T get(const json& object, const std::string& key, const std::string& path) const {
    return get<T>(field(object, key, path), path + "." + key);
  }

  template <typename T>
  T optional(const json& object, const std::string& key, const std::string& path,
             T fallback) const {
    if (!object.contains(key)) return fallback;
    return get<T>(object, key, path);
  }

 private:
  template <typename T>
  T integer(const json& value, const std::string& path) const {
    if (value.is_number_float())
      fail("{}: field {} must be a whole number, got {}", source_, path, value.dump());
    if (!value.is_number_integer()) fail("{}: field {} has the wrong type ({})", source_, path, value.type_name());
    const bool fits = value.is_number_unsigned()
                          ? value.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max())
                          : std::in_range<T>(value.get<int64_t>());
    if (!fits)
      fail("{}: field {} = {} is outside [{}, {}]", source_, path, value.dump(), std::numeric_limits<T>::min(),
           std::numeric_limits<T>::max());
    return value.is_number_unsigned() ? T(value.get<uint64_t>()) : T(value.get<int64_t>());
  }

  std::string source_;
};

}  // namespace

KascadeProfile profile_from_json(const json& in, std::string_view source) {
  const Reader reader(source);
  KascadeProfile profile;
  const json& model = reader.field(in, "model", "profile");
  profile.model.architecture = reader.get<std::string>(model, "architecture", "model");
  profile.model.name = reader.get<std::string>(model, "name", "model");
  profile.model.n_layers = reader.get<int>(model, "n_layers", "model");
  profile.model.n_heads = reader.get<int>(model, "n_heads", "model");
  profile.model.n_kv_heads = reader.get<int>(model, "n_kv_heads", "model");
  profile.model.head_dim = reader.get<int>(model, "head_dim", "model");
  profile.weights_fingerprint = reader.get<std::string>(in, "weights_fingerprint", "profile");
  if (in.contains("calibration")) {
    const json& c = in["calibration"];
    if (!c.is_object()) fail("{}: field profile.calibration is not an object", source);
    CalibrationSettings& s = profile.calibration;
    s.dev_set = reader.optional<std::string>(c, "dev_set", "calibration", s.dev_set);
    s.n_prompts = reader.optional<int64_t>(c, "n_prompts", "calibration", s.n_prompts);
    s.prompt_tokens = reader.optional<int64_t>(c, "prompt_tokens", "calibration", s.prompt_tokens);
    s.selected_keys = reader.optional<int64_t>(c, "selected_keys", "calibration", s.selected_keys);
    s.tile = reader.optional<int64_t>(c, "tile", "calibration", s.tile);
    s.seed = reader.optional<uint64_t>(c, "seed", "calibration", s.seed);
    if (c.contains("reuse_floor")) s.reuse_floor = reader.get<double>(c, "reuse_floor", "calibration");
  }
  profile.anchors = reader.get<std::vector<int>>(in, "anchors", "profile");
  profile.head_map = reader.get<std::vector<std::vector<int>>>(in, "head_map", "profile");
  // A profile without wide layers gets the default rule (a count no model
  // has fails validation against the model's shape later).
  const int n_layers = profile.model.n_layers;
  profile.wide_layers = reader.optional<std::vector<int>>(
      in, "wide_layers", "profile", n_layers > 0 && n_layers <= 4096 ? default_wide_layers(n_layers) : std::vector<int>{});
  profile.similarity =
      reader.optional<std::vector<std::vector<double>>>(in, "similarity", "profile", {});
  profile.importance = reader.optional<std::vector<double>>(in, "importance", "profile", {});
  if (in.contains("dp_scores")) {
    const json& scores = in["dp_scores"];
    if (!scores.is_array()) fail("{}: field profile.dp_scores is not an array", source);
    for (size_t i = 0; i < scores.size(); ++i) {
      const std::string path = "dp_scores[" + std::to_string(i) + "]";
      profile.dp_scores.push_back({reader.get<int>(scores[i], "n_anchors", path),
                                   reader.get<double>(scores[i], "score", path),
                                   reader.get<std::vector<int>>(scores[i], "anchors", path)});
    }
  }
  if (in.contains("roles")) {
    const json& roles = in["roles"];
    if (!roles.is_array()) fail("{}: field profile.roles is not an array", source);
    for (size_t j = 0; j < roles.size(); ++j) {
      const std::string path = "roles[" + std::to_string(j) + "]";
      if (reader.get<size_t>(roles[j], "layer", path) != j) fail("{}: field {}.layer must be {}", source, path, j);
      const std::string role = reader.get<std::string>(roles[j], "role", path);
      if (role != "anchor" && role != "reuse")
        fail("{}: field {}.role is '{}', not anchor or reuse", source, path, role);
      LayerRole entry;
      entry.anchor = role == "anchor";
      entry.reads = reader.get<int>(roles[j], "reads", path);
      if (roles[j].contains("keeps")) entry.keeps = reader.get<double>(roles[j], "keeps", path);
      entry.why = reader.get<std::string>(roles[j], "why", path);
      profile.roles.push_back(std::move(entry));
    }
  }
  return profile;
}

// A profile is tens of kilobytes (anchors, one map entry per head); a file
// far larger is not one, and parsing it whole would take gigabytes.
constexpr uint64_t kMaxProfileBytes = uint64_t(16) << 20;

KascadeProfile load_profile(const std::string& path, const Shape& shape) {
  const std::optional<std::string> text = read_file_up_to(path, "profile", kMaxProfileBytes);
  if (!text) fail("profile '{}' is larger than {} MiB: not a profile", path, kMaxProfileBytes >> 20);
  json in;
  try {
    in = json::parse(*text);
  } catch (const json::parse_error& e) {
    fail("{}: malformed JSON at byte {}", path, e.byte);
  }
  KascadeProfile profile = profile_from_json(in, path);
  try {
    validate_profile(profile, shape);
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
  return profile;
}

void save_profile(const KascadeProfile& profile, const std::string& path) {
  write_file(path, profile_to_json(profile).dump(2) + "\n", "profile");
}

void check_fingerprint(const KascadeProfile& profile, std::string_view weights_fingerprint) {
  if (profile.weights_fingerprint != weights_fingerprint)
    fail("profile was calibrated for weights {} but the model's weights are {}",
         profile.weights_fingerprint.empty() ? "(none recorded)" : profile.weights_fingerprint,
         weights_fingerprint);
}

}  // namespace kascade
