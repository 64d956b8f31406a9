// SPDX-License-Identifier: Apache-2.0
// sluicectl's output formats: what scripts parse must stay JSON whatever
// text the server sends back.

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "sluice/v1/admin.pb.h"
#include "tools/sluicectl/output_format.h"
#include "tools/sluicectl/state_view.h"

namespace sluice::ctl {
namespace {

TEST(ApplyResultJsonTest, KeepsTheShapeScriptsRead) {
  EXPECT_EQ(
      ApplyResultJson({"inventory", "create", "ok", 3}),
      R"({"name":"inventory","action":"create","result":"ok","version":3})");
}

TEST(ApplyResultJsonTest,
     AServerMessageWithQuotesBackslashesAndNewlinesStaysJson) {
  const std::string message =
      "failed: policy \"inventory\": path C:\\policies\nsecond line\ttab";
  const std::string line = ApplyResultJson({"inventory", "update", message, 7});

  EXPECT_EQ(line.find('\n'), std::string::npos) << "one line per policy";
  const nlohmann::json parsed =
      nlohmann::json::parse(line);  // throws if not JSON
  EXPECT_EQ(parsed.at("name"), "inventory");
  EXPECT_EQ(parsed.at("action"), "update");
  EXPECT_EQ(parsed.at("result"), message);
  EXPECT_EQ(parsed.at("version"), 7);
}

TEST(ApplyResultJsonTest, TextThatIsNotUtf8IsReplacedNotThrown) {
  const std::string line =
      ApplyResultJson({"inventory", "update", "failed: \xff\xfe", 1});
  EXPECT_TRUE(nlohmann::json::accept(line)) << line;
}

TEST(MessageJsonTest, UsesProtoFieldNamesAndEscapes) {
  v1::Event event;
  event.set_kind(v1::Event::OVERRIDE_SET);
  event.set_cause("note \"INC-7\"\\\nnext");
  event.set_replica_id("r1");
  const std::string line = MessageJson(event, /*pretty=*/false);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  const nlohmann::json parsed = nlohmann::json::parse(line);
  EXPECT_EQ(parsed.at("cause"), event.cause());
  EXPECT_EQ(parsed.at("replica_id"), "r1");
}

TEST(FormatTableTest, AlignsColumnsTwoSpacesApart) {
  EXPECT_EQ(FormatTable({{"NAME", "VERSION"}, {"inventory", "4"}}),
            "NAME       VERSION\n"
            "inventory  4\n");
}

// The value of the row labelled `label`.
std::string Row(const v1::DependencyState& st, const std::string& label) {
  std::map<std::string, std::string> rows;
  for (const std::vector<std::string>& row : StateRows(st)) {
    EXPECT_EQ(row.size(), 2u);
    rows[row[0]] = row[1];
  }
  auto it = rows.find(label);
  return it == rows.end() ? "<no row>" : it->second;
}

google::protobuf::Duration Ms(int64_t ms) {
  google::protobuf::Duration d;
  d.set_seconds(ms / 1000);
  d.set_nanos(static_cast<int32_t>((ms % 1000) * 1000000));
  return d;
}

TEST(StateRowsTest, AdaptiveBlocksTheDependencyLacksShowADash) {
  v1::DependencyState st;
  st.set_dependency("inventory");
  EXPECT_EQ(Row(st, "adaptive limit"), "- (no adaptive_concurrency)");
  EXPECT_EQ(Row(st, "throttle"), "- (no adaptive_throttle)");
  EXPECT_EQ(Row(st, "latency baseline"), "- (no latency_baseline)");
  EXPECT_EQ(Row(st, "dependency"), "inventory");
}

TEST(StateRowsTest, GrantsFromNamesTheStoreOrTheUpstream) {
  v1::DependencyState st;
  st.set_store_status("standalone");
  EXPECT_EQ(Row(st, "grants from"), "- (standalone)");
  st.set_store_status("up");
  st.set_grant_source("redis 10.0.0.5:6379");
  st.set_leaves(412);
  EXPECT_EQ(Row(st, "grants from"), "redis 10.0.0.5:6379, serving 412 leaves");
  st.set_leaves(1);
  EXPECT_EQ(Row(st, "grants from"), "redis 10.0.0.5:6379, serving 1 leaf");
  st.set_leaves(0);
  st.set_grant_source(
      "upstream dns:///sluice-central:50051 (peer ipv4:10.0.3.7:50051)");
  EXPECT_EQ(Row(st, "grants from"),
            "upstream dns:///sluice-central:50051 (peer ipv4:10.0.3.7:50051)");
}

TEST(StateRowsTest, ShowsWhatClientsHoldOnLease) {
  v1::DependencyState st;
  EXPECT_EQ(Row(st, "client leases"), "- (per_key: not leased)");
  v1::ClientLeasesState* l = st.mutable_client_leases();
  EXPECT_EQ(Row(st, "client leases"),
            "0 clients hold 0 tokens and 0 slots; 0 calls decided from leases");
  l->set_leases(1);
  l->set_tokens(37.6);
  l->set_slots(4);
  l->set_leased_decisions(1234);
  EXPECT_EQ(Row(st, "client leases"),
            "1 client holds 38 tokens and 4 slots; 1234 calls decided from "
            "leases");
}

TEST(StateRowsTest, ShowsTheAdaptiveLimitThrottleAndBaseline) {
  v1::DependencyState st;
  v1::AdaptiveLimitState* a = st.mutable_adaptive_limit();
  a->set_limit(23);
  a->set_in_flight(5);
  a->set_steady_limit(20);
  *a->mutable_baseline() = Ms(20);
  *a->mutable_last_latency() = Ms(1250);
  a->set_refused(12);
  v1::AdaptiveThrottleState* t = st.mutable_throttle();
  t->set_requests(80);
  t->set_accepts(30);
  t->set_probability(0.24691);
  t->set_refused(7);
  v1::LatencyBaselineState* b = st.mutable_latency_baseline();
  b->set_windows_learned(12);
  b->set_ready(true);
  *b->mutable_mean() = Ms(20);
  *b->mutable_stddev() = Ms(2);
  b->set_success_rate(0.995);
  b->set_live_calls(48);
  *b->mutable_live_mean() = Ms(22);
  b->set_live_success_rate(1);

  EXPECT_EQ(Row(st, "adaptive limit"),
            "23 (5 in flight, steady 20), baseline 20.0ms, last window "
            "1250.0ms, 12 refused");
  EXPECT_EQ(Row(st, "throttle"),
            "refusing 24.7% (30 accepted of 80 requests in the window), 7 "
            "refused");
  EXPECT_EQ(Row(st, "latency baseline"),
            "mean 20.0ms +- 2.0ms, success 99.5% over 12 windows (ready); "
            "live 48 calls: mean 22.0ms, success 100.0%");
}

TEST(StateRowsTest, BeforeAnythingIsLearned) {
  v1::DependencyState st;
  st.mutable_adaptive_limit()->set_limit(10);
  st.mutable_latency_baseline()->set_live_calls(0);
  EXPECT_EQ(Row(st, "adaptive limit"),
            "10 (0 in flight, steady 0), baseline - (none yet), last window "
            "-, 0 refused");
  EXPECT_EQ(Row(st, "latency baseline"),
            "nothing learned yet (warming up); live 0 calls");
}

TEST(DescribeEventTest, AdaptiveEventsReadAsMoves) {
  v1::Event e;
  e.set_kind(v1::Event::ADAPTIVE_LIMIT_CHANGED);
  e.set_old_value(40);
  e.set_new_value(22);
  e.set_cause("mean latency 48.0ms > 1.5 x baseline 20.0ms");
  EXPECT_EQ(DescribeEvent(e),
            "limit 40 -> 22 (mean latency 48.0ms > 1.5 x baseline 20.0ms)");
  e.set_key("tenant-1");
  EXPECT_EQ(DescribeEvent(e),
            "key \"tenant-1\": limit 40 -> 22 (mean latency 48.0ms > 1.5 x "
            "baseline 20.0ms)");

  v1::Event started;
  started.set_kind(v1::Event::THROTTLE_STARTED);
  started.set_old_value(0);
  started.set_new_value(0.25);
  started.set_cause("30 accepts of 80 requests over 10s: below 1/2");
  EXPECT_EQ(DescribeEvent(started),
            "refusing 25.0% of calls (30 accepts of 80 requests over 10s: "
            "below 1/2)");

  v1::Event stopped;
  stopped.set_kind(v1::Event::THROTTLE_STOPPED);
  stopped.set_cause("60 accepts of 80 requests over 10s");
  EXPECT_EQ(DescribeEvent(stopped),
            "no longer refusing (60 accepts of 80 requests over 10s)");
}

TEST(DescribeEventTest, OtherKindsAsBefore) {
  v1::Event e;
  e.set_kind(v1::Event::BREAKER_TRANSITION);
  e.set_from(v1::CLOSED);
  e.set_to(v1::OPEN);
  e.set_cause("5 consecutive failures");
  e.set_breaker_generation(3);
  EXPECT_EQ(DescribeEvent(e),
            "CLOSED -> OPEN (5 consecutive failures; generation 3)");
  e.set_kind(v1::Event::POLICY_CHANGED);
  e.set_old_version(2);
  e.set_new_version(3);
  e.set_cause("put");
  EXPECT_EQ(DescribeEvent(e), "version 2 -> 3 (put)");
}

TEST(MessageJsonTest, StateCarriesTheAdaptiveBlocksByProtoName) {
  v1::DependencyState st;
  st.mutable_adaptive_limit()->set_limit(23);
  *st.mutable_adaptive_limit()->mutable_baseline() = Ms(20);
  st.mutable_throttle()->set_probability(0.5);
  const nlohmann::json parsed = nlohmann::json::parse(MessageJson(st));
  EXPECT_EQ(parsed.at("adaptive_limit").at("limit"), 23);
  EXPECT_EQ(parsed.at("adaptive_limit").at("baseline"), "0.020s");
  EXPECT_EQ(parsed.at("throttle").at("probability"), 0.5);
  EXPECT_FALSE(parsed.contains("latency_baseline"));
}

}  // namespace
}  // namespace sluice::ctl
