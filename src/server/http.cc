#include "server/http.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"

namespace kascade::server {

using Clock = std::chrono::steady_clock;

struct HttpServer::Connection {
  int fd = -1;
  bool counted = true;  // against the connection limits (respond()'s is not)
  std::string peer;     // the client's address: the per-client key
  int peer_port = 0;
  std::string local;
  int local_port = 0;
  std::string buffer;   // read and not yet parsed from `offset` on
  size_t offset = 0;
  Clock::time_point deadline;  // for the request head being waited for
  int requests = 0;
  bool close = false;          // after the response being written
};

namespace {

Clock::time_point after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// Waits until `fd` is ready for `events` (or has failed, which the next
// call then reports); false at the deadline.
bool ready(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left < 0) return false;
    pollfd p{fd, events, 0};
    const int n = poll(&p, 1, int(std::min<int64_t>(left + 1, 1000)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return false;
  }
}

void address_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  const int status = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length)
                          : getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  char host[NI_MAXHOST] = "", service[NI_MAXSERV] = "0";
  if (status == 0 && (address.ss_family == AF_INET || address.ss_family == AF_INET6))
    getnameinfo(reinterpret_cast<sockaddr*>(&address), length, host, sizeof host, service, sizeof service,
                NI_NUMERICHOST | NI_NUMERICSERV);
  ip = host;
  port = std::atoi(service);
}

// A whole response from outside httplib, for connections refused before a
// request reaches it; a client that does not take it at once loses it.
void quick_reply(int fd, int status, const char* reason, const char* message) {
  const std::string body = fmt::format(
      R"({{"error":{{"message":"{}","type":"{}","param":null,"code":null}}}})", message,
      status == 503 ? "server_error" : "invalid_request_error");
  const std::string response =
      fmt::format("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n{}",
                  status, reason, body.size(), status == 503 ? "Retry-After: 1\r\n" : "", body);
  [[maybe_unused]] const ssize_t sent = send(fd, response.data(), response.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// httplib runs what the listening thread hands it at once: a connection
// only registers there, which does not block.
class InlineQueue : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> task) override { task(); }
  void shutdown() override {}
};

}  // namespace

class HttpServer::ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(Connection& c, const HttpLimits& limits)
      : c_(c), limits_(limits), read_deadline_(c.deadline) {}

  // The head has been parsed: the body has its own deadline and no head cap.
  void head_done() {
    in_head_ = false;
    read_deadline_ = after(limits_.body_timeout);
  }

  bool is_readable() const override {
    return c_.offset < c_.buffer.size() || ready(c_.fd, POLLIN, read_deadline_);
  }
  bool is_writable() const override { return ready(c_.fd, POLLOUT, after(limits_.write_timeout)); }

  ssize_t read(char* ptr, size_t size) override {
    if (c_.offset == c_.buffer.size()) {
      c_.buffer.clear();
      c_.offset = 0;
      size_t room = 4096;
      if (in_head_) {
        if (head_bytes_ >= limits_.head_max_bytes) return -1;
        room = std::min(room, limits_.head_max_bytes - head_bytes_);
      }
      c_.buffer.resize(room);
      ssize_t n;
      for (;;) {
        if (!ready(c_.fd, POLLIN, read_deadline_)) {
          n = -1;
          break;
        }
        n = recv(c_.fd, c_.buffer.data(), room, MSG_DONTWAIT);
        if (n >= 0 || (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) break;
      }
      c_.buffer.resize(std::max<ssize_t>(n, 0));
      if (n <= 0) return n;
    }
    const size_t n = std::min(size, c_.buffer.size() - c_.offset);
    std::memcpy(ptr, c_.buffer.data() + c_.offset, n);
    c_.offset += n;
    if (in_head_) head_bytes_ += n;
    return ssize_t(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    const Clock::time_point deadline = after(limits_.write_timeout);
    for (;;) {
      const ssize_t n = send(c_.fd, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0) return n;
      if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      if (errno != EINTR && !ready(c_.fd, POLLOUT, deadline)) return -1;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = c_.peer;
    port = c_.peer_port;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip = c_.local;
    port = c_.local_port;
  }
  socket_t socket() const override { return c_.fd; }

  Connection& connection() { return c_; }

 private:
  Connection& c_;
  const HttpLimits& limits_;
  Clock::time_point read_deadline_;
  bool in_head_ = true;
  size_t head_bytes_ = 0;
};

thread_local HttpServer::ConnectionStream* HttpServer::current_stream_ = nullptr;

// httplib ends a head at its first empty CRLF line.
bool HttpServer::has_head(const Connection& c) {
  return std::string_view(c.buffer).substr(c.offset).find("\r\n\r\n") != std::string_view::npos;
}

HttpServer::HttpServer(const HttpLimits& limits) : limits_(limits) {
  if (pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) fail("cannot create a pipe: {}", std::strerror(errno));
  new_task_queue = [] { return new InlineQueue; };
  // httplib's default adds SO_REUSEPORT, with which a second server binds
  // a port that this one listens on and takes half its connections.
  set_socket_options([](socket_t sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
}

HttpServer::~HttpServer() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  ready_changed_.notify_all();
  [[maybe_unused]] const ssize_t woken = ::write(wake_[1], "x", 1);
  if (watcher_.joinable()) watcher_.join();
  for (std::thread& worker : workers_) worker.join();
  for (auto& c : ready_) ::close(c->fd);
  for (auto& c : incoming_) ::close(c->fd);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

int HttpServer::bind(const std::string& host, int port) {
  if (port == 0) {
    const int chosen = bind_to_any_port(host);
    if (chosen < 0) fail("cannot bind {}: no free port", host);
    longer_backlog();
    return chosen;
  }
  if (bind_to_port(host, port)) {
    longer_backlog();
    return port;
  }
  // httplib does not say why; the same bind here does.
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  const std::string service = std::to_string(port);
  int error = EADDRNOTAVAIL;
  if (getaddrinfo(host.c_str(), service.c_str(), &hints, &found) == 0 && found) {
    const int sock = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
    const int yes = 1;
    if (sock >= 0) {
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
      error = ::bind(sock, found->ai_addr, found->ai_addrlen) == 0 ? 0 : errno;
      ::close(sock);
    }
    freeaddrinfo(found);
  }
  if (error == EADDRINUSE) fail("port {} is in use", port);
  fail("cannot bind {}:{}: {}", host, port, error ? std::strerror(error) : "not an address of this machine");
}

void HttpServer::longer_backlog() {
  // httplib listens with a backlog of 5: in a burst of connections the
  // kernel drops SYNs, and clients wait a second or more to retry. Linux
  // takes a second listen() as a new backlog.
  ::listen(svr_sock_, SOMAXCONN);
}

void HttpServer::serve() {
  watcher_ = std::thread([this] { watch_heads(); });
  for (size_t i = 0; i < limits_.workers; ++i) workers_.emplace_back([this] { work(); });
  listen_after_bind();
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    for (const int fd : active_) shutdown(fd, SHUT_RDWR);  // a worker blocked on a slow client returns
  }
  ready_changed_.notify_all();
  [[maybe_unused]] const ssize_t woken = ::write(wake_[1], "x", 1);
  watcher_.join();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
  std::deque<std::unique_ptr<Connection>> left;
  {
    std::lock_guard lock(mutex_);
    left.swap(ready_);
  }
  for (auto& c : left) close(std::move(c));
}

void HttpServer::close_after_response() {
  if (current_stream_) current_stream_->connection().close = true;
}

bool HttpServer::process_and_close_socket(socket_t sock) {
  auto c = std::make_unique<Connection>();
  c->fd = sock;
  address_of(sock, true, c->peer, c->peer_port);
  address_of(sock, false, c->local, c->local_port);
  const char* refusal = nullptr;
  {
    std::lock_guard lock(mutex_);
    const auto it = per_client_.find(c->peer);
    if (stopping_)
      refusal = "the server is shutting down";
    else if (connections_ >= limits_.max_connections)
      refusal = "too many connections: retry later";
    else if (it != per_client_.end() && it->second >= limits_.max_client_connections)
      refusal = "too many connections from this address: retry later";
    if (!refusal) {
      ++connections_;
      ++per_client_[c->peer];
    }
  }
  if (refusal) {
    quick_reply(sock, 503, "Service Unavailable", refusal);
    ::close(sock);
    return true;
  }
  c->deadline = after(limits_.head_timeout);
  wait(std::move(c));
  return true;
}

HttpServer::Head HttpServer::read_head(Connection& c, size_t max_bytes) {
  if (c.offset > 0) {
    c.buffer.erase(0, c.offset);
    c.offset = 0;
  }
  for (;;) {
    if (has_head(c)) return Head::Complete;
    if (c.buffer.size() >= max_bytes) return Head::TooLarge;
    char chunk[4096];
    const ssize_t n = recv(c.fd, chunk, std::min(sizeof chunk, max_bytes - c.buffer.size()), MSG_DONTWAIT);
    if (n > 0) {
      c.buffer.append(chunk, size_t(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? Head::Partial : Head::Closed;
    }
  }
}

bool HttpServer::run_requests(Connection& c) {
  while (has_head(c)) {
    ConnectionStream stream(c, limits_);
    bool last = ++c.requests >= limits_.keep_alive_requests;
    {
      std::lock_guard lock(mutex_);
      last = last || stopping_;
    }
    bool client_closes = false;
    bool answered = false;
    current_stream_ = &stream;
    try {
      answered = process_request(stream, last, client_closes, [&](httplib::Request&) { stream.head_done(); });
    } catch (...) {
      // A throwing error handler or content provider: this connection ends, the server goes on.
    }
    current_stream_ = nullptr;
    if (!answered || client_closes || last || c.close) return false;
    c.deadline = after(limits_.head_timeout);
  }
  return true;
}

void HttpServer::wait(std::unique_ptr<Connection> c) {
  {
    std::lock_guard lock(mutex_);
    if (!stopping_) {
      incoming_.push_back(std::move(c));
      [[maybe_unused]] const ssize_t woken = ::write(wake_[1], "x", 1);
      return;
    }
  }
  close(std::move(c));
}

void HttpServer::close(std::unique_ptr<Connection> c) {
  ::close(c->fd);
  if (!c->counted) return;
  std::lock_guard lock(mutex_);
  --connections_;
  const auto it = per_client_.find(c->peer);
  if (--it->second == 0) per_client_.erase(it);
}

void HttpServer::linger(Connection& c) {
  // Closing with unread bytes makes the kernel send a reset, which can
  // destroy the response before the client reads it: end the writing side
  // and discard what the client still sends, for a moment.
  shutdown(c.fd, SHUT_WR);
  const Clock::time_point deadline = after(2);
  char discard[16384];
  while (ready(c.fd, POLLIN, deadline)) {
    const ssize_t n = recv(c.fd, discard, sizeof discard, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK)) break;
  }
}

void HttpServer::watch_heads() {
  std::vector<std::unique_ptr<Connection>> waiting, still;
  std::vector<pollfd> polled;
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) break;
      for (auto& c : incoming_) waiting.push_back(std::move(c));
      incoming_.clear();
    }
    polled.assign(1, pollfd{wake_[0], POLLIN, 0});
    Clock::time_point next = after(1);
    for (const auto& c : waiting) {
      polled.push_back(pollfd{c->fd, POLLIN, 0});
      next = std::min(next, c->deadline);
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
    if (poll(polled.data(), polled.size(), int(std::clamp<int64_t>(left + 1, 0, 1000))) < 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // EINTR, or out of memory for a moment
      continue;
    }
    if (polled[0].revents) {
      char drain[256];
      while (::read(wake_[0], drain, sizeof drain) > 0) {
      }
    }
    const Clock::time_point now = Clock::now();
    still.clear();
    for (size_t i = 0; i < waiting.size(); ++i) {
      std::unique_ptr<Connection>& c = waiting[i];
      const Head head = polled[i + 1].revents ? read_head(*c, limits_.head_max_bytes) : Head::Partial;
      if (head == Head::Complete) {
        std::lock_guard lock(mutex_);
        ready_.push_back(std::move(c));
        ready_changed_.notify_one();
        continue;
      }
      if (head == Head::Partial && now < c->deadline) {
        still.push_back(std::move(c));
        continue;
      }
      if (head == Head::TooLarge)
        quick_reply(c->fd, 431, "Request Header Fields Too Large", "the request head is too large");
      else if (head == Head::Partial && c->offset < c->buffer.size())
        quick_reply(c->fd, 408, "Request Timeout", "the request head did not arrive in time");
      close(std::move(c));
    }
    waiting.swap(still);
  }
  for (auto& c : waiting) close(std::move(c));
}

void HttpServer::work() {
  for (;;) {
    std::unique_ptr<Connection> c;
    {
      std::unique_lock lock(mutex_);
      ready_changed_.wait(lock, [&] { return stopping_ || !ready_.empty(); });
      if (stopping_) return;
      c = std::move(ready_.front());
      ready_.pop_front();
      active_.insert(c->fd);
    }
    const bool keep = run_requests(*c);
    {
      std::lock_guard lock(mutex_);
      active_.erase(c->fd);
    }
    if (keep) {
      wait(std::move(c));
      continue;
    }
    if (c->close) linger(*c);
    close(std::move(c));
  }
}

std::string HttpServer::respond(std::string_view request) {
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
    fail("cannot create a socket pair: {}", std::strerror(errno));
  Connection c;
  c.fd = pair[1];
  c.counted = false;
  c.peer = "127.0.0.1";
  c.deadline = after(limits_.head_timeout);
  std::string response;
  std::thread writer([&] {
    for (size_t sent = 0; sent < request.size();) {
      const ssize_t n = send(pair[0], request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n <= 0 && errno != EINTR) break;
      if (n > 0) sent += size_t(n);
    }
    shutdown(pair[0], SHUT_WR);
  });
  std::thread reader([&] {
    char chunk[4096];
    for (ssize_t n; (n = recv(pair[0], chunk, sizeof chunk, 0)) != 0;) {
      if (n > 0)
        response.append(chunk, size_t(n));
      else if (errno != EINTR)
        break;
    }
  });
  for (;;) {
    const Head head = read_head(c, limits_.head_max_bytes);
    if (head == Head::Partial) {
      if (!ready(c.fd, POLLIN, c.deadline)) break;
      continue;
    }
    if (head == Head::TooLarge) quick_reply(c.fd, 431, "Request Header Fields Too Large", "the request head is too large");
    if (head != Head::Complete || !run_requests(c)) break;
  }
  ::close(c.fd);  // the writer's sends fail from here on, and the reader sees the end
  writer.join();
  reader.join();
  ::close(pair[0]);
  return response;
}

}  // namespace kascade::server
