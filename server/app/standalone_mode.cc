// SPDX-License-Identifier: Apache-2.0
#include "server/app/standalone_mode.h"

#include "absl/strings/str_cat.h"
#include "server/app/policies_file.h"
#include "spdlog/spdlog.h"

namespace sluice::app {
namespace {

StateFileKeeper::Options StateFileOptions(const ServerOptions& options) {
  StateFileKeeper::Options out;
  out.path = options.state_file;
  out.interval = options.state_file_interval;
  return out;
}

}  // namespace

StandaloneMode::StandaloneMode(const ServerOptions& options,
                               core::Clock* clock)
    : state_file_(StateFileOptions(options)), clock_(clock) {}

absl::Status StandaloneMode::Start(
    const ModeContext& ctx, const std::vector<v1::Policy>& file_policies) {
  ctx_ = ctx;
  admin_backend_ = std::make_unique<rpc::LocalAdminBackend>(
      ctx.policies, ctx.engine, ctx.events);
  if (!state_file_.path.empty()) {
    // The policies are in force: the saved state finds its policies.
    state_keeper_ =
        std::make_unique<StateFileKeeper>(state_file_, ctx.engine, clock_);
    state_keeper_->Restore();
    state_keeper_->Start();
  }
  return absl::OkStatus();
}

std::vector<const base::StatsSource*> StandaloneMode::stats_sources() const {
  // Set in Start and never reset.
  if (state_keeper_ == nullptr) return {};
  return {state_keeper_.get()};
}

void StandaloneMode::Stop() {
  if (state_keeper_ != nullptr) state_keeper_->Stop();
}

absl::Status StandaloneMode::OnPoliciesFileChanged(
    const std::string& path, const std::string& contents) {
  absl::StatusOr<std::vector<policy::PolicyChange>> changes =
      InstallPoliciesFile(path, contents, ctx_.policies);
  if (!changes.ok()) {
    spdlog::error(
        "policies file {} changed but was rejected; keeping the previous "
        "policies: {}",
        path, changes.status().ToString());
    return changes.status();
  }
  if (changes->empty()) {
    spdlog::info("policies file {} changed; no policy changed", path);
    return absl::OkStatus();
  }
  for (const policy::PolicyChange& change : *changes) {
    spdlog::info("reload: {}", rpc::DescribeChange(change, ""));
    ctx_.events->Publish(rpc::PolicyChangedEvent(
        change.name, change.old_version, change.new_version,
        rpc::DescribeChange(change, path)));
  }
  spdlog::info("reloaded {}: {} policies in force", path,
               ctx_.policies->size());
  return absl::OkStatus();
}

absl::Status StandaloneMode::SyncNow() {
  return absl::FailedPreconditionError(
      "standalone: there is no cluster to sync with");
}

}  // namespace sluice::app
