// sluice-bench end to end against a real standalone sluiced: a counted
// unary run and its JSON, verdict counts when a breaker trips, the stream
// mode, and its exit codes (0 ok, 1 failed calls or no connection, 2 usage).

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/sluiced_process.h"

namespace sluice {
namespace {

using ::testing::AllOf;
using testing::CommandResult;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::RunCommand;
using testing::SluicedProcess;

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
    return RunCommand(absl::StrCat(SLUICE_BENCH_PATH, " --target ",
                                   server_.target(), " ", args));
  }
  nlohmann::json ReadJson(const std::string& path) {
    return nlohmann::json::parse(testing::ReadFile(path));
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

TEST_F(SluiceBenchTest, DurationRun) {
  const CommandResult r =
      Bench("--duration 300ms --warmup 100ms --connections 1 --concurrency 2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("errors         0"),
                              HasSubstr("health checks  ")));
}

TEST_F(SluiceBenchTest, StreamModeWithoutDecideSaysUnimplemented) {
  const CommandResult r = Bench(
      "--mode stream --count 100 --connections 1 --concurrency 4 --batch 2 "
      "--warmup 0 --baseline=false");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("UNIMPLEMENTED"));
}

TEST(SluiceBenchUsageTest, BadFlagExitsTwo) {
  CommandResult r = RunCommand(absl::StrCat(SLUICE_BENCH_PATH, " --bogus"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("sluice-bench: unknown flag --bogus"));
  r = RunCommand(absl::StrCat(SLUICE_BENCH_PATH, " --concurrency lots"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output,
              HasSubstr("--concurrency wants a whole number in [1, 100000], "
                        "got \"lots\""));
  r = RunCommand(absl::StrCat(SLUICE_BENCH_PATH, " --help"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("Usage: sluice-bench [flags]"));
}

TEST(SluiceBenchUsageTest, UnreachableTargetExitsOne) {
  const CommandResult r =
      RunCommand(absl::StrCat(SLUICE_BENCH_PATH,
                              " --target unix:/nonexistent/sluice.sock "
                              "--deadline 200ms --count 1"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cannot connect to unix:/nonexistent"));
}

}  // namespace
}  // namespace sluice
