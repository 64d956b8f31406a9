// SPDX-License-Identifier: Apache-2.0
#include "tools/sluicectl/state_view.h"

#include <cstdint>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/sluicectl/output_format.h"
#include "wire/time.h"

namespace sluice::ctl {
namespace {

// Latencies read best in milliseconds with one decimal: "20.0ms".
std::string Millis(const google::protobuf::Duration& d) {
  return absl::StrFormat(
      "%.1fms", absl::ToDoubleMilliseconds(wire::DurationFromProto(d, "")
                                               .value_or(absl::ZeroDuration())));
}

std::string Percent(double fraction) {
  return absl::StrFormat("%.1f%%", 100 * fraction);
}

// A value that is a whole number (a limit) without decimals, a
// probability with three.
std::string Value(double v) {
  if (v == static_cast<double>(static_cast<int64_t>(v))) {
    return absl::StrCat(static_cast<int64_t>(v));
  }
  return absl::StrFormat("%.3f", v);
}

std::string AdaptiveLimitRow(const v1::DependencyState& st) {
  if (!st.has_adaptive_limit()) return "- (no adaptive_concurrency)";
  const v1::AdaptiveLimitState& a = st.adaptive_limit();
  return absl::StrCat(
      a.limit(), " (", a.in_flight(), " in flight, steady ", a.steady_limit(),
      "), baseline ",
      a.has_baseline() ? Millis(a.baseline()) : "- (none yet)", ", last window ",
      a.has_last_latency() ? Millis(a.last_latency()) : "-", ", ", a.refused(),
      " refused");
}

std::string ThrottleRow(const v1::DependencyState& st) {
  if (!st.has_throttle()) return "- (no adaptive_throttle)";
  const v1::AdaptiveThrottleState& t = st.throttle();
  return absl::StrFormat(
      "refusing %s (%d accepted of %d requests in the window), %d refused",
      Percent(t.probability()), t.accepts(), t.requests(), t.refused());
}

std::string BaselineRow(const v1::DependencyState& st) {
  if (!st.has_latency_baseline()) return "- (no latency_baseline)";
  const v1::LatencyBaselineState& b = st.latency_baseline();
  std::string learned =
      b.windows_learned() == 0
          ? "nothing learned yet"
          : absl::StrCat("mean ", Millis(b.mean()), " +- ", Millis(b.stddev()),
                         ", success ", Percent(b.success_rate()), " over ",
                         b.windows_learned(), " windows");
  return absl::StrCat(learned, b.ready() ? " (ready)" : " (warming up)",
                      "; live ", b.live_calls(), " calls",
                      b.has_live_mean()
                          ? absl::StrCat(": mean ", Millis(b.live_mean()),
                                         ", success ",
                                         Percent(b.live_success_rate()))
                          : "");
}

// Where this replica's grants come from, and a central replica's leaves.
std::string GrantSourceRow(const v1::DependencyState& st) {
  if (st.store_status() == "standalone") return "- (standalone)";
  if (st.grant_source().empty()) return "-";
  if (absl::StartsWith(st.grant_source(), "upstream")) {
    return st.grant_source();
  }
  return absl::StrCat(st.grant_source(), ", serving ", st.leaves(),
                      st.leaves() == 1 ? " leaf" : " leaves");
}

}  // namespace

// What clients hold on lease, and what they decided from it.
std::string ClientLeasesRow(const v1::DependencyState& st) {
  if (!st.has_client_leases()) return "- (per_key: not leased)";
  const v1::ClientLeasesState& l = st.client_leases();
  return absl::StrCat(
      l.leases(), l.leases() == 1 ? " client holds " : " clients hold ",
      absl::StrFormat("%.0f", l.tokens()), " tokens and ", l.slots(),
      " slots; ", l.leased_decisions(), " calls decided from leases");
}

std::vector<std::vector<std::string>> StateRows(const v1::DependencyState& st) {
  const bool standalone = st.store_status() == "standalone";
  const auto& d = st.decisions();
  const auto& w = st.window_outcomes();
  return {
      {"dependency", st.dependency()},
      {"replica", st.replica_id().empty() ? "-" : st.replica_id()},
      {"policy version", absl::StrCat(st.policy_version())},
      {"store", absl::StrCat(st.store_status(),
                             standalone ? ""
                                        : absl::StrCat(", ", st.live_replicas(),
                                                       " live replicas"))},
      {"grants from", GrantSourceRow(st)},
      {"tokens available",
       st.tokens_available() < 0
           ? "- (no rate limit)"
           : absl::StrFormat("%.2f", st.tokens_available())},
      {"window count", absl::StrCat(st.window_count())},
      {"in flight", absl::StrCat(st.in_flight())},
      {"client leases", ClientLeasesRow(st)},
      {"share",
       standalone ? "- (standalone)" : absl::StrFormat("%.3f", st.share())},
      {"in force here",
       absl::StrCat(
           absl::StrFormat("rate %.6g", st.effective_rate()),
           st.effective_max_in_flight() > 0
               ? absl::StrCat(", max in flight ", st.effective_max_in_flight())
               : "",
           standalone       ? ""
           : st.has_grant() ? " (granted by the store)"
                            : " (no grant)")},
      {"adaptive limit", AdaptiveLimitRow(st)},
      {"throttle", ThrottleRow(st)},
      {"breaker", st.breaker_state() == v1::BREAKER_STATE_UNSPECIFIED
                      ? "- (no breaker)"
                      : v1::BreakerState_Name(st.breaker_state())},
      {"override", st.override() == v1::BREAKER_OVERRIDE_UNSPECIFIED
                       ? "-"
                       : v1::BreakerOverride_Name(st.override())},
      {"open until", FormatTime(st.open_until())},
      {"trip cause", st.trip_cause().empty() ? "-" : st.trip_cause()},
      {"generation", absl::StrCat(st.breaker_generation())},
      {"open duration", wire::FormatDurationProto(st.current_open_duration())},
      {"latency baseline", BaselineRow(st)},
      {"window outcomes",
       absl::StrCat(w.calls(), " calls: ", w.successes(), " ok, ", w.failures(),
                    " failed, ", w.timeouts(), " timed out, ", w.slow(),
                    " slow")},
      {"decisions",
       absl::StrCat(d.acquired(), " acquired: ", d.allowed(), " allowed, ",
                    d.rejected(), " rejected, ", d.degraded(), " degraded")},
      {"keys", absl::StrCat(st.keys())},
  };
}

std::string DescribeEvent(const v1::Event& e) {
  const std::string key =
      e.key().empty() ? "" : absl::StrCat("key \"", e.key(), "\": ");
  switch (e.kind()) {
    case v1::Event::BREAKER_TRANSITION:
      return absl::StrCat(v1::BreakerState_Name(e.from()), " -> ",
                          v1::BreakerState_Name(e.to()), " (", e.cause(),
                          "; generation ", e.breaker_generation(), ")");
    case v1::Event::POLICY_CHANGED:
      return absl::StrCat("version ", e.old_version(), " -> ", e.new_version(),
                          " (", e.cause(), ")");
    case v1::Event::OVERRIDE_SET:
      return absl::StrCat(v1::BreakerOverride_Name(e.override()), " (",
                          e.cause(), ")");
    case v1::Event::EVENTS_DROPPED:
      return absl::StrCat(e.missed(), " events missed");
    case v1::Event::ADAPTIVE_LIMIT_CHANGED:
      return absl::StrCat(key, "limit ", Value(e.old_value()), " -> ",
                          Value(e.new_value()), " (", e.cause(), ")");
    case v1::Event::THROTTLE_STARTED:
      return absl::StrCat(key, "refusing ", Percent(e.new_value()),
                          " of calls (", e.cause(), ")");
    case v1::Event::THROTTLE_STOPPED:
      return absl::StrCat(key, "no longer refusing (", e.cause(), ")");
    default:
      return e.cause();
  }
}

}  // namespace sluice::ctl
