// `kascade serve`: the OpenAI-compatible HTTP server (src/server/).
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.h"
#include "core/error.h"
#include "core/model_cache.h"
#include "backends/devices.h"
#include "model/fingerprint.h"
#include "ops/threading.h"
#include "tokenizer/tokenizer.h"
#ifdef KASCADE_HAVE_SERVER
#include "server/server.h"
#endif

namespace kascade::cli {
namespace {

struct ServeArgs {
  std::string model = default_model_path();
  std::string device = "auto";
  int64_t context = 0;
  int64_t kv_tokens = 0;
  int threads = 0;
  AttentionOptions attention;
  std::string profile;
#ifdef KASCADE_HAVE_SERVER
  server::ServerOptions server;
#endif
};

#ifdef KASCADE_HAVE_SERVER
void run_serve(ServeArgs& args) {
  server::check_options(args.server);  // before the model loads
  server::install_stop_signal_handlers();  // a SIGTERM while the model loads then stops the server cleanly
  if (args.server.api_key.empty())
    if (const char* key = std::getenv("KASCADE_API_KEY")) args.server.api_key = key;
  ops::configure_threads(args.threads);
  const std::unique_ptr<engine::Backend> backend = backends::make_backend(args.device, args.model);
  const tokenizer::Tokenizer tokenizer(backend->file());
  const model::Config& config = backend->config();

  server::ApiDefaults defaults;
  defaults.model_id = std::filesystem::path(args.model).stem().string();
  if (args.context > config.context_length)
    fail("--ctx-size {} exceeds the model's context of {} tokens", args.context, config.context_length);
  defaults.context = args.context > 0 ? args.context : config.context_length;
  defaults.vocab_size = config.vocab_size;
  defaults.attention = args.attention;
  // Kascade's profile, as `generate` resolves it, for every request that asks for kascade.
  defaults.profile = model::resolve_profile(args.profile, args.model, config, backend->file(), args.server.quiet);
  if (defaults.attention.kascade()) defaults.attention.profile = defaults.profile;
  validate_attention(defaults.attention, config.attention_shape());  // the flags' checks, before serving

  // KV memory: --kv-tokens, else a full context for each parallel request.
  const int64_t kv_tokens = args.kv_tokens > 0 ? args.kv_tokens : args.server.parallel * defaults.context;
  backend->limit_kv_tokens(kv_tokens);
  if (backend->kv_tokens_for(defaults.context) > backend->kv_tokens_total())
    fail("the KV memory ({} tokens) does not hold one request of --ctx-size {}", backend->kv_tokens_total(),
         defaults.context);
  server::run(*backend, tokenizer, defaults, args.server);
}
#endif

}  // namespace

void register_serve(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve the model over an OpenAI-compatible HTTP API");
  cmd->add_option("-m,--model", args->model, "GGUF model file")->capture_default_str();
  cmd->add_option("--device", args->device, fmt::format("Where to run: {}", backends::supported_devices()))
      ->capture_default_str();
  cmd->add_option("-c,--ctx-size", args->context, "Context of one request, prompt + completion (0 = the model's)")
      ->capture_default_str()
      ->check(count_flag(INT64_MAX));
  cmd->add_option("--kv-tokens", args->kv_tokens, "KV cache tokens for all requests (0 = parallel x ctx-size)")
      ->capture_default_str()
      ->check(count_flag(INT64_MAX));
  cmd->add_option("-t,--threads", args->threads, "Threads (0 = all cores)")->capture_default_str()
      ->check(count_flag(kMaxThreads));
  cmd->add_option("--profile", args->profile, "Kascade calibration profile (JSON; default: the shipped one)");
  add_attention_flags(cmd, args->attention);
#ifdef KASCADE_HAVE_SERVER
  server::ServerOptions& s = args->server;
  cmd->add_option("--host", s.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", s.port, "Port (0 = any free one, printed at start)")->capture_default_str()
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--parallel", s.parallel, fmt::format("Requests running at once (continuous batching); with --max-queue at most {}",
                              server::kMaxHttpWorkers - server::kSpareHttpWorkers))
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(4096)));
  cmd->add_option("--max-queue", s.max_queue, "Requests waiting beyond them; more get 503")->capture_default_str()
      ->check(CLI::Range(int64_t(0), int64_t(65536)));
  cmd->add_option("--max-client-connections", s.max_client_connections,
                  "Open connections one client address may hold; more get 503")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--api-key", s.api_key, "Require 'Authorization: Bearer KEY' (default: $KASCADE_API_KEY)");
  cmd->add_option("--max-body", s.max_body_bytes, "Largest request body in bytes; larger get 413")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t(1024), uint64_t(1) << 30));
  cmd->add_option("--prefill-chunk", s.prefill_chunk, "Prompt tokens per prefill chunk and step")
      ->capture_default_str()
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--shutdown-grace", s.shutdown_grace, "Seconds running requests get after SIGTERM")
      ->capture_default_str()
      ->check(seconds_flag(86400));
  cmd->add_flag("-q,--quiet", s.quiet, "No request log");
  cmd->callback([args] { run_serve(*args); });
#else
  // The options above write into *args, so the callback owns it here too.
  cmd->callback([args] {
    (void)args;
    fail("this build has no HTTP server (cpp-httplib was not found when it was configured)");
  });
#endif
}

}  // namespace kascade::cli
