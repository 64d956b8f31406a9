// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_METRICS_METRIC_LIST_H_
#define SLUICE_SERVER_METRICS_METRIC_LIST_H_

#include <array>
#include <cstddef>

#include "absl/strings/string_view.h"
#include "base/stats.h"

// Every metric sluiced exposes, in one list: its name, type, label names
// and help. The values come from the engine (read by Metrics) and from the
// components that keep the counters, which write them by name
// (base::StatsSource); a write this list does not declare is refused
// (RefusalOf), so nothing is exposed that is not declared here. No metric
// has a `key` label: label values come from policy names and enums only, so
// the series count is bounded by the number of policies.

namespace sluice::metrics {

enum class MetricType { kCounter, kGauge, kHistogram };

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
  kShare,
  kAdaptiveLimit,
  kAdaptiveInFlight,
  kAdaptiveBaseline,
  kThrottleProbability,
  kLatencyBaseline,
  kAdaptiveChanges,
  kPolicyVersion,
  kPolicies,
  kStoreUp,
  kLiveReplicas,
  kSyncTickDuration,
  kSyncTicks,
  kSyncErrors,
  kReportsForwarded,
  kQuietPolicies,
  kStoreClockOffset,
  kStoreResets,
  kStoreErrors,
  kStoreEvents,
  kStoreEndpoint,
  kUpstreamInfo,
  kUpstreamMoves,
  kUpstreamRoundTrip,
  kLeaves,
  kLeafTicks,
  kLeaseUnits,
  kLeafBreakerReports,
  kLeafForwardedReports,
  kAcquireDuration,
  kEventsDropped,
  kWatchers,
  kDecideStreams,
  kRateLimitRequests,
  kRateLimitUnmatched,
  kExtAuthzChecks,
  kAccessLogEntries,
  kHttpRequests,
  kHttpConnections,
  kHttpConnectionsClosed,
  kHttpRequestsRejected,
  kStateFileWrites,
  kStateFileLastWrite,
  kAdminTokenReloads,
  kTlsCertificateExpiry,
  kTlsReloads,
  kPolicyReloads,
  kPolicyReloadLastError,
  kCount,  // not a metric
};

struct MetricDef {
  MetricId id;
  const char* name;
  MetricType type;
  // Label names, nullptr-terminated.
  std::array<const char*, 4> labels;
  const char* help;
};

inline constexpr std::array<MetricDef, static_cast<size_t>(MetricId::kCount)>
    kMetrics = {{
        {MetricId::kDecisions, "sluice_decisions_total", MetricType::kCounter,
         {"dependency", "verdict", "reason", nullptr},
         "Acquire answers by dependency, verdict (ALLOW, REJECT, DEGRADE) and "
         "reason (NONE for a plain ALLOW)."},
        {MetricId::kUnknownDependencyDecisions,
         "sluice_unknown_dependency_decisions_total", MetricType::kCounter,
         {"verdict", nullptr},
         "Acquire answers for dependencies without a policy "
         "(--unknown-dependency); the dependency is not a label."},
        {MetricId::kOutcomes, "sluice_outcomes_total", MetricType::kCounter,
         {"dependency", "outcome", nullptr},
         "Reported call outcomes by dependency and outcome (SUCCESS, FAILURE, "
         "TIMEOUT, CANCELLED); expired permits count as TIMEOUT, except those of "
         "Envoy rate-limit calls, which count as CANCELLED."},
        {MetricId::kStaleReports, "sluice_stale_reports_total",
         MetricType::kCounter, {"dependency", nullptr},
         "ReportResult calls for unknown, repeated or expired permits."},
        {MetricId::kPermitReportsRefused,
         "sluice_permit_reports_refused_total", MetricType::kCounter,
         {"reason", nullptr},
         "Reports whose permit id settled nothing because it was refused: "
         "reason forged (its MAC does not match: guessed, altered, reported "
         "under another dependency or key, or issued by another process or "
         "before a restart) or malformed (not a permit id; answered "
         "INVALID_ARGUMENT). The dependency is not a label."},
        {MetricId::kDegraded, "sluice_degraded_total", MetricType::kCounter,
         {"dependency", "reason", nullptr},
         "DEGRADE answers (a fallback was served) by dependency and reason."},
        {MetricId::kBreakerState, "sluice_breaker_state", MetricType::kGauge,
         {"dependency", "state", nullptr},
         "1 for the breaker's current state (CLOSED, OPEN, HALF_OPEN, "
         "FORCED_OPEN, FORCED_CLOSED), 0 for the others. Only dependencies "
         "with a breaker and without per_key."},
        {MetricId::kBreakerTransitions, "sluice_breaker_transitions_total",
         MetricType::kCounter, {"dependency", "from", "to", nullptr},
         "Breaker state changes seen by this replica, including those adopted "
         "from the cluster."},
        {MetricId::kInFlight, "sluice_in_flight", MetricType::kGauge,
         {"dependency", nullptr},
         "Calls admitted and not yet reported (dependencies without per_key)."},
        {MetricId::kShare, "sluice_share", MetricType::kGauge,
         {"dependency", nullptr},
         "This replica's fraction of a cluster-scope rate limit (1 for a "
         "local limit or standalone)."},
        {MetricId::kAdaptiveLimit, "sluice_adaptive_limit", MetricType::kGauge,
         {"dependency", nullptr},
         "The in-flight limit adaptive_concurrency holds now (dependencies "
         "with adaptive_concurrency and without per_key)."},
        {MetricId::kAdaptiveInFlight, "sluice_adaptive_in_flight",
         MetricType::kGauge, {"dependency", nullptr},
         "Calls holding a slot of the adaptive limit (dependencies with "
         "adaptive_concurrency and without per_key)."},
        {MetricId::kAdaptiveBaseline, "sluice_adaptive_baseline_seconds",
         MetricType::kGauge, {"dependency", nullptr},
         "The adaptive limit's baseline: the lowest window mean latency of "
         "its baseline_window. Absent until a window was judged."},
        {MetricId::kThrottleProbability, "sluice_throttle_probability",
         MetricType::kGauge, {"dependency", nullptr},
         "The probability adaptive_throttle refuses the next call, from 0 to "
         "1 (dependencies with adaptive_throttle and without per_key)."},
        {MetricId::kLatencyBaseline, "sluice_latency_baseline_seconds",
         MetricType::kGauge, {"dependency", "stat", nullptr},
         "The breaker's learned latency baseline: stat mean or stddev of the "
         "windows' mean latency of successful calls. Absent until a window "
         "was learned."},
        {MetricId::kAdaptiveChanges, "sluice_adaptive_changes_total",
         MetricType::kCounter, {"dependency", "kind", nullptr},
         "Moves of the adaptive gates seen by this replica: kind limit_up or "
         "limit_down (adaptive_concurrency), throttle_started or "
         "throttle_stopped (adaptive_throttle). Dependencies without "
         "per_key."},
        {MetricId::kPolicyVersion, "sluice_policy_version", MetricType::kGauge,
         {"dependency", nullptr}, "Version of the policy in force."},
        {MetricId::kPolicies, "sluice_policies", MetricType::kGauge,
         {nullptr}, "Policies in force."},
        {MetricId::kStoreUp, "sluice_store_up", MetricType::kGauge,
         {nullptr},
         "1 while the cluster store answers (Redis; for a leaf, its "
         "upstream central replica), 0 while it does not. Cluster mode "
         "only."},
        {MetricId::kLiveReplicas, "sluice_live_replicas", MetricType::kGauge,
         {nullptr},
         "Live replicas at the last successful sync. Cluster mode only."},
        {MetricId::kSyncTickDuration, "sluice_sync_tick_duration_seconds",
         MetricType::kGauge, {nullptr},
         "Duration of the last sync tick (one store round trip). Cluster mode "
         "only."},
        {MetricId::kSyncTicks, "sluice_sync_ticks_total", MetricType::kCounter,
         {nullptr}, "Sync ticks attempted. Cluster mode only."},
        {MetricId::kSyncErrors, "sluice_sync_errors_total",
         MetricType::kCounter, {nullptr},
         "Sync ticks that failed (store unreachable, slow or erroring). "
         "Cluster mode only."},
        {MetricId::kReportsForwarded, "sluice_forwarded_reports_total",
         MetricType::kCounter, {"direction", nullptr},
         "Reports for permits of another replica: out (passed on to the "
         "issuer), in (received for this replica's permits), dropped (issuer "
         "not live, or the queue full). Cluster mode only."},
        {MetricId::kQuietPolicies, "sluice_sync_quiet_policies",
         MetricType::kGauge, {nullptr},
         "Policies left out of the last sync tick because they have been "
         "idle (no demand, no units in use, no breaker news) for 10 s; "
         "the first call to one wakes it. Leaves of the grant "
         "tree only; 0 elsewhere."},
        {MetricId::kStoreClockOffset, "sluice_store_clock_offset_seconds",
         MetricType::kGauge, {nullptr},
         "The store's clock (Redis TIME) minus this replica's, at the last "
         "sync. Every shared expiry uses the store's clock. Cluster mode "
         "only."},
        {MetricId::kStoreResets, "sluice_store_resets_total",
         MetricType::kCounter, {nullptr},
         "Times the store was found to have lost its data (config or a "
         "policy's shared state), rebuilt from this replica's memory. "
         "Cluster mode only."},
        {MetricId::kStoreErrors, "sluice_store_errors_total",
         MetricType::kCounter, {"kind", nullptr},
         "Failed store connections and round trips by kind: connect, "
         "timeout, auth (password or ACL refused, or a password missing), "
         "readonly (a replica answered), sentinel (no sentinel named the "
         "master), protocol, script. Cluster mode only."},
        {MetricId::kStoreEvents, "sluice_store_events_total",
         MetricType::kCounter, {"kind", nullptr},
         "Store topology changes followed, by kind: master_changed (Redis "
         "Sentinel failover), moved (a leaf's upstream central replica "
         "changed). Cluster mode only."},
        {MetricId::kStoreEndpoint, "sluice_store_endpoint_info",
         MetricType::kGauge, {"endpoint", nullptr},
         "Always 1; the endpoint label says where the store is now (host:port, "
         "the master Sentinel named, or the masters of a Redis Cluster). "
         "Cluster mode only."},
        {MetricId::kUpstreamInfo, "sluice_upstream_info", MetricType::kGauge,
         {"target", "peer", nullptr},
         "Always 1 on a leaf (--upstream): target is the --upstream target, "
         "peer the central replica that answered last (empty before the "
         "first answer). Whether it answers is sluice_store_up. Leaves "
         "only."},
        {MetricId::kUpstreamMoves, "sluice_upstream_moves_total",
         MetricType::kCounter, {nullptr},
         "Times a leaf's answering central replica changed (the one it "
         "followed stopped answering, or the target resolved elsewhere). "
         "Leaves only."},
        {MetricId::kUpstreamRoundTrip, "sluice_upstream_round_trip_seconds",
         MetricType::kGauge, {nullptr},
         "Round trip of a leaf's last answered lease tick (sluice.v1.Lease/"
         "Tick to a central replica), which a central replica answers from "
         "memory. Leaves only."},
        {MetricId::kLeaves, "sluice_leaves", MetricType::kGauge, {nullptr},
         "Leaves (sluiced --upstream) this central replica serves: heard "
         "from within the stale period. Central replicas only."},
        {MetricId::kLeafTicks, "sluice_leaf_ticks_total",
         MetricType::kCounter, {"result", nullptr},
         "Lease ticks of leaves this central replica answered, by result: ok, "
         "stale (an older sequence than one applied, ABORTED), unavailable "
         "(no good Redis tick within the stale period), too_many "
         "(--max-leaves reached) or invalid (over a bound). Central replicas "
         "only."},
        {MetricId::kLeaseUnits, "sluice_lease_units", MetricType::kGauge,
         {"resource", "holder", nullptr},
         "Cluster units under this central replica now, by resource (rate: "
         "token refill or window count, slots: max_in_flight) and holder: "
         "granted (what Redis granted this replica for itself and its leaves "
         "and still in force), leaves (leased to its leaves), self (in force "
         "on this replica). Summed over policies and keys. Central replicas "
         "only."},
        {MetricId::kLeafBreakerReports, "sluice_leaf_breaker_reports_total",
         MetricType::kCounter, {"result", nullptr},
         "Breaker transitions reported by leaves, by result: accepted (passed "
         "on to Redis), refused (older than the record held), "
         "upstream_refused (Redis held a newer one). Central replicas only."},
        {MetricId::kLeafForwardedReports,
         "sluice_leaf_forwarded_reports_total", MetricType::kCounter,
         {"route", nullptr},
         "Reports for permits of another sluiced received from leaves, by "
         "route: delivered (to a leaf or this replica, in memory), upstream "
         "(passed on through Redis), dropped (issuer unknown or its inbox "
         "full). Central replicas only."},
        {MetricId::kAcquireDuration, "sluice_acquire_duration_seconds",
         MetricType::kHistogram, {nullptr},
         "Time to handle one Acquire, from handler entry to the answer: a "
         "unary RPC or one call of a Decide stream."},
        {MetricId::kEventsDropped, "sluice_watch_events_dropped_total",
         MetricType::kCounter, {nullptr},
         "Events dropped because a WatchEvents client read too slowly."},
        {MetricId::kWatchers, "sluice_watchers", MetricType::kGauge,
         {nullptr},
         "WatchEvents streams open now (sluicectl watch and the like)."},
        {MetricId::kDecideStreams, "sluice_decide_streams", MetricType::kGauge,
         {nullptr},
         "DecisionService.Decide streams open now (gateways deciding over "
         "one long-lived stream). Their calls count in the other metrics "
         "like unary ones."},
        {MetricId::kRateLimitRequests, "sluice_rls_requests_total",
         MetricType::kCounter, {"code", nullptr},
         "Envoy rate-limit service (RLS v3) ShouldRateLimit calls by answer: "
         "OK, OVER_LIMIT, or INVALID_ARGUMENT for a malformed request. Each "
         "matched descriptor also counts in sluice_decisions_total like an "
         "Acquire of its policy."},
        {MetricId::kRateLimitUnmatched,
         "sluice_rls_unmatched_descriptors_total", MetricType::kCounter,
         {nullptr},
         "RLS descriptors no policy's envoy_descriptors match; answered OK "
         "and not limited."},
        {MetricId::kExtAuthzChecks, "sluice_ext_authz_checks_total",
         MetricType::kCounter, {"result", nullptr},
         "Envoy external authorization Check calls by answer: allow, refuse, "
         "degrade (the fallback served), unmatched (no policy names the "
         "request; let through) or invalid (a malformed request). Each "
         "decided request also counts in sluice_decisions_total like an "
         "Acquire of its policy."},
        {MetricId::kAccessLogEntries, "sluice_access_log_entries_total",
         MetricType::kCounter, {"result", nullptr},
         "HTTP entries of Envoy's access-log service (StreamAccessLogs) by "
         "what became of them: settled (every permit it named was settled "
         "like a ReportResult), no_permit (it named none), unknown_permit "
         "(a permit id unreadable or not issued here), invalid (a TCP "
         "entry, malformed metadata, or a message refused whole, counted "
         "once)."},
        {MetricId::kHttpRequests, "sluice_http_requests_total",
         MetricType::kCounter, {"endpoint", "code", nullptr},
         "Requests the HTTP/JSON API answered, by endpoint (/v1/acquire, ..., "
         "or other for an unknown path) and HTTP status (other for a status "
         "outside the counted set). Only with --http-listen."},
        {MetricId::kHttpConnections, "sluice_http_connections",
         MetricType::kGauge, {"state", nullptr},
         "HTTP API connections now: active (in a TLS handshake or a request), "
         "idle (keep-alive, between requests) and waiting (always 0: no "
         "connection waits for a thread). Only with --http-listen."},
        {MetricId::kHttpConnectionsClosed,
         "sluice_http_connections_closed_total", MetricType::kCounter,
         {"reason", nullptr},
         "HTTP API connections the server closed early, by reason: shed (to "
         "make room for a new one at --http-max-connections), refused (a new "
         "one when none could be shed), or a deadline: timeout_handshake, "
         "timeout_head, timeout_body, timeout_write, timeout_idle. Only with "
         "--http-listen."},
        {MetricId::kHttpRequestsRejected,
         "sluice_http_requests_rejected_total", MetricType::kCounter,
         {"reason", nullptr},
         "HTTP API requests refused before they were read, then their "
         "connection closed: framing (malformed or ambiguous, 400) or limits "
         "(request line 414, head 431, body 413). Only with --http-listen."},
        {MetricId::kStateFileWrites, "sluice_state_file_writes_total",
         MetricType::kCounter, {"result", nullptr},
         "Writes of the warm state file (--state-file) by result: ok or "
         "error (the log says why, at most once a minute). Only with "
         "--state-file."},
        {MetricId::kStateFileLastWrite,
         "sluice_state_file_last_write_timestamp_seconds", MetricType::kGauge,
         {nullptr},
         "Unix time of the last good write of the state file; 0 before the "
         "first. Only with --state-file."},
        {MetricId::kAdminTokenReloads, "sluice_admin_token_reloads_total",
         MetricType::kCounter, {"result", nullptr},
         "Changes of the admin token file (--admin-token-file) by result: ok "
         "(the new token set is in force) or error (unreadable, empty or "
         "invalid; the last good set stays in force and the log says why). "
         "Only with --admin-token-file."},
        {MetricId::kTlsCertificateExpiry,
         "sluice_tls_certificate_expiry_timestamp_seconds", MetricType::kGauge,
         {nullptr},
         "Unix time at which the served TLS certificate (--tls-cert) expires "
         "(its notAfter). Only with --tls-cert."},
        {MetricId::kTlsReloads, "sluice_tls_reloads_total",
         MetricType::kCounter, {"result", nullptr},
         "Changes of the TLS certificate files seen, by result: ok (the "
         "new certificate is served) or error (it did not load; the "
         "previous one stays, the log says why). Only with --tls-cert."},
        {MetricId::kPolicyReloads, "sluice_policy_reloads_total",
         MetricType::kCounter, {"result", nullptr},
         "Changes of the policies file (--policies) by result: ok (its "
         "policies are in force; in cluster mode, they seed the store) or "
         "error (unreadable or invalid; the previous policies stay and the "
         "log says why). Only with --policies."},
        {MetricId::kPolicyReloadLastError, "sluice_policy_reload_last_error",
         MetricType::kGauge, {nullptr},
         "1 while the latest change of the policies file was rejected (the "
         "file on disk is not what is in force), 0 otherwise. Only with "
         "--policies."},
    }};

constexpr const MetricDef& Def(MetricId id) {
  return kMetrics[static_cast<size_t>(id)];
}

// Why this list refuses a write of `name` as a `type` with `labels` (not
// declared, another type, other label names), or nullptr when it declares
// exactly that. Metrics refuses such writes; tests check components with it.
const char* RefusalOf(MetricType type, absl::string_view name,
                      base::StatsWriter::Labels labels);

}  // namespace sluice::metrics

#endif  // SLUICE_SERVER_METRICS_METRIC_LIST_H_
