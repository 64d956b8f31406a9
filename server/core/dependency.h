#ifndef SLUICE_SERVER_CORE_DEPENDENCY_H_
#define SLUICE_SERVER_CORE_DEPENDENCY_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/clock.h"
#include "server/core/decision.h"
#include "server/core/events.h"
#include "server/core/gate_set.h"
#include "server/core/hot_mutex.h"
#include "server/core/policy_config.h"
#include "server/core/tick.h"

namespace sluice::core {

struct DependencyStatus {
  std::shared_ptr<const PolicyConfig> policy;
  DecisionCounters counters;
  // Keys with state (per_key policies); 1 otherwise.
  size_t keys = 0;
  // The gates of the requested key (or of the dependency); absent when a
  // per_key policy has no state for that key.
  std::optional<GateStatus> gates;
};

// All state of one policy: its config, its gates (one set, or one per key
// with LRU eviction) and its counters. Safe for concurrent use; one mutex per
// dependency, so different dependencies never contend.
class Dependency {
 public:
  Dependency(std::shared_ptr<const PolicyConfig> policy, Clock* clock,
             EventSink* sink, PermitEpochs* epochs,
             const ClusterState& cluster,
             absl::Duration permit_grace = absl::ZeroDuration());

  // Decides one call and fills every field of `out`. INVALID_ARGUMENT when
  // `permits` can never be admitted under the policy.
  absl::Status Acquire(absl::string_view key, uint32_t permits, Decision* out)
      ABSL_LOCKS_EXCLUDED(mu_);
  BreakerState Report(absl::string_view key, uint64_t permit_id,
                      Outcome outcome, absl::Duration latency)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Sweep() ABSL_LOCKS_EXCLUDED(mu_);
  BreakerState PeekBreaker(absl::string_view key) ABSL_LOCKS_EXCLUDED(mu_);
  // Installs a changed version of the same policy, keeping live state.
  void Reconfigure(std::shared_ptr<const PolicyConfig> policy)
      ABSL_LOCKS_EXCLUDED(mu_);
  void SetOverride(BreakerOverride override, const std::string& cause)
      ABSL_LOCKS_EXCLUDED(mu_);
  DependencyStatus Status(absl::string_view key) ABSL_LOCKS_EXCLUDED(mu_);

  // Cluster mode: see Engine.
  void SetClusterState(const ClusterState& cluster) ABSL_LOCKS_EXCLUDED(mu_);
  void CollectTick(absl::Duration interval, DependencyTick* out)
      ABSL_LOCKS_EXCLUDED(mu_);
  void ApplyTick(const DependencyUpdate& update) ABSL_LOCKS_EXCLUDED(mu_);
  std::shared_ptr<const PolicyConfig> policy() const ABSL_LOCKS_EXCLUDED(mu_);

  // Upper bounds the engine enforces on request fields.
  static constexpr uint32_t kMaxPermits = 1000000;
  // Per-key cluster limits: most keys pushed per tick (the rest wait for
  // the next one), and keys handled per lock hold while collecting.
  static constexpr size_t kMaxKeysPerTick = 10000;
  static constexpr size_t kKeysPerLock = 256;

 private:
  using KeyList = std::list<std::pair<std::string, GateSet>>;

  // The gate set for `key` (created, and the LRU updated, as needed).
  GateSet* GatesFor(absl::string_view key, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A new gate set with the dependency's override and cluster state.
  void InitGates(GateSet* gates, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The gate set for `key` if it exists; does not touch the LRU order.
  GateSet* FindGates(absl::string_view key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Count(const Decision& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Clock* const clock_;
  EventSink* const sink_;
  PermitEpochs* const epochs_;
  const std::string name_;
  const absl::Duration permit_grace_;

  mutable HotMutex mu_;
  // Declared before the gate sets, which count outcomes into it.
  DecisionCounters counters_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const PolicyConfig> policy_ ABSL_GUARDED_BY(mu_);
  BreakerOverride override_ ABSL_GUARDED_BY(mu_) = BreakerOverride::kAuto;
  ClusterState cluster_ ABSL_GUARDED_BY(mu_);
  // Gates of a policy without per_key.
  std::optional<GateSet> single_ ABSL_GUARDED_BY(mu_);
  // Gates per key of a per_key policy, most recently used first.
  KeyList keys_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<absl::string_view, KeyList::iterator> key_index_
      ABSL_GUARDED_BY(mu_);
  // Cluster mode, per_key: keys to push with the next tick (each once; see
  // GateSet::TakeSyncRequest).
  std::vector<std::string> hot_keys_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_DEPENDENCY_H_
