// SPDX-License-Identifier: Apache-2.0
#include "server/app/policies_file.h"

#include <utility>

#include "server/policy/policy_file.h"
#include "server/rpc/admin_backend.h"
#include "spdlog/spdlog.h"

namespace sluice::app {

absl::StatusOr<LoadedPolicies> LoadPoliciesFile(const ServerOptions& options,
                                                policy::PolicyStore* store) {
  LoadedPolicies loaded;
  const std::string& path = options.policies_path;
  if (path.empty()) {
    spdlog::warn(
        "no --policies file: starting with no policies; every dependency is "
        "unknown and gets --unknown-dependency={}",
        UnknownDependencyName(options.unknown_dependency));
    return loaded;
  }
  absl::StatusOr<std::string> contents = policy::ReadTextFile(path);
  if (!contents.ok()) return contents.status();
  absl::StatusOr<std::vector<v1::Policy>> policies =
      policy::ParsePolicies(*contents, path);
  if (!policies.ok()) return policies.status();
  absl::StatusOr<std::vector<policy::PolicyChange>> changes =
      store->ReplaceAll(*policies);
  if (!changes.ok()) return changes.status();
  for (const policy::PolicyChange& change : *changes) {
    spdlog::info("{}", rpc::DescribeChange(change, ""));
  }
  spdlog::info("loaded {} policies from {}", store->size(), path);
  loaded.contents = *std::move(contents);
  loaded.policies = *std::move(policies);
  return loaded;
}

std::unique_ptr<policy::FileWatcher> WatchPoliciesFile(
    const ServerOptions& options, const std::string& initial_contents,
    Mode* mode) {
  if (options.policies_path.empty()) return nullptr;
  policy::FileWatcher::Options watcher_options;
  watcher_options.interval = options.policies_poll_interval;
  auto watcher = std::make_unique<policy::FileWatcher>(
      options.policies_path, watcher_options,
      [mode, path = options.policies_path](const std::string& contents) {
        mode->OnPoliciesFileChanged(path, contents);
      },
      [path = options.policies_path](const std::string& error) {
        spdlog::error("policies file {}: {}; keeping the previous policies",
                      path, error);
      });
  watcher->Start(initial_contents);
  return watcher;
}

}  // namespace sluice::app
