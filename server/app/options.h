// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_APP_OPTIONS_H_
#define SLUICE_SERVER_APP_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/core/verdict.h"
#include "server/tls/server_tls.h"
#include "wire/tls.h"

namespace sluice::app {

// What sluiced runs with: one field a flag. Check it with ValidateOptions
// before handing it to a Server, which trusts it.
struct ServerOptions {
  // DecisionService, health and reflection: "HOST:PORT" (port 0 picks a
  // free port) or "unix:PATH".
  std::string listen = "127.0.0.1:50051";
  // AdminService listener (loopback by default), as `listen`.
  std::string admin_listen = "127.0.0.1:50052";
  // Permission bits of the Unix sockets sluiced creates. Connecting needs
  // write permission, so the default lets the socket's group connect (the
  // gateway container of a pod, through a shared fsGroup).
  uint32_t socket_mode = 0660;
  // File with the admin bearer token; "" serves the admin API without one.
  std::string admin_token_file;
  // Prometheus /metrics listener, HOST:PORT only; port 0 picks a free port.
  std::string metrics_listen = "127.0.0.1:9464";
  // The HTTP/JSON decision API (docs/http.md), HOST:PORT only; "" serves
  // none. Port 0 picks a free port.
  std::string http_listen;
  // Threads running the HTTP API's event loops; in [1, kMaxHttpThreads].
  int http_threads = 2;
  // HTTP connections open at once; in [1, kMaxHttpConnections]. Beyond it a
  // new connection sheds the one idle longest (http_server.h).
  int http_max_connections = 10000;
  // TLS of the TCP listeners of --listen, --admin-listen and --http-listen
  // (docs/tls.md): PEM certificate chain and its key, both or neither; ""
  // serves plaintext. Re-read when they change (tls::kTlsReloadInterval).
  std::string tls_cert_file;
  std::string tls_key_file;
  // PEM CA bundle: clients must present a certificate it signed (mTLS);
  // "" asks for none. Needs tls_cert_file.
  std::string tls_client_ca_file;
  // Policies file (YAML); "" starts with no policies. Watched for changes.
  std::string policies_path;
  // How often the policies file is checked for changes.
  absl::Duration policies_poll_interval = absl::Seconds(1);
  // Redis host:port for cluster mode; "" runs standalone.
  std::string redis;
  // Redis Cluster seed nodes "host:port,host:port,..." for cluster mode,
  // instead of --redis; "" for none.
  std::string redis_cluster;
  // A leaf of the grant tree: the central replicas (sluiced with a --redis*
  // store) to lease from, as a gRPC target: "HOST:PORT", "unix:PATH",
  // "dns:///NAME:PORT" or "ipv4:A:PORT,B:PORT" naming several. "" for none.
  // Excludes redis, redis_sentinels and redis_cluster.
  std::string upstream;
  // TLS to the upstream (--upstream-tls-*); all empty: plaintext.
  wire::ClientTlsFiles upstream_tls;
  // Deadline of each lease round trip to the upstream; > 0.
  absl::Duration upstream_timeout = absl::Milliseconds(250);
  // A central replica: most leaves it serves at once; 0 serves none (the
  // lease service is not registered). At most kMaxLeavesLimit.
  uint32_t max_leaves = 4096;
  // Cluster sync tick (cluster mode only); at least 10ms.
  absl::Duration sync_interval = absl::Seconds(1);
  // This replica's name in the cluster; "" means HOSTNAME-PID.
  std::string replica_id;
  // Timeout of each Redis connect and reply (cluster mode only); > 0.
  absl::Duration redis_timeout = absl::Milliseconds(250);
  // Redis ACL user; "" authenticates with the password alone.
  std::string redis_user;
  // File holding the Redis password, re-read at every connect; "" sends
  // no AUTH.
  std::string redis_password_file;
  // Redis database number; >= 0.
  int redis_db = 0;
  // Sentinel: "host:port,host:port,..." and the monitored master's name,
  // both or neither; instead of `redis`.
  std::string redis_sentinels;
  std::string redis_master;
  // The LOCAL divisor until the first good sync (cluster mode only); >= 1.
  uint32_t expected_replicas = 1;
  // Answer for a dependency without a policy.
  core::UnknownDependencyAction unknown_dependency =
      core::UnknownDependencyAction::kAllow;
  // The shortest gap between two sweeps of the engine (expiring overdue
  // permits, moving breakers on). The housekeeping thread sleeps until the
  // engine next has something due (Engine::sweep_alarm), at most 1 s, and
  // no less than this: an idle server wakes about once a second, a busy one
  // sweeps at most this often.
  absl::Duration sweep_interval = absl::Milliseconds(100);
  // Standalone: the file that keeps adaptive limits, learned baselines and
  // OPEN breakers across a restart (docs/operations.md); "" keeps none.
  // Ignored in cluster mode, where the store keeps them.
  std::string state_file;
  // How often the state file is written while running (it is also written
  // at shutdown); > 0.
  absl::Duration state_file_interval = absl::Seconds(10);
};

// Most event-loop threads of the HTTP API.
inline constexpr int kMaxHttpThreads = 256;
// Most HTTP connections open at once.
inline constexpr int kMaxHttpConnections = 1000000;
// Largest --max-leaves.
inline constexpr uint32_t kMaxLeavesLimit = 100000;
// Longest gRPC target --upstream takes.
inline constexpr size_t kMaxUpstreamTargetBytes = 1024;

// The one check of a ServerOptions: INVALID_ARGUMENT naming the flag, e.g.
// "--listen: expected HOST:PORT, got \"nowhere\"".
absl::Status ValidateOptions(const ServerOptions& options);

// The --tls-* files of `options`.
tls::ServerTlsFiles TlsFiles(const ServerOptions& options);

// options.replica_id, or HOSTNAME-PID when that is empty.
std::string EffectiveReplicaId(const ServerOptions& options);
// Logs the effective configuration, one line a flag, as sluiced starts.
void LogConfiguration(const ServerOptions& options,
                      const std::string& replica_id);
// "allow" or "reject", as the flag spells it.
const char* UnknownDependencyName(core::UnknownDependencyAction action);

// "host:port" with a port in [0, 65535] (IPv6 hosts in brackets), or
// "unix:PATH".
absl::Status ValidateListenAddress(const std::string& address);
// A listen address as sluiced uses it: "unix:PATH" with PATH made absolute
// (against the working directory) and normal ("a/../b" is "b"), so that the
// logs, --port-file and the same-socket check name one file one way; other
// addresses as given.
std::string NormalizeListenAddress(const std::string& address);
// Where a validated listen address is reachable once bound: "unix:PATH", or
// "HOST:PORT" with the port gRPC bound (the real one for port 0).
std::string BoundAddress(const std::string& listen, int bound_port);
// A socket mode is at most 0777 and lets the owner read and write
// (sluiced's own health checks connect as the owner); INVALID_ARGUMENT
// "must be at most 0777 and let the owner read and write ..." otherwise.
absl::Status CheckSocketMode(uint32_t mode);
// "0660" to 0660: three or four octal digits, then CheckSocketMode.
absl::StatusOr<uint32_t> ParseSocketMode(const std::string& text);
// "host:port" (or "host") for --redis.
absl::Status ValidateRedisAddress(const std::string& address);
// Whether sluiced runs in cluster mode: a central replica (--redis,
// --redis-sentinels or --redis-cluster) or a leaf (--upstream).
bool ClusterModeEnabled(const ServerOptions& options);
// Whether sluiced is a central replica: it keeps its grants in a Redis
// store (any --redis* flag).
bool CentralReplica(const ServerOptions& options);
// Whether sluiced is a leaf of the grant tree (--upstream).
bool LeafReplica(const ServerOptions& options);
// A gRPC target for --upstream: "HOST:PORT" (port 1-65535), "unix:PATH",
// or a resolver scheme ("dns:", "ipv4:", "ipv6:") with something after it.
// INVALID_ARGUMENT naming the rule otherwise.
absl::Status ValidateUpstreamTarget(const std::string& target);
// How --upstream-tls-* name themselves in errors.
wire::ClientTlsNames UpstreamTlsNames();

}  // namespace sluice::app

#endif  // SLUICE_SERVER_APP_OPTIONS_H_
