// SPDX-License-Identifier: Apache-2.0
// Starts the real sluiced binary and drives it over gRPC. Each test runs its
// own process on port 0 with its own policies file, and stops it with SIGTERM
// expecting exit code 0. The tests wait on conditions (the port file, the
// policy version, the bucket's tokens, the log); the only sleeps wait out a
// real breaker open time, which is what those tests check.

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "sluice/v1/admin.grpc.pb.h"
#include "sluice/v1/decision.grpc.pb.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/port_file.h"
#include "tests/testing/wait_for.h"

extern char** environ;

namespace sluice {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kStartTimeout = absl::Seconds(15);
constexpr absl::Duration kRpcDeadline = absl::Seconds(5);

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

// Replaces `path` atomically, so the watcher never sees half a file.
void WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
  }
  ASSERT_EQ(std::rename(tmp.c_str(), path.c_str()), 0) << path;
}

double Seconds(const google::protobuf::Duration& d) {
  return static_cast<double>(d.seconds()) + d.nanos() / 1e9;
}

// One sluiced child process with its own temp dir, log file and stubs.
// Spawns sluiced with `args` (after the binary name) and `env` on top of
// this process's environment minus any SLUICE_* variable; stdout goes to
// `out_path`, stderr to `err_path` (or to `out_path` when empty), stdin is
// /dev/null. -1 when it cannot be spawned.
pid_t SpawnSluiced(const std::vector<std::string>& args,
                   const std::vector<std::string>& env,
                   const std::string& out_path, const std::string& err_path) {
  std::vector<std::string> argv_storage = {testing::kSluicedPath};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!absl::StartsWith(*e, "SLUICE_")) env_storage.push_back(*e);
  }
  env_storage.insert(env_storage.end(), env.begin(), env.end());
  std::vector<char*> argv, envp;
  for (std::string& s : argv_storage) argv.push_back(s.data());
  for (std::string& s : env_storage) envp.push_back(s.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (err_path.empty()) {
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
  }
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null",
                                   O_RDONLY, 0);
  pid_t pid = -1;
  const int rc =
      posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

class Sluiced {
 public:
  Sluiced() {
    char dir[] = "/tmp/sluiced_test_XXXXXX";
    if (mkdtemp(dir) != nullptr) dir_ = dir;
    policies_path_ = dir_ + "/policies.yaml";
    log_path_ = dir_ + "/sluiced.log";
    port_file_ = dir_ + "/ports";
  }
  ~Sluiced() {
    if (pid_ > 0) {  // A failed test: do not leave the child behind.
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::remove(policies_path_.c_str());
    std::remove(log_path_.c_str());
    std::remove(port_file_.c_str());
    rmdir(dir_.c_str());
  }

  const std::string& policies_path() const { return policies_path_; }
  // For --port-file: the file sluiced writes once it is serving.
  const std::string& port_file() const { return port_file_; }
  std::string Log() const { return ReadAll(log_path_); }

  // Spawns sluiced with `args` (after the binary name) and `env` on top of
  // this process's environment minus any SLUICE_* variable.
  void Spawn(const std::vector<std::string>& args,
             const std::vector<std::string>& env = {}) {
    pid_ = SpawnSluiced(args, env, log_path_, "");
    ASSERT_NE(pid_, -1) << "cannot spawn " << testing::kSluicedPath;
  }

  // Spawns sluiced on port 0 with the policies file and waits until it
  // serves.
  void Start(const std::string& policies,
             std::vector<std::string> extra_args = {},
             const std::vector<std::string>& env = {}) {
    WriteFileAtomically(policies_path_, policies);
    std::vector<std::string> args = {
        "--listen=127.0.0.1:0", "--admin-listen=127.0.0.1:0",
        "--metrics-listen=127.0.0.1:0", "--policies=" + policies_path_,
        "--port-file=" + port_file_};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    Spawn(args, env);
    ASSERT_FALSE(::testing::Test::HasFatalFailure());
    ASSERT_NO_FATAL_FAILURE(AwaitPortFile());
  }

  // Waits for the port file of a process spawned with --port-file=
  // port_file(), then connects to the ports it names.
  void AwaitPortFile() {
    std::optional<std::map<std::string, int>> ports;
    testing::WaitFor(
        [&] {
          ports = testing::ReadPortFile(port_file_);
          return ports.has_value() || !Alive();
        },
        kStartTimeout, absl::Milliseconds(20));
    ASSERT_TRUE(ports.has_value())
        << (Alive() ? "sluiced did not start:\n" : "sluiced exited early:\n")
        << Log();
    port_ = (*ports)["grpc"];
    ASSERT_GT(port_, 0) << ReadAll(port_file_);
    ASSERT_GT((*ports)["admin"], 0) << ReadAll(port_file_);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_),
                                   grpc::InsecureChannelCredentials());
    stub_ = v1::DecisionService::NewStub(channel_);
    admin_ = v1::AdminService::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*ports)["admin"]),
                            grpc::InsecureChannelCredentials()));
  }

  bool Alive() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exit_status_ = status;
      pid_ = -1;
      return false;
    }
    return true;
  }

  // Waits for the process to exit by itself; its wait status, or nullopt.
  std::optional<int> WaitForExit(absl::Duration timeout) {
    if (!testing::WaitFor([this] { return !Alive(); }, timeout)) {
      return std::nullopt;
    }
    return exit_status_;
  }

  // Drops this client's connection. An idle gRPC C++ channel does not read
  // its socket, so it would not see the server's GOAWAY, and the server's
  // drain would wait for its full deadline.
  void Disconnect() {
    stub_.reset();
    admin_.reset();
    channel_.reset();
  }

  // SIGTERM, then the exit code (-1 on a crash or no exit within 10s).
  int Terminate() {
    if (!Alive()) return -1;
    kill(pid_, SIGTERM);
    std::optional<int> status = WaitForExit(absl::Seconds(10));
    if (!status.has_value() || !WIFEXITED(*status)) return -1;
    return WEXITSTATUS(*status);
  }

  grpc::Status Acquire(const v1::AcquireRequest& request,
                       v1::AcquireResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kRpcDeadline));
    return stub_->Acquire(&context, request, response);
  }

  v1::AcquireResponse Acquire(const std::string& dependency,
                              const std::string& key = "",
                              uint32_t permits = 0) {
    v1::AcquireRequest request;
    request.set_dependency(dependency);
    request.set_key(key);
    request.set_permits(permits);
    v1::AcquireResponse response;
    grpc::Status status = Acquire(request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  grpc::Status Report(const v1::ReportResultRequest& request,
                      v1::ReportResultResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kRpcDeadline));
    return stub_->ReportResult(&context, request, response);
  }

  v1::BreakerState Report(const std::string& dependency,
                          const std::string& permit_id, v1::Outcome outcome,
                          absl::Duration latency = absl::Milliseconds(5)) {
    v1::ReportResultRequest request;
    request.set_dependency(dependency);
    request.set_permit_id(permit_id);
    request.set_outcome(outcome);
    request.mutable_latency()->set_nanos(
        static_cast<int32_t>(absl::ToInt64Nanoseconds(latency)));
    v1::ReportResultResponse response;
    grpc::Status status = Report(request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.breaker_state();
  }

  grpc::health::v1::HealthCheckResponse::ServingStatus Health(
      const std::string& service) {
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kRpcDeadline));
    grpc::Status status = grpc::health::v1::Health::NewStub(channel_)->Check(
        &context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response.status();
  }

  // The dependency's state over the admin API (no token configured here).
  v1::DependencyState State(const std::string& dependency) {
    v1::GetStateRequest request;
    request.set_dependency(dependency);
    v1::DependencyState state;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kRpcDeadline));
    grpc::Status status = admin_->GetState(&context, request, &state);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return state;
  }

 private:
  std::string dir_;
  std::string policies_path_;
  std::string log_path_;
  std::string port_file_;
  pid_t pid_ = -1;
  int exit_status_ = 0;
  int port_ = 0;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::DecisionService::Stub> stub_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
};

class SluicedTest : public ::testing::Test {
 protected:
  // Every test ends with a clean SIGTERM shutdown unless it stopped the
  // process itself.
  void TearDown() override {
    if (stopped_ || !sluiced_.Alive()) return;
    sluiced_.Disconnect();
    EXPECT_EQ(sluiced_.Terminate(), 0) << sluiced_.Log();
  }

  void ExpectAlive() { EXPECT_TRUE(sluiced_.Alive()) << sluiced_.Log(); }

  Sluiced sluiced_;
  bool stopped_ = false;
};

constexpr char kBucketPolicy[] = R"(
policies:
  - name: inventory
    call_timeout: 2s
    # 5 at once, then one token an hour: nothing refills during the test.
    rate_limit: { algorithm: TOKEN_BUCKET, rate: 1, per: 3600s, burst: 5 }
)";

TEST_F(SluicedTest, TokenBucketAllowsBurstThenRateLimits) {
  ASSERT_NO_FATAL_FAILURE(sluiced_.Start(kBucketPolicy));
  for (int i = 0; i < 5; ++i) {
    v1::AcquireResponse r = sluiced_.Acquire("inventory");
    EXPECT_EQ(r.verdict(), v1::ALLOW) << i;
    EXPECT_EQ(r.reason(), v1::REASON_UNSPECIFIED);
    EXPECT_EQ(r.remaining(), 4 - i);
    EXPECT_EQ(Seconds(r.call_timeout()), 2.0);
    EXPECT_EQ(r.http_status(), 0);
    EXPECT_GT(r.policy_version(), 0u);
  }
  v1::AcquireResponse r = sluiced_.Acquire("inventory");
  EXPECT_EQ(r.verdict(), v1::REJECT);
  EXPECT_EQ(r.reason(), v1::RATE_LIMITED);
  EXPECT_EQ(r.http_status(), 429);
  EXPECT_GT(Seconds(r.retry_after()), 0.0);
  EXPECT_LE(Seconds(r.retry_after()), 3600.0);
  EXPECT_TRUE(r.permit_id().empty());
  ExpectAlive();
}

constexpr char kBreakerPolicy[] = R"(
policies:
  - name: payments
    call_timeout: 1s
    breaker:
      consecutive_failures: 3
      open_duration: 300ms
      max_open_duration: 5s
      half_open_probes: 2
      successes_to_close: 2
    fallback:
      strategy: STATIC
      payload: '{"degraded":true}'
      content_type: application/json
      on: [CIRCUIT_OPEN]
)";

// Three failures in a row: trip.
void Trip(Sluiced* s) {
  for (int i = 0; i < 3; ++i) {
    v1::AcquireResponse r = s->Acquire("payments");
    ASSERT_EQ(r.verdict(), v1::ALLOW) << i;
    ASSERT_FALSE(r.permit_id().empty());
    EXPECT_EQ(s->Report("payments", r.permit_id(), v1::FAILURE),
              i < 2 ? v1::CLOSED : v1::OPEN)
        << i;
  }
}

TEST_F(SluicedTest, BreakerTripsDegradesProbesAndRecovers) {
  ASSERT_NO_FATAL_FAILURE(sluiced_.Start(kBreakerPolicy));
  ASSERT_NO_FATAL_FAILURE(Trip(&sluiced_));

  // OPEN: the static fallback, no permit, a retry hint within open_duration.
  v1::AcquireResponse open = sluiced_.Acquire("payments");
  EXPECT_EQ(open.verdict(), v1::DEGRADE);
  EXPECT_EQ(open.reason(), v1::CIRCUIT_OPEN);
  EXPECT_EQ(open.breaker_state(), v1::OPEN);
  EXPECT_TRUE(open.permit_id().empty());
  EXPECT_EQ(open.http_status(), 0);
  EXPECT_GT(Seconds(open.retry_after()), 0.0);
  EXPECT_LE(Seconds(open.retry_after()), 0.3);
  EXPECT_EQ(open.fallback().strategy(), v1::Fallback::STATIC);
  EXPECT_EQ(open.fallback().payload(), R"({"degraded":true})");
  EXPECT_EQ(open.fallback().content_type(), "application/json");
  EXPECT_THAT(open.fallback().on(), ::testing::ElementsAre(v1::CIRCUIT_OPEN));
  ExpectAlive();

  // After open_duration: HALF_OPEN, exactly two probes, then PROBE_LIMIT.
  // Not a wait for a condition: the real 300 ms open_duration passing is
  // what is under test.
  absl::SleepFor(absl::Milliseconds(500));
  v1::AcquireResponse probe1 = sluiced_.Acquire("payments");
  v1::AcquireResponse probe2 = sluiced_.Acquire("payments");
  v1::AcquireResponse third = sluiced_.Acquire("payments");
  EXPECT_EQ(probe1.verdict(), v1::ALLOW);
  EXPECT_EQ(probe1.breaker_state(), v1::HALF_OPEN);
  EXPECT_EQ(probe2.verdict(), v1::ALLOW);
  EXPECT_EQ(third.verdict(), v1::DEGRADE);
  EXPECT_EQ(third.reason(), v1::PROBE_LIMIT);
  EXPECT_EQ(third.fallback().payload(), R"({"degraded":true})");

  // successes_to_close = 2: one success is not enough, two close it.
  EXPECT_EQ(sluiced_.Report("payments", probe1.permit_id(), v1::SUCCESS),
            v1::HALF_OPEN);
  EXPECT_EQ(sluiced_.Report("payments", probe2.permit_id(), v1::SUCCESS),
            v1::CLOSED);
  v1::AcquireResponse closed = sluiced_.Acquire("payments");
  EXPECT_EQ(closed.verdict(), v1::ALLOW);
  EXPECT_EQ(closed.breaker_state(), v1::CLOSED);
  ExpectAlive();

  // One line per transition, with its cause.
  const std::string log = sluiced_.Log();
  EXPECT_THAT(log, HasSubstr("CLOSED -> OPEN (3 consecutive failures"));
  EXPECT_THAT(log, HasSubstr("OPEN -> HALF_OPEN"));
  EXPECT_THAT(log, HasSubstr("HALF_OPEN -> CLOSED"));
}

TEST_F(SluicedTest, FailedProbeReopensTheBreaker) {
  ASSERT_NO_FATAL_FAILURE(sluiced_.Start(kBreakerPolicy));
  ASSERT_NO_FATAL_FAILURE(Trip(&sluiced_));
  absl::SleepFor(absl::Milliseconds(500));  // the real open_duration, tested
  v1::AcquireResponse probe = sluiced_.Acquire("payments");
  ASSERT_EQ(probe.verdict(), v1::ALLOW);
  ASSERT_EQ(probe.breaker_state(), v1::HALF_OPEN);
  EXPECT_EQ(sluiced_.Report("payments", probe.permit_id(), v1::TIMEOUT),
            v1::OPEN);
  v1::AcquireResponse r = sluiced_.Acquire("payments");
  EXPECT_EQ(r.verdict(), v1::DEGRADE);
  EXPECT_EQ(r.reason(), v1::CIRCUIT_OPEN);
  // The open time doubled: 300ms -> 600ms.
  EXPECT_GT(Seconds(r.retry_after()), 0.3);
  EXPECT_LE(Seconds(r.retry_after()), 0.6);
  ExpectAlive();
}

constexpr char kLimitsPolicy[] = R"(
policies:
  - name: search
    rate_limit: { rate: 1, per: 3600s, burst: 2 }
    fallback:
      strategy: DEFAULT
      on: [RATE_LIMITED]
  - name: reports
    concurrency: { max_in_flight: 2 }
)";

TEST_F(SluicedTest, RateLimitDegradesWithFallbackAndConcurrencyCaps) {
  ASSERT_NO_FATAL_FAILURE(sluiced_.Start(kLimitsPolicy));
  EXPECT_EQ(sluiced_.Acquire("search").verdict(), v1::ALLOW);
  EXPECT_EQ(sluiced_.Acquire("search").verdict(), v1::ALLOW);
  v1::AcquireResponse degraded = sluiced_.Acquire("search");
  EXPECT_EQ(degraded.verdict(), v1::DEGRADE);
  EXPECT_EQ(degraded.reason(), v1::RATE_LIMITED);
  EXPECT_EQ(degraded.fallback().strategy(), v1::Fallback::DEFAULT);
  EXPECT_EQ(degraded.http_status(), 0);

  v1::AcquireResponse a = sluiced_.Acquire("reports");
  v1::AcquireResponse b = sluiced_.Acquire("reports");
  ASSERT_EQ(a.verdict(), v1::ALLOW);
  ASSERT_EQ(b.verdict(), v1::ALLOW);
  EXPECT_EQ(a.remaining(), -1);  // no rate limit
  v1::AcquireResponse full = sluiced_.Acquire("reports");
  EXPECT_EQ(full.verdict(), v1::REJECT);
  EXPECT_EQ(full.reason(), v1::CONCURRENCY_LIMITED);
  EXPECT_EQ(full.http_status(), 429);
  // Reporting releases the slot.
  sluiced_.Report("reports", a.permit_id(), v1::SUCCESS);
  EXPECT_EQ(sluiced_.Acquire("reports").verdict(), v1::ALLOW);
  ExpectAlive();
}

grpc::StatusCode AcquireCode(Sluiced* s, const v1::AcquireRequest& request,
                             std::string* message) {
  v1::AcquireResponse response;
  grpc::Status status = s->Acquire(request, &response);
  *message = status.error_message();
  return status.error_code();
}

grpc::StatusCode ReportCode(Sluiced* s, const v1::ReportResultRequest& request,
                            std::string* message) {
  v1::ReportResultResponse response;
  grpc::Status status = s->Report(request, &response);
  *message = status.error_message();
  return status.error_code();
}

TEST_F(SluicedTest, BadInputIsInvalidArgumentAndHarmless) {
  ASSERT_NO_FATAL_FAILURE(sluiced_.Start(kBucketPolicy));
  std::string message;
  v1::AcquireRequest acquire;

  acquire.set_dependency("");
  EXPECT_EQ(AcquireCode(&sluiced_, acquire, &message),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(message, HasSubstr("dependency"));

  acquire.set_dependency(std::string(257, 'd'));
  EXPECT_EQ(AcquireCode(&sluiced_, acquire, &message),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(message, HasSubstr("256"));
  acquire.set_dependency(std::string(256, 'd'));  // at the limit: fine
  EXPECT_EQ(AcquireCode(&sluiced_, acquire, &message), grpc::StatusCode::OK);

  acquire.set_dependency("inventory");
  acquire.set_key(std::string(1025, 'k'));
  EXPECT_EQ(AcquireCode(&sluiced_, acquire, &message),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(message, HasSubstr("key"));

  acquire.set_key("");
  acquire.set_permits(1000001);
  EXPECT_EQ(AcquireCode(&sluiced_, acquire, &message),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(message, HasSubstr("permits"));
  // More than the bucket can ever hold: the engine's INVALID_ARGUMENT.
  acquire.set_permits(6);
  EXPECT_EQ(AcquireCode(&sluiced_, acquire, &message),
            grpc::StatusCode::INVALID_ARGUMENT);

  v1::ReportResultRequest report;
  report.set_dependency("inventory");
  report.set_outcome(v1::OUTCOME_UNSPECIFIED);
  EXPECT_EQ(ReportCode(&sluiced_, report, &message),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(message, HasSubstr("outcome"));
  report.set_outcome(static_cast<v1::Outcome>(42));
  EXPECT_EQ(ReportCode(&sluiced_, report, &message),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(message, HasSubstr("outcome"));

  report.set_outcome(v1::SUCCESS);
  report.mutable_latency()->set_seconds(-1);
  EXPECT_EQ(ReportCode(&sluiced_, report, &message),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(message, HasSubstr("latency"));
  report.clear_latency();

  for (const char* bad :
       {"abc", "-1", "12x", " 12", "+5", "123456789012345678901234567890"}) {
    report.set_permit_id(bad);
    EXPECT_EQ(ReportCode(&sluiced_, report, &message),
              grpc::StatusCode::INVALID_ARGUMENT)
        << bad;
    EXPECT_THAT(message, HasSubstr("permit_id"));
  }
  report.set_dependency("");
  report.set_permit_id("");
  EXPECT_EQ(ReportCode(&sluiced_, report, &message),
            grpc::StatusCode::INVALID_ARGUMENT);

  // Empty and unknown (made-up) permits, and unknown dependencies, are
  // harmless.
  report.set_dependency("inventory");
  report.set_permit_id("");
  EXPECT_EQ(ReportCode(&sluiced_, report, &message), grpc::StatusCode::OK);
  report.set_permit_id("000000003ade68b1000000003ade68b1");
  EXPECT_EQ(ReportCode(&sluiced_, report, &message), grpc::StatusCode::OK);
  report.set_dependency("nobody-knows-me");
  EXPECT_EQ(ReportCode(&sluiced_, report, &message), grpc::StatusCode::OK);

  // None of that spent a token.
  EXPECT_EQ(sluiced_.Acquire("inventory").remaining(), 4);
  ExpectAlive();
}

TEST_F(SluicedTest, UnknownDependencyIsAllowedByDefault) {
  ASSERT_NO_FATAL_FAILURE(sluiced_.Start(kBucketPolicy));
  v1::AcquireResponse r = sluiced_.Acquire("not-configured");
  EXPECT_EQ(r.verdict(), v1::ALLOW);
  EXPECT_EQ(r.reason(), v1::UNKNOWN_DEPENDENCY);
  EXPECT_GT(Seconds(r.call_timeout()), 0.0);
  ExpectAlive();
}

TEST_F(SluicedTest, UnknownDependencyRejectFromEnvironment) {
  ASSERT_NO_FATAL_FAILURE(
      sluiced_.Start(kBucketPolicy, {}, {"SLUICE_UNKNOWN_DEPENDENCY=reject"}));
  v1::AcquireResponse r = sluiced_.Acquire("not-configured");
  EXPECT_EQ(r.verdict(), v1::REJECT);
  EXPECT_EQ(r.reason(), v1::UNKNOWN_DEPENDENCY);
  EXPECT_THAT(sluiced_.Log(), HasSubstr("unknown-dependency   reject"));
  ExpectAlive();
}

TEST_F(SluicedTest, CommandLineBeatsEnvironment) {
  ASSERT_NO_FATAL_FAILURE(sluiced_.Start(kBucketPolicy,
                                         {"--unknown-dependency=allow"},
                                         {"SLUICE_UNKNOWN_DEPENDENCY=reject"}));
  EXPECT_EQ(sluiced_.Acquire("not-configured").verdict(), v1::ALLOW);
}

TEST_F(SluicedTest, HealthIsServing) {
  ASSERT_NO_FATAL_FAILURE(sluiced_.Start(kBucketPolicy));
  EXPECT_EQ(sluiced_.Health(""),
            grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(sluiced_.Health("sluice.v1.DecisionService"),
            grpc::health::v1::HealthCheckResponse::SERVING);
  ExpectAlive();
}

constexpr char kReloadV1[] = R"(
policies:
  - name: inventory
    rate_limit: { rate: 1, per: 3600s, burst: 2 }
)";
constexpr char kReloadV2[] = R"(
policies:
  - name: inventory
    rate_limit: { rate: 10, per: 1s, burst: 5 }
  - name: added
    rate_limit: { rate: 1, per: 3600s, burst: 1 }
)";
constexpr char kReloadBroken[] = R"(
policies:
  - name: inventory
    rate_limit: { rate: -3, per: 1s }
)";

TEST_F(SluicedTest, PolicyFileHotReload) {
  ASSERT_NO_FATAL_FAILURE(sluiced_.Start(kReloadV1));
  EXPECT_EQ(sluiced_.Acquire("inventory").verdict(), v1::ALLOW);
  v1::AcquireResponse second = sluiced_.Acquire("inventory");
  EXPECT_EQ(second.verdict(), v1::ALLOW);
  EXPECT_EQ(sluiced_.Acquire("inventory").verdict(), v1::REJECT);
  const uint64_t v1_version = second.policy_version();

  // A good rewrite is in force within a few seconds.
  ASSERT_NO_FATAL_FAILURE(
      WriteFileAtomically(sluiced_.policies_path(), kReloadV2));
  uint64_t v2_version = v1_version;
  testing::WaitFor(
      [&] {
        v2_version = sluiced_.Acquire("inventory").policy_version();
        return v2_version != v1_version;
      },
      absl::Seconds(10), absl::Milliseconds(100));
  ASSERT_GT(v2_version, v1_version) << sluiced_.Log();
  EXPECT_EQ(sluiced_.Acquire("added").reason(), v1::REASON_UNSPECIFIED);
  // Let the new bucket fill (10/s up to 5), then burst: exactly the new
  // burst of 5 passes (6 if a token refills meanwhile), the v1 limit was 2.
  ASSERT_TRUE(testing::WaitFor(
      [&] { return sluiced_.State("inventory").tokens_available() >= 5; },
      absl::Seconds(5)))
      << sluiced_.Log();
  int allowed = 0;
  for (int i = 0; i < 10; ++i) {
    allowed += sluiced_.Acquire("inventory").verdict() == v1::ALLOW;
  }
  EXPECT_GE(allowed, 5);
  EXPECT_LE(allowed, 6);
  EXPECT_THAT(sluiced_.Log(), HasSubstr("policy \"added\" created"));
  EXPECT_THAT(sluiced_.Log(), HasSubstr("policy \"inventory\" changed"));
  ExpectAlive();

  // A broken rewrite is logged and changes nothing.
  ASSERT_NO_FATAL_FAILURE(
      WriteFileAtomically(sluiced_.policies_path(), kReloadBroken));
  testing::WaitFor(
      [&] { return absl::StrContains(sluiced_.Log(), "rejected"); },
      absl::Seconds(10), absl::Milliseconds(100));
  EXPECT_THAT(sluiced_.Log(), HasSubstr("keeping the previous policies"));
  EXPECT_THAT(sluiced_.Log(), HasSubstr("rate"));
  ExpectAlive();
  v1::AcquireResponse after = sluiced_.Acquire("inventory");
  EXPECT_EQ(after.policy_version(), v2_version);
  EXPECT_EQ(sluiced_.Acquire("added").policy_version(),
            sluiced_.Acquire("added").policy_version());
  EXPECT_EQ(sluiced_.Health(""),
            grpc::health::v1::HealthCheckResponse::SERVING);
}

// The client keeps its idle connection open here, so the server drains for
// its whole 5s deadline and then exits 0 anyway.
TEST_F(SluicedTest, SigtermDrainsAndExitsZero) {
  ASSERT_NO_FATAL_FAILURE(sluiced_.Start(kBucketPolicy));
  EXPECT_EQ(sluiced_.Acquire("inventory").verdict(), v1::ALLOW);
  const absl::Time start = absl::Now();
  EXPECT_EQ(sluiced_.Terminate(), 0) << sluiced_.Log();
  EXPECT_LT(absl::Now() - start, absl::Seconds(8));
  stopped_ = true;
  EXPECT_THAT(sluiced_.Log(), HasSubstr("received SIGTERM"));
  EXPECT_THAT(sluiced_.Log(), HasSubstr("sluiced stopped"));
}

// With no call in flight there is nothing to drain: a rolling restart
// waits on nothing (the /metrics listener used to hold the exit up to 2 s).
TEST_F(SluicedTest, SigtermWithNothingInFlightExitsWithinASecond) {
  ASSERT_NO_FATAL_FAILURE(sluiced_.Start(kBucketPolicy));
  EXPECT_EQ(sluiced_.Acquire("inventory").verdict(), v1::ALLOW);
  sluiced_.Disconnect();
  const absl::Time start = absl::Now();
  EXPECT_EQ(sluiced_.Terminate(), 0) << sluiced_.Log();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << sluiced_.Log();
  stopped_ = true;
}

TEST_F(SluicedTest, StartsWithoutPoliciesAndWarns) {
  ASSERT_NO_FATAL_FAILURE(
      sluiced_.Spawn({"--listen=127.0.0.1:0", "--admin-listen=127.0.0.1:0",
                      "--metrics-listen=127.0.0.1:0", "--log-level=debug",
                      "--port-file=" + sluiced_.port_file()}));
  ASSERT_NO_FATAL_FAILURE(sluiced_.AwaitPortFile());
  EXPECT_THAT(sluiced_.Log(), HasSubstr("no --policies file"));
  ExpectAlive();
}

TEST_F(SluicedTest, BadPoliciesFileAtStartupExitsOne) {
  ASSERT_NO_FATAL_FAILURE(
      WriteFileAtomically(sluiced_.policies_path(), kReloadBroken));
  ASSERT_NO_FATAL_FAILURE(sluiced_.Spawn(
      {"--listen=127.0.0.1:0", "--policies=" + sluiced_.policies_path()}));
  std::optional<int> status = sluiced_.WaitForExit(absl::Seconds(10));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 1);
  EXPECT_THAT(sluiced_.Log(), HasSubstr("inventory"));
  EXPECT_THAT(sluiced_.Log(), HasSubstr("rate"));
  stopped_ = true;
}

TEST_F(SluicedTest, BadFlagsExitTwo) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--unknown-dependency=maybe"},
                                             {"--no-such-flag=1"},
                                             {"--listen=nowhere"},
                                             {"--sync-interval=soon"},
                                             {"--log-level=loud"},
                                             {"--redis=:6379"},
                                             {"--redis=127.0.0.1:port"},
                                             {"--sync-interval=0s"},
                                             {"--redis-timeout=0s"}}) {
    Sluiced s;
    ASSERT_NO_FATAL_FAILURE(s.Spawn(args));
    std::optional<int> status = s.WaitForExit(absl::Seconds(10));
    ASSERT_TRUE(status.has_value()) << args[0];
    ASSERT_TRUE(WIFEXITED(*status)) << args[0];
    EXPECT_EQ(WEXITSTATUS(*status), 2) << args[0] << "\n" << s.Log();
  }
  stopped_ = true;
}

// The command-line contract, checked on a sluiced that exits at once: what
// it printed to stdout and stderr, and its exit code (-1 if it did not exit
// within 10s, killed then).
struct Exited {
  int code = -1;
  std::string out;
  std::string err;
};

// Runs sluiced with `args`, and `env` on top of this process's environment
// minus any SLUICE_* variable.
Exited RunToExit(const std::vector<std::string>& args,
                 const std::vector<std::string>& env = {}) {
  char dir[] = "/tmp/sluiced_usage_XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  const std::string out_path = std::string(dir) + "/out";
  const std::string err_path = std::string(dir) + "/err";
  const pid_t pid = SpawnSluiced(args, env, out_path, err_path);
  EXPECT_NE(pid, -1) << "cannot spawn " << testing::kSluicedPath;
  Exited exited;
  if (pid != -1) {
    int status = 0;
    if (testing::WaitFor([&] { return waitpid(pid, &status, WNOHANG) == pid; },
                         absl::Seconds(10))) {
      if (WIFEXITED(status)) exited.code = WEXITSTATUS(status);
    } else {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  exited.out = ReadAll(out_path);
  exited.err = ReadAll(err_path);
  std::remove(out_path.c_str());
  std::remove(err_path.c_str());
  rmdir(dir);
  return exited;
}

TEST(SluicedCommandLineTest, UnknownFlagIsAUsageErrorOnStderr) {
  const Exited exited = RunToExit({"--no-such-flag=1"});
  EXPECT_EQ(exited.code, 2);
  EXPECT_EQ(exited.err,
            "sluiced: unknown flag --no-such-flag\nTry 'sluiced --help'.\n");
  EXPECT_EQ(exited.out, "");
}

// The same words as sluicectl, sluice-call and sluice-bench.
TEST(SluicedCommandLineTest, FlagWithoutAValueNeedsAValue) {
  const Exited exited = RunToExit({"--listen"});
  EXPECT_EQ(exited.code, 2);
  EXPECT_EQ(exited.err,
            "sluiced: --listen needs a value\nTry 'sluiced --help'.\n");
  EXPECT_EQ(exited.out, "");
}

TEST(SluicedCommandLineTest, BadEnvironmentValueNamesTheVariable) {
  const Exited exited = RunToExit({}, {"SLUICE_SYNC_INTERVAL=soon"});
  EXPECT_EQ(exited.code, 2);
  EXPECT_THAT(exited.err, HasSubstr("SLUICE_SYNC_INTERVAL=\"soon\""));
}

TEST(SluicedCommandLineTest, HelpListsEveryFlagOnStdout) {
  const Exited exited = RunToExit({"--help"});
  EXPECT_EQ(exited.code, 0);
  EXPECT_EQ(exited.err, "");
  for (const char* flag :
       {"listen", "admin-listen", "socket-mode", "admin-token-file",
        "metrics-listen", "http-listen", "http-threads", "http-max-connections",
        "policies", "redis", "sync-interval", "replica-id", "redis-timeout",
        "expected-replicas", "unknown-dependency", "log-level", "port-file",
        "state-file", "upstream", "upstream-tls-ca", "upstream-tls-cert",
        "upstream-tls-key", "upstream-tls-server-name", "upstream-timeout",
        "max-leaves"}) {
    std::string env = absl::StrCat("SLUICE_", flag);
    for (char& c : env) c = c == '-' ? '_' : absl::ascii_toupper(c);
    EXPECT_THAT(exited.out, HasSubstr(absl::StrCat("--", flag, " ")));
    EXPECT_THAT(exited.out, HasSubstr(env));
  }
  EXPECT_THAT(exited.out, HasSubstr("250ms"));  // --redis-timeout's default
  EXPECT_THAT(exited.out, HasSubstr("Exit codes"));
}

// A leaf's flags: the command line and the environment name both flags of
// a conflict, and the exit code is the usage error's.
TEST(SluicedCommandLineTest, UpstreamConflictsNameBothFlags) {
  Exited exited = RunToExit({"--upstream", "127.0.0.1:50051",
                             "--redis-sentinels", "127.0.0.1:26379",
                             "--redis-master", "m"});
  EXPECT_EQ(exited.code, 2);
  EXPECT_THAT(exited.err,
              HasSubstr("--upstream and --redis-sentinels exclude each other"));
  exited = RunToExit({"--policies", "/etc/sluice/policies.yaml"},
                     {"SLUICE_UPSTREAM=dns:///sluice-central:50051"});
  EXPECT_EQ(exited.code, 2);
  EXPECT_THAT(exited.err,
              HasSubstr("--policies /etc/sluice/policies.yaml cannot be used "
                        "with --upstream dns:///sluice-central:50051"));
  exited = RunToExit({}, {"SLUICE_UPSTREAM=sluice-central"});
  EXPECT_EQ(exited.code, 2);
  EXPECT_THAT(exited.err, HasSubstr("--upstream: expected HOST:PORT"));
  exited = RunToExit({"--max-leaves", "100001"});
  EXPECT_EQ(exited.code, 2);
  EXPECT_THAT(exited.err, HasSubstr("bad value for --max-leaves=\"100001\""));
}

// "--flag value" as well as "--flag=value", and abseil's underscore
// spelling, which sluiced has always accepted.
TEST_F(SluicedTest, SpacedValueAndUnderscoreSpelling) {
  ASSERT_NO_FATAL_FAILURE(
      sluiced_.Start(kBucketPolicy, {"--unknown_dependency", "reject"}));
  EXPECT_EQ(sluiced_.Acquire("not-configured").verdict(), v1::REJECT);
}

}  // namespace
}  // namespace sluice
