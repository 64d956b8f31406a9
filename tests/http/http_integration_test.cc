// SPDX-License-Identifier: Apache-2.0
// The real sluiced binary with --http-listen 127.0.0.1:0, found through
// the http= line of its --port-file and driven over HTTP by an httplib
// client, next to gRPC on the same process. Each test runs its own sluiced
// and stops it with SIGTERM expecting exit code 0.

#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/v1/decision.grpc.pb.h"
#include "tests/testing/http_get.h"
#include "tests/testing/port_file.h"
#include "tests/testing/sluiced_process.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;

constexpr char kPolicies[] = R"(policies:
  - name: search
    call_timeout: 1s
    concurrency: { max_in_flight: 1 }
)";

Json PostJson(httplib::Client& client, const std::string& path,
              const Json& body, int* status = nullptr) {
  const httplib::Result r =
      client.Post(path.c_str(), body.dump(), "application/json");
  if (!r) {
    ADD_FAILURE() << path << ": " << httplib::to_string(r.error());
    return Json();
  }
  if (status != nullptr) *status = r->status;
  return Json::parse(r->body, nullptr, /*allow_exceptions=*/false);
}

TEST(SluicedHttpTest, ServesTheApiNextToGrpc) {
  testing::SluicedProcess sluiced;
  std::string error;
  ASSERT_TRUE(
      sluiced.Start(kPolicies, {"--http-listen=127.0.0.1:0"}, "", &error))
      << error;
  const std::string http = sluiced.listener("http");
  const int port = testing::PortOf(http);
  ASSERT_GT(port, 0) << "no http= line in the port file";
  EXPECT_TRUE(absl::StartsWith(http, "127.0.0.1:")) << http;
  EXPECT_THAT(sluiced.Log(), HasSubstr("serving HTTP API on " + http));

  httplib::Client client("127.0.0.1", port);
  client.set_keep_alive(true);
  const httplib::Result health = client.Get("/v1/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, R"({"status":"SERVING"})");

  // HTTP takes the one slot; gRPC sees it taken: one engine.
  const Json held = PostJson(client, "/v1/acquire", {{"dependency", "search"}});
  ASSERT_EQ(held["verdict"], "ALLOW") << held;
  EXPECT_EQ(sluiced.Acquire("search").reason(), v1::CONCURRENCY_LIMITED);
  int status = 0;
  const Json refused =
      PostJson(client, "/v1/acquire", {{"dependency", "search"}}, &status);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(refused["reason"], "CONCURRENCY_LIMITED");

  // A batch whose second report is bad applies nothing...
  const Json good = {{"dependency", "search"},
                     {"permitId", held["permitId"]},
                     {"outcome", "SUCCESS"},
                     {"latency", "0.010s"}};
  const Json bad = PostJson(
      client, "/v1/reports",
      {{"reports", {good, {{"dependency", "search"}, {"outcome", "LOST"}}}}},
      &status);
  EXPECT_EQ(status, 400);
  EXPECT_THAT(bad.value("message", ""), HasSubstr("reports[1].outcome"));
  EXPECT_EQ(sluiced.Acquire("search").reason(), v1::CONCURRENCY_LIMITED);

  // ...and a decide call reporting it frees the slot for the next call.
  const Json decided = PostJson(
      client, "/v1/decide",
      {{"calls",
        {{{"requestId", "1"}, {"report", good}},
         {{"requestId", "2"}, {"acquire", {{"dependency", "search"}}}},
         {{"requestId", "3"}, {"acquire", {{"dependency", "search"}}}}}}},
      &status);
  ASSERT_EQ(status, 200) << decided;
  ASSERT_EQ(decided["results"].size(), 3u);
  EXPECT_EQ(decided["results"][0]["report"]["breakerState"], "CLOSED");
  EXPECT_EQ(decided["results"][1]["acquire"]["verdict"], "ALLOW");
  EXPECT_EQ(decided["results"][2]["acquire"]["reason"], "CONCURRENCY_LIMITED");
  const Json reported =
      PostJson(client, "/v1/report",
               {{"dependency", "search"},
                {"permitId", decided["results"][1]["acquire"]["permitId"]},
                {"outcome", "SUCCESS"}},
               &status);
  EXPECT_EQ(status, 200) << reported;

  const std::string metrics =
      testing::HttpGet(sluiced.metrics_port(), "/metrics");
  EXPECT_THAT(metrics, HasSubstr("sluice_http_requests_total{endpoint=\"/v1/"
                                 "acquire\",code=\"200\"} 2"));
  EXPECT_THAT(metrics, HasSubstr("sluice_http_requests_total{endpoint=\"/v1/"
                                 "reports\",code=\"400\"} 1"));
  EXPECT_THAT(metrics, HasSubstr("sluice_outcomes_total{dependency=\"search\","
                                 "outcome=\"SUCCESS\"} 2"));

  EXPECT_EQ(sluiced.Terminate(), 0);
  EXPECT_FALSE(client.Get("/v1/health"));
}

TEST(SluicedHttpTest, FromTheEnvironment) {
  testing::SluicedProcess sluiced;
  sluiced.set_extra_env({"SLUICE_HTTP_LISTEN=127.0.0.1:0"});
  std::string error;
  ASSERT_TRUE(sluiced.Start(kPolicies, {}, "", &error)) << error;
  const int port = testing::PortOf(sluiced.listener("http"));
  ASSERT_GT(port, 0);
  httplib::Client client("127.0.0.1", port);
  const httplib::Result r = client.Post(
      "/v1/acquire", R"({"dependency": "unknown"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_THAT(r->body, HasSubstr("\"reason\":\"UNKNOWN_DEPENDENCY\""));
  EXPECT_EQ(sluiced.Terminate(), 0);
}

TEST(SluicedHttpTest, OffByDefault) {
  testing::SluicedProcess sluiced;
  std::string error;
  ASSERT_TRUE(sluiced.Start(kPolicies, {}, "", &error)) << error;
  EXPECT_EQ(sluiced.listener("http"), "");
  EXPECT_THAT(sluiced.Log(), Not(HasSubstr("serving HTTP API")));
  EXPECT_EQ(sluiced.Terminate(), 0);
}

TEST(SluicedHttpCommandLineTest, UnixSocketIsRefused) {
  const testing::CommandResult result = testing::RunCommand(
      testing::SluicedBinary() + " --http-listen unix:/tmp/sluice-http.sock");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_THAT(result.output,
              HasSubstr("--http-listen: the HTTP API is served over TCP only "
                        "(HOST:PORT), got \"unix:/tmp/sluice-http.sock\""));
  const testing::CommandResult help =
      testing::RunCommand(testing::SluicedBinary() + " --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.output, HasSubstr("TCP only"));
  EXPECT_THAT(help.output, HasSubstr("SLUICE_HTTP_LISTEN"));
}

}  // namespace
}  // namespace sluice
