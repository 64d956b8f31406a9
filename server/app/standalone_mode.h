// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_APP_STANDALONE_MODE_H_
#define SLUICE_SERVER_APP_STANDALONE_MODE_H_

#include <memory>
#include <string>
#include <vector>

#include "server/app/mode.h"
#include "server/app/options.h"
#include "server/app/state_keeper.h"
#include "server/core/clock.h"

namespace sluice::app {

// Standalone: every policy, breaker and admin change lives in this process.
// A policies file edit replaces the policies in force (an invalid edit is
// logged and ignored); admin writes apply here only. With --state-file, the
// warm state (adaptive limits, baselines, OPEN breakers) is read back at
// Start and written every interval and at Stop. Thread-safety as Mode.
class StandaloneMode final : public Mode {
 public:
  // `clock` (the engine's) must outlive the mode.
  StandaloneMode(const ServerOptions& options, core::Clock* clock);

  void ConfigureEngine(core::Engine::Options* options) const override {}
  absl::Status Start(const ModeContext& ctx,
                     const std::vector<v1::Policy>& file_policies) override;
  rpc::AdminBackend* admin_backend() override { return admin_backend_.get(); }
  std::string admin_note() const override {
    return "; standalone: admin changes apply to this process only";
  }
  absl::Status OnPoliciesFileChanged(const std::string& path,
                                     const std::string& contents) override;
  std::vector<const base::StatsSource*> stats_sources() const override;
  absl::Status SyncNow() override;
  // Writes the state file one last time.
  void Stop() override;
  // No other replica to tell.
  void OnBreakerTransition(const core::BreakerTransition& t) override {}
  void OnAdaptiveChange(const core::AdaptiveChange& c) override {}

 private:
  const StateFileKeeper::Options state_file_;  // path "": none
  core::Clock* const clock_;

  // Set by Start.
  ModeContext ctx_;
  std::unique_ptr<rpc::AdminBackend> admin_backend_;
  std::unique_ptr<StateFileKeeper> state_keeper_;
};

}  // namespace sluice::app

#endif  // SLUICE_SERVER_APP_STANDALONE_MODE_H_
