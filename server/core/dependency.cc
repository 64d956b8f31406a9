#include "server/core/dependency.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sluice::core {

Dependency::Dependency(std::shared_ptr<const PolicyConfig> policy,
                       Clock* clock, EventSink* sink,
                       PermitEpochs* epochs,
                       const ClusterState& cluster,
                       absl::Duration permit_grace)
    : clock_(clock),
      sink_(sink),
      epochs_(epochs),
      name_(policy->name),
      permit_grace_(permit_grace) {
  const absl::Time now = clock_->Now();
  HotMutexLock lock(&mu_);
  policy_ = std::move(policy);
  cluster_ = cluster;
  if (!policy_->per_key) {
    single_.emplace(*policy_, now, epochs_->Next(), sink_, &counters_,
                    name_, "");
    InitGates(&*single_, now);
  }
}

BreakerState Dependency::PeekBreaker(absl::string_view key) {
  const absl::Time now = clock_->Now();
  HotMutexLock lock(&mu_);
  GateSet* gates = FindGates(key);
  return gates == nullptr ? BreakerState::kClosed : gates->breaker_state(now);
}

void Dependency::InitGates(GateSet* gates, absl::Time now) {
  gates->set_permit_grace(permit_grace_);
  if (cluster_.enabled) gates->SetClusterState(cluster_, now);
  if (override_ != BreakerOverride::kAuto) {
    gates->SetOverride(override_, now, "override of the dependency");
  }
}

std::shared_ptr<const PolicyConfig> Dependency::policy() const {
  HotMutexLock lock(&mu_);
  return policy_;
}

GateSet* Dependency::FindGates(absl::string_view key) {
  if (single_) return &*single_;
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &it->second->second;
}

GateSet* Dependency::GatesFor(absl::string_view key, absl::Time now) {
  if (single_) return &*single_;
  auto it = key_index_.find(key);
  if (it != key_index_.end()) {
    keys_.splice(keys_.begin(), keys_, it->second);
    return &it->second->second;
  }
  while (!keys_.empty() && keys_.size() >= policy_->max_keys) {
    // Its permits go with it; their reports become harmless no-ops.
    key_index_.erase(keys_.back().first);
    keys_.pop_back();
  }
  keys_.emplace_front(
      std::piecewise_construct, std::forward_as_tuple(key),
      std::forward_as_tuple(*policy_, now, epochs_->Next(), sink_,
                            &counters_, name_, std::string(key)));
  GateSet* gates = &keys_.front().second;
  InitGates(gates, now);
  key_index_.emplace(keys_.front().first, keys_.begin());
  return gates;
}

void Dependency::Count(const Decision& d) {
  ++counters_.acquired;
  switch (d.verdict) {
    case Verdict::kAllow:
      ++counters_.allowed;
      break;
    case Verdict::kReject:
      ++counters_.rejected;
      break;
    case Verdict::kDegrade:
      ++counters_.degraded;
      break;
  }
  if (d.reason == Reason::kShadow) ++counters_.shadow_refused;
  ++counters_.by_verdict_reason[static_cast<int>(d.verdict)]
                               [static_cast<int>(d.reason)];
}

absl::Status Dependency::Acquire(absl::string_view key, uint32_t permits,
                                 Decision* out) {
  const absl::Time now = clock_->Now();
  HotMutexLock lock(&mu_);
  if (policy_->rate_limit) {
    const RateLimitConfig& rate = *policy_->rate_limit;
    const double most = rate.algorithm == RateAlgorithm::kTokenBucket
                            ? rate.burst
                            : std::floor(rate.rate);
    if (permits > most) {
      return absl::InvalidArgumentError(absl::StrCat(
          "permits ", permits, " can never be admitted by policy \"", name_,
          "\": its rate_limit admits at most ", most, " at once"));
    }
  }
  GatesFor(key, now)->Acquire(*policy_, permits, now, out);
  out->policy = policy_;
  Count(*out);
  return absl::OkStatus();
}

BreakerState Dependency::Report(absl::string_view key, uint64_t permit_id,
                                Outcome outcome, absl::Duration latency) {
  const absl::Time now = clock_->Now();
  HotMutexLock lock(&mu_);
  GateSet* gates = FindGates(key);
  if (gates == nullptr) {
    ++counters_.stale_reports;
    return BreakerState::kClosed;
  }
  if (!gates->Report(permit_id, outcome, latency, now)) {
    ++counters_.stale_reports;
  }
  return gates->breaker_state(now);
}

void Dependency::Sweep() {
  const absl::Time now = clock_->Now();
  HotMutexLock lock(&mu_);
  if (single_) {
    single_->Sweep(now);
    return;
  }
  for (auto& [key, gates] : keys_) gates.Sweep(now);
}

void Dependency::Reconfigure(std::shared_ptr<const PolicyConfig> policy) {
  const absl::Time now = clock_->Now();
  HotMutexLock lock(&mu_);
  const bool was_per_key = policy_->per_key;
  policy_ = std::move(policy);
  if (was_per_key != policy_->per_key) {
    // Per-key and shared state do not map onto each other; start afresh.
    keys_.clear();
    key_index_.clear();
    single_.reset();
    if (!policy_->per_key) {
      single_.emplace(*policy_, now, epochs_->Next(), sink_, &counters_,
                      name_, "");
      InitGates(&*single_, now);
    }
    return;
  }
  if (single_) {
    single_->Reconfigure(*policy_, now);
    return;
  }
  for (auto& [key, gates] : keys_) gates.Reconfigure(*policy_, now);
  while (keys_.size() > policy_->max_keys) {
    key_index_.erase(keys_.back().first);
    keys_.pop_back();
  }
}

void Dependency::SetOverride(BreakerOverride override,
                             const std::string& cause) {
  const absl::Time now = clock_->Now();
  HotMutexLock lock(&mu_);
  override_ = override;
  if (single_) {
    single_->SetOverride(override, now, cause);
    return;
  }
  for (auto& [key, gates] : keys_) gates.SetOverride(override, now, cause);
}

DependencyStatus Dependency::Status(absl::string_view key) {
  const absl::Time now = clock_->Now();
  HotMutexLock lock(&mu_);
  DependencyStatus status;
  status.policy = policy_;
  status.keys = single_ ? 1 : keys_.size();
  if (GateSet* gates = FindGates(key)) {
    status.gates = gates->Status(now);
  }
  status.counters = counters_;
  return status;
}

void Dependency::SetClusterState(const ClusterState& cluster) {
  const absl::Time now = clock_->Now();
  HotMutexLock lock(&mu_);
  cluster_ = cluster;
  if (single_) {
    single_->SetClusterState(cluster, now);
    return;
  }
  for (auto& [key, gates] : keys_) gates.SetClusterState(cluster, now);
}

void Dependency::CollectTick(absl::Duration interval, DependencyTick* out) {
  const absl::Time now = clock_->Now();
  HotMutexLock lock(&mu_);
  out->name = name_;
  out->per_key = policy_->per_key;
  out->cluster_rate =
      policy_->rate_limit && policy_->rate_limit->scope == Scope::kCluster;
  out->cluster_concurrency =
      policy_->concurrency && policy_->concurrency->scope == Scope::kCluster;
  out->rate_per_second =
      policy_->rate_limit ? policy_->rate_limit->rate /
                                absl::ToDoubleSeconds(policy_->rate_limit->per)
                          : 0;
  out->max_in_flight =
      policy_->concurrency ? policy_->concurrency->max_in_flight : 0;
  out->keys.clear();
  if (single_) {
    out->keys.emplace_back();
    single_->CollectTick(interval, &out->keys.back());
    // Per-key breakers stay local; the dependency's breaker is shared.
    single_->CollectBreaker(now, out);
    return;
  }
  KeyTick tick;
  for (auto& [key, gates] : keys_) {
    if (gates.CollectTick(interval, &tick)) out->keys.push_back(tick);
  }
}

void Dependency::ApplyTick(const DependencyUpdate& update) {
  const absl::Time now = clock_->Now();
  HotMutexLock lock(&mu_);
  if (single_) {
    for (const KeyShare& share : update.shares) {
      single_->ApplyShare(share, now);
    }
    single_->ApplyBreaker(update, now);
    return;
  }
  for (const KeyShare& share : update.shares) {
    auto it = key_index_.find(share.key);
    if (it != key_index_.end()) it->second->second.ApplyShare(share, now);
  }
}

}  // namespace sluice::core
