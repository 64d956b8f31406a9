// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_METRICS_METRICS_H_
#define SLUICE_SERVER_METRICS_METRICS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/stats.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "server/core/engine.h"
#include "server/core/events.h"
#include "server/metrics/prometheus_latency_histogram.h"

namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace sluice::metrics {

// Every sluiced metric. Everything is read at scrape time: from the
// engine's own per-dependency counters (the metrics of metric_list.h), and
// from the components registered with AddSource, which write their own
// counters under the definitions they declare (base::MetricDef). So the request
// path pays nothing for it; the exceptions are the Acquire histogram
// (lock-free, see PrometheusLatencyHistogram), breaker transitions and adaptive
// moves (counted on each change, which is rare). Safe for concurrent use.
class Metrics final : public core::EventSink {
 public:
  // refused_writes() keeps at most this many.
  static constexpr size_t kMaxRefusedWrites = 32;

  explicit Metrics(core::Engine* engine);
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Adds `source` to every later scrape. It must stay alive until nothing
  // scrapes any more (the MetricsServer is gone). A component that is not
  // there (no --http-listen, standalone mode's sync loop) is not added, and
  // metrics only it writes are not shown.
  void AddSource(const base::StatsSource* source) ABSL_LOCKS_EXCLUDED(mu_);

  // Writes left out of the scrape, as "NAME: why" (each once): a malformed
  // definition, label values that do not match its labels, a name of the
  // engine's list, or one name defined two ways (RefusalOf). Kept for
  // tests: empty unless a component has a bug.
  std::vector<std::string> refused_writes() const ABSL_LOCKS_EXCLUDED(mu_);

  // Request path: one Acquire took `d`.
  void ObserveAcquire(absl::Duration d) { acquire_.Observe(d); }

  // Counts a breaker state change. Quick; called under the dependency lock.
  void OnBreakerTransition(const core::BreakerTransition& transition) override
      ABSL_LOCKS_EXCLUDED(mu_);
  // Counts a move of an adaptive gate of a dependency (not of a key). Quick;
  // called under the dependency lock.
  void OnAdaptiveChange(const core::AdaptiveChange& change) override
      ABSL_LOCKS_EXCLUDED(mu_);

  // Every metric family with series: the engine's in metric_list.h order,
  // then the components' in the order their sources first write them.
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

  class FamilyWriter;
  // The engine's per-dependency counters, into `families` (kMetrics's,
  // at the index of their MetricId).
  void CollectEngine(std::vector<prometheus::MetricFamily>* families) const
      ABSL_LOCKS_EXCLUDED(mu_);

  core::Engine* const engine_;
  PrometheusLatencyHistogram acquire_;
  std::shared_ptr<Adapter> adapter_;

  mutable absl::Mutex mu_;
  std::vector<const base::StatsSource*> sources_ ABSL_GUARDED_BY(mu_);
  mutable std::vector<std::string> refused_ ABSL_GUARDED_BY(mu_);
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
