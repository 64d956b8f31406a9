// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_APP_POLICIES_FILE_H_
#define SLUICE_SERVER_APP_POLICIES_FILE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/app/mode.h"
#include "server/app/options.h"
#include "server/policy/file_watcher.h"
#include "server/policy/policy_store.h"
#include "sluice/v1/policy.pb.h"

namespace sluice::app {

// The --policies file as read at startup.
struct LoadedPolicies {
  std::string contents;
  std::vector<v1::Policy> policies;
};

// Reads options.policies_path and installs it in `store`, logging each
// policy; with no file, warns and installs nothing. A file that cannot be
// read or is invalid is an error: sluiced does not start on it.
absl::StatusOr<LoadedPolicies> LoadPoliciesFile(const ServerOptions& options,
                                                policy::PolicyStore* store);

// Watches options.policies_path (nullptr without one), starting from
// `initial_contents`: each change goes to mode->OnPoliciesFileChanged, and
// an unreadable file is logged. `mode` must outlive the watcher.
std::unique_ptr<policy::FileWatcher> WatchPoliciesFile(
    const ServerOptions& options, const std::string& initial_contents,
    Mode* mode);

}  // namespace sluice::app

#endif  // SLUICE_SERVER_APP_POLICIES_FILE_H_
