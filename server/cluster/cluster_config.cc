// SPDX-License-Identifier: Apache-2.0
#include "server/cluster/cluster_config.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "server/policy/policy_convert.h"
#include "spdlog/spdlog.h"
#include "wire/status.h"

namespace sluice::cluster {
namespace {

// Deterministic bytes, so that an unchanged policy compares equal in Lua.
std::string Serialize(const v1::Policy& policy) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  policy.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

absl::StatusOr<StoredPolicy> Canonical(const v1::Policy& policy) {
  v1::Policy input = policy;
  input.set_version(0);
  absl::StatusOr<core::PolicyConfig> config = policy::ToConfig(input);
  if (!config.ok()) return config.status();
  v1::Policy canonical = policy::FromConfig(*config);
  canonical.set_version(0);
  StoredPolicy stored;
  stored.name = canonical.name();
  stored.blob = Serialize(canonical);
  return stored;
}

}  // namespace

ClusterConfig::ClusterConfig(Store* store, policy::PolicyStore* policies,
                             core::Engine* engine, Options options)
    : store_(store),
      policies_(policies),
      engine_(engine),
      options_(std::move(options)) {}

absl::StatusOr<std::vector<StoredPolicy>> ClusterConfig::ToStored(
    const std::vector<v1::Policy>& policies) {
  std::vector<StoredPolicy> out;
  out.reserve(policies.size());
  for (const v1::Policy& p : policies) {
    absl::StatusOr<StoredPolicy> stored = Canonical(p);
    if (!stored.ok()) return stored.status();
    out.push_back(*std::move(stored));
  }
  return out;
}

absl::StatusOr<policy::PolicyChange> ClusterConfig::Put(
    const v1::Policy& policy, uint64_t expected_version) {
  absl::StatusOr<StoredPolicy> stored = Canonical(policy);
  if (!stored.ok()) return stored.status();
  // Against the set this replica holds: a write racing on another replica
  // can still slip past, and then the first policy by name answers the
  // descriptor or route (the rate-limit and HTTP check services log the
  // conflict).
  SLUICE_RETURN_IF_ERROR(policies_->CheckEnvoyDescriptors(policy));
  SLUICE_RETURN_IF_ERROR(policies_->CheckHttpRoutes(policy));
  absl::StatusOr<ConfigWrite> write =
      store_->PutPolicy(*stored, expected_version);
  if (!write.ok()) return write.status();
  if (write->old_version != write->new_version) {
    WaitApplied(write->config_version);
  }
  return policy::PolicyChange{stored->name, write->old_version,
                              write->new_version};
}

absl::StatusOr<policy::PolicyChange> ClusterConfig::Delete(
    absl::string_view name, uint64_t expected_version) {
  absl::StatusOr<ConfigWrite> write =
      store_->DeletePolicy(std::string(name), expected_version);
  if (!write.ok()) return write.status();
  WaitApplied(write->config_version);
  return policy::PolicyChange{std::string(name), write->old_version, 0};
}

absl::Status ClusterConfig::SetOverride(absl::string_view dependency,
                                        core::BreakerOverride override,
                                        const std::string& note) {
  absl::StatusOr<core::LivePolicyStatus> status = engine_->Inspect(dependency);
  if (!status.ok()) return status.status();
  if (!status->policy->breaker) {
    return absl::FailedPreconditionError(absl::StrCat(
        "policy \"", dependency, "\" has no breaker to override"));
  }
  StoredOverride stored;
  stored.dependency = std::string(dependency);
  stored.mode = override;
  stored.note = note;
  absl::StatusOr<ConfigWrite> write = store_->SetOverride(stored);
  if (!write.ok()) return write.status();
  WaitApplied(write->config_version);
  return absl::OkStatus();
}

bool ClusterConfig::WaitApplied(uint64_t version) {
  if (options_.nudge) options_.nudge();
  absl::MutexLock lock(&mu_);
  auto applied = [this, version]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return applied_version_ >= version;
  };
  if (mu_.AwaitWithTimeout(absl::Condition(&applied),
                           options_.apply_timeout)) {
    return true;
  }
  spdlog::warn(
      "config version {} is in the store but not applied here after {}; the "
      "sync loop will pick it up when the store answers",
      version, absl::FormatDuration(options_.apply_timeout));
  return false;
}

uint64_t ClusterConfig::applied_version() const {
  absl::MutexLock lock(&mu_);
  return applied_version_;
}

void ClusterConfig::Apply(const ConfigSnapshot& snapshot) {
  absl::MutexLock apply_lock(&apply_mu_);
  std::vector<v1::Policy> policies;
  policies.reserve(snapshot.policies.size());
  for (const StoredPolicy& stored : snapshot.policies) {
    v1::Policy policy;
    if (!policy.ParseFromString(stored.blob) || policy.name() != stored.name) {
      spdlog::error(
          "cluster config version {}: policy \"{}\" in the store does not "
          "parse; keeping the config in force",
          snapshot.version, stored.name);
      return;
    }
    policy.set_version(stored.version);
    policies.push_back(std::move(policy));
  }
  absl::StatusOr<std::vector<policy::PolicyChange>> changes =
      policies_->Adopt(policies);
  if (!changes.ok()) {
    spdlog::error(
        "cluster config version {} was rejected; keeping the config in "
        "force: {}",
        snapshot.version, changes.status().ToString());
    return;
  }
  const std::string source =
      absl::StrCat("cluster config version ", snapshot.version);
  absl::flat_hash_map<std::string, bool> created;
  for (const policy::PolicyChange& change : *changes) {
    if (change.old_version == 0) created[change.name] = true;
    if (options_.on_policy_change) options_.on_policy_change(change, source);
  }

  absl::flat_hash_map<std::string, const StoredOverride*> wanted;
  for (const StoredOverride& o : snapshot.overrides) wanted[o.dependency] = &o;
  absl::flat_hash_map<std::string, core::BreakerOverride> next;
  for (const auto& policy : engine_->Policies()) {
    if (!policy->breaker) continue;
    auto w = wanted.find(policy->name);
    const core::BreakerOverride mode =
        w == wanted.end() ? core::BreakerOverride::kAuto : w->second->mode;
    auto before = overrides_.find(policy->name);
    const core::BreakerOverride previous = before == overrides_.end()
                                               ? core::BreakerOverride::kAuto
                                               : before->second;
    if (mode != core::BreakerOverride::kAuto) next[policy->name] = mode;
    if (mode == previous && !created.count(policy->name)) continue;
    if (mode == previous && mode == core::BreakerOverride::kAuto) continue;
    const std::string note = w == wanted.end() ? "" : w->second->note;
    const std::string cause =
        absl::StrCat("operator override ", core::BreakerOverrideName(mode),
                     note.empty() ? "" : ": ", note, " (", source, ")");
    engine_->SetOverride(policy->name, mode, cause).IgnoreError();
    if (mode != previous && options_.on_override) {
      options_.on_override(policy->name, mode, cause);
    }
  }
  overrides_ = std::move(next);

  absl::MutexLock lock(&mu_);
  applied_version_ = snapshot.version;
}

}  // namespace sluice::cluster
