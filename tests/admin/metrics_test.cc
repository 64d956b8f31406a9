// SPDX-License-Identifier: Apache-2.0
#include "server/metrics/metrics.h"

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/stats.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "server/metrics/metric_list.h"
#include "server/policy/policy_store.h"
#include "tests/testing/http_get.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/promtool.h"

namespace sluice::metrics {
namespace {

using ::sluice::testing::Promtool;
using ::testing::HasSubstr;
using ::testing::Not;

v1::Policy P(const std::string& text) {
  v1::Policy p;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &p)) << text;
  return p;
}

// One sample line: name, labels and value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

std::vector<Sample> Parse(const std::string& text) {
  std::vector<Sample> out;
  const std::regex line(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$)");
  const std::regex label(R"re(([a-zA-Z_]+)="([^"]*)")re");
  for (absl::string_view l : absl::StrSplit(text, '\n')) {
    if (l.empty() || l[0] == '#') continue;
    std::smatch m;
    const std::string s(l);
    if (!std::regex_match(s, m, line)) {
      ADD_FAILURE() << "unparsable line: " << s;
      continue;
    }
    Sample sample;
    sample.name = m[1];
    const std::string labels = m[3];
    for (auto it = std::sregex_iterator(labels.begin(), labels.end(), label);
         it != std::sregex_iterator(); ++it) {
      sample.labels[(*it)[1]] = (*it)[2];
    }
    EXPECT_TRUE(absl::SimpleAtod(std::string(m[4]), &sample.value)) << s;
    out.push_back(std::move(sample));
  }
  return out;
}

double Sum(const std::vector<Sample>& samples, const std::string& name,
           const std::map<std::string, std::string>& match = {}) {
  double sum = 0;
  for (const Sample& s : samples) {
    if (s.name != name) continue;
    bool ok = true;
    for (const auto& [k, v] : match) {
      auto it = s.labels.find(k);
      ok = ok && it != s.labels.end() && it->second == v;
    }
    if (ok) sum += s.value;
  }
  return sum;
}

// A component as Metrics sees it: writes what `write` writes.
class FakeSource final : public base::StatsSource {
 public:
  explicit FakeSource(std::function<void(base::StatsWriter&)> write)
      : write_(std::move(write)) {}
  void WriteStats(base::StatsWriter& out) const override { write_(out); }

 private:
  std::function<void(base::StatsWriter&)> write_;
};

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(store_
                    .ReplaceAll({P(R"pb(name: "inventory"
                                        rate_limit { rate: 5 burst: 5 }
                                        breaker { consecutive_failures: 2 }
                                        fallback { strategy: STATIC
                                                   payload: "{}" })pb"),
                                 P(R"pb(name: "search"
                                        concurrency { max_in_flight: 2 })pb")})
                    .ok());
  }

  // Runs a mixed workload; returns the Acquire calls made per dependency.
  std::map<std::string, int> Workload() {
    std::map<std::string, int> calls;
    std::vector<core::PermitId> permits;
    for (int i = 0; i < 8; ++i) {  // 5 allowed, 3 rate limited
      auto d = engine_.Acquire("inventory", "", 1);
      ++calls["inventory"];
      if (d.ok() && !d->permit_id.empty()) permits.push_back(d->permit_id);
    }
    for (int i = 0; i < 2; ++i) {  // two failures open the breaker
      engine_.Report("inventory", "", permits[i], core::Outcome::kFailure,
                     absl::Milliseconds(3));
    }
    for (int i = 0; i < 3; ++i) {  // breaker open now: degraded
      (void)engine_.Acquire("inventory", "", 1);
      ++calls["inventory"];
    }
    for (int i = 0; i < 4; ++i) {  // 2 allowed, 2 concurrency limited
      (void)engine_.Acquire("search", "", 1);
      ++calls["search"];
    }
    (void)engine_.Acquire("unknown-thing", "", 1);
    ++calls["(unknown)"];
    return calls;
  }

  sluice::testing::FakeClock clock_;
  Metrics* metrics_ptr_ = nullptr;
  class Sink : public core::EventSink {
   public:
    explicit Sink(Metrics** m) : m_(m) {}
    void OnBreakerTransition(const core::BreakerTransition& t) override {
      if (*m_) (*m_)->OnBreakerTransition(t);
    }
    void OnAdaptiveChange(const core::AdaptiveChange& c) override {
      if (*m_) (*m_)->OnAdaptiveChange(c);
    }
    Metrics** m_;
  } sink_{&metrics_ptr_};
  core::Engine engine_{&clock_, core::Engine::Options(), &sink_};
  policy::PolicyStore store_{&engine_};
  uint64_t unknown_allowed_ = 0;
};

TEST(MetricListTest, NamesAreUniqueValidAndNeverUseKey) {
  std::set<std::string> names;
  for (size_t i = 0; i < kMetrics.size(); ++i) {
    const EngineMetric& m = kMetrics[i];
    EXPECT_EQ(static_cast<size_t>(m.id), i) << m.name;
    EXPECT_TRUE(names.insert(m.name).second) << m.name;
    EXPECT_EQ(base::MetricDefProblem(m.def()), nullptr) << m.name;
    EXPECT_GT(std::string(m.help).size(), 10u) << m.name;
  }
}

TEST(MetricDefTest, ProblemsNameWhatIsWrong) {
  using base::MetricType;
  const auto problem = [](base::MetricDef def) {
    const char* why = base::MetricDefProblem(def);
    return std::string(why == nullptr ? "" : why);
  };
  EXPECT_EQ(problem({"sluice_x_total", MetricType::kCounter, {"a", "b"}, "h"}),
            "");
  EXPECT_EQ(problem({"sluice_x", MetricType::kGauge, {}, "h"}), "");
  EXPECT_EQ(problem({"x_total", MetricType::kCounter, {}, "h"}),
            "its name is not sluice_ and then [a-z0-9_]");
  EXPECT_EQ(problem({"sluice_", MetricType::kGauge, {}, "h"}),
            "its name is not sluice_ and then [a-z0-9_]");
  EXPECT_EQ(problem({"sluice_X", MetricType::kGauge, {}, "h"}),
            "its name is not sluice_ and then [a-z0-9_]");
  EXPECT_EQ(problem({nullptr, MetricType::kGauge, {}, "h"}),
            "its name is not sluice_ and then [a-z0-9_]");
  EXPECT_EQ(problem({"sluice_x", MetricType::kCounter, {}, "h"}),
            "a counter's name must end in _total");
  EXPECT_EQ(problem({"sluice_x_total", MetricType::kGauge, {}, "h"}),
            "only a counter's name ends in _total");
  EXPECT_EQ(problem({"sluice_x", MetricType::kGauge, {"key"}, "h"}),
            "a label named key (unbounded series)");
  EXPECT_EQ(problem({"sluice_x", MetricType::kGauge, {"a", "a"}, "h"}),
            "a label name repeats");
  EXPECT_EQ(problem({"sluice_x", MetricType::kGauge, {"Bad"}, "h"}),
            "a label name is not [a-z_][a-z0-9_]*");
  EXPECT_EQ(problem({"sluice_x", MetricType::kGauge, {"__a"}, "h"}),
            "a label name is not [a-z_][a-z0-9_]*");
  EXPECT_EQ(problem({"sluice_x", MetricType::kGauge, {nullptr, "a"}, "h"}),
            "a label name follows a null one");
  EXPECT_EQ(problem({"sluice_x", MetricType::kGauge, {}, ""}),
            "it has no help text");
  EXPECT_EQ(problem({"sluice_x", MetricType::kGauge, {}, nullptr}),
            "it has no help text");
}

TEST_F(MetricsTest, ExposesTheEngineMetricsWithTheirLabels) {
  Metrics metrics(&engine_);
  metrics_ptr_ = &metrics;
  Workload();
  metrics.ObserveAcquire(absl::Microseconds(40));
  for (const prometheus::MetricFamily& family : metrics.Collect()) {
    const EngineMetric* def = nullptr;
    for (const EngineMetric& m : kMetrics) {
      if (family.name == m.name) def = &m;
    }
    ASSERT_NE(def, nullptr) << family.name << " is not in metric_list.h";
    EXPECT_EQ(family.help, def->help);
    std::set<std::string> want;
    for (const char* label : def->labels) {
      if (label == nullptr) break;
      want.insert(label);
    }
    for (const auto& m : family.metric) {
      std::set<std::string> got;
      for (const auto& l : m.label) got.insert(l.name);
      EXPECT_EQ(got, want) << family.name;
    }
  }
}

TEST_F(MetricsTest, DecisionCountersAreConservedAndLabelled) {
  Metrics metrics(&engine_);
  metrics_ptr_ = &metrics;
  std::map<std::string, int> calls = Workload();
  const std::vector<Sample> s = Parse(metrics.Render());

  EXPECT_EQ(Sum(s, "sluice_decisions_total", {{"dependency", "inventory"}}),
            calls["inventory"]);
  EXPECT_EQ(Sum(s, "sluice_decisions_total", {{"dependency", "search"}}),
            calls["search"]);
  EXPECT_EQ(Sum(s, "sluice_decisions_total",
                {{"dependency", "inventory"}, {"verdict", "ALLOW"}}),
            5);
  EXPECT_EQ(Sum(s, "sluice_decisions_total",
                {{"dependency", "inventory"}, {"reason", "RATE_LIMITED"}}),
            3);
  EXPECT_EQ(Sum(s, "sluice_decisions_total",
                {{"dependency", "inventory"},
                 {"verdict", "DEGRADE"},
                 {"reason", "CIRCUIT_OPEN"}}),
            3);
  EXPECT_EQ(Sum(s, "sluice_degraded_total",
                {{"dependency", "inventory"}, {"reason", "CIRCUIT_OPEN"}}),
            3);
  EXPECT_EQ(Sum(s, "sluice_decisions_total",
                {{"dependency", "search"},
                 {"verdict", "REJECT"},
                 {"reason", "CONCURRENCY_LIMITED"}}),
            2);
  EXPECT_EQ(Sum(s, "sluice_outcomes_total",
                {{"dependency", "inventory"}, {"outcome", "FAILURE"}}),
            2);
  EXPECT_EQ(Sum(s, "sluice_breaker_state",
                {{"dependency", "inventory"}, {"state", "OPEN"}}),
            1);
  EXPECT_EQ(Sum(s, "sluice_breaker_state", {{"dependency", "inventory"}}), 1);
  EXPECT_EQ(Sum(s, "sluice_breaker_transitions_total",
                {{"dependency", "inventory"}, {"from", "CLOSED"},
                 {"to", "OPEN"}}),
            1);
  EXPECT_EQ(Sum(s, "sluice_in_flight", {{"dependency", "search"}}), 2);
  EXPECT_EQ(Sum(s, "sluice_in_flight", {{"dependency", "inventory"}}), 3);
  EXPECT_EQ(Sum(s, "sluice_policies"), 2);
  EXPECT_GT(Sum(s, "sluice_policy_version", {{"dependency", "search"}}), 0);
  // Standalone: no store metrics.
  EXPECT_EQ(Sum(s, "sluice_store_up") + Sum(s, "sluice_sync_ticks_total"), 0);
  for (const Sample& sample : s) {
    EXPECT_EQ(sample.labels.count("key"), 0u) << sample.name;
  }
}

constexpr base::MetricDef kTestExpiry{
    "sluice_test_expiry_timestamp_seconds", base::MetricType::kGauge, {},
    "When the test's certificate expires."};
constexpr base::MetricDef kTestReloads{
    "sluice_test_reloads_total", base::MetricType::kCounter, {"result"},
    "Reloads of the test's files by result."};

// What a source writes is shown with its definition's help and type, and
// only while the source is registered.
TEST_F(MetricsTest, ComponentsWriteTheirOwnMetrics) {
  Metrics metrics(&engine_);
  EXPECT_THAT(metrics.Render(), Not(HasSubstr("sluice_test_reloads_total")));
  uint64_t reloads = 3;
  FakeSource tls([&](base::StatsWriter& out) {
    out.Write(kTestExpiry, 1800000000);
    out.WriteBy(kTestReloads, {{"ok", reloads}, {"error", 1}});
  });
  metrics.AddSource(&tls);
  std::string body = metrics.Render();
  EXPECT_EQ(Promtool(body), "") << body;
  EXPECT_THAT(body, HasSubstr("# TYPE sluice_test_reloads_total counter"));
  EXPECT_THAT(body, HasSubstr("# TYPE sluice_test_expiry_timestamp_seconds "
                              "gauge"));
  EXPECT_THAT(body, HasSubstr(absl::StrCat("# HELP sluice_test_reloads_total ",
                                           kTestReloads.help)));
  std::vector<Sample> s = Parse(body);
  EXPECT_EQ(Sum(s, "sluice_test_expiry_timestamp_seconds"), 1800000000);
  EXPECT_EQ(Sum(s, "sluice_test_reloads_total", {{"result", "ok"}}), 3);
  EXPECT_EQ(Sum(s, "sluice_test_reloads_total", {{"result", "error"}}), 1);
  // Read at every scrape.
  reloads = 4;
  s = Parse(metrics.Render());
  EXPECT_EQ(Sum(s, "sluice_test_reloads_total", {{"result", "ok"}}), 4);
  EXPECT_TRUE(metrics.refused_writes().empty());
}

// A malformed definition, label values that do not match its labels, a
// name of the engine's list, or a name defined two ways is left out and
// remembered, never shown without help and type, and never silently lost.
TEST_F(MetricsTest, MalformedOrConflictingWritesAreRefused) {
  using base::MetricType;
  static constexpr base::MetricDef kNoTotal{
      "sluice_test_calls", MetricType::kCounter, {}, "Calls."};
  static constexpr base::MetricDef kKeyLabel{
      "sluice_test_keys", MetricType::kGauge, {"key"}, "Keys."};
  static constexpr base::MetricDef kEngines{
      "sluice_policies", MetricType::kGauge, {}, "Policies."};
  static constexpr base::MetricDef kReloadsAgain{
      "sluice_test_reloads_total", MetricType::kCounter, {"outcome"},
      "Reloads of the test's files by result."};
  Metrics metrics(&engine_);
  FakeSource buggy([](base::StatsWriter& out) {
    out.Write(kNoTotal, 1);
    out.Write(kKeyLabel, {"tenant-1"}, 1);
    out.Write(kEngines, 7);
    out.Write(kTestReloads, 1);                    // no value for its label
    out.Write(kTestReloads, {"ok", "extra"}, 1);   // one value too many
    out.Write(kTestReloads, {"ok"}, 2);            // good
    out.Write(kReloadsAgain, {"ok"}, 5);           // the same name, redefined
  });
  metrics.AddSource(&buggy);
  const std::string body = metrics.Render();
  EXPECT_EQ(Promtool(body), "") << body;
  EXPECT_THAT(body, Not(HasSubstr("sluice_test_calls")));
  EXPECT_THAT(body, Not(HasSubstr("sluice_test_keys")));
  EXPECT_THAT(body, Not(HasSubstr("sluice_policies 7")));
  EXPECT_EQ(Sum(Parse(body), "sluice_test_reloads_total"), 2);
  metrics.Render();  // the same mistakes again are not listed twice
  EXPECT_THAT(
      metrics.refused_writes(),
      ::testing::ElementsAre(
          "sluice_test_calls: a counter's name must end in _total",
          "sluice_test_keys: a label named key (unbounded series)",
          "sluice_policies: the engine's metric list has it",
          "sluice_test_reloads_total: its label values do not match its "
          "label names",
          "sluice_test_reloads_total: defined twice, differently"));
}

TEST_F(MetricsTest, RefusedWritesAreBounded) {
  std::vector<std::string> names;
  for (size_t i = 0; i < 2 * Metrics::kMaxRefusedWrites; ++i) {
    names.push_back(absl::StrCat("sluice_unknown_", i));  // no _total
  }
  Metrics metrics(&engine_);
  FakeSource buggy([&names](base::StatsWriter& out) {
    for (const std::string& name : names) {
      out.Write({name.c_str(), base::MetricType::kCounter, {}, "Unknown."}, 1);
    }
  });
  metrics.AddSource(&buggy);
  metrics.Render();
  EXPECT_EQ(metrics.refused_writes().size(), Metrics::kMaxRefusedWrites);
}

// Unknown dependencies' answers come from the engine, whatever is
// registered.
TEST_F(MetricsTest, UnknownDependencyDecisionsComeFromTheEngine) {
  Metrics metrics(&engine_);
  for (int i = 0; i < 5; ++i) (void)engine_.Acquire("unknown-thing", "", 1);
  const auto [allowed, rejected] = engine_.UnknownDecisions();
  ASSERT_EQ(allowed + rejected, 5u);
  const std::vector<Sample> s = Parse(metrics.Render());
  EXPECT_EQ(Sum(s, "sluice_unknown_dependency_decisions_total",
                {{"verdict", "ALLOW"}}),
            allowed);
  EXPECT_EQ(Sum(s, "sluice_unknown_dependency_decisions_total",
                {{"verdict", "REJECT"}}),
            rejected);
}

TEST(PrometheusLatencyHistogramTest, BucketsAreCumulative) {
  PrometheusLatencyHistogram h;
  h.Observe(absl::Microseconds(10));   // <= 25us
  h.Observe(absl::Microseconds(300));  // <= 500us
  h.Observe(absl::Seconds(3));         // +Inf only
  const prometheus::ClientMetric m = h.Collect();
  ASSERT_EQ(m.histogram.bucket.size(),
            PrometheusLatencyHistogram::kBounds.size() + 1);
  EXPECT_EQ(m.histogram.bucket[0].cumulative_count, 1u);
  EXPECT_EQ(m.histogram.bucket[4].cumulative_count, 2u);
  EXPECT_EQ(m.histogram.bucket.back().cumulative_count, 3u);
  EXPECT_EQ(m.histogram.sample_count, 3u);
  EXPECT_NEAR(m.histogram.sample_sum, 3.00031, 1e-9);
  EXPECT_EQ(h.count(), 3u);
}

// The real /metrics endpoint, checked by promtool (Debian package
// "prometheus"), and its decision counters against the calls made.
TEST_F(MetricsTest, PromtoolAcceptsServedMetricsAndCountersAddUp) {
  Metrics metrics(&engine_);
  metrics_ptr_ = &metrics;
  absl::StatusOr<std::unique_ptr<MetricsServer>> server =
      MetricsServer::Start("127.0.0.1:0", &metrics);
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  std::map<std::string, int> calls = Workload();
  for (int i = 0; i < 100; ++i) {
    metrics.ObserveAcquire(absl::Microseconds(i * 10));
  }

  const std::string body = sluice::testing::HttpGet((*server)->port(),
                                                    "/metrics");
  ASSERT_THAT(body, HasSubstr("sluice_decisions_total"));
  EXPECT_EQ(Promtool(body), "") << body;

  const std::vector<Sample> s = Parse(body);
  int total_calls = calls["inventory"] + calls["search"];
  EXPECT_EQ(Sum(s, "sluice_decisions_total"), total_calls);
  EXPECT_EQ(Sum(s, "sluice_acquire_duration_seconds_count"), 100);
  EXPECT_THAT(body, Not(HasSubstr("key=")));
}

// Adaptive gates: the limit and throttle gauges are the engine's state at
// scrape time, the baseline appears once learned, and the change counters
// count the engine's events.
TEST_F(MetricsTest, AdaptiveGaugesAndChangeCounters) {
  Metrics metrics(&engine_);
  metrics_ptr_ = &metrics;
  ASSERT_TRUE(store_
                  .Put(P(R"pb(name: "limits"
                              breaker {
                                consecutive_failures: 100
                                window { seconds: 1 }
                                minimum_calls: 2
                                latency_baseline { factor: 3 history_windows: 3 }
                              }
                              adaptive_concurrency {
                                initial_limit: 2
                                minimum_samples: 2
                                window { seconds: 1 }
                              })pb"),
                       0)
                  .ok());
  ASSERT_TRUE(store_
                  .Put(P(R"pb(name: "throttled"
                              adaptive_throttle { minimum_requests: 4 })pb"),
                       0)
                  .ok());
  std::vector<Sample> s = Parse(metrics.Render());
  EXPECT_EQ(Sum(s, "sluice_adaptive_limit", {{"dependency", "limits"}}), 2);
  EXPECT_EQ(Sum(s, "sluice_adaptive_changes_total",
                {{"dependency", "limits"}, {"kind", "limit_up"}}),
            0);
  // Nothing judged or learned yet: no baselines.
  EXPECT_THAT(metrics.Render(), Not(HasSubstr("sluice_adaptive_baseline")));
  EXPECT_THAT(metrics.Render(), Not(HasSubstr("sluice_latency_baseline")));
  // Only the dependencies with the block have its metrics.
  EXPECT_THAT(metrics.Render(),
              Not(HasSubstr(R"(sluice_adaptive_limit{dependency="throttled")")));
  EXPECT_THAT(metrics.Render(),
              Not(HasSubstr(R"(sluice_throttle_probability{dependency="limits")")));

  // limits, window 1: the limit of 2 is reached, the latency is 20 ms.
  std::vector<core::PermitId> permits;
  for (int i = 0; i < 3; ++i) {
    auto d = engine_.Acquire("limits", "", 1);
    ASSERT_TRUE(d.ok());
    if (!d->permit_id.empty()) permits.push_back(d->permit_id);
  }
  ASSERT_EQ(permits.size(), 2u);
  s = Parse(metrics.Render());
  EXPECT_EQ(Sum(s, "sluice_adaptive_in_flight", {{"dependency", "limits"}}), 2);
  clock_.Advance(absl::Milliseconds(20));
  for (const core::PermitId& id : permits) {
    engine_.Report("limits", "", id, core::Outcome::kSuccess,
                   absl::Milliseconds(20));
  }
  // A window later the sweep judges window 1: limit reached, latency at the
  // baseline, so 2 -> 3. Window 2 runs at 40 ms.
  clock_.Advance(absl::Seconds(1));
  engine_.Sweep();
  permits.clear();
  for (int i = 0; i < 2; ++i) {
    auto d = engine_.Acquire("limits", "", 1);
    ASSERT_TRUE(d.ok());
    ASSERT_FALSE(d->permit_id.empty());
    permits.push_back(d->permit_id);
  }
  for (const core::PermitId& id : permits) {
    engine_.Report("limits", "", id, core::Outcome::kSuccess,
                   absl::Milliseconds(40));
  }
  s = Parse(metrics.Render());
  EXPECT_EQ(Sum(s, "sluice_adaptive_limit", {{"dependency", "limits"}}), 3);
  EXPECT_EQ(Sum(s, "sluice_adaptive_in_flight", {{"dependency", "limits"}}), 0);
  EXPECT_DOUBLE_EQ(
      Sum(s, "sluice_adaptive_baseline_seconds", {{"dependency", "limits"}}),
      0.02);
  EXPECT_EQ(Sum(s, "sluice_adaptive_changes_total",
                {{"dependency", "limits"}, {"kind", "limit_up"}}),
            1);
  // One breaker window (20 ms) learned.
  EXPECT_DOUBLE_EQ(Sum(s, "sluice_latency_baseline_seconds",
                       {{"dependency", "limits"}, {"stat", "mean"}}),
                   0.02);
  EXPECT_DOUBLE_EQ(Sum(s, "sluice_latency_baseline_seconds",
                       {{"dependency", "limits"}, {"stat", "stddev"}}),
                   0);

  // A window later, idle: window 2 (40 ms, twice the baseline) steps the
  // limit down, and the baseline learns it: weight 2 / (3 + 1) gives mean
  // 30 ms and standard deviation 10 ms.
  clock_.Advance(absl::Seconds(1));
  engine_.Sweep();
  s = Parse(metrics.Render());
  EXPECT_EQ(Sum(s, "sluice_adaptive_limit", {{"dependency", "limits"}}), 2);
  EXPECT_EQ(Sum(s, "sluice_adaptive_changes_total",
                {{"dependency", "limits"}, {"kind", "limit_down"}}),
            1);
  EXPECT_NEAR(Sum(s, "sluice_latency_baseline_seconds",
                  {{"dependency", "limits"}, {"stat", "mean"}}),
              0.03, 1e-9);
  EXPECT_NEAR(Sum(s, "sluice_latency_baseline_seconds",
                  {{"dependency", "limits"}, {"stat", "stddev"}}),
              0.01, 1e-9);

  // throttled: failures only; the probability is (requests - 2 x accepts) /
  // (requests + 1) once there are 4 requests, so the fifth call starts the
  // throttle (a call is judged by the calls before it).
  for (int i = 0; i < 5; ++i) {
    auto d = engine_.Acquire("throttled", "", 1);
    ASSERT_TRUE(d.ok());
    if (!d->permit_id.empty()) {
      engine_.Report("throttled", "", d->permit_id, core::Outcome::kFailure,
                     absl::Milliseconds(5));
    }
  }
  absl::StatusOr<core::LivePolicyStatus> st = engine_.Inspect("throttled");
  ASSERT_TRUE(st.ok());
  ASSERT_TRUE(st->gates && st->gates->throttle);
  const core::ThrottleStatus t = *st->gates->throttle;
  ASSERT_EQ(t.accepts, 0);
  ASSERT_EQ(t.requests, 5);
  s = Parse(metrics.Render());
  EXPECT_DOUBLE_EQ(
      Sum(s, "sluice_throttle_probability", {{"dependency", "throttled"}}),
      static_cast<double>(t.requests) / (t.requests + 1));
  EXPECT_EQ(Sum(s, "sluice_adaptive_changes_total",
                {{"dependency", "throttled"}, {"kind", "throttle_started"}}),
            1);
  EXPECT_EQ(Sum(s, "sluice_adaptive_changes_total",
                {{"dependency", "throttled"}, {"kind", "throttle_stopped"}}),
            0);
  // The window (10 s) passes: the throttle stops.
  clock_.Advance(absl::Seconds(11));
  engine_.Sweep();
  s = Parse(metrics.Render());
  EXPECT_EQ(
      Sum(s, "sluice_throttle_probability", {{"dependency", "throttled"}}), 0);
  EXPECT_EQ(Sum(s, "sluice_adaptive_changes_total",
                {{"dependency", "throttled"}, {"kind", "throttle_stopped"}}),
            1);

  // A key's move is not counted: the metric has no key label.
  core::AdaptiveChange keyed;
  keyed.dependency = "limits";
  keyed.key = "tenant-1";
  keyed.from = 2;
  keyed.to = 3;
  metrics.OnAdaptiveChange(keyed);
  s = Parse(metrics.Render());
  EXPECT_EQ(Sum(s, "sluice_adaptive_changes_total",
                {{"dependency", "limits"}, {"kind", "limit_up"}}),
            1);

  EXPECT_EQ(Promtool(metrics.Render()), "") << metrics.Render();
}

TEST(MetricsServerTest, BusyAddressIsAnError) {
  sluice::testing::FakeClock clock;
  core::Engine engine(&clock, core::Engine::Options());
  Metrics metrics(&engine);
  auto first = MetricsServer::Start("127.0.0.1:0", &metrics);
  ASSERT_TRUE(first.ok());
  auto second = MetricsServer::Start(
      absl::StrCat("127.0.0.1:", (*first)->port()), &metrics);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace sluice::metrics
