// SPDX-License-Identifier: Apache-2.0
#include "server/metrics/metrics.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "prometheus/exposer.h"
#include "prometheus/text_serializer.h"
#include "server/core/breaker_state.h"
#include "server/core/outcome.h"
#include "server/core/verdict.h"
#include "server/metrics/metric_list.h"

namespace sluice::metrics {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;

constexpr core::BreakerState kBreakerStates[] = {
    core::BreakerState::kClosed, core::BreakerState::kOpen,
    core::BreakerState::kHalfOpen, core::BreakerState::kForcedOpen,
    core::BreakerState::kForcedClosed};

constexpr core::Verdict kVerdicts[] = {
    core::Verdict::kAllow, core::Verdict::kReject, core::Verdict::kDegrade};

constexpr core::Outcome kOutcomes[] = {
    core::Outcome::kSuccess, core::Outcome::kFailure, core::Outcome::kTimeout,
    core::Outcome::kCancelled};

MetricFamily Family(MetricId id) {
  const MetricDef& def = Def(id);
  MetricFamily family;
  family.name = def.name;
  family.help = def.help;
  switch (def.type) {
    case MetricType::kCounter:
      family.type = prometheus::MetricType::Counter;
      break;
    case MetricType::kGauge:
      family.type = prometheus::MetricType::Gauge;
      break;
    case MetricType::kHistogram:
      family.type = prometheus::MetricType::Histogram;
      break;
  }
  return family;
}

// Adds one series to `family`; `values` pair with the definition's labels.
void Add(MetricFamily* family, MetricId id,
         std::initializer_list<std::string> values, double value) {
  const MetricDef& def = Def(id);
  ClientMetric metric;
  size_t i = 0;
  for (const std::string& v : values) {
    metric.label.push_back({def.labels[i++], v});
  }
  if (def.type == MetricType::kCounter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family->metric.push_back(std::move(metric));
}

std::string Name(absl::string_view name) { return std::string(name); }

// The kind label of sluice_adaptive_changes_total.
const char* ChangeKind(const core::AdaptiveChange& c) {
  switch (c.kind) {
    case core::AdaptiveChange::Kind::kLimit:
      return c.to > c.from ? "limit_up" : "limit_down";
    case core::AdaptiveChange::Kind::kThrottleStarted:
      return "throttle_started";
    case core::AdaptiveChange::Kind::kThrottleStopped:
      return "throttle_stopped";
  }
  return "unknown";
}

}  // namespace

class Metrics::Adapter final : public prometheus::Collectable {
 public:
  explicit Adapter(const Metrics* metrics) : metrics_(metrics) {}
  std::vector<MetricFamily> Collect() const override {
    return metrics_->Collect();
  }

 private:
  const Metrics* const metrics_;
};

Metrics::Metrics(Sources sources)
    : sources_(std::move(sources)),
      adapter_(std::make_shared<Adapter>(this)) {}

std::shared_ptr<prometheus::Collectable> Metrics::collectable() {
  return adapter_;
}

void Metrics::OnBreakerTransition(const core::BreakerTransition& t) {
  absl::MutexLock lock(&mu_);
  ++transitions_[TransitionKey(t.dependency, t.from, t.to)];
}

void Metrics::OnAdaptiveChange(const core::AdaptiveChange& c) {
  // Keys of a per_key policy are too many to count apart, and the metric
  // has no key label.
  if (!c.key.empty()) return;
  absl::MutexLock lock(&mu_);
  ++adaptive_changes_[ChangeKey(c.dependency, ChangeKind(c))];
}

std::vector<MetricFamily> Metrics::Collect() const {
  std::vector<MetricFamily> families(kMetrics.size());
  for (const MetricDef& def : kMetrics) {
    families[static_cast<size_t>(def.id)] = Family(def.id);
  }
  auto family = [&](MetricId id) -> MetricFamily* {
    return &families[static_cast<size_t>(id)];
  };

  // Per dependency, from the engine's own counters and gates.
  // The adaptive change counters each dependency shows (every kind of its
  // blocks, from 0, so that rate() works from the first move).
  std::vector<ChangeKey> change_series;
  const auto policies = sources_.engine->Policies();
  Add(family(MetricId::kPolicies), MetricId::kPolicies, {},
      static_cast<double>(policies.size()));
  for (const auto& policy : policies) {
    absl::StatusOr<core::DependencyStatus> status =
        sources_.engine->Inspect(policy->name);
    if (!status.ok()) continue;  // deleted since Policies()
    const std::string& dep = policy->name;
    const core::DecisionCounters& c = status->counters;
    for (core::Verdict verdict : kVerdicts) {
      for (int r = 0; r < core::kReasonCount; ++r) {
        const uint64_t n = c.by_verdict_reason[static_cast<int>(verdict)][r];
        const auto reason = static_cast<core::Reason>(r);
        // A plain ALLOW and every refusal are always shown, so that rate()
        // works from the first refusal on; other combinations once seen.
        const bool always =
            (verdict == core::Verdict::kAllow && reason == core::Reason::kNone);
        if (n == 0 && !always) continue;
        Add(family(MetricId::kDecisions), MetricId::kDecisions,
            {dep, Name(core::VerdictName(verdict)),
             Name(core::ReasonName(reason))},
            static_cast<double>(n));
        if (verdict == core::Verdict::kDegrade) {
          Add(family(MetricId::kDegraded), MetricId::kDegraded,
              {dep, Name(core::ReasonName(reason))}, static_cast<double>(n));
        }
      }
    }
    for (core::Outcome outcome : kOutcomes) {
      Add(family(MetricId::kOutcomes), MetricId::kOutcomes,
          {dep, Name(core::OutcomeName(outcome))},
          static_cast<double>(c.outcomes[static_cast<int>(outcome)]));
    }
    Add(family(MetricId::kStaleReports), MetricId::kStaleReports, {dep},
        static_cast<double>(c.stale_reports));
    Add(family(MetricId::kPolicyVersion), MetricId::kPolicyVersion, {dep},
        static_cast<double>(status->policy->version));
    if (!status->gates) continue;  // per_key: no dependency-wide gates
    const core::GateStatus& g = *status->gates;
    Add(family(MetricId::kInFlight), MetricId::kInFlight, {dep},
        static_cast<double>(g.live_permits));
    Add(family(MetricId::kShare), MetricId::kShare, {dep}, g.rate_fraction);
    if (g.has_breaker) {
      for (core::BreakerState state : kBreakerStates) {
        Add(family(MetricId::kBreakerState), MetricId::kBreakerState,
            {dep, Name(core::BreakerStateName(state))},
            g.breaker_state == state ? 1 : 0);
      }
    }
    if (g.adaptive_limit) {
      const core::AdaptiveLimitStatus& a = *g.adaptive_limit;
      Add(family(MetricId::kAdaptiveLimit), MetricId::kAdaptiveLimit, {dep},
          a.limit);
      Add(family(MetricId::kAdaptiveInFlight), MetricId::kAdaptiveInFlight,
          {dep}, a.in_flight);
      if (a.baseline > absl::ZeroDuration()) {
        Add(family(MetricId::kAdaptiveBaseline), MetricId::kAdaptiveBaseline,
            {dep}, absl::ToDoubleSeconds(a.baseline));
      }
      change_series.emplace_back(dep, "limit_up");
      change_series.emplace_back(dep, "limit_down");
    }
    if (g.throttle) {
      Add(family(MetricId::kThrottleProbability),
          MetricId::kThrottleProbability, {dep}, g.throttle->probability);
      change_series.emplace_back(dep, "throttle_started");
      change_series.emplace_back(dep, "throttle_stopped");
    }
    if (g.baseline && g.baseline->learned.windows > 0) {
      Add(family(MetricId::kLatencyBaseline), MetricId::kLatencyBaseline,
          {dep, "mean"}, absl::ToDoubleSeconds(g.baseline->mean));
      Add(family(MetricId::kLatencyBaseline), MetricId::kLatencyBaseline,
          {dep, "stddev"}, absl::ToDoubleSeconds(g.baseline->stddev));
    }
  }
  const core::Engine::RefusedPermits refused =
      sources_.engine->PermitReportsRefused();
  Add(family(MetricId::kPermitReportsRefused),
      MetricId::kPermitReportsRefused, {"forged"},
      static_cast<double>(refused.forged));
  Add(family(MetricId::kPermitReportsRefused),
      MetricId::kPermitReportsRefused, {"malformed"},
      static_cast<double>(refused.malformed));
  if (sources_.unknown_decisions) {
    const auto [allowed, rejected] = sources_.unknown_decisions();
    Add(family(MetricId::kUnknownDependencyDecisions),
        MetricId::kUnknownDependencyDecisions, {"ALLOW"},
        static_cast<double>(allowed));
    Add(family(MetricId::kUnknownDependencyDecisions),
        MetricId::kUnknownDependencyDecisions, {"REJECT"},
        static_cast<double>(rejected));
  }

  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, n] : transitions_) {
      Add(family(MetricId::kBreakerTransitions), MetricId::kBreakerTransitions,
          {std::get<0>(key), Name(core::BreakerStateName(std::get<1>(key))),
           Name(core::BreakerStateName(std::get<2>(key)))},
          static_cast<double>(n));
    }
    for (const ChangeKey& series : change_series) {
      auto it = adaptive_changes_.find(series);
      Add(family(MetricId::kAdaptiveChanges), MetricId::kAdaptiveChanges,
          {series.first, series.second},
          it == adaptive_changes_.end() ? 0 : static_cast<double>(it->second));
    }
  }

  std::optional<SyncSnapshot> sync;
  if (sources_.sync) sync = sources_.sync();
  if (sync) {
    Add(family(MetricId::kStoreUp), MetricId::kStoreUp, {},
        sync->store_up ? 1 : 0);
    Add(family(MetricId::kLiveReplicas), MetricId::kLiveReplicas, {},
        sync->live_replicas);
    Add(family(MetricId::kSyncTickDuration), MetricId::kSyncTickDuration, {},
        absl::ToDoubleSeconds(sync->last_tick_duration));
    Add(family(MetricId::kSyncTicks), MetricId::kSyncTicks, {},
        static_cast<double>(sync->ticks));
    Add(family(MetricId::kSyncErrors), MetricId::kSyncErrors, {},
        static_cast<double>(sync->failures));
    for (const auto& [direction, n] :
         {std::pair<const char*, uint64_t>{"out", sync->reports_forwarded},
          {"in", sync->reports_received},
          {"dropped", sync->reports_not_forwarded}}) {
      Add(family(MetricId::kReportsForwarded), MetricId::kReportsForwarded,
          {direction}, static_cast<double>(n));
    }
    Add(family(MetricId::kStoreClockOffset), MetricId::kStoreClockOffset, {},
        absl::ToDoubleSeconds(sync->clock_offset));
    Add(family(MetricId::kStoreResets), MetricId::kStoreResets, {},
        static_cast<double>(sync->store_resets));
    Add(family(MetricId::kQuietPolicies), MetricId::kQuietPolicies, {},
        sync->quiet_policies);
    for (const auto& [kind, n] : sync->store_errors) {
      Add(family(MetricId::kStoreErrors), MetricId::kStoreErrors, {kind},
          static_cast<double>(n));
    }
    for (const auto& [kind, n] : sync->store_events) {
      Add(family(MetricId::kStoreEvents), MetricId::kStoreEvents, {kind},
          static_cast<double>(n));
    }
    if (!sync->store_endpoint.empty()) {
      Add(family(MetricId::kStoreEndpoint), MetricId::kStoreEndpoint,
          {sync->store_endpoint}, 1);
    }
    if (sync->upstream) {
      const UpstreamSnapshot& u = *sync->upstream;
      Add(family(MetricId::kUpstreamInfo), MetricId::kUpstreamInfo,
          {u.target, u.peer}, 1);
      Add(family(MetricId::kUpstreamMoves), MetricId::kUpstreamMoves, {},
          static_cast<double>(u.moves));
      Add(family(MetricId::kUpstreamRoundTrip), MetricId::kUpstreamRoundTrip,
          {}, absl::ToDoubleSeconds(u.last_round_trip));
    }
    if (sync->leaves) {
      const LeavesSnapshot& l = *sync->leaves;
      Add(family(MetricId::kLeaves), MetricId::kLeaves, {}, l.leaves);
      for (const auto& [result, n] : l.ticks) {
        Add(family(MetricId::kLeafTicks), MetricId::kLeafTicks, {result},
            static_cast<double>(n));
      }
      for (const LeavesSnapshot::Units& u : l.units) {
        for (const auto& [holder, n] :
             {std::pair<const char*, int64_t>{"granted", u.granted},
              {"leaves", u.leaves},
              {"self", u.self}}) {
          Add(family(MetricId::kLeaseUnits), MetricId::kLeaseUnits,
              {u.resource, holder}, static_cast<double>(n));
        }
      }
      for (const auto& [result, n] : l.breaker_reports) {
        Add(family(MetricId::kLeafBreakerReports),
            MetricId::kLeafBreakerReports, {result}, static_cast<double>(n));
      }
      for (const auto& [route, n] : l.forwarded) {
        Add(family(MetricId::kLeafForwardedReports),
            MetricId::kLeafForwardedReports, {route}, static_cast<double>(n));
      }
    }
  }
  family(MetricId::kAcquireDuration)->metric.push_back(acquire_.Collect());
  Add(family(MetricId::kEventsDropped), MetricId::kEventsDropped, {},
      sources_.events_dropped
          ? static_cast<double>(sources_.events_dropped())
          : 0);
  Add(family(MetricId::kWatchers), MetricId::kWatchers, {},
      sources_.watchers ? static_cast<double>(sources_.watchers()) : 0);
  Add(family(MetricId::kDecideStreams), MetricId::kDecideStreams, {},
      sources_.decide_streams
          ? static_cast<double>(sources_.decide_streams())
          : 0);

  if (sources_.rate_limit) {
    const RateLimitTotals rls = sources_.rate_limit();
    for (const auto& [code, n] :
         {std::pair<const char*, uint64_t>{"OK", rls.ok},
          {"OVER_LIMIT", rls.over_limit},
          {"INVALID_ARGUMENT", rls.invalid}}) {
      Add(family(MetricId::kRateLimitRequests), MetricId::kRateLimitRequests,
          {code}, static_cast<double>(n));
    }
    Add(family(MetricId::kRateLimitUnmatched), MetricId::kRateLimitUnmatched,
        {}, static_cast<double>(rls.unmatched));
  }
  if (sources_.ext_authz) {
    const ExtAuthzTotals t = sources_.ext_authz();
    for (const auto& [result, n] :
         {std::pair<const char*, uint64_t>{"allow", t.allow},
          {"refuse", t.refuse},
          {"degrade", t.degrade},
          {"unmatched", t.unmatched},
          {"invalid", t.invalid}}) {
      Add(family(MetricId::kExtAuthzChecks), MetricId::kExtAuthzChecks,
          {result}, static_cast<double>(n));
    }
  }
  if (sources_.access_log) {
    const AccessLogTotals als = sources_.access_log();
    for (const auto& [result, n] :
         {std::pair<const char*, uint64_t>{"settled", als.settled},
          {"no_permit", als.no_permit},
          {"unknown_permit", als.unknown_permit},
          {"invalid", als.invalid}}) {
      Add(family(MetricId::kAccessLogEntries), MetricId::kAccessLogEntries,
          {result}, static_cast<double>(n));
    }
  }

  std::optional<HttpSnapshot> http;
  if (sources_.http) http = sources_.http();
  if (http) {
    for (const HttpSnapshot::Requests& r : http->requests) {
      Add(family(MetricId::kHttpRequests), MetricId::kHttpRequests,
          {r.endpoint, r.code}, static_cast<double>(r.count));
    }
    Add(family(MetricId::kHttpConnections), MetricId::kHttpConnections,
        {"active"}, static_cast<double>(http->active_connections));
    Add(family(MetricId::kHttpConnections), MetricId::kHttpConnections,
        {"idle"}, static_cast<double>(http->idle_connections));
    Add(family(MetricId::kHttpConnections), MetricId::kHttpConnections,
        {"waiting"}, static_cast<double>(http->waiting_connections));
    Add(family(MetricId::kHttpConnectionsClosed),
        MetricId::kHttpConnectionsClosed, {"shed"},
        static_cast<double>(http->connections_shed));
    Add(family(MetricId::kHttpConnectionsClosed),
        MetricId::kHttpConnectionsClosed, {"refused"},
        static_cast<double>(http->connections_refused));
    for (const auto& [phase, n] : http->timeouts) {
      Add(family(MetricId::kHttpConnectionsClosed),
          MetricId::kHttpConnectionsClosed, {"timeout_" + phase},
          static_cast<double>(n));
    }
    Add(family(MetricId::kHttpRequestsRejected),
        MetricId::kHttpRequestsRejected, {"framing"},
        static_cast<double>(http->rejected_framing));
    Add(family(MetricId::kHttpRequestsRejected),
        MetricId::kHttpRequestsRejected, {"limits"},
        static_cast<double>(http->rejected_limits));
  }

  std::optional<StateFileSnapshot> state_file;
  if (sources_.state_file) state_file = sources_.state_file();
  if (state_file) {
    Add(family(MetricId::kStateFileWrites), MetricId::kStateFileWrites,
        {"ok"}, static_cast<double>(state_file->writes));
    Add(family(MetricId::kStateFileWrites), MetricId::kStateFileWrites,
        {"error"}, static_cast<double>(state_file->failures));
    Add(family(MetricId::kStateFileLastWrite), MetricId::kStateFileLastWrite,
        {},
        state_file->last_write == absl::InfinitePast()
            ? 0
            : absl::ToDoubleSeconds(state_file->last_write -
                                    absl::UnixEpoch()));
  }

  std::optional<AdminTokenSnapshot> admin_token;
  if (sources_.admin_token) admin_token = sources_.admin_token();
  if (admin_token) {
    Add(family(MetricId::kAdminTokenReloads), MetricId::kAdminTokenReloads,
        {"ok"}, static_cast<double>(admin_token->reloads_ok));
    Add(family(MetricId::kAdminTokenReloads), MetricId::kAdminTokenReloads,
        {"error"}, static_cast<double>(admin_token->reloads_error));
  }
  std::optional<TlsSnapshot> tls;
  if (sources_.tls) tls = sources_.tls();
  if (tls) {
    Add(family(MetricId::kTlsCertificateExpiry),
        MetricId::kTlsCertificateExpiry, {},
        tls->not_after == absl::InfinitePast()
            ? 0
            : absl::ToDoubleSeconds(tls->not_after - absl::UnixEpoch()));
    Add(family(MetricId::kTlsReloads), MetricId::kTlsReloads, {"ok"},
        static_cast<double>(tls->reloads));
    Add(family(MetricId::kTlsReloads), MetricId::kTlsReloads, {"error"},
        static_cast<double>(tls->reload_failures));
  }
  std::optional<PolicyReloadSnapshot> reloads;
  if (sources_.policy_reloads) reloads = sources_.policy_reloads();
  if (reloads) {
    Add(family(MetricId::kPolicyReloads), MetricId::kPolicyReloads, {"ok"},
        static_cast<double>(reloads->ok));
    Add(family(MetricId::kPolicyReloads), MetricId::kPolicyReloads,
        {"error"}, static_cast<double>(reloads->error));
    Add(family(MetricId::kPolicyReloadLastError),
        MetricId::kPolicyReloadLastError, {}, reloads->last_failed ? 1 : 0);
  }

  // Families with no series say nothing useful (and a cluster-only family
  // in standalone mode would mislead); leave them out.
  std::vector<MetricFamily> out;
  out.reserve(families.size());
  for (MetricFamily& f : families) {
    if (!f.metric.empty()) out.push_back(std::move(f));
  }
  return out;
}

std::string Metrics::Render() const {
  return prometheus::TextSerializer().Serialize(Collect());
}

namespace {

// Opens and at once closes a TCP connection to `host`:`port`, the host as
// a listening address spells it: a wildcard host is reached on loopback.
void Knock(std::string host, int port) {
  if (!host.empty() && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) !=
      0) {
    return;
  }
  const int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    connect(fd, found->ai_addr, found->ai_addrlen);
    close(fd);
  }
  freeaddrinfo(found);
}

}  // namespace

MetricsServer::MetricsServer(std::unique_ptr<prometheus::Exposer> exposer,
                             std::string host, int port)
    : exposer_(std::move(exposer)), host_(std::move(host)), port_(port) {}

MetricsServer::~MetricsServer() {
  // civetweb's listening thread sees the stop only when its poll() of the
  // listening socket returns, which it does at the latest every 2 s
  // (SOCKET_TIMEOUT_QUANTUM in civetweb.c): every stop, and so every
  // SIGTERM of sluiced, would wait up to 2 s. An incoming connection ends
  // the poll at once, so until the exposer is gone one is made every 5 ms.
  std::atomic<bool> stopped{false};
  std::thread knocker([this, &stopped] {
    while (!stopped.load()) {
      Knock(host_, port_);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  exposer_.reset();
  stopped.store(true);
  knocker.join();
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& address, Metrics* metrics) {
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    // civetweb wants "host:port"; it throws when it cannot bind.
    exposer = std::make_unique<prometheus::Exposer>(address, 2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve metrics on ", address, ": ", e.what(),
        " (address in use or not available?)"));
  }
  exposer->RegisterCollectable(metrics->collectable());
  const std::vector<int> ports = exposer->GetListeningPorts();
  const int port = ports.empty() ? 0 : ports.front();
  const size_t colon = address.rfind(':');
  std::string host =
      colon == std::string::npos ? std::string() : address.substr(0, colon);
  return std::unique_ptr<MetricsServer>(
      new MetricsServer(std::move(exposer), std::move(host), port));
}

}  // namespace sluice::metrics
