#include "server/server.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include <sys/resource.h>

#include <fmt/format.h>

#include "core/error.h"
#include "core/memory.h"
#include "engine/scheduler.h"
#include "server/http.h"
#include "tokenizer/chat_template.h"

namespace kascade::server {
namespace {

// SIGTERM and SIGINT write their number here; the server's signal thread
// reads it. (Blocking the signals would not do: OpenBLAS starts threads when
// it is loaded, and a thread that does not block them would die of them.)
int stop_pipe[2] = {-1, -1};

void on_stop_signal(int number) {
  const unsigned char byte = static_cast<unsigned char>(number);
  [[maybe_unused]] const ssize_t written = write(stop_pipe[1], &byte, 1);
}

using nlohmann::json;

// What the scheduler's thread hands to a request's HTTP handler.
struct Channel {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::string> pieces;  // streamed text not yet sent
  bool finished = false;
  engine::GenerationResult result;
};

std::string sse(const json& event) { return "data: " + dump(event) + "\n\n"; }

bool same_key(std::string_view a, std::string_view b) {  // constant time in the key's contents
  unsigned diff = a.size() != b.size();
  for (size_t i = 0; i < a.size(); ++i) diff |= unsigned(uint8_t(a[i]) ^ uint8_t(i < b.size() ? b[i] : 0));
  return diff == 0;
}

void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.status;
  res.set_content(dump(error_body(error)), "application/json");
}

// The routes /metrics counts by name; any other path counts as "other", so
// that clients cannot add series or write into the text.
const char* route_label(const std::string& path) {
  for (const char* route : {"/health", "/metrics", "/v1/models", "/v1/chat/completions", "/v1/completions"})
    if (path == route) return route;
  return "other";
}

// A label value in Prometheus' text format: backslash, quote and newline escaped.
std::string label_value(std::string_view value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out;
}

// A path for the request log: control bytes as \xNN, so that one request is one line.
std::string printable(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (uint8_t(c) < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", uint8_t(c));
    else
      out += c;
  }
  return out;
}

HttpLimits http_limits(const ServerOptions& options) {
  HttpLimits limits;
  limits.workers = size_t(options.parallel + options.max_queue + kSpareHttpWorkers);
  limits.max_client_connections = size_t(options.max_client_connections);
  // Each connection is a descriptor; keep some for the model, logs and accept().
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY)
    limits.max_connections = std::clamp<size_t>(size_t(files.rlim_cur) - std::min<size_t>(files.rlim_cur, 64), 16,
                                                limits.max_connections);
  return limits;
}

}  // namespace

class Server::Impl {
 public:
  Impl(engine::Backend& backend, const tokenizer::Tokenizer& tokenizer, const ApiDefaults& defaults,
       const ServerOptions& options)
      : backend_(backend),
        tokenizer_(tokenizer),
        defaults_(defaults),
        options_(options),
        scheduler_(backend, tokenizer,
                   {.max_running = options.parallel, .max_queued = options.max_queue,
                    .prefill_chunk = options.prefill_chunk}),
        http_(http_limits(options)) {
    try {
      chat_.emplace(tokenizer::ChatTemplate::from_jinja(tokenizer.chat_template()));
    } catch (const Error&) {
      // No chat template: /v1/chat/completions answers 400, /v1/completions works.
    }
    std::random_device random;
    id_prefix_ = fmt::format("{:08x}", uint32_t(random()));
    routes();
  }

  void serve() {
    const int port = http_.bind(options_.host, options_.port);
    scheduler_.start();
    std::thread signals([this] { wait_for_signal(); });
    fmt::print(stderr, "kascade serve: {} on {}, listening on http://{}:{} ({} parallel, {} queued, context {})\n",
               defaults_.model_id, backend_.device_name(), options_.host, port, options_.parallel,
               options_.max_queue, defaults_.context);
    std::fflush(stderr);
    http_.serve();
    signals.join();
    scheduler_.stop(true);
    fmt::print(stderr, "kascade serve: stopped\n");
  }

 private:
  void wait_for_signal() {
    unsigned char signal_number = 0;
    while (read(stop_pipe[0], &signal_number, 1) < 0 && errno == EINTR) {
    }
    fmt::print(stderr, "kascade serve: {}: no new requests; {} s for the running ones\n",
               signal_number == SIGTERM ? "SIGTERM" : "SIGINT", options_.shutdown_grace);
    // New requests get 503 from here on. httplib cuts streams short once
    // stopped, so the listening socket closes only when the requests in
    // flight have ended (or been cancelled) and their handlers have answered.
    stopping_ = true;
    scheduler_.close();
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(std::max(0.0, options_.shutdown_grace));
    while (std::chrono::steady_clock::now() < deadline) {
      const engine::SchedulerStats s = scheduler_.stats();
      if (s.running == 0 && s.queued == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const engine::SchedulerStats s = scheduler_.stats();
    if (s.running + s.queued > 0)
      fmt::print(stderr, "kascade serve: cancelling {} requests\n", s.running + s.queued);
    scheduler_.stop(true);
    for (int i = 0; i < 250 && in_flight_ > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    http_.stop();  // serve() returns when every handler has
  }

 public:
  std::string respond(std::string_view request) {
    std::call_once(scheduler_started_, [this] { scheduler_.start(); });
    return http_.respond(request);
  }

 private:

  void routes() {
    http_.set_payload_max_length(options_.max_body_bytes);  // a Content-Length over it: 413 before the body

    http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (options_.api_key.empty() || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
      const std::string header = req.get_header_value("Authorization");
      if (header.rfind("Bearer ", 0) == 0 && same_key(std::string_view(header).substr(7), options_.api_key))
        return httplib::Server::HandlerResponse::Unhandled;
      send_error(res, ApiError(401, header.empty() ? "missing API key: send 'Authorization: Bearer KEY'"
                                                   : "incorrect API key",
                               "invalid_request_error", {}, "invalid_api_key"));
      close_unread(res);  // the body was not read
      return httplib::Server::HandlerResponse::Handled;
    });
    // Errors httplib answers itself (404, 413, ...) get an OpenAI error body.
    http_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      if (res.status == 413)
        send_error(res, ApiError(413, "the request body is too large", "invalid_request_error", {}, "payload_too_large"));
      else if (res.status == 404)
        send_error(res, ApiError(404, fmt::format("no route {} {}", req.method, req.path), "invalid_request_error",
                                 {}, "not_found"));
      else
        send_error(res, ApiError(res.status, fmt::format("HTTP {}", res.status)));
    });
    http_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      send_error(res, ApiError(500, what, "server_error"));
    });
    http_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      {
        std::lock_guard lock(http_mutex_);
        ++http_counts_[{route_label(req.path), res.status}];
      }
      if (!options_.quiet && req.path != "/health" && req.path != "/metrics")
        fmt::print(stderr, "{} {} {}\n", printable(req.method), printable(req.path), res.status);
    });

    http_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (stopping_) {
        res.status = 503;
        res.set_content(R"({"status":"stopping"})", "application/json");
      } else {
        res.set_content(R"({"status":"ok"})", "application/json");
      }
    });
    http_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      const json model = {{"id", defaults_.model_id},
                          {"object", "model"},
                          {"created", started_},
                          {"owned_by", "kascade"},
                          {"context_length", defaults_.context}};
      res.set_content(dump(json{{"object", "list"}, {"data", json::array({model})}}), "application/json");
    });
    http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics(), "text/plain; version=0.0.4");
    });
    for (const auto& route : {std::pair{"/v1/chat/completions", Endpoint::Chat},
                              {"/v1/completions", Endpoint::Completion}})
      http_.Post(route.first, [this, endpoint = route.second](const httplib::Request&, httplib::Response& res,
                                                              const httplib::ContentReader& reader) {
        std::string body;
        if (read_body(reader, res, body)) completion(endpoint, body, res);
      });
  }

  static void close_unread(httplib::Response& res) {
    res.set_header("Connection", "close");
    HttpServer::close_after_response();
  }

  // The body, up to --max-body bytes whatever its framing (a Content-Length,
  // chunks, compression); else answers 413 or 400 and returns false.
  bool read_body(const httplib::ContentReader& reader, httplib::Response& res, std::string& body) const {
    bool too_large = false;
    const bool read = reader([&](const char* data, size_t size) {
      if (body.size() + size > options_.max_body_bytes) {
        too_large = true;
        return false;
      }
      body.append(data, size);
      return true;
    });
    if (read) return true;
    close_unread(res);
    if (too_large || res.status == 413)
      send_error(res, ApiError(413, fmt::format("the request body is larger than {} bytes", options_.max_body_bytes),
                               "invalid_request_error", {}, "payload_too_large"));
    else
      send_error(res, ApiError(400, "the request body could not be read"));
    return false;
  }

  std::vector<int32_t> tokenize(const ApiRequest& r) const {
    if (r.endpoint == Endpoint::Completion) return tokenizer_.encode(r.prompt, /*add_special_tokens=*/true, false);
    if (!chat_) throw ApiError(400, "this model has no chat template: use /v1/completions", "invalid_request_error",
                               "messages");
    // As `kascade generate` encodes a chat prompt, so both give the same
    // tokens; message contents stay text (no control tokens).
    try {
      return chat_->encode(tokenizer_, r.messages, /*add_generation_prompt=*/true);
    } catch (const Error& e) {
      throw ApiError(400, e.what(), "invalid_request_error", "messages");
    }
  }

  void completion(Endpoint endpoint, const std::string& body, httplib::Response& res) {
    try {
      ApiRequest r = parse_request(endpoint, body, defaults_);
      std::vector<int32_t> prompt = tokenize(r);
      fit_context(r, int64_t(prompt.size()), defaults_);
      try {
        validate_attention(r.attention, backend_.config().attention_shape());  // the options' checks
      } catch (const Error& e) {
        throw ApiError(400, e.what(), "invalid_request_error", "kascade");
      }

      auto channel = std::make_shared<Channel>();
      engine::Request request;
      request.prompt = std::move(prompt);
      request.options = r.generate;
      request.options.prefill_chunk = options_.prefill_chunk;
      request.attention = r.attention;
      request.on_text = [channel](const std::string& piece) {
        std::lock_guard lock(channel->mutex);
        channel->pieces.push_back(piece);
        channel->changed.notify_all();
      };
      request.on_finish = [channel](const engine::GenerationResult& result) {
        std::lock_guard lock(channel->mutex);
        channel->result = result;
        channel->finished = true;
        channel->changed.notify_all();
      };
      engine::Scheduler::Ticket ticket;
      try {
        ticket = scheduler_.submit(std::move(request));
      } catch (const Error& e) {
        throw ApiError(400, e.what());
      }
      if (ticket.status != engine::Scheduler::Submitted::Queued) {
        res.set_header("Retry-After", "1");
        throw ApiError(503,
                       ticket.status == engine::Scheduler::Submitted::QueueFull
                           ? fmt::format("the server is busy ({} requests running, {} queued): retry later",
                                         options_.parallel, options_.max_queue)
                           : "the server is shutting down",
                       "server_error", {}, "server_busy");
      }
      ++in_flight_;  // until its handler has answered
      const std::string id = fmt::format("{}-{}{}", endpoint == Endpoint::Chat ? "chatcmpl" : "cmpl", id_prefix_,
                                         next_id_++);
      const int64_t created = int64_t(std::time(nullptr));
      const std::string& model = defaults_.model_id;

      if (!r.stream) {
        std::unique_lock lock(channel->mutex);
        channel->changed.wait(lock, [&] { return channel->finished; });
        --in_flight_;
        const engine::GenerationResult& result = channel->result;
        if (result.stop_reason == "error") throw ApiError(500, result.error, "server_error");
        if (result.stop_reason == "cancelled")
          throw ApiError(503, "the request was cancelled: the server is shutting down", "server_error");
        res.set_content(dump(completion_response(r, id, created, model, result)), "application/json");
        return;
      }

      struct Stream {
        ApiRequest request;
        std::string id;
        int64_t created;
        uint64_t ticket;
        bool first = true;
      };
      auto stream = std::make_shared<Stream>(Stream{std::move(r), id, created, ticket.id});
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "text/event-stream",
          [this, channel, stream, model](size_t, httplib::DataSink& sink) {
            std::deque<std::string> pieces;
            bool finished = false;
            engine::GenerationResult result;
            {
              std::unique_lock lock(channel->mutex);
              channel->changed.wait_for(lock, std::chrono::seconds(1),
                                        [&] { return channel->finished || !channel->pieces.empty(); });
              pieces.swap(channel->pieces);
              finished = channel->finished;
              if (finished) result = channel->result;
            }
            const ApiRequest& r = stream->request;
            std::string out;
            if (stream->first && r.endpoint == Endpoint::Chat)
              out += sse(stream_chunk(r, stream->id, stream->created, model, "", true, nullptr));
            stream->first = false;
            for (const std::string& piece : pieces)
              out += sse(stream_chunk(r, stream->id, stream->created, model, piece, false, nullptr));
            if (finished) {
              if (result.stop_reason == "error" || result.stop_reason == "cancelled") {
                out += sse(error_body(ApiError(result.stop_reason == "error" ? 500 : 503,
                                               result.stop_reason == "error" ? result.error
                                                                             : "the request was cancelled",
                                               "server_error")));
              } else {
                out += sse(stream_chunk(r, stream->id, stream->created, model, "", false, &result));
                if (r.include_usage) out += sse(usage_chunk(r, stream->id, stream->created, model, result));
              }
              out += "data: [DONE]\n\n";
            }
            // A comment while nothing else goes out: a client that left is
            // noticed at a failing write, during the queue wait and the prefill too.
            if (out.empty()) out = ": keep-alive\n\n";
            if (!sink.write(out.data(), out.size())) {
              scheduler_.cancel(stream->ticket);
              return false;
            }
            if (finished) sink.done();
            return true;
          },
          [this, channel, stream](bool success) {
            {
              std::lock_guard lock(channel->mutex);
              if (!success || !channel->finished) scheduler_.cancel(stream->ticket);
            }
            --in_flight_;
          });
    } catch (const ApiError& e) {
      send_error(res, e);
    }
  }

  std::string metrics() {
    const engine::SchedulerStats s = scheduler_.stats();
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help, auto value) {
      out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
    };
    out += "# HELP kascade_requests_total Generation requests by outcome.\n# TYPE kascade_requests_total counter\n";
    for (const auto& [outcome, value] : {std::pair{"finished", s.finished}, {"cancelled", s.cancelled},
                                         {"failed", s.failed}, {"rejected", s.rejected}})
      out += fmt::format("kascade_requests_total{{outcome=\"{}\"}} {}\n", outcome, value);
    out += "# HELP kascade_http_requests_total HTTP responses by path and status.\n"
           "# TYPE kascade_http_requests_total counter\n";
    {
      std::lock_guard lock(http_mutex_);
      for (const auto& [key, value] : http_counts_)
        out += fmt::format("kascade_http_requests_total{{path=\"{}\",status=\"{}\"}} {}\n", label_value(key.first),
                           key.second, value);
    }
    metric("kascade_queue_depth", "gauge", "Requests waiting to be admitted.", s.queued);
    metric("kascade_running_requests", "gauge", "Requests prefilling or decoding.", s.running);
    metric("kascade_prefilling_requests", "gauge", "Running requests still in their prompt.", s.prefilling);
    metric("kascade_kv_tokens_used", "gauge", "KV cache tokens taken by running requests.", s.kv_tokens_used);
    metric("kascade_kv_tokens_total", "gauge", "KV cache tokens requests may take.", s.kv_tokens_total);
    metric("kascade_prompt_tokens_total", "counter", "Prompt tokens prefilled.", s.prompt_tokens);
    metric("kascade_generated_tokens_total", "counter", "Tokens generated.", s.generated_tokens);
    metric("kascade_prefill_seconds_total", "counter", "Seconds in prefill calls.", s.prefill_seconds);
    metric("kascade_decode_seconds_total", "counter", "Seconds in batched decode calls.", s.decode_seconds);
    metric("kascade_decode_steps_total", "counter", "Scheduling steps that decoded.", s.decode_steps);
    metric("kascade_prefill_tokens_per_second", "gauge", "Prompt tokens per second of prefill time.",
           s.prefill_seconds > 0 ? double(s.prompt_tokens) / s.prefill_seconds : 0.0);
    metric("kascade_decode_tokens_per_second", "gauge", "Generated tokens per second of decode time (all sequences).",
           s.decode_seconds > 0 ? double(s.generated_tokens) / s.decode_seconds : 0.0);
    metric("kascade_resident_memory_bytes", "gauge", "Resident memory of the server process.",
           current_resident_bytes());
    return out;
  }

  engine::Backend& backend_;
  const tokenizer::Tokenizer& tokenizer_;
  ApiDefaults defaults_;
  ServerOptions options_;
  engine::Scheduler scheduler_;
  std::once_flag scheduler_started_;
  HttpServer http_;
  std::optional<tokenizer::ChatTemplate> chat_;
  std::string id_prefix_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> in_flight_{0};  // queued requests whose handler has not answered
  int64_t started_ = int64_t(std::time(nullptr));
  std::mutex http_mutex_;
  std::map<std::pair<std::string, int>, uint64_t> http_counts_;  // by route_label and status
};

void check_options(const ServerOptions& o) {
  if (o.parallel < 1) fail("--parallel must be at least 1, got {}", o.parallel);
  if (o.max_queue < 0) fail("--max-queue must be at least 0, got {}", o.max_queue);
  if (o.parallel + o.max_queue + kSpareHttpWorkers > kMaxHttpWorkers)
    fail("--parallel {} with --max-queue {} needs {} HTTP threads (a waiting request holds one); at most {}: "
         "lower them so that they add up to at most {}",
         o.parallel, o.max_queue, o.parallel + o.max_queue + kSpareHttpWorkers, kMaxHttpWorkers,
         kMaxHttpWorkers - kSpareHttpWorkers);
  if (o.max_client_connections < 1) fail("--max-client-connections must be at least 1, got {}", o.max_client_connections);
}

Server::Server(engine::Backend& backend, const tokenizer::Tokenizer& tokenizer, const ApiDefaults& defaults,
               const ServerOptions& options)
{
  check_options(options);
  impl_ = std::make_unique<Impl>(backend, tokenizer, defaults, options);
}

Server::~Server() = default;

void Server::serve() { impl_->serve(); }

std::string Server::respond(std::string_view request) { return impl_->respond(request); }

void install_stop_signal_handlers() {
  if (stop_pipe[0] >= 0) return;
  if (pipe2(stop_pipe, O_CLOEXEC) != 0) fail("cannot create a pipe for the stop signals: {}", std::strerror(errno));
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

void run(engine::Backend& backend, const tokenizer::Tokenizer& tokenizer, const ApiDefaults& defaults,
         const ServerOptions& options) {
  install_stop_signal_handlers();
  Server(backend, tokenizer, defaults, options).serve();
}

}  // namespace kascade::server
