// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_SLUICED_PROCESS_H_
#define SLUICE_TESTS_TESTING_SLUICED_PROCESS_H_

// A real sluiced child process for integration tests: its own temp dir,
// policies file and log; ports chosen by the server (port 0) and read back
// from the file it writes with --port-file once every listener is bound.
//
// The binary is $SLUICED_BINARY when set (to run the tests against another
// build, e.g. a copy of main's sluiced; it must know --port-file), else this
// build's (tests/testing/build_paths.h).

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "sluice/v1/admin.grpc.pb.h"
#include "sluice/v1/decision.grpc.pb.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/http_get.h"
#include "tests/testing/port_file.h"
#include "tests/testing/wait_for.h"

extern char** environ;

namespace sluice::testing {

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

inline void WriteFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
  }
  std::rename(tmp.c_str(), path.c_str());
}

// Runs a command through the shell; its exit code and combined output.
struct CommandResult {
  int exit_code = -1;
  std::string output;
};
inline CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) result.output.append(buf, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// Starts args[0] with `args` and the environment `env` ("NAME=VALUE"),
// stdout and stderr to `log_path` (truncated, or appended to with
// `append`). The child's pid, or -1.
inline pid_t SpawnWithLog(std::vector<std::string> args,
                          std::vector<std::string> env,
                          const std::string& log_path, bool append = false) {
  std::vector<char*> argv, envp;
  for (std::string& s : args) argv.push_back(s.data());
  for (std::string& s : env) envp.push_back(s.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT |
                                       (append ? O_APPEND : O_TRUNC),
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  const int rc =
      posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

// This process's environment, as SpawnWithLog takes it.
inline std::vector<std::string> CurrentEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  return env;
}

// The sluiced binary the tests start: $SLUICED_BINARY, else this build's.
inline std::string SluicedBinary() {
  const char* path = std::getenv("SLUICED_BINARY");
  return path != nullptr && *path != '\0' ? std::string(path)
                                          : std::string(kSluicedPath);
}

class SluicedProcess {
 public:
  SluicedProcess() {
    char dir[] = "/tmp/sluiced_admin_XXXXXX";
    if (mkdtemp(dir) != nullptr) dir_ = dir;
    policies_path_ = dir_ + "/policies.yaml";
    log_path_ = dir_ + "/sluiced.log";
    token_path_ = dir_ + "/token";
    port_file_ = dir_ + "/ports";
  }
  ~SluicedProcess() {
    Kill();
    RunCommand(absl::StrCat("rm -rf ", dir_));
  }

  const std::string& dir() const { return dir_; }
  const std::string& policies_path() const { return policies_path_; }
  const std::string& token_path() const { return token_path_; }
  std::string Log() const { return ReadFile(log_path_); }
  // The running child's pid, or -1.
  pid_t pid() const { return pid_; }
  // The TCP ports; 0 for a listener on a Unix socket.
  int port() const { return port_; }
  int admin_port() const { return admin_port_; }
  int metrics_port() const { return metrics_port_; }
  // Where DecisionService and AdminService are reachable, as sluiced wrote
  // them to its port file: "127.0.0.1:PORT" or "unix:PATH".
  const std::string& target() const { return target_; }
  const std::string& admin_target() const { return admin_target_; }
  // Any listener's address in the port file ("http" with --http-listen),
  // or "" when the file has no such line.
  std::string listener(const std::string& name) const {
    const auto it = listeners_.find(name);
    return it == listeners_.end() ? std::string() : it->second;
  }

  // The addresses the next Start listens on (--listen, --admin-listen);
  // "127.0.0.1:0" each until set. E.g. "unix:" + dir() + "/sluice.sock".
  void set_listen(std::string listen, std::string admin_listen) {
    listen_ = std::move(listen);
    admin_listen_ = std::move(admin_listen);
  }

  // The unlabeled sample `name` of this process's /metrics, or -1.
  double Metric(const std::string& name) const {
    return MetricSample(metrics_port_, name);
  }

  // Cluster mode: waits until this replica counts `n` live replicas (itself
  // included) at its last tick; false after `timeout`.
  bool WaitForLiveReplicas(int n, absl::Duration timeout) const {
    return WaitFor([&] { return Metric("sluice_live_replicas") == n; },
                   timeout).has_value();
  }

  // Credentials of the data and admin channels the next Start opens (a
  // sluiced with --tls-cert); plaintext until set.
  void set_channel_credentials(
      std::shared_ptr<grpc::ChannelCredentials> credentials) {
    credentials_ = std::move(credentials);
  }

  // NAME=VALUE entries added to the environment of the next Start, replacing
  // inherited variables of the same name (e.g. LD_PRELOAD and FAKETIME).
  void set_extra_env(std::vector<std::string> env) {
    extra_env_ = std::move(env);
  }

  // Starts sluiced with `policies` and `extra` flags; false (with the log
  // in `error`) when it does not come up within 15 s.
  bool Start(const std::string& policies, const std::vector<std::string>& extra,
             const std::string& token, std::string* error) {
    WriteFile(policies_path_, policies);
    token_ = token;
    std::remove(port_file_.c_str());  // a restart must not read the old one
    std::vector<std::string> args = {
        SluicedBinary(), "--listen=" + listen_, "--admin-listen=" + admin_listen_,
        "--metrics-listen=127.0.0.1:0", "--policies=" + policies_path_,
        "--port-file=" + port_file_};
    if (!token.empty()) {
      WriteFile(token_path_, token + "\n");
      args.push_back("--admin-token-file=" + token_path_);
    }
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      if (absl::StartsWith(*e, "SLUICE_")) continue;
      const absl::string_view entry(*e);
      const absl::string_view name_eq = entry.substr(0, entry.find('=') + 1);
      const bool replaced = std::any_of(
          extra_env_.begin(), extra_env_.end(),
          [&](const std::string& v) { return absl::StartsWith(v, name_eq); });
      if (!replaced) env.push_back(*e);
    }
    env.insert(env.end(), extra_env_.begin(), extra_env_.end());
    pid_ = SpawnWithLog(args, std::move(env), log_path_);
    if (pid_ <= 0) {
      *error = "cannot spawn " + args[0];
      return false;
    }
    // Up when the port file is there (sluiced writes it once everything is
    // bound), or given up when the process has exited.
    std::optional<std::map<std::string, std::string>> ports;
    bool exited = false;
    WaitFor(
        [&] {
          ports = ReadListenerFile(port_file_);
          if (ports.has_value()) return true;
          int status = 0;
          exited = waitpid(pid_, &status, WNOHANG) == pid_;
          return exited;
        },
        absl::Seconds(15), absl::Milliseconds(20));
    if (exited) {
      pid_ = -1;
      *error = "sluiced exited early:\n" + Log();
      return false;
    }
    if (!ports.has_value()) {
      *error = "sluiced did not start (no port file " + port_file_ + "):\n" +
               Log();
      return false;
    }
    listeners_ = *ports;
    target_ = (*ports)["grpc"];
    admin_target_ = (*ports)["admin"];
    port_ = PortOf(target_);
    admin_port_ = PortOf(admin_target_);
    metrics_port_ = PortOf((*ports)["metrics"]);
    if (target_.empty() || admin_target_.empty() || metrics_port_ == 0) {
      *error = "port file " + port_file_ + " lacks a listener:\n" +
               ReadFile(port_file_);
      return false;
    }
    const std::shared_ptr<grpc::ChannelCredentials> credentials =
        credentials_ != nullptr ? credentials_
                                : grpc::InsecureChannelCredentials();
    data_channel_ = grpc::CreateChannel(target_, credentials);
    admin_channel_ = grpc::CreateChannel(admin_target(), credentials);
    decision_ = v1::DecisionService::NewStub(data_channel_);
    admin_ = v1::AdminService::NewStub(admin_channel_);
    // Connected before the test's first call: a first connect that fails
    // puts a channel into a second of reconnect backoff, during which every
    // call fails at once and a load test counts errors.
    const auto ready = absl::ToChronoTime(absl::Now() + absl::Seconds(5));
    data_channel_->WaitForConnected(ready);
    admin_channel_->WaitForConnected(ready);
    return true;
  }

  // SIGTERM and wait; the exit code, or -1.
  int Terminate() {
    decision_.reset();
    admin_.reset();
    data_channel_.reset();
    admin_channel_.reset();
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    int status = 0;
    if (!WaitFor([&] { return waitpid(pid_, &status, WNOHANG) == pid_; },
                 absl::Seconds(10))) {
      Kill();
      return -1;
    }
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  std::unique_ptr<grpc::ClientContext> Context(
      const std::string& token_override = "\x01") const {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    const std::string& token =
        token_override == "\x01" ? token_ : token_override;
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
    return ctx;
  }

  v1::AcquireResponse Acquire(const std::string& dependency,
                              grpc::Status* status = nullptr) {
    v1::AcquireRequest req;
    req.set_dependency(dependency);
    v1::AcquireResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    grpc::Status s = decision_->Acquire(&ctx, req, &resp);
    if (status) *status = s;
    return resp;
  }
  v1::BreakerState Report(const std::string& dependency,
                          const std::string& permit_id, v1::Outcome outcome) {
    v1::ReportResultRequest req;
    req.set_dependency(dependency);
    req.set_permit_id(permit_id);
    req.set_outcome(outcome);
    req.mutable_latency()->set_nanos(5000000);
    v1::ReportResultResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
    decision_->ReportResult(&ctx, req, &resp);
    return resp.breaker_state();
  }

  v1::AdminService::Stub* admin() { return admin_.get(); }
  std::shared_ptr<grpc::Channel> data_channel() { return data_channel_; }
  std::shared_ptr<grpc::Channel> admin_channel() { return admin_channel_; }

 private:
  std::string dir_, policies_path_, log_path_, token_path_, port_file_, token_;
  std::string listen_ = "127.0.0.1:0", admin_listen_ = "127.0.0.1:0";
  std::string target_, admin_target_;
  std::map<std::string, std::string> listeners_;
  std::vector<std::string> extra_env_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  pid_t pid_ = -1;
  int port_ = 0, admin_port_ = 0, metrics_port_ = 0;
  std::shared_ptr<grpc::Channel> data_channel_, admin_channel_;
  std::unique_ptr<v1::DecisionService::Stub> decision_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
};

// Cluster mode: waits until each of `replicas` has ended `ticks` more sync
// ticks, good or failed, than when called; false after `timeout`. Two ticks
// include a whole one that started after the call.
inline bool WaitForSyncTicks(const std::vector<const SluicedProcess*>& replicas,
                             int ticks, absl::Duration timeout) {
  std::vector<double> from;
  for (const SluicedProcess* r : replicas) {
    from.push_back(r->Metric("sluice_sync_ticks_total"));
  }
  return WaitFor(
             [&] {
               for (size_t i = 0; i < replicas.size(); ++i) {
                 if (replicas[i]->Metric("sluice_sync_ticks_total") <
                     from[i] + ticks) {
                   return false;
                 }
               }
               return true;
             },
             timeout, absl::Milliseconds(20))
      .has_value();
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_SLUICED_PROCESS_H_
