// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_RPC_ADMIN_BACKEND_H_
#define SLUICE_SERVER_RPC_ADMIN_BACKEND_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/core/breaker_state.h"
#include "server/core/engine.h"
#include "server/policy/policy_store.h"
#include "server/rpc/admin_events.h"
#include "sluice/v1/policy.pb.h"

namespace sluice::rpc {

// How this replica sees the cluster store, for GetState.
struct ClusterView {
  // "standalone", "up" or "down".
  std::string store_status = "standalone";
  uint32_t live_replicas = 1;
  bool cluster = false;
  // Where the grants come from: "redis HOST:PORT", "upstream TARGET (peer
  // ADDRESS)"; "" standalone.
  std::string grant_source;
  // A central replica: leaves served now.
  uint32_t leaves = 0;
};

// Where the admin writes go: straight into this replica's memory
// (standalone, LocalAdminBackend) or into the cluster store, from which every
// replica applies them on its next tick (cluster mode). Reads answer from
// this replica's policy store. Implementations are safe for concurrent use.
class AdminBackend {
 public:
  virtual ~AdminBackend() = default;

  // INVALID_ARGUMENT for an invalid policy (nothing changes), ABORTED on an
  // expected_version mismatch, UNAVAILABLE when the store cannot be reached.
  virtual absl::StatusOr<policy::PolicyChange> PutPolicy(
      const v1::Policy& policy, uint64_t expected_version) = 0;
  // NOT_FOUND if absent, ABORTED on a version mismatch.
  virtual absl::StatusOr<policy::PolicyChange> DeletePolicy(
      absl::string_view name, uint64_t expected_version) = 0;
  virtual absl::StatusOr<v1::Policy> GetPolicy(absl::string_view name) = 0;
  virtual std::vector<v1::Policy> ListPolicies() = 0;
  // NOT_FOUND without a policy, FAILED_PRECONDITION without a breaker.
  virtual absl::Status SetOverride(absl::string_view dependency,
                                   core::BreakerOverride override,
                                   const std::string& note) = 0;
  virtual ClusterView cluster() = 0;
};

// Standalone mode: admin changes apply to this process's memory only (and
// are lost on restart; the policies file is loaded again). Publishes a
// POLICY_CHANGED or OVERRIDE_SET event for every change.
class LocalAdminBackend final : public AdminBackend {
 public:
  // All three must outlive the backend.
  LocalAdminBackend(policy::PolicyStore* store, core::Engine* engine,
                    EventHub* events);

  absl::StatusOr<policy::PolicyChange> PutPolicy(
      const v1::Policy& policy, uint64_t expected_version) override;
  absl::StatusOr<policy::PolicyChange> DeletePolicy(
      absl::string_view name, uint64_t expected_version) override;
  absl::StatusOr<v1::Policy> GetPolicy(absl::string_view name) override;
  std::vector<v1::Policy> ListPolicies() override;
  absl::Status SetOverride(absl::string_view dependency,
                           core::BreakerOverride override,
                           const std::string& note) override;
  ClusterView cluster() override { return ClusterView(); }

 private:
  policy::PolicyStore* const store_;
  core::Engine* const engine_;
  EventHub* const events_;
};

// The cause recorded for an operator override, e.g.
// "operator override FORCE_OPEN: INC-42".
std::string OverrideCause(core::BreakerOverride override,
                          absl::string_view note);
// "policy \"x\" created (version 3)" and the like.
std::string DescribeChange(const policy::PolicyChange& change,
                           absl::string_view source);

}  // namespace sluice::rpc

#endif  // SLUICE_SERVER_RPC_ADMIN_BACKEND_H_
