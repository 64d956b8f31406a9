// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_METRICS_METRIC_LIST_H_
#define SLUICE_SERVER_METRICS_METRIC_LIST_H_

#include <array>
#include <cstddef>

#include "absl/strings/string_view.h"
#include "base/stats.h"

// The metrics Metrics writes itself, from the engine's per-dependency
// counters and gates: their name, type, label names and help. Every other
// metric is declared by the component that counts it, beside its
// WriteStats (base::MetricDef); a component's name that is also in this list
// is refused at the scrape. No metric has a `key` label: label values come
// from policy names and enums only, so the series count is bounded by the
// number of policies.

namespace sluice::metrics {

using MetricType = base::MetricType;

enum class MetricId : int {
  kDecisions,
  kUnknownDependencyDecisions,
  kOutcomes,
  kStaleReports,
  kPermitReportsRefused,
  kDegraded,
  kBreakerState,
  kBreakerTransitions,
  kInFlight,
  kClientLeases,
  kLeasedTokens,
  kLeasedSlots,
  kLeasedDecisions,
  kShare,
  kAdaptiveLimit,
  kAdaptiveInFlight,
  kAdaptiveBaseline,
  kThrottleProbability,
  kLatencyBaseline,
  kAdaptiveChanges,
  kPolicyVersion,
  kPolicies,
  kAcquireDuration,
  kCount,  // not a metric
};

struct EngineMetric {
  MetricId id;
  const char* name;
  MetricType type;
  // Label names, nullptr-terminated.
  std::array<const char*, 4> labels;
  const char* help;

  constexpr base::MetricDef def() const { return {name, type, labels, help}; }
};

inline constexpr std::array<EngineMetric, static_cast<size_t>(MetricId::kCount)>
    kMetrics = {{
        {MetricId::kDecisions,
         "sluice_decisions_total",
         MetricType::kCounter,
         {"dependency", "verdict", "reason", nullptr},
         "Acquire answers by dependency, verdict (ALLOW, REJECT, DEGRADE) and "
         "reason (NONE for a plain ALLOW)."},
        {MetricId::kUnknownDependencyDecisions,
         "sluice_unknown_dependency_decisions_total",
         MetricType::kCounter,
         {"verdict", nullptr},
         "Acquire answers for dependencies without a policy "
         "(--unknown-dependency); the dependency is not a label."},
        {MetricId::kOutcomes,
         "sluice_outcomes_total",
         MetricType::kCounter,
         {"dependency", "outcome", nullptr},
         "Reported call outcomes by dependency and outcome (SUCCESS, FAILURE, "
         "TIMEOUT, CANCELLED); expired permits count as TIMEOUT, except those "
         "of "
         "Envoy rate-limit calls, which count as CANCELLED."},
        {MetricId::kStaleReports,
         "sluice_stale_reports_total",
         MetricType::kCounter,
         {"dependency", nullptr},
         "ReportResult calls for unknown, repeated or expired permits."},
        {MetricId::kPermitReportsRefused,
         "sluice_permit_reports_refused_total",
         MetricType::kCounter,
         {"reason", nullptr},
         "Reports whose permit id settled nothing because it was refused: "
         "reason forged (its MAC does not match: guessed, altered, reported "
         "under another dependency or key, or issued by another process or "
         "before a restart) or malformed (not a permit id; answered "
         "INVALID_ARGUMENT). The dependency is not a label."},
        {MetricId::kDegraded,
         "sluice_degraded_total",
         MetricType::kCounter,
         {"dependency", "reason", nullptr},
         "DEGRADE answers (a fallback was served) by dependency and reason."},
        {MetricId::kBreakerState,
         "sluice_breaker_state",
         MetricType::kGauge,
         {"dependency", "state", nullptr},
         "1 for the breaker's current state (CLOSED, OPEN, HALF_OPEN, "
         "FORCED_OPEN, FORCED_CLOSED), 0 for the others. Only dependencies "
         "with a breaker and without per_key."},
        {MetricId::kBreakerTransitions,
         "sluice_breaker_transitions_total",
         MetricType::kCounter,
         {"dependency", "from", "to", nullptr},
         "Breaker state changes seen by this replica, including those adopted "
         "from the cluster."},
        {MetricId::kInFlight,
         "sluice_in_flight",
         MetricType::kGauge,
         {"dependency", nullptr},
         "Calls admitted and not yet reported (dependencies without per_key)."},
        {MetricId::kClientLeases,
         "sluice_client_leases",
         MetricType::kGauge,
         {"dependency", nullptr},
         "Leases clients hold on the dependency (on each hot key of a "
         "per_key one): they decide its calls in their own process."},
        {MetricId::kLeasedTokens,
         "sluice_leased_tokens",
         MetricType::kGauge,
         {"dependency", nullptr},
         "Tokens out on lease with clients and not spent yet; they count "
         "against the bucket's burst until handed back."},
        {MetricId::kLeasedSlots,
         "sluice_leased_slots",
         MetricType::kGauge,
         {"dependency", nullptr},
         "In-flight slots out on lease with clients; they count against "
         "max_in_flight."},
        {MetricId::kLeasedDecisions,
         "sluice_leased_decisions_total",
         MetricType::kCounter,
         {"dependency", nullptr},
         "Calls clients admitted from their leases, counted when the client "
         "settles them (also in sluice_decisions_total as ALLOW)."},
        {MetricId::kShare,
         "sluice_share",
         MetricType::kGauge,
         {"dependency", nullptr},
         "This replica's fraction of a cluster-scope rate limit (1 for a "
         "local limit or standalone)."},
        {MetricId::kAdaptiveLimit,
         "sluice_adaptive_limit",
         MetricType::kGauge,
         {"dependency", nullptr},
         "The in-flight limit adaptive_concurrency holds now (dependencies "
         "with adaptive_concurrency and without per_key)."},
        {MetricId::kAdaptiveInFlight,
         "sluice_adaptive_in_flight",
         MetricType::kGauge,
         {"dependency", nullptr},
         "Calls holding a slot of the adaptive limit (dependencies with "
         "adaptive_concurrency and without per_key)."},
        {MetricId::kAdaptiveBaseline,
         "sluice_adaptive_baseline_seconds",
         MetricType::kGauge,
         {"dependency", nullptr},
         "The adaptive limit's baseline: the lowest window mean latency of "
         "its baseline_window. Absent until a window was judged."},
        {MetricId::kThrottleProbability,
         "sluice_throttle_probability",
         MetricType::kGauge,
         {"dependency", nullptr},
         "The probability adaptive_throttle refuses the next call, from 0 to "
         "1 (dependencies with adaptive_throttle and without per_key)."},
        {MetricId::kLatencyBaseline,
         "sluice_latency_baseline_seconds",
         MetricType::kGauge,
         {"dependency", "stat", nullptr},
         "The breaker's learned latency baseline: stat mean or stddev of the "
         "windows' mean latency of successful calls. Absent until a window "
         "was learned."},
        {MetricId::kAdaptiveChanges,
         "sluice_adaptive_changes_total",
         MetricType::kCounter,
         {"dependency", "kind", nullptr},
         "Moves of the adaptive gates seen by this replica: kind limit_up or "
         "limit_down (adaptive_concurrency), throttle_started or "
         "throttle_stopped (adaptive_throttle). Dependencies without "
         "per_key."},
        {MetricId::kPolicyVersion,
         "sluice_policy_version",
         MetricType::kGauge,
         {"dependency", nullptr},
         "Version of the policy in force."},
        {MetricId::kPolicies,
         "sluice_policies",
         MetricType::kGauge,
         {nullptr},
         "Policies in force."},
        {MetricId::kAcquireDuration,
         "sluice_acquire_duration_seconds",
         MetricType::kHistogram,
         {nullptr},
         "Time to handle one Acquire, from handler entry to the answer: a "
         "unary RPC or one call of a Decide stream."},
    }};

constexpr const EngineMetric& Def(MetricId id) {
  return kMetrics[static_cast<size_t>(id)];
}

// Why the exporter refuses a component's write of `def` with
// `label_values` label values, or nullptr: a malformed definition
// (base::MetricDefProblem), a histogram, label values that do not match
// its label names, or a name of this list. Metrics refuses such writes;
// components' tests check them with it (testing::StatsRecorder).
const char* RefusalOf(const base::MetricDef& def, size_t label_values);

}  // namespace sluice::metrics

#endif  // SLUICE_SERVER_METRICS_METRIC_LIST_H_
