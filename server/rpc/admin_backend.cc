// SPDX-License-Identifier: Apache-2.0
#include "server/rpc/admin_backend.h"

#include "absl/strings/str_cat.h"
#include "sluice/v1/admin.pb.h"

namespace sluice::rpc {

static_assert(static_cast<int>(core::BreakerOverride::kAuto) == v1::AUTO);
static_assert(static_cast<int>(core::BreakerOverride::kForceOpen) ==
              v1::FORCE_OPEN);
static_assert(static_cast<int>(core::BreakerOverride::kForceClosed) ==
              v1::FORCE_CLOSED);

std::string OverrideCause(core::BreakerOverride override,
                          absl::string_view note) {
  return absl::StrCat("operator override ",
                      v1::BreakerOverride_Name(
                          static_cast<v1::BreakerOverride>(override)),
                      note.empty() ? "" : ": ", note);
}

std::string DescribeChange(const policy::PolicyChange& change,
                           absl::string_view source) {
  std::string what;
  if (change.old_version == 0) {
    what = absl::StrCat("policy \"", change.name, "\" created (version ",
                        change.new_version, ")");
  } else if (change.new_version == 0) {
    what = absl::StrCat("policy \"", change.name, "\" deleted (was version ",
                        change.old_version, ")");
  } else if (change.old_version == change.new_version) {
    what = absl::StrCat("policy \"", change.name, "\" unchanged (version ",
                        change.new_version, ")");
  } else {
    what = absl::StrCat("policy \"", change.name, "\" changed (version ",
                        change.old_version, " -> ", change.new_version, ")");
  }
  return source.empty() ? what : absl::StrCat(what, " by ", source);
}

LocalAdminBackend::LocalAdminBackend(policy::PolicyStore* store,
                                     core::Engine* engine, EventHub* events)
    : store_(store), engine_(engine), events_(events) {}

absl::StatusOr<policy::PolicyChange> LocalAdminBackend::PutPolicy(
    const v1::Policy& policy, uint64_t expected_version) {
  absl::StatusOr<policy::PolicyChange> change =
      store_->Put(policy, expected_version);
  if (change.ok() && change->old_version != change->new_version) {
    events_->Publish(PolicyChangedEvent(change->name, change->old_version,
                                        change->new_version,
                                        DescribeChange(*change, "admin API")));
  }
  return change;
}

absl::StatusOr<policy::PolicyChange> LocalAdminBackend::DeletePolicy(
    absl::string_view name, uint64_t expected_version) {
  absl::StatusOr<policy::PolicyChange> change =
      store_->Delete(name, expected_version);
  if (change.ok()) {
    events_->Publish(PolicyChangedEvent(change->name, change->old_version, 0,
                                        DescribeChange(*change, "admin API")));
  }
  return change;
}

absl::StatusOr<v1::Policy> LocalAdminBackend::GetPolicy(
    absl::string_view name) {
  return store_->Get(name);
}

std::vector<v1::Policy> LocalAdminBackend::ListPolicies() {
  return store_->List();
}

absl::Status LocalAdminBackend::SetOverride(absl::string_view dependency,
                                            core::BreakerOverride override,
                                            const std::string& note) {
  const std::string cause = OverrideCause(override, note);
  absl::Status status = engine_->SetOverride(dependency, override, cause);
  if (status.ok()) {
    events_->Publish(OverrideEvent(std::string(dependency), override, cause));
  }
  return status;
}

}  // namespace sluice::rpc
