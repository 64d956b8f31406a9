#include "server/core/dependency.h"

#include <cmath>
#include <algorithm>
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
  GateSet* gates = GatesFor(key, now);
  gates->Acquire(*policy_, permits, now, out);
  if (!single_ && gates->TakeSyncRequest()) {
    // A hot key: share it from the next tick on (allocates once per key
    // and tick, not per call).
    hot_keys_.emplace_back(key);
  }
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
    hot_keys_.clear();
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
  std::vector<std::string> hot;
  {
    HotMutexLock lock(&mu_);
    out->name = name_;
    out->per_key = policy_->per_key;
    out->keys.clear();
    if (single_) {
      if (cluster_.enabled && single_->has_cluster_limit()) {
        out->keys.emplace_back();
        single_->CollectTick(interval, now, &out->keys.back());
      }
      // Per-key breakers stay local; the dependency's breaker is shared.
      single_->CollectBreaker(now, out);
      return;
    }
    if (hot_keys_.size() <= kMaxKeysPerTick) {
      hot.swap(hot_keys_);
    } else {
      // The rest wait for the next tick, oldest first.
      hot.assign(std::make_move_iterator(hot_keys_.begin()),
                 std::make_move_iterator(hot_keys_.begin() + kMaxKeysPerTick));
      hot_keys_.erase(hot_keys_.begin(), hot_keys_.begin() + kMaxKeysPerTick);
    }
  }
  // The lock is taken per batch of keys, so Acquire on this dependency
  // waits for one batch at most, never for the whole walk.
  out->keys.reserve(hot.size());
  for (size_t i = 0; i < hot.size(); i += kKeysPerLock) {
    HotMutexLock lock(&mu_);
    if (single_) break;  // per_key was switched off meanwhile
    const size_t end = std::min(hot.size(), i + kKeysPerLock);
    for (size_t k = i; k < end; ++k) {
      GateSet* gates = FindGates(hot[k]);
      if (gates == nullptr) continue;  // evicted since
      gates->Dequeued();
      if (!gates->has_cluster_limit()) continue;
      out->keys.emplace_back();
      gates->CollectTick(interval, now, &out->keys.back());
    }
  }
}

void Dependency::ApplyTick(const DependencyUpdate& update) {
  const absl::Time now = clock_->Now();
  {
    HotMutexLock lock(&mu_);
    if (single_) {
      for (const KeyGrant& grant : update.grants) {
        single_->ApplyGrant(grant, now);
      }
      single_->ApplyBreaker(update, now);
      return;
    }
  }
  for (size_t i = 0; i < update.grants.size(); i += kKeysPerLock) {
    HotMutexLock lock(&mu_);
    if (single_) return;
    const size_t end = std::min(update.grants.size(), i + kKeysPerLock);
    for (size_t k = i; k < end; ++k) {
      const KeyGrant& grant = update.grants[k];
      GateSet* gates = FindGates(grant.key);
      if (gates == nullptr) continue;
      gates->ApplyGrant(grant, now);
      // A key that holds a grant is pushed again next tick to renew it (or
      // to give it back once it has gone quiet).
      if (gates->TakeSyncRequest()) hot_keys_.push_back(grant.key);
    }
  }
}

}  // namespace sluice::core
