// SPDX-License-Identifier: Apache-2.0
// The example gateway's /metrics: its decision-time histogram, and the
// whole page as promtool (Debian's prometheus package) reads it.
#include "gateway_metrics.h"

#include <string>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/promtool.h"

namespace sluice::examples {
namespace {

using ::sluice::testing::Promtool;
using ::testing::HasSubstr;

TEST(GatewayMetricsTest, DecisionTimesFillACumulativeHistogram) {
  GatewayMetrics metrics({"catalog", "search"});
  GatewayMetrics::RouteCounters& catalog = metrics.route(0);
  for (int i = 0; i < 98; ++i) catalog.ObserveDecision(absl::Microseconds(2));
  catalog.ObserveDecision(absl::Microseconds(300));  // an RPC
  catalog.ObserveDecision(absl::Milliseconds(40));   // past the last bound
  // A clock that stepped back counts as no time, in the first bucket.
  metrics.route(1).ObserveDecision(-absl::Milliseconds(1));

  const std::string page = metrics.Render(client::ClientStats{});
  EXPECT_THAT(page, HasSubstr("# TYPE sluice_gateway_decision_seconds "
                              "histogram\n"));
  EXPECT_THAT(page, HasSubstr("sluice_gateway_decision_seconds_bucket{"
                              "dependency=\"catalog\",le=\"1e-05\"} 98\n"));
  EXPECT_THAT(page, HasSubstr("sluice_gateway_decision_seconds_bucket{"
                              "dependency=\"catalog\",le=\"0.00025\"} 98\n"));
  EXPECT_THAT(page, HasSubstr("sluice_gateway_decision_seconds_bucket{"
                              "dependency=\"catalog\",le=\"0.0005\"} 99\n"));
  EXPECT_THAT(page, HasSubstr("sluice_gateway_decision_seconds_bucket{"
                              "dependency=\"catalog\",le=\"0.025\"} 99\n"));
  EXPECT_THAT(page, HasSubstr("sluice_gateway_decision_seconds_bucket{"
                              "dependency=\"catalog\",le=\"+Inf\"} 100\n"));
  EXPECT_THAT(page, HasSubstr("sluice_gateway_decision_seconds_count{"
                              "dependency=\"catalog\"} 100\n"));
  EXPECT_THAT(page, HasSubstr("sluice_gateway_decision_seconds_sum{"
                              "dependency=\"catalog\"} 0.040496\n"));
  EXPECT_THAT(page, HasSubstr("sluice_gateway_decision_seconds_bucket{"
                              "dependency=\"search\",le=\"1e-05\"} 1\n"));
  EXPECT_THAT(page, HasSubstr("sluice_gateway_decision_seconds_sum{"
                              "dependency=\"search\"} 0\n"));
}

TEST(GatewayMetricsTest, ThePagePassesPromtool) {
  GatewayMetrics metrics({"catalog"});
  metrics.CountRequest();
  metrics.CountResponse(200, GatewayMetrics::Kind::kBackend);
  metrics.route(0).ObserveDecision(absl::Microseconds(3));
  client::ClientStats sdk;
  sdk.acquires = 1;
  EXPECT_EQ(Promtool(metrics.Render(sdk)), "");
}

}  // namespace
}  // namespace sluice::examples
