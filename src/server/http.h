// The connections of `kascade serve`. cpp-httplib parses each request and
// runs the routes; this file owns the sockets, because httplib gives every
// connection a pool thread from accept to close, so that a few idle or
// trickling clients could hold every thread (issue 31). Here:
// - one thread watches every connection that has no complete request head
//   yet (new ones and idle keep-alive ones); a connection takes a worker
//   thread only once its head has arrived, within head_timeout seconds of
//   the connection (or of its last response) and head_max_bytes;
// - a request's body must arrive within body_timeout seconds, however it is
//   framed (the byte limit is the routes' own, see server.cc);
// - one client address holds at most max_client_connections connections and
//   all clients together max_connections; more are answered 503 and closed;
// - what a route or httplib throws ends that connection, never the process.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <httplib.h>

namespace kascade::server {

struct HttpLimits {
  size_t workers = 16;               // threads that run requests
  size_t max_connections = 4096;
  size_t max_client_connections = 256;
  double head_timeout = 10;          // seconds
  double body_timeout = 60;          // seconds for a whole body
  double write_timeout = 30;         // seconds one write may wait for the client
  size_t head_max_bytes = 32 << 10;  // request line and headers
  int keep_alive_requests = 1000;    // requests on one connection
};

class HttpServer : public httplib::Server {
 public:
  explicit HttpServer(const HttpLimits& limits);
  ~HttpServer() override;

  // Binds without SO_REUSEPORT, so a port another server listens on is
  // refused. Throws Error: "port N is in use", or why else it failed.
  // Returns the port (the kernel's choice for 0).
  int bind(const std::string& host, int port);
  // Serves until stop(), then closes every connection once its request has
  // been answered.
  void serve();

  // One connection's bytes (one request or several) through the same
  // parsing and routes as a client's, on a socket pair; returns every byte
  // the server wrote back. For tests and the fuzzer.
  std::string respond(std::string_view request);

  // From a route's handler: close the connection after this response (e.g.
  // when the body was not read to its end).
  static void close_after_response();

 private:
  struct Connection;
  class ConnectionStream;
  enum class Head { Complete, Partial, Closed, TooLarge };

  void longer_backlog();
  bool process_and_close_socket(socket_t sock) override;  // httplib's per-connection entry point
  static bool has_head(const Connection& c);
  static Head read_head(Connection& c, size_t max_bytes);
  // Runs the requests whose heads are buffered; false when the connection ends.
  bool run_requests(Connection& c);
  static void linger(Connection& c);  // before closing a connection whose body was left unread
  void wait(std::unique_ptr<Connection> c);  // back to the head watcher
  void close(std::unique_ptr<Connection> c);
  void watch_heads();
  void work();

  static thread_local ConnectionStream* current_stream_;  // the request this thread runs

  HttpLimits limits_;
  std::mutex mutex_;
  std::condition_variable ready_changed_;
  std::deque<std::unique_ptr<Connection>> ready_;    // heads complete, waiting for a worker
  std::vector<std::unique_ptr<Connection>> incoming_;  // for the watcher
  std::set<int> active_;                             // sockets a worker holds
  std::map<std::string, size_t> per_client_;
  size_t connections_ = 0;
  bool stopping_ = false;
  int wake_[2] = {-1, -1};
  std::thread watcher_;
  std::vector<std::thread> workers_;
};

}  // namespace kascade::server
