// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_POLICY_POLICY_STORE_H_
#define SLUICE_SERVER_POLICY_POLICY_STORE_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/core/engine.h"
#include "sluice/v1/policy.pb.h"

namespace sluice::policy {

// INVALID_ARGUMENT naming both policies when two of `policies` claim the same
// Envoy descriptor (domain and entries): a descriptor maps to one policy.
absl::Status CheckEnvoyDescriptors(
    const std::vector<const v1::Policy*>& policies);

// INVALID_ARGUMENT naming both policies when a route of one of `policies`
// (canonical forms, FromConfig's output) ties with a route of another: a
// request can match both and neither is more specific, so it would not map
// to one policy.
absl::Status CheckHttpRoutes(const std::vector<const v1::Policy*>& policies);

// One change the store made, for logs and events.
struct PolicyChange {
  std::string name;
  uint64_t old_version = 0;  // 0: created
  uint64_t new_version = 0;  // 0: deleted
};

// The versioned set of policies in force, and the only writer of the
// engine's policies. Every change is validated whole before anything moves;
// a rejected change leaves both the store and the engine as they were.
// Versions come from one counter and only increase; a policy whose content
// did not change keeps its version. Safe for concurrent use.
class PolicyStore {
 public:
  explicit PolicyStore(core::Engine* engine);

  // Makes `policies` the whole set (a policies file load). Unchanged
  // policies keep version and state; absent ones are deleted.
  absl::StatusOr<std::vector<PolicyChange>> ReplaceAll(
      const std::vector<v1::Policy>& policies) ABSL_LOCKS_EXCLUDED(mu_);

  // Makes `policies` the whole set with the versions they carry (the cluster
  // store's copy, which assigned them). Validated whole first, like
  // ReplaceAll; policies whose version and content are unchanged keep their
  // state untouched. Later local versions continue above the highest seen.
  absl::StatusOr<std::vector<PolicyChange>> Adopt(
      const std::vector<v1::Policy>& policies) ABSL_LOCKS_EXCLUDED(mu_);

  // Creates or replaces one policy. When expected_version is non-zero the
  // stored version must equal it (ABORTED otherwise, also when the policy is
  // absent); 0 skips the check. INVALID_ARGUMENT for an invalid policy.
  absl::StatusOr<PolicyChange> Put(const v1::Policy& policy,
                                   uint64_t expected_version)
      ABSL_LOCKS_EXCLUDED(mu_);

  // INVALID_ARGUMENT when `policy` claims an Envoy descriptor another stored
  // policy (of another name) answers. Put checks this itself; the cluster
  // mode checks it before writing to the shared store.
  absl::Status CheckEnvoyDescriptors(const v1::Policy& policy) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // INVALID_ARGUMENT when a route of `policy` ties with a route of another
  // stored policy (CheckHttpRoutes), or when `policy` is invalid. Put
  // checks this itself; the cluster mode checks it before writing.
  absl::Status CheckHttpRoutes(const v1::Policy& policy) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // NOT_FOUND if absent; ABORTED on a version mismatch.
  absl::StatusOr<PolicyChange> Delete(absl::string_view name,
                                      uint64_t expected_version)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The stored policy with its version, defaults written out.
  absl::StatusOr<v1::Policy> Get(absl::string_view name) const
      ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<v1::Policy> List() const ABSL_LOCKS_EXCLUDED(mu_);
 private:
  absl::Status CheckEnvoyDescriptorsLocked(const v1::Policy& policy) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // `canonical`: FromConfig's output.
  absl::Status CheckHttpRoutesLocked(const v1::Policy& canonical) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

 public:
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  core::Engine* const engine_;
  mutable absl::Mutex mu_;
  // By name; each carries its version.
  std::map<std::string, v1::Policy, std::less<>> policies_ ABSL_GUARDED_BY(mu_);
  uint64_t last_version_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::policy

#endif  // SLUICE_SERVER_POLICY_POLICY_STORE_H_
