#ifndef SLUICE_SERVER_HTTP_HTTP_SERVER_H_
#define SLUICE_SERVER_HTTP_HTTP_SERVER_H_

#include <openssl/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/http/request_counters.h"
#include "server/rpc/decision_service.h"

namespace sluice::http {

struct HttpServerOptions {
  // Where to listen: "HOST:PORT" (TCP only); port 0 picks a free port.
  std::string listen = "127.0.0.1:0";
  // Connections served at once, one thread each; a connection beyond them
  // waits for a thread, and meanwhile every connection closes after its
  // current request (see http_server.cc).
  int threads = 128;
  // Longest wait for more of a request once it has begun, and for the
  // socket to take more of a response.
  absl::Duration read_timeout = absl::Seconds(5);
  absl::Duration write_timeout = absl::Seconds(5);
  // Longest time from the first byte of a request to the last byte of its
  // answer, however the bytes trickle in: a client that sends one byte
  // every few seconds must not hold a thread for ever.
  absl::Duration request_timeout = absl::Seconds(10);
  // How long an idle keep-alive connection is kept between requests.
  absl::Duration idle_timeout = absl::Seconds(65);
  // Requests one connection serves before the server closes it.
  int max_requests_per_connection = 10000;
  // TLS: the server context for the next connection (asked once per
  // connection, so a reloaded certificate serves new connections at once).
  // Empty: plaintext. The handshake must finish within read_timeout.
  std::function<std::shared_ptr<SSL_CTX>()> tls_context;
};

// What the metrics read of a running HttpServer.
struct HttpStats {
  std::vector<RequestCounters::Count> requests;
  // Connections being served now (each holds a thread).
  int64_t connections = 0;
  // Connections accepted and waiting for a thread.
  int64_t waiting = 0;
};

// The HTTP/JSON decision API (decision_api.h) on an HTTP/1.1 listener with
// keep-alive. Safe for concurrent use. `service` must outlive it.
class HttpServer {
 public:
  // Binds options.listen and starts serving. Health reports NOT_SERVING
  // until SetServing(true). INVALID_ARGUMENT for an address that is not
  // HOST:PORT, UNAVAILABLE when it cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const HttpServerOptions& options, rpc::DecisionServiceImpl* service);

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
};

}  // namespace sluice::http

#endif  // SLUICE_SERVER_HTTP_HTTP_SERVER_H_
