// SPDX-License-Identifier: Apache-2.0
// sluiced: turns flags (and SLUICE_* environment variables) into
// Server::Options, runs the server, and shuts it down on SIGTERM/SIGINT.

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/command_line.h"
#include "base/files.h"
#include "server/app/options.h"
#include "server/app/policies_file.h"
#include "server/app/server.h"
#include "server/app/unix_socket.h"
#include "spdlog/spdlog.h"
#include "wire/time.h"

namespace {

constexpr int kExitUsage = 2;

[[noreturn]] void UsageError(const std::string& message) {
  std::fprintf(stderr, "sluiced: %s\nTry 'sluiced --help'.\n", message.c_str());
  std::exit(kExitUsage);
}

// What the command line and the environment come to. The defaults are
// ServerOptions' own.
struct Flags {
  sluice::app::Server::Options server;
  spdlog::level::level_enum log_level = spdlog::level::info;
  std::string port_file;
  // --check: the policies files to validate instead of serving.
  std::vector<std::string> check_paths;
};

// Stores a flag's value, or says what is wrong with it.
using Store = std::function<absl::Status(const std::string&)>;

Store StoreString(std::string* field) {
  return [field](const std::string& value) {
    *field = value;
    return absl::OkStatus();
  };
}

Store StoreDuration(absl::Duration* field) {
  return [field](const std::string& value) {
    absl::StatusOr<absl::Duration> parsed =
        sluice::wire::ParseDurationFlag(value);
    if (!parsed.ok()) return parsed.status();
    *field = *parsed;
    return absl::OkStatus();
  };
}

Store StoreWholeNumber(int* field, int min, int max) {
  return [field, min, max](const std::string& value) {
    int n = 0;
    if (!absl::SimpleAtoi(value, &n)) {
      return absl::InvalidArgumentError("expected a whole number");
    }
    if (n < min || n > max) {
      return absl::InvalidArgumentError(
          absl::StrCat("must be in [", min, ", ", max, "]"));
    }
    *field = n;
    return absl::OkStatus();
  };
}

// Adds --NAME, which SLUICE_NAME sets when the command line does not.
// `type` and `default_shown` are for --help only.
void AddFlag(CLI::App& app, const std::string& name, const std::string& type,
             const std::string& default_shown, const std::string& help,
             Store store) {
  const std::string flag = "--" + name;
  const std::string underscored = absl::StrReplaceAll(name, {{"-", "_"}});
  const std::string env =
      absl::StrCat("SLUICE_", absl::AsciiStrToUpper(underscored));
  std::string names = flag;
  // abseil's spelling, which sluiced accepted before it used CLI11.
  if (underscored != name) absl::StrAppend(&names, ",--", underscored);
  app.add_option_function<std::string>(
         names,
         [&app, flag, env, store = std::move(store)](const std::string& value) {
           const absl::Status status = store(value);
           if (status.ok()) return;
           // The usage error names where the value came from.
           const std::vector<CLI::Option*>& given = app.parse_order();
           const bool on_command_line =
               std::find(given.begin(), given.end(), app.get_option(flag)) !=
               given.end();
           throw CLI::ValidationError(
               absl::StrCat("bad value for ", on_command_line ? flag : env,
                            "=\"", value, "\": ", status.message()));
         },
         help)
      ->type_name(type)
      ->default_str(default_shown)
      ->envname(env);
}

void AddFlags(CLI::App& app, Flags* flags) {
  sluice::app::Server::Options& options = flags->server;
  AddFlag(app, "listen", "ADDRESS", options.listen,
          "Address for DecisionService, gRPC health and reflection: HOST:PORT,\n"
          "or unix:PATH for a Unix socket (a sidecar next to its gateway).\n"
          "Port 0 picks a free port (the log line \"serving DecisionService\n"
          "on ADDRESS\" names it). A socket left by a crashed sluiced is\n"
          "removed at start; one a live process serves on is not.",
          StoreString(&options.listen));
  AddFlag(app, "admin-listen", "ADDRESS", options.admin_listen,
          "Address for the AdminService (sluicectl): HOST:PORT or unix:PATH.\n"
          "Keep it on loopback, a private network or a socket; it is never\n"
          "served on --listen. Port 0 picks a free port (logged as \"serving\n"
          "AdminService on ADDRESS\"). Standalone, admin changes apply to\n"
          "this process only.",
          StoreString(&options.admin_listen));
  AddFlag(app, "socket-mode", "MODE",
          sluice::app::FormatSocketMode(options.socket_mode),
          "Permissions of the Unix sockets of --listen and --admin-listen, in\n"
          "octal. Connecting needs write permission: the default lets the\n"
          "socket's group connect (e.g. a gateway container sharing the\n"
          "pod's fsGroup); 0600 allows only sluiced's own user.",
          [&options](const std::string& value) {
            absl::StatusOr<uint32_t> mode = sluice::app::ParseSocketMode(value);
            if (!mode.ok()) return mode.status();
            options.socket_mode = *mode;
            return absl::OkStatus();
          });
  AddFlag(app, "admin-token-file", "PATH", options.admin_token_file,
          "File holding the bearer tokens the admin API then requires\n"
          "(\"authorization: Bearer <token>\"): one a line, # comments;\n"
          "any of them is accepted. Re-read within a second of a change\n"
          "(rotation without a restart); empty: no token.",
          StoreString(&options.admin_token_file));
  AddFlag(app, "metrics-listen", "HOST:PORT", options.metrics_listen,
          "Address for Prometheus /metrics (logged as \"serving metrics on\n"
          "HOST:PORT\"); see docs/operations.md for every metric.",
          StoreString(&options.metrics_listen));
  AddFlag(app, "http-listen", "HOST:PORT", options.http_listen,
          "Address for the HTTP/JSON decision API, for gateways without\n"
          "gRPC: POST /v1/acquire, /v1/report, /v1/reports, /v1/decide and\n"
          "GET /v1/health (docs/http.md). TCP only (HOST:PORT; unix: is\n"
          "refused). Port 0 picks a free port (logged as \"serving HTTP API\n"
          "on HOST:PORT\"). Empty: no HTTP API.",
          StoreString(&options.http_listen));
  AddFlag(
      app, "http-threads", "N", std::to_string(options.http_threads),
      "Threads running the HTTP API's event loops (at most 256); no\n"
      "thread is tied to a connection. The core count is plenty.",
      StoreWholeNumber(&options.http_threads, 1, sluice::app::kMaxHttpThreads));
  AddFlag(app, "http-max-connections", "N",
          std::to_string(options.http_max_connections),
          "HTTP connections open at once (idle keep-alive ones included).\n"
          "A new connection beyond it closes the one idle longest or\n"
          "slowest in its head. Lowered at start to what the open-file\n"
          "limit allows (its soft limit is raised to the hard one).",
          StoreWholeNumber(&options.http_max_connections, 1,
                           sluice::app::kMaxHttpConnections));
  AddFlag(app, "tls-cert", "PATH", options.tls_cert_file,
          "PEM certificate chain (the server's certificate first): serve\n"
          "TLS on every TCP listener of --listen, --admin-listen and\n"
          "--http-listen (unix: sockets and /metrics stay plaintext). Needs\n"
          "--tls-key. Checked at start (a bad or mismatched pair is fatal)\n"
          "and re-read within 5 s when it changes, without a restart (e.g.\n"
          "a cert-manager renewal); see docs/tls.md. Empty: plaintext.",
          StoreString(&options.tls_cert_file));
  AddFlag(app, "tls-key", "PATH", options.tls_key_file,
          "PEM private key of --tls-cert (unencrypted).",
          StoreString(&options.tls_key_file));
  AddFlag(app, "tls-client-ca", "PATH", options.tls_client_ca_file,
          "PEM CA bundle: clients of the TLS listeners must present a\n"
          "certificate it signed (mutual TLS); others are refused in the\n"
          "handshake. Re-read like --tls-cert. Empty: no client certificate\n"
          "asked.",
          StoreString(&options.tls_client_ca_file));
  AddFlag(app, "policies", "PATH", options.policies_path,
          "Policies file (YAML). Loaded at startup (an invalid file is fatal)\n"
          "and watched: a valid edit is applied within about a second, an\n"
          "invalid one is logged and the previous policies stay. Empty: start\n"
          "with no policies.",
          StoreString(&options.policies_path));
  AddFlag(app, "redis", "HOST:PORT", options.redis,
          "Redis host:port for cluster mode: cluster-scope limits and\n"
          "breakers are shared with the other replicas through it, once per\n"
          "--sync-interval and never on the request path. Empty: standalone,\n"
          "everything in memory. sluiced starts and serves even when Redis\n"
          "is down; see docs/cluster.md.",
          StoreString(&options.redis));
  AddFlag(app, "redis-cluster", "HOST:PORT,...", options.redis_cluster,
          "Redis Cluster seed nodes for cluster mode, instead of --redis:\n"
          "the slot map is read from them (CLUSTER SLOTS) and each policy's\n"
          "state goes to the master of its slot; MOVED and ASK are followed.\n"
          "Excludes --redis and --redis-sentinels; see docs/cluster.md.",
          StoreString(&options.redis_cluster));
  AddFlag(app, "upstream", "TARGET", options.upstream,
          "Run as a leaf of the grant tree: lease cluster-scope grants,\n"
          "breakers and the operator config from the central replicas\n"
          "(sluiced with --redis, --redis-sentinels or --redis-cluster)\n"
          "instead of from Redis, once per --sync-interval and never on the\n"
          "request path. TARGET is a gRPC target of their --listen port:\n"
          "HOST:PORT, unix:PATH, dns:///NAME:PORT or ipv4:A:PORT,B:PORT; with\n"
          "several replicas behind it the leaf follows one and moves to\n"
          "another when it stops answering. Excludes the --redis* flags and\n"
          "--policies (a leaf takes its policies from upstream); admin writes\n"
          "go to a central replica. See docs/cluster.md.",
          StoreString(&options.upstream));
  AddFlag(app, "upstream-tls-ca", "PATH", options.upstream_tls.ca_file,
          "PEM CA bundle that signed the central replicas' certificate\n"
          "(their --tls-cert): lease over TLS. Empty, with neither\n"
          "--upstream-tls-cert nor --upstream-tls-key: plaintext.",
          StoreString(&options.upstream_tls.ca_file));
  AddFlag(app, "upstream-tls-cert", "PATH", options.upstream_tls.cert_file,
          "Client certificate chain for central replicas that require one\n"
          "(--tls-client-ca); needs --upstream-tls-key. Read at start.",
          StoreString(&options.upstream_tls.cert_file));
  AddFlag(app, "upstream-tls-key", "PATH", options.upstream_tls.key_file,
          "PEM private key of --upstream-tls-cert (unencrypted).",
          StoreString(&options.upstream_tls.key_file));
  AddFlag(app, "upstream-tls-server-name", "NAME",
          options.upstream_tls.server_name,
          "Name the central replicas' certificate must carry when it is not\n"
          "the target's host (e.g. an ipv4: target). Needs TLS.",
          StoreString(&options.upstream_tls.server_name));
  AddFlag(app, "upstream-timeout", "DURATION",
          absl::FormatDuration(options.upstream_timeout),
          "Deadline of each lease round trip to the upstream; a slower\n"
          "central replica counts as not answering (leaves only).",
          StoreDuration(&options.upstream_timeout));
  AddFlag(app, "max-leaves", "N", std::to_string(options.max_leaves),
          "Central replicas: most leaves (sluiced --upstream) served at once\n"
          "through --listen; one more is refused and tries another replica.\n"
          "0 serves none (the lease service is not offered). At most 100000.",
          [&options](const std::string& value) {
            uint32_t n = 0;
            if (!absl::SimpleAtoi(value, &n) ||
                n > sluice::app::kMaxLeavesLimit) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "expected a whole number in [0, ",
                  sluice::app::kMaxLeavesLimit, "]"));
            }
            options.max_leaves = n;
            return absl::OkStatus();
          });
  AddFlag(app, "sync-interval", "DURATION",
          absl::FormatDuration(options.sync_interval),
          "Cluster sync tick, e.g. 1s or 500ms (cluster mode only).",
          StoreDuration(&options.sync_interval));
  AddFlag(app, "replica-id", "NAME", options.replica_id,
          "This replica's name in the cluster, unique among replicas; empty\n"
          "means HOSTNAME-PID (cluster mode only).",
          StoreString(&options.replica_id));
  AddFlag(app, "redis-timeout", "DURATION",
          absl::FormatDuration(options.redis_timeout),
          "Timeout of each Redis connect and reply; a slower Redis counts as\n"
          "down (cluster mode only).",
          StoreDuration(&options.redis_timeout));
  AddFlag(app, "redis-user", "NAME", options.redis_user,
          "Redis ACL user to AUTH as (needs --redis-password-file). Empty:\n"
          "AUTH with the password alone (requirepass).",
          StoreString(&options.redis_user));
  AddFlag(app, "redis-password-file", "PATH", options.redis_password_file,
          "File holding the Redis password (trailing whitespace ignored).\n"
          "Read again at every reconnect, so a rotated secret is picked up\n"
          "without a restart. Empty: no AUTH.",
          StoreString(&options.redis_password_file));
  AddFlag(app, "redis-db", "N", std::to_string(options.redis_db),
          "Redis database number to SELECT (not with Redis Cluster).",
          [&options](const std::string& value) {
            int32_t db = 0;
            if (!absl::SimpleAtoi(value, &db) || db < 0) {
              return absl::InvalidArgumentError(
                  "expected a database number >= 0");
            }
            options.redis_db = db;
            return absl::OkStatus();
          });
  AddFlag(app, "redis-sentinels", "HOST:PORT,...", options.redis_sentinels,
          "Redis Sentinel instead of --redis: the sentinels to ask for the\n"
          "master named --redis-master. sluiced follows a failover: after a\n"
          "connection error, a timeout or a READONLY answer it asks again and\n"
          "checks with ROLE that the answer is the master.",
          StoreString(&options.redis_sentinels));
  AddFlag(app, "redis-master", "NAME", options.redis_master,
          "With --redis-sentinels: the master's name in the sentinels'\n"
          "config (sentinel monitor NAME ...).",
          StoreString(&options.redis_master));
  AddFlag(app, "expected-replicas", "N",
          std::to_string(options.expected_replicas),
          "Replicas the cluster normally runs (the Deployment's replicas).\n"
          "A LOCAL policy divides its cluster limits by the live replica\n"
          "count of the last good sync; a replica that starts while Redis is\n"
          "down has none and divides by this instead (cluster mode only).",
          [&options](const std::string& value) {
            int32_t count = 0;
            if (!absl::SimpleAtoi(value, &count)) {
              return absl::InvalidArgumentError("expected a whole number");
            }
            if (count < 1) {
              return absl::InvalidArgumentError("must be at least 1");
            }
            options.expected_replicas = static_cast<uint32_t>(count);
            return absl::OkStatus();
          });
  AddFlag(app, "unknown-dependency", "ACTION",
          sluice::app::UnknownDependencyName(options.unknown_dependency),
          "Answer for a dependency without a policy: allow or reject (reason\n"
          "UNKNOWN_DEPENDENCY either way).",
          [&options](const std::string& value) {
            const std::string action = absl::AsciiStrToLower(value);
            if (action == "allow") {
              options.unknown_dependency =
                  sluice::core::UnknownDependencyAction::kAllow;
            } else if (action == "reject") {
              options.unknown_dependency =
                  sluice::core::UnknownDependencyAction::kReject;
            } else {
              return absl::InvalidArgumentError("must be allow or reject");
            }
            return absl::OkStatus();
          });
  AddFlag(app, "state-file", "PATH", options.state_file,
          "Standalone: keep adaptive limits, learned latency baselines and\n"
          "OPEN breakers in this file across restarts. Read at start (a\n"
          "missing, corrupt or foreign file is logged and ignored; state of a\n"
          "policy that changed since is not taken back), written every 10s\n"
          "and at shutdown (SIGTERM), atomically. Its directory must be\n"
          "writable. Ignored with --redis (the store keeps warm state).\n"
          "Empty: start cold every time. See docs/operations.md.",
          StoreString(&options.state_file));
  AddFlag(app, "log-level", "LEVEL", "info",
          "trace, debug, info, warn, error, critical or off.",
          [flags](const std::string& value) {
            flags->log_level = spdlog::level::from_str(value);
            // from_str answers "off" for anything it does not know.
            if (flags->log_level == spdlog::level::off && value != "off") {
              return absl::InvalidArgumentError(
                  "must be trace, debug, info, warn, error, critical or off");
            }
            return absl::OkStatus();
          });
  AddFlag(app, "port-file", "PATH", flags->port_file,
          "Once every listener is bound, write their addresses to this file,\n"
          "one NAME=ADDRESS line each for grpc (--listen), admin, metrics\n"
          "and, with --http-listen, http, so that whoever started sluiced\n"
          "with port 0 learns the ports without reading the log. ADDRESS is\n"
          "HOST:PORT with the bound port, or unix:PATH. Written to PATH.tmp\n"
          "and renamed, so a PATH that exists is complete; removed at a\n"
          "clean exit. Empty: no file.",
          StoreString(&flags->port_file));
}

// CLI11's layout, with each flag's help text on the lines below it and only
// its documented names: "-h,--help", "--admin-listen" (not --admin_listen).
class HelpFormatter : public CLI::Formatter {
 public:
  HelpFormatter() { column_width(6); }
  std::string make_option_name(const CLI::Option* option,
                               bool /*is_positional*/) const override {
    const std::vector<std::string>& shorts = option->get_snames();
    return shorts.empty()
               ? option->get_name()
               : absl::StrCat("-", shorts.front(), ",", option->get_name());
  }
};

// Reads the command line and the environment, or exits: 0 after printing
// --help, kExitUsage on anything it cannot use.
Flags ParseFlags(int argc, char** argv) {
  CLI::App app(
      "sluiced: the Sluice decision server.\n\n"
      "Every flag can also be set by the environment variable shown; the\n"
      "command line wins over the environment.\n",
      "sluiced");
  app.formatter(std::make_shared<HelpFormatter>());
  app.footer(
      "Exit codes: 0 after SIGTERM/SIGINT, 1 when the server cannot start\n"
      "(bad policies file, port in use), 2 for bad flags. With --check: 0\n"
      "when every file is valid, 1 when one is not.");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  Flags flags;
  AddFlags(app, &flags);
  CLI::Option* check =
      app.add_option(
             "--check", flags.check_paths,
             "Validate these policies files and exit, serving nothing (no\n"
             "port, no Redis): the checks sluiced makes when it loads one,\n"
             "each problem printed as FILE:LINE: message. Exit 0 when all\n"
             "are valid, 1 when one is not. Takes no other flag.")
          ->type_name("FILE")
          ->expected(1, CLI::detail::expected_max_vector_size)
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  const sluice::base::CommandLine line = sluice::base::ParseCommandLine(
      app, sluice::base::CommandFlags(), argc, argv);
  switch (line.outcome) {
    case sluice::base::CommandLine::Outcome::kHelp:
      std::fputs(line.text.c_str(), stdout);
      std::exit(0);
    case sluice::base::CommandLine::Outcome::kUsageError:
      UsageError(line.text);
    case sluice::base::CommandLine::Outcome::kRun:
      break;
  }
  if (!flags.check_paths.empty()) {
    // A serving flag beside --check would be silently ignored, and a
    // --policies among them would look checked when it is not.
    for (const CLI::Option* given : app.parse_order()) {
      if (given == check) continue;
      UsageError(absl::StrCat(
          "--check validates policies files and serves nothing; it takes no "
          "other flag, got ",
          given->get_name(),
          given->get_name() == "--policies" ? " (give the file to --check)"
                                            : ""));
    }
    // The environment's SLUICE_* settings are for serving: not checked.
    return flags;
  }
  // Relative socket paths become absolute here, once, against the working
  // directory sluiced started in.
  flags.server.listen = sluice::app::NormalizeListenAddress(flags.server.listen);
  flags.server.admin_listen =
      sluice::app::NormalizeListenAddress(flags.server.admin_listen);
  if (absl::Status s = sluice::app::ValidateOptions(flags.server); !s.ok()) {
    UsageError(std::string(s.message()));
  }
  return flags;
}

// The --port-file format: one "name=address" line per listener (grpc,
// admin, metrics, and http when the HTTP API is on): "host:port" with the
// host as in its listen flag and the port as bound, or "unix:PATH".
// Replaced atomically, so that a reader polling for the file never sees
// half of it.
absl::Status WritePortFile(const std::string& path,
                           const sluice::app::Server::Options& options,
                           const sluice::app::Server& server) {
  std::string text = absl::StrCat(
      "grpc=", server.target(), "\n", "admin=", server.admin_target(), "\n",
      "metrics=",
      sluice::app::BoundAddress(options.metrics_listen, server.metrics_port()),
      "\n");
  if (server.http_port() != 0) {
    absl::StrAppend(&text, "http=", server.http_target(), "\n");
  }
  if (absl::Status s = sluice::base::WriteFileAtomically(path, text); !s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("--port-file: cannot write ", path, ": ", s.message()));
  }
  return absl::OkStatus();
}

// --check: validates each file as a load would, printing every problem
// compiler style on stderr and a summary line a valid file on stdout.
int CheckPoliciesFiles(const std::vector<std::string>& paths) {
  bool all_valid = true;
  for (const std::string& path : paths) {
    const sluice::app::PoliciesFileCheck check =
        sluice::app::CheckPoliciesFile(path);
    for (const std::string& error : check.errors) {
      std::fprintf(stderr, "%s\n", error.c_str());
    }
    if (check.errors.empty()) {
      std::printf("%s: ok, %zu %s\n", path.c_str(), check.policies,
                  check.policies == 1 ? "policy" : "policies");
    } else {
      all_valid = false;
    }
  }
  std::fflush(stdout);
  return all_valid ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  // Buffers of 1 MiB and more (request bodies, large gRPC messages) are
  // mapped and unmapped on their own, so that their memory goes back to the
  // system when they are freed. Setting the threshold turns off glibc's
  // dynamic one, which after the first such free serves them from the
  // arenas, where a burst of large requests stays held.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  // Block the shutdown signals before any thread starts so that every
  // thread inherits the mask and only the sigwait thread receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // A peer that hangs up while sluiced writes (a Redis, stunnel or HTTP
  // client closing mid-reply) must cost an EPIPE on that socket, not the
  // process: hiredis and OpenSSL write with write(2).
  signal(SIGPIPE, SIG_IGN);

  // Debian builds abseil with Mutex deadlock detection on, which walks a
  // lock graph on every Lock() of the hot path. Lock order is fixed by
  // design here (a dependency's lock is never held with another).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  // Files sluiced creates are its own until it says otherwise: a Unix
  // socket is bound with at most 0700 and only then opened up to
  // --socket-mode, so no connection gets in before the mode is set.
  umask(0077);

  const Flags flags = ParseFlags(argc, argv);
  if (!flags.check_paths.empty()) {
    // Nothing to shut down gracefully: let Ctrl-C and SIGTERM end it.
    pthread_sigmask(SIG_UNBLOCK, &signals, nullptr);
    return CheckPoliciesFiles(flags.check_paths);
  }
  spdlog::set_level(flags.log_level);

  sluice::app::Server server(flags.server);
  if (absl::Status s = server.BuildAndStart(); !s.ok()) {
    spdlog::critical("sluiced cannot start: {}", s.ToString());
    return 1;
  }
  const std::string& port_file = flags.port_file;
  if (!port_file.empty()) {
    if (absl::Status s = WritePortFile(port_file, flags.server, server);
        !s.ok()) {
      spdlog::critical("sluiced cannot start: {}", s.ToString());
      server.Shutdown(absl::Now());
      return 1;
    }
  }

  std::thread signal_thread([&server, signals] {
    int signal = 0;
    sigwait(&signals, &signal);
    spdlog::info("received {}", signal == SIGTERM ? "SIGTERM" : "SIGINT");
    server.Shutdown(absl::Now() + absl::Seconds(5));
  });
  server.Wait();
  signal_thread.join();
  if (!port_file.empty()) std::remove(port_file.c_str());
  spdlog::info("sluiced stopped");
  return 0;
}
