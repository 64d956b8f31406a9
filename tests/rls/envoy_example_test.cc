// SPDX-License-Identifier: Apache-2.0
// deploy/envoy/policies.yaml, loaded and served by the real server: each
// descriptor that deploy/envoy/envoy.yaml's routes send (as
// scripts/deploy-check/envoy_check.js derives them) is answered by the
// policy that check names, and the reports the bootstrap's Lua filter sends
// open inventory's breaker, after which Envoy is handed the fallback body.
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/app/options.h"
#include "server/app/server.h"
#include "sluice/v1/decision.grpc.pb.h"
#include "tests/rls/in_process_server.h"
#include "tests/rls/rls_test_util.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/fake_clock.h"

namespace sluice {
namespace {

using envoy::service::ratelimit::v3::RateLimitResponse;
using ::testing::Contains;
using ::testing::Key;
using ::testing::Pair;

using rls_test::Entries;

class EnvoyExampleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<rls_test::InProcessServer>(
        absl::StrCat(testing::kSourceDir, "/deploy/envoy/policies.yaml"),
        &clock_);
    ASSERT_TRUE(server_->status().ok()) << server_->status();
  }

  // One descriptor in the bootstrap's domain.
  RateLimitResponse Ask(const Entries& entries) {
    RateLimitResponse response;
    grpc::ClientContext context;
    const grpc::Status s = server_->rls()->ShouldRateLimit(
        &context, rls_test::Request("edge", {entries}), &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response;
  }

  // The policy that answered: the current limit's name, or, for a policy
  // without a rate limit, the dependency of the permit it issued.
  static std::string AnsweredBy(const RateLimitResponse& r) {
    if (r.statuses_size() != 1) return "?";
    if (r.statuses(0).has_current_limit()) {
      return r.statuses(0).current_limit().name();
    }
    const auto& fields = r.dynamic_metadata().fields();
    auto permits = fields.find("sluice_permits");
    if (permits == fields.end() ||
        permits->second.list_value().values_size() != 1) {
      return "(none)";
    }
    return permits->second.list_value()
        .values(0)
        .struct_value()
        .fields()
        .at("dependency")
        .string_value();
  }

  static std::vector<std::pair<std::string, std::string>> Headers(
      const RateLimitResponse& r) {
    return rls_test::Headers(r);
  }

  testing::FakeClock clock_;
  std::unique_ptr<rls_test::InProcessServer> server_;
};

TEST_F(EnvoyExampleTest, EveryDescriptorOfTheBootstrapLandsOnItsPolicy) {
  const struct {
    Entries entries;
    std::string policy;
  } cases[] = {
      {{{"destination_cluster", "inventory"}}, "inventory"},
      {{{"destination_cluster", "search"}}, "search"},
      {{{"destination_cluster", "search"}, {"tenant", "acme"}},
       "search-per-tenant"},
      {{{"destination_cluster", "search"}, {"tenant", "vip"}}, "search-vip"},
      {{{"api", "reports"}, {"tenant", "acme"}}, "reports-per-tenant"},
      {{{"api", "reports"}}, "reports-anonymous"},
      {{{"generic_key", "default"}}, "edge-default"},
  };
  for (const auto& c : cases) {
    const RateLimitResponse r = Ask(c.entries);
    EXPECT_EQ(r.overall_code(), RateLimitResponse::OK) << c.policy;
    EXPECT_EQ(AnsweredBy(r), c.policy);
  }
}

TEST_F(EnvoyExampleTest,
       ReportedFailuresOpenTheBreakerAndEnvoyGetsTheFallback) {
  const Entries inventory = {{"destination_cluster", "inventory"}};
  // What the Lua filter does for five 5xx answers in a row.
  for (int i = 0; i < 5; ++i) {
    const RateLimitResponse r = Ask(inventory);
    ASSERT_EQ(r.overall_code(), RateLimitResponse::OK) << i;
    const auto& permit = r.dynamic_metadata()
                             .fields()
                             .at("sluice_permits")
                             .list_value()
                             .values(0)
                             .struct_value()
                             .fields();
    v1::ReportResultRequest report;
    report.set_dependency(permit.at("dependency").string_value());
    report.set_key(permit.at("key").string_value());
    report.set_permit_id(permit.at("permit_id").string_value());
    report.set_outcome(v1::FAILURE);
    v1::ReportResultResponse reported;
    grpc::ClientContext context;
    ASSERT_TRUE(server_->decisions()->ReportResult(&context, report, &reported).ok());
  }
  const RateLimitResponse open = Ask(inventory);
  EXPECT_EQ(open.overall_code(), RateLimitResponse::OVER_LIMIT);
  EXPECT_EQ(open.raw_body(), R"({"degraded":true,"in_stock":null})");
  const auto headers = Headers(open);
  EXPECT_THAT(headers, Contains(Pair("content-type", "application/json")));
  EXPECT_THAT(headers, Contains(Pair("x-sluice-degraded", "CIRCUIT_OPEN")));
  EXPECT_THAT(headers, Contains(Key("Retry-After")));
  EXPECT_THAT(headers, Contains(Key("RateLimit-Remaining")));
}

}  // namespace
}  // namespace sluice
