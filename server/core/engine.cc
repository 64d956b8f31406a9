// SPDX-License-Identifier: Apache-2.0
#include "server/core/engine.h"

#include <algorithm>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sluice::core {
namespace {

std::atomic<uint64_t> next_engine_id{1};

// Each thread keeps the last snapshot it read, so the hot path only reads an
// atomic version number; it takes the engine's mutex only after a change.
struct SnapshotCache {
  uint64_t engine_id = 0;
  uint64_t version = 0;
  std::shared_ptr<const void> map;
};
thread_local SnapshotCache snapshot_cache;

// The one place the core touches randomness: an engine built without a
// permit_id_seed or permit_key draws them, so every process start gets its
// own permit ids and its own secret to seal them with. Tests pass fixed
// ones, so their ids repeat from run to run.
Engine::Options WithPermitIdSeed(Engine::Options options) {
  if (options.permit_key.empty()) options.permit_key = RandomPermitKey();
  if (options.permit_id_seed != 0) return options;
  std::random_device device;
  while (options.permit_id_seed == 0) {
    options.permit_id_seed = (uint64_t{device()} << 32) | device();
  }
  return options;
}

}  // namespace

Engine::Engine(Clock* clock, Options options, EventSink* sink)
    : clock_(clock),
      options_(WithPermitIdSeed(std::move(options))),
      sink_(sink),
      id_(next_engine_id.fetch_add(1)),
      epochs_(options_.permit_id_seed),
      seal_(options_.permit_key) {
  absl::MutexLock lock(&mu_);
  current_ = std::make_shared<const DependencyMap>();
  cluster_.enabled = options_.cluster;
  cluster_.live_replicas = std::max<uint32_t>(1, options_.expected_replicas);
}

const Engine::DependencyMap& Engine::Snapshot() {
  SnapshotCache& cache = snapshot_cache;
  const uint64_t version = version_.load(std::memory_order_acquire);
  if (cache.engine_id != id_ || cache.version != version) {
    absl::MutexLock lock(&mu_);
    cache.map = current_;
    cache.version = current_version_;
    cache.engine_id = id_;
  }
  return *static_cast<const DependencyMap*>(cache.map.get());
}

void Engine::Publish(std::shared_ptr<const DependencyMap> next) {
  current_ = std::move(next);
  // New dependencies have not been swept yet. Under mu_: a sweep pass that
  // reset the alarm before this reads the new map after it (CurrentMap).
  sweep_alarm_.Lower(absl::InfinitePast());
  ++current_version_;
  version_.store(current_version_, std::memory_order_release);
}

LivePolicy* Engine::Find(absl::string_view dependency) {
  const DependencyMap& map = Snapshot();
  auto it = map.find(dependency);
  return it == map.end() ? nullptr : it->second.get();
}

std::shared_ptr<LivePolicy> Engine::MakeLivePolicy(
    PolicyConfig policy, const LivePolicy* previous) {
  return std::make_shared<LivePolicy>(
      std::make_shared<const PolicyConfig>(std::move(policy)), clock_, sink_,
      &epochs_, &sweep_alarm_, cluster_, options_.permit_grace,
      options_.slices, previous);
}

std::shared_ptr<LivePolicy> Engine::Update(std::shared_ptr<LivePolicy> dep,
                                           PolicyConfig policy) {
  if (!dep->Fits(policy)) {
    // Another shape of state (per_key switched, or another number of
    // shards): a new dependency takes over the counters and the override,
    // and its keys start afresh.
    return MakeLivePolicy(std::move(policy), dep.get());
  }
  dep->Reconfigure(std::make_shared<const PolicyConfig>(std::move(policy)));
  return dep;
}

void Engine::ReplacePolicies(std::vector<PolicyConfig> policies) {
  absl::MutexLock lock(&mu_);
  auto next = std::make_shared<DependencyMap>();
  for (PolicyConfig& policy : policies) {
    auto it = current_->find(policy.name);
    std::string name = policy.name;
    if (it != current_->end()) {
      (*next)[name] = Update(it->second, std::move(policy));
    } else {
      (*next)[name] = MakeLivePolicy(std::move(policy));
    }
  }
  Publish(std::move(next));
  policies_generation_.fetch_add(1, std::memory_order_release);
}

void Engine::PutPolicy(PolicyConfig policy) {
  absl::MutexLock lock(&mu_);
  auto it = current_->find(policy.name);
  if (it != current_->end() && it->second->Fits(policy)) {
    // The map itself is unchanged; readers see the new config through the
    // dependency they already hold.
    it->second->Reconfigure(
        std::make_shared<const PolicyConfig>(std::move(policy)));
    policies_generation_.fetch_add(1, std::memory_order_release);
    return;
  }
  auto next = std::make_shared<DependencyMap>(*current_);
  std::string name = policy.name;
  (*next)[name] = it != current_->end()
                      ? Update(it->second, std::move(policy))
                      : MakeLivePolicy(std::move(policy));
  Publish(std::move(next));
  policies_generation_.fetch_add(1, std::memory_order_release);
}

bool Engine::DeletePolicy(absl::string_view name) {
  absl::MutexLock lock(&mu_);
  if (current_->find(name) == current_->end()) return false;
  auto next = std::make_shared<DependencyMap>(*current_);
  next->erase(next->find(name));
  Publish(std::move(next));
  policies_generation_.fetch_add(1, std::memory_order_release);
  return true;
}

absl::StatusOr<Decision> Engine::Acquire(absl::string_view dependency,
                                         absl::string_view key,
                                         uint32_t permits,
                                         Unreported unreported) {
  if (permits > LivePolicy::kMaxPermits) {
    return absl::InvalidArgumentError(absl::StrCat(
        "permits must be at most ", LivePolicy::kMaxPermits, ", got ",
        permits));
  }
  Decision decision;
  LivePolicy* dep = Find(dependency);
  if (dep == nullptr) {
    decision.reason = Reason::kUnknownDependency;
    if (options_.unknown_dependency == UnknownDependencyAction::kAllow) {
      unknown_allowed_.fetch_add(1, std::memory_order_relaxed);
      decision.verdict = Verdict::kAllow;
      decision.call_timeout = options_.unknown_call_timeout;
    } else {
      unknown_rejected_.fetch_add(1, std::memory_order_relaxed);
      decision.verdict = Verdict::kReject;
      decision.http_status = RefusalHttpStatus(decision.reason);
    }
    return decision;
  }
  absl::Status status = dep->Acquire(key, permits, unreported, &decision);
  if (!status.ok()) return status;
  if (decision.permit_id.serial != 0) {
    decision.permit_id = seal_.Seal(decision.permit_id.serial, dependency, key);
  }
  return decision;
}

absl::StatusOr<Engine::JointDecision> Engine::AcquireAll(
    absl::Span<const Call> calls, Unreported unreported,
    const std::function<void()>& on_decided) {
  if (calls.size() > kMaxCalls) {
    return absl::InvalidArgumentError(absl::StrCat(
        "at most ", kMaxCalls, " calls decided together, got ", calls.size()));
  }
  JointDecision joint;
  joint.decisions.resize(calls.size());
  for (size_t i = 0; i < calls.size(); ++i) {
    const Call& call = calls[i];
    Decision& d = joint.decisions[i];
    absl::StatusOr<Decision> decided =
        Acquire(call.dependency, call.key, call.permits, unreported);
    if (decided.ok()) {
      d = *std::move(decided);
    } else {
      // Too many permits for the policy ever to admit: a refusal of this
      // call like any other the policy makes, which a shadow policy lets
      // through.
      LivePolicy* dep = Find(call.dependency);
      const bool shadow = dep != nullptr && dep->policy()->shadow;
      d.verdict = shadow ? Verdict::kAllow : Verdict::kReject;
      d.reason = shadow ? Reason::kShadow : Reason::kRateLimited;
      d.remaining = 0;
    }
    d.policy = nullptr;
    joint.admitted = joint.admitted && d.verdict == Verdict::kAllow;
    if (on_decided) on_decided();
  }
  if (joint.admitted) return joint;
  // The request will not be made: free what the admitted calls hold.
  for (size_t i = 0; i < calls.size(); ++i) {
    Decision& d = joint.decisions[i];
    if (d.permit_id.empty()) continue;
    Report(calls[i].dependency, calls[i].key, d.permit_id,
           Outcome::kCancelled, absl::ZeroDuration());
    d.permit_id = PermitId();
  }
  return joint;
}

BreakerState Engine::Report(absl::string_view dependency,
                            absl::string_view key, const PermitId& permit_id,
                            Outcome outcome, absl::Duration latency,
                            bool* forged) {
  // Checked before anything else, so a made-up id reaches no ledger: it
  // frees no slot and feeds no breaker. An empty id (a report without a
  // permit) goes on, to be counted as stale.
  const bool refused =
      !permit_id.empty() && !seal_.Verify(permit_id, dependency, key);
  if (forged != nullptr) *forged = refused;
  if (refused) {
    forged_permits_.fetch_add(1, std::memory_order_relaxed);
    return PeekBreaker(dependency, key);
  }
  LivePolicy* dep = Find(dependency);
  if (dep == nullptr) return BreakerState::kClosed;
  return dep->Report(key, permit_id.serial, outcome, latency);
}

std::shared_ptr<const Engine::DependencyMap> Engine::CurrentMap() {
  absl::MutexLock lock(&mu_);
  return current_;
}

LeaseTerms Engine::RenewLease(absl::string_view dependency,
                              const LeaseSettlement& settlement,
                              absl::string_view key) {
  LeaseTerms terms;
  LivePolicy* dep = Find(dependency);
  if (dep == nullptr) {
    terms.reason = "no policy has this name";
    return terms;
  }
  dep->RenewLease(key, settlement, &terms);
  return terms;
}

BreakerState Engine::PeekBreaker(absl::string_view dependency,
                                 absl::string_view key) {
  LivePolicy* dep = Find(dependency);
  return dep == nullptr ? BreakerState::kClosed : dep->PeekBreaker(key);
}

void Engine::Sweep() {
  // Before the map is read: see SweepAlarm.
  sweep_alarm_.Reset();
  // Hold the snapshot: in `for (x : *CurrentMap())` the shared_ptr temporary
  // dies before the loop runs, and a concurrent swap frees the map.
  const std::shared_ptr<const DependencyMap> map = CurrentMap();
  const absl::Time now = clock_->Now();
  for (const auto& [name, dep] : *map) dep->Sweep(now);
}

std::vector<DependencyTick> Engine::CollectTick(absl::Duration interval) {
  std::shared_ptr<const DependencyMap> map = CurrentMap();
  std::vector<DependencyTick> ticks(map->size());
  size_t i = 0;
  for (const auto& [name, dep] : *map) dep->CollectTick(interval, &ticks[i++]);
  return ticks;
}

void Engine::ApplyTick(const std::vector<DependencyUpdate>& updates) {
  std::shared_ptr<const DependencyMap> map = CurrentMap();
  for (const DependencyUpdate& update : updates) {
    auto it = map->find(update.name);
    if (it != map->end()) it->second->ApplyTick(update);
  }
}

std::vector<DependencyWarmState> Engine::ExportWarmState(size_t max_keys) {
  std::shared_ptr<const DependencyMap> map = CurrentMap();
  std::vector<DependencyWarmState> out;
  for (const auto& [name, dep] : *map) {
    DependencyWarmState state = dep->ExportWarm(max_keys);
    if (!state.keys.empty()) out.push_back(std::move(state));
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

WarmImport Engine::ImportWarmState(
    const std::vector<DependencyWarmState>& state) {
  std::shared_ptr<const DependencyMap> map = CurrentMap();
  WarmImport result;
  for (const DependencyWarmState& dep : state) {
    auto it = map->find(dep.name);
    if (it == map->end()) {
      result.unknown.push_back(dep.name);
      continue;
    }
    if (it->second->policy()->digest != dep.digest) {
      result.changed.push_back(dep.name);
      continue;
    }
    result.invalid_keys += it->second->ImportWarm(dep);
    ++result.dependencies;
    result.keys += dep.keys.size();
  }
  return result;
}

void Engine::SetStoreState(bool up, uint32_t live_replicas,
                           bool static_shares) {
  std::shared_ptr<const DependencyMap> map;
  ClusterState cluster;
  {
    absl::MutexLock lock(&mu_);
    const uint32_t live = live_replicas > 0 ? live_replicas : cluster_.live_replicas;
    // Every tick reports the state; only a change touches the gates.
    if (cluster_.store_up == up && cluster_.live_replicas == live &&
        cluster_.static_shares == static_shares) {
      return;
    }
    cluster_.store_up = up;
    cluster_.live_replicas = live;
    cluster_.static_shares = static_shares;
    cluster = cluster_;
    map = current_;
  }
  for (const auto& [name, dep] : *map) dep->SetClusterState(cluster);
}

Units Engine::StaticUnits(absl::string_view dependency) {
  absl::StatusOr<std::shared_ptr<LivePolicy>> dep = Lookup(dependency);
  if (!dep.ok()) return Units{};
  ClusterState cluster;
  {
    absl::MutexLock lock(&mu_);
    cluster = cluster_;
  }
  return GateSet::StaticUnits(*(*dep)->policy(), cluster);
}

std::vector<std::string> Engine::ClusterLimitsNotAdmitting() {
  std::shared_ptr<const DependencyMap> map;
  ClusterState cluster;
  {
    absl::MutexLock lock(&mu_);
    cluster = cluster_;
    map = current_;
  }
  std::vector<std::string> out;
  if (!cluster.enabled || !cluster.store_up) return out;
  constexpr const char* kResourceNames[kClusterResources] = {"rate limit",
                                                             "in-flight cap"};
  for (const auto& [name, dep] : *map) {
    const std::shared_ptr<const PolicyConfig> policy = dep->policy();
    const Units limit = GateSet::ClusterLimit(*policy, cluster);
    if (limit == Units{}) continue;
    std::optional<GateStatus> gates;
    Units have{};
    if (policy->per_key) {
      have = GateSet::StaticUnits(*policy, cluster);
    } else {
      gates = dep->Status("").gates;
      if (gates && gates->has_grant) have = gates->granted;
    }
    std::string why;
    for (int r = 0; r < kClusterResources; ++r) {
      if (limit[r] > 0 && have[r] <= 0) {
        absl::StrAppend(&why, why.empty() ? "" : " nor of its ",
                        kResourceNames[r]);
      }
    }
    if (!why.empty()) {
      out.push_back(absl::StrCat(
          name,
          policy->per_key ? ": no static share of its " : ": no grant of its ",
          why));
    } else if (gates && gates->tokens_available >= 0 &&
               gates->tokens_available < 1 &&
               policy->rate_limit->algorithm == RateAlgorithm::kTokenBucket) {
      out.push_back(absl::StrCat(name, ": its granted bucket is filling"));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<std::shared_ptr<LivePolicy>> Engine::Lookup(
    absl::string_view dependency) {
  std::shared_ptr<const DependencyMap> map = CurrentMap();
  auto it = map->find(dependency);
  if (it == map->end()) {
    return absl::NotFoundError(
        absl::StrCat("no policy named \"", dependency, "\""));
  }
  return it->second;
}

absl::Status Engine::SetOverride(absl::string_view dependency,
                                 BreakerOverride override,
                                 const std::string& cause) {
  absl::StatusOr<std::shared_ptr<LivePolicy>> dep = Lookup(dependency);
  if (!dep.ok()) return dep.status();
  if (!(*dep)->policy()->breaker) {
    return absl::FailedPreconditionError(absl::StrCat(
        "policy \"", dependency, "\" has no breaker to override"));
  }
  (*dep)->SetOverride(override, cause);
  return absl::OkStatus();
}

absl::StatusOr<LivePolicyStatus> Engine::Inspect(absl::string_view dependency,
                                                 absl::string_view key) {
  absl::StatusOr<std::shared_ptr<LivePolicy>> dep = Lookup(dependency);
  if (!dep.ok()) return dep.status();
  return (*dep)->Status(key);
}

std::vector<std::shared_ptr<const PolicyConfig>> Engine::Policies() {
  std::shared_ptr<const DependencyMap> map = CurrentMap();
  std::vector<std::shared_ptr<const PolicyConfig>> out;
  out.reserve(map->size());
  for (const auto& [name, dep] : *map) out.push_back(dep->policy());
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a->name < b->name; });
  return out;
}

}  // namespace sluice::core
