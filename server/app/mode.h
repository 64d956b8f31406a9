// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_APP_MODE_H_
#define SLUICE_SERVER_APP_MODE_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/stats.h"
#include "server/app/options.h"
#include "server/cluster/store.h"
#include "server/core/clock.h"
#include "server/core/engine.h"
#include "server/core/events.h"
#include "server/policy/policy_store.h"
#include "server/rpc/admin_backend.h"
#include "server/rpc/admin_events.h"
#include "server/rpc/decision_service.h"
#include "sluice/v1/policy.pb.h"

namespace grpc {
class ServerBuilder;
}  // namespace grpc

namespace sluice::app {

// What Server has built when it starts a mode. Everything outlives the mode's
// Stop.
struct ModeContext {
  core::Engine* engine = nullptr;
  policy::PolicyStore* policies = nullptr;
  rpc::EventHub* events = nullptr;
  rpc::DecisionServiceImpl* decision_service = nullptr;
};

// How sluiced runs: StandaloneMode (all state in this process) or
// ClusterMode (shared through a store with the other replicas). A mode owns
// its wiring: what the policies file means after startup, where admin writes
// go, and the sync with the other replicas. Server builds the mode before the
// engine (the mode observes the engine's breaker transitions), calls Start
// once before serving and Stop once after draining; the rest may be called
// from any thread once Start has returned.
class Mode : public core::EventSink {
 public:
  ~Mode() override = default;

  // Adds this mode's settings to the engine's options.
  virtual void ConfigureEngine(core::Engine::Options* options) const = 0;

  // Wires the mode once the policies file is in ctx.policies;
  // `file_policies` is what the file holds. An error stops the server.
  virtual absl::Status Start(const ModeContext& ctx,
                             const std::vector<v1::Policy>& file_policies) = 0;

  // Where admin writes go; set by Start.
  virtual rpc::AdminBackend* admin_backend() = 0;
  // Adds what the mode serves on the data port (--listen) beside
  // DecisionService, with the listener settings it needs: a central
  // replica's lease service for its leaves. Called once, after Start; what
  // it registers outlives the gRPC server (Stop comes after its shutdown).
  virtual void AddDataServices(grpc::ServerBuilder* builder) {}
  // Said after "serving AdminService on HOST:PORT (token ..." in the log.
  virtual std::string admin_note() const = 0;

  // The watched policies file at `path` changed to `contents`. An error
  // (logged here) means the file was rejected and changed nothing.
  virtual absl::Status OnPoliciesFileChanged(const std::string& path,
                                             const std::string& contents) = 0;

  // What the mode exports to the metrics, once Start succeeded: cluster
  // mode's sync loop and store, standalone mode's state file keeper (with
  // --state-file). They live as long as the mode.
  virtual std::vector<const base::StatsSource*> stats_sources() const = 0;

  // Whether the server may report SERVING yet: asked when Start has
  // returned and the listeners are up, then by the housekeeping thread
  // until it says yes once. While it says no, `waiting` says for what.
  // Standalone: at once.
  virtual bool Ready(std::string* waiting) { return true; }

  // One cluster sync tick on the caller's thread, for tests that run the
  // server without its sync thread. FAILED_PRECONDITION standalone.
  virtual absl::Status SyncNow() = 0;

  // Stops the mode's threads, after the RPCs have drained.
  virtual void Stop() = 0;
};

// Makes cluster mode's store.
using StoreFactory = std::function<std::unique_ptr<cluster::Store>()>;

// The mode `options` ask for: standalone without --redis nor --upstream,
// else cluster with the store `store_factory` makes (when empty: a
// RedisStore for the --redis* flags, an UpstreamStore for --upstream) and
// the sync thread unless `sync_thread` is false. A central replica (any
// --redis* flag) wraps its store in a LeaseLedger and serves its leaves,
// unless --max-leaves is 0. Options that fail
// ValidateOptions make a mode that must not be started (Server::BuildAndStart
// refuses them first); `clock` must outlive the mode.
std::unique_ptr<Mode> MakeMode(const ServerOptions& options, core::Clock* clock,
                               StoreFactory store_factory,
                               const std::string& replica_id, bool sync_thread);

}  // namespace sluice::app

#endif  // SLUICE_SERVER_APP_MODE_H_
