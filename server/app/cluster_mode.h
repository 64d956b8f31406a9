#ifndef SLUICE_SERVER_APP_CLUSTER_MODE_H_
#define SLUICE_SERVER_APP_CLUSTER_MODE_H_

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/app/mode.h"
#include "server/app/options.h"
#include "server/cluster/cluster_config.h"
#include "server/cluster/store.h"
#include "server/cluster/sync_loop.h"
#include "server/core/clock.h"

namespace sluice::app {

// Cluster mode: cluster-scope limits, breakers and the operator config are
// shared with the other replicas through a cluster::Store, one SyncLoop tick
// at a time. The store holds the config: the policies file only seeds the
// policies the cluster does not have, and admin writes go to the store
// (compare-and-set) and return once this replica has applied them.
// Thread-safety as Mode.
class ClusterMode final : public Mode {
 public:
  // `clock` must outlive the mode. Without `sync_thread` nothing ticks
  // unless SyncNow is called, except that an admin write runs the tick it
  // waits for on its own thread (tests drive the cluster that way).
  ClusterMode(const ServerOptions& options,
              std::unique_ptr<cluster::Store> store, core::Clock* clock,
              std::string replica_id, bool sync_thread);

  void ConfigureEngine(core::Engine::Options* options) const override;
  // Builds the shared config and the sync loop, seeds the store with the
  // policies file, runs the first tick and starts the sync thread.
  absl::Status Start(const ModeContext& ctx,
                     const std::vector<v1::Policy>& file_policies) override;
  rpc::AdminBackend* admin_backend() override { return admin_backend_.get(); }
  std::string admin_note() const override { return ""; }
  void OnPoliciesFileChanged(const std::string& path,
                             const std::string& contents) override;
  std::optional<metrics::SyncSnapshot> sync_snapshot() const override;
  absl::Status SyncNow() override;
  // Stops the sync thread; its last tick carries the final counts and gives
  // this replica's grants back.
  void Stop() override;
  // A breaker changed here: tell the other replicas without waiting a tick.
  void OnBreakerTransition(const core::BreakerTransition& t) override;
  // An adaptive limit or throttle moved here: the next regular tick carries
  // it (a nudge per move would make every key's move a store round trip).
  void OnAdaptiveChange(const core::AdaptiveChange& c) override;

 private:
  // The sync loop's options, its callbacks going to `ctx`.
  cluster::SyncLoop::Options LoopOptions(const ModeContext& ctx);
  // ClusterConfig asks for a tick: it waits for its write to be applied.
  void OnConfigWritten();

  const absl::Duration sync_interval_;
  const uint32_t expected_replicas_;
  const std::unique_ptr<cluster::Store> store_;
  core::Clock* const clock_;
  const std::string replica_id_;
  const bool sync_thread_;

  // Set by Start, before the server serves: breaker transitions come from
  // RPCs, the housekeeping and the sync thread, all started later, or from
  // Start's own first tick.
  std::unique_ptr<cluster::ClusterConfig> config_;
  std::unique_ptr<cluster::SyncLoop> sync_loop_;
  std::unique_ptr<rpc::AdminBackend> admin_backend_;
};

}  // namespace sluice::app

#endif  // SLUICE_SERVER_APP_CLUSTER_MODE_H_
