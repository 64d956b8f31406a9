#ifndef SLUICE_SERVER_APP_SERVER_H_
#define SLUICE_SERVER_APP_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/cluster/cluster_config.h"
#include "server/cluster/redis_store.h"
#include "server/cluster/sync_loop.h"
#include "server/core/engine.h"
#include "server/core/events.h"
#include "server/core/types.h"
#include "server/policy/file_watcher.h"
#include "server/policy/policy_store.h"
#include "server/metrics/metrics.h"
#include "server/rpc/admin_backend.h"
#include "server/rpc/admin_events.h"
#include "server/rpc/admin_server.h"
#include "server/rpc/decision_service.h"

namespace sluice::app {

// Everything sluiced runs, wired together: the engine, the policy store and
// its file watcher, the gRPC server (DecisionService, health, reflection) and
// the housekeeping thread. BuildAndStart, Wait and Shutdown may be called
// from different threads; Shutdown is idempotent.
class Server {
 public:
  struct Options {
    // DecisionService, health and reflection; port 0 picks a free port.
    std::string listen = "127.0.0.1:50051";
    // AdminService listener (loopback by default); port 0 picks a free port.
    std::string admin_listen = "127.0.0.1:50052";
    // File with the admin bearer token; "" serves the admin API without one.
    std::string admin_token_file;
    // Prometheus /metrics listener; port 0 picks a free port.
    std::string metrics_listen = "127.0.0.1:9464";
    // Policies file (YAML); "" starts with no policies. Watched for changes.
    std::string policies_path;
    // How often the policies file is checked for changes.
    absl::Duration policies_poll_interval = absl::Seconds(1);
    // Redis host:port for cluster mode; "" runs standalone.
    std::string redis;
    // Cluster sync tick (cluster mode only).
    absl::Duration sync_interval = absl::Seconds(1);
    // This replica's name in the cluster; "" means HOSTNAME-PID.
    std::string replica_id;
    // Timeout of each Redis connect and reply (cluster mode only).
    absl::Duration redis_timeout = absl::Milliseconds(250);
    // The LOCAL divisor until the first good sync (cluster mode only).
    uint32_t expected_replicas = 1;
    // Answer for a dependency without a policy.
    core::UnknownDependencyAction unknown_dependency =
        core::UnknownDependencyAction::kAllow;
    // How often the engine expires overdue permits and moves breakers on.
    absl::Duration sweep_interval = absl::Milliseconds(100);
  };

  explicit Server(Options options);
  ~Server();  // Shuts down with an immediate deadline if still running.
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Loads the policies, starts serving and the background threads. Logs the
  // effective configuration and "serving DecisionService on HOST:PORT".
  // INVALID_ARGUMENT for a bad policies file, UNAVAILABLE when the address
  // cannot be bound. Call once.
  absl::Status BuildAndStart() ABSL_LOCKS_EXCLUDED(mu_);

  // Blocks until Shutdown has completed.
  void Wait();

  // Reports NOT_SERVING, lets in-flight RPCs finish until `deadline` (then
  // cancels them), and stops the watcher and housekeeping.
  void Shutdown(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  // The port DecisionService listens on (useful with port 0); 0 before
  // BuildAndStart.
  int port() const { return port_; }

  // The admin and metrics ports (useful with port 0), after BuildAndStart.
  int admin_port() const { return admin_server_ ? admin_server_->port() : 0; }
  int metrics_port() const {
    return metrics_server_ ? metrics_server_->port() : 0;
  }

  // The replica id in use (cluster mode), after BuildAndStart.
  const std::string& replica_id() const { return replica_id_; }

 private:
  class LoggingEventSink;
  class ClusterAdminBackend;

  void OnPoliciesChanged(const std::string& contents);
  void SetServing(bool serving);
  void Housekeeping() ABSL_LOCKS_EXCLUDED(mu_);
  void LogConfiguration() const;
  // Cluster mode: builds the store, the shared config and the sync loop,
  // seeds the store with the policies file, and runs the first tick.
  absl::Status StartCluster(const std::vector<v1::Policy>& file_policies);
  // The admin listener and /metrics.
  absl::Status StartOperatorSurfaces();
  metrics::Sources MetricsSources();

  const Options options_;
  const std::unique_ptr<LoggingEventSink> sink_;
  core::Engine engine_;
  policy::PolicyStore store_;
  // Created by BuildAndStart once the replica id is known.
  std::unique_ptr<rpc::EventHub> events_;
  const std::unique_ptr<metrics::Metrics> metrics_;
  rpc::DecisionServiceImpl decision_service_;
  std::unique_ptr<rpc::AdminBackend> admin_backend_;
  std::unique_ptr<rpc::AdminServer> admin_server_;
  std::unique_ptr<metrics::MetricsServer> metrics_server_;
  std::unique_ptr<policy::FileWatcher> watcher_;
  std::string replica_id_;
  std::unique_ptr<cluster::RedisStore> redis_store_;
  std::unique_ptr<cluster::ClusterConfig> cluster_config_;
  std::unique_ptr<cluster::SyncLoop> sync_loop_;
  std::unique_ptr<grpc::Server> grpc_server_;
  int port_ = 0;
  std::thread housekeeping_;

  absl::Mutex mu_;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

// "host:port" with a port in [0, 65535]; IPv6 hosts in brackets.
absl::Status ValidateListenAddress(const std::string& address);
// "host:port" (or "host") for --redis.
absl::Status ValidateRedisAddress(const std::string& address);

}  // namespace sluice::app

#endif  // SLUICE_SERVER_APP_SERVER_H_
