// The `kascade` command on bad input, run as a user runs it: each case spawns
// the built binary and expects exactly one line on stderr, naming the
// problem, nothing on stdout, a non-zero exit status (no signal, no
// sanitizer report) and every existing output file left as it was.
// Models: hostile GGUF files written here byte by byte, the tiny models of
// tests/data/tiny_models (context 256, no chat template) and, in the suite
// CliErrorsOnModel (CTest label `model`), the default model.
#include <gtest/gtest.h>


#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/model_cache.h"
#include "gguf/gguf.h"
#include "model/fingerprint.h"

#include "gguf_builder.h"
#include "run_kascade.h"


namespace kascade {
namespace {

namespace fs = std::filesystem;
using namespace test_gguf;
using json = nlohmann::json;
using test_cli::Outcome;
using test_cli::read_bytes;
using test_cli::write_bytes;

const std::string kTinyModels = std::string(KASCADE_SOURCE_DIR) + "/tests/data/tiny_models/";
// Both: 2 layers, 4 query heads, 2 KV heads, head dim 16, context 256.
const std::string kTinyQwen = kTinyModels + "qwen2_bias.gguf";
const std::string kTinyLlama = kTinyModels + "llama3_rope_freqs.gguf";
const std::string kShippedProfile = std::string(KASCADE_SOURCE_DIR) + "/profiles/SmolLM2-135M-Instruct.Q4_1.json";
// Far above any case's time in a sanitizer build; a run past it is killed and fails.
constexpr auto kTimeLimit = std::chrono::seconds(120);

void write_bytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
  write_bytes(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

// Runs `kascade args...` with stdin from /dev/null; `env` entries ("NAME=value")
// replace or add to this process's environment, and a bare "NAME" removes it.
Outcome run_kascade(const fs::path& dir, const std::vector<std::string>& args,
                    const std::vector<std::string>& env = {}) {
  const Outcome o = test_cli::run_kascade({.args = args, .dir = dir, .env = env, .time_limit = kTimeLimit});
  if (o.timed_out) ADD_FAILURE() << o.command << ": still running after " << kTimeLimit.count() << " s";
  return o;
}

// One line on stderr, "kascade: ..." with every fragment in it, nothing on
// stdout, and a non-zero exit status that no signal caused.
void expect_error(const Outcome& o, const std::vector<std::string>& fragments) {
  SCOPED_TRACE(o.command);
  EXPECT_TRUE(o.exited) << "killed by signal " << o.status << "; stderr:\n" << o.err;
  EXPECT_NE(o.status, 0) << "stderr:\n" << o.err;
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << "stderr:\n" << o.err;
  EXPECT_TRUE(o.err.starts_with("kascade: ") && o.err.ends_with('\n')) << "stderr:\n" << o.err;
  EXPECT_EQ(o.err.find("internal error"), std::string::npos) << o.err;
  EXPECT_EQ(o.err.find("Sanitizer"), std::string::npos) << o.err;
  EXPECT_EQ(o.err.find("runtime error"), std::string::npos) << o.err;
  for (const std::string& fragment : fragments)
    EXPECT_NE(o.err.find(fragment), std::string::npos) << "'" << fragment << "' missing from: " << o.err;
  EXPECT_EQ(o.out, "") << "stdout";
}

// The smallest llama GGUF that reaches the tensors: the keys read_config
// needs and one token_embd.weight [256, 2] of type `embedding_type`.
std::vector<uint8_t> llama_with_embedding_type(uint32_t embedding_type, uint64_t data_bytes) {
  GgufBuilder gguf;
  gguf.kv("general.architecture", kString, string_value("llama"))
      .kv("llama.block_count", kU32, scalar<uint32_t>(1))
      .kv("llama.embedding_length", kU32, scalar<uint32_t>(256))
      .kv("llama.feed_forward_length", kU32, scalar<uint32_t>(512))
      .kv("llama.attention.head_count", kU32, scalar<uint32_t>(4))
      .kv("llama.context_length", kU32, scalar<uint32_t>(64));
  gguf.tensor("token_embd.weight", {256, 2}, embedding_type, 0);
  gguf.data.data.assign(data_bytes, 0);
  return gguf.build();
}

// A profile for the tiny models' attention shape that is valid in every field
// but those a test changes.
json tiny_profile(const std::string& fingerprint) {
  return {{"model",
           {{"architecture", "qwen2"}, {"name", "tiny"}, {"n_layers", 2}, {"n_heads", 4}, {"n_kv_heads", 2},
            {"head_dim", 16}}},
          {"weights_fingerprint", fingerprint},
          {"anchors", json::array({0})},
          {"head_map", {{0, 1}, {1, 0}}}};
}

class CliErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           fmt::format("kascade_cli_errors_{}_{}_{}", info->test_suite_name(), info->name(), ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Outcome run(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) const {
    return run_kascade(dir_, args, env);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

TEST_F(CliErrors, MissingModelFile) {
  const std::string missing = path("missing.gguf");
  expect_error(run({"generate", "-m", missing, "-p", "hi"}), {missing, "cannot open", "No such file"});
  expect_error(run({"info", missing}), {missing, "cannot open"});
}

// Without OMP_WAIT_POLICY or GOMP_SPINCOUNT the program re-executes itself
// with a short spin count (ops::prepare_environment): the arguments, the
// errors and the generated text stay what they are without the re-execution.
TEST_F(CliErrors, ShortSpinReexecutionKeepsTheRun) {
  const std::vector<std::string> unset{"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"};
  const std::string missing = path("missing.gguf");
  expect_error(run({"info", missing}, unset), {missing, "cannot open"});
  expect_error(run({"generate", "-m", kTinyLlama, "--raw", "-p", "hi", "-n", "4", "--budget", "0"}, unset),
               {"--budget '0' is not a percentage in (0, 100]"});

  const std::vector<std::string> args{"generate", "-m", kTinyLlama, "-p", "hello world", "--raw", "-n", "8", "-q"};
  const Outcome reexecuted = run(args, unset);
  const Outcome direct = run(args, {"OMP_WAIT_POLICY=passive"});
  EXPECT_TRUE(reexecuted.exited && reexecuted.status == 0) << reexecuted.err;
  EXPECT_TRUE(direct.exited && direct.status == 0) << direct.err;
  EXPECT_FALSE(direct.out.empty());
  EXPECT_EQ(reexecuted.out, direct.out);
  EXPECT_EQ(reexecuted.err, direct.err);
}

// Every subcommand finds its default model under $KASCADE_CACHE.
TEST_F(CliErrors, DefaultModelUnderKascadeCache) {
  const std::vector<std::string> env{"KASCADE_CACHE=" + path("cache")};
  const std::string expected = path("cache") + "/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  expect_error(run({"generate", "-p", "hi"}, env), {expected, "cannot open"});
  expect_error(run({"calibrate", "--out", path("profile.json")}, env), {expected, "cannot open"});
  expect_error(run({"eval", "--out", path("eval")}, env), {expected, "cannot open"});
}

TEST_F(CliErrors, NotAGgufFile) {
  std::mt19937 random(7);
  std::string bytes(1 << 16, '\0');
  for (char& byte : bytes) byte = char(random());
  write_bytes(path("random.gguf"), bytes);
  write_bytes(path("empty.gguf"), "");
  expect_error(run({"generate", "-m", path("random.gguf"), "-p", "hi"}), {path("random.gguf"), "not a GGUF file"});
  expect_error(run({"info", path("random.gguf")}), {path("random.gguf"), "not a GGUF file"});
  expect_error(run({"generate", "-m", path("empty.gguf"), "-p", "hi"}), {path("empty.gguf")});
  expect_error(run({"generate", "-m", dir_.string(), "-p", "hi"}), {dir_.string(), "Is a directory"});
}

// Cut in the metadata, in the tensor table and in the tensor data.
TEST_F(CliErrors, TruncatedModel) {
  const std::string model = read_bytes(kTinyQwen);
  for (const size_t size : {size_t(16), size_t(4096), model.size() / 2, model.size() - 1}) {
    const std::string cut = path(fmt::format("cut{}.gguf", size));
    write_bytes(cut, std::string_view(model).substr(0, size));
    expect_error(run({"generate", "-m", cut, "--raw", "-p", "hi", "-n", "4"}), {cut, "offset"});
  }
}

TEST_F(CliErrors, UnsupportedArchitecture) {
  GgufBuilder gguf;
  gguf.kv("general.architecture", kString, string_value("mamba"));
  write_bytes(path("mamba.gguf"), gguf.build());
  expect_error(run({"generate", "-m", path("mamba.gguf"), "-p", "hi"}),
               {path("mamba.gguf"), "unsupported architecture 'mamba'"});
}

TEST_F(CliErrors, UnsupportedTensorType) {
  // Q2_K: a type the reader knows but the engine cannot compute with.
  write_bytes(path("q2k.gguf"), llama_with_embedding_type(kTypeQ2_K, 2 * 84));
  expect_error(run({"generate", "-m", path("q2k.gguf"), "-p", "hi"}),
               {path("q2k.gguf"), "token_embd.weight", "unsupported type Q2_K"});
  write_bytes(path("unknown.gguf"), llama_with_embedding_type(99, 0));
  expect_error(run({"generate", "-m", path("unknown.gguf"), "-p", "hi"}),
               {path("unknown.gguf"), "unknown tensor type id 99"});
  // The control: with F32 the same file gets past token_embd.weight to the first tensor it lacks.
  write_bytes(path("f32.gguf"), llama_with_embedding_type(kTypeF32, 2 * 256 * 4));
  expect_error(run({"generate", "-m", path("f32.gguf"), "-p", "hi"}), {path("f32.gguf"), "output_norm.weight"});
}

TEST_F(CliErrors, PromptLongerThanTheContext) {
  std::string words;  // 3000 bytes: under the tiny vocabulary's cap of 13 bytes per token of the context
  for (int i = 0; i < 600; ++i) words += "word ";
  write_bytes(path("long.txt"), words);
  const std::vector<std::string> tiny{"generate", "-m", kTinyQwen, "--raw"};
  const auto with = [&](std::initializer_list<std::string> more) {
    std::vector<std::string> args = tiny;
    args.insert(args.end(), more);
    return args;
  };
  expect_error(run(with({"-f", path("long.txt"), "-n", "4"})),
               {"prompt of", "tokens plus 4 new tokens exceeds the model's context of 256 tokens"});
  expect_error(run(with({"-p", "hi", "-n", "300"})), {"plus 300 new tokens exceeds the model's context of 256"});
  expect_error(run(with({"-p", "hi", "-n", "9223372036854775807"})), {"plus 9223372036854775807 new tokens"});
  expect_error(run(with({"-p", "hi", "--ctx", "1000"})), {"--ctx 1000 exceeds the model's context of 256"});
  expect_error(run(with({"-p", "hello there", "--ctx", "2"})), {"does not fit --ctx 2"});
  // The control: a prompt that fits runs.
  const Outcome fits = run(with({"-p", "hi", "-n", "4", "-q"}));
  EXPECT_TRUE(fits.exited && fits.status == 0) << fits.err;
}

// A bad flag and what its error line must say.
struct FlagCase {
  std::vector<std::string> flags;
  std::vector<std::string> fragments;
};

// Each flag's bad value, on a tiny model with a prompt that would otherwise run
// (-n 4: the default 256 new tokens would not fit the context).
TEST_F(CliErrors, BadGenerateFlags) {
  const FlagCase cases[] = {
      {{"--bogus"}, {"--bogus"}},
      {{"--budget", "0"}, {"--budget '0' is not a percentage in (0, 100]"}},
      {{"--budget", "150"}, {"--budget '150'"}},
      {{"--budget", "nan"}, {"--budget 'nan'"}},
      {{"--budget", "lots"}, {"--budget", "lots"}},
      {{"--tile", "0"}, {"--tile '0'"}},
      {{"--min-k", "0"}, {"--min-k '0'"}},
      {{"--attention", "nosuch"}, {"--attention: unknown method 'nosuch'"}},
      {{"--threads", "-1"}, {"--threads", "must not be negative, got -1"}},
      {{"--threads", "100000"}, {"--threads", "at most 1024"}},
      {{"-n", "-1"}, {"--max-tokens", "must not be negative"}},
      {{"-n", "99999999999999999999"}, {"--max-tokens", "whole number"}},
      {{"--temperature", "-1"}, {"temperature", "-1"}},
      {{"--top-p", "0"}, {"top-p"}},
      {{"--repeat-penalty", "0"}, {"repetition penalty"}},
      {{"--kv-type", "f8"}, {"--kv-type", "'f8'"}},
      {{"--stop", ""}, {"stop string 0 is empty"}},
      {{"--window-fraction", "2", "--attention", "streaming"}, {"--window-fraction '2'"}},
      {{"--demo"}, {"give only one of"}},
      {{"--logits-out", "/nonexistent-kascade-dir/logits.f32"}, {"--logits-out", "does not exist"}},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args{"generate", "-m", kTinyQwen, "--raw", "-p", "hi"};
    if (c.flags[0] != "-n") args.insert(args.end(), {"-n", "4"});
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    expect_error(run(args), c.fragments);
  }
}

// serve's flags, in a build with or without the HTTP server (the options'
// targets must outlive the parse either way).
TEST_F(CliErrors, BadServeFlags) {
  const FlagCase cases[] = {
      {{"--bogus"}, {"--bogus"}},
      {{"--ctx-size", "-1"}, {"--ctx-size", "must not be negative"}},
      {{"--threads", "-1"}, {"--threads", "must not be negative, got -1"}},
      {{"--budget", "lots"}, {"--budget", "lots"}},
  };
  for (const auto& c : cases) {
    std::vector<std::string> args{"serve", "-m", kTinyQwen};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    expect_error(run(args), c.fragments);
  }
}

TEST_F(CliErrors, BadPrompts) {
  const std::vector<std::string> tiny{"generate", "-m", kTinyQwen, "-n", "4"};
  const auto with = [&](std::initializer_list<std::string> more) {
    std::vector<std::string> args = tiny;
    args.insert(args.end(), more);
    return args;
  };
  expect_error(run(with({"-p", "hi"})), {"no chat template", "--raw"});
  expect_error(run(with({"--raw"})), {"the prompt is empty"});  // stdin is /dev/null
  expect_error(run(with({"--raw", "-f", path("missing.txt")})), {"prompt file", path("missing.txt"), "No such file"});
  expect_error(run(with({"--raw", "-f", dir_.string()})), {"prompt file", dir_.string(), "Is a directory"});
}

TEST_F(CliErrors, BadProfiles) {
  const std::string own_fingerprint = model::weights_fingerprint(gguf::File::open(kTinyQwen));
  const auto run_with_profile = [&](const std::string& profile) {
    return run({"generate", "-m", kTinyQwen, "--raw", "-p", "hi", "-n", "4", "--attention", "kascade", "--profile",
                profile});
  };
  const auto write_profile = [&](const std::string& name, const json& profile) {
    write_bytes(path(name), profile.dump());
    return path(name);
  };
  write_bytes(path("malformed.json"), "{\"model\": ");
  expect_error(run_with_profile(path("malformed.json")), {path("malformed.json"), "malformed JSON at byte"});
  expect_error(run_with_profile(write_profile("empty.json", json::object())),
               {path("empty.json"), "missing field profile.model"});
  expect_error(run_with_profile(path("missing.json")), {"cannot read profile", path("missing.json")});
  expect_error(run_with_profile(dir_.string()), {"cannot read profile", dir_.string(), "Is a directory"});

  json anchors = tiny_profile(own_fingerprint);
  anchors["anchors"] = {0, 2};
  expect_error(run_with_profile(write_profile("anchors.json", anchors)),
               {path("anchors.json"), "anchors[1] = 2 outside [0, 2)"});
  json head_map = tiny_profile(own_fingerprint);
  head_map["head_map"][1][0] = 5;
  expect_error(run_with_profile(write_profile("head_map.json", head_map)),
               {path("head_map.json"), "head_map[1][0] = 5 outside [0, 2)"});

  // Made for other weights of the same shape, and for another model.
  expect_error(run_with_profile(write_profile("other.json", tiny_profile("fnv1a64:0123456789abcdef"))),
               {path("other.json"), "calibrated for weights fnv1a64:0123456789abcdef", own_fingerprint});
  expect_error(run_with_profile(kShippedProfile), {kShippedProfile, "made for 30 layers"});

  // The control: the same profile with the model's own fingerprint runs.
  const Outcome own = run_with_profile(write_profile("own.json", tiny_profile(own_fingerprint)));
  EXPECT_TRUE(own.exited && own.status == 0) << own.err;
}

// A failing eval leaves an earlier run's results as they were.
TEST_F(CliErrors, BadEvalRequests) {
  const fs::path out = dir_ / "eval";
  fs::create_directories(out);
  write_bytes(out / "results.csv", "an earlier run\n");
  const auto eval = [&](std::initializer_list<std::string> more) {
    std::vector<std::string> args{"eval", "-m", kTinyQwen, "--out", out.string()};
    args.insert(args.end(), more);
    return run(args);
  };
  expect_error(eval({"--tasks", "niah_single,nosuch"}), {"unknown task 'nosuch'"});
  expect_error(eval({"--strategies", "dense,nosuch"}), {"unknown strategy 'nosuch'"});
  expect_error(eval({}), {"length 1024 is above the model's context of 256 tokens"});  // lengths 1k..8k
  expect_error(eval({"--samples", "0"}), {"--samples must be at least 1"});
  expect_error(eval({"--budget", "0"}), {"--budget 0"});
  expect_error(eval({"--threads", "-1"}), {"--threads"});
  expect_error(eval({"--haystack", dir_.string()}), {"haystack corpus", "Is a directory"});
  EXPECT_EQ(read_bytes(out / "results.csv"), "an earlier run\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(out), fs::directory_iterator()), 1);

  // Unwritable --out: a path under a file, and the file itself.
  write_bytes(path("file.txt"), "keep\n");
  expect_error(run({"eval", "-m", kTinyQwen, "--out", path("file.txt") + "/eval"}),
               {"cannot create output directory", "Not a directory"});
  expect_error(run({"eval", "-m", kTinyQwen, "--out", path("file.txt")}), {"cannot create output directory"});
  EXPECT_EQ(read_bytes(path("file.txt")), "keep\n");
  if (geteuid() != 0) {  // root writes anywhere
    fs::create_directories(dir_ / "read_only");
    fs::permissions(dir_ / "read_only", fs::perms::owner_read | fs::perms::owner_exec);
    expect_error(run({"eval", "-m", kTinyQwen, "--out", path("read_only")}), {"not writable"});
  }
}

// A failing calibration leaves the profile it would replace as it was.
TEST_F(CliErrors, BadCalibrateRequests) {
  const std::string profile = path("profile.json");
  write_bytes(profile, "an earlier profile\n");
  const auto calibrate = [&](std::initializer_list<std::string> more) {
    std::vector<std::string> args{"calibrate", "-m", kTinyLlama, "--prompts", "1", "--max-tokens", "64", "--out",
                                  profile};
    args.insert(args.end(), more);
    return run(args);
  };
  expect_error(calibrate({"--anchors", "abc"}), {"--anchors 'abc' is not a count or a range"});
  expect_error(calibrate({"--anchors", "3.."}), {"--anchors '3..'"});
  expect_error(calibrate({"--anchors", "2..1"}), {"anchor counts 2..1"});
  expect_error(calibrate({"--anchors", "0..2"}), {"anchor counts 0..2"});
  expect_error(calibrate({"--anchors", "1..3"}), {"anchor counts 1..3", "<= 2 (the model's global attention layers)"});
  expect_error(calibrate({"--anchors", "1..2", "--choose", "3"}), {"--choose 3 is outside --anchors 1..2"});
  expect_error(calibrate({"--anchors", "1..2", "--dev-set", dir_.string()}), {"dev set", "Is a directory"});
  expect_error(calibrate({"--anchors", "1..2", "--threads", "-1"}), {"--threads"});
  expect_error(calibrate({"--anchors", "1..2", "--reuse-floor", "1.5"}), {"--reuse-floor"});
  expect_error(calibrate({"--anchors", "1..2", "--reuse-floor", "nan"}), {"reuse floor nan"});
  expect_error(calibrate({"--anchors", "1..2", "--device", "gpu"}), {"--device 'gpu' is not a device"});
  expect_error(calibrate({"--anchors", "1..2", "--choose", "1", "--reuse-floor", "0.9"}),
               {"give --choose or --reuse-floor, not both"});
  write_bytes(path("file.txt"), "keep\n");
  expect_error(calibrate({"--anchors", "1..2", "--stats", path("file.txt") + "/stats.json"}),
               {"--stats", "is not a directory"});
  EXPECT_EQ(read_bytes(profile), "an earlier profile\n");

  // Unwritable --out.
  const auto calibrate_to = [&](const std::string& out) {
    return run({"calibrate", "-m", kTinyLlama, "--anchors", "1..2", "--choose", "1", "--out", out});
  };
  expect_error(calibrate_to(path("file.txt") + "/profile.json"), {"--out", "is not a directory"});
  expect_error(calibrate_to(path("missing") + "/profile.json"), {"--out", "does not exist"});
  expect_error(calibrate_to(dir_.string()), {"--out", "is a directory"});
  EXPECT_EQ(read_bytes(path("file.txt")), "keep\n");
  if (geteuid() != 0) {  // root writes anywhere
    fs::create_directories(dir_ / "read_only");
    fs::permissions(dir_ / "read_only", fs::perms::owner_read | fs::perms::owner_exec);
    expect_error(calibrate_to(path("read_only") + "/profile.json"), {"--out", "not writable"});
  }
}

// ---------------------------------------------------------------------------
// On the default model (label `model`).

class CliErrorsOnModel : public CliErrors {
 protected:
  void SetUp() override {
    if (!fs::exists(default_model_path())) GTEST_SKIP() << "default model not found at " << default_model_path();
    CliErrors::SetUp();
  }
};

TEST_F(CliErrorsOnModel, TruncatedModel) {
  std::ifstream in(default_model_path(), std::ios::binary);
  std::string head(1 << 20, '\0');
  in.read(head.data(), std::streamsize(head.size()));
  write_bytes(path("head.gguf"), head);
  expect_error(run({"generate", "-m", path("head.gguf"), "-p", "hi"}), {path("head.gguf"), "offset"});
}

TEST_F(CliErrorsOnModel, PromptLongerThanTheContext) {
  std::string words;
  for (int i = 0; i < 9000; ++i) words += "word ";
  write_bytes(path("long.txt"), words);
  expect_error(run({"generate", "-f", path("long.txt"), "-n", "4"}), {"exceeds the model's context of 8192 tokens"});
}

// SmolLM2 has tokens of 81 bytes ("\n" and 80 spaces): 100 of them fit a
// 120-token context although they are more than 64 bytes per token.
TEST_F(CliErrorsOnModel, PromptOfLongTokensFitsTheCap) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += "\n" + std::string(80, ' ');
  write_bytes(path("spaces.txt"), text);
  const Outcome o = run({"generate", "--raw", "-c", "120", "-n", "4", "-q", "-f", path("spaces.txt")});
  EXPECT_TRUE(o.exited && o.status == 0) << o.err;
  // The cap is the longest token's 81 bytes per token of the context.
  write_bytes(path("more.txt"), std::string(81 * 120 + 1, ' '));
  expect_error(run({"generate", "--raw", "-c", "120", "-n", "4", "-f", path("more.txt")}),
               {"is longer than 9720 bytes (81 bytes, the vocabulary's longest token, per token of the 120-token"});
}

// SmolLM2's vocabulary has no token for the byte 0xff: the prompt is not
// empty, its bytes give no tokens.
TEST_F(CliErrorsOnModel, PromptOfBytesWithoutTokens) {
  expect_error(run({"generate", "--raw", "-n", "4", "-p", "\xff"}),
               {"the prompt (1 byte) gives no tokens: the vocabulary has no token for its bytes (it is not valid UTF-8)"});
}

// --logits-out keeps its rows in memory: a run that could make more than 1 GiB of them is refused.
TEST_F(CliErrorsOnModel, LogitsOutBeyondItsMemoryBound) {
  expect_error(run({"generate", "-p", "hi", "-n", "6000", "--logits-out", path("logits.f32")}),
               {"--logits-out would hold up to 6001 rows of 49152 logits", "fewer tokens with -n"});
  EXPECT_FALSE(fs::exists(path("logits.f32")));
}

TEST_F(CliErrorsOnModel, ProfileForOtherWeights) {
  json shipped = json::parse(read_bytes(kShippedProfile));
  shipped["weights_fingerprint"] = "fnv1a64:0123456789abcdef";
  write_bytes(path("other.json"), shipped.dump());
  const auto generate_with = [&](const std::string& profile) {
    return run({"generate", "-p", "hi", "-n", "4", "--attention", "kascade", "--profile", profile});
  };
  expect_error(generate_with(path("other.json")),
               {path("other.json"), "calibrated for weights fnv1a64:0123456789abcdef"});
  shipped["anchors"].push_back(30);
  write_bytes(path("layer.json"), shipped.dump());
  expect_error(generate_with(path("layer.json")), {path("layer.json"), "= 30 outside [0, 30)"});
  write_bytes(path("tiny.json"), tiny_profile("fnv1a64:0123456789abcdef").dump());
  expect_error(generate_with(path("tiny.json")), {path("tiny.json"), "made for 2 layers"});
}

TEST_F(CliErrorsOnModel, EvalLengthAboveTheContext) {
  expect_error(run({"eval", "--lengths", "4k,16k", "--out", path("eval")}),
               {"length 16384 is above the model's context of 8192 tokens"});
}

}  // namespace
}  // namespace kascade
