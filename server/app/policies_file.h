// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_APP_POLICIES_FILE_H_
#define SLUICE_SERVER_APP_POLICIES_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "base/stats.h"
#include "server/app/mode.h"
#include "server/app/options.h"
#include "base/file_watcher.h"
#include "server/policy/policy_file.h"
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
absl::StatusOr<LoadedPolicies> InstallStartupPolicies(
    const ServerOptions& options, policy::PolicyStore* store);

// Parses `contents` (the policies file at `path`) and makes it the whole set
// in `store` (PolicyStore::ReplaceAll). A rejected file leaves the store as
// it was; the error reads "PATH:LINE: message", the line being the field's
// that broke a rule.
absl::StatusOr<std::vector<policy::PolicyChange>> InstallPoliciesFile(
    const std::string& path, const std::string& contents,
    policy::PolicyStore* store);

// `error`, from validating the policies of `file` (read from `path`), as
// "PATH:LINE: message" at the line of the field it names (see
// policy::ErrorLocation); "PATH: message" when it names none.
std::string LocatePolicyError(const std::string& path,
                              const policy::ParsedPolicies& file,
                              const absl::Status& error);

// What `sluiced --check` found in one policies file.
struct PoliciesFileCheck {
  // Each problem compiler style, "PATH:LINE: message" ("PATH: message" when
  // it has no line, e.g. an unreadable file). Empty: the file is valid.
  std::vector<std::string> errors;
  // Policies the file defines (when it parses).
  size_t policies = 0;
};

// Checks the policies file at `path` the way sluiced loads it at start,
// without serving: the same reader (bounded size, regular files only), the
// same parser, every policy's validation (each invalid policy is reported,
// not only the first), then the checks across policies (two policies
// claiming one Envoy descriptor, ...) of a throwaway PolicyStore.
PoliciesFileCheck CheckPoliciesFile(const std::string& path);

// Reloads of the watched policies file: each change of the file is ok (the
// new policies are in force, or in cluster mode seed the store) or error
// (unreadable or rejected; the previous policies stay). Safe for concurrent
// use.
class PolicyReloads final : public base::StatsSource {
 public:
  struct Stats {
    uint64_t ok = 0;
    uint64_t error = 0;
    // The latest reload failed: the file on disk is not what is in force.
    bool last_failed = false;
  };

  void Record(const absl::Status& result) ABSL_LOCKS_EXCLUDED(mu_);
  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  // stats() as sluice_policy_reloads_total and
  // sluice_policy_reload_last_error.
  void WriteStats(base::StatsWriter& out) const override
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

// Watches options.policies_path (nullptr without one), starting from
// `initial_contents`: each change goes to mode->OnPoliciesFileChanged, and
// an unreadable file is logged; both are counted in `reloads`. `mode` and
// `reloads` must outlive the watcher.
std::unique_ptr<base::FileWatcher> WatchPoliciesFile(
    const ServerOptions& options, const std::string& initial_contents,
    Mode* mode, PolicyReloads* reloads);

}  // namespace sluice::app

#endif  // SLUICE_SERVER_APP_POLICIES_FILE_H_
