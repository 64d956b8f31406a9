// SPDX-License-Identifier: Apache-2.0
// Two real sluiced replicas sharing a real redis-server, driven over the
// admin and data-plane APIs; plus one standalone replica for /metrics.
// Propagation times are printed ("propagation: ...") and recorded as test
// properties.

#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "sluice/v1/admin.grpc.pb.h"
#include "sluice/v1/decision.grpc.pb.h"
#include "tests/testing/http_get.h"
#include "tests/testing/sluiced_process.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/wait_for.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using testing::SluicedProcess;

constexpr char kToken[] = "t0ken-for-tests";
constexpr absl::Duration kPropagationBound = absl::Seconds(2);

constexpr char kSeed[] = R"(policies:
  - name: inventory
    rate_limit: { rate: 1000, burst: 1000 }
    breaker: { consecutive_failures: 3, open_duration: 30s }
    fallback: { strategy: STATIC, payload: '{"degraded":true}', on: [CIRCUIT_OPEN] }
)";

v1::Policy P(const std::string& text) {
  v1::Policy p;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &p)) << text;
  return p;
}

// How long `done` took to hold (checked every 10 ms for up to 5 s), or
// nullopt.
template <typename F>
std::optional<absl::Duration> TimeUntil(F done) {
  return testing::WaitFor(std::move(done), absl::Seconds(5));
}

void RecordPropagation(const std::string& what, absl::Duration d) {
  const double ms = absl::ToDoubleMilliseconds(d);
  std::printf("propagation: %s took %.0f ms\n", what.c_str(), ms);
  ::testing::Test::RecordProperty(what, static_cast<int>(ms));
}

class ClusterAdminTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(redis_.Start()) << "cannot start redis-server";
    std::string error;
    const std::string redis = "--redis=" + redis_.address();
    ASSERT_TRUE(a_.Start(kSeed, {redis, "--replica-id=a"}, kToken, &error))
        << error;
    ASSERT_TRUE(b_.Start(kSeed, {redis, "--replica-id=b"}, kToken, &error))
        << error;
    // Both replicas know the seeded policy from the store.
    ASSERT_TRUE(TimeUntil([&] {
      return Version(&a_, "inventory") > 0 &&
             Version(&a_, "inventory") == Version(&b_, "inventory");
    })) << a_.Log() << b_.Log();
  }
  void TearDown() override {
    EXPECT_EQ(a_.Terminate(), 0) << a_.Log();
    EXPECT_EQ(b_.Terminate(), 0) << b_.Log();
  }

  uint64_t Version(SluicedProcess* r, const std::string& name) {
    v1::GetPolicyRequest req;
    req.set_name(name);
    v1::Policy p;
    return r->admin()->GetPolicy(r->Context().get(), req, &p).ok()
               ? p.version()
               : 0;
  }
  grpc::Status Put(SluicedProcess* r, const v1::Policy& policy,
                   uint64_t expected = 0, v1::PutPolicyResponse* out = nullptr) {
    v1::PutPolicyRequest req;
    *req.mutable_policy() = policy;
    req.set_expected_version(expected);
    v1::PutPolicyResponse resp;
    grpc::Status s = r->admin()->PutPolicy(r->Context().get(), req, &resp);
    if (out) *out = resp;
    return s;
  }
  grpc::Status Override(SluicedProcess* r, const std::string& dep,
                        v1::BreakerOverride o) {
    v1::SetBreakerOverrideRequest req;
    req.set_dependency(dep);
    req.set_override(o);
    req.set_note("integration test");
    v1::SetBreakerOverrideResponse resp;
    return r->admin()->SetBreakerOverride(r->Context().get(), req, &resp);
  }

  testing::RedisServer redis_;
  SluicedProcess a_, b_;
};

TEST_F(ClusterAdminTest, PolicyPutOnOneIsEnforcedOnTheOtherWithin2s) {
  v1::PutPolicyResponse put;
  ASSERT_TRUE(
      Put(&a_, P(R"pb(name: "payments" rate_limit { rate: 2 burst: 2 per { seconds: 60 } })pb"),
          0, &put)
          .ok());
  const auto took = TimeUntil([&] {
    return b_.Acquire("payments").policy_version() == put.version();
  });
  ASSERT_TRUE(took.has_value()) << b_.Log();
  RecordPropagation("policy_put", *took);
  EXPECT_LE(*took, kPropagationBound);
  // B enforces it: 2 per minute, and the probe above took one.
  EXPECT_EQ(b_.Acquire("payments").verdict(), v1::ALLOW);
  const v1::AcquireResponse third = b_.Acquire("payments");
  EXPECT_EQ(third.verdict(), v1::REJECT);
  EXPECT_EQ(third.reason(), v1::RATE_LIMITED);
  // Both replicas report the same version.
  EXPECT_EQ(Version(&b_, "payments"), put.version());

  // An edit keeps live state: B's bucket stays spent under the new limit.
  ASSERT_TRUE(
      Put(&a_, P(R"pb(name: "payments" rate_limit { rate: 3 burst: 3 per { seconds: 60 } })pb"),
          put.version(), &put)
          .ok());
  ASSERT_TRUE(TimeUntil([&] { return Version(&b_, "payments") == put.version(); }));
  EXPECT_EQ(b_.Acquire("payments").verdict(), v1::REJECT);

  // Delete: the dependency follows --unknown-dependency (allow) on B.
  v1::DeletePolicyRequest del;
  del.set_name("payments");
  v1::DeletePolicyResponse del_resp;
  ASSERT_TRUE(a_.admin()->DeletePolicy(a_.Context().get(), del, &del_resp).ok());
  const auto deleted = TimeUntil([&] {
    return b_.Acquire("payments").reason() == v1::UNKNOWN_DEPENDENCY;
  });
  ASSERT_TRUE(deleted.has_value());
  RecordPropagation("policy_delete", *deleted);
  EXPECT_LE(*deleted, kPropagationBound);
}

TEST_F(ClusterAdminTest, ForceOpenOnOneDegradesOnTheOtherAndAutoRestores) {
  ASSERT_EQ(b_.Acquire("inventory").verdict(), v1::ALLOW);
  ASSERT_TRUE(Override(&a_, "inventory", v1::FORCE_OPEN).ok());
  // A applied it before answering.
  EXPECT_EQ(a_.Acquire("inventory").verdict(), v1::DEGRADE);
  const auto opened = TimeUntil([&] {
    const v1::AcquireResponse r = b_.Acquire("inventory");
    return r.verdict() == v1::DEGRADE && r.reason() == v1::CIRCUIT_OPEN &&
           r.breaker_state() == v1::FORCED_OPEN;
  });
  ASSERT_TRUE(opened.has_value()) << b_.Log();
  RecordPropagation("force_open", *opened);
  EXPECT_LE(*opened, kPropagationBound);
  EXPECT_THAT(b_.Acquire("inventory").fallback().payload(),
              HasSubstr("degraded"));

  v1::GetStateRequest state_req;
  state_req.set_dependency("inventory");
  v1::DependencyState state;
  ASSERT_TRUE(b_.admin()->GetState(b_.Context().get(), state_req, &state).ok());
  EXPECT_EQ(state.override(), v1::FORCE_OPEN);
  EXPECT_EQ(state.store_status(), "up");
  EXPECT_EQ(state.live_replicas(), 2u);
  EXPECT_EQ(state.replica_id(), "b");

  ASSERT_TRUE(Override(&a_, "inventory", v1::AUTO).ok());
  const auto closed = TimeUntil([&] {
    return b_.Acquire("inventory").verdict() == v1::ALLOW;
  });
  ASSERT_TRUE(closed.has_value());
  RecordPropagation("override_auto", *closed);
  EXPECT_LE(*closed, kPropagationBound);
}

TEST_F(ClusterAdminTest, InvalidPolicyChangesNothing) {
  const uint64_t before = Version(&a_, "inventory");
  v1::Policy bad = P(R"pb(name: "inventory"
                          rate_limit { rate: 1 }
                          breaker { failure_rate_threshold: 1.5 })pb");
  const grpc::Status s = Put(&a_, bad);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("breaker.failure_rate_threshold"));
  // A whole tick of each replica after the refusal.
  ASSERT_TRUE(testing::WaitForSyncTicks({&a_, &b_}, 2, absl::Seconds(5)))
      << a_.Log() << b_.Log();
  EXPECT_EQ(Version(&a_, "inventory"), before);
  EXPECT_EQ(Version(&b_, "inventory"), before);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(b_.Acquire("inventory").verdict(), v1::ALLOW);
  }
}

TEST_F(ClusterAdminTest, CompareAndSetConflictIsAbortedAcrossReplicas) {
  const uint64_t v = Version(&a_, "inventory");
  v1::Policy edit = P(R"pb(name: "inventory" rate_limit { rate: 500 })pb");
  v1::PutPolicyResponse put;
  ASSERT_TRUE(Put(&a_, edit, v, &put).ok());
  EXPECT_GT(put.version(), v);
  // B's writer still holds the old version: refused even before B applied
  // A's change, because the check runs in the store.
  edit.mutable_rate_limit()->set_rate(400);
  const grpc::Status s = Put(&b_, edit, v);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ABORTED) << s.error_message();
  ASSERT_TRUE(TimeUntil([&] { return Version(&b_, "inventory") == put.version(); }));
  v1::GetPolicyRequest get;
  get.set_name("inventory");
  v1::Policy got;
  ASSERT_TRUE(b_.admin()->GetPolicy(b_.Context().get(), get, &got).ok());
  EXPECT_DOUBLE_EQ(got.rate_limit().rate(), 500);
}

TEST_F(ClusterAdminTest, WatchOnOneReportsTransitionCausedOnAnother) {
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", absl::StrCat("Bearer ", kToken));
  // The watch gives up after 5 s.
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::WatchEventsRequest req;
  req.set_dependency("inventory");
  auto reader = b_.admin()->WatchEvents(&ctx, req);
  reader->WaitForInitialMetadata();

  // Three failures on A trip its breaker; B adopts the trip.
  const absl::Time start = absl::Now();
  for (int i = 0; i < 3; ++i) {
    const v1::AcquireResponse r = a_.Acquire("inventory");
    ASSERT_EQ(r.verdict(), v1::ALLOW);
    a_.Report("inventory", r.permit_id(), v1::FAILURE);
  }
  v1::Event e;
  bool seen = false;
  while (reader->Read(&e)) {
    if (e.kind() == v1::Event::BREAKER_TRANSITION && e.to() == v1::OPEN) {
      seen = true;
      break;
    }
  }
  const absl::Duration took = absl::Now() - start;
  ctx.TryCancel();
  reader->Finish();
  ASSERT_TRUE(seen) << b_.Log();
  RecordPropagation("breaker_trip_event", took);
  EXPECT_LE(took, kPropagationBound);
  EXPECT_EQ(e.dependency(), "inventory");
  EXPECT_EQ(e.replica_id(), "b");
  EXPECT_THAT(e.cause(), HasSubstr("3 consecutive failures"));
  EXPECT_THAT(e.cause(), HasSubstr("from replica a"));
  EXPECT_GT(e.breaker_generation(), 0u);
  EXPECT_EQ(b_.Acquire("inventory").verdict(), v1::DEGRADE);
}

TEST_F(ClusterAdminTest, TokenIsEnforced) {
  v1::ListPoliciesResponse list;
  EXPECT_EQ(a_.admin()->ListPolicies(a_.Context("").get(), {}, &list).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(
      a_.admin()->ListPolicies(a_.Context("wrong").get(), {}, &list).error_code(),
      grpc::StatusCode::UNAUTHENTICATED);
  v1::PutPolicyRequest put;
  *put.mutable_policy() = P(R"pb(name: "sneaky")pb");
  v1::PutPolicyResponse put_resp;
  EXPECT_EQ(a_.admin()->PutPolicy(a_.Context("").get(), put, &put_resp).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(a_.admin()->ListPolicies(a_.Context().get(), {}, &list).ok());
  EXPECT_EQ(list.policies_size(), 1);
}

TEST_F(ClusterAdminTest, AdminIsRefusedOnTheDataPlanePort) {
  auto on_data_port = v1::AdminService::NewStub(a_.data_channel());
  v1::SetBreakerOverrideRequest req;
  req.set_dependency("inventory");
  req.set_override(v1::FORCE_OPEN);
  v1::SetBreakerOverrideResponse resp;
  EXPECT_EQ(on_data_port->SetBreakerOverride(a_.Context().get(), req, &resp)
                .error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  v1::ListPoliciesResponse list;
  EXPECT_EQ(on_data_port->ListPolicies(a_.Context().get(), {}, &list).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  // And the data plane is not served on the admin port.
  auto on_admin_port = v1::DecisionService::NewStub(a_.admin_channel());
  v1::AcquireRequest acquire;
  acquire.set_dependency("inventory");
  v1::AcquireResponse acquired;
  grpc::ClientContext ctx;
  EXPECT_EQ(on_admin_port->Acquire(&ctx, acquire, &acquired).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(a_.Acquire("inventory").verdict(), v1::ALLOW);
}

// Sum of the samples of `name` whose labels include `match`.
double SumMetric(const std::string& body, const std::string& name,
                 const std::string& match = "") {
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(body, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    if (!absl::StartsWith(line, name + "{") && !absl::StartsWith(line, name + " ")) {
      continue;
    }
    if (!match.empty() && !absl::StrContains(line, match)) continue;
    double v = 0;
    if (absl::SimpleAtod(line.substr(line.rfind(' ') + 1), &v)) sum += v;
  }
  return sum;
}

TEST_F(ClusterAdminTest, MetricsShowTheStoreAndPassPromtool) {
  std::string body;
  // A counts B from its first tick after B joined.
  ASSERT_TRUE(TimeUntil([&] {
    body = testing::HttpGet(a_.metrics_port(), "/metrics");
    return SumMetric(body, "sluice_live_replicas") == 2;
  })) << body;
  EXPECT_EQ(SumMetric(body, "sluice_store_up"), 1) << body;
  EXPECT_EQ(SumMetric(body, "sluice_live_replicas"), 2) << body;
  EXPECT_GT(SumMetric(body, "sluice_sync_ticks_total"), 0) << body;
  const std::string path = a_.dir() + "/metrics.txt";
  testing::WriteFile(path, body);
  const testing::CommandResult check =
      testing::RunCommand("promtool check metrics < " + path);
  EXPECT_EQ(check.exit_code, 0) << check.output;
}

// Standalone: the real /metrics output passes promtool and its decision
// counters add up to the Acquire calls made.
TEST(StandaloneMetricsTest, PromtoolAcceptsMetricsAndDecisionsAddUp) {
  SluicedProcess s;
  std::string error;
  ASSERT_TRUE(s.Start(R"(policies:
  - name: inventory
    rate_limit: { rate: 10, burst: 10, per: 60s }
    breaker: { consecutive_failures: 3 }
    fallback: { strategy: STATIC, payload: '{}', on: [CIRCUIT_OPEN] }
  - name: search
    concurrency: { max_in_flight: 2 }
)",
                      {}, "", &error))
      << error;
  int calls = 0;
  for (int i = 0; i < 25; ++i, ++calls) s.Acquire("inventory");  // 15 refused
  for (int i = 0; i < 5; ++i, ++calls) s.Acquire("search");      // 3 refused
  const std::string body = testing::HttpGet(s.metrics_port(), "/metrics");
  const std::string path = s.dir() + "/metrics.txt";
  testing::WriteFile(path, body);
  const testing::CommandResult check =
      testing::RunCommand("promtool check metrics < " + path);
  EXPECT_EQ(check.exit_code, 0) << check.output << "\n" << body;
  EXPECT_EQ(check.output, "");

  EXPECT_EQ(SumMetric(body, "sluice_decisions_total"), calls) << body;
  EXPECT_EQ(SumMetric(body, "sluice_decisions_total",
                      "dependency=\"inventory\",verdict=\"REJECT\",reason=\"RATE_LIMITED\""),
            15)
      << body;
  EXPECT_EQ(SumMetric(body, "sluice_decisions_total",
                      "dependency=\"search\",verdict=\"REJECT\",reason=\"CONCURRENCY_LIMITED\""),
            3);
  EXPECT_EQ(SumMetric(body, "sluice_in_flight", "dependency=\"search\""), 2);
  EXPECT_EQ(SumMetric(body, "sluice_acquire_duration_seconds_count"), calls);
  // Standalone: no store metrics, and never a key label.
  EXPECT_THAT(body, ::testing::Not(HasSubstr("sluice_store_up")));
  EXPECT_THAT(body, ::testing::Not(HasSubstr("key=")));
  EXPECT_EQ(s.Terminate(), 0) << s.Log();
}

}  // namespace
}  // namespace sluice
