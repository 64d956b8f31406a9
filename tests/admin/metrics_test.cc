// SPDX-License-Identifier: Apache-2.0
#include "server/metrics/metrics.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "server/metrics/metric_list.h"
#include "server/policy/policy_store.h"
#include "tests/testing/http_get.h"
#include "tests/testing/fake_clock.h"

namespace sluice::metrics {
namespace {

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

// promtool's complaints about a /metrics body ("" when it has none).
std::string Promtool(const std::string& body) {
  const std::string path = ::testing::TempDir() + "/sluice_metrics.txt";
  {
    std::ofstream out(path);
    out << body;
  }
  const std::string cmd =
      absl::StrCat("promtool check metrics < ", path, " 2>&1");
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return "cannot run promtool";
  std::string output;
  char buf[512];
  while (fgets(buf, sizeof(buf), pipe) != nullptr) output += buf;
  const int rc = pclose(pipe);
  if (rc != 0 && output.empty()) output = absl::StrCat("exit status ", rc);
  return output;
}

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
  const std::regex valid("^sluice_[a-z_]+$");
  for (size_t i = 0; i < kMetrics.size(); ++i) {
    const MetricDef& def = kMetrics[i];
    EXPECT_EQ(static_cast<size_t>(def.id), i) << def.name;
    EXPECT_TRUE(names.insert(def.name).second) << def.name;
    EXPECT_TRUE(std::regex_match(std::string(def.name), valid)) << def.name;
    EXPECT_EQ(absl::EndsWith(def.name, "_total"),
              def.type == MetricType::kCounter)
        << def.name;
    EXPECT_GT(std::string(def.help).size(), 10u) << def.name;
    for (const char* label : def.labels) {
      if (label == nullptr) break;
      EXPECT_STRNE(label, "key") << def.name;
    }
  }
}

TEST_F(MetricsTest, ExposesOnlyListedMetricsWithTheirLabels) {
  Metrics metrics({&engine_, nullptr, nullptr, nullptr, nullptr, nullptr});
  metrics_ptr_ = &metrics;
  Workload();
  metrics.ObserveAcquire(absl::Microseconds(40));
  for (const prometheus::MetricFamily& family : metrics.Collect()) {
    const MetricDef* def = nullptr;
    for (const MetricDef& d : kMetrics) {
      if (family.name == d.name) def = &d;
    }
    ASSERT_NE(def, nullptr) << family.name << " is not in metric_list.h";
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
  Metrics metrics({&engine_, nullptr, nullptr, nullptr, nullptr, nullptr});
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

TEST_F(MetricsTest, ClusterMetricsComeFromTheSyncLoop) {
  Sources sources{&engine_, [] {
                    SyncSnapshot s;
                    s.store_up = false;
                    s.ticks = 12;
                    s.failures = 3;
                    s.live_replicas = 2;
                    s.last_tick_duration = absl::Milliseconds(4);
                    s.reports_forwarded = 9;
                    s.reports_received = 2;
                    s.store_endpoint = "10.0.0.7:6379";
                    s.store_errors = {{"auth", 4}, {"readonly", 1}};
                    s.store_events = {{"master_changed", 2}};
                    return std::optional<SyncSnapshot>(s);
                  },
                  [] { return uint64_t{7}; },
                  [] { return std::pair<uint64_t, uint64_t>(5, 1); },
                  nullptr, nullptr};
  Metrics metrics(sources);
  const std::vector<Sample> s = Parse(metrics.Render());
  EXPECT_EQ(Sum(s, "sluice_store_up"), 0);
  EXPECT_EQ(Sum(s, "sluice_sync_ticks_total"), 12);
  EXPECT_EQ(Sum(s, "sluice_sync_errors_total"), 3);
  EXPECT_EQ(Sum(s, "sluice_live_replicas"), 2);
  EXPECT_DOUBLE_EQ(Sum(s, "sluice_sync_tick_duration_seconds"), 0.004);
  EXPECT_EQ(Sum(s, "sluice_watch_events_dropped_total"), 7);
  EXPECT_EQ(Sum(s, "sluice_forwarded_reports_total", {{"direction", "out"}}), 9);
  EXPECT_EQ(Sum(s, "sluice_forwarded_reports_total", {{"direction", "in"}}), 2);
  EXPECT_EQ(Sum(s, "sluice_store_errors_total", {{"kind", "auth"}}), 4);
  EXPECT_EQ(Sum(s, "sluice_store_errors_total", {{"kind", "readonly"}}), 1);
  EXPECT_EQ(Sum(s, "sluice_store_events_total", {{"kind", "master_changed"}}),
            2);
  EXPECT_EQ(Sum(s, "sluice_store_endpoint_info",
                {{"endpoint", "10.0.0.7:6379"}}),
            1);
  EXPECT_EQ(Sum(s, "sluice_unknown_dependency_decisions_total",
                {{"verdict", "ALLOW"}}),
            5);
}

// The grant tree: a leaf's upstream and a central replica's leaves, each
// shown only where the snapshot has it, and valid for promtool.
TEST_F(MetricsTest, GrantTreeMetricsShowTheUpstreamAndTheLeaves) {
  SyncSnapshot leaf;
  leaf.store_up = true;
  leaf.store_endpoint = "ipv4:10.0.0.7:50051";
  leaf.store_events = {{"moved", 3}};
  UpstreamSnapshot upstream;
  upstream.target = "dns:///sluice-central:50051";
  upstream.peer = "ipv4:10.0.0.7:50051";
  upstream.moves = 3;
  upstream.last_round_trip = absl::Microseconds(1500);
  leaf.upstream = upstream;
  SyncSnapshot central;
  central.store_up = true;
  LeavesSnapshot leaves;
  leaves.leaves = 12;
  leaves.ticks = {{"ok", 40}, {"stale", 2}, {"too_many", 1}};
  leaves.units = {{"rate", 100, 60, 30}, {"slots", 10, 4, 2}};
  leaves.breaker_reports = {{"accepted", 5}};
  leaves.forwarded = {{"delivered", 7}, {"dropped", 1}};
  central.leaves = leaves;
  std::optional<SyncSnapshot> snapshot = leaf;
  Sources sources{&engine_, [&] { return snapshot; }, nullptr, nullptr,
                  nullptr, nullptr};
  Metrics metrics(sources);

  std::string body = metrics.Render();
  EXPECT_EQ(Promtool(body), "") << body;
  std::vector<Sample> s = Parse(body);
  EXPECT_EQ(Sum(s, "sluice_upstream_info",
                {{"target", "dns:///sluice-central:50051"},
                 {"peer", "ipv4:10.0.0.7:50051"}}),
            1);
  EXPECT_EQ(Sum(s, "sluice_upstream_moves_total"), 3);
  EXPECT_DOUBLE_EQ(Sum(s, "sluice_upstream_round_trip_seconds"), 0.0015);
  EXPECT_THAT(body, Not(HasSubstr("sluice_leaves")));
  EXPECT_THAT(body, Not(HasSubstr("sluice_lease_units")));

  snapshot = central;
  body = metrics.Render();
  EXPECT_EQ(Promtool(body), "") << body;
  s = Parse(body);
  EXPECT_THAT(body, Not(HasSubstr("sluice_upstream_")));
  EXPECT_EQ(Sum(s, "sluice_leaves"), 12);
  EXPECT_EQ(Sum(s, "sluice_leaf_ticks_total", {{"result", "ok"}}), 40);
  EXPECT_EQ(Sum(s, "sluice_leaf_ticks_total", {{"result", "too_many"}}), 1);
  EXPECT_EQ(Sum(s, "sluice_lease_units",
                {{"resource", "rate"}, {"holder", "granted"}}),
            100);
  EXPECT_EQ(Sum(s, "sluice_lease_units",
                {{"resource", "rate"}, {"holder", "leaves"}}),
            60);
  EXPECT_EQ(Sum(s, "sluice_lease_units",
                {{"resource", "slots"}, {"holder", "self"}}),
            2);
  EXPECT_EQ(Sum(s, "sluice_leaf_breaker_reports_total",
                {{"result", "accepted"}}),
            5);
  EXPECT_EQ(Sum(s, "sluice_leaf_forwarded_reports_total",
                {{"route", "delivered"}}),
            7);
}

TEST_F(MetricsTest, WatchersAreTheOpenWatchStreams) {
  Sources sources{&engine_, nullptr, nullptr, nullptr, nullptr, nullptr};
  uint64_t open = 2;
  sources.watchers = [&] { return open; };
  Metrics metrics(sources);
  EXPECT_EQ(Sum(Parse(metrics.Render()), "sluice_watchers"), 2);
  open = 0;
  EXPECT_EQ(Sum(Parse(metrics.Render()), "sluice_watchers"), 0);
}

TEST_F(MetricsTest, DecideStreamsAreTheOpenDecideStreams) {
  Sources sources;
  sources.engine = &engine_;
  uint64_t open = 3;
  sources.decide_streams = [&] { return open; };
  Metrics metrics(sources);
  EXPECT_EQ(Sum(Parse(metrics.Render()), "sluice_decide_streams"), 3);
  open = 1;
  EXPECT_EQ(Sum(Parse(metrics.Render()), "sluice_decide_streams"), 1);
}

TEST_F(MetricsTest, RateLimitServiceAnswersByCode) {
  Sources sources;
  sources.engine = &engine_;
  RateLimitTotals totals;
  totals.ok = 7;
  totals.over_limit = 2;
  totals.invalid = 1;
  totals.unmatched = 4;
  sources.rate_limit = [&] { return totals; };
  Metrics metrics(sources);
  const auto s = Parse(metrics.Render());
  EXPECT_EQ(Sum(s, "sluice_rls_requests_total", {{"code", "OK"}}), 7);
  EXPECT_EQ(Sum(s, "sluice_rls_requests_total", {{"code", "OVER_LIMIT"}}), 2);
  EXPECT_EQ(Sum(s, "sluice_rls_requests_total", {{"code", "INVALID_ARGUMENT"}}),
            1);
  EXPECT_EQ(Sum(s, "sluice_rls_unmatched_descriptors_total"), 4);
}

TEST_F(MetricsTest, ExtAuthzChecksByResult) {
  Sources sources;
  sources.engine = &engine_;
  ExtAuthzTotals totals;
  totals.allow = 5;
  totals.refuse = 3;
  totals.degrade = 2;
  totals.unmatched = 4;
  totals.invalid = 1;
  sources.ext_authz = [&] { return totals; };
  Metrics metrics(sources);
  const auto s = Parse(metrics.Render());
  EXPECT_EQ(Sum(s, "sluice_ext_authz_checks_total", {{"result", "allow"}}), 5);
  EXPECT_EQ(Sum(s, "sluice_ext_authz_checks_total", {{"result", "refuse"}}), 3);
  EXPECT_EQ(Sum(s, "sluice_ext_authz_checks_total", {{"result", "degrade"}}),
            2);
  EXPECT_EQ(Sum(s, "sluice_ext_authz_checks_total", {{"result", "unmatched"}}),
            4);
  EXPECT_EQ(Sum(s, "sluice_ext_authz_checks_total", {{"result", "invalid"}}),
            1);
}

TEST_F(MetricsTest, AccessLogEntriesByResult) {
  Sources sources;
  sources.engine = &engine_;
  AccessLogTotals totals;
  totals.settled = 9;
  totals.no_permit = 3;
  totals.unknown_permit = 2;
  totals.invalid = 1;
  sources.access_log = [&] { return totals; };
  Metrics metrics(sources);
  const auto s = Parse(metrics.Render());
  const std::string name = "sluice_access_log_entries_total";
  EXPECT_EQ(Sum(s, name, {{"result", "settled"}}), 9);
  EXPECT_EQ(Sum(s, name, {{"result", "no_permit"}}), 3);
  EXPECT_EQ(Sum(s, name, {{"result", "unknown_permit"}}), 2);
  EXPECT_EQ(Sum(s, name, {{"result", "invalid"}}), 1);
}

TEST_F(MetricsTest, HttpMetricsOnlyWithTheHttpApi) {
  Sources sources{&engine_, nullptr, nullptr, nullptr, nullptr, nullptr};
  EXPECT_THAT(Metrics(sources).Render(), Not(HasSubstr("sluice_http_")));
  sources.http = [] { return std::optional<HttpSnapshot>(); };  // API off
  EXPECT_THAT(Metrics(sources).Render(), Not(HasSubstr("sluice_http_")));

  sources.http = [] {
    HttpSnapshot snapshot;
    snapshot.requests = {{"/v1/acquire", "200", 5}, {"other", "404", 1}};
    snapshot.active_connections = 2;
    snapshot.waiting_connections = 1;
    return std::optional<HttpSnapshot>(snapshot);
  };
  const std::vector<Sample> s = Parse(Metrics(sources).Render());
  EXPECT_EQ(Sum(s, "sluice_http_requests_total",
                {{"endpoint", "/v1/acquire"}, {"code", "200"}}),
            5);
  EXPECT_EQ(Sum(s, "sluice_http_requests_total",
                {{"endpoint", "other"}, {"code", "404"}}),
            1);
  EXPECT_EQ(Sum(s, "sluice_http_connections", {{"state", "active"}}), 2);
  EXPECT_EQ(Sum(s, "sluice_http_connections", {{"state", "waiting"}}), 1);
}

TEST_F(MetricsTest, StateFileMetricsOnlyWithAStateFile) {
  Sources sources{&engine_, nullptr, nullptr, nullptr, nullptr, nullptr};
  EXPECT_THAT(Metrics(sources).Render(), Not(HasSubstr("sluice_state_file")));
  sources.state_file = [] { return std::optional<StateFileSnapshot>(); };
  EXPECT_THAT(Metrics(sources).Render(), Not(HasSubstr("sluice_state_file")));

  StateFileSnapshot snapshot;
  sources.state_file = [&] { return std::optional<StateFileSnapshot>(snapshot); };
  std::vector<Sample> s = Parse(Metrics(sources).Render());
  EXPECT_EQ(Sum(s, "sluice_state_file_writes_total", {{"result", "ok"}}), 0);
  EXPECT_EQ(Sum(s, "sluice_state_file_last_write_timestamp_seconds"), 0);
  snapshot.writes = 12;
  snapshot.failures = 2;
  snapshot.last_write = absl::FromUnixSeconds(1796000000);
  s = Parse(Metrics(sources).Render());
  EXPECT_EQ(Sum(s, "sluice_state_file_writes_total", {{"result", "ok"}}), 12);
  EXPECT_EQ(Sum(s, "sluice_state_file_writes_total", {{"result", "error"}}), 2);
  EXPECT_EQ(Sum(s, "sluice_state_file_last_write_timestamp_seconds"),
            1796000000);
}

TEST_F(MetricsTest, AdminTokenReloadsOnlyWithATokenFile) {
  Sources sources{&engine_, nullptr, nullptr, nullptr, nullptr, nullptr};
  EXPECT_THAT(Metrics(sources).Render(), Not(HasSubstr("sluice_admin_token")));
  sources.admin_token = [] { return std::optional<AdminTokenSnapshot>(); };
  EXPECT_THAT(Metrics(sources).Render(), Not(HasSubstr("sluice_admin_token")));

  AdminTokenSnapshot snapshot;
  sources.admin_token = [&] {
    return std::optional<AdminTokenSnapshot>(snapshot);
  };
  std::vector<Sample> s = Parse(Metrics(sources).Render());
  EXPECT_EQ(Sum(s, "sluice_admin_token_reloads_total", {{"result", "ok"}}), 0);
  EXPECT_EQ(Sum(s, "sluice_admin_token_reloads_total", {{"result", "error"}}),
            0);
  snapshot.reloads_ok = 3;
  snapshot.reloads_error = 1;
  s = Parse(Metrics(sources).Render());
  EXPECT_EQ(Sum(s, "sluice_admin_token_reloads_total", {{"result", "ok"}}), 3);
  EXPECT_EQ(Sum(s, "sluice_admin_token_reloads_total", {{"result", "error"}}),
            1);
}

TEST_F(MetricsTest, PolicyReloadsOnlyWithAPoliciesFile) {
  Sources sources{&engine_, nullptr, nullptr, nullptr, nullptr, nullptr};
  EXPECT_THAT(Metrics(sources).Render(),
              Not(HasSubstr("sluice_policy_reload")));
  sources.policy_reloads = [] {
    return std::optional<PolicyReloadSnapshot>();
  };
  EXPECT_THAT(Metrics(sources).Render(),
              Not(HasSubstr("sluice_policy_reload")));

  PolicyReloadSnapshot snapshot;
  sources.policy_reloads = [&] {
    return std::optional<PolicyReloadSnapshot>(snapshot);
  };
  std::vector<Sample> s = Parse(Metrics(sources).Render());
  EXPECT_EQ(Sum(s, "sluice_policy_reloads_total", {{"result", "ok"}}), 0);
  EXPECT_EQ(Sum(s, "sluice_policy_reloads_total", {{"result", "error"}}), 0);
  EXPECT_EQ(Sum(s, "sluice_policy_reload_last_error"), 0);
  snapshot.ok = 4;
  snapshot.error = 2;
  snapshot.last_failed = true;
  s = Parse(Metrics(sources).Render());
  EXPECT_EQ(Sum(s, "sluice_policy_reloads_total", {{"result", "ok"}}), 4);
  EXPECT_EQ(Sum(s, "sluice_policy_reloads_total", {{"result", "error"}}), 2);
  EXPECT_EQ(Sum(s, "sluice_policy_reload_last_error"), 1);
}

TEST_F(MetricsTest, TlsMetricsOnlyWithACertificate) {
  Sources sources{&engine_, nullptr, nullptr, nullptr, nullptr, nullptr};
  EXPECT_THAT(Metrics(sources).Render(), Not(HasSubstr("sluice_tls")));
  sources.tls = [] { return std::optional<TlsSnapshot>(); };
  EXPECT_THAT(Metrics(sources).Render(), Not(HasSubstr("sluice_tls")));

  TlsSnapshot snapshot;
  snapshot.not_after = absl::FromUnixSeconds(1800000000);
  snapshot.reloads = 3;
  snapshot.reload_failures = 1;
  sources.tls = [&] { return std::optional<TlsSnapshot>(snapshot); };
  const std::vector<Sample> s = Parse(Metrics(sources).Render());
  EXPECT_EQ(Sum(s, "sluice_tls_certificate_expiry_timestamp_seconds"),
            1800000000);
  EXPECT_EQ(Sum(s, "sluice_tls_reloads_total", {{"result", "ok"}}), 3);
  EXPECT_EQ(Sum(s, "sluice_tls_reloads_total", {{"result", "error"}}), 1);
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
  Metrics metrics({&engine_, nullptr, nullptr, nullptr, nullptr, nullptr});
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
  Metrics metrics({&engine_, nullptr, nullptr, nullptr, nullptr, nullptr});
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
  absl::StatusOr<core::DependencyStatus> st = engine_.Inspect("throttled");
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
  Metrics metrics({&engine, nullptr, nullptr, nullptr, nullptr, nullptr});
  auto first = MetricsServer::Start("127.0.0.1:0", &metrics);
  ASSERT_TRUE(first.ok());
  auto second = MetricsServer::Start(
      absl::StrCat("127.0.0.1:", (*first)->port()), &metrics);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace sluice::metrics
