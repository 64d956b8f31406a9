// sluiced: turns flags (and SLUICE_* environment variables) into
// Server::Options, runs the server, and shuts it down on SIGTERM/SIGINT.

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/app/options.h"
#include "server/app/server.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:50051",
          "Address for DecisionService, gRPC health and reflection. Port 0 "
          "picks a free port (the log line \"serving DecisionService on "
          "HOST:PORT\" names it).");
ABSL_FLAG(std::string, admin_listen, "127.0.0.1:50052",
          "Address for the AdminService (sluicectl). Keep it on loopback or a "
          "private network; it is never served on --listen. Port 0 picks a "
          "free port (logged as \"serving AdminService on HOST:PORT\"). "
          "Standalone, admin changes apply to this process only.");
ABSL_FLAG(std::string, admin_token_file, "",
          "File holding a bearer token the admin API then requires "
          "(\"authorization: Bearer <token>\"); empty: no token.");
ABSL_FLAG(std::string, metrics_listen, "127.0.0.1:9464",
          "Address for Prometheus /metrics (logged as \"serving metrics on "
          "HOST:PORT\"); see docs/operations.md for every metric.");
ABSL_FLAG(std::string, policies, "",
          "Policies file (YAML). Loaded at startup (an invalid file is fatal) "
          "and watched: a valid edit is applied within about a second, an "
          "invalid one is logged and the previous policies stay. Empty: start "
          "with no policies.");
ABSL_FLAG(std::string, redis, "",
          "Redis host:port for cluster mode: cluster-scope limits and "
          "breakers are shared with the other replicas through it, once per "
          "--sync-interval and never on the request path. Empty: standalone, "
          "everything in memory. sluiced starts and serves even when Redis "
          "is down; see docs/cluster.md.");
ABSL_FLAG(absl::Duration, sync_interval, absl::Seconds(1),
          "Cluster sync tick, e.g. 1s or 500ms (cluster mode only).");
ABSL_FLAG(std::string, replica_id, "",
          "This replica's name in the cluster, unique among replicas; empty "
          "means HOSTNAME-PID (cluster mode only).");
ABSL_FLAG(int32_t, expected_replicas, 1,
          "Replicas the cluster normally runs (the Deployment's replicas). "
          "A LOCAL policy divides its cluster limits by the live replica "
          "count of the last good sync; a replica that starts while Redis is "
          "down has none and divides by this instead (cluster mode only).");
ABSL_FLAG(absl::Duration, redis_timeout, absl::Milliseconds(250),
          "Timeout of each Redis connect and reply; a slower Redis counts as "
          "down (cluster mode only).");
ABSL_FLAG(std::string, unknown_dependency, "allow",
          "Answer for a dependency without a policy: allow or reject (reason "
          "UNKNOWN_DEPENDENCY either way).");
ABSL_FLAG(std::string, log_level, "info",
          "trace, debug, info, warn, error, critical or off.");
ABSL_FLAG(std::string, port_file, "",
          "Once every listener is bound, write their addresses to this file, "
          "one NAME=HOST:PORT line each for grpc (--listen), admin and "
          "metrics, so that whoever started sluiced with port 0 learns the "
          "ports without reading the log. Written to PATH.tmp and renamed, "
          "so a PATH that exists is complete; removed at a clean exit. Empty: "
          "no file.");

namespace {

constexpr int kExitUsage = 2;

// The flags sluiced takes, as written on the command line.
constexpr const char* kFlagNames[] = {
    "listen",        "admin-listen", "admin-token-file", "metrics-listen",     "policies",  "redis",
    "sync-interval", "replica-id",   "redis-timeout", "expected-replicas",
    "unknown-dependency",
    "log-level",
    "port-file",
};

std::string AbslName(const std::string& name) {
  return absl::StrReplaceAll(name, {{"-", "_"}});
}

std::string EnvName(const std::string& name) {
  return absl::StrCat("SLUICE_", absl::AsciiStrToUpper(AbslName(name)));
}

[[noreturn]] void UsageError(const std::string& message) {
  std::fprintf(stderr, "sluiced: %s\nTry 'sluiced --help'.\n", message.c_str());
  std::exit(kExitUsage);
}

// Word-wraps `text` at 78 columns, each line starting with `indent`.
std::string Wrap(const std::string& text, const std::string& indent) {
  std::string out;
  std::string line = indent;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (line.size() > indent.size() && line.size() + 1 + word.size() > 78) {
      absl::StrAppend(&out, line, "\n");
      line = indent;
    }
    absl::StrAppend(&line, line.size() > indent.size() ? " " : "", word);
  }
  absl::StrAppend(&out, line, "\n");
  return out;
}

std::string UsageMessage() {
  std::string usage =
      "sluiced: the Sluice decision server.\n\n"
      "Usage: sluiced [--flag=value ...]\n\n"
      "Every flag can also be set by the environment variable shown; the\n"
      "command line wins over the environment.\n\n";
  for (const char* name : kFlagNames) {
    const absl::CommandLineFlag* flag =
        absl::FindCommandLineFlag(AbslName(name));
    absl::StrAppend(&usage, "  --", name, "  (env ", EnvName(name),
                    ", default \"", flag->DefaultValue(), "\")\n",
                    Wrap(flag->Help(), "      "));
  }
  absl::StrAppend(&usage, "\n",
                  Wrap("Exit codes: 0 after SIGTERM/SIGINT, 1 when the server "
                       "cannot start (bad policies file, port in use), 2 for "
                       "bad flags.",
                       ""));
  return usage;
}

// Sets each flag from its SLUICE_* variable, if present.
void ApplyEnvironment() {
  for (const char* name : kFlagNames) {
    const std::string env = EnvName(name);
    const char* value = std::getenv(env.c_str());
    if (value == nullptr) continue;
    std::string error;
    if (!absl::FindCommandLineFlag(AbslName(name))->ParseFrom(value, &error)) {
      UsageError(
          absl::StrCat("bad value for ", env, "=\"", value, "\": ", error));
    }
  }
}

// Flags abseil's parser defines itself (usage and flagfile handling).
bool IsAbslBuiltinFlag(const std::string& name) {
  for (const char* builtin :
       {"help", "helpfull", "helpshort", "helppackage", "helpon", "helpmatch",
        "version", "only_check_args", "flagfile", "fromenv", "tryfromenv",
        "undefok"}) {
    if (name == builtin) return true;
  }
  return false;
}

// Rewrites --some-flag to abseil's --some_flag, and rejects unknown flags and
// unparsable values with exit code 2 (abseil itself would exit 1). Values
// parsed here are parsed again by absl::ParseCommandLine; either way the
// command line overrides the environment.
std::vector<char*> NormalizeArgs(int argc, char** argv,
                                 std::vector<std::string>* storage) {
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (i > 0 && arg == "--") {
      for (; i < argc; ++i) storage->push_back(argv[i]);
      break;
    }
    if (i > 0 && absl::StartsWith(arg, "-") && arg != "-") {
      const size_t dashes = absl::StartsWith(arg, "--") ? 2 : 1;
      const size_t eq = arg.find('=');
      const std::string shown = arg.substr(0, eq);
      const std::string name = AbslName(arg.substr(dashes, eq - dashes));
      absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
      if (name == "help" || name == "helpfull" || name == "helpshort" ||
          name == "h") {
        std::fputs(absl::ProgramUsageMessage().data(), stdout);
        std::exit(0);
      }
      if (flag == nullptr && IsAbslBuiltinFlag(name)) {
        storage->push_back(arg);  // --help and friends: abseil handles them
        continue;
      }
      if (flag == nullptr && absl::StartsWith(name, "no")) {
        const absl::CommandLineFlag* negated =
            absl::FindCommandLineFlag(name.substr(2));
        if (negated == nullptr || !negated->IsOfType<bool>()) {
          UsageError(absl::StrCat("unknown flag ", shown));
        }
      } else if (flag == nullptr) {
        UsageError(absl::StrCat("unknown flag ", shown));
      }
      arg = absl::StrCat("--", name,
                         eq == std::string::npos ? "" : arg.substr(eq));
      if (flag != nullptr && !flag->IsOfType<bool>()) {
        std::string value;
        if (eq != std::string::npos) {
          value = arg.substr(arg.find('=') + 1);
        } else if (i + 1 < argc) {
          value = argv[i + 1];
        } else {
          UsageError(absl::StrCat("missing value for ", shown));
        }
        std::string error;
        if (!flag->ParseFrom(value, &error)) {
          UsageError(absl::StrCat("bad value for ", shown, "=\"", value,
                                  "\": ", error));
        }
      }
    }
    storage->push_back(arg);
  }
  std::vector<char*> args;
  for (std::string& s : *storage) args.push_back(s.data());
  return args;
}

sluice::app::Server::Options OptionsFromFlags() {
  sluice::app::Server::Options options;
  options.listen = absl::GetFlag(FLAGS_listen);
  options.admin_listen = absl::GetFlag(FLAGS_admin_listen);
  options.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  options.admin_token_file = absl::GetFlag(FLAGS_admin_token_file);
  options.policies_path = absl::GetFlag(FLAGS_policies);
  options.redis = absl::GetFlag(FLAGS_redis);
  options.sync_interval = absl::GetFlag(FLAGS_sync_interval);
  options.replica_id = absl::GetFlag(FLAGS_replica_id);
  options.redis_timeout = absl::GetFlag(FLAGS_redis_timeout);
  // A negative count becomes 0, which ValidateOptions rejects.
  options.expected_replicas = static_cast<uint32_t>(
      std::max<int32_t>(0, absl::GetFlag(FLAGS_expected_replicas)));
  const std::string unknown =
      absl::AsciiStrToLower(absl::GetFlag(FLAGS_unknown_dependency));
  if (unknown == "allow") {
    options.unknown_dependency = sluice::core::UnknownDependencyAction::kAllow;
  } else if (unknown == "reject") {
    options.unknown_dependency = sluice::core::UnknownDependencyAction::kReject;
  } else {
    UsageError(
        absl::StrCat("--unknown-dependency must be allow or reject, got \"",
                     absl::GetFlag(FLAGS_unknown_dependency), "\""));
  }
  if (absl::Status s = sluice::app::ValidateOptions(options); !s.ok()) {
    UsageError(std::string(s.message()));
  }
  return options;
}

void SetLogLevel() {
  const std::string level = absl::GetFlag(FLAGS_log_level);
  const spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  // from_str answers "off" for anything it does not know.
  if (parsed == spdlog::level::off && level != "off") {
    UsageError(absl::StrCat(
        "--log-level must be trace, debug, info, warn, error, critical or "
        "off, got \"",
        level, "\""));
  }
  spdlog::set_level(parsed);
}

// The --port-file format: one "name=host:port" line per listener (grpc,
// admin, metrics), the host as in its listen flag and the port as bound.
// Written to `path`.tmp and renamed over `path`, so that a reader polling
// for the file never sees half of it.
absl::Status WritePortFile(const std::string& path,
                           const sluice::app::Server& server) {
  const auto host = [](const std::string& address) {
    return address.substr(0, address.rfind(':'));
  };
  const std::string text = absl::StrCat(
      "grpc=", host(absl::GetFlag(FLAGS_listen)), ":", server.port(), "\n",
      "admin=", host(absl::GetFlag(FLAGS_admin_listen)), ":",
      server.admin_port(), "\n",
      "metrics=", host(absl::GetFlag(FLAGS_metrics_listen)), ":",
      server.metrics_port(), "\n");
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "--port-file: cannot write ", tmp, ": ", std::strerror(errno)));
  }
  const bool written = std::fputs(text.c_str(), f) >= 0;
  if (std::fclose(f) != 0 || !written ||
      std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat(
        "--port-file: cannot write ", path, ": ", std::strerror(error)));
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  // Block the shutdown signals before any thread starts so that every
  // thread inherits the mask and only the sigwait thread receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // Debian builds abseil with Mutex deadlock detection on, which walks a
  // lock graph on every Lock() of the hot path. Lock order is fixed by
  // design here (a dependency's lock is never held with another).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::SetProgramUsageMessage(UsageMessage());

  ApplyEnvironment();
  std::vector<std::string> storage;
  std::vector<char*> args = NormalizeArgs(argc, argv, &storage);
  std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(args.size()), args.data());
  if (positional.size() > 1) {
    UsageError(absl::StrCat("unexpected argument \"", positional[1], "\""));
  }
  SetLogLevel();
  sluice::app::Server::Options options = OptionsFromFlags();

  sluice::app::Server server(std::move(options));
  if (absl::Status s = server.BuildAndStart(); !s.ok()) {
    spdlog::critical("sluiced cannot start: {}", s.ToString());
    return 1;
  }
  const std::string port_file = absl::GetFlag(FLAGS_port_file);
  if (!port_file.empty()) {
    if (absl::Status s = WritePortFile(port_file, server); !s.ok()) {
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
