// libFuzzer target for the HTTP request path of `kascade serve`: the bytes
// of one connection through server::Server::respond, that is the server's
// own connection handling (server/http.h: heads, bodies, keep-alive),
// httplib's parsing, and the routes of server.cc with their JSON parsing
// and generation, on the tiny model of tests/server/tiny_model.h. Byte 0
// picks how the rest is sent:
//   0: as it is (raw HTTP: several requests, half of one, or none);
//   1, 2: "HEAD\x1eBODY", the head's lines cut at '\n': BODY is framed with
//      a Content-Length (1) or in chunks (2);
//   3: BODY alone, POSTed to /v1/completions or /v1/chat/completions.
// Checks: what the server writes back starts with a status line, and the
// first response's JSON body (none for HEAD) is whole and valid JSON. A crash, a throw out of the server or a
// hang is libFuzzer's to report.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "server/server.h"
#include "tokenizer/tokenizer.h"

#include "server/tiny_model.h"

namespace {

using namespace kascade;

server::Server& the_server() {
  static const std::unique_ptr<engine::Backend> backend = test_server::tiny_chat_backend();
  static const tokenizer::Tokenizer tokenizer(backend->file());
  static server::Server instance = [] {
    server::ApiDefaults defaults;
    defaults.model_id = "tiny";
    defaults.context = 48;
    defaults.attention.method = Method::Dense;
    server::ServerOptions options;
    options.parallel = 2;
    options.max_queue = 2;
    options.max_body_bytes = 64 << 10;
    options.quiet = true;
    return server::Server(*backend, tokenizer, defaults, options);
  }();
  return instance;
}

void check(bool condition, const char* what, const std::string& response) {
  if (!condition) {
    std::fprintf(stderr, "fuzz_http_request: %s\n%s\n", what, response.substr(0, 2000).c_str());
    std::abort();
  }
}

std::string framed(uint8_t mode, std::string_view rest) {
  if (mode == 0) return std::string(rest);
  if (mode == 3)
    return fmt::format("POST {} HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{}",
                       rest.size() % 2 ? "/v1/chat/completions" : "/v1/completions", rest.size(), rest);
  const size_t cut = rest.find('\x1e');
  const std::string_view lines = rest.substr(0, cut);
  const std::string_view body = cut == std::string_view::npos ? std::string_view() : rest.substr(cut + 1);
  std::string out;
  for (size_t at = 0; at <= lines.size();) {
    size_t end = lines.find('\n', at);
    if (end == std::string_view::npos) end = lines.size();
    out.append(lines.substr(at, end - at)).append("\r\n");
    at = end + 1;
  }
  if (mode == 1) return out + fmt::format("Content-Length: {}\r\n\r\n", body.size()) + std::string(body);
  out += "Transfer-Encoding: chunked\r\n\r\n";
  const size_t chunk = 1 + body.size() % 61;
  for (size_t at = 0; at < body.size(); at += chunk) {
    const std::string_view piece = body.substr(at, chunk);
    out += fmt::format("{:x}\r\n", piece.size()).append(piece).append("\r\n");
  }
  return out + "0\r\n\r\n";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string request = framed(data[0] % 4, std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  const std::string response = the_server().respond(request);
  if (response.empty()) return 0;  // e.g. the connection closed before a request line
  check(response.rfind("HTTP/1.1 ", 0) == 0 && response.size() >= 12, "no status line", response);
  const size_t head_end = response.find("\r\n\r\n");
  check(head_end != std::string::npos, "no end of the response head", response);
  const std::string_view head(response.data(), head_end);
  const size_t length_at = head.find("Content-Length: ");
  // A HEAD request's Content-Length is the GET's, with no body; the method
  // ends at a space or at the line's end ("HEAD\r\n" is one too, malformed).
  const bool head_request = request.substr(0, request.find_first_of(" \r\n")) == "HEAD";
  if (!head_request && head.find("Content-Type: application/json") != std::string_view::npos &&
      length_at != std::string_view::npos) {
    const size_t length = std::strtoull(head.data() + length_at + 16, nullptr, 10);
    check(response.size() >= head_end + 4 + length, "a body shorter than its Content-Length", response);
    check(nlohmann::json::accept(response.substr(head_end + 4, length)), "a JSON body that does not parse", response);
  }
  return 0;
}
