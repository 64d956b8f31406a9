// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CLUSTER_CLUSTER_CONFIG_H_
#define SLUICE_SERVER_CLUSTER_CLUSTER_CONFIG_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/cluster/store.h"
#include "server/core/engine.h"
#include "server/policy/policy_store.h"
#include "sluice/v1/policy.pb.h"

namespace sluice::cluster {

// Cluster mode's operator config. Admin writes go to the store, with
// compare-and-set on the version, and return once this replica has applied
// them; every replica's sync loop hands back a snapshot whenever the store's
// config version moves, and Apply installs it: policies into the policy
// store (which keeps live state across edits) and overrides into the
// engine. Safe for concurrent use.
class ClusterConfig {
 public:
  struct Options {
    // How long an admin write waits for this replica to apply it (it is
    // committed in the store either way).
    absl::Duration apply_timeout = absl::Seconds(3);
    // Asks the sync loop for a tick soon.
    std::function<void()> nudge;
    // Told about every change Apply installs (for events and logs).
    std::function<void(const policy::PolicyChange& change,
                       const std::string& cause)>
        on_policy_change;
    std::function<void(const std::string& dependency,
                       core::BreakerOverride override,
                       const std::string& cause)>
        on_override;
  };

  // All three must outlive this object.
  ClusterConfig(Store* store, policy::PolicyStore* policies,
                core::Engine* engine, Options options);

  // Admin writes. INVALID_ARGUMENT for an invalid policy (validated whole
  // before the store is touched), ABORTED on a version mismatch, NOT_FOUND,
  // UNAVAILABLE when the store cannot be reached.
  absl::StatusOr<policy::PolicyChange> Put(const v1::Policy& policy,
                                           uint64_t expected_version)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<policy::PolicyChange> Delete(absl::string_view name,
                                              uint64_t expected_version)
      ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_FOUND without a policy here, FAILED_PRECONDITION without a breaker.
  absl::Status SetOverride(absl::string_view dependency,
                           core::BreakerOverride override,
                           const std::string& note) ABSL_LOCKS_EXCLUDED(mu_);

  // Installs a snapshot from the store (the sync loop's on_config). A
  // snapshot that does not parse or validate is logged and skipped whole.
  void Apply(const ConfigSnapshot& snapshot) ABSL_LOCKS_EXCLUDED(mu_);

  // The config version last applied; 0 before the first snapshot.
  uint64_t applied_version() const ABSL_LOCKS_EXCLUDED(mu_);

  // The store form of `policies` (validated, defaults written out), for
  // SyncLoop::Seed. INVALID_ARGUMENT for the first invalid one.
  static absl::StatusOr<std::vector<StoredPolicy>> ToStored(
      const std::vector<v1::Policy>& policies);

 private:
  // Waits until a snapshot of at least `version` was applied here.
  bool WaitApplied(uint64_t version) ABSL_LOCKS_EXCLUDED(mu_);

  Store* const store_;
  policy::PolicyStore* const policies_;
  core::Engine* const engine_;
  const Options options_;

  // Serializes Apply calls (one sync loop, but tests call it directly).
  absl::Mutex apply_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  absl::flat_hash_map<std::string, core::BreakerOverride> overrides_
      ABSL_GUARDED_BY(apply_mu_);

  mutable absl::Mutex mu_;
  uint64_t applied_version_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::cluster

#endif  // SLUICE_SERVER_CLUSTER_CLUSTER_CONFIG_H_
