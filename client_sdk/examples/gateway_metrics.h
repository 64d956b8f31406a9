// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_CLIENT_SDK_EXAMPLES_GATEWAY_METRICS_H_
#define SLUICE_CLIENT_SDK_EXAMPLES_GATEWAY_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "sluice/client/client.h"

namespace sluice::examples {

// The gateway's Prometheus counters. Every series exists from the start
// (one block per route, fixed arrays for reasons and status codes), so the
// request path only does relaxed atomic increments. Safe for concurrent use.
class GatewayMetrics {
 public:
  enum class Kind { kBackend, kDegraded, kRejected, kError, kNoRoute };
  static constexpr int kKinds = 5;
  static constexpr int kReasons = static_cast<int>(client::Reason::kCallFailed) + 1;
  // Upper bounds of the decision-time histogram's buckets, in seconds
  // (10 us to 25 ms; +Inf comes after).
  static constexpr double kDecisionBounds[] = {
      0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005,
      0.001,   0.0025,   0.005,   0.01,   0.025};
  static constexpr int kDecisionBuckets =
      sizeof(kDecisionBounds) / sizeof(kDecisionBounds[0]) + 1;

  struct RouteCounters {
    std::string dependency;
    std::atomic<uint64_t> backend_success{0};
    std::atomic<uint64_t> backend_failure{0};
    // Calls not made because the breaker refused (CIRCUIT_OPEN, PROBE_LIMIT).
    std::atomic<uint64_t> backend_short_circuit{0};
    // Of the backend calls, those made on the SDK's own fail-open decision
    // (Sluice slow or down), which no breaker could stop.
    std::atomic<uint64_t> fail_open_success{0};
    std::atomic<uint64_t> fail_open_failure{0};
    std::array<std::atomic<uint64_t>, kReasons> degraded{};
    // Last breaker state Sluice reported (client::BreakerState as int).
    std::atomic<int> breaker_state{0};
    // How long each decision took (CallResult::decision_latency): a count
    // per bucket (not cumulative; Render sums them) and the sum.
    std::array<std::atomic<uint64_t>, kDecisionBuckets> decision_buckets{};
    std::atomic<uint64_t> decision_nanos{0};

    void ObserveDecision(absl::Duration took);
  };

  explicit GatewayMetrics(const std::vector<std::string>& dependencies);

  RouteCounters& route(size_t index) { return *routes_[index]; }
  void CountRequest() { requests_.fetch_add(1, std::memory_order_relaxed); }
  void CountResponse(int status, Kind kind);

  // Prometheus text exposition (version 0.0.4).
  std::string Render(const client::ClientStats& sdk) const;

 private:
  std::vector<std::unique_ptr<RouteCounters>> routes_;
  std::atomic<uint64_t> requests_{0};
  // [kind][status - 100] for statuses 100..599.
  std::array<std::array<std::atomic<uint64_t>, 500>, kKinds> responses_{};
};

}  // namespace sluice::examples

#endif  // SLUICE_CLIENT_SDK_EXAMPLES_GATEWAY_METRICS_H_
