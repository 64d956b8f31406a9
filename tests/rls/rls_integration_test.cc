// SPDX-License-Identifier: Apache-2.0
// The real sluiced binary as Envoy's rate-limit service: a client built from
// our rls.proto calls ShouldRateLimit over TCP from several threads for a
// few seconds of real time, and the limits hold within 5%, per descriptor
// and per partition. The counters the admin API and /metrics show are the
// same ones.

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/v1/admin.grpc.pb.h"
#include "tests/rls/rls_test_util.h"
#include "tests/testing/sluiced_process.h"

namespace sluice {
namespace {

using envoy::service::ratelimit::v3::RateLimitRequest;
using envoy::service::ratelimit::v3::RateLimitResponse;
using envoy::service::ratelimit::v3::RateLimitService;
using testing::SluicedProcess;

constexpr char kPolicies[] = R"yaml(
policies:
  - name: payments
    rate_limit: {rate: 200, per: 1s, burst: 20}
    envoy_descriptors:
      - domain: edge
        entries: [{key: destination_cluster, value: payments}]
  - name: search-per-tenant
    per_key: true
    rate_limit: {algorithm: SLIDING_WINDOW, rate: 100, per: 1s}
    envoy_descriptors:
      - domain: edge
        entries:
          - {key: destination_cluster, value: search}
          - {key: tenant}
)yaml";

RateLimitRequest Request(const rls_test::Entries& entries) {
  return rls_test::Request("edge", {entries});
}

// Sends each of `requests` in a closed loop from its own 2 threads until
// `duration` has passed; the OK answers per request, and the time it took.
struct Load {
  std::vector<int64_t> ok;
  int64_t errors = 0;
  absl::Duration elapsed;
};

Load Drive(const std::shared_ptr<grpc::Channel>& channel,
           const std::vector<RateLimitRequest>& requests,
           absl::Duration duration) {
  auto stub = RateLimitService::NewStub(channel);
  std::vector<std::atomic<int64_t>> ok(requests.size());
  std::atomic<int64_t> errors{0};
  const absl::Time start = absl::Now();
  const absl::Time end = start + duration;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < requests.size(); ++i) {
    for (int t = 0; t < 2; ++t) {
      threads.emplace_back([&, i] {
        while (absl::Now() < end) {
          RateLimitResponse response;
          grpc::ClientContext context;
          context.set_deadline(absl::ToChronoTime(absl::Now() +
                                                  absl::Seconds(5)));
          const grpc::Status s =
              stub->ShouldRateLimit(&context, requests[i], &response);
          if (!s.ok()) {
            errors.fetch_add(1);
          } else if (response.overall_code() == RateLimitResponse::OK) {
            ok[i].fetch_add(1);
          }
        }
      });
    }
  }
  for (std::thread& t : threads) t.join();
  Load load;
  load.elapsed = absl::Now() - start;
  load.errors = errors.load();
  for (auto& n : ok) load.ok.push_back(n.load());
  return load;
}

TEST(RlsIntegrationTest, LimitsHoldWithinFivePercentPerDescriptorAndTenant) {
  SluicedProcess sluiced;
  std::string error;
  ASSERT_TRUE(sluiced.Start(kPolicies, {}, "", &error)) << error;
  const std::vector<RateLimitRequest> requests = {
      Request({{"destination_cluster", "payments"}}),
      Request({{"destination_cluster", "search"}, {"tenant", "acme"}}),
      Request({{"destination_cluster", "search"}, {"tenant", "globex"}}),
      // Unmatched: never limited.
      Request({{"destination_cluster", "elsewhere"}}),
  };
  const Load load = Drive(sluiced.data_channel(), requests, absl::Seconds(3));
  const double seconds = absl::ToDoubleSeconds(load.elapsed);
  EXPECT_EQ(load.errors, 0);
  // Token bucket: the burst, then 200/s.
  const double payments = 20 + 200 * seconds;
  EXPECT_NEAR(load.ok[0], payments, payments * 0.05) << seconds << " s";
  // Sliding window: 100 in any second, for each tenant on its own.
  const double tenant = 100 * seconds;
  EXPECT_NEAR(load.ok[1], tenant, tenant * 0.05);
  EXPECT_NEAR(load.ok[2], tenant, tenant * 0.05);
  EXPECT_GT(load.ok[3], load.ok[0]);

  // The same decisions show in the admin API and /metrics.
  auto admin = v1::AdminService::NewStub(sluiced.admin_channel());
  v1::GetStateRequest request;
  request.set_dependency("payments");
  v1::DependencyState state;
  grpc::ClientContext context;
  ASSERT_TRUE(admin->GetState(&context, request, &state).ok());
  EXPECT_EQ(static_cast<int64_t>(state.decisions().allowed()), load.ok[0]);
  EXPECT_EQ(sluiced.Metric("sluice_rls_unmatched_descriptors_total"),
            static_cast<double>(load.ok[3]));
  EXPECT_EQ(sluiced.Terminate(), 0);
}

}  // namespace
}  // namespace sluice
