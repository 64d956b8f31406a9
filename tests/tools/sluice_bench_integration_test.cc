// SPDX-License-Identifier: Apache-2.0
// sluice-bench end to end against a real standalone sluiced: counted unary,
// stream and HTTP runs and their JSON, verdict counts when a breaker trips, and
// its exit codes (0 ok, 1 failed calls or no connection, 2 usage). And its
// stream mode against servers in this process: a fake Decide that answers
// out of order and regroups the results, and one without Decide.

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/v1/decision.grpc.pb.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/http_get.h"
#include "tests/testing/sluiced_process.h"

namespace sluice {
namespace {

using ::testing::AllOf;
using testing::CommandResult;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::RunCommand;
using testing::SluicedProcess;

nlohmann::json ReadFileJson(const std::string& path) {
  return nlohmann::json::parse(testing::ReadFile(path));
}

// bench never refuses; flaky trips after three failures and then degrades.
constexpr char kPolicies[] = R"(policies:
  - name: bench
    rate_limit: { rate: 10000000, burst: 10000000 }
  - name: other
    rate_limit: { rate: 10000000, burst: 10000000 }
    per_key: true
  - name: flaky
    breaker: { consecutive_failures: 3, open_duration: 60s }
    fallback: { strategy: STATIC, payload: 'x', on: [CIRCUIT_OPEN] }
  - name: limited
    rate_limit: { rate: 0.001, burst: 10 }
    envoy_descriptors:
      - domain: sluice-bench
        entries: [{ key: dependency, value: limited }]
)";

class SluiceBenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ASSERT_TRUE(server_.Start(kPolicies, {}, "", &error)) << error;
  }
  void TearDown() override {
    EXPECT_EQ(server_.Terminate(), 0) << server_.Log();
  }

  CommandResult Bench(const std::string& args) {
    return RunCommand(absl::StrCat(testing::kSluiceBenchPath, " --target ",
                                   server_.target(), " ", args));
  }
  nlohmann::json ReadJson(const std::string& path) {
    return ReadFileJson(path);
  }

  SluicedProcess server_;
};

TEST_F(SluiceBenchTest, UnaryCountWritesJson) {
  const std::string json = server_.dir() + "/bench.json";
  const CommandResult r = Bench(
      "--mode unary --count 600 --connections 2 --concurrency 4 --warmup 0 "
      "--dependencies bench:3,other:1 --keys 5 --latency 2ms --json " +
      json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("decisions      600 in"),
                    HasSubstr("verdicts       ALLOW 600  REJECT 0  DEGRADE 0"),
                    HasSubstr("health checks  600 in"),
                    HasSubstr("ratio          decisions/s / checks/s = ")));

  const nlohmann::json j = ReadJson(json);
  EXPECT_EQ(j["config"]["mode"], "unary");
  EXPECT_EQ(j["config"]["connections"], 2);
  EXPECT_EQ(j["config"]["concurrency"], 4);
  EXPECT_EQ(j["config"]["count"], 600);
  EXPECT_EQ(j["config"]["dependencies"]["bench"], 3);
  const nlohmann::json& d = j["decisions"];
  EXPECT_EQ(d["count"], 600);
  EXPECT_EQ(d["errors"]["total"], 0);
  EXPECT_EQ(d["verdicts"]["ALLOW"], 600);
  EXPECT_GT(d["per_second"].get<double>(), 0);
  for (const char* latency : {"acquire_latency_us", "pair_latency_us"}) {
    EXPECT_EQ(d[latency]["count"], 600) << latency;
    const double p50 = d[latency]["p50"], p99 = d[latency]["p99"],
                 p999 = d[latency]["p999"];
    EXPECT_GT(p50, 0) << latency;
    EXPECT_LE(p50, p99) << latency;
    EXPECT_LE(p99, p999) << latency;
  }
  EXPECT_EQ(j["baseline"]["rpc"], "grpc.health.v1.Health/Check");
  EXPECT_EQ(j["baseline"]["count"], 600);
  EXPECT_EQ(j["baseline"]["errors"]["total"], 0);
  EXPECT_GT(j["baseline"]["latency_us"]["p999"].get<double>(), 0);
  EXPECT_GT(j["ratio"]["throughput"].get<double>(), 0);
  EXPECT_GT(j["ratio"]["latency_p50"].get<double>(), 0);
}

// Every report fails, so the breaker opens after three and the remaining
// decisions are DEGRADE; each counts as a decision without a report.
TEST_F(SluiceBenchTest, CountsVerdicts) {
  const std::string json = server_.dir() + "/bench.json";
  const CommandResult r = Bench(
      "--count 40 --connections 1 --concurrency 1 --warmup 0 "
      "--dependencies flaky --failure-rate 1 --baseline=false --json " +
      json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = ReadJson(json);
  EXPECT_EQ(j["decisions"]["count"], 40);
  EXPECT_EQ(j["decisions"]["verdicts"]["ALLOW"], 3);
  EXPECT_EQ(j["decisions"]["verdicts"]["DEGRADE"], 37);
  EXPECT_EQ(j["decisions"]["pair_latency_us"]["count"], 3);
  EXPECT_TRUE(j["baseline"].is_null());
  EXPECT_TRUE(j["ratio"].is_null());
  EXPECT_THAT(r.output, Not(HasSubstr("health checks")));
}

// Envoy's rate-limit service: the descriptor [dependency=limited] reaches
// the policy, whose burst of 10 admits 10 and refuses the rest.
TEST_F(SluiceBenchTest, RlsModeAsksTheRateLimitService) {
  const std::string json = server_.dir() + "/bench.json";
  const CommandResult r = Bench(
      "--mode rls --count 50 --connections 1 --concurrency 2 --warmup 0 "
      "--dependencies limited --baseline=false --json " +
      json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = ReadJson(json);
  EXPECT_EQ(j["config"]["mode"], "rls");
  EXPECT_EQ(j["decisions"]["count"], 50);
  EXPECT_EQ(j["decisions"]["errors"]["total"], 0);
  EXPECT_EQ(j["decisions"]["verdicts"]["ALLOW"], 10);
  EXPECT_EQ(j["decisions"]["verdicts"]["REJECT"], 40);
}

TEST_F(SluiceBenchTest, DurationRun) {
  const CommandResult r =
      Bench("--duration 300ms --warmup 100ms --connections 1 --concurrency 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("errors         0"),
                              HasSubstr("health checks  ")));
}

TEST_F(SluiceBenchTest, StreamCountWritesJson) {
  const std::string json = server_.dir() + "/bench.json";
  const CommandResult r = Bench(
      "--mode stream --count 600 --connections 2 --concurrency 8 --batch 4 "
      "--warmup 0 --dependencies bench:3,flaky:1 --failure-rate 1 --json " +
      json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = ReadJson(json);
  EXPECT_EQ(j["config"]["mode"], "stream");
  EXPECT_EQ(j["config"]["batch"], 4);
  const nlohmann::json& d = j["decisions"];
  EXPECT_EQ(d["count"], 600);
  EXPECT_EQ(d["errors"]["total"], 0);
  // Every report fails: flaky trips after three and degrades the rest;
  // bench has no breaker.
  const int allowed = d["verdicts"]["ALLOW"],
            degraded = d["verdicts"]["DEGRADE"];
  EXPECT_EQ(allowed + degraded, 600);
  EXPECT_GT(degraded, 0);
  EXPECT_EQ(d["pair_latency_us"]["count"], allowed);
  EXPECT_EQ(j["baseline"]["count"], 600);
  EXPECT_EQ(j["baseline"]["errors"]["total"], 0);
}

// --api http against a sluiced serving --http-listen: the same decisions,
// counts and JSON through the HTTP/JSON API, GET /v1/health the baseline.
class SluiceBenchHttpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string error;
    ASSERT_TRUE(server_.Start(kPolicies, {"--http-listen=127.0.0.1:0"}, "",
                              &error))
        << error;
    ASSERT_NE(server_.listener("http"), "");
  }
  void TearDown() override {
    EXPECT_EQ(server_.Terminate(), 0) << server_.Log();
  }

  CommandResult Bench(const std::string& args) {
    return RunCommand(absl::StrCat(testing::kSluiceBenchPath,
                                   " --api http --http-target ",
                                   server_.listener("http"), " ", args));
  }

  SluicedProcess server_;
};

TEST_F(SluiceBenchHttpTest, CountWritesJson) {
  const std::string json = server_.dir() + "/bench.json";
  const CommandResult r = Bench(
      "--count 300 --connections 3 --warmup 0 --dependencies bench:3,other:1 "
      "--keys 5 --json " +
      json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("sluice-bench http -> " +
                              server_.listener("http") +
                              ": 3 connections x 1 in flight"),
                    HasSubstr("decisions      300 in"),
                    HasSubstr("verdicts       ALLOW 300  REJECT 0  DEGRADE 0"),
                    HasSubstr("baseline: GET /v1/health"),
                    HasSubstr("health checks  300 in")));
  const nlohmann::json j = ReadFileJson(json);
  EXPECT_EQ(j["config"]["api"], "http");
  EXPECT_EQ(j["config"]["target"], server_.listener("http"));
  EXPECT_EQ(j["decisions"]["count"], 300);
  EXPECT_EQ(j["decisions"]["pair_latency_us"]["count"], 300);
  EXPECT_EQ(j["decisions"]["errors"]["total"], 0);
  EXPECT_EQ(j["baseline"]["rpc"], "GET /v1/health");
  EXPECT_GT(j["ratio"]["throughput"].get<double>(), 0);
  const std::string metrics =
      testing::HttpGet(server_.metrics_port(), "/metrics");
  EXPECT_THAT(metrics, HasSubstr("sluice_http_requests_total{endpoint=\"/v1/"
                                 "report\",code=\"200\"} 300"));
}

TEST_F(SluiceBenchHttpTest, CountsVerdicts) {
  const CommandResult r =
      Bench("--count 40 --connections 1 --warmup 0 --dependencies flaky "
            "--failure-rate 1 --baseline=false");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("verdicts       ALLOW 3  REJECT 0  DEGRADE 37"));
}

TEST(SluiceBenchUsageTest, UnreachableHttpTargetExitsOne) {
  const CommandResult r = RunCommand(
      absl::StrCat(testing::kSluiceBenchPath,
                   " --api http --http-target 127.0.0.1:1 --count 1"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cannot connect to 127.0.0.1:1"));
}

TEST(SluiceBenchUsageTest, BadFlagExitsTwo) {
  CommandResult r =
      RunCommand(absl::StrCat(testing::kSluiceBenchPath, " --bogus"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("sluice-bench: unknown flag --bogus"));
  r = RunCommand(
      absl::StrCat(testing::kSluiceBenchPath, " --concurrency lots"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("--concurrency wants a whole number in [1, 100000], "
                        "got \"lots\""));
  r = RunCommand(absl::StrCat(testing::kSluiceBenchPath, " --help"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("Usage: sluice-bench [flags]"));
}

TEST(SluiceBenchUsageTest, UnreachableTargetExitsOne) {
  const CommandResult r =
      RunCommand(absl::StrCat(testing::kSluiceBenchPath,
                              " --target unix:/nonexistent/sluice.sock "
                              "--deadline 200ms --count 1"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cannot connect to unix:/nonexistent"));
}

// Decide as the proto describes it, made awkward on purpose: the results of
// each message come back in reverse order, split over two messages when
// there are several. Acquire of "bad" is a per-call INVALID_ARGUMENT. A
// report must carry a permit this stream issued and has not seen reported.
// Safe for concurrent use.
class FakeDecideService final : public v1::DecisionService::Service {
 public:
  grpc::Status Decide(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::DecideResponse, v1::DecideRequest>* stream)
      override {
    std::map<std::string, bool> open_permits;
    uint64_t next_permit = 0;
    v1::DecideRequest request;
    while (stream->Read(&request)) {
      {
        absl::MutexLock lock(&mu_);
        max_batch_ = std::max(max_batch_, request.calls_size());
      }
      std::vector<v1::DecideResult> results;
      for (const v1::DecideCall& call : request.calls()) {
        v1::DecideResult& result = results.emplace_back();
        result.set_request_id(call.request_id());
        if (call.has_acquire() && call.acquire().dependency() == "bad") {
          result.mutable_error()->set_code(3);
          result.mutable_error()->set_message("acquire.dependency: bad");
        } else if (call.has_acquire()) {
          const std::string permit = absl::StrCat("p", next_permit++);
          open_permits[permit] = true;
          result.mutable_acquire()->set_verdict(v1::ALLOW);
          result.mutable_acquire()->set_permit_id(permit);
          Count(&acquires_);
        } else if (open_permits.erase(call.report().permit_id()) == 1) {
          result.mutable_report()->set_breaker_state(v1::CLOSED);
          Count(&reports_);
        } else {
          return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                              "a report of an unknown permit");
        }
      }
      std::reverse(results.begin(), results.end());
      const size_t half = (results.size() + 1) / 2;
      v1::DecideResponse first, second;
      for (size_t i = 0; i < results.size(); ++i) {
        *(i < half ? first : second).add_results() = std::move(results[i]);
      }
      if (!stream->Write(first)) break;
      if (second.results_size() > 0 && !stream->Write(second)) break;
    }
    return grpc::Status::OK;
  }

  int acquires() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return acquires_;
  }
  int reports() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return reports_;
  }
  int max_batch() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return max_batch_;
  }

 private:
  void Count(int* n) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    ++*n;
  }

  mutable absl::Mutex mu_;
  int acquires_ ABSL_GUARDED_BY(mu_) = 0;
  int reports_ ABSL_GUARDED_BY(mu_) = 0;
  int max_batch_ ABSL_GUARDED_BY(mu_) = 0;
};

class SluiceBenchFakeDecideTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
    char dir[] = "/tmp/sluice_bench_XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    server_->Shutdown();
    RunCommand("rm -rf " + dir_);
  }

  CommandResult Bench(const std::string& args) {
    return RunCommand(absl::StrCat(testing::kSluiceBenchPath,
                                   " --target 127.0.0.1:", port_,
                                   " --mode stream --warmup 0 ", args));
  }

  FakeDecideService service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::string dir_;
};

TEST_F(SluiceBenchFakeDecideTest, MatchesResultsByRequestId) {
  const std::string json = dir_ + "/bench.json";
  const CommandResult r = Bench(
      "--count 2000 --connections 2 --concurrency 8 --batch 4 --json " + json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = ReadFileJson(json);
  EXPECT_EQ(j["config"]["mode"], "stream");
  EXPECT_EQ(j["config"]["batch"], 4);
  EXPECT_EQ(j["decisions"]["count"], 2000);
  EXPECT_EQ(j["decisions"]["verdicts"]["ALLOW"], 2000);
  EXPECT_EQ(j["decisions"]["errors"]["total"], 0);
  EXPECT_EQ(j["decisions"]["pair_latency_us"]["count"], 2000);
  EXPECT_EQ(j["baseline"]["count"], 2000);
  EXPECT_EQ(service_.acquires(), 2000);
  EXPECT_EQ(service_.reports(), 2000);
  EXPECT_LE(service_.max_batch(), 4);
}

TEST_F(SluiceBenchFakeDecideTest, TimedRunEndsItsStreams) {
  const CommandResult r = Bench(
      "--duration 300ms --connections 2 --concurrency 4 --batch 2 "
      "--baseline=false");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("errors         0"));
  EXPECT_GT(service_.reports(), 0);
  EXPECT_EQ(service_.acquires(), service_.reports());
}

TEST(SluiceBenchNoDecideTest, StreamModeSaysUnimplemented) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  // The generated base class: every method answers UNIMPLEMENTED, as a
  // sluiced from before the Decide stream did for Decide.
  v1::DecisionService::Service unimplemented;
  builder.RegisterService(&unimplemented);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  const CommandResult r = RunCommand(
      absl::StrCat(testing::kSluiceBenchPath, " --target 127.0.0.1:", port,
                   " --mode stream --count 100 --connections 1 --concurrency 4 "
                   "--warmup 0 --baseline=false"));
  server->Shutdown();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("errors         4 (UNIMPLEMENTED 4)"),
                    HasSubstr("first: UNIMPLEMENTED: Decide stream ended "
                              "(this sluiced does not serve the Decide "
                              "stream)")));
}

TEST_F(SluiceBenchFakeDecideTest, PerCallErrorsAndHold) {
  const CommandResult r = Bench(
      "--count 400 --connections 1 --concurrency 4 --dependencies "
      "good:3,bad:1 --hold --latency 1ms --baseline=false");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("first: INVALID_ARGUMENT: acquire.dependency: bad"));
  // Every decision either completed or failed on its own; the stream
  // survived the errors.
  EXPECT_EQ(service_.acquires(), service_.reports());
  EXPECT_THAT(r.output, HasSubstr(absl::StrCat("decisions      ",
                                               service_.acquires(), " in")));
  EXPECT_THAT(r.output, HasSubstr(absl::StrCat("errors         ",
                                               400 - service_.acquires(),
                                               " (INVALID_ARGUMENT ")));
  EXPECT_GT(service_.acquires(), 250);
}

}  // namespace
}  // namespace sluice
