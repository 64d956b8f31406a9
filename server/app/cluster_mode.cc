// SPDX-License-Identifier: Apache-2.0
#include "server/app/cluster_mode.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/app/policies_file.h"
#include "server/policy/policy_file.h"
#include "spdlog/spdlog.h"

namespace sluice::app {
namespace {

// Admin writes go to the cluster store (with compare-and-set) and return
// once this replica has applied them; every other replica applies them on
// its next tick. Reads answer from this replica's policy store. Safe for
// concurrent use.
class ClusterAdminBackend final : public rpc::AdminBackend {
 public:
  // Adds where the grants come from to a ClusterView.
  using Describe = std::function<void(rpc::ClusterView*)>;

  // All must outlive the backend.
  ClusterAdminBackend(cluster::ClusterConfig* config,
                      const cluster::SyncLoop* sync_loop,
                      const ModeContext& ctx, Describe describe)
      : config_(config),
        sync_loop_(sync_loop),
        local_(ctx.policies, ctx.engine, ctx.events),
        describe_(std::move(describe)) {}

  absl::StatusOr<policy::PolicyChange> PutPolicy(
      const v1::Policy& policy, uint64_t expected_version) override {
    return config_->Put(policy, expected_version);
  }
  absl::StatusOr<policy::PolicyChange> DeletePolicy(
      absl::string_view name, uint64_t expected_version) override {
    return config_->Delete(name, expected_version);
  }
  absl::StatusOr<v1::Policy> GetPolicy(absl::string_view name) override {
    return local_.GetPolicy(name);
  }
  std::vector<v1::Policy> ListPolicies() override {
    return local_.ListPolicies();
  }
  absl::Status SetOverride(absl::string_view dependency,
                           core::BreakerOverride override,
                           const std::string& note) override {
    return config_->SetOverride(dependency, override, note);
  }
  rpc::ClusterView cluster() override {
    rpc::ClusterView view;
    view.cluster = true;
    const cluster::SyncStats stats = sync_loop_->stats();
    view.store_status = stats.store_up ? "up" : "down";
    view.live_replicas = stats.live_replicas;
    describe_(&view);
    return view;
  }

 private:
  cluster::ClusterConfig* const config_;
  const cluster::SyncLoop* const sync_loop_;
  rpc::LocalAdminBackend local_;
  const Describe describe_;
};

// A central replica's ledger, unless it serves no leaves (--max-leaves 0)
// or has no store to wrap.
std::unique_ptr<cluster::LeaseLedger> MakeLedger(
    const ServerOptions& options, cluster::Store* store, core::Clock* clock,
    const std::string& replica_id, std::function<void()> nudge) {
  if (!CentralReplica(options) || options.max_leaves == 0 || store == nullptr) {
    return nullptr;
  }
  cluster::LeaseLedger::Options ledger;
  ledger.replica_id = replica_id;
  // The sync loop's stale period (SyncLoop::Options::stale_ticks intervals).
  ledger.stale_after =
      options.sync_interval * cluster::SyncLoop::Options().stale_ticks;
  ledger.interval = options.sync_interval;
  // The margin covers a leaf's round trip and the clocks' drift; with a
  // short tick it may not eat most of the central's grant.
  ledger.margin = std::min(ledger.margin, options.sync_interval / 2);
  ledger.max_leaves = options.max_leaves;
  ledger.nudge = std::move(nudge);
  return std::make_unique<cluster::LeaseLedger>(store, clock,
                                                std::move(ledger));
}

// The lease service's answer on a replica that serves no leaves: a leaf
// pointed at it is told why, where gRPC alone would answer a bare
// UNIMPLEMENTED for a service it does not know. Safe for concurrent use.
class NoLeaves final : public cluster::LeafServer {
 public:
  explicit NoLeaves(std::string why) : why_(std::move(why)) {}
  absl::StatusOr<cluster::TickReply> ServeLeaf(
      const cluster::TickRequest&) override {
    return absl::UnimplementedError(why_);
  }

 private:
  const std::string why_;
};

std::unique_ptr<cluster::LeafServer> MakeNoLeaves(
    const ServerOptions& options) {
  if (LeafReplica(options)) {
    return std::make_unique<NoLeaves>(absl::StrCat(
        "this replica is a leaf (--upstream ", options.upstream,
        ") and serves no leaves; point --upstream at a central replica"));
  }
  if (CentralReplica(options) && options.max_leaves == 0) {
    return std::make_unique<NoLeaves>(
        "this replica serves no leaves (--max-leaves 0); point --upstream at "
        "a central replica started with --max-leaves above 0");
  }
  return nullptr;
}

}  // namespace

ClusterMode::ClusterMode(const ServerOptions& options, StoreParts store,
                         core::Clock* clock, std::string replica_id,
                         bool sync_thread)
    : sync_interval_(options.sync_interval),
      expected_replicas_(options.expected_replicas),
      store_(std::move(store.store)),
      store_error_(store_ == nullptr && store.error.ok()
                       ? absl::InternalError("no cluster store was made")
                       : std::move(store.error)),
      upstream_(store.upstream),
      upstream_target_(options.upstream),
      clock_(clock),
      replica_id_(std::move(replica_id)),
      sync_thread_(sync_thread),
      // A leaf's breaker report or first demand: tick soon. The lease
      // service that calls it starts serving after Start set sync_loop_.
      ledger_(MakeLedger(options, store_.get(), clock, replica_id_, [this] {
        if (sync_thread_ && sync_loop_ != nullptr) sync_loop_->Nudge();
      })),
      no_leaves_(ledger_ == nullptr ? MakeNoLeaves(options) : nullptr) {}

ClusterMode::~ClusterMode() = default;

std::string ClusterMode::admin_note() const {
  if (upstream_target_.empty()) return "";
  return absl::StrCat("; a leaf of ", upstream_target_,
                      ": reads only, admin writes go to a central replica");
}

cluster::Store* ClusterMode::tick_store() const {
  if (ledger_ != nullptr) return ledger_.get();
  return store_.get();
}

void ClusterMode::AddDataServices(grpc::ServerBuilder* builder) {
  if (lease_service_ == nullptr) return;
  // Half the leaves' keepalive interval: a ping a little early is no
  // strike.
  tree::AddLeaseServerArguments(
      builder, tree::UpstreamStore::Options().keepalive_time / 2);
  builder->RegisterService(lease_service_.get());
}

std::string ClusterMode::GrantSource() const {
  if (upstream_ != nullptr) {
    const tree::UpstreamStats stats = upstream_->stats();
    return absl::StrCat(store_->Describe(), " (peer ",
                        stats.peer.empty() ? "none yet" : stats.peer, ")");
  }
  return store_ != nullptr ? store_->Describe() : "";
}

void ClusterMode::ConfigureEngine(core::Engine::Options* options) const {
  options->cluster = true;
  // A report that reached another replica arrives here within two ticks.
  options->permit_grace = 2 * sync_interval_;
  options->expected_replicas = expected_replicas_;
}

absl::Status ClusterMode::Start(const ModeContext& ctx,
                                const std::vector<v1::Policy>& file_policies) {
  if (store_ == nullptr) return store_error_;
  cluster::ClusterConfig::Options config_options;
  config_options.nudge = [this] { OnConfigWritten(); };
  config_options.on_policy_change = [events = ctx.events](
                                        const policy::PolicyChange& change,
                                        const std::string& source) {
    spdlog::info("{} ({})", rpc::DescribeChange(change, ""), source);
    events->Publish(rpc::PolicyChangedEvent(
        change.name, change.old_version, change.new_version,
        rpc::DescribeChange(change, source)));
  };
  config_options.on_override = [events = ctx.events](
                                   const std::string& dependency,
                                   core::BreakerOverride override,
                                   const std::string& cause) {
    spdlog::warn("breaker \"{}\": {}", dependency, cause);
    events->Publish(rpc::OverrideEvent(dependency, override, cause));
  };
  config_ = std::make_unique<cluster::ClusterConfig>(
      tick_store(), ctx.policies, ctx.engine, config_options);
  sync_loop_ = std::make_unique<cluster::SyncLoop>(ctx.engine, tick_store(),
                                                   clock_, LoopOptions(ctx));
  admin_backend_ = std::make_unique<ClusterAdminBackend>(
      config_.get(), sync_loop_.get(), ctx, [this](rpc::ClusterView* view) {
        view->grant_source = GrantSource();
        if (ledger_ != nullptr) view->leaves = ledger_->stats().leaves;
      });
  if (ledger_ != nullptr) {
    lease_service_ = std::make_unique<tree::LeaseServiceImpl>(ledger_.get());
  } else if (no_leaves_ != nullptr) {
    lease_service_ = std::make_unique<tree::LeaseServiceImpl>(no_leaves_.get());
  }

  // The policies file seeds the cluster with the policies it does not have.
  absl::StatusOr<std::vector<cluster::StoredPolicy>> seed =
      cluster::ClusterConfig::ToStored(file_policies);
  if (!seed.ok()) return seed.status();
  sync_loop_->SetSeed(*std::move(seed));
  // One tick before serving, so that an OPEN breaker and this replica's
  // shares are known from the first call. A dead Redis costs one timeout
  // here and the replica starts in store-down mode.
  if (absl::Status s = sync_loop_->TickOnce(); !s.ok()) {
    // The sync loop's message already starts with the store's own code
    // ("UNAVAILABLE: upstream ..."); its status adds none worth repeating.
    spdlog::warn("first cluster sync failed ({}); serving from local state",
                 std::string(s.message()));
  }
  // Grants come within a tick of the store's first stale period, and
  // per_key static shares a stale period and an interval after the first
  // tick: one interval more covers both.
  engine_ = ctx.engine;
  ready_by_ = clock_->Now() + sync_loop_->static_share_wait() + sync_interval_;
  ctx.decision_service->EnableForwarding(
      replica_id_, [loop = sync_loop_.get()](core::ForwardedReport report) {
        return loop->Forward(std::move(report));
      });
  if (sync_thread_) sync_loop_->Start();
  return absl::OkStatus();
}

cluster::SyncLoop::Options ClusterMode::LoopOptions(const ModeContext& ctx) {
  cluster::SyncLoop::Options options;
  options.replica_id = replica_id_;
  options.interval = sync_interval_;
  options.on_config =
      [config = config_.get()](const cluster::ConfigSnapshot& snapshot) {
        config->Apply(snapshot);
      };
  options.on_store_change = [events = ctx.events](bool up,
                                                  const std::string& detail) {
    events->Publish(rpc::StoreEvent(up, detail));
  };
  options.on_store_reset = [events = ctx.events](const std::string& detail) {
    events->Publish(rpc::StoreEvent(true, detail));
  };
  return options;
}

void ClusterMode::OnConfigWritten() {
  if (sync_thread_) {
    sync_loop_->Nudge();
  } else {
    sync_loop_->TickOnce().IgnoreError();  // logged and counted inside
  }
}

absl::Status ClusterMode::OnPoliciesFileChanged(const std::string& path,
                                                const std::string& contents) {
  // The cluster's config lives in the store; the file only seeds the
  // policies the store does not have.
  absl::StatusOr<policy::ParsedPolicies> file =
      policy::ParsePoliciesWithLines(contents, path);
  absl::StatusOr<std::vector<cluster::StoredPolicy>> seed =
      file.ok() ? cluster::ClusterConfig::ToStored(file->policies)
                : absl::StatusOr<std::vector<cluster::StoredPolicy>>(
                      file.status());
  if (file.ok() && !seed.ok()) {
    seed = absl::Status(seed.status().code(),
                        LocatePolicyError(path, *file, seed.status()));
  }
  if (!seed.ok()) {
    spdlog::error("policies file {} changed but was rejected: {}", path,
                  seed.status().ToString());
    return seed.status();
  }
  spdlog::info(
      "policies file {} changed; cluster mode: it seeds only the policies "
      "the cluster does not have (change the others with sluicectl)",
      path);
  sync_loop_->SetSeed(*std::move(seed));
  sync_loop_->Nudge();
  return absl::OkStatus();
}

std::vector<const base::StatsSource*> ClusterMode::stats_sources() const {
  if (sync_loop_ == nullptr) return {};
  return {sync_loop_.get(), tick_store()};
}

bool ClusterMode::Ready(std::string* waiting) {
  const std::vector<std::string> not_admitting =
      engine_->ClusterLimitsNotAdmitting();
  if (not_admitting.empty()) return true;
  *waiting = absl::StrJoin(not_admitting, "; ");
  if (clock_->Now() < ready_by_) return false;
  spdlog::warn(
      "ready although {}: the limit leaves this replica no share while the "
      "others hold it (it asks again every tick)",
      *waiting);
  return true;
}

absl::Status ClusterMode::SyncNow() {
  if (sync_loop_ == nullptr) {
    return absl::FailedPreconditionError("cluster mode not started");
  }
  return sync_loop_->TickOnce();
}

void ClusterMode::Stop() {
  if (sync_loop_ != nullptr) sync_loop_->Stop();
}

void ClusterMode::OnBreakerTransition(const core::BreakerTransition& t) {
  if (sync_loop_ != nullptr) sync_loop_->Nudge();
}

void ClusterMode::OnAdaptiveChange(const core::AdaptiveChange& c) {}

void ClusterMode::OnClusterDemand(const std::string& dependency,
                                  const std::string& key) {
  if (sync_loop_ != nullptr) sync_loop_->Nudge();
}

}  // namespace sluice::app
