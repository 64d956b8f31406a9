// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_METRICS_METRICS_H_
#define SLUICE_SERVER_METRICS_METRICS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "server/core/engine.h"
#include "server/core/events.h"
#include "server/metrics/prometheus_latency_histogram.h"

namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace sluice::metrics {

// A leaf's upstream (a copy of tree::UpstreamStats' fields, so that this
// library does not depend on server/tree). Whether it answers is
// SyncSnapshot::store_up: for a leaf the store is its upstream.
struct UpstreamSnapshot {
  // The --upstream target, and the central replica that answered last (""
  // before the first answer).
  std::string target;
  std::string peer;
  // Times the answering central replica changed.
  uint64_t moves = 0;
  // Round trip of the last answered lease tick.
  absl::Duration last_round_trip = absl::ZeroDuration();
};

// A central replica's leaves (a copy of cluster::LedgerStats' fields).
struct LeavesSnapshot {
  uint32_t leaves = 0;
  // Leaf ticks by result: "ok", "stale", "unavailable", "too_many",
  // "invalid".
  std::vector<std::pair<std::string, uint64_t>> ticks;
  // Units by resource ("rate", "slots") and holder: "granted" (what Redis
  // granted this replica for itself and its leaves, still in force),
  // "leaves" (leased to leaves) and "self" (in force here).
  struct Units {
    std::string resource;
    int64_t granted = 0;
    int64_t leaves = 0;
    int64_t self = 0;
  };
  std::vector<Units> units;
  // Breaker transitions reported by leaves, by result: "accepted",
  // "refused", "upstream_refused".
  std::vector<std::pair<std::string, uint64_t>> breaker_reports;
  // Reports forwarded between leaves, by route: "delivered" (in memory),
  // "upstream", "dropped".
  std::vector<std::pair<std::string, uint64_t>> forwarded;
};

// The cluster sync loop as metrics see it (a copy of cluster::SyncStats'
// fields, so that this library does not depend on server/cluster).
struct SyncSnapshot {
  bool store_up = false;
  uint64_t ticks = 0;
  uint64_t failures = 0;
  uint32_t live_replicas = 0;
  absl::Duration last_tick_duration = absl::ZeroDuration();
  uint64_t reports_forwarded = 0;
  uint64_t reports_received = 0;
  uint64_t reports_not_forwarded = 0;
  absl::Duration clock_offset = absl::ZeroDuration();
  uint64_t store_resets = 0;
  uint32_t quiet_policies = 0;
  // The store's Describe-like endpoint and its error and event counts by
  // kind (a copy of cluster::StoreStatus).
  std::string store_endpoint;
  std::vector<std::pair<std::string, uint64_t>> store_errors;
  std::vector<std::pair<std::string, uint64_t>> store_events;
  // A leaf of the grant tree: its upstream. Absent on a central replica.
  std::optional<UpstreamSnapshot> upstream;
  // A central replica serving leaves. Absent on a leaf, and with
  // --max-leaves 0.
  std::optional<LeavesSnapshot> leaves;
};

// Envoy rate-limit service totals since start.
struct RateLimitTotals {
  uint64_t ok = 0;
  uint64_t over_limit = 0;
  uint64_t invalid = 0;
  uint64_t unmatched = 0;
};

// Envoy external authorization totals since start, by answer.
struct ExtAuthzTotals {
  uint64_t allow = 0;
  uint64_t refuse = 0;
  uint64_t degrade = 0;
  uint64_t unmatched = 0;
  uint64_t invalid = 0;
};

// Envoy access-log service entries since start.
struct AccessLogTotals {
  uint64_t settled = 0;
  uint64_t no_permit = 0;
  uint64_t unknown_permit = 0;
  uint64_t invalid = 0;
};

// The HTTP/JSON API as metrics see it (a copy of http::HttpStats' fields,
// so that this library does not depend on server/http).
struct HttpSnapshot {
  struct Requests {
    std::string endpoint;  // "/v1/acquire", ..., or "other"
    std::string code;      // "200", ..., or "other"
    uint64_t count = 0;
  };
  std::vector<Requests> requests;
  uint64_t active_connections = 0;
  uint64_t idle_connections = 0;
  uint64_t waiting_connections = 0;
  uint64_t connections_shed = 0;
  uint64_t connections_refused = 0;
  // Connections closed at a deadline, by phase ("handshake", "head", ...).
  std::vector<std::pair<std::string, uint64_t>> timeouts;
  uint64_t rejected_framing = 0;
  uint64_t rejected_limits = 0;
};

// The warm state file's writes (a copy of app::StateFileKeeper::Stats'
// fields, so that this library does not depend on server/app).
struct StateFileSnapshot {
  uint64_t writes = 0;
  uint64_t failures = 0;
  absl::Time last_write = absl::InfinitePast();
};

// Reloads of the admin token file (a copy of rpc::AdminTokenFile::Stats'
// fields, so that this library does not depend on server/rpc).
struct AdminTokenSnapshot {
  uint64_t reloads_ok = 0;
  uint64_t reloads_error = 0;
};

// The served TLS certificate and its reloads (a copy of tls::TlsStats'
// fields, so that this library does not depend on server/tls).
struct TlsSnapshot {
  absl::Time not_after = absl::InfinitePast();
  uint64_t reloads = 0;
  uint64_t reload_failures = 0;
};

// Reloads of the policies file (a copy of app::PolicyReloads::Stats'
// fields, so that this library does not depend on server/app).
struct PolicyReloadSnapshot {
  uint64_t ok = 0;
  uint64_t error = 0;
  bool last_failed = false;
};

// Where the metrics read from at scrape time. Only `engine` is required.
struct Sources {
  core::Engine* engine = nullptr;
  // Cluster mode: the sync loop's state. Absent (or returning nullopt) in
  // standalone mode, which hides the store metrics.
  std::function<std::optional<SyncSnapshot>()> sync;
  // Events dropped for slow watchers so far.
  std::function<uint64_t()> events_dropped;
  // Answers for dependencies without a policy: {allowed, rejected}.
  std::function<std::pair<uint64_t, uint64_t>()> unknown_decisions;
  // WatchEvents streams open now.
  std::function<uint64_t()> watchers;
  // Decide streams open now.
  std::function<uint64_t()> decide_streams;
  // The members below are initialized here so that brace-initialized
  // Sources may leave them out.
  // The Envoy rate-limit service's answers.
  std::function<RateLimitTotals()> rate_limit = nullptr;
  // The Envoy external authorization service's answers.
  std::function<ExtAuthzTotals()> ext_authz = nullptr;
  std::function<AccessLogTotals()> access_log = nullptr;
  // The HTTP API's counters. Absent (or returning nullopt) without the HTTP
  // API, which hides its metrics.
  std::function<std::optional<HttpSnapshot>()> http = nullptr;
  // The state file's writes. Absent (or returning nullopt) without
  // --state-file, which hides its metrics.
  std::function<std::optional<StateFileSnapshot>()> state_file = nullptr;
  // The admin token file's reloads. Absent (or returning nullopt) without
  // --admin-token-file, which hides its metric.
  std::function<std::optional<AdminTokenSnapshot>()> admin_token = nullptr;
  // The TLS certificate. Absent (or returning nullopt) without --tls-cert,
  // which hides its metrics.
  std::function<std::optional<TlsSnapshot>()> tls = nullptr;
  // The policies file's reloads. Absent (or returning nullopt) without
  // --policies, which hides its metrics.
  std::function<std::optional<PolicyReloadSnapshot>()> policy_reloads =
      nullptr;
};

// Every sluiced metric (see metric_list.h). Almost everything is read at
// scrape time from the engine's own per-dependency counters, so the request
// path pays nothing for it; the exceptions are the Acquire histogram
// (lock-free, see PrometheusLatencyHistogram), breaker transitions and adaptive
// moves (counted on each change, which is rare). Safe for concurrent use.
class Metrics final : public core::EventSink {
 public:
  explicit Metrics(Sources sources);
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Request path: one Acquire took `d`.
  void ObserveAcquire(absl::Duration d) { acquire_.Observe(d); }

  // Counts a breaker state change. Quick; called under the dependency lock.
  void OnBreakerTransition(const core::BreakerTransition& transition) override
      ABSL_LOCKS_EXCLUDED(mu_);
  // Counts a move of an adaptive gate of a dependency (not of a key). Quick;
  // called under the dependency lock.
  void OnAdaptiveChange(const core::AdaptiveChange& change) override
      ABSL_LOCKS_EXCLUDED(mu_);

  // Every metric family, in metric_list.h order; families without series
  // are still listed (with HELP and TYPE) except cluster-only ones in
  // standalone mode.
  std::vector<prometheus::MetricFamily> Collect() const
      ABSL_LOCKS_EXCLUDED(mu_);

  // The Prometheus text format of Collect().
  std::string Render() const;

  // For prometheus::Exposer; shares this object's lifetime.
  std::shared_ptr<prometheus::Collectable> collectable();

 private:
  class Adapter;
  using TransitionKey = std::tuple<std::string, core::BreakerState,
                                   core::BreakerState>;
  // kind: a label value of sluice_adaptive_changes_total.
  using ChangeKey = std::pair<std::string, std::string>;

  const Sources sources_;
  PrometheusLatencyHistogram acquire_;
  std::shared_ptr<Adapter> adapter_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<TransitionKey, uint64_t> transitions_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<ChangeKey, uint64_t> adaptive_changes_
      ABSL_GUARDED_BY(mu_);
};

// Serves GET /metrics over HTTP (prometheus-cpp's civetweb server).
// Safe for concurrent use; stops serving when destroyed, which must happen
// before `metrics` is destroyed.
class MetricsServer {
 public:
  // Binds `address` ("host:port", port 0 picks one). UNAVAILABLE when it
  // cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& address, Metrics* metrics);
  ~MetricsServer();

  int port() const { return port_; }

 private:
  MetricsServer(std::unique_ptr<prometheus::Exposer> exposer, std::string host,
                int port);

  std::unique_ptr<prometheus::Exposer> exposer_;
  // The host it listens on, as given ("0.0.0.0", "[::1]", "localhost").
  std::string host_;
  int port_;
};

}  // namespace sluice::metrics

#endif  // SLUICE_SERVER_METRICS_METRICS_H_
