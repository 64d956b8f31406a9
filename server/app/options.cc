// SPDX-License-Identifier: Apache-2.0
#include "server/app/options.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/option_checks.h"
#include "server/app/unix_socket.h"
#include "server/cluster/redis_connection.h"
#include "server/cluster/redis_sentinel.h"
#include "server/cluster/redis_store.h"
#include "server/tls/server_tls.h"
#include "spdlog/spdlog.h"
#include "wire/address.h"

namespace sluice::app {

namespace {

// --redis-user, --redis-password-file, --redis-db, --redis-sentinels and
// --redis-master.
absl::Status ValidateRedisAccess(const ServerOptions& options) {
  const int stores = !options.redis.empty() + !options.redis_sentinels.empty() +
                     !options.redis_cluster.empty();
  if (!options.upstream.empty()) {
    for (const auto& [flag, set] :
         {std::pair<const char*, bool>{"--redis", !options.redis.empty()},
          {"--redis-sentinels", !options.redis_sentinels.empty()},
          {"--redis-cluster", !options.redis_cluster.empty()},
          {"--redis-master", !options.redis_master.empty()},
          {"--redis-user", !options.redis_user.empty()},
          {"--redis-password-file", !options.redis_password_file.empty()},
          {"--redis-db", options.redis_db != 0}}) {
      if (set) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--upstream and ", flag,
            " exclude each other: a leaf (--upstream) leases its grants from "
            "the central replicas and never talks to Redis; give the Redis "
            "flags to the central replicas only"));
      }
    }
    return absl::OkStatus();
  }
  if (stores > 1) {
    return absl::InvalidArgumentError(
        "--redis, --redis-sentinels and --redis-cluster exclude each other: "
        "give --redis for one Redis, --redis-sentinels with --redis-master "
        "for Sentinel, or --redis-cluster with seed nodes for Redis Cluster");
  }
  if (stores == 0) {
    // Standalone: a Redis credential would be ignored, which is a mistake
    // worth saying (a forgotten --redis, most likely).
    for (const auto& [flag, set] : {std::pair<const char*, bool>{
                                        "--redis-user", !options.redis_user.empty()},
                                    {"--redis-password-file",
                                     !options.redis_password_file.empty()},
                                    {"--redis-db", options.redis_db != 0}}) {
      if (set) {
        return absl::InvalidArgumentError(absl::StrCat(
            flag, " needs --redis, --redis-sentinels or --redis-cluster: "
                  "without one sluiced runs standalone and uses no Redis"));
      }
    }
  }
  if (!options.redis_cluster.empty()) {
    if (absl::Status s =
            cluster::RedisStore::ParseClusterSeeds(options.redis_cluster)
                .status();
        !s.ok()) {
      return s;
    }
    if (options.redis_db != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--redis-db ", options.redis_db,
          ": Redis Cluster has database 0 only; leave --redis-db out with "
          "--redis-cluster"));
    }
  }
  if (options.redis_sentinels.empty() != options.redis_master.empty()) {
    return absl::InvalidArgumentError(
        options.redis_master.empty()
            ? "--redis-sentinels needs --redis-master (the name in the "
              "sentinels' `sentinel monitor NAME ...`)"
            : "--redis-master needs --redis-sentinels (HOST:PORT,...)");
  }
  if (!options.redis_sentinels.empty()) {
    if (absl::Status s =
            cluster::ParseSentinels(options.redis_sentinels).status();
        !s.ok()) {
      return s;
    }
  }
  if (options.redis_db < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--redis-db must be a database number >= 0, got ", options.redis_db));
  }
  if (!options.redis_user.empty() && options.redis_password_file.empty()) {
    return absl::InvalidArgumentError(
        "--redis-user needs --redis-password-file (the user's password)");
  }
  if (!options.redis_password_file.empty()) {
    if (absl::Status s =
            cluster::ReadPasswordFile(options.redis_password_file).status();
        !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--redis-password-file: ", s.message()));
    }
  }
  return absl::OkStatus();
}

// --upstream, its TLS files and timeout, --max-leaves, and what a leaf
// refuses.
absl::Status ValidateTreeOptions(const ServerOptions& options) {
  for (absl::Status s :
       {base::CheckInRange("--max-leaves", options.max_leaves, 0,
                           kMaxLeavesLimit),
        base::CheckPositive("--upstream-timeout", options.upstream_timeout)}) {
    if (!s.ok()) return s;
  }
  const wire::ClientTlsNames names = UpstreamTlsNames();
  if (options.upstream.empty()) {
    const wire::ClientTlsFiles& tls = options.upstream_tls;
    for (const auto& [flag, set] :
         {std::pair<const char*, bool>{names.ca_file, !tls.ca_file.empty()},
          {names.cert_file, !tls.cert_file.empty()},
          {names.key_file, !tls.key_file.empty()},
          {names.server_name, !tls.server_name.empty()}}) {
      if (set) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, " needs --upstream (it is the TLS of a leaf's "
                               "connection to the central replicas)"));
      }
    }
    return absl::OkStatus();
  }
  if (absl::Status s = ValidateUpstreamTarget(options.upstream); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--upstream: ", s.message()));
  }
  if (!options.policies_path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--policies ", options.policies_path,
        " cannot be used with --upstream ", options.upstream,
        ": a leaf takes its policies and overrides from the central "
        "replicas; give the file to them (it seeds the cluster) and leave "
        "--policies out here"));
  }
  // Reads the files now: a missing or swapped file is a startup error, not
  // a handshake failure at every tick.
  if (absl::Status s =
          wire::MakeChannelCredentials(options.upstream_tls, names).status();
      !s.ok()) {
    return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateOptions(const ServerOptions& options) {
  for (const auto& [name, address] :
       {std::pair<const char*, const std::string*>{"listen", &options.listen},
        {"admin-listen", &options.admin_listen}}) {
    if (absl::Status s = ValidateListenAddress(*address); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, ": ", s.message()));
    }
  }
  if (absl::StartsWith(options.metrics_listen, "unix:")) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-listen: /metrics is served over TCP only "
                     "(HOST:PORT), got \"",
                     options.metrics_listen, "\""));
  }
  if (absl::Status s = wire::ParseHostPort(options.metrics_listen).status();
      !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics-listen: ", s.message()));
  }
  if (!options.http_listen.empty()) {
    if (absl::StartsWith(options.http_listen, "unix:")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--http-listen: the HTTP API is served over TCP only "
                       "(HOST:PORT), got \"",
                       options.http_listen, "\""));
    }
    if (absl::Status s = wire::ParseHostPort(options.http_listen).status();
        !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--http-listen: ", s.message()));
    }
  }
  for (absl::Status s :
       {base::CheckInRange("--http-threads", options.http_threads, 1,
                           kMaxHttpThreads),
        base::CheckInRange("--http-max-connections",
                           options.http_max_connections, 1,
                           kMaxHttpConnections)}) {
    if (!s.ok()) return s;
  }
  if (absl::Status s = tls::ValidateServerTlsFlags(TlsFiles(options));
      !s.ok()) {
    return s;
  }
  const std::string data = NormalizeListenAddress(options.listen);
  if (absl::StartsWith(data, "unix:") &&
      data == NormalizeListenAddress(options.admin_listen)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen and --admin-listen are the same socket, ",
                     data, "; the admin API needs its own"));
  }
  if (absl::Status s = CheckSocketMode(options.socket_mode); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--socket-mode ", s.message()));
  }
  if (!options.redis.empty()) {
    if (absl::Status s = ValidateRedisAddress(options.redis); !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = ValidateRedisAccess(options); !s.ok()) return s;
  if (absl::Status s = ValidateTreeOptions(options); !s.ok()) return s;
  for (absl::Status s :
       {base::CheckAtLeast("--sync-interval", options.sync_interval,
                           absl::Milliseconds(10)),
        base::CheckPositive("--redis-timeout", options.redis_timeout),
        base::CheckPositive("state file interval", options.state_file_interval),
        base::CheckAtLeast("--expected-replicas", options.expected_replicas,
                           1)}) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ValidateListenAddress(const std::string& address) {
  return wire::ParseEndpoint(address).status();
}

std::string NormalizeListenAddress(const std::string& address) {
  absl::StatusOr<wire::Endpoint> endpoint = wire::ParseEndpoint(address);
  if (!endpoint.ok() || !endpoint->is_unix()) return address;
  std::error_code error;
  std::filesystem::path path =
      std::filesystem::absolute(endpoint->unix_path, error);
  if (error) return address;
  return absl::StrCat("unix:", path.lexically_normal().string());
}

std::string BoundAddress(const std::string& listen, int bound_port) {
  wire::Endpoint endpoint = *wire::ParseEndpoint(listen);  // validated
  if (!endpoint.is_unix()) endpoint.tcp.port = bound_port;
  return wire::FormatEndpoint(endpoint);
}

absl::Status CheckSocketMode(uint32_t mode) {
  if ((mode & ~0777u) != 0 || (mode & 0600u) != 0600u) {
    return absl::InvalidArgumentError(absl::StrCat(
        "must be at most 0777 and let the owner read and write (0600 at "
        "least), got ",
        FormatSocketMode(mode)));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> ParseSocketMode(const std::string& text) {
  uint32_t mode = 0;
  bool digits = text.size() == 3 || text.size() == 4;
  for (char c : text) {
    if (c < '0' || c > '7') digits = false;
    mode = mode * 8 + static_cast<uint32_t>(c - '0');
  }
  if (!digits) {
    return absl::InvalidArgumentError(
        "expected three or four octal digits, e.g. 0660");
  }
  if (absl::Status s = CheckSocketMode(mode); !s.ok()) return s;
  return mode;
}

absl::Status ValidateRedisAddress(const std::string& address) {
  return cluster::RedisStore::ParseAddress(address).status();
}

bool ClusterModeEnabled(const ServerOptions& options) {
  return CentralReplica(options) || LeafReplica(options);
}

bool CentralReplica(const ServerOptions& options) {
  return !options.redis.empty() || !options.redis_sentinels.empty() ||
         !options.redis_cluster.empty();
}

bool LeafReplica(const ServerOptions& options) {
  return !options.upstream.empty();
}

absl::Status ValidateUpstreamTarget(const std::string& target) {
  if (target.size() > kMaxUpstreamTargetBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a gRPC target of at most ", kMaxUpstreamTargetBytes,
        " bytes, got ", target.size()));
  }
  for (const char c : target) {
    if (c <= ' ' || c == 0x7f) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a gRPC target has no spaces or control characters, got \"",
          target, "\""));
    }
  }
  if (absl::StartsWith(target, "unix:")) {
    if (target.size() == 5) {
      return absl::InvalidArgumentError("unix: needs a socket path");
    }
    return absl::OkStatus();
  }
  for (const absl::string_view scheme : {"dns:", "ipv4:", "ipv6:"}) {
    if (!absl::StartsWith(target, scheme)) continue;
    absl::string_view rest = absl::string_view(target).substr(scheme.size());
    while (absl::ConsumePrefix(&rest, "/")) {
    }
    if (rest.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          scheme, " needs something to resolve, e.g. ", scheme,
          scheme == "dns:" ? "///sluice-central:50051" : "10.0.0.1:50051"));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<wire::HostPort> address = wire::ParseHostPort(target);
  if (!address.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        address.status().message(),
        " (or unix:PATH, dns:///NAME:PORT, ipv4:A:PORT,B:PORT)"));
  }
  if (address->port == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "port must be 1-65535 (the central replicas' --listen port), got \"",
        target, "\""));
  }
  return absl::OkStatus();
}

wire::ClientTlsNames UpstreamTlsNames() {
  wire::ClientTlsNames names;
  names.ca_file = "--upstream-tls-ca";
  names.cert_file = "--upstream-tls-cert";
  names.key_file = "--upstream-tls-key";
  names.server_name = "--upstream-tls-server-name";
  return names;
}

tls::ServerTlsFiles TlsFiles(const ServerOptions& options) {
  tls::ServerTlsFiles files;
  files.cert_file = options.tls_cert_file;
  files.key_file = options.tls_key_file;
  files.client_ca_file = options.tls_client_ca_file;
  return files;
}

std::string EffectiveReplicaId(const ServerOptions& options) {
  if (!options.replica_id.empty()) return options.replica_id;
  char host[256] = {};
  const bool named = gethostname(host, sizeof(host) - 1) == 0;
  return absl::StrCat(named ? host : "unknown", "-", getpid());
}

const char* UnknownDependencyName(core::UnknownDependencyAction action) {
  return action == core::UnknownDependencyAction::kAllow ? "allow" : "reject";
}

void LogConfiguration(const ServerOptions& options,
                      const std::string& replica_id) {
  spdlog::info("sluiced configuration:");
  spdlog::info(
      "  listen               {} (DecisionService, Envoy services, health, reflection)",
      options.listen);
  spdlog::info(
      "  socket-mode          {} (Unix sockets only)",
      FormatSocketMode(options.socket_mode));
  spdlog::info(
      "  admin-listen         {} (AdminService; token {})",
      options.admin_listen,
      options.admin_token_file.empty() ? "off" : options.admin_token_file);
  spdlog::info("  metrics-listen       {} (Prometheus /metrics)",
               options.metrics_listen);
  spdlog::info("  http-listen          {} (HTTP/JSON decision API)",
               options.http_listen.empty() ? "(off)" : options.http_listen);
  spdlog::info("  http-threads         {} (HTTP API event-loop threads)",
               options.http_threads);
  spdlog::info("  http-max-connections {} (HTTP connections open at once)",
               options.http_max_connections);
  spdlog::info(
      "  tls-cert             {}",
      options.tls_cert_file.empty()
          ? std::string("(none: plaintext)")
          : absl::StrCat(options.tls_cert_file, " (key ", options.tls_key_file,
                         "; TCP listeners of --listen, --admin-listen and "
                         "--http-listen)"));
  spdlog::info("  tls-client-ca        {}",
               options.tls_client_ca_file.empty()
                   ? "(none: no client certificate asked)"
                   : options.tls_client_ca_file + " (client certificates "
                                                  "required)");
  spdlog::info("  policies             {} (checked every {})",
               options.policies_path.empty() ? "(none)" : options.policies_path,
               absl::FormatDuration(options.policies_poll_interval));
  spdlog::info("  redis                {}",
               options.redis.empty() ? "(none)" : options.redis);
  spdlog::info("  redis-sentinels      {}{}",
               options.redis_sentinels.empty() ? "(none)"
                                               : options.redis_sentinels,
               options.redis_master.empty()
                   ? std::string()
                   : absl::StrCat(" (master \"", options.redis_master, "\")"));
  spdlog::info("  redis-cluster        {}",
               options.redis_cluster.empty() ? "(none)"
                                             : options.redis_cluster);
  spdlog::info("  upstream             {}",
               options.upstream.empty()
                   ? std::string("(none)")
                   : absl::StrCat(options.upstream,
                                  " (a leaf: grants leased from the central "
                                  "replicas; timeout ",
                                  absl::FormatDuration(options.upstream_timeout),
                                  ")"));
  if (!options.upstream.empty()) {
    const wire::ClientTlsFiles& tls = options.upstream_tls;
    spdlog::info(
        "  upstream-tls         {}",
        !tls.enabled()
            ? std::string("(none: plaintext)")
            : absl::StrCat(
                  "ca ", tls.ca_file.empty() ? "(system)" : tls.ca_file,
                  tls.cert_file.empty()
                      ? std::string()
                      : absl::StrCat(", client cert ", tls.cert_file),
                  tls.server_name.empty()
                      ? std::string()
                      : absl::StrCat(", server name ", tls.server_name)));
  } else if (CentralReplica(options)) {
    spdlog::info("  max-leaves           {}{}", options.max_leaves,
                 options.max_leaves == 0
                     ? " (serves no leaves)"
                     : " (leaves leasing through --listen)");
  }
  if (!ClusterModeEnabled(options)) {
    spdlog::info("  (no --redis, --redis-sentinels, --redis-cluster nor "
                 "--upstream: standalone)");
  }
  spdlog::info("  redis-user           {}",
               options.redis_user.empty() ? "(none)" : options.redis_user);
  spdlog::info("  redis-password-file  {}",
               options.redis_password_file.empty()
                   ? "(none: no AUTH)"
                   : options.redis_password_file);
  spdlog::info("  redis-db             {}", options.redis_db);
  spdlog::info("  sync-interval        {} (cluster mode only)",
               absl::FormatDuration(options.sync_interval));
  spdlog::info("  replica-id           {} (cluster mode only)", replica_id);
  spdlog::info("  expected-replicas    {} (cluster mode only)",
               options.expected_replicas);
  spdlog::info("  redis-timeout        {} (cluster mode only)",
               absl::FormatDuration(options.redis_timeout));
  spdlog::info("  unknown-dependency   {}",
               UnknownDependencyName(options.unknown_dependency));
  spdlog::info("  sweep-interval       {}",
               absl::FormatDuration(options.sweep_interval));
  spdlog::info(
      "  state-file           {}",
      options.state_file.empty()
          ? std::string("(none)")
          : !ClusterModeEnabled(options)
                ? absl::StrCat(options.state_file, " (written every ",
                               absl::FormatDuration(options.state_file_interval),
                               " and at shutdown)")
                : absl::StrCat(options.state_file,
                               " (ignored: cluster mode keeps warm state in "
                               "the store)"));
}

}  // namespace sluice::app
