// SPDX-License-Identifier: Apache-2.0
// sluice-example-gateway: an HTTP gateway that asks Sluice, through the SDK,
// before every backend call.
//
// A request is matched to a route (longest prefix) and answered with
//   - the backend's response (X-Sluice-Result: backend);
//   - 200 {"degraded": true, "reason": ..., "fallback": ...} when Sluice said
//     DEGRADE or the backend call failed (X-Sluice-Result: degraded);
//   - 429 with Retry-After, or 503, when Sluice refused (rejected);
//   - 502 when the backend failed and the route serves no fallback (error).
// GET /metrics exports Prometheus counters; GET /healthz answers "ok".
#include <httplib.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "base/files.h"
#include "gateway_config.h"
#include "gateway_metrics.h"
#include "http_util.h"
#include "sluice/client/client.h"
#include "wire/address.h"

ABSL_FLAG(std::string, config, "", "Gateway config file (YAML); required.");
ABSL_FLAG(std::string, events_log, "",
          "If set, append one line per breaker state change the gateway sees "
          "in Sluice's answers: \"<unix_ms> <dependency> <from> <to>\".");

namespace sluice::examples {
namespace {

using client::CallContext;
using client::CallResult;
using client::Reason;
using client::Response;

// Appends breaker transitions to a file. Safe for concurrent use.
class EventsLog {
 public:
  explicit EventsLog(const std::string& path)
      : file_(path.empty() ? nullptr : std::fopen(path.c_str(), "a")) {}
  ~EventsLog() {
    if (file_ != nullptr) std::fclose(file_);
  }
  bool ok() const { return file_ != nullptr; }

  void Transition(const std::string& dependency, client::BreakerState from,
                  client::BreakerState to) ABSL_LOCKS_EXCLUDED(mu_) {
    if (file_ == nullptr) return;
    absl::MutexLock lock(&mu_);
    std::fprintf(file_, "%lld %s %s %s\n",
                 static_cast<long long>(absl::ToUnixMillis(absl::Now())),
                 dependency.c_str(),
                 std::string(client::BreakerStateName(from)).c_str(),
                 std::string(client::BreakerStateName(to)).c_str());
    std::fflush(file_);
  }

 private:
  absl::Mutex mu_;
  std::FILE* const file_;
};

// One keep-alive connection per worker thread and backend.
absl::StatusOr<Response> CallBackend(const Route& route,
                                     const httplib::Request& request,
                                     const CallContext& ctx) {
  struct Connection {
    std::unique_ptr<httplib::Client> client;
    bool used = false;
  };
  thread_local absl::flat_hash_map<std::string, Connection> connections;

  const absl::Time start = absl::Now();
  for (int attempt = 0; attempt < 2; ++attempt) {
    Connection& conn = connections[route.backend];
    if (conn.client == nullptr) {
      conn.client = std::make_unique<httplib::Client>(route.backend);
      conn.client->set_keep_alive(true);
      conn.client->set_tcp_nodelay(true);
      conn.used = false;
    }
    const absl::Duration left = std::max(ctx.deadline - absl::Now(),
                                         absl::Milliseconds(1));
    const int64_t us = absl::ToInt64Microseconds(left);
    conn.client->set_connection_timeout(us / 1000000, us % 1000000);
    conn.client->set_read_timeout(us / 1000000, us % 1000000);
    conn.client->set_write_timeout(us / 1000000, us % 1000000);

    httplib::Headers headers;
    httplib::Result result = conn.client->Get(request.path, headers);
    if (result) {
      conn.used = true;
      Response response;
      response.status_code = result->status;
      response.body = result->body;
      response.content_type = result->get_header_value("Content-Type");
      return response;
    }
    const httplib::Error error = result.error();
    const bool stale = conn.used && (error == httplib::Error::Read ||
                                     error == httplib::Error::Write);
    conn.client.reset();
    // A kept-alive connection the backend closed long ago: reconnect once.
    if (stale && attempt == 0) continue;
    if (absl::Now() >= ctx.deadline ||
        error == httplib::Error::ConnectionTimeout) {
      return absl::DeadlineExceededError(absl::StrCat(
          "backend ", route.backend, " took longer than ",
          absl::FormatDuration(absl::Now() - start)));
    }
    return absl::UnavailableError(absl::StrCat(
        "backend ", route.backend, ": ", httplib::to_string(error)));
  }
  return absl::UnavailableError("unreachable");
}

// A JSON fallback is embedded as JSON; anything else as a string.
nlohmann::ordered_json FallbackJson(const Response& fallback) {
  if (absl::StrContains(fallback.content_type, "json") &&
      !fallback.body.empty()) {
    nlohmann::ordered_json parsed = nlohmann::ordered_json::parse(
        fallback.body, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_discarded()) return parsed;
  }
  return fallback.body;
}

bool IsShortCircuit(Reason reason) {
  return reason == Reason::kCircuitOpen || reason == Reason::kProbeLimit;
}

class Gateway {
 public:
  Gateway(GatewayConfig config, std::unique_ptr<client::Client> sluice,
          EventsLog* events)
      : config_(std::move(config)),
        sluice_(std::move(sluice)),
        events_(events),
        metrics_(Dependencies(config_)) {}

  void Install(httplib::Server* server) {
    server->Get("/metrics", [this](const httplib::Request&,
                                   httplib::Response& res) {
      res.set_content(metrics_.Render(sluice_->stats()),
                      "text/plain; version=0.0.4");
    });
    server->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("ok\n", "text/plain");
    });
    server->Get(".*", [this](const httplib::Request& req,
                             httplib::Response& res) { Handle(req, res); });
  }

 private:
  static std::vector<std::string> Dependencies(const GatewayConfig& config) {
    std::vector<std::string> out;
    for (const Route& r : config.routes) out.push_back(r.dependency);
    return out;
  }

  void Handle(const httplib::Request& req, httplib::Response& res) {
    metrics_.CountRequest();
    const Route* route = MatchRoute(config_, req.path);
    if (route == nullptr) {
      Answer(res, 404, R"({"error":"no route"})", GatewayMetrics::Kind::kNoRoute,
             "no_route");
      return;
    }
    GatewayMetrics::RouteCounters& counters =
        metrics_.route(route - config_.routes.data());

    client::CallOptions options;
    if (!route->key_header.empty()) {
      options.key = req.get_header_value(route->key_header.c_str());
    }
    options.default_fallback.body = route->default_fallback;
    options.default_fallback.content_type = "application/json";
    options.fallback_on_failure = route->fallback_on_failure;
    CallResult result = sluice_->Call(
        route->dependency,
        [&](const CallContext& ctx) { return CallBackend(*route, req, ctx); },
        options);
    ObserveBreaker(*route, counters, result);
    counters.ObserveDecision(result.decision_latency);

    if (result.backend_called) {
      const bool ok = result.outcome == client::Outcome::kSuccess;
      (ok ? counters.backend_success : counters.backend_failure)
          .fetch_add(1, std::memory_order_relaxed);
      if (result.decided_locally) {
        (ok ? counters.fail_open_success : counters.fail_open_failure)
            .fetch_add(1, std::memory_order_relaxed);
      }
    } else if (IsShortCircuit(result.reason)) {
      counters.backend_short_circuit.fetch_add(1, std::memory_order_relaxed);
    }

    switch (result.kind) {
      case CallResult::Kind::kBackend:
        if (result.backend_called &&
            result.outcome == client::Outcome::kSuccess) {
          res.status = result.response.status_code;
          res.set_header("X-Sluice-Result", "backend");
          res.set_content(result.response.body,
                          result.response.content_type.empty()
                              ? "application/octet-stream"
                              : result.response.content_type.c_str());
          metrics_.CountResponse(res.status, GatewayMetrics::Kind::kBackend);
          return;
        }
        Answer(res, 502,
               JsonText({{"error", result.error.ok()
                                       ? absl::StrCat("backend answered ",
                                                      result.response.status_code)
                                       : result.error.ToString()}}),
               GatewayMetrics::Kind::kError, "error");
        return;
      case CallResult::Kind::kDegraded:
        counters.degraded[static_cast<int>(result.reason)].fetch_add(
            1, std::memory_order_relaxed);
        res.set_header("X-Sluice-Reason",
                       std::string(client::ReasonName(result.reason)));
        Answer(res, 200,
               JsonText({{"degraded", true},
                         {"reason", client::ReasonName(result.reason)},
                         {"fallback", FallbackJson(result.response)}}),
               GatewayMetrics::Kind::kDegraded, "degraded");
        return;
      case CallResult::Kind::kRejected: {
        if (result.retry_after > absl::ZeroDuration()) {
          const int64_t seconds = std::max<int64_t>(
              1, static_cast<int64_t>(
                     std::ceil(absl::ToDoubleSeconds(result.retry_after))));
          res.set_header("Retry-After", std::to_string(seconds));
        }
        res.set_header("X-Sluice-Reason",
                       std::string(client::ReasonName(result.reason)));
        Answer(res, result.http_status,
               JsonText({{"error", "refused"},
                         {"reason", client::ReasonName(result.reason)}}),
               GatewayMetrics::Kind::kRejected, "rejected");
        return;
      }
    }
  }

  void Answer(httplib::Response& res, int status, const std::string& body,
              GatewayMetrics::Kind kind, const char* result_header) {
    res.status = status;
    res.set_header("X-Sluice-Result", result_header);
    res.set_content(body, "application/json");
    metrics_.CountResponse(status, kind);
  }

  void ObserveBreaker(const Route& route,
                      GatewayMetrics::RouteCounters& counters,
                      const CallResult& result) {
    if (result.decided_locally ||
        result.breaker_state == client::BreakerState::kUnknown) {
      return;
    }
    const int next = static_cast<int>(result.breaker_state);
    int previous = counters.breaker_state.load();
    while (previous != next) {
      if (counters.breaker_state.compare_exchange_weak(previous, next)) {
        events_->Transition(route.dependency,
                            static_cast<client::BreakerState>(previous),
                            result.breaker_state);
        return;
      }
    }
  }

  const GatewayConfig config_;
  const std::unique_ptr<client::Client> sluice_;
  EventsLog* const events_;
  GatewayMetrics metrics_;
};

int Run() {
  const std::string path = absl::GetFlag(FLAGS_config);
  if (path.empty()) {
    std::fprintf(stderr, "sluice-example-gateway: --config is required\n");
    return 2;
  }
  absl::StatusOr<std::string> text = base::ReadRegularFile(path);
  if (!text.ok()) {
    std::fprintf(stderr, "sluice-example-gateway: cannot read %s: %s\n",
                 path.c_str(), std::string(text.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<GatewayConfig> config = ParseGatewayConfig(*text, path);
  if (!config.ok()) {
    std::fprintf(stderr, "sluice-example-gateway: %s\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<wire::HostPort> address = wire::ParseHostPort(config->listen);
  if (!address.ok()) {
    std::fprintf(stderr, "sluice-example-gateway: %s: listen: %s\n",
                 path.c_str(),
                 std::string(address.status().message()).c_str());
    return 2;
  }

  client::ClientOptions options;
  absl::StatusOr<wire::Endpoint> sidecar = wire::ParseEndpoint(config->sluice);
  if (sidecar.ok() && sidecar->is_unix()) {
    options = client::SidecarClientOptions(sidecar->unix_path);
  } else {
    options.target = config->sluice;
    options.acquire_timeout = absl::Milliseconds(20);
  }
  if (config->acquire_timeout.has_value()) {
    options.acquire_timeout = *config->acquire_timeout;
  }
  options.on_failure = config->fail_open ? client::FailureMode::kFailOpen
                                         : client::FailureMode::kFailClosed;
  options.caller = "sluice-example-gateway";
  if (config->lease.has_value()) options.lease.enabled = *config->lease;
  if (config->lease_tick) options.lease.tick = *config->lease_tick;
  options.tls = config->sluice_tls;
  // Before the client: the signal mask is inherited by the threads gRPC
  // starts in Create, so SIGTERM reaches the waiting thread alone. Blocked
  // only afterwards, it could land on a gRPC thread and be dropped, which
  // as a container's PID 1 (no default action) leaves the gateway running
  // until its grace period ends in SIGKILL.
  httplib::Server server;
  StopOnSignal(&server);
  absl::StatusOr<std::unique_ptr<client::Client>> sluice =
      client::Client::Create(options);
  if (!sluice.ok()) {
    std::fprintf(stderr, "sluice-example-gateway: %s\n",
                 std::string(sluice.status().message()).c_str());
    return 2;
  }

  EventsLog events(absl::GetFlag(FLAGS_events_log));
  if (!absl::GetFlag(FLAGS_events_log).empty() && !events.ok()) {
    std::fprintf(stderr, "sluice-example-gateway: cannot open %s\n",
                 absl::GetFlag(FLAGS_events_log).c_str());
    return 2;
  }
  ConfigureServer(&server, config->threads);
  const int threads = config->threads;
  Gateway gateway(*std::move(config), *std::move(sluice), &events);
  gateway.Install(&server);
  if (!server.bind_to_port(address->host, address->port)) {
    std::fprintf(stderr, "sluice-example-gateway: cannot listen on %s:%d\n",
                 address->host.c_str(), address->port);
    return 1;
  }
  WidenListenBacklog(address->port);
  std::fprintf(stderr,
               "sluice-example-gateway: serving on %s:%d (%d threads), Sluice "
               "at %s\n",
               address->host.c_str(), address->port, threads,
               options.target.c_str());
  server.listen_after_bind();
  return 0;
}

}  // namespace
}  // namespace sluice::examples

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Example HTTP gateway on the Sluice client SDK. Usage: "
      "sluice-example-gateway --config gateway.yaml [--events_log FILE]");
  absl::ParseCommandLine(argc, argv);
  return sluice::examples::Run();
}
