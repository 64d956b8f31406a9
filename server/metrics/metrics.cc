// SPDX-License-Identifier: Apache-2.0
#include "server/metrics/metrics.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
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

MetricFamily Family(const base::MetricDef& def) {
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

// One series: `values` pair with `names`, the definition's label names.
ClientMetric Series(const std::array<const char*, 4>& names,
                    base::StatsWriter::Values values, MetricType type,
                    double value) {
  ClientMetric metric;
  size_t i = 0;
  for (absl::string_view v : values) {
    metric.label.push_back({names[i++], std::string(v)});
  }
  if (type == MetricType::kCounter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  return metric;
}

// Adds one series to `family`, an engine metric's.
void Add(MetricFamily* family, MetricId id, base::StatsWriter::Values values,
         double value) {
  const EngineMetric& def = Def(id);
  family->metric.push_back(Series(def.labels, values, def.type, value));
}

// Whether `name` is one of the engine's metrics (kMetrics).
bool IsEngineMetric(absl::string_view name) {
  static const auto* const names = [] {
    auto* set = new absl::flat_hash_set<absl::string_view>();
    for (const EngineMetric& m : kMetrics) set->insert(m.name);
    return set;
  }();
  return names->contains(name);
}

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

const char* RefusalOf(const base::MetricDef& def, size_t label_values) {
  if (const char* why = base::MetricDefProblem(def); why != nullptr) {
    return why;
  }
  if (def.type == MetricType::kHistogram) {
    return "a histogram cannot be written as a value";
  }
  if (label_values != def.label_count()) {
    return "its label values do not match its label names";
  }
  if (IsEngineMetric(def.name)) return "the engine's metric list has it";
  return nullptr;
}

class Metrics::Adapter final : public prometheus::Collectable {
 public:
  explicit Adapter(const Metrics* metrics) : metrics_(metrics) {}
  std::vector<MetricFamily> Collect() const override {
    return metrics_->Collect();
  }

 private:
  const Metrics* const metrics_;
};

// The families of one scrape: the engine's (kMetrics, in its order, at
// the index of their MetricId), then the components' in the order first
// written. Refuses a write RefusalOf refuses, or one whose definition
// differs from an earlier write of the same name.
class Metrics::FamilyWriter final : public base::StatsWriter {
 public:
  FamilyWriter() {
    families_.reserve(kMetrics.size() + 64);
    for (const EngineMetric& m : kMetrics) families_.push_back(Family(m.def()));
  }

  void Write(const base::MetricDef& def, Values labels, double value) override {
    const char* why = RefusalOf(def, labels.size());
    size_t index = families_.size();
    if (why == nullptr) {
      auto [it, added] =
          components_.try_emplace(def.name, Component{index, def});
      if (added) {
        families_.push_back(Family(def));
      } else if (!base::SameMetricDef(it->second.def, def)) {
        why = "defined twice, differently";
      }
      index = it->second.index;
    }
    if (why != nullptr) {
      std::string refused =
          absl::StrCat(def.name == nullptr ? "" : def.name, ": ", why);
      if (refused_.size() < kMaxRefusedWrites &&
          std::find(refused_.begin(), refused_.end(), refused) ==
              refused_.end()) {
        refused_.push_back(std::move(refused));
      }
      return;
    }
    families_[index].metric.push_back(
        Series(def.labels, labels, def.type, value));
  }

  std::vector<MetricFamily>& families() { return families_; }
  std::vector<std::string>& refused() { return refused_; }

 private:
  std::vector<MetricFamily> families_;
  // The components' metrics by name: their family's index in families_,
  // and the definition first written.
  struct Component {
    size_t index;
    base::MetricDef def;
  };
  absl::flat_hash_map<absl::string_view, Component> components_;
  std::vector<std::string> refused_;
};

Metrics::Metrics(core::Engine* engine)
    : engine_(engine), adapter_(std::make_shared<Adapter>(this)) {}

void Metrics::AddSource(const base::StatsSource* source) {
  absl::MutexLock lock(&mu_);
  sources_.push_back(source);
}

std::vector<std::string> Metrics::refused_writes() const {
  absl::MutexLock lock(&mu_);
  return refused_;
}

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

void Metrics::CollectEngine(std::vector<MetricFamily>* families) const {
  auto family = [&](MetricId id) -> MetricFamily* {
    return &(*families)[static_cast<size_t>(id)];
  };

  // Per dependency, from the engine's own counters and gates.
  // The adaptive change counters each dependency shows (every kind of its
  // blocks, from 0, so that rate() works from the first move).
  std::vector<ChangeKey> change_series;
  const auto policies = engine_->Policies();
  Add(family(MetricId::kPolicies), MetricId::kPolicies, {},
      static_cast<double>(policies.size()));
  for (const auto& policy : policies) {
    absl::StatusOr<core::LivePolicyStatus> status =
        engine_->Inspect(policy->name);
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
            {dep, core::VerdictName(verdict), core::ReasonName(reason)},
            static_cast<double>(n));
        if (verdict == core::Verdict::kDegrade) {
          Add(family(MetricId::kDegraded), MetricId::kDegraded,
              {dep, core::ReasonName(reason)}, static_cast<double>(n));
        }
      }
    }
    for (core::Outcome outcome : kOutcomes) {
      Add(family(MetricId::kOutcomes), MetricId::kOutcomes,
          {dep, core::OutcomeName(outcome)},
          static_cast<double>(c.outcomes[static_cast<int>(outcome)]));
    }
    Add(family(MetricId::kStaleReports), MetricId::kStaleReports, {dep},
        static_cast<double>(c.stale_reports));
    Add(family(MetricId::kPolicyVersion), MetricId::kPolicyVersion, {dep},
        static_cast<double>(status->policy->version));
    // Over every key of a per_key policy.
    Add(family(MetricId::kClientLeases), MetricId::kClientLeases, {dep},
        static_cast<double>(status->leased.leases));
    Add(family(MetricId::kLeasedTokens), MetricId::kLeasedTokens, {dep},
        status->leased.tokens);
    Add(family(MetricId::kLeasedSlots), MetricId::kLeasedSlots, {dep},
        static_cast<double>(status->leased.slots));
    Add(family(MetricId::kLeasedDecisions), MetricId::kLeasedDecisions, {dep},
        static_cast<double>(c.leased));
    if (!status->gates) continue;  // per_key: no dependency-wide gates
    const core::GateStatus& g = *status->gates;
    Add(family(MetricId::kInFlight), MetricId::kInFlight, {dep},
        static_cast<double>(g.live_permits));
    Add(family(MetricId::kShare), MetricId::kShare, {dep}, g.rate_fraction);
    if (g.has_breaker) {
      for (core::BreakerState state : kBreakerStates) {
        Add(family(MetricId::kBreakerState), MetricId::kBreakerState,
            {dep, core::BreakerStateName(state)},
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
      engine_->PermitReportsRefused();
  Add(family(MetricId::kPermitReportsRefused),
      MetricId::kPermitReportsRefused, {"forged"},
      static_cast<double>(refused.forged));
  Add(family(MetricId::kPermitReportsRefused),
      MetricId::kPermitReportsRefused, {"malformed"},
      static_cast<double>(refused.malformed));
  const auto [allowed, rejected] = engine_->UnknownDecisions();
  Add(family(MetricId::kUnknownDependencyDecisions),
      MetricId::kUnknownDependencyDecisions, {"ALLOW"},
      static_cast<double>(allowed));
  Add(family(MetricId::kUnknownDependencyDecisions),
      MetricId::kUnknownDependencyDecisions, {"REJECT"},
      static_cast<double>(rejected));

  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, n] : transitions_) {
      Add(family(MetricId::kBreakerTransitions), MetricId::kBreakerTransitions,
          {std::get<0>(key), core::BreakerStateName(std::get<1>(key)),
           core::BreakerStateName(std::get<2>(key))},
          static_cast<double>(n));
    }
    for (const ChangeKey& series : change_series) {
      auto it = adaptive_changes_.find(series);
      Add(family(MetricId::kAdaptiveChanges), MetricId::kAdaptiveChanges,
          {series.first, series.second},
          it == adaptive_changes_.end() ? 0 : static_cast<double>(it->second));
    }
  }

}

std::vector<MetricFamily> Metrics::Collect() const {
  FamilyWriter writer;
  std::vector<MetricFamily>& families = writer.families();
  CollectEngine(&families);
  families[static_cast<size_t>(MetricId::kAcquireDuration)].metric.push_back(
      acquire_.Collect());

  // The components write outside mu_: they take their own locks, under
  // which some of them report events that take mu_.
  std::vector<const base::StatsSource*> sources;
  {
    absl::MutexLock lock(&mu_);
    sources = sources_;
  }
  for (const base::StatsSource* source : sources) source->WriteStats(writer);
  if (!writer.refused().empty()) {
    absl::MutexLock lock(&mu_);
    for (std::string& refused : writer.refused()) {
      if (refused_.size() >= kMaxRefusedWrites) break;
      if (std::find(refused_.begin(), refused_.end(), refused) ==
          refused_.end()) {
        refused_.push_back(std::move(refused));
      }
    }
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
