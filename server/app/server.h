// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_APP_SERVER_H_
#define SLUICE_SERVER_APP_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/app/event_sinks.h"
#include "server/app/mode.h"
#include "server/app/options.h"
#include "server/app/policies_file.h"
#include "server/app/unix_socket.h"
#include "server/cluster/store.h"
#include "server/core/clock.h"
#include "server/core/engine.h"
#include "server/http/http_server.h"
#include "server/metrics/metrics.h"
#include "base/file_watcher.h"
#include "server/policy/policy_store.h"
#include "server/rpc/admin_events.h"
#include "server/rpc/admin_server.h"
#include "server/rpc/decision_service.h"
#include "server/rpc/access_log_service.h"
#include "server/rpc/ext_authz_service.h"
#include "server/rpc/http_check.h"
#include "server/rpc/rate_limit_service.h"
#include "server/tls/tls_reloader.h"

namespace sluice::app {

// Everything sluiced runs, wired together: the engine, the policy store and
// its file watcher, the gRPC server (DecisionService, health, reflection),
// the HTTP/JSON decision API (with --http-listen), the admin and metrics
// listeners, the housekeeping thread, and the Mode
// (standalone or cluster) that owns the rest. The constructor builds the
// components in dependency order; BuildAndStart starts them. BuildAndStart,
// Wait and Shutdown may be called from different threads; Shutdown is
// idempotent.
class Server {
 public:
  using Options = ServerOptions;

  // Where the server reads time and keeps cluster state; tests replace them.
  struct Dependencies {
    // The engine's and the sync loop's clock; must outlive the server.
    core::Clock* clock = core::RealClock::Get();
    // Cluster mode's store. Empty: a RedisStore for options.redis.
    StoreFactory store_factory;
    // Cluster mode: run the sync thread. Tests turn it off and drive ticks
    // with SyncNow().
    bool sync_thread = true;
    // Serve /metrics on options.metrics_listen. Tests that do not scrape
    // turn it off: its HTTP server takes about 2 s to stop.
    bool metrics_listener = true;
  };

  // BuildAndStart refuses `options` that fail ValidateOptions.
  explicit Server(Options options);
  Server(Options options, Dependencies dependencies);
  ~Server();  // Shuts down with an immediate deadline if still running.
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Loads the policies, starts serving and the background threads. Logs the
  // effective configuration and "serving DecisionService on HOST:PORT".
  // INVALID_ARGUMENT for a bad policies file, UNAVAILABLE when an address
  // cannot be bound. Call once.
  absl::Status BuildAndStart() ABSL_LOCKS_EXCLUDED(mu_);

  // Blocks until Shutdown has completed.
  void Wait() ABSL_LOCKS_EXCLUDED(mu_);

  // Reports NOT_SERVING, stops the HTTP API (requests under way finish
  // until `deadline`), lets in-flight RPCs finish until `deadline` (then
  // cancels them), and stops the watcher, housekeeping and the mode.
  void Shutdown(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // The port DecisionService listens on (useful with port 0); 0 before
  // BuildAndStart.
  int port() const { return port_; }
  // The admin and metrics ports (useful with port 0), after BuildAndStart;
  // metrics_port() is 0 without the metrics listener.
  int admin_port() const { return admin_server_ ? admin_server_->port() : 0; }
  int metrics_port() const {
    return metrics_server_ ? metrics_server_->port() : 0;
  }
  // The HTTP API's port (useful with port 0), after BuildAndStart; 0
  // without --http-listen.
  int http_port() const { return http_server_ ? http_server_->port() : 0; }
  // Where the HTTP API is reachable ("HOST:PORT" with the bound port), after
  // BuildAndStart; "" without --http-listen.
  std::string http_target() const;
  // Where DecisionService and AdminService are reachable, after
  // BuildAndStart: "HOST:PORT" with the bound port, or "unix:PATH". Each is
  // a gRPC channel target.
  std::string target() const;
  std::string admin_target() const;
  // The replica id in use (events, cluster membership).
  const std::string& replica_id() const { return replica_id_; }

  // Channels to DecisionService and health, and to AdminService, that skip
  // the network; after BuildAndStart.
  std::shared_ptr<grpc::Channel> InProcessChannel();
  std::shared_ptr<grpc::Channel> AdminInProcessChannel();

  // What /metrics serves, for tests that run without its listener (and
  // check refused_writes: every component's metric is in the list).
  const metrics::Metrics& metrics() const { return metrics_; }

  // One cluster sync tick on the caller's thread, for tests that set
  // Dependencies::sync_thread to false, then the readiness check the
  // housekeeping thread makes. FAILED_PRECONDITION standalone.
  absl::Status SyncNow();

 private:
  core::Engine::Options EngineOptions() const;
  // BuildAndStart's work, once it has claimed the start.
  absl::Status Start() ABSL_LOCKS_EXCLUDED(mu_);
  // Registers with metrics_ every component that exports its own counters
  // and was started (the HTTP API only with --http-listen, ...); once,
  // before /metrics is served.
  void AddStatsSources();
  // Runs `start`, which binds `address`; for "unix:PATH" it first claims
  // the path (UnixSocketClaim::Take) and then sets the socket's mode.
  // Returns the claim to release once the listener has shut down, if any.
  absl::StatusOr<std::optional<UnixSocketClaim>> Listen(
      const std::string& address,
      const std::function<absl::Status()>& start) const;
  // With --tls-cert: checks the files and starts watching them (tls_,
  // tls_credentials_). Logs what stays plaintext.
  absl::Status StartTls();
  // The credentials of a gRPC listener: TLS for TCP with --tls-cert,
  // plaintext for unix: (its file mode guards it) or without.
  std::shared_ptr<grpc::ServerCredentials> ListenerCredentials(
      const std::string& address) const;
  absl::Status StartDecisionService();
  absl::Status BindDecisionService();
  // The HTTP API, when options_.http_listen is set.
  absl::Status StartHttpApi();
  // The admin listener and /metrics.
  absl::Status StartOperatorSurfaces();
  void SetServing(bool serving);
  // Reports SERVING once the mode is Ready (at once standalone; a cluster
  // replica once its limits can admit), unless Shutdown has begun. Logs
  // what it waits for whenever that changes. Returns whether it is ready.
  bool UpdateReadiness() ABSL_LOCKS_EXCLUDED(mu_);
  // The housekeeping thread: sweeps the engine, then sleeps until its
  // sweep alarm is due (see Options::sweep_interval), until Shutdown stops
  // the alarm. Until the server is ready it sweeps and asks
  // UpdateReadiness every sweep_interval (at least kReadinessPoll apart)
  // instead of up to kLongestSweepGap apart.
  void Housekeeping() ABSL_LOCKS_EXCLUDED(mu_);

  // In dependency order: each is built from the ones above it.
  const Options options_;
  core::Clock* const clock_;
  const std::string replica_id_;
  rpc::EventHub events_;
  const bool metrics_listener_;
  const std::unique_ptr<Mode> mode_;
  // Observes the engine below, which it reads only when scraped, and the
  // components AddStatsSources gives it, which outlive every scrape (the
  // metrics server stops first).
  metrics::Metrics metrics_;
  LoggingEventSink log_sink_;
  // The engine's observers: the mode first (a cluster nudges its sync loop),
  // then the metrics, the event hub and the log.
  FanOutEventSink sink_;
  core::Engine engine_;
  policy::PolicyStore policies_;
  rpc::DecisionServiceImpl decision_service_;
  // Envoy's rate-limit protocol on the data port, deciding through
  // decision_service_.
  rpc::RateLimitServiceImpl rate_limit_service_;
  // How an HTTP request a gateway asks about (Envoy's external
  // authorization, /v1/check) names its policy and what it is answered,
  // deciding through decision_service_.
  rpc::HttpCheck http_check_;
  // Envoy's external authorization protocol on the data port.
  rpc::AuthorizationServiceImpl ext_authz_service_;
  rpc::AccessLogServiceImpl access_log_service_;

  // Started by BuildAndStart, stopped by Shutdown.
  // With --tls-cert: the one owner of the TLS pair (the HTTP API's context,
  // the certificate's metrics); the TCP gRPC listeners share
  // tls_credentials_, made by tls_ only when one of them is TCP.
  std::unique_ptr<tls::TlsReloader> tls_;
  std::shared_ptr<grpc::ServerCredentials> tls_credentials_;
  std::unique_ptr<grpc::Server> grpc_server_;
  int port_ = 0;
  // Stopped by Shutdown but kept, so that its counters stay readable.
  std::unique_ptr<http::HttpServer> http_server_;
  std::unique_ptr<rpc::AdminServer> admin_server_;
  std::unique_ptr<metrics::MetricsServer> metrics_server_;
  // Before watcher_, which counts into it until it is destroyed.
  PolicyReloads policy_reloads_;
  std::unique_ptr<base::FileWatcher> watcher_;
  std::thread housekeeping_;
  // The Unix sockets of the listeners, released at the end of Shutdown
  // (after both gRPC servers have stopped).
  std::vector<UnixSocketClaim> sockets_;

  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  // BuildAndStart is under way; Shutdown waits for it.
  bool starting_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  // UpdateReadiness reported SERVING; what it waited for before that, and
  // since when (for the log).
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  std::string waiting_for_ ABSL_GUARDED_BY(mu_);
  absl::Time waiting_since_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace sluice::app

#endif  // SLUICE_SERVER_APP_SERVER_H_
