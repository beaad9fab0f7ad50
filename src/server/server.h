// `kascade serve`: the OpenAI-compatible HTTP server (server/api.h) over one
// backend shared by all requests through engine::Scheduler (continuous
// batching). cpp-httplib runs the HTTP: one thread per connection from a
// pool of workers that take a connection once its request head is in
// (server/http.h: timeouts, connection limits); a request's handler
// tokenizes and checks it, queues it with the scheduler and then waits for
// its text, which it streams as server-sent events or returns as one JSON
// body. Each waiting request holds a worker, so there are parallel +
// max_queue + 8 of them, at most kMaxHttpWorkers.
//
// Load: at most `parallel` requests run, `max_queue` more wait; beyond that
// a request is answered 503 with Retry-After at once. A streaming client
// that goes away is noticed at the next write (a keep-alive comment goes out
// every second while nothing else does) and its request is cancelled, which
// frees its KV memory. SIGTERM or SIGINT: the listening socket closes, new
// requests on open connections get 503, running ones have `shutdown_grace`
// seconds to finish before they are cancelled, and run() returns.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "engine/backend.h"
#include "server/api.h"
#include "tokenizer/tokenizer.h"

namespace kascade::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                        // 0: any free port (printed)
  std::string api_key;                    // empty: no authentication
  int64_t parallel = 8;                   // requests running at once
  int64_t max_queue = 64;                 // requests waiting beyond them
  int64_t prefill_chunk = 512;
  uint64_t max_body_bytes = 4 << 20;      // larger bodies, however sent: 413
  int64_t max_client_connections = 256;   // open connections from one address; more get 503
  double shutdown_grace = 30;             // seconds running requests get after SIGTERM
  bool quiet = false;                     // no request log on stderr
};

// HTTP worker threads at most, and the spare ones beyond parallel + max_queue
// (for /health, /metrics and bodies being read).
inline constexpr int64_t kMaxHttpWorkers = 1024;
inline constexpr int64_t kSpareHttpWorkers = 8;

// Throws Error, one line, for settings the server cannot run with.
void check_options(const ServerOptions& options);

// Makes SIGTERM and SIGINT start the shutdown of a server that run() starts
// (also when they come before it), and ignores SIGPIPE (a write to a closed
// connection fails instead). run() calls it; call it earlier, before the
// model loads, so that a signal during the load is not fatal.
void install_stop_signal_handlers();

class Server {
 public:
  Server(engine::Backend& backend, const tokenizer::Tokenizer& tokenizer, const ApiDefaults& defaults,
         const ServerOptions& options);
  ~Server();

  // Serves until SIGTERM or SIGINT, then shuts down as above. Throws Error if
  // the address cannot be bound ("port N is in use").
  void serve();

  // The bytes of one connection (one request or more) through the same
  // parsing, limits and routes as a client's; returns what the server wrote
  // back. For tests and the fuzzer; runs the scheduler from its first call.
  std::string respond(std::string_view request);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// Serves until SIGTERM or SIGINT (Server::serve).
void run(engine::Backend& backend, const tokenizer::Tokenizer& tokenizer, const ApiDefaults& defaults,
         const ServerOptions& options);

}  // namespace kascade::server
