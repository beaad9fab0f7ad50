// Strategy options, profiles and diagnostics: bad options and profiles raise
// Error with a message naming the problem; full budgets equal dense; profile
// JSON round-trips; diagnostics report the kept softmax mass and the output
// error that a reference computes.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "attention/strategies.h"
#include "attention_reference.h"
#include "core/error.h"

namespace kascade::attention {
namespace {

using reference::Problem;

const Shape kShape{6, 9, 3, 64};

// Runs make_strategy and returns the Error message ("" if none).
std::string error_of(const AttentionOptions& options, const Shape& shape = kShape) {
  try {
    make_strategy(options, shape);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Kascade as KASCADE.md defines it (sparse prefill, reuse), which these tests
// exercise; the defaults (dense prefill, every layer an anchor) are a subset.
AttentionOptions named(const char* name) {
  AttentionOptions o;
  set_attention_option(o, "attention", name);
  o.sparse_phases = SparsePhases::Both;
  o.all_anchors = false;
  return o;
}

TEST(AttentionOptions, EveryNameBuilds) {
  for (std::string_view name : method_names()) {
    AttentionOptions o = named(std::string(name).c_str());
    auto strategy = make_strategy(o, kShape);
    EXPECT_EQ(strategy->name(), name);
  }
  EXPECT_EQ(make_strategy(named("kascade"), kShape)->prefill_alignment(), 32);
  AttentionOptions defaults;
  defaults.method = Method::Kascade;
  EXPECT_EQ(make_strategy(defaults, kShape)->prefill_alignment(), 1);  // dense prefill
  EXPECT_TRUE(make_strategy(defaults, kShape)->dense_prefill());
}

TEST(AttentionOptions, BadOptionsRaiseErrors) {
  for (double p : {0.0, -5.0, 100.5, std::nan("")}) {
    AttentionOptions o = named("kascade");
    o.budget_percent = p;
    EXPECT_NE(error_of(o).find("outside (0, 100]"), std::string::npos) << p;
  }
  AttentionOptions o = named("kascade");
  o.tile = 0;
  EXPECT_NE(error_of(o).find("tile size 0"), std::string::npos);
  o = named("kascade");
  o.min_k = 0;
  EXPECT_NE(error_of(o).find("min_k"), std::string::npos);
  o = named("kascade");
  o.refine_factor = 3;
  o.all_anchors = true;
  EXPECT_NE(error_of(o).find("refined reuse (refine factor 3) needs reuse"), std::string::npos);
  o = named("kascade");
  o.select_every = 4;
  o.all_anchors = false;
  EXPECT_NE(error_of(o).find("--select-every 4 needs every layer selecting"), std::string::npos);
  o.all_anchors = true;
  EXPECT_EQ(error_of(o), "");
  o = named("kascade");
  o.dense_layers = std::vector<int>{0, 6};
  EXPECT_NE(error_of(o).find("dense layers[1] = 6 outside [0, 6)"), std::string::npos);
  o = named("omnikv");
  o.filter_layers = std::vector<int>{3, 2};
  EXPECT_NE(error_of(o).find("ascending"), std::string::npos);
  o = named("streaming");
  o.window_fraction = 1.5;
  EXPECT_NE(error_of(o).find("window fraction"), std::string::npos);
  EXPECT_NE(error_of(named("dense"), Shape{2, 9, 4, 64}).find("not a multiple"), std::string::npos);
  EXPECT_NE(error_of(named("dense"), Shape{2, 8, 4, 60}).find("head_dim 60"), std::string::npos);
}

// The settings every front end parses through (kascade/options.h).
std::string setting_error(const char* name, const char* value) {
  AttentionOptions o;
  try {
    set_attention_option(o, name, value);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(AttentionOptions, SettingsParseAndRefuse) {
  AttentionOptions o;
  set_attention_option(o, "attention", "quest");
  EXPECT_EQ(o.method, Method::Quest);
  set_attention_option(o, "budget", "2.5");
  EXPECT_EQ(o.budget_percent, 2.5);
  set_attention_option(o, "min-k", "16");
  EXPECT_EQ(o.min_k, 16);
  set_attention_option(o, "reuse", "");
  EXPECT_FALSE(o.all_anchors);
  set_attention_option(o, "reuse", "false");
  EXPECT_TRUE(o.all_anchors);
  set_attention_option(o, "sparse-phases", "both");
  EXPECT_EQ(o.sparse_phases, SparsePhases::Both);
  set_attention_option(o, "window-fraction", "0.3");
  EXPECT_EQ(o.window_fraction, 0.3);
  EXPECT_NE(setting_error("attention", "flash").find("attention: unknown method 'flash'"), std::string::npos);
  EXPECT_NE(setting_error("attention", "flash").find("kascade, oracle-topk, streaming"), std::string::npos);
  for (const char* p : {"0", "-5", "100.5", "nan", "inf", "", "5x", "1e400"})
    EXPECT_NE(setting_error("budget", p).find("not a percentage in (0, 100]"), std::string::npos) << p;
  EXPECT_NE(setting_error("min-k", "0").find("[1, 2^30]"), std::string::npos);
  EXPECT_NE(setting_error("min-k", "1.5").find("whole number"), std::string::npos);
  EXPECT_NE(setting_error("refine", "65").find("[1, 64]"), std::string::npos);
  EXPECT_NE(setting_error("select-every", "0").find("[1, 65536]"), std::string::npos);
  set_attention_option(o, "select-every", "8");
  EXPECT_EQ(o.select_every, 8);
  set_attention_option(o, "wide-factor", "3");
  EXPECT_EQ(o.wide_factor.value_or(0), 3);
  EXPECT_NE(setting_error("wide-factor", "0").find("[1, 100]"), std::string::npos);
  EXPECT_EQ(parse_attention_spec("kascade-p20-wide3").wide_factor.value_or(0), 3);
  EXPECT_THROW(parse_attention_spec("kascade-wide0"), Error);
  EXPECT_THROW(parse_attention_spec("quest-wide3"), Error);  // a Kascade variant
  EXPECT_NE(setting_error("reuse", "yes").find("true or false"), std::string::npos);
  EXPECT_NE(setting_error("sparse-phases", "all").find("both, decode or prefill"), std::string::npos);
  EXPECT_NE(setting_error("window-fraction", "2").find("[0, 1]"), std::string::npos);
  EXPECT_NE(setting_error("bduget", "5").find("unknown attention setting 'bduget'"), std::string::npos);
  // Every setting's current value parses back to itself.
  AttentionOptions defaults;
  for (const AttentionSetting& setting : attention_settings()) {
    AttentionOptions copy = defaults;
    set_attention_option(copy, setting.name, setting.current(defaults));
    EXPECT_EQ(setting.current(copy), setting.current(defaults)) << setting.name;
  }
}

TEST(AttentionOptions, BadProfilesRaiseErrors) {
  auto profile_error = [](void (*edit)(KascadeProfile&)) {
    AttentionOptions o = named("kascade");
    o.profile = default_profile(kShape);
    edit(*o.profile);
    return error_of(o);
  };
  EXPECT_NE(profile_error([](KascadeProfile& p) { p.anchors = {1, 3}; }).find("start at layer 0"),
            std::string::npos);
  EXPECT_NE(profile_error([](KascadeProfile& p) { p.anchors = {0, 3, 2}; }).find("ascending"),
            std::string::npos);
  EXPECT_NE(profile_error([](KascadeProfile& p) { p.anchors = {0, 9}; }).find("anchors[1] = 9"),
            std::string::npos);
  EXPECT_NE(profile_error([](KascadeProfile& p) { p.head_map[4][1] = 3; }).find("head_map[4][1] = 3"),
            std::string::npos);
  EXPECT_NE(profile_error([](KascadeProfile& p) { p.head_map[0][1] = 2; }).find("identity"),
            std::string::npos);
  EXPECT_NE(profile_error([](KascadeProfile& p) { p.head_map.pop_back(); }).find("5 rows"),
            std::string::npos);
  EXPECT_NE(profile_error([](KascadeProfile& p) { p.wide_layers = {2, 6}; }).find("wide_layers[1] = 6"),
            std::string::npos);
  EXPECT_NE(profile_error([](KascadeProfile& p) { p.wide_layers = {4, 2}; }).find("ascending"),
            std::string::npos);
  EXPECT_NE(profile_error([](KascadeProfile& p) { p.model.n_kv_heads = 4; }).find("made for"),
            std::string::npos);
}

TEST(AttentionOptions, DefaultProfileAndScaledLayers) {
  const KascadeProfile profile = default_profile(Shape{30, 9, 3, 64});
  EXPECT_EQ(profile.anchors, (std::vector<int>{0, 6, 12, 18, 24}));
  EXPECT_EQ(default_profile(Shape{3, 2, 1, 32}).anchors, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(default_profile(Shape{2, 2, 1, 32}).anchors, (std::vector<int>{0, 1}));
  EXPECT_EQ(default_profile(Shape{1, 2, 1, 32}).anchors, (std::vector<int>{0}));
  EXPECT_EQ(scale_layers(std::vector<int>{2, 8, 18}, 32), (std::vector<int>{2, 8, 18}));
  EXPECT_EQ(scale_layers(std::vector<int>{2, 8, 18}, 30), (std::vector<int>{2, 8, 17}));
  EXPECT_EQ(scale_layers(std::vector<int>{2, 13}, 30), (std::vector<int>{2, 12}));
  EXPECT_EQ(scale_layers(std::vector<int>{2, 13}, 4), (std::vector<int>{0, 2}));
}

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / name).string();
}

TEST(AttentionOptions, ProfileJsonRoundTripAndErrors) {
  KascadeProfile profile = default_profile(kShape);
  profile.model.architecture = "llama";
  profile.model.name = "test-model";
  profile.weights_fingerprint = "sha256:abc";
  profile.calibration.dev_set = "builtin";
  profile.calibration.n_prompts = 3;
  profile.anchors = {0, 2, 4};
  profile.head_map[1] = {2, 0, 1};
  profile.similarity.assign(6, std::vector<double>(6, 0.5));
  profile.importance = {0.1, 0.2, 0.3, 0.4, 0.5, 0.6};
  profile.wide_layers = {3, 5};
  profile.dp_scores = {{3, 2.5, {0, 2, 4}}};
  profile.calibration.reuse_floor = 0.8;
  profile.roles = {{true, 0, std::nullopt, "layer 0"}, {false, 0, 0.9, "reuses 0"}, {true, 2, 0.5, "selects"},
                   {false, 2, 0.85, "reuses 2"},        {true, 4, 0.7, "selects"},   {false, 4, 1.0, "reuses 4"}};
  const std::string path = temp_path("kascade_profile_test.json");
  save_profile(profile, path);
  const KascadeProfile loaded = load_profile(path, kShape);
  EXPECT_EQ(loaded.anchors, profile.anchors);
  EXPECT_EQ(loaded.head_map, profile.head_map);
  EXPECT_EQ(loaded.wide_layers, profile.wide_layers);
  EXPECT_EQ(loaded.similarity, profile.similarity);
  EXPECT_EQ(loaded.importance, profile.importance);
  EXPECT_EQ(loaded.dp_scores[0].anchors, profile.dp_scores[0].anchors);
  EXPECT_EQ(loaded.weights_fingerprint, "sha256:abc");
  EXPECT_EQ(loaded.calibration.n_prompts, 3);
  EXPECT_EQ(loaded.calibration.reuse_floor, 0.8);
  ASSERT_EQ(loaded.roles.size(), 6u);
  for (size_t j = 0; j < 6; ++j) {
    EXPECT_EQ(loaded.roles[j].anchor, profile.roles[j].anchor) << j;
    EXPECT_EQ(loaded.roles[j].reads, profile.roles[j].reads) << j;
    EXPECT_EQ(loaded.roles[j].keeps, profile.roles[j].keeps) << j;
    EXPECT_EQ(loaded.roles[j].why, profile.roles[j].why) << j;
  }
  EXPECT_NO_THROW(check_fingerprint(loaded, "sha256:abc"));
  try {
    check_fingerprint(loaded, "sha256:def");
    ADD_FAILURE() << "fingerprint mismatch accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sha256:abc"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("sha256:def"), std::string::npos);
  }

  auto load_error = [&](const std::string& text, const Shape& shape = kShape) {
    std::ofstream(path) << text;
    try {
      load_profile(path, shape);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  nlohmann::json json = profile_to_json(profile);
  EXPECT_NE(load_error("{\"model\": ").find("malformed JSON"), std::string::npos);
  nlohmann::json missing = json;
  missing.erase("anchors");
  EXPECT_NE(load_error(missing.dump()).find("missing field profile.anchors"), std::string::npos);
  nlohmann::json wrong = json;
  wrong["model"]["n_layers"] = "six";
  EXPECT_NE(load_error(wrong.dump()).find("model.n_layers"), std::string::npos);
  nlohmann::json out_of_range = json;
  out_of_range["head_map"][3][0] = 7;
  EXPECT_NE(load_error(out_of_range.dump()).find("head_map[3][0] = 7"), std::string::npos);
  EXPECT_NE(load_error(json.dump(), Shape{8, 9, 3, 64}).find("made for 6 layers"),
            std::string::npos);
  EXPECT_NE(load_error(out_of_range.dump()).find(path), std::string::npos);  // names the file
  // Integers are exact: a fraction or a value outside the field's type is an
  // error naming the field, never a truncated or wrapped number.
  const auto expect_refused = [&](const std::string& text, const std::string& fragment) {
    const std::string error = load_error(text);
    EXPECT_NE(error.find(fragment), std::string::npos) << "'" << fragment << "' not in: " << error;
  };
  nlohmann::json fraction = json;
  fraction["head_map"][3][0] = 1.5;
  expect_refused(fraction.dump(), "profile.head_map[3][0] must be a whole number, got 1.5");
  nlohmann::json whole_float = json;
  whole_float["anchors"][1] = 2.0;
  expect_refused(whole_float.dump(), "profile.anchors[1] must be a whole number");
  nlohmann::json wrapped = json;
  wrapped["anchors"][1] = 4294967298u;  // 2^32 + 2: 2 once cut to 32 bits
  expect_refused(wrapped.dump(), "profile.anchors[1] = 4294967298 is outside");
  nlohmann::json layers = json;
  layers["model"]["n_layers"] = 4294967302u;  // 2^32 + 6
  expect_refused(layers.dump(), "model.n_layers = 4294967302 is outside");
  nlohmann::json negative_seed = json;
  negative_seed["calibration"]["seed"] = -1;
  expect_refused(negative_seed.dump(), "calibration.seed = -1 is outside");
  expect_refused(R"({"model": {"architecture": "a", "name": "b", "n_layers": 1e300}})", "model.n_layers must be a whole number");
  nlohmann::json not_array = json;
  not_array["anchors"] = 3;
  expect_refused(not_array.dump(), "profile.anchors has the wrong type");
  nlohmann::json bad_calibration = json;
  bad_calibration["calibration"] = "fast";
  expect_refused(bad_calibration.dump(), "profile.calibration is not an object");
  // Roles must agree with the anchors, one per layer.
  const auto with_role = [&](size_t j, const char* field, const nlohmann::json& value) {
    nlohmann::json changed = json;
    changed["roles"][j][field] = value;
    return changed.dump();
  };
  expect_refused(with_role(1, "role", "anchor"), "roles[1] says anchor but layer 1 is not an anchor");
  expect_refused(with_role(2, "role", "reuse"), "roles[2] says reuse but layer 2 is an anchor");
  expect_refused(with_role(0, "role", "select"), "roles[0].role is 'select', not anchor or reuse");
  expect_refused(with_role(3, "reads", 0), "roles[3] reads layer 0, but its anchor is layer 2");
  expect_refused(with_role(1, "keeps", 2.0), "roles[1].keeps = 2 is not a share in [0, 1]");
  expect_refused(with_role(2, "layer", 5), "roles[2].layer must be 2");
  nlohmann::json short_roles = json;
  short_roles["roles"].erase(5);
  expect_refused(short_roles.dump(), "roles has 5 entries, expected one per layer (6)");
  nlohmann::json bad_floor = json;
  bad_floor["calibration"]["reuse_floor"] = 1.5;
  expect_refused(bad_floor.dump(), "calibration.reuse_floor = 1.5 is not a share");
  std::remove(path.c_str());
  EXPECT_THROW(load_profile(temp_path("kascade_no_such_profile.json"), kShape), Error);
}

// Output of every layer of a prefill + decode run.
std::vector<float> run_outputs(Strategy& strategy, const Problem& p,
                               const std::vector<reference::Chunk>& chunks) {
  reference::LiveCache cache(p);
  std::vector<float> all;
  const int d = p.d(), H = p.shape.n_heads;
  for (const reference::Chunk& chunk : chunks) {
    cache.write(p, chunk.first, chunk.first + chunk.n);
    for (int l = 0; l < p.shape.n_layers; ++l) {
      std::vector<float> queries(p.query(l, chunk.first, 0), p.query(l, chunk.first + chunk.n, 0));
      std::vector<float> out(size_t(chunk.n * H * d));
      Step step{l, chunk.phase, queries.data(), chunk.n, chunk.first, cache.layer(p, l), out.data()};
      strategy.forward(step);
      all.insert(all.end(), out.begin(), out.end());
    }
  }
  return all;
}

// p = 100 and a budget above every N keep every key: the same outputs as
// dense (the same kernels over the same keys, so bit for bit).
TEST(AttentionOptions, FullBudgetEqualsDense) {
  const Shape shape{4, 6, 2, 64};
  for (KvType type : {KvType::F32, KvType::F16}) {
    const Problem p = reference::make_problem(shape, 300, type, 12);
    const auto chunks = reference::schedule({128, 96, 45}, 300);
    auto dense = make_dense(shape);
    const std::vector<float> want = run_outputs(*dense, p, chunks);
    for (const char* name : {"kascade", "oracle-topk", "streaming", "quest", "omnikv", "lessismore"}) {
      AttentionOptions full = named(name);
      full.budget_percent = 100;
      auto strategy = make_strategy(full, shape);
      EXPECT_EQ(run_outputs(*strategy, p, chunks), want) << name << " p = 100";
      AttentionOptions big = named(name);
      big.min_k = 1000;  // budget(N) = N for every N here
      strategy = make_strategy(big, shape);
      EXPECT_EQ(run_outputs(*strategy, p, chunks), want) << name << " budget >= N";
    }
  }
}

TEST(AttentionOptions, ReuseLayerBeforeItsAnchorRaisesError) {
  const Shape shape{3, 4, 2, 32};
  const Problem p = reference::make_problem(shape, 64, KvType::F32, 13);
  reference::LiveCache cache(p);
  cache.write(p, 0, 64);
  AttentionOptions o = named("kascade");
  o.min_k = 4;
  o.dense_layers = std::vector<int>{};
  auto strategy = make_strategy(o, shape);  // default profile: every layer of 3 is an anchor
  o.profile = default_profile(shape);
  o.profile->anchors = {0};
  strategy = make_strategy(o, shape);
  std::vector<float> queries(p.query(1, 0, 0), p.query(1, 64, 0)), out(queries.size());
  Step step{1, Phase::Prefill, queries.data(), 64, 0, cache.layer(p, 1), out.data()};
  EXPECT_THROW(strategy->forward(step), Error);
}

class Recorder : public Observer {
 public:
  void on_layer(const LayerReport& report) override { reports.push_back(report); }
  std::vector<LayerReport> reports;
};

TEST(AttentionOptions, DiagnosticsReportKeptMassAndError) {
  const Shape shape{3, 6, 2, 64};
  const Problem p = reference::make_problem(shape, 260, KvType::F16, 14, 3.0);
  const auto chunks = reference::schedule({256}, 260);
  AttentionOptions o = named("kascade");
  o.min_k = 8;
  Recorder recorder;
  auto strategy = with_diagnostics(make_strategy(o, shape), shape, recorder);
  reference::LiveCache cache(p);
  std::vector<int32_t> kept;
  size_t at = 0;
  for (const reference::Chunk& chunk : chunks) {
    cache.write(p, chunk.first, chunk.first + chunk.n);
    for (int l = 0; l < shape.n_layers; ++l) {
      std::vector<float> queries(p.query(l, chunk.first, 0), p.query(l, chunk.first + chunk.n, 0));
      std::vector<float> out(queries.size());
      Step step{l, chunk.phase, queries.data(), chunk.n, chunk.first, cache.layer(p, l), out.data()};
      strategy->forward(step);
      ASSERT_EQ(recorder.reports.size(), ++at);
      const LayerReport& report = recorder.reports.back();
      // Reference: kept mass from softmax rows, error against reference dense outputs.
      double mass_sum = 0, mass_min = 2, keys = 0, diff = 0, norm = 0;
      for (int64_t q = 0; q < chunk.n; ++q)
        for (int head = 0; head < shape.n_heads; ++head) {
          const int64_t position = chunk.first + q;
          strategy->kept_keys(step, q, head, kept);
          const std::vector<double> row = reference::softmax_row(p, l, position, head);
          double mass = 0;
          for (int32_t j : kept) mass += row[j];
          mass_sum += mass;
          mass_min = std::min(mass_min, mass);
          keys += double(kept.size());
          const std::vector<double> dense =
              reference::attend(p, l, position, head, reference::all_keys(position + 1));
          for (int c = 0; c < p.d(); ++c) {
            diff += std::pow(out[(q * shape.n_heads + head) * p.d() + c] - dense[c], 2);
            norm += dense[c] * dense[c];
          }
        }
      const double rows = double(chunk.n * shape.n_heads);
      EXPECT_EQ(report.layer, l);
      EXPECT_NEAR(report.mean_kept_mass, mass_sum / rows, 1e-5);
      EXPECT_NEAR(report.min_kept_mass, mass_min, 1e-5);
      EXPECT_NEAR(report.mean_kept_keys, keys / rows, 1e-9);
      EXPECT_NEAR(report.relative_error, std::sqrt(diff / norm), 1e-5);
      if (l == 0) {
        EXPECT_NEAR(report.mean_kept_mass, 1.0, 1e-5);  // layer 0 is dense
      }
      if (l > 0 && chunk.phase == Phase::Decode) {
        EXPECT_LT(report.mean_kept_mass, 1.0);
        EXPECT_GT(report.relative_error, 0.0);
      }
    }
  }
}

}  // namespace
}  // namespace kascade::attention
