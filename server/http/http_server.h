// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_HTTP_HTTP_SERVER_H_
#define SLUICE_SERVER_HTTP_HTTP_SERVER_H_

#include <openssl/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/stats.h"
#include "server/http/request_counters.h"
#include "server/http/request_parser.h"
#include "server/rpc/decision_service.h"
#include "server/rpc/http_check.h"

namespace sluice::http {

struct HttpServerOptions {
  // Where to listen: "HOST:PORT" (TCP only); port 0 picks a free port.
  std::string listen = "127.0.0.1:0";
  // Threads that run the event loops. Each serves its share of the
  // connections; none is tied to a connection.
  int io_threads = 2;
  // Connections open at once, all threads together. A new connection
  // beyond it closes the one idle longest or slowest in its handshake or
  // head (counted as shed), or, when every connection is busy with a
  // request, is refused. Lowered at start to what RLIMIT_NOFILE allows.
  int max_connections = 10000;
  // Deadlines of a connection, each for its whole phase however the bytes
  // trickle in, so that a client sending one byte every few seconds holds
  // nothing for long:
  // the TLS handshake, from the accept;
  absl::Duration tls_handshake_timeout = absl::Seconds(5);
  // the head of a request: from the accept (or the handshake) for the
  // first request, from its first byte for the next ones;
  absl::Duration head_timeout = absl::Seconds(10);
  // the body, from the end of the head;
  absl::Duration body_timeout = absl::Seconds(10);
  // the response, from its first byte written;
  absl::Duration write_timeout = absl::Seconds(5);
  // and an idle keep-alive connection between requests (longer than the
  // 60 s NGINX keeps an idle upstream connection, so that the gateway
  // closes first).
  absl::Duration idle_timeout = absl::Seconds(65);
  // Requests one connection serves before the server closes it.
  int max_requests_per_connection = 10000;
  // Sizes and counts of a request (request_parser.h): 414, 431 and 413
  // beyond them.
  RequestLimits limits;
  // TLS: the server context for the next connection (asked once per
  // connection, so a reloaded certificate serves new connections at once).
  // Empty: plaintext.
  std::function<std::shared_ptr<SSL_CTX>()> tls_context;
};

// The phase a connection was in when its deadline closed it: one of the
// timeouts of HttpServerOptions.
enum class Timeout { kHandshake, kHead, kBody, kWrite, kIdle };
inline constexpr size_t kTimeoutCount = 5;

// Why the parser refused a request: malformed or ambiguous framing (400),
// or over a size or count limit (413, 414, 431).
enum class Rejection { kFraming, kLimits };
inline constexpr size_t kRejectionCount = 2;

// A counter for each value of `Kind`, an enum whose values run from 0 to
// kCount - 1, so that one loop counts, copies or writes them all.
template <typename Kind, size_t kCount, typename Counter = uint64_t>
struct CountsBy {
  Counter& operator[](Kind kind) { return values[static_cast<size_t>(kind)]; }
  const Counter& operator[](Kind kind) const {
    return values[static_cast<size_t>(kind)];
  }

  std::array<Counter, kCount> values{};
};

// What the metrics read of a running HttpServer.
struct HttpStats {
  std::vector<RequestCounters::Count> requests;
  // Connections open now, and how many of them are idle between requests
  // (the others are in their TLS handshake or a request).
  int64_t connections = 0;
  int64_t idle = 0;
  // Always 0: no connection waits for a thread (kept for the metric).
  int64_t waiting = 0;
  // Since start: connections closed to make room for a new one (shed), and
  // new ones refused because none could be closed.
  uint64_t shed = 0;
  uint64_t refused = 0;
  // Connections closed at a deadline, by the phase it ended.
  CountsBy<Timeout, kTimeoutCount> timeouts;
  // Requests refused by the parser, by why.
  CountsBy<Rejection, kRejectionCount> rejected;
};

// The HTTP/JSON decision API (decision_api.h) on an HTTP/1.1 listener with
// keep-alive, event-driven (http_server.cc says how). Safe for concurrent
// use. `service` must outlive it.
class HttpServer : public base::StatsSource {
 public:
  // Binds options.listen and starts serving. Health reports NOT_SERVING
  // until SetServing(true). INVALID_ARGUMENT for an address that is not
  // HOST:PORT, UNAVAILABLE when it cannot be bound. `check` answers
  // /v1/check (501 without it) and must outlive the server too.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const HttpServerOptions& options, rpc::DecisionServiceImpl* service,
      rpc::HttpCheck* check = nullptr);

  // Stops at once if still serving.
  virtual ~HttpServer() = default;

  // The bound port (the real one for port 0).
  virtual int port() const = 0;

  // What GET /v1/health answers: 200 SERVING or 503 NOT_SERVING.
  virtual void SetServing(bool serving) = 0;

  // Stops accepting connections, closes the idle ones, lets requests under
  // way finish until `deadline` and then cuts their connections. Returns
  // once every connection is closed. Idempotent.
  virtual void Stop(absl::Time deadline) = 0;

  virtual HttpStats Stats() const = 0;
  // Stats() as the sluice_http_* metrics.
  void WriteStats(base::StatsWriter& out) const override;
};

}  // namespace sluice::http

#endif  // SLUICE_SERVER_HTTP_HTTP_SERVER_H_
