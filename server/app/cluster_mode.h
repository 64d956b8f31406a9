// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_APP_CLUSTER_MODE_H_
#define SLUICE_SERVER_APP_CLUSTER_MODE_H_

#include <memory>
#include <string>
#include <vector>

#include "server/app/mode.h"
#include "server/app/options.h"
#include "server/cluster/cluster_config.h"
#include "server/cluster/leaf_server.h"
#include "server/cluster/lease_ledger.h"
#include "server/cluster/store.h"
#include "server/cluster/sync_loop.h"
#include "server/core/clock.h"
#include "server/tree/lease_service.h"
#include "server/tree/upstream_store.h"

namespace sluice::app {

// Cluster mode: cluster-scope limits, breakers and the operator config are
// shared with the other replicas through a cluster::Store, one SyncLoop tick
// at a time. The store holds the config: the policies file only seeds the
// policies the cluster does not have, and admin writes go to the store
// (compare-and-set) and return once this replica has applied them.
//
// The grant tree has two kinds of replica, both this mode. A central
// replica's store is Redis; unless --max-leaves is 0 its sync loop ticks
// through a LeaseLedger wrapped around it, and the lease service on the
// data port answers its leaves from that ledger (with 0 it refuses them,
// naming the flag). A leaf's store is an
// UpstreamStore (--upstream): its ticks are lease calls to a central
// replica, and its admin writes are refused naming the upstream.
// Thread-safety as Mode.
class ClusterMode final : public Mode {
 public:
  // The store a mode ticks through, as MakeMode builds it.
  struct StoreParts {
    // Redis (a central replica), the upstream (a leaf), or a test's store;
    // null with `error` set when it could not be made.
    std::unique_ptr<cluster::Store> store;
    absl::Status error;
    // A leaf's store again, for its upstream metrics; null otherwise.
    tree::UpstreamStore* upstream = nullptr;
  };

  // `clock` must outlive the mode. Without `sync_thread` nothing ticks
  // unless SyncNow is called, except that an admin write runs the tick it
  // waits for on its own thread (tests drive the cluster that way).
  ClusterMode(const ServerOptions& options, StoreParts store,
              core::Clock* clock, std::string replica_id, bool sync_thread);
  ~ClusterMode() override;

  void ConfigureEngine(core::Engine::Options* options) const override;
  // Builds the shared config and the sync loop, seeds the store with the
  // policies file, runs the first tick and starts the sync thread.
  absl::Status Start(const ModeContext& ctx,
                     const std::vector<v1::Policy>& file_policies) override;
  rpc::AdminBackend* admin_backend() override { return admin_backend_.get(); }
  // The lease service: a central replica's, or on a leaf or with
  // --max-leaves 0 one that refuses every leaf, naming why.
  void AddDataServices(grpc::ServerBuilder* builder) override;
  // A leaf's admin writes are refused (they belong on a central replica).
  std::string admin_note() const override;
  absl::Status OnPoliciesFileChanged(const std::string& path,
                                     const std::string& contents) override;
  // The sync loop and the store it ticks through (with a leaf's upstream
  // or a central replica's leaves).
  std::vector<const base::StatsSource*> stats_sources() const override;
  // Ready once every cluster-scope limit can admit a call here
  // (Engine::ClusterLimitsNotAdmitting), so that a new replica takes
  // traffic only once its share has come: after the store's first stale
  // period on a fresh store or a brand-new policy, or once the other
  // replicas gave up a share for it. At once with the store down. A limit
  // too small to leave this replica a share holds it back no longer than
  // a stale period and two intervals after Start's first tick.
  bool Ready(std::string* waiting) override;
  absl::Status SyncNow() override;
  // Stops the sync thread; its last tick carries the final counts and gives
  // this replica's grants back.
  void Stop() override;
  // A breaker changed here: tell the other replicas without waiting a tick.
  void OnBreakerTransition(const core::BreakerTransition& t) override;
  // An adaptive limit or throttle moved here: the next regular tick carries
  // it (a nudge per move would make every key's move a store round trip).
  void OnAdaptiveChange(const core::AdaptiveChange& c) override;
  // A cluster-scope gate refused a key the store has heard no demand for
  // (a new leaf's first calls, or a key that went quiet): tick soon, so
  // its demand reaches the store without waiting a whole interval.
  void OnClusterDemand(const std::string& dependency,
                       const std::string& key) override;

 private:
  // The sync loop's options, its callbacks going to `ctx`.
  cluster::SyncLoop::Options LoopOptions(const ModeContext& ctx);
  // ClusterConfig asks for a tick: it waits for its write to be applied.
  void OnConfigWritten();
  // What the sync loop and the config tick through: the ledger on a
  // central replica that serves leaves, else the store itself.
  cluster::Store* tick_store() const;
  // Where the grants come from, for GetState: "redis HOST:PORT" or
  // "upstream TARGET (peer ADDRESS)".
  std::string GrantSource() const;

  const absl::Duration sync_interval_;
  const uint32_t expected_replicas_;
  const std::unique_ptr<cluster::Store> store_;
  const absl::Status store_error_;
  tree::UpstreamStore* const upstream_;
  const std::string upstream_target_;
  core::Clock* const clock_;
  const std::string replica_id_;
  const bool sync_thread_;
  // A central replica serving leaves: the ledger around store_, and the
  // lease service on the data port that answers from it. A leaf, or a
  // central replica with --max-leaves 0, has no ledger: its lease service
  // answers every tick from no_leaves_, UNIMPLEMENTED saying why.
  const std::unique_ptr<cluster::LeaseLedger> ledger_;
  const std::unique_ptr<cluster::LeafServer> no_leaves_;
  std::unique_ptr<tree::LeaseServiceImpl> lease_service_;

  // Set by Start, before the server serves: breaker transitions come from
  // RPCs, the housekeeping and the sync thread, all started later, or from
  // Start's own first tick.
  std::unique_ptr<cluster::ClusterConfig> config_;
  core::Engine* engine_ = nullptr;
  // Ready() says yes from here on, whatever the limits (see Ready).
  absl::Time ready_by_ = absl::InfinitePast();
  std::unique_ptr<cluster::SyncLoop> sync_loop_;
  std::unique_ptr<rpc::AdminBackend> admin_backend_;
};

}  // namespace sluice::app

#endif  // SLUICE_SERVER_APP_CLUSTER_MODE_H_
