// SPDX-License-Identifier: Apache-2.0
#include "server/app/policies_file.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "server/core/clock.h"
#include "server/core/engine.h"
#include "server/policy/policy_convert.h"
#include "server/policy/policy_file.h"
#include "server/rpc/admin_backend.h"
#include "spdlog/spdlog.h"

namespace sluice::app {
namespace {

// "PATH: message", unless the message starts with the path already (the
// parser's errors do, with their line).
std::string AtFile(const std::string& path, absl::string_view message) {
  if (absl::StartsWith(message, absl::StrCat(path, ":"))) {
    return std::string(message);
  }
  return absl::StrCat(path, ": ", message);
}

// Parses `contents` and installs it in `store`; the policies read go to
// `policies`.
absl::StatusOr<std::vector<policy::PolicyChange>> Install(
    const std::string& path, const std::string& contents,
    policy::PolicyStore* store, std::vector<v1::Policy>* policies) {
  absl::StatusOr<policy::ParsedPolicies> file =
      policy::ParsePoliciesWithLines(contents, path);
  if (!file.ok()) return file.status();
  absl::StatusOr<std::vector<policy::PolicyChange>> changes =
      store->ReplaceAll(file->policies);
  if (!changes.ok()) {
    return absl::Status(changes.status().code(),
                        LocatePolicyError(path, *file, changes.status()));
  }
  *policies = std::move(file->policies);
  return changes;
}

}  // namespace

std::string LocatePolicyError(const std::string& path,
                              const policy::ParsedPolicies& file,
                              const absl::Status& error) {
  const std::optional<policy::ErrorLocation> where =
      policy::ErrorLocationOf(error);
  if (where.has_value()) {
    for (size_t i = 0; i < file.policies.size(); ++i) {
      if (file.policies[i].name() != where->policy) continue;
      const int line = policy::FieldLine(file.lines[i], where->field);
      if (line > 0) {
        return absl::StrCat(path, ":", line, ": ", error.message());
      }
    }
  }
  return AtFile(path, error.message());
}

absl::StatusOr<LoadedPolicies> InstallStartupPolicies(
    const ServerOptions& options, policy::PolicyStore* store) {
  LoadedPolicies loaded;
  const std::string& path = options.policies_path;
  if (path.empty()) {
    spdlog::warn(
        "no --policies file: starting with no policies; every dependency is "
        "unknown and gets --unknown-dependency={}",
        UnknownDependencyName(options.unknown_dependency));
    return loaded;
  }
  absl::StatusOr<std::string> contents = base::ReadRegularFile(path);
  if (!contents.ok()) return contents.status();
  absl::StatusOr<std::vector<policy::PolicyChange>> changes =
      Install(path, *contents, store, &loaded.policies);
  if (!changes.ok()) return changes.status();
  for (const policy::PolicyChange& change : *changes) {
    spdlog::info("{}", rpc::DescribeChange(change, ""));
  }
  spdlog::info("loaded {} policies from {}", store->size(), path);
  loaded.contents = *std::move(contents);
  return loaded;
}

absl::StatusOr<std::vector<policy::PolicyChange>> InstallPoliciesFile(
    const std::string& path, const std::string& contents,
    policy::PolicyStore* store) {
  std::vector<v1::Policy> policies;
  return Install(path, contents, store, &policies);
}

PoliciesFileCheck CheckPoliciesFile(const std::string& path) {
  PoliciesFileCheck check;
  absl::StatusOr<std::string> contents = base::ReadRegularFile(path);
  if (!contents.ok()) {
    check.errors.push_back(AtFile(path, contents.status().message()));
    return check;
  }
  absl::StatusOr<policy::ParsedPolicies> file =
      policy::ParsePoliciesWithLines(*contents, path);
  if (!file.ok()) {
    check.errors.push_back(AtFile(path, file.status().message()));
    return check;
  }
  check.policies = file->policies.size();
  // Each policy on its own first, so that every invalid one is reported.
  for (const v1::Policy& policy : file->policies) {
    v1::Policy input = policy;
    input.set_version(0);  // output only, as the store treats it
    absl::StatusOr<core::PolicyConfig> config = policy::ToConfig(input);
    if (!config.ok()) {
      check.errors.push_back(LocatePolicyError(path, *file, config.status()));
    }
  }
  if (!check.errors.empty()) return check;
  // Then the whole set, exactly as a load installs it.
  core::Engine engine(core::RealClock::Get(), core::Engine::Options());
  policy::PolicyStore store(&engine);
  absl::StatusOr<std::vector<policy::PolicyChange>> changes =
      store.ReplaceAll(file->policies);
  if (!changes.ok()) {
    check.errors.push_back(LocatePolicyError(path, *file, changes.status()));
  }
  return check;
}

void PolicyReloads::Record(const absl::Status& result) {
  absl::MutexLock lock(&mu_);
  if (result.ok()) {
    ++stats_.ok;
  } else {
    ++stats_.error;
  }
  stats_.last_failed = !result.ok();
}

PolicyReloads::Stats PolicyReloads::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void PolicyReloads::WriteStats(base::StatsWriter& out) const {
  const Stats s = stats();
  static constexpr base::MetricDef kPolicyReloads = base::CounterDef(
      "sluice_policy_reloads_total", {"result"},
      "Changes of the policies file (--policies) by result: ok (its "
      "policies are in force; in cluster mode, they seed the store) or "
      "error (unreadable or invalid; the previous policies stay and the "
      "log says why). Only with --policies.");
  out.WriteBy(kPolicyReloads, {{"ok", s.ok}, {"error", s.error}});
  static constexpr base::MetricDef kPolicyReloadLastError = base::GaugeDef(
      "sluice_policy_reload_last_error", {},
      "1 while the latest change of the policies file was rejected (the "
      "file on disk is not what is in force), 0 otherwise. Only with "
      "--policies.");
  out.Write(kPolicyReloadLastError, s.last_failed ? 1 : 0);
}

std::unique_ptr<base::FileWatcher> WatchPoliciesFile(
    const ServerOptions& options, const std::string& initial_contents,
    Mode* mode, PolicyReloads* reloads) {
  if (options.policies_path.empty()) return nullptr;
  base::FileWatcher::Options watcher_options;
  watcher_options.interval = options.policies_poll_interval;
  auto watcher = std::make_unique<base::FileWatcher>(
      options.policies_path, watcher_options,
      [mode, reloads,
       path = options.policies_path](const std::string& contents) {
        reloads->Record(mode->OnPoliciesFileChanged(path, contents));
      },
      [reloads, path = options.policies_path](const std::string& error) {
        spdlog::error("policies file {}: {}; keeping the previous policies",
                      path, error);
        reloads->Record(absl::UnavailableError(error));
      });
  watcher->Start(initial_contents);
  return watcher;
}

}  // namespace sluice::app
