// SPDX-License-Identifier: Apache-2.0
// sluice-bench's pure parts: the dependency mix, the key draw, the
// histogram's percentiles and its command line.

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tools/sluice-bench/bench_options.h"
#include "tools/sluice-bench/percentile_histogram.h"
#include "tools/sluice-bench/workload.h"

namespace sluice::bench {
namespace {

using ::testing::HasSubstr;

TEST(ParseWeightedListTest, PlainAndWeighted) {
  absl::StatusOr<std::vector<WeightedName>> list =
      ParseWeightedList("inventory:3,search");
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].name, "inventory");
  EXPECT_EQ((*list)[0].weight, 3u);
  EXPECT_EQ((*list)[1].name, "search");
  EXPECT_EQ((*list)[1].weight, 1u);
}

TEST(ParseWeightedListTest, RefusesWhatItCannotRead) {
  EXPECT_THAT(ParseWeightedList("a:0").status().message(),
              HasSubstr("entry \"a:0\": the weight must be a whole number"));
  EXPECT_THAT(ParseWeightedList("a:x").status().message(),
              HasSubstr("entry \"a:x\""));
  EXPECT_THAT(ParseWeightedList("a,,b").status().message(),
              HasSubstr("has no name"));
  EXPECT_THAT(ParseWeightedList(":2").status().message(),
              HasSubstr("has no name"));
  EXPECT_THAT(ParseWeightedList("a,b,a").status().message(),
              HasSubstr("\"a\" is given twice"));
}

TEST(WorkloadTest, DrawsDependenciesByWeight) {
  WorkloadOptions options;
  options.dependencies = {{"a", 3}, {"b", 1}};
  const Workload workload(options);
  std::mt19937_64 rng(7);
  int a = 0;
  constexpr int kDraws = 40000;
  for (int i = 0; i < kDraws; ++i) {
    const CallShape call = workload.Next(rng);
    EXPECT_EQ(call.key, -1);
    EXPECT_FALSE(call.failure);
    a += call.dependency == 0 ? 1 : 0;
  }
  EXPECT_NEAR(static_cast<double>(a) / kDraws, 0.75, 0.01);
  EXPECT_EQ(workload.dependency(1), "b");
  EXPECT_EQ(workload.key(-1), "");
}

TEST(WorkloadTest, UniformKeysAndFailureRate) {
  WorkloadOptions options;
  options.keys = 4;
  options.failure_rate = 0.1;
  const Workload workload(options);
  std::mt19937_64 rng(1);
  std::map<int, int> per_key;
  int failures = 0;
  constexpr int kDraws = 40000;
  for (int i = 0; i < kDraws; ++i) {
    const CallShape call = workload.Next(rng);
    ++per_key[call.key];
    failures += call.failure ? 1 : 0;
  }
  ASSERT_EQ(per_key.size(), 4u);
  for (const auto& [key, n] : per_key) {
    EXPECT_NEAR(static_cast<double>(n) / kDraws, 0.25, 0.015) << key;
  }
  EXPECT_NEAR(static_cast<double>(failures) / kDraws, 0.1, 0.01);
  EXPECT_EQ(workload.key(3), "k3");
}

TEST(WorkloadTest, ZipfKeysFavourTheFirst) {
  WorkloadOptions options;
  options.keys = 10;
  options.key_distribution = KeyDistribution::kZipf;
  const Workload workload(options);
  std::mt19937_64 rng(3);
  std::vector<int> per_key(10);
  constexpr int kDraws = 100000;
  for (int i = 0; i < kDraws; ++i) ++per_key[workload.Next(rng).key];
  // 1/(k+1) normalised by H(10) = 2.929: k0 34.1%, k1 17.1%, k9 3.4%.
  EXPECT_NEAR(per_key[0] / static_cast<double>(kDraws), 0.341, 0.01);
  EXPECT_NEAR(per_key[1] / static_cast<double>(kDraws), 0.171, 0.01);
  EXPECT_NEAR(per_key[9] / static_cast<double>(kDraws), 0.034, 0.005);
}

TEST(PercentileHistogramTest, EmptyIsZero) {
  PercentileHistogram h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.Percentile(0.99), absl::ZeroDuration());
}

TEST(PercentileHistogramTest, SmallValuesAreExact) {
  PercentileHistogram h;
  for (int ns = 1; ns <= 100; ++ns) h.Record(absl::Nanoseconds(ns));
  EXPECT_EQ(h.Percentile(0.5), absl::Nanoseconds(50));
  EXPECT_EQ(h.Percentile(0.99), absl::Nanoseconds(99));
  EXPECT_EQ(h.Percentile(1.0), absl::Nanoseconds(100));
  EXPECT_EQ(h.max(), absl::Nanoseconds(100));
}

// Percentiles within 1% of the exact ones, on a spread from 20 us to
// 200 ms with a long tail.
TEST(PercentileHistogramTest, PercentilesWithinOnePercent) {
  std::mt19937_64 rng(11);
  std::lognormal_distribution<double> micros(std::log(400.0), 1.0);
  std::vector<int64_t> samples;
  PercentileHistogram h;
  for (int i = 0; i < 200000; ++i) {
    const int64_t ns =
        static_cast<int64_t>(std::clamp(micros(rng), 20.0, 200000.0) * 1000);
    samples.push_back(ns);
    h.Record(absl::Nanoseconds(ns));
  }
  std::sort(samples.begin(), samples.end());
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    const double exact = static_cast<double>(
        samples[static_cast<size_t>(std::ceil(q * samples.size())) - 1]);
    const double got = absl::ToDoubleNanoseconds(h.Percentile(q));
    EXPECT_NEAR(got / exact, 1.0, 0.01) << "q=" << q;
  }
  EXPECT_EQ(h.max(), absl::Nanoseconds(samples.back()));
}

TEST(PercentileHistogramTest, MergeAddsCounts) {
  PercentileHistogram a, b;
  for (int i = 0; i < 99; ++i) a.Record(absl::Microseconds(100));
  b.Record(absl::Seconds(2));
  a.Merge(b);
  EXPECT_EQ(a.count(), 100u);
  EXPECT_NEAR(absl::ToDoubleMicroseconds(a.Percentile(0.5)), 100, 1);
  EXPECT_NEAR(absl::ToDoubleSeconds(a.Percentile(1.0)), 2, 0.02);
}

ParsedCommandLine Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "sluice-bench");
  return ParseBenchCommandLine(static_cast<int>(args.size()), args.data());
}

TEST(BenchCommandLineTest, ReadsEveryFlag) {
  const ParsedCommandLine line = Parse({"--target",
                                        "unix:/tmp/s.sock",
                                        "--mode=stream",
                                        "--connections",
                                        "2",
                                        "--concurrency",
                                        "8",
                                        "--batch",
                                        "4",
                                        "--dependencies",
                                        "a:3,b:1",
                                        "--keys",
                                        "100",
                                        "--key-distribution",
                                        "zipf",
                                        "--failure-rate",
                                        "0.1",
                                        "--latency",
                                        "2ms",
                                        "--hold",
                                        "--count",
                                        "1000",
                                        "--warmup",
                                        "0",
                                        "--baseline=false",
                                        "--json",
                                        "out.json",
                                        "--seed",
                                        "9",
                                        "--caller",
                                        "me",
                                        "--deadline",
                                        "1s"});
  ASSERT_EQ(line.outcome, ParsedCommandLine::Outcome::kRun) << line.text;
  const BenchOptions& o = line.options;
  EXPECT_EQ(o.target, "unix:/tmp/s.sock");
  EXPECT_EQ(o.mode, Mode::kStream);
  EXPECT_EQ(o.connections, 2);
  EXPECT_EQ(o.concurrency, 8);
  EXPECT_EQ(o.batch, 4);
  ASSERT_EQ(o.workload.dependencies.size(), 2u);
  EXPECT_EQ(o.workload.dependencies[0].weight, 3u);
  EXPECT_EQ(o.workload.keys, 100);
  EXPECT_EQ(o.workload.key_distribution, KeyDistribution::kZipf);
  EXPECT_DOUBLE_EQ(o.workload.failure_rate, 0.1);
  EXPECT_EQ(o.latency, absl::Milliseconds(2));
  EXPECT_TRUE(o.hold);
  EXPECT_EQ(o.count, 1000u);
  EXPECT_EQ(o.warmup, absl::ZeroDuration());
  EXPECT_FALSE(o.baseline);
  EXPECT_EQ(o.json_path, "out.json");
  EXPECT_EQ(o.seed, 9u);
  EXPECT_EQ(o.caller, "me");
  EXPECT_EQ(o.deadline, absl::Seconds(1));
}

TEST(BenchCommandLineTest, HttpApi) {
  const ParsedCommandLine line = Parse(
      {"--api", "http", "--http-target", "127.0.0.1:8080", "--connections",
       "16"});
  ASSERT_EQ(line.outcome, ParsedCommandLine::Outcome::kRun) << line.text;
  EXPECT_EQ(line.options.api, Api::kHttp);
  EXPECT_EQ(line.options.http_target, "127.0.0.1:8080");
  EXPECT_EQ(line.options.connections, 16);
  EXPECT_EQ(line.options.concurrency, 1);  // one request per connection
  const ParsedCommandLine one =
      Parse({"--api=HTTP", "--http-target=[::1]:80", "--concurrency", "1"});
  ASSERT_EQ(one.outcome, ParsedCommandLine::Outcome::kRun) << one.text;
  EXPECT_EQ(one.options.api, Api::kHttp);
}

TEST(BenchCommandLineTest, Defaults) {
  const ParsedCommandLine line = Parse({});
  ASSERT_EQ(line.outcome, ParsedCommandLine::Outcome::kRun) << line.text;
  EXPECT_EQ(line.options.mode, Mode::kUnary);
  EXPECT_EQ(line.options.api, Api::kGrpc);
  EXPECT_EQ(line.options.count, 0u);
  EXPECT_EQ(line.options.duration, absl::Seconds(10));
  EXPECT_TRUE(line.options.baseline);
  EXPECT_EQ(line.options.workload.dependencies[0].name, "bench");
}

TEST(BenchCommandLineTest, UsageErrorsNameTheFlag) {
  struct Case {
    std::vector<const char*> args;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"--connections", "0"}, "--connections wants a whole number in [1, "},
      {{"--mode", "bidi"}, "--mode wants unary, stream or rls, got \"bidi\""},
      {{"--failure-rate", "1.5"}, "--failure-rate wants a number in [0, 1]"},
      {{"--duration", "soon"}, "--duration wants a positive duration"},
      {{"--latency", "-1ms"}, "--latency wants a duration"},
      {{"--dependencies", "a:0"}, "--dependencies: entry \"a:0\""},
      {{"--count", "10", "--duration", "1s"},
       "--count and --duration exclude each other"},
      {{"--batch", "8"}, "--batch applies to --mode stream only"},
      {{"--api", "rest"}, "--api wants grpc or http, got \"rest\""},
      {{"--api", "http"}, "--api http needs --http-target HOST:PORT"},
      {{"--http-target", "unix:/tmp/x"}, "--http-target: "},
      {{"--api", "http", "--http-target", "h:1", "--mode", "stream"},
       "--mode stream is gRPC's Decide stream"},
      {{"--api", "http", "--http-target", "h:1", "--mode", "rls"},
       "--mode rls is Envoy's rate-limit service over gRPC"},
      {{"--api", "http", "--http-target", "h:1", "--concurrency", "8"},
       "--api http has one request in flight per connection"},
      {{"--bogus"}, "--bogus"},
      {{"--baseline", "false"},
       "unexpected argument \"false\": sluice-bench takes only flags"},
      {{"--count"}, "--count needs a value"},
  };
  for (const Case& c : cases) {
    const ParsedCommandLine line = Parse(c.args);
    EXPECT_EQ(line.outcome, ParsedCommandLine::Outcome::kUsageError)
        << c.message;
    EXPECT_THAT(line.text, HasSubstr(c.message));
  }
}

TEST(BenchCommandLineTest, HelpNamesEveryFlag) {
  const ParsedCommandLine line = Parse({"--help"});
  ASSERT_EQ(line.outcome, ParsedCommandLine::Outcome::kHelp);
  for (const char* flag :
       {"--target", "--api", "--http-target", "--mode", "--connections",
        "--concurrency", "--batch",
        "--deadline", "--dependencies", "--keys", "--key-distribution",
        "--failure-rate", "--latency", "--hold", "--caller", "--seed",
        "--count", "--duration", "--warmup", "--baseline", "--json"}) {
    EXPECT_THAT(line.text, HasSubstr(flag));
  }
}

}  // namespace
}  // namespace sluice::bench
