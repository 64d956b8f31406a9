// SPDX-License-Identifier: Apache-2.0
// Envoy's rate-limit service (RLS v3) against app::Server in process: a
// client built from our rls.proto calls ShouldRateLimit over a real TCP gRPC
// channel, while the server decides on a fake clock, so every count below is
// exact. Policies come from a YAML policies file, as an operator writes them.

#include <grpcpp/grpcpp.h>

#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "server/app/server.h"
#include "sluice/v1/admin.grpc.pb.h"
#include "sluice/v1/decision.grpc.pb.h"
#include "tests/rls/in_process_server.h"
#include "tests/rls/rls_test_util.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/temp_dir.h"

namespace sluice {
namespace {

using envoy::service::ratelimit::v3::RateLimitRequest;
using envoy::service::ratelimit::v3::RateLimitResponse;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;
using Code = RateLimitResponse::Code;
using Unit = RateLimitResponse::RateLimit::Unit;

constexpr char kPolicies[] = R"yaml(
policies:
  # One limit for all traffic to payments.
  - name: payments
    rate_limit: {rate: 10, per: 1s, burst: 5}
    rate_limit_headers: true
    envoy_descriptors:
      - domain: edge
        entries: [{key: destination_cluster, value: payments}]
  # Nested: per tenant of the search cluster, any tenant value.
  - name: search-per-tenant
    per_key: true
    rate_limit: {rate: 2, per: 1s}
    envoy_descriptors:
      - domain: edge
        entries:
          - {key: destination_cluster, value: search}
          - {key: tenant}
  # An exact value wins over the any-value entry above.
  - name: search-vip
    rate_limit: {rate: 100, per: 1s}
    envoy_descriptors:
      - domain: edge
        entries:
          - {key: destination_cluster, value: search}
          - {key: tenant, value: vip}
  # Two any-value entries: the partition is both values.
  - name: per-client-route
    per_key: true
    rate_limit: {algorithm: SLIDING_WINDOW, rate: 3, per: 60s}
    envoy_descriptors:
      - domain: edge
        entries: [{key: client}, {key: route}]
  - name: shadowed
    shadow: true
    rate_limit: {rate: 1, per: 1s}
    envoy_descriptors:
      - domain: edge
        entries: [{key: generic_key, value: shadowed}]
  - name: inventory
    call_timeout: 1s
    concurrency: {max_in_flight: 2}
    breaker: {consecutive_failures: 3}
    fallback:
      strategy: STATIC
      payload: '{"items":[]}'
      content_type: application/json
    envoy_descriptors:
      - domain: edge
        entries: [{key: destination_cluster, value: inventory}]
)yaml";

class RateLimitServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = dir_.File("policies.yaml");
    std::ofstream(path) << kPolicies;
    server_ = std::make_unique<rls_test::InProcessServer>(path, &clock_);
    ASSERT_TRUE(server_->status().ok()) << server_->status();
    channel_ = server_->channel();
    admin_ = v1::AdminService::NewStub(server_->server().AdminInProcessChannel());
  }

  // One descriptor per list of key/value pairs, in domain "edge".
  static RateLimitRequest Request(const std::vector<rls_test::Entries>& descriptors,
                                  uint32_t hits_addend = 0) {
    return rls_test::Request("edge", descriptors, hits_addend);
  }

  grpc::Status Call(const RateLimitRequest& request,
                    RateLimitResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    return server_->rls()->ShouldRateLimit(&context, request, response);
  }

  RateLimitResponse Ask(const RateLimitRequest& request) {
    RateLimitResponse response;
    const grpc::Status s = Call(request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response;
  }

  Code Overall(const RateLimitRequest& request) {
    return Ask(request).overall_code();
  }

  // Sends `request` `n` times; how many were answered OK.
  int OkCount(const RateLimitRequest& request, int n) {
    int ok = 0;
    for (int i = 0; i < n; ++i) ok += Overall(request) == RateLimitResponse::OK;
    return ok;
  }

  v1::DependencyState State(const std::string& dependency) {
    v1::GetStateRequest request;
    request.set_dependency(dependency);
    v1::DependencyState state;
    grpc::ClientContext context;
    EXPECT_TRUE(admin_->GetState(&context, request, &state).ok());
    return state;
  }

  grpc::Status Put(const v1::Policy& policy) {
    v1::PutPolicyRequest request;
    *request.mutable_policy() = policy;
    v1::PutPolicyResponse response;
    grpc::ClientContext context;
    return admin_->PutPolicy(&context, request, &response);
  }

  static std::vector<std::pair<std::string, std::string>> Headers(
      const RateLimitResponse& r) {
    return rls_test::Headers(r);
  }

  v1::DecisionService::Stub* decisions() { return server_->decisions(); }

  testing::TempDir dir_{"rls_test"};
  testing::FakeClock clock_;
  std::unique_ptr<rls_test::InProcessServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
};

TEST_F(RateLimitServiceTest, ExactDescriptorIsLimitedByItsPolicy) {
  const RateLimitRequest r = Request({{{"destination_cluster", "payments"}}});
  for (int i = 0; i < 5; ++i) {
    const RateLimitResponse response = Ask(r);
    ASSERT_EQ(response.overall_code(), RateLimitResponse::OK) << i;
    ASSERT_EQ(response.statuses_size(), 1);
    const auto& status = response.statuses(0);
    EXPECT_EQ(status.code(), RateLimitResponse::OK);
    EXPECT_EQ(status.current_limit().requests_per_unit(), 10u);
    EXPECT_EQ(status.current_limit().unit(), Unit::RateLimitResponse_RateLimit_Unit_SECOND);
    EXPECT_EQ(status.current_limit().name(), "payments");
    EXPECT_EQ(status.limit_remaining(), static_cast<uint32_t>(4 - i));
    // The bucket refills (5 - remaining) tokens at 10/s.
    EXPECT_EQ(status.duration_until_reset().seconds() * 1000 +
                  status.duration_until_reset().nanos() / 1000000,
              (i + 1) * 100);
  }
  const RateLimitResponse refused = Ask(r);
  EXPECT_EQ(refused.overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(refused.statuses(0).code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(refused.statuses(0).limit_remaining(), 0u);
  // Refused: the reset says when one request fits again.
  EXPECT_EQ(refused.statuses(0).duration_until_reset().nanos(), 100000000);
  clock_.Advance(absl::Milliseconds(100));
  EXPECT_EQ(Overall(r), RateLimitResponse::OK);
  EXPECT_EQ(Overall(r), RateLimitResponse::OVER_LIMIT);
  // The same counters as an Acquire of "payments".
  const v1::DependencyState state = State("payments");
  EXPECT_EQ(state.decisions().acquired(), 8u);
  EXPECT_EQ(state.decisions().allowed(), 6u);
  EXPECT_EQ(state.decisions().rejected(), 2u);
}

TEST_F(RateLimitServiceTest, AnyValueEntryGivesEachValueItsOwnLimit) {
  auto tenant = [](const std::string& t) {
    return Request({{{"destination_cluster", "search"}, {"tenant", t}}});
  };
  EXPECT_EQ(OkCount(tenant("acme"), 5), 2);
  EXPECT_EQ(OkCount(tenant("globex"), 5), 2);
  // The exact entry wins over the any-value one: vip has its own policy.
  EXPECT_EQ(OkCount(tenant("vip"), 50), 50);
  EXPECT_EQ(State("search-per-tenant").keys(), 2u);
  // The key is the tenant itself, shared with Acquire callers of that key.
  v1::AcquireRequest acquire;
  acquire.set_dependency("search-per-tenant");
  acquire.set_key("acme");
  v1::AcquireResponse answer;
  grpc::ClientContext context;
  ASSERT_TRUE(decisions()->Acquire(&context, acquire, &answer).ok());
  EXPECT_EQ(answer.verdict(), v1::REJECT);
  clock_.Advance(absl::Milliseconds(500));
  EXPECT_EQ(OkCount(tenant("acme"), 5), 1);
}

TEST_F(RateLimitServiceTest, SeveralAnyValueEntriesPartitionByAllValues) {
  auto call = [](const std::string& client, const std::string& route) {
    return Request({{{"client", client}, {"route", route}}});
  };
  EXPECT_EQ(OkCount(call("a", "/x"), 5), 3);
  EXPECT_EQ(OkCount(call("a", "/y"), 5), 3);
  EXPECT_EQ(OkCount(call("b", "/x"), 5), 3);
  const RateLimitResponse r = Ask(call("a", "/x"));
  // 3 per 60 s reads as 3 per MINUTE; a window frees its room within 60 s.
  EXPECT_EQ(r.statuses(0).current_limit().requests_per_unit(), 3u);
  EXPECT_EQ(r.statuses(0).current_limit().unit(),
            Unit::RateLimitResponse_RateLimit_Unit_MINUTE);
  EXPECT_EQ(State("per-client-route").keys(), 3u);
  // Values holding the separator do not collide: each has its own bucket.
  EXPECT_EQ(OkCount(call("c|d", "e"), 5), 3);
  EXPECT_EQ(OkCount(call("c", "d|e"), 5), 3);
  EXPECT_EQ(State("per-client-route").keys(), 5u);
}

TEST_F(RateLimitServiceTest, UnmatchedDescriptorsAreNotLimited) {
  for (const RateLimitRequest& r :
       {Request({{{"destination_cluster", "elsewhere"}}}),
        // A prefix of a configured path is not the path.
        Request({{{"destination_cluster", "search"}}}),
        // Deeper than any configured path.
        Request({{{"destination_cluster", "payments"}, {"extra", "1"}}})}) {
    const RateLimitResponse response = Ask(r);
    EXPECT_EQ(response.overall_code(), RateLimitResponse::OK);
    ASSERT_EQ(response.statuses_size(), 1);
    EXPECT_EQ(response.statuses(0).code(), RateLimitResponse::OK);
    EXPECT_FALSE(response.statuses(0).has_current_limit());
  }
  RateLimitRequest other_domain =
      Request({{{"destination_cluster", "payments"}}});
  other_domain.set_domain("internal");
  EXPECT_EQ(OkCount(other_domain, 20), 20);
  EXPECT_EQ(State("payments").decisions().acquired(), 0u);
}

TEST_F(RateLimitServiceTest, EveryDescriptorGetsItsStatusInOrder) {
  // Exhaust payments first.
  EXPECT_EQ(OkCount(Request({{{"destination_cluster", "payments"}}}), 5), 5);
  const RateLimitResponse r =
      Ask(Request({{{"destination_cluster", "search"}, {"tenant", "t1"}},
                   {{"destination_cluster", "payments"}},
                   {{"nothing", "here"}}}));
  EXPECT_EQ(r.overall_code(), RateLimitResponse::OVER_LIMIT);
  ASSERT_EQ(r.statuses_size(), 3);
  EXPECT_EQ(r.statuses(0).code(), RateLimitResponse::OK);
  EXPECT_EQ(r.statuses(0).current_limit().name(), "search-per-tenant");
  EXPECT_EQ(r.statuses(0).limit_remaining(), 1u);
  EXPECT_EQ(r.statuses(1).code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(r.statuses(1).current_limit().name(), "payments");
  EXPECT_EQ(r.statuses(2).code(), RateLimitResponse::OK);
  EXPECT_FALSE(r.statuses(2).has_current_limit());
}

TEST_F(RateLimitServiceTest, HitsAddendIsHonoured) {
  const auto payments = std::vector<rls_test::Entries>{
      {{"destination_cluster", "payments"}}};
  // 0 means 1.
  EXPECT_EQ(Ask(Request(payments, 0)).statuses(0).limit_remaining(), 4u);
  EXPECT_EQ(Ask(Request(payments, 3)).statuses(0).limit_remaining(), 1u);
  EXPECT_EQ(Overall(Request(payments, 2)), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(Overall(Request(payments, 1)), RateLimitResponse::OK);
  clock_.Advance(absl::Seconds(1));
  // The descriptor's own hits_addend overrides the request's.
  RateLimitRequest r = Request(payments, 1);
  r.mutable_descriptors(0)->mutable_hits_addend()->set_value(4);
  EXPECT_EQ(Ask(r).statuses(0).limit_remaining(), 1u);
  // More than the bucket can ever hold is a refusal, not an error.
  clock_.Advance(absl::Seconds(1));
  const RateLimitResponse too_many = Ask(Request(payments, 6));
  EXPECT_EQ(too_many.overall_code(), RateLimitResponse::OVER_LIMIT);
  r.mutable_descriptors(0)->mutable_hits_addend()->set_value(uint64_t{1} << 40);
  EXPECT_EQ(Overall(r), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(Ask(Request(payments, 5)).statuses(0).limit_remaining(), 0u);
}

TEST_F(RateLimitServiceTest, RateLimitHeadersWhenThePolicyAsks) {
  const RateLimitRequest payments =
      Request({{{"destination_cluster", "payments"}}});
  EXPECT_THAT(Headers(Ask(payments)),
              UnorderedElementsAre(Pair("RateLimit-Limit", "5"),
                                   Pair("RateLimit-Remaining", "4"),
                                   Pair("RateLimit-Reset", "1")));
  for (int i = 0; i < 4; ++i) Ask(payments);
  EXPECT_THAT(Headers(Ask(payments)),
              UnorderedElementsAre(Pair("RateLimit-Limit", "5"),
                                   Pair("RateLimit-Remaining", "0"),
                                   Pair("RateLimit-Reset", "1"),
                                   Pair("Retry-After", "1")));
  // search-per-tenant does not ask for headers.
  EXPECT_THAT(Headers(Ask(Request(
                  {{{"destination_cluster", "search"}, {"tenant", "x"}}}))),
              ::testing::IsEmpty());
}

TEST_F(RateLimitServiceTest, ShadowAnswersOkAndCountsWhatItWouldRefuse) {
  const RateLimitRequest r = Request({{{"generic_key", "shadowed"}}});
  EXPECT_EQ(OkCount(r, 4), 4);
  // Even a hit count beyond the bucket refuses nothing in shadow.
  EXPECT_EQ(Overall(Request({{{"generic_key", "shadowed"}}}, 5)),
            RateLimitResponse::OK);
  const v1::DependencyState state = State("shadowed");
  EXPECT_EQ(state.decisions().acquired(), 4u);
  EXPECT_EQ(state.decisions().shadow_refused(), 3u);
}

TEST_F(RateLimitServiceTest, ConcurrencyAndOpenBreakerAnswerOverLimit) {
  const RateLimitRequest r = Request({{{"destination_cluster", "inventory"}}});
  const RateLimitResponse first = Ask(r);
  ASSERT_EQ(first.overall_code(), RateLimitResponse::OK);
  EXPECT_EQ(Overall(r), RateLimitResponse::OK);
  // The cap of 2 is taken: the third is refused and served the fallback.
  const RateLimitResponse refused = Ask(r);
  EXPECT_EQ(refused.overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(refused.raw_body(), R"({"items":[]})");
  EXPECT_THAT(Headers(refused),
              UnorderedElementsAre(Pair("content-type", "application/json"),
                                   Pair("x-sluice-degraded",
                                        "CONCURRENCY_LIMITED")));

  // The permit is in the dynamic metadata; reporting it frees its slot.
  const auto& permits =
      first.dynamic_metadata().fields().at("sluice_permits").list_value();
  ASSERT_EQ(permits.values_size(), 1);
  const auto& permit = permits.values(0).struct_value().fields();
  EXPECT_EQ(permit.at("dependency").string_value(), "inventory");
  EXPECT_EQ(permit.at("key").string_value(), "");
  v1::ReportResultRequest report;
  report.set_dependency("inventory");
  report.set_permit_id(permit.at("permit_id").string_value());
  report.set_outcome(v1::FAILURE);
  v1::ReportResultResponse reported;
  grpc::ClientContext context;
  ASSERT_TRUE(decisions()->ReportResult(&context, report, &reported).ok());
  EXPECT_EQ(State("inventory").in_flight(), 1u);
  EXPECT_EQ(Overall(r), RateLimitResponse::OK);

  // Unreported permits expire after 2 x call_timeout as releases: the slots
  // free up and the breaker counts no timeout.
  clock_.Advance(absl::Seconds(2));
  EXPECT_EQ(Overall(r), RateLimitResponse::OK);
  v1::DependencyState state = State("inventory");
  EXPECT_EQ(state.window_outcomes().timeouts(), 0u);
  EXPECT_EQ(state.window_outcomes().failures(), 1u);
  EXPECT_EQ(state.breaker_state(), v1::CLOSED);

  // An operator opens the breaker: refused, with the fallback.
  v1::SetBreakerOverrideRequest force;
  force.set_dependency("inventory");
  force.set_override(v1::FORCE_OPEN);
  v1::SetBreakerOverrideResponse forced;
  grpc::ClientContext force_context;
  ASSERT_TRUE(admin_->SetBreakerOverride(&force_context, force, &forced).ok());
  const RateLimitResponse open = Ask(r);
  EXPECT_EQ(open.overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_THAT(Headers(open),
              ::testing::Contains(Pair("x-sluice-degraded", "CIRCUIT_OPEN")));
}

TEST_F(RateLimitServiceTest, OverLimitFreesTheSlotsOtherDescriptorsTook) {
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(OkCount(Request({{{"destination_cluster", "payments"}}}), 5), 5);
  const RateLimitRequest both =
      Request({{{"destination_cluster", "inventory"}},
               {{"destination_cluster", "payments"}}});
  const RateLimitResponse r = Ask(both);
  EXPECT_EQ(r.overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(r.statuses(0).code(), RateLimitResponse::OK);
  // The call is not made, so inventory's slot is free again at once.
  EXPECT_EQ(State("inventory").in_flight(), 0u);
  EXPECT_FALSE(r.has_dynamic_metadata());
}

// Its metrics: the calls by answer, and the descriptors no policy matched.
TEST_F(RateLimitServiceTest, AnswersAreCountedByCode) {
  const RateLimitRequest payments =
      Request({{{"destination_cluster", "payments"}}});
  EXPECT_EQ(OkCount(payments, 7), 5);  // then 2 OVER_LIMIT
  EXPECT_EQ(Overall(Request({{{"nothing", "here"}}})), RateLimitResponse::OK);
  RateLimitRequest invalid = payments;
  invalid.clear_domain();
  RateLimitResponse response;
  EXPECT_EQ(Call(invalid, &response).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  const std::string body = server_->server().metrics().Render();
  for (const char* sample :
       {"sluice_rls_requests_total{code=\"OK\"} 6\n",
        "sluice_rls_requests_total{code=\"OVER_LIMIT\"} 2\n",
        "sluice_rls_requests_total{code=\"INVALID_ARGUMENT\"} 1\n",
        "sluice_rls_unmatched_descriptors_total 1\n"}) {
    EXPECT_THAT(body, ::testing::HasSubstr(sample)) << body;
  }
}

TEST_F(RateLimitServiceTest, MalformedRequestsAreInvalidArgumentNamingTheField) {
  struct Case {
    RateLimitRequest request;
    std::string field;
  };
  std::vector<Case> cases;
  {
    RateLimitRequest r = Request({{{"a", "b"}}});
    r.clear_domain();
    cases.push_back({r, "domain"});
  }
  cases.push_back({Request({}), "descriptors must have 1 to 64"});
  cases.push_back({Request({{{"a", "b"}}, {}}), "descriptors[1].entries"});
  cases.push_back({Request({{{"a", "b"}, {"", "c"}}}),
                   "descriptors[0].entries[1].key"});
  cases.push_back(
      {Request({{{"client", std::string(600, 'x')}, {"route", std::string(600, 'y')}}}),
       "descriptors[0]"});
  for (const Case& c : cases) {
    RateLimitResponse response;
    const grpc::Status s = Call(c.request, &response);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.field;
    EXPECT_THAT(s.error_message(), HasSubstr(c.field));
  }
}

TEST_F(RateLimitServiceTest, CountAmplifiedRequestsAreRefusedBeforeParsing) {
  // 30,000 empty descriptors in 60 kB: refused for the count, on the raw
  // bytes, not built and then refused.
  RateLimitRequest many;
  many.set_domain("edge");
  for (int i = 0; i < 30000; ++i) many.add_descriptors();
  RateLimitResponse response;
  grpc::Status s = Call(many, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(s.error_message(),
            "descriptors: at most 64 per RateLimitRequest, got 30000; none "
            "was handled");
  // Above the method's 64 KiB: refused for its size.
  for (int i = 0; i < 10000; ++i) many.add_descriptors();
  s = Call(many, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("the limit is 65536 bytes"));
  // 1.1 million (2.2 MB): above the port's 2 MiB, refused by gRPC itself.
  for (int i = 0; i < 1100000; ++i) many.add_descriptors();
  s = Call(many, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // A valid request is served as usual afterwards.
  EXPECT_EQ(Overall(Request({{{"header_match", "api"}}})),
            RateLimitResponse::OK);
}

TEST_F(RateLimitServiceTest, PolicyChangesRemapAtOnce) {
  const RateLimitRequest r = Request({{{"destination_cluster", "orders"}}});
  EXPECT_EQ(OkCount(r, 3), 3);  // nothing maps it yet
  v1::Policy orders;
  orders.set_name("orders");
  orders.mutable_rate_limit()->set_rate(1);
  auto* d = orders.add_envoy_descriptors();
  d->set_domain("edge");
  auto* e = d->add_entries();
  e->set_key("destination_cluster");
  e->set_value("orders");
  ASSERT_TRUE(Put(orders).ok());
  EXPECT_EQ(OkCount(r, 3), 1);

  // Editing the policy in place (same per_key) remaps at once too.
  orders.mutable_envoy_descriptors(0)->mutable_entries(0)->set_value(
      "orders-v2");
  orders.set_rate_limit_headers(true);
  ASSERT_TRUE(Put(orders).ok());
  EXPECT_EQ(OkCount(r, 3), 3);
  const RateLimitResponse moved =
      Ask(Request({{{"destination_cluster", "orders-v2"}}}));
  EXPECT_EQ(moved.statuses(0).current_limit().name(), "orders");
  EXPECT_THAT(Headers(moved), ::testing::Contains(Pair("RateLimit-Limit", "1")));

  // Another policy may not claim the same descriptor.
  v1::Policy twin = orders;
  twin.set_name("orders-twin");
  const grpc::Status s = Put(twin);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(),
              HasSubstr("policies \"orders\" and \"orders-twin\" both answer"));

  // An any-value entry needs per_key.
  v1::Policy loose = orders;
  loose.set_name("loose");
  loose.mutable_envoy_descriptors(0)->mutable_entries(0)->clear_value();
  const grpc::Status l = Put(loose);
  EXPECT_EQ(l.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(l.error_message(),
              HasSubstr("envoy_descriptors[0].entries[0].value is empty"));
}

TEST_F(RateLimitServiceTest, HealthReportsTheServiceByName) {
  // What Envoy's gRPC health checker asks for the rate-limit cluster.
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("envoy.service.ratelimit.v3.RateLimitService");
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(health->Check(&context, request, &response).ok());
  EXPECT_EQ(response.status(),
            grpc::health::v1::HealthCheckResponse::SERVING);
}

}  // namespace
}  // namespace sluice
