// SPDX-License-Identifier: Apache-2.0
#include "gateway_metrics.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace sluice::examples {
namespace {

constexpr const char* kKindNames[] = {"backend", "degraded", "rejected",
                                      "error", "no_route"};

void Header(std::string* out, const char* name, const char* type,
            const char* help) {
  absl::StrAppend(out, "# HELP ", name, " ", help, "\n# TYPE ", name, " ",
                  type, "\n");
}

}  // namespace

GatewayMetrics::GatewayMetrics(const std::vector<std::string>& dependencies) {
  for (const std::string& dependency : dependencies) {
    auto counters = std::make_unique<RouteCounters>();
    counters->dependency = dependency;
    routes_.push_back(std::move(counters));
  }
}

void GatewayMetrics::RouteCounters::ObserveDecision(absl::Duration took) {
  const double seconds = absl::ToDoubleSeconds(took);
  int bucket = 0;
  while (bucket < kDecisionBuckets - 1 && seconds > kDecisionBounds[bucket]) {
    ++bucket;
  }
  decision_buckets[bucket].fetch_add(1, std::memory_order_relaxed);
  decision_nanos.fetch_add(static_cast<uint64_t>(std::max<int64_t>(
                               0, absl::ToInt64Nanoseconds(took))),
                           std::memory_order_relaxed);
}

void GatewayMetrics::CountResponse(int status, Kind kind) {
  if (status < 100 || status > 599) status = 599;
  responses_[static_cast<int>(kind)][status - 100].fetch_add(
      1, std::memory_order_relaxed);
}

std::string GatewayMetrics::Render(const client::ClientStats& sdk) const {
  std::string out;
  Header(&out, "sluice_gateway_requests_total", "counter",
         "Client requests received.");
  absl::StrAppend(&out, "sluice_gateway_requests_total ", requests_.load(),
                  "\n");

  Header(&out, "sluice_gateway_responses_total", "counter",
         "Client responses by HTTP status and kind.");
  for (int k = 0; k < kKinds; ++k) {
    for (int s = 0; s < 500; ++s) {
      const uint64_t n = responses_[k][s].load();
      if (n == 0) continue;
      absl::StrAppend(&out, "sluice_gateway_responses_total{code=\"", s + 100,
                      "\",kind=\"", kKindNames[k], "\"} ", n, "\n");
    }
  }

  Header(&out, "sluice_gateway_backend_calls_total", "counter",
         "Backend calls by result; short_circuit = not made because the "
         "breaker refused.");
  for (const auto& r : routes_) {
    const std::string dep = r->dependency;
    absl::StrAppend(&out, "sluice_gateway_backend_calls_total{dependency=\"",
                    dep, "\",result=\"success\"} ", r->backend_success.load(),
                    "\n");
    absl::StrAppend(&out, "sluice_gateway_backend_calls_total{dependency=\"",
                    dep, "\",result=\"failure\"} ", r->backend_failure.load(),
                    "\n");
    absl::StrAppend(&out, "sluice_gateway_backend_calls_total{dependency=\"",
                    dep, "\",result=\"short_circuit\"} ",
                    r->backend_short_circuit.load(), "\n");
  }

  Header(&out, "sluice_gateway_fail_open_calls_total", "counter",
         "Backend calls made because Sluice did not answer in time and the "
         "SDK failed open (a subset of backend_calls_total).");
  for (const auto& r : routes_) {
    absl::StrAppend(&out, "sluice_gateway_fail_open_calls_total{dependency=\"",
                    r->dependency, "\",result=\"success\"} ",
                    r->fail_open_success.load(), "\n");
    absl::StrAppend(&out, "sluice_gateway_fail_open_calls_total{dependency=\"",
                    r->dependency, "\",result=\"failure\"} ",
                    r->fail_open_failure.load(), "\n");
  }

  Header(&out, "sluice_gateway_degraded_responses_total", "counter",
         "Degraded (fallback) responses by reason.");
  for (const auto& r : routes_) {
    for (int i = 0; i < kReasons; ++i) {
      const uint64_t n = r->degraded[i].load();
      if (n == 0) continue;
      absl::StrAppend(
          &out, "sluice_gateway_degraded_responses_total{dependency=\"",
          r->dependency, "\",reason=\"",
          client::ReasonName(static_cast<client::Reason>(i)), "\"} ", n, "\n");
    }
  }

  Header(&out, "sluice_gateway_decision_seconds", "histogram",
         "How long each request waited for its Sluice decision (an RPC, a "
         "lease in the process, or the SDK alone).");
  for (const auto& r : routes_) {
    uint64_t cumulative = 0;
    for (int b = 0; b < kDecisionBuckets; ++b) {
      cumulative += r->decision_buckets[b].load();
      absl::StrAppend(
          &out, "sluice_gateway_decision_seconds_bucket{dependency=\"",
          r->dependency, "\",le=\"",
          b < kDecisionBuckets - 1 ? absl::StrCat(kDecisionBounds[b])
                                   : std::string("+Inf"),
          "\"} ", cumulative, "\n");
    }
    absl::StrAppend(&out, "sluice_gateway_decision_seconds_sum{dependency=\"",
                    r->dependency, "\"} ",
                    static_cast<double>(r->decision_nanos.load()) * 1e-9, "\n");
    absl::StrAppend(&out, "sluice_gateway_decision_seconds_count{dependency=\"",
                    r->dependency, "\"} ", cumulative, "\n");
  }

  Header(&out, "sluice_gateway_breaker_state", "gauge",
         "Breaker state Sluice last reported: 0 unknown, 1 closed, 2 open, "
         "3 half-open, 4 forced open, 5 forced closed.");
  for (const auto& r : routes_) {
    absl::StrAppend(&out, "sluice_gateway_breaker_state{dependency=\"",
                    r->dependency, "\"} ", r->breaker_state.load(), "\n");
  }

  Header(&out, "sluice_gateway_sdk_events_total", "counter",
         "Sluice client SDK counters.");
  const std::pair<const char*, uint64_t> sdk_counters[] = {
      {"acquires", sdk.acquires},
      {"local_decisions", sdk.local_decisions},
      {"backoff_decisions", sdk.backoff_decisions},
      {"reports_sent", sdk.reports_sent},
      {"reports_failed", sdk.reports_failed},
      {"reports_dropped", sdk.reports_dropped},
      {"reports_auto_cancelled", sdk.reports_auto_cancelled},
      {"cache_hits", sdk.cache_hits},
      {"cache_misses", sdk.cache_misses},
      {"leased_decisions", sdk.leased_decisions},
      {"lease_refusals", sdk.lease_refusals},
      {"lease_open_refusals", sdk.lease_open_refusals},
      {"lease_decisions_while_unreachable",
       sdk.lease_decisions_while_unreachable},
      {"lease_renewals", sdk.lease_renewals},
      {"lease_renewal_failures", sdk.lease_renewal_failures},
      {"lease_expiries", sdk.lease_expiries},
      {"leases_ended", sdk.leases_ended},
  };
  for (const auto& [name, value] : sdk_counters) {
    absl::StrAppend(&out, "sluice_gateway_sdk_events_total{event=\"", name,
                    "\"} ", value, "\n");
  }
  return out;
}

}  // namespace sluice::examples
