#include "cli/commands.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "backends/devices.h"
#include "cli/demo_prompt.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/memory.h"
#include "core/model_cache.h"
#include "core/progress.h"
#include "engine/generate.h"
#include "engine/scheduler.h"
#include "kascade/profile.h"
#include "model/fingerprint.h"
#include "model/model.h"
#include "ops/threading.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace kascade::cli {
namespace {

struct GenerateArgs {
  std::string model = default_model_path();
  std::string prompt;
  std::string prompt_file;
  bool demo = false;
  bool raw = false;
  std::string system;
  int64_t max_tokens = 256;
  int64_t context = 0;
  int threads = 0;
  std::string device = "auto";
  std::string kv_type = "f16";
  std::vector<std::string> stops;
  sampling::SamplerOptions sampling{.temperature = 0.0f};
  AttentionOptions attention;
  std::string profile;
  std::string logits_out;
  bool quiet = false;
};

bool has_prompt_source(const GenerateArgs& args) {
  const int sources = int(!args.prompt.empty()) + int(!args.prompt_file.empty()) + int(args.demo);
  if (sources > 1) fail("give only one of --prompt, --prompt-file and --demo");
  return sources == 1;
}

// The prompt text from exactly one source: --prompt, --prompt-file (a file,
// pipe or FIFO), --demo or standard input. No token stands for more bytes
// than the vocabulary's longest, so a text longer than that times the
// context cannot fit: reading stops there, and a huge file or an endless
// pipe is refused, not read and tokenized whole.
std::string prompt_text(const GenerateArgs& args, int64_t context, const tokenizer::Tokenizer& tokenizer) {
  const uint64_t bytes_per_token = tokenizer.longest_piece();
  const uint64_t max_bytes = uint64_t(context) * bytes_per_token;
  const auto too_long = [&](std::string_view source) {
    fail("{} is longer than {} bytes ({} bytes, the vocabulary's longest token, per token of the {}-token "
         "context): it cannot fit",
         source, max_bytes, bytes_per_token, context);
  };
  std::optional<std::string> text;
  if (!args.prompt.empty()) {
    text = args.prompt;
    if (text->size() > max_bytes) too_long("the --prompt text");
  } else if (!args.prompt_file.empty()) {
    text = read_file_up_to(args.prompt_file, "prompt file", max_bytes, InputKinds::kRegularFilesAndPipes);
    if (!text) too_long(fmt::format("prompt file '{}'", args.prompt_file));
  } else if (args.demo) {
    text = demo_prompt();
  } else {
    text = read_stream_up_to(STDIN_FILENO, "the prompt from standard input", max_bytes);
    if (!text) too_long("the prompt on standard input");
  }
  // The same rule with or without the chat template.
  if (text->empty()) fail("the prompt is empty");
  return std::move(*text);
}

// Streamed text; a write that fails (a full disk, a closed stdout) ends the
// run with an error instead of losing the text unnoticed.
void write_stdout(std::string_view bytes) {
  if (std::fwrite(bytes.data(), 1, bytes.size(), stdout) != bytes.size() || std::fflush(stdout) != 0)
    fail("cannot write the generated text to standard output: {}", std::strerror(errno));
}

void run_generate(const GenerateArgs& args) {
  sampling::validate(args.sampling);
  ops::configure_threads(args.threads);
  if (args.kv_type != "f16" && args.kv_type != "f32") fail("--kv-type must be f16 or f32, got '{}'", args.kv_type);
  if (!has_prompt_source(args) && isatty(STDIN_FILENO))
    fail("no prompt: give --prompt TEXT, --prompt-file FILE, --demo, or pipe text on stdin");
  if (!args.logits_out.empty()) check_output_file(args.logits_out, "--logits-out", {args.model, args.prompt_file});

  const std::unique_ptr<engine::Backend> backend = backends::make_backend(args.device, args.model);
  const tokenizer::Tokenizer tokenizer(backend->file());
  const model::Config& config = backend->config();
  if (args.context > config.context_length)
    fail("--ctx {} exceeds the model's context of {} tokens", args.context, config.context_length);
  const std::string text = prompt_text(args, args.context > 0 ? args.context : config.context_length, tokenizer);

  std::vector<int32_t> prompt;
  if (args.raw) {
    prompt = tokenizer.encode(text, /*add_special_tokens=*/true, /*parse_special=*/false);
    // The tokenizer drops bytes its vocabulary has no token for.
    if (prompt.empty())
      fail("the prompt ({} byte{}) gives no tokens: the vocabulary has no token for its bytes{}", text.size(),
           text.size() == 1 ? "" : "s", tokenizer::is_valid_utf8(text) ? "" : " (it is not valid UTF-8)");
  } else {
    const tokenizer::ChatTemplate chat = tokenizer::ChatTemplate::from_jinja(tokenizer.chat_template());
    std::vector<tokenizer::ChatMessage> messages;
    if (!args.system.empty()) messages.push_back({"system", args.system});
    messages.push_back({"user", text});
    // The messages are text: a control token typed in them stays text.
    prompt = chat.encode(tokenizer, messages, /*add_generation_prompt=*/true);
  }
  // The cache holds the prompt and room for at least one new token (--ctx, else the prompt and --max-tokens).
  const int64_t n_prompt = int64_t(prompt.size());
  if (args.context > 0 && n_prompt >= args.context)
    fail("prompt of {} tokens does not fit --ctx {}", n_prompt, args.context);
  if (args.context == 0 && (n_prompt >= config.context_length || args.max_tokens > config.context_length - n_prompt))
    fail("prompt of {} tokens plus {} new tokens exceeds the model's context of {} tokens", n_prompt,
         args.max_tokens, config.context_length);
  const int64_t capacity = args.context > 0 ? args.context : n_prompt + std::max<int64_t>(args.max_tokens, 1);
  // --logits-out holds every row in memory until the run ends (the file is written all or nothing).
  constexpr uint64_t kMaxLogitsBytes = uint64_t(1) << 30;
  const uint64_t logits_rows = uint64_t(std::min(args.max_tokens, capacity - n_prompt)) + 1;
  if (!args.logits_out.empty() && logits_rows * uint64_t(config.vocab_size) * sizeof(float) > kMaxLogitsBytes)
    fail("--logits-out would hold up to {} rows of {} logits ({} bytes, more than {} MiB): ask for fewer tokens with -n",
         logits_rows, config.vocab_size, logits_rows * uint64_t(config.vocab_size) * sizeof(float),
         kMaxLogitsBytes >> 20);

  AttentionOptions strategy_options = args.attention;
  // Every layer selecting (the default) reads no anchors: no word of a missing profile then.
  if (strategy_options.kascade())
    strategy_options.profile = model::resolve_profile(args.profile, args.model, config, backend->file(),
                                                      args.quiet || strategy_options.all_anchors);
  if (!args.profile.empty() && !strategy_options.kascade())
    fmt::print(stderr, "kascade: warning: --profile is read only by --attention kascade; ignored with --attention {}\n",
               method_name(strategy_options.method));

  // One request through the scheduler the server uses (engine/scheduler.h).
  engine::Request request;
  request.prompt = prompt;
  request.options.max_new_tokens = args.max_tokens;
  request.options.stop_strings = args.stops;
  request.options.sampling = args.sampling;
  request.attention = strategy_options;
  request.kv_type = args.kv_type == "f16" ? attention::KvType::F16 : attention::KvType::F32;
  request.capacity = capacity;
  std::unique_ptr<ProgressBar> progress;
  bool line_open = false;  // streamed text ends mid-line
  request.on_text = [&](const std::string& piece) {
    write_stdout(piece);
    line_open = piece.back() != '\n';
  };
  request.on_prefill = [&](int64_t done, int64_t total) {
    if (args.quiet) return;
    if (!progress) progress = std::make_unique<ProgressBar>(uint64_t(total), ProgressOptions{.label = "prefill",
                                                                           .show_after_seconds = 1.0});
    progress->update(uint64_t(done));
    if (done == total) progress.reset();
  };
  std::string logits;  // --logits-out: float32 rows, one per sampled step
  if (!args.logits_out.empty())
    request.on_logits = [&](std::span<const float> row) {
      logits.append(reinterpret_cast<const char*>(row.data()), row.size_bytes());
    };
  engine::GenerationResult result;
  request.on_finish = [&](const engine::GenerationResult& r) { result = r; };
  engine::Scheduler scheduler(*backend, tokenizer, {.max_running = 1, .max_queued = 0});
  scheduler.submit(std::move(request));
  scheduler.run_until_idle();
  progress.reset();
  if (result.stop_reason == "error") {
    if (line_open) std::fputc('\n', stdout);  // so that the error, on a shared terminal, starts its own line
    fail("{}", result.error);
  }
  write_stdout("\n");
  if (!args.logits_out.empty()) write_file(args.logits_out, logits, "logits file");
  if (args.quiet) return;
  const std::string device_memory = backend->memory_report();
  const double prefill_rate = double(result.prompt_tokens) / std::max(result.prefill_seconds, 1e-9);
  const double decode_rate =
      result.tokens.size() > 1 ? double(result.tokens.size() - 1) / std::max(result.decode_seconds, 1e-9) : 0.0;
  fmt::print(stderr,
             "\n--- {} | {} | attention {} | prompt {} tokens | prefill {:.1f} tok/s ({:.2f} s) | "
             "generated {} tokens, decode {:.1f} tok/s | stop: {} | KV cache {} | peak memory {}{}\n",
             config.name, backend->device_name(), result.attention_name, result.prompt_tokens, prefill_rate,
             result.prefill_seconds, result.tokens.size(), decode_rate, result.stop_reason, format_bytes(result.kv_bytes),
             format_bytes(peak_resident_bytes()), device_memory.empty() ? "" : " | " + device_memory);
}

void run_info(const std::string& path) {
  const gguf::File file = gguf::File::open(path);
  fmt::print("file: {}\nGGUF version {}, {} metadata keys, {} tensors, alignment {}, {} bytes\n\n", path,
             file.version(), file.metadata().size(), file.tensors().size(), file.alignment(), file.file_size());
  fmt::print("metadata:\n");
  for (const auto& [key, value] : file.metadata())
    fmt::print("  {:<44} {:<8} {}\n", key, gguf::value_type_name(value.type), gguf::to_string(value));
  fmt::print("\ntensors:\n  {:<36} {:<6} {:<20} {:>12} {:>12}\n", "name", "type", "shape", "offset", "bytes");
  for (const gguf::TensorInfo& t : file.tensors())
    fmt::print("  {:<36} {:<6} {:<20} {:>12} {:>12}\n", t.name, type_traits(t.type).name,
               fmt::format("[{}]", fmt::join(t.dims, ", ")), t.offset, t.n_bytes);
  try {
    const model::Config c = model::read_config(file);
    fmt::print("\nmodel: {} ({}), {} layers, d_model {}, {} heads / {} KV heads (group {}), head dim {}, "
               "ffn {}, vocab {}, context {}\n",
               c.name, c.architecture_name, c.n_layers, c.d_model, c.n_heads, c.n_kv_heads, c.n_heads / c.n_kv_heads,
               c.head_dim, c.ffn_dim, c.vocab_size, c.context_length);
  } catch (const Error& e) {
    fmt::print("\nmodel: not runnable here: {}\n", e.what());
  }
  fmt::print("\ndevices:\n{}", backends::describe_devices());
}

struct TokenizeArgs {
  std::string model = default_model_path();
  std::string prompt;
  std::string prompt_file;
  bool no_special = false;
  bool parse_special = false;
};

// Texts to tokenize stay far below this; it only stops an endless stdin.
constexpr uint64_t kMaxTokenizeBytes = uint64_t(64) << 20;

// Prints the token ids of a text, space-separated on one line: what the
// engine feeds the model for a --raw prompt, for comparing tokenizers.
void run_tokenize(const TokenizeArgs& args) {
  if (!args.prompt.empty() && !args.prompt_file.empty()) fail("give only one of --prompt and --prompt-file");
  std::optional<std::string> text;
  if (!args.prompt.empty()) {
    text = args.prompt;
  } else if (!args.prompt_file.empty()) {
    text = read_file_up_to(args.prompt_file, "text file", kMaxTokenizeBytes);
    if (!text) fail("text file '{}' is longer than {} bytes", args.prompt_file, kMaxTokenizeBytes);
  } else {
    if (isatty(STDIN_FILENO)) fail("no text: give --prompt TEXT, --prompt-file FILE, or pipe text on stdin");
    text = read_stream_up_to(STDIN_FILENO, "the text from standard input", kMaxTokenizeBytes);
    if (!text) fail("the text on standard input is longer than {} bytes", kMaxTokenizeBytes);
  }
  const gguf::File file = gguf::File::open(args.model);
  const tokenizer::Tokenizer tokenizer(file);
  const std::vector<int32_t> ids = tokenizer.encode(*text, !args.no_special, args.parse_special);
  write_stdout(fmt::format("{}\n", fmt::join(ids, " ")));
}

}  // namespace

CLI::Validator count_flag(int64_t max) {
  return CLI::Validator(
      [max](std::string& input) -> std::string {
        int64_t value = 0;
        const auto [end, error] = std::from_chars(input.data(), input.data() + input.size(), value);
        if (error != std::errc() || end != input.data() + input.size())
          return fmt::format("expected a whole number, got '{}'", input);
        if (value < 0) return fmt::format("must not be negative, got {}", value);
        if (value > max) return fmt::format("must be at most {}, got {}", max, value);
        return "";
      },
      "COUNT");
}

CLI::Validator seed_flag() {
  return CLI::Validator(
      [](std::string& input) -> std::string {
        uint64_t value = 0;
        const auto [end, error] = std::from_chars(input.data(), input.data() + input.size(), value);
        if (error == std::errc::result_out_of_range) return fmt::format("must be at most {}, got {}", UINT64_MAX, input);
        if (error != std::errc() || end != input.data() + input.size())
          return fmt::format("expected a whole number >= 0, got '{}'", input);
        return "";
      },
      "SEED");
}

CLI::Validator seconds_flag(double max) {
  return CLI::Validator(
      [max](std::string& input) -> std::string {
        double value = 0;
        const auto [end, error] = std::from_chars(input.data(), input.data() + input.size(), value);
        if (error != std::errc() || end != input.data() + input.size() || !(value >= 0 && value <= max))
          return fmt::format("expected seconds in [0, {}], got '{}'", max, input);
        return "";
      },
      "SECONDS");
}

void register_generate(CLI::App& app) {
  auto args = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text from a prompt, streaming tokens to stdout");
  cmd->add_option("-m,--model", args->model, "GGUF model file")->capture_default_str();
  cmd->add_option("--device", args->device, fmt::format("Where to run: {}", backends::supported_devices()))
      ->capture_default_str();
  cmd->add_option("-p,--prompt", args->prompt, "Prompt text");
  cmd->add_option("-f,--prompt-file", args->prompt_file, "Read the prompt from a file");
  cmd->add_flag("--demo", args->demo, "Use the built-in long document and question as the prompt");
  cmd->add_flag("--raw", args->raw, "Feed the prompt as is (no chat template)");
  cmd->add_option("--system", args->system, "System message (chat mode)");
  cmd->add_option("-n,--max-tokens", args->max_tokens, "Maximum new tokens")->capture_default_str()
      ->check(count_flag(INT64_MAX));
  cmd->add_option("-c,--ctx", args->context, "Context size in tokens (default: prompt + max tokens)")
      ->check(count_flag(INT64_MAX));
  cmd->add_option("-t,--threads", args->threads, "Threads (0 = all cores)")->capture_default_str()
      ->check(count_flag(kMaxThreads));
  cmd->add_option("--kv-type", args->kv_type, "KV cache storage: f16 or f32")->capture_default_str();
  cmd->add_option("--stop", args->stops, "Stop when this string is generated (repeatable)");
  cmd->add_option("--temperature", args->sampling.temperature, "Sampling temperature (0 = greedy)")
      ->capture_default_str();
  cmd->add_option("--top-k", args->sampling.top_k, "Top-k (0 = off)")->capture_default_str();
  cmd->add_option("--top-p", args->sampling.top_p, "Top-p (1 = off)")->capture_default_str();
  cmd->add_option("--min-p", args->sampling.min_p, "Min-p (0 = off)")->capture_default_str();
  cmd->add_option("--repeat-penalty", args->sampling.repetition_penalty, "Repetition penalty (1 = off)")
      ->capture_default_str();
  cmd->add_option("--repeat-last-n", args->sampling.repetition_window, "Tokens the penalty looks back over")
      ->capture_default_str();
  cmd->add_option("--frequency-penalty", args->sampling.frequency_penalty,
                  "Lower a token's logit by this per time it was generated (0 = off)")
      ->capture_default_str();
  cmd->add_option("--presence-penalty", args->sampling.presence_penalty,
                  "Lower a token's logit by this once it was generated (0 = off)")
      ->capture_default_str();
  cmd->add_option("--seed", args->sampling.seed, "Random seed")->capture_default_str()->check(seed_flag());
  cmd->add_option("--profile", args->profile, "Kascade calibration profile (JSON; default: the shipped one)");
  add_attention_flags(cmd, args->attention);
  cmd->add_option("--logits-out", args->logits_out,
                  "Write the logits each generated token was sampled from: float32, little-endian, one row of the "
                  "vocabulary's size per step (for comparing engines)");
  cmd->add_flag("-q,--quiet", args->quiet, "No progress bar or summary");
  cmd->callback([args] { run_generate(*args); });
}

void add_attention_flags(CLI::App* cmd, AttentionOptions& options) {
  for (const AttentionSetting& setting : attention_settings()) {
    const std::string flag = fmt::format("--{}", setting.name);
    const std::string_view name = setting.name;
    if (setting.kind == SettingKind::Switch) {
      cmd->add_flag_callback(flag, [&options, name, flag] { set_attention_option(options, name, "", flag); },
                             std::string(setting.help));
      continue;
    }
    std::string help(setting.help);
    if (!setting.choices.empty()) help += fmt::format(" ({})", fmt::join(setting.choices, ", "));
    cmd->add_option_function<std::string>(
           flag, [&options, name, flag](const std::string& value) { set_attention_option(options, name, value, flag); },
           help)
        ->default_str(setting.current(options));
  }
}

void register_tokenize(CLI::App& app) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Print the token ids of a text (no chat template)");
  cmd->add_option("-m,--model", args->model, "GGUF model file whose tokenizer to use")->capture_default_str();
  cmd->add_option("-p,--prompt", args->prompt, "Text to tokenize");
  cmd->add_option("-f,--prompt-file", args->prompt_file, "Read the text from a file (default: standard input)");
  cmd->add_flag("--no-special", args->no_special, "Add no BOS/EOS even where the model asks for them");
  cmd->add_flag("--parse-special", args->parse_special, "Match control tokens written in the text (e.g. <|im_start|>)");
  cmd->callback([args] { run_tokenize(*args); });
}

void register_info(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("info", "Print a GGUF file's metadata and tensor table");
  cmd->add_option("model", *path, "GGUF model file")->required();
  cmd->callback([path] { run_info(*path); });
}

}  // namespace kascade::cli
