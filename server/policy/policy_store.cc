// SPDX-License-Identifier: Apache-2.0
#include "server/policy/policy_store.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/policy/policy_convert.h"
#include "wire/status.h"

namespace sluice::policy {
namespace {

// A policy that passed validation: the config for the engine and the
// canonical proto (defaults written out, version 0) for comparing content.
struct Checked {
  core::PolicyConfig config;
  v1::Policy canonical;
};

// Makes `next` the whole set: its canonical forms for the store, its configs
// for the engine. Runs under the store's lock, so that the engine sees
// changes in the store's order.
void InstallAll(std::map<std::string, Checked, std::less<>> next,
                std::map<std::string, v1::Policy, std::less<>>* policies,
                core::Engine* engine) {
  std::map<std::string, v1::Policy, std::less<>> stored;
  std::vector<core::PolicyConfig> configs;
  configs.reserve(next.size());
  for (auto& [name, checked] : next) {
    stored.emplace(name, std::move(checked.canonical));
    configs.push_back(std::move(checked.config));
  }
  *policies = std::move(stored);
  engine->ReplacePolicies(std::move(configs));
}

absl::StatusOr<Checked> Check(const v1::Policy& policy) {
  v1::Policy input = policy;
  input.set_version(0);  // output only; the store assigns it
  absl::StatusOr<core::PolicyConfig> config = ToConfig(input);
  if (!config.ok()) return config.status();
  Checked checked{*std::move(config), v1::Policy()};
  checked.canonical = FromConfig(checked.config);
  return checked;
}

bool SameContent(const v1::Policy& stored, const v1::Policy& canonical) {
  v1::Policy a = stored;
  a.set_version(0);
  return google::protobuf::util::MessageDifferencer::Equals(a, canonical);
}

}  // namespace

// INVALID_ARGUMENT if two of `policies` claim the same Envoy descriptor: a
// rate-limit request must find exactly one policy.
absl::Status CheckEnvoyDescriptors(
    const std::vector<const v1::Policy*>& policies) {
  std::map<std::string, const v1::Policy*> owner;
  for (const v1::Policy* policy : policies) {
    for (int i = 0; i < policy->envoy_descriptors_size(); ++i) {
      const v1::EnvoyDescriptor& d = policy->envoy_descriptors(i);
      std::string id = absl::StrCat(d.domain().size(), ":", d.domain());
      for (const v1::EnvoyDescriptor::Entry& e : d.entries()) {
        absl::StrAppend(&id, "|", e.key().size(), ":", e.key(),
                        e.value().size(), ":", e.value());
      }
      auto [it, inserted] = owner.emplace(std::move(id), policy);
      if (!inserted && it->second != policy) {
        core::EnvoyDescriptorConfig config;
        config.domain = d.domain();
        for (const v1::EnvoyDescriptor::Entry& e : d.entries()) {
          config.entries.push_back({e.key(), e.value()});
        }
        return AttachErrorLocation(
            absl::InvalidArgumentError(absl::StrCat(
                "policies \"", it->second->name(), "\" and \"",
                policy->name(), "\" both answer the Envoy descriptor ",
                EnvoyDescriptorString(config),
                "; a descriptor must map to one policy")),
            {policy->name(), absl::StrCat("envoy_descriptors[", i, "]")});
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckHttpRoutes(const std::vector<const v1::Policy*>& policies) {
  // Routes that tie have the same TieGroup; only those are compared.
  struct Claim {
    const v1::Policy* policy;
    int index;
    core::HttpRouteConfig route;
  };
  std::map<std::string, std::vector<Claim>> groups;
  for (const v1::Policy* policy : policies) {
    for (int i = 0; i < policy->http_routes_size(); ++i) {
      Claim claim{policy, i, CanonicalHttpRoute(policy->http_routes(i))};
      std::vector<Claim>& group = groups[claim.route.TieGroup()];
      for (const Claim& other : group) {
        if (other.policy == policy || !other.route.Overlaps(claim.route)) {
          continue;
        }
        return AttachErrorLocation(
            absl::InvalidArgumentError(absl::StrCat(
                "policies \"", other.policy->name(), "\" and \"",
                policy->name(), "\" both answer HTTP requests to ",
                HttpRouteString(claim.route),
                " equally specifically (their http_routes[", other.index,
                "] and http_routes[", i,
                "]); a request must map to one policy")),
            {policy->name(), absl::StrCat("http_routes[", i, "]")});
      }
      group.push_back(std::move(claim));
    }
  }
  return absl::OkStatus();
}

namespace {

absl::Status CheckSetEnvoyDescriptors(
    const std::map<std::string, Checked, std::less<>>& next) {
  std::vector<const v1::Policy*> all;
  all.reserve(next.size());
  for (const auto& [name, checked] : next) all.push_back(&checked.canonical);
  SLUICE_RETURN_IF_ERROR(policy::CheckEnvoyDescriptors(all));
  return policy::CheckHttpRoutes(all);
}

absl::Status VersionMismatch(absl::string_view name, uint64_t expected,
                             const v1::Policy* stored) {
  if (stored == nullptr) {
    return absl::AbortedError(absl::StrCat("policy \"", name,
                                           "\": expected version ", expected,
                                           ", but the policy does not exist"));
  }
  return absl::AbortedError(
      absl::StrCat("policy \"", name, "\": expected version ", expected,
                   ", but the stored version is ", stored->version()));
}

}  // namespace

PolicyStore::PolicyStore(core::Engine* engine) : engine_(engine) {}

absl::StatusOr<std::vector<PolicyChange>> PolicyStore::ReplaceAll(
    const std::vector<v1::Policy>& policies) {
  // Validate everything before touching any state.
  std::map<std::string, Checked, std::less<>> next;
  for (const v1::Policy& policy : policies) {
    absl::StatusOr<Checked> checked = Check(policy);
    if (!checked.ok()) return checked.status();
    const std::string name = checked->config.name;
    if (!next.emplace(name, *std::move(checked)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy \"", name, "\": defined more than once"));
    }
  }
  SLUICE_RETURN_IF_ERROR(CheckSetEnvoyDescriptors(next));

  absl::MutexLock lock(&mu_);
  std::vector<PolicyChange> changes;
  // Both maps are sorted by name; walk them together.
  auto old_it = policies_.begin();
  auto new_it = next.begin();
  while (old_it != policies_.end() || new_it != next.end()) {
    if (new_it == next.end() ||
        (old_it != policies_.end() && old_it->first < new_it->first)) {
      changes.push_back({old_it->first, old_it->second.version(), 0});
      ++old_it;
      continue;
    }
    Checked& checked = new_it->second;
    if (old_it != policies_.end() && old_it->first == new_it->first) {
      if (SameContent(old_it->second, checked.canonical)) {
        checked.config.version = old_it->second.version();
      } else {
        checked.config.version = ++last_version_;
        changes.push_back(
            {new_it->first, old_it->second.version(), checked.config.version});
      }
      ++old_it;
    } else {
      checked.config.version = ++last_version_;
      changes.push_back({new_it->first, 0, checked.config.version});
    }
    checked.canonical.set_version(checked.config.version);
    ++new_it;
  }
  if (changes.empty()) return changes;

  InstallAll(std::move(next), &policies_, engine_);
  return changes;
}

absl::StatusOr<std::vector<PolicyChange>> PolicyStore::Adopt(
    const std::vector<v1::Policy>& policies) {
  std::map<std::string, Checked, std::less<>> next;
  for (const v1::Policy& policy : policies) {
    absl::StatusOr<Checked> checked = Check(policy);
    if (!checked.ok()) return checked.status();
    checked->config.version = policy.version();
    checked->canonical.set_version(policy.version());
    const std::string name = checked->config.name;
    if (!next.emplace(name, *std::move(checked)).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("policy \"", name, "\": defined more than once"));
    }
  }

  absl::MutexLock lock(&mu_);
  std::vector<PolicyChange> changes;
  for (const auto& [name, stored] : policies_) {
    if (next.find(name) == next.end()) {
      changes.push_back({name, stored.version(), 0});
    }
  }
  for (const auto& [name, checked] : next) {
    last_version_ = std::max(last_version_, checked.config.version);
    auto it = policies_.find(name);
    if (it == policies_.end()) {
      changes.push_back({name, 0, checked.config.version});
    } else if (it->second.version() != checked.config.version ||
               !google::protobuf::util::MessageDifferencer::Equals(
                   it->second, checked.canonical)) {
      changes.push_back({name, it->second.version(), checked.config.version});
    }
  }
  if (changes.empty()) return changes;
  std::sort(changes.begin(), changes.end(),
            [](const PolicyChange& a, const PolicyChange& b) {
              return a.name < b.name;
            });

  InstallAll(std::move(next), &policies_, engine_);
  return changes;
}

absl::StatusOr<PolicyChange> PolicyStore::Put(const v1::Policy& policy,
                                              uint64_t expected_version) {
  absl::StatusOr<Checked> checked = Check(policy);
  if (!checked.ok()) return checked.status();
  const std::string& name = checked->config.name;

  absl::MutexLock lock(&mu_);
  auto it = policies_.find(name);
  const v1::Policy* stored = it == policies_.end() ? nullptr : &it->second;
  if (expected_version != 0 &&
      (stored == nullptr || stored->version() != expected_version)) {
    return VersionMismatch(name, expected_version, stored);
  }
  SLUICE_RETURN_IF_ERROR(CheckEnvoyDescriptorsLocked(checked->canonical));
  SLUICE_RETURN_IF_ERROR(CheckHttpRoutesLocked(checked->canonical));
  if (stored != nullptr && SameContent(*stored, checked->canonical)) {
    return PolicyChange{name, stored->version(), stored->version()};
  }
  PolicyChange change{name, stored == nullptr ? 0 : stored->version(),
                      ++last_version_};
  checked->config.version = change.new_version;
  checked->canonical.set_version(change.new_version);
  policies_[name] = std::move(checked->canonical);
  engine_->PutPolicy(std::move(checked->config));
  return change;
}

absl::Status PolicyStore::CheckEnvoyDescriptors(
    const v1::Policy& policy) const {
  absl::MutexLock lock(&mu_);
  return CheckEnvoyDescriptorsLocked(policy);
}

absl::Status PolicyStore::CheckEnvoyDescriptorsLocked(
    const v1::Policy& policy) const {
  if (policy.envoy_descriptors_size() == 0) return absl::OkStatus();
  std::vector<const v1::Policy*> all;
  all.reserve(policies_.size() + 1);
  for (const auto& [name, stored] : policies_) {
    if (name != policy.name()) all.push_back(&stored);
  }
  all.push_back(&policy);
  return policy::CheckEnvoyDescriptors(all);
}

absl::Status PolicyStore::CheckHttpRoutes(const v1::Policy& policy) const {
  if (policy.http_routes_size() == 0) return absl::OkStatus();
  absl::StatusOr<Checked> checked = Check(policy);
  if (!checked.ok()) return checked.status();
  absl::MutexLock lock(&mu_);
  return CheckHttpRoutesLocked(checked->canonical);
}

absl::Status PolicyStore::CheckHttpRoutesLocked(
    const v1::Policy& canonical) const {
  if (canonical.http_routes_size() == 0) return absl::OkStatus();
  std::vector<const v1::Policy*> all;
  all.reserve(policies_.size() + 1);
  for (const auto& [name, stored] : policies_) {
    if (name != canonical.name()) all.push_back(&stored);
  }
  all.push_back(&canonical);
  return policy::CheckHttpRoutes(all);
}

absl::StatusOr<PolicyChange> PolicyStore::Delete(absl::string_view name,
                                                 uint64_t expected_version) {
  absl::MutexLock lock(&mu_);
  auto it = policies_.find(name);
  if (it == policies_.end()) {
    return absl::NotFoundError(absl::StrCat("policy \"", name, "\" not found"));
  }
  if (expected_version != 0 && it->second.version() != expected_version) {
    return VersionMismatch(name, expected_version, &it->second);
  }
  PolicyChange change{it->first, it->second.version(), 0};
  policies_.erase(it);
  engine_->DeletePolicy(name);
  return change;
}

absl::StatusOr<v1::Policy> PolicyStore::Get(absl::string_view name) const {
  absl::MutexLock lock(&mu_);
  auto it = policies_.find(name);
  if (it == policies_.end()) {
    return absl::NotFoundError(absl::StrCat("policy \"", name, "\" not found"));
  }
  return it->second;
}

std::vector<v1::Policy> PolicyStore::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<v1::Policy> out;
  out.reserve(policies_.size());
  for (const auto& [name, policy] : policies_) out.push_back(policy);
  return out;
}

size_t PolicyStore::size() const {
  absl::MutexLock lock(&mu_);
  return policies_.size();
}

}  // namespace sluice::policy
