#include "server/app/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/core/clock.h"
#include "server/policy/policy_convert.h"
#include "server/policy/policy_file.h"
#include "spdlog/spdlog.h"
#include "wire/address.h"

namespace sluice::app {
namespace {

constexpr char kDecisionServiceName[] = "sluice.v1.DecisionService";

core::Engine::Options EngineOptions(const Server::Options& options) {
  core::Engine::Options engine_options;
  engine_options.unknown_dependency = options.unknown_dependency;
  engine_options.cluster = !options.redis.empty();
  if (engine_options.cluster) {
    // A report that reached another replica arrives here within two ticks.
    engine_options.permit_grace = 2 * options.sync_interval;
    engine_options.expected_replicas = options.expected_replicas;
  }
  return engine_options;
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

std::string DescribeChange(const policy::PolicyChange& change) {
  if (change.old_version == 0) {
    return absl::StrCat("policy \"", change.name, "\" created (version ",
                        change.new_version, ")");
  }
  if (change.new_version == 0) {
    return absl::StrCat("policy \"", change.name, "\" deleted (was version ",
                        change.old_version, ")");
  }
  return absl::StrCat("policy \"", change.name, "\" changed (version ",
                      change.old_version, " -> ", change.new_version, ")");
}

}  // namespace

// Logs every breaker transition, one line each, and in cluster mode nudges
// the sync loop so the other replicas hear of it without waiting a tick.
// Safe for concurrent use.
class Server::LoggingEventSink final : public core::EventSink {
 public:
  void set_sync_loop(cluster::SyncLoop* loop) { sync_loop_.store(loop); }
  // Also hands every transition to the event hub and the metrics.
  void set_observers(rpc::EventHub* events, metrics::Metrics* metrics) {
    events_.store(events);
    metrics_.store(metrics);
  }

  void OnBreakerTransition(const core::BreakerTransition& t) override {
    if (cluster::SyncLoop* loop = sync_loop_.load()) loop->Nudge();
    if (metrics::Metrics* m = metrics_.load()) m->OnBreakerTransition(t);
    if (rpc::EventHub* e = events_.load()) e->OnBreakerTransition(t);
    const std::string key =
        t.key.empty() ? "" : absl::StrCat(" key \"", t.key, "\"");
    const std::string until =
        t.open_until == absl::InfinitePast()
            ? ""
            : absl::StrCat(", open until ",
                           absl::FormatTime("%H:%M:%E3S", t.open_until,
                                            absl::LocalTimeZone()));
    const spdlog::level::level_enum level = t.to == core::BreakerState::kClosed
                                                ? spdlog::level::info
                                                : spdlog::level::warn;
    spdlog::log(level, "breaker \"{}\"{}: {} -> {} ({}; generation {}{})",
                t.dependency, key, std::string(core::BreakerStateName(t.from)),
                std::string(core::BreakerStateName(t.to)), t.cause,
                t.generation, until);
  }

 private:
  std::atomic<cluster::SyncLoop*> sync_loop_{nullptr};
  std::atomic<rpc::EventHub*> events_{nullptr};
  std::atomic<metrics::Metrics*> metrics_{nullptr};
};

// Cluster mode's admin backend: writes go to the cluster store (with
// compare-and-set) and return once this replica has applied them; every
// other replica applies them on its next tick. Reads answer from this
// replica's policy store.
class Server::ClusterAdminBackend final : public rpc::AdminBackend {
 public:
  explicit ClusterAdminBackend(Server* server)
      : server_(server),
        local_(&server->store_, &server->engine_, server->events_.get()) {}

  absl::StatusOr<policy::PolicyChange> PutPolicy(
      const v1::Policy& policy, uint64_t expected_version) override {
    return server_->cluster_config_->Put(policy, expected_version);
  }
  absl::StatusOr<policy::PolicyChange> DeletePolicy(
      absl::string_view name, uint64_t expected_version) override {
    return server_->cluster_config_->Delete(name, expected_version);
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
    return server_->cluster_config_->SetOverride(dependency, override, note);
  }
  rpc::ClusterView cluster() override {
    rpc::ClusterView view;
    view.cluster = true;
    const cluster::SyncStats stats = server_->sync_loop_->stats();
    view.store_status = stats.store_up ? "up" : "down";
    view.live_replicas = stats.live_replicas;
    return view;
  }

 private:
  Server* const server_;
  rpc::LocalAdminBackend local_;
};

Server::Server(Options options)
    : options_(std::move(options)),
      sink_(std::make_unique<LoggingEventSink>()),
      engine_(core::RealClock::Get(), EngineOptions(options_), sink_.get()),
      store_(&engine_),
      metrics_(std::make_unique<metrics::Metrics>(MetricsSources())),
      decision_service_(&engine_, [m = metrics_.get()](absl::Duration d) {
        m->ObserveAcquire(d);
      }) {}

metrics::Sources Server::MetricsSources() {
  metrics::Sources sources;
  sources.engine = &engine_;
  sources.sync = [this]() -> std::optional<metrics::SyncSnapshot> {
    if (sync_loop_ == nullptr) return std::nullopt;
    const cluster::SyncStats stats = sync_loop_->stats();
    metrics::SyncSnapshot s;
    s.store_up = stats.store_up;
    s.ticks = stats.ticks;
    s.failures = stats.failures;
    s.live_replicas = stats.live_replicas;
    s.last_tick_duration = stats.last_tick_duration;
    s.reports_forwarded = stats.reports_forwarded;
    s.reports_received = stats.reports_received;
    s.reports_not_forwarded = stats.reports_not_forwarded;
    s.clock_offset = stats.clock_offset;
    s.store_resets = stats.store_resets;
    return s;
  };
  sources.unknown_decisions = [this] { return engine_.UnknownDecisions(); };
  sources.events_dropped = [this]() -> uint64_t {
    return events_ ? events_->dropped() : 0;
  };
  return sources;
}

absl::Status Server::StartOperatorSurfaces() {
  if (options_.redis.empty()) {
    admin_backend_ = std::make_unique<rpc::LocalAdminBackend>(
        &store_, &engine_, events_.get());
  } else {
    admin_backend_ = std::make_unique<ClusterAdminBackend>(this);
  }
  rpc::AdminServer::Options admin_options;
  admin_options.listen = options_.admin_listen;
  admin_options.token_file = options_.admin_token_file;
  absl::StatusOr<std::unique_ptr<rpc::AdminServer>> admin =
      rpc::AdminServer::Start(admin_options, &engine_, admin_backend_.get(),
                              events_.get());
  if (!admin.ok()) return admin.status();
  admin_server_ = *std::move(admin);
  absl::StatusOr<std::unique_ptr<metrics::MetricsServer>> metrics =
      metrics::MetricsServer::Start(options_.metrics_listen, metrics_.get());
  if (!metrics.ok()) return metrics.status();
  metrics_server_ = *std::move(metrics);
  const auto host = [](const std::string& address) {
    return wire::ParseHostPort(address)->host;  // validated by BuildAndStart
  };
  spdlog::info("serving AdminService on {}:{} ({}{})",
               host(options_.admin_listen), admin_server_->port(),
               admin_server_->has_token() ? "bearer token required"
                                          : "no token",
               options_.redis.empty()
                   ? "; standalone: admin changes apply to this process only"
                   : "");
  spdlog::info("serving metrics on {}:{}/metrics",
               host(options_.metrics_listen), metrics_server_->port());
  return absl::OkStatus();
}

Server::~Server() { Shutdown(absl::Now()); }

absl::Status Server::BuildAndStart() {
  {
    absl::MutexLock lock(&mu_);
    if (started_)
      return absl::FailedPreconditionError("server already started");
    started_ = true;
  }
  if (absl::Status s = ValidateListenAddress(options_.listen); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("listen: ", s.message()));
  }
  if (!options_.redis.empty()) {
    if (absl::Status s = ValidateRedisAddress(options_.redis); !s.ok()) {
      return s;
    }
  }
  replica_id_ = options_.replica_id.empty()
                    ? absl::StrCat(HostName(), "-", getpid())
                    : options_.replica_id;
  LogConfiguration();
  events_ = std::make_unique<rpc::EventHub>(
      rpc::EventHub::Options{/*queue_size=*/1024, replica_id_});
  sink_->set_observers(events_.get(), metrics_.get());
  if (absl::Status s = ValidateListenAddress(options_.admin_listen); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("admin-listen: ", s.message()));
  }
  if (absl::Status s = ValidateListenAddress(options_.metrics_listen);
      !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics-listen: ", s.message()));
  }

  // Policies first: a bad file at startup is fatal and nothing is bound.
  std::string initial_contents;
  std::vector<v1::Policy> file_policies;
  if (options_.policies_path.empty()) {
    spdlog::warn(
        "no --policies file: starting with no policies; every dependency is "
        "unknown and gets --unknown-dependency={}",
        options_.unknown_dependency == core::UnknownDependencyAction::kAllow
            ? "allow"
            : "reject");
  } else {
    absl::StatusOr<std::string> contents =
        policy::ReadTextFile(options_.policies_path);
    if (!contents.ok()) return contents.status();
    absl::StatusOr<std::vector<v1::Policy>> policies =
        policy::ParsePolicies(*contents, options_.policies_path);
    if (!policies.ok()) return policies.status();
    absl::StatusOr<std::vector<policy::PolicyChange>> changes =
        store_.ReplaceAll(*policies);
    if (!changes.ok()) return changes.status();
    for (const policy::PolicyChange& change : *changes) {
      spdlog::info("{}", DescribeChange(change));
    }
    spdlog::info("loaded {} policies from {}", store_.size(),
                 options_.policies_path);
    initial_contents = *std::move(contents);
    file_policies = *std::move(policies);
  }

  if (!options_.redis.empty()) {
    if (absl::Status s = StartCluster(file_policies); !s.ok()) return s;
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.listen, grpc::InsecureServerCredentials(),
                           &port_);
  builder.RegisterService(&decision_service_);
  grpc_server_ = builder.BuildAndStart();
  if (grpc_server_ == nullptr || port_ == 0) {
    grpc_server_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options_.listen,
                     " (address in use or not available?)"));
  }
  SetServing(false);
  if (absl::Status s = StartOperatorSurfaces(); !s.ok()) {
    grpc_server_->Shutdown(absl::ToChronoTime(absl::Now()));
    return s;
  }

  if (!options_.policies_path.empty()) {
    policy::FileWatcher::Options watcher_options;
    watcher_options.interval = options_.policies_poll_interval;
    watcher_ = std::make_unique<policy::FileWatcher>(
        options_.policies_path, watcher_options,
        [this](const std::string& contents) { OnPoliciesChanged(contents); },
        [this](const std::string& error) {
          spdlog::error("policies file {}: {}; keeping the previous policies",
                        options_.policies_path, error);
        });
    watcher_->Start(initial_contents);
  }
  housekeeping_ = std::thread([this] { Housekeeping(); });

  SetServing(true);
  const std::string host = wire::ParseHostPort(options_.listen)->host;
  spdlog::info("serving DecisionService on {}:{}", host, port_);
  return absl::OkStatus();
}

void Server::Wait() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(&stopped_));
}

void Server::Shutdown(absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) {
      mu_.Await(absl::Condition(&stopped_));
      return;
    }
    stopping_ = true;  // also wakes the housekeeping thread
  }
  if (grpc_server_ != nullptr) {
    spdlog::info(
        "shutting down: NOT_SERVING, draining in-flight RPCs for up "
        "to {}",
        absl::FormatDuration(
            absl::Ceil(std::max(deadline - absl::Now(), absl::ZeroDuration()),
                       absl::Milliseconds(100))));
    // Health reports NOT_SERVING from here on, so load balancers move away.
    grpc_server_->GetHealthCheckService()->Shutdown();
    grpc_server_->Shutdown(absl::ToChronoTime(deadline));
  }
  // WatchEvents streams never end by themselves: cancel them at once.
  if (admin_server_ != nullptr) admin_server_->Shutdown(absl::Now());
  metrics_server_.reset();
  if (watcher_ != nullptr) watcher_->Stop();
  if (housekeeping_.joinable()) housekeeping_.join();
  if (sync_loop_ != nullptr) {
    // After the drain, so the last tick carries the final counts.
    sink_->set_sync_loop(nullptr);
    sync_loop_->Stop();
  }
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

absl::Status Server::StartCluster(
    const std::vector<v1::Policy>& file_policies) {
  absl::StatusOr<cluster::RedisStore::Options> store_options =
      cluster::RedisStore::ParseAddress(options_.redis);
  if (!store_options.ok()) return store_options.status();
  store_options->timeout = options_.redis_timeout;
  // A Redis that comes back is reached within a retry or two: the sync
  // loop retries a failed tick every 200 ms.
  store_options->max_backoff =
      std::min(options_.sync_interval, absl::Milliseconds(200));
  redis_store_ = std::make_unique<cluster::RedisStore>(*store_options);

  cluster::ClusterConfig::Options config_options;
  config_options.nudge = [this] { sync_loop_->Nudge(); };
  config_options.on_policy_change = [this](const policy::PolicyChange& change,
                                           const std::string& source) {
    spdlog::info("{} ({})", DescribeChange(change), source);
    events_->Publish(rpc::PolicyChangedEvent(
        change.name, change.old_version, change.new_version,
        absl::StrCat(DescribeChange(change), " by ", source)));
  };
  config_options.on_override = [this](const std::string& dependency,
                                      core::BreakerOverride override,
                                      const std::string& cause) {
    spdlog::warn("breaker \"{}\": {}", dependency, cause);
    events_->Publish(rpc::OverrideEvent(dependency, override, cause));
  };
  cluster_config_ = std::make_unique<cluster::ClusterConfig>(
      redis_store_.get(), &store_, &engine_, config_options);

  cluster::SyncLoop::Options loop_options;
  loop_options.on_config = [this](const cluster::ConfigSnapshot& config) {
    cluster_config_->Apply(config);
  };
  loop_options.replica_id = replica_id_;
  loop_options.on_store_change = [events = events_.get()](
                                     bool up, const std::string& detail) {
    events->Publish(rpc::StoreEvent(up, detail));
  };
  loop_options.on_store_reset = [events = events_.get()](
                                     const std::string& detail) {
    events->Publish(rpc::StoreEvent(true, detail));
  };
  loop_options.interval = options_.sync_interval;
  sync_loop_ = std::make_unique<cluster::SyncLoop>(
      &engine_, redis_store_.get(), core::RealClock::Get(), loop_options);
  // The policies file seeds the cluster with the policies it does not have.
  absl::StatusOr<std::vector<cluster::StoredPolicy>> seed =
      cluster::ClusterConfig::ToStored(file_policies);
  if (!seed.ok()) return seed.status();
  sync_loop_->SetSeed(*std::move(seed));
  // One tick before serving, so that an OPEN breaker and this replica's
  // shares are known from the first call. A dead Redis costs one timeout
  // here and the replica starts in store-down mode.
  if (absl::Status s = sync_loop_->TickOnce(); !s.ok()) {
    spdlog::warn("first cluster sync failed ({}); serving from local state",
                 s.ToString());
  }
  decision_service_.EnableForwarding(
      replica_id_, [loop = sync_loop_.get()](core::ForwardedReport report) {
        return loop->Forward(std::move(report));
      });
  sink_->set_sync_loop(sync_loop_.get());
  sync_loop_->Start();
  return absl::OkStatus();
}

void Server::OnPoliciesChanged(const std::string& contents) {
  absl::StatusOr<std::vector<v1::Policy>> policies =
      policy::ParsePolicies(contents, options_.policies_path);
  if (sync_loop_ != nullptr) {
    // Cluster mode: the cluster's config lives in the store; the file only
    // seeds the policies the store does not have.
    absl::StatusOr<std::vector<cluster::StoredPolicy>> seed =
        policies.ok() ? cluster::ClusterConfig::ToStored(*policies)
                      : absl::StatusOr<std::vector<cluster::StoredPolicy>>(
                            policies.status());
    if (!seed.ok()) {
      spdlog::error("policies file {} changed but was rejected: {}",
                    options_.policies_path, seed.status().ToString());
      return;
    }
    spdlog::info(
        "policies file {} changed; cluster mode: it seeds only the policies "
        "the cluster does not have (change the others with sluicectl)",
        options_.policies_path);
    sync_loop_->SetSeed(*std::move(seed));
    sync_loop_->Nudge();
    return;
  }
  absl::StatusOr<std::vector<policy::PolicyChange>> changes =
      policies.ok() ? store_.ReplaceAll(*policies)
                    : absl::StatusOr<std::vector<policy::PolicyChange>>(
                          policies.status());
  if (!changes.ok()) {
    spdlog::error(
        "policies file {} changed but was rejected; keeping the previous "
        "policies: {}",
        options_.policies_path, changes.status().ToString());
    return;
  }
  if (changes->empty()) {
    spdlog::info("policies file {} changed; no policy changed",
                 options_.policies_path);
    return;
  }
  for (const policy::PolicyChange& change : *changes) {
    spdlog::info("reload: {}", DescribeChange(change));
    events_->Publish(rpc::PolicyChangedEvent(
        change.name, change.old_version, change.new_version,
        absl::StrCat(DescribeChange(change), " by ", options_.policies_path)));
  }
  spdlog::info("reloaded {}: {} policies in force", options_.policies_path,
               store_.size());
}

void Server::SetServing(bool serving) {
  grpc::HealthCheckServiceInterface* health =
      grpc_server_->GetHealthCheckService();
  health->SetServingStatus(serving);  // "" (the whole server)
  health->SetServingStatus(kDecisionServiceName, serving);
}

void Server::Housekeeping() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_),
                               options_.sweep_interval)) {
        return;
      }
    }
    engine_.Sweep();
  }
}

void Server::LogConfiguration() const {
  spdlog::info("sluiced configuration:");
  spdlog::info(
      "  listen               {} (DecisionService, health, reflection)",
      options_.listen);
  spdlog::info(
      "  admin-listen         {} (AdminService; token {})",
      options_.admin_listen,
      options_.admin_token_file.empty() ? "off" : options_.admin_token_file);
  spdlog::info(
      "  metrics-listen       {} (Prometheus /metrics)",
      options_.metrics_listen);
  spdlog::info(
      "  policies             {} (checked every {})",
      options_.policies_path.empty() ? "(none)" : options_.policies_path,
      absl::FormatDuration(options_.policies_poll_interval));
  spdlog::info("  redis                {}",
               options_.redis.empty() ? "(none: standalone)" : options_.redis);
  spdlog::info("  sync-interval        {} (cluster mode only)",
               absl::FormatDuration(options_.sync_interval));
  spdlog::info("  replica-id           {} (cluster mode only)", replica_id_);
  spdlog::info("  expected-replicas    {} (cluster mode only)",
               options_.expected_replicas);
  spdlog::info("  redis-timeout        {} (cluster mode only)",
               absl::FormatDuration(options_.redis_timeout));
  spdlog::info(
      "  unknown-dependency   {}",
      options_.unknown_dependency == core::UnknownDependencyAction::kAllow
          ? "allow"
          : "reject");
  spdlog::info("  sweep-interval       {}",
               absl::FormatDuration(options_.sweep_interval));
}

absl::Status ValidateListenAddress(const std::string& address) {
  return wire::ParseHostPort(address).status();
}

absl::Status ValidateRedisAddress(const std::string& address) {
  return cluster::RedisStore::ParseAddress(address).status();
}

}  // namespace sluice::app
