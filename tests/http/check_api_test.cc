// SPDX-License-Identifier: Apache-2.0
// The forward-auth endpoint /v1/check of a whole app::Server on a fake
// clock, over loopback: the answer's status and headers for allow, refuse,
// degrade and unmatched; the policy and key from the query string, from
// headers, and from http_routes matched against each gateway's forwarded
// headers; any method, Envoy's appended path; a body read and dropped or
// not read at all; and the 400 of a malformed check.

#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/app/server.h"
#include "tests/http/raw_connection.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/temp_dir.h"

namespace sluice::http {
namespace {

using testing::RawConnection;
using testing::RawResponse;

constexpr char kPolicies[] = R"(policies:
  - name: catalog
    per_key: true
    rate_limit: { rate: 1, per: 1s, burst: 2 }
  - name: inventory
    breaker: { consecutive_failures: 1, open_duration: 30s }
    call_timeout: 1s
    fallback:
      strategy: STATIC
      payload: '{"items":[]}'
      content_type: application/json
      http_status: 203
  - name: payments
    breaker: { consecutive_failures: 1, open_duration: 30s }
    call_timeout: 1s
  - name: shop-api
    per_key: true
    rate_limit: { rate: 100, per: 1s }
    http_routes:
      - { host: shop.example.com, path_prefix: /api/, key_header: x-user }
)";

class CheckApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    {
      std::ofstream out(dir_.File("policies.yaml"));
      out << kPolicies;
    }
    app::ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.admin_listen = "127.0.0.1:0";
    options.metrics_listen = "127.0.0.1:0";
    options.http_listen = "127.0.0.1:0";
    options.policies_path = dir_.File("policies.yaml");
    app::Server::Dependencies deps;
    deps.clock = &clock_;
    server_ = std::make_unique<app::Server>(std::move(options), deps);
    ASSERT_TRUE(server_->BuildAndStart().ok());
    ASSERT_GT(server_->http_port(), 0);
  }

  // One request on a new connection: `method target` with `headers` (each
  // ending in "\r\n") and `body` (with its Content-Length when not empty).
  RawResponse Ask(const std::string& method, const std::string& target,
                  const std::string& headers = "",
                  const std::string& body = "") {
    RawConnection c(server_->http_port());
    EXPECT_TRUE(c.Send(absl::StrCat(
        method, " ", target, " HTTP/1.1\r\nHost: sluice\r\n", headers,
        body.empty() ? "" : absl::StrCat("Content-Length: ", body.size(),
                                         "\r\n"),
        "\r\n", body)));
    return c.Read();
  }
  RawResponse Get(const std::string& target, const std::string& headers = "") {
    return Ask("GET", target, headers);
  }

  // Opens `dependency`'s breaker (one failure trips it) through the API.
  void OpenBreaker(const std::string& dependency) {
    const RawResponse allowed =
        Get(absl::StrCat("/v1/check?dependency=", dependency));
    ASSERT_EQ(allowed.status, 200);
    const std::string permit = allowed.header("x-sluice-permit");
    ASSERT_EQ(permit.size(), 32u);
    RawConnection c(server_->http_port());
    ASSERT_TRUE(c.SendPost(
        "/v1/report",
        absl::StrCat(R"({"dependency":")", dependency, R"(","permitId":")",
                     permit, R"(","outcome":"FAILURE","latency":"0.01s"})")));
    ASSERT_EQ(c.Read().status, 200);
  }

  testing::TempDir dir_{"check_api_test"};
  testing::FakeClock clock_;
  std::unique_ptr<app::Server> server_;
};

TEST_F(CheckApiTest, AllowsThenRefusesWith429AndRetryAfter) {
  for (int i = 0; i < 2; ++i) {  // the burst
    const RawResponse r = Get("/v1/check?dependency=catalog&key=tenant%2C42");
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.header("x-sluice-dependency"), "catalog");
    EXPECT_EQ(r.header("x-sluice-key"), "tenant%2C42");  // ',' encoded
    EXPECT_EQ(r.header("x-sluice-unmatched"), "");
  }
  const RawResponse refused =
      Get("/v1/check?dependency=catalog&key=tenant%2C42");
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(refused.header("retry-after"), "1");
  EXPECT_EQ(refused.header("x-sluice-reason"), "RATE_LIMITED");
  EXPECT_EQ(refused.header("content-type"), "application/json");
  EXPECT_NE(refused.body.find("RATE_LIMITED"), std::string::npos);
  EXPECT_EQ(refused.header("x-sluice-permit"), "");
  // Another key has a bucket of its own; a second later the first refills.
  EXPECT_EQ(Get("/v1/check?dependency=catalog&key=other").status, 200);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(Get("/v1/check?dependency=catalog&key=tenant%2C42").status, 200);
}

TEST_F(CheckApiTest, NamesFromHeadersAnyMethodAndEnvoysPath) {
  // Envoy's HTTP mode: the original method and path after the prefix, the
  // policy from headers_to_add, and a query string that is not ours.
  const RawResponse r =
      Ask("DELETE", "/v1/check/api/items/3?dependency=payments",
          "x-sluice-dependency: catalog\r\nx-sluice-key: k\r\n");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("x-sluice-dependency"), "catalog");
  EXPECT_EQ(r.header("x-sluice-key"), "k");
  // The key from the header key_header names.
  const RawResponse by_header =
      Get("/v1/check?dependency=catalog&key_header=X-Tenant",
          "X-Tenant: t9\r\n");
  EXPECT_EQ(by_header.status, 200) << by_header.body;
  EXPECT_EQ(by_header.header("x-sluice-key"), "t9");
  EXPECT_EQ(Ask("OPTIONS", "/v1/check?dependency=payments").status, 200);
  // The address's names beat the headers (a gateway such as Traefik passes
  // the client's own): neither the policy nor the key moves.
  const RawResponse named = Get("/v1/check?dependency=catalog",
                                "x-sluice-dependency: payments\r\n"
                                "x-sluice-key: chosen-by-client\r\n");
  EXPECT_EQ(named.status, 200) << named.body;
  EXPECT_EQ(named.header("x-sluice-dependency"), "catalog");
  EXPECT_EQ(named.header("x-sluice-key"), "");
}

TEST_F(CheckApiTest, BreakerOpenIs503AndAFallbackIs503WithItsStatus) {
  ASSERT_NO_FATAL_FAILURE(OpenBreaker("payments"));
  const RawResponse refused = Get("/v1/check?dependency=payments");
  EXPECT_EQ(refused.status, 503) << refused.body;
  EXPECT_EQ(refused.header("x-sluice-reason"), "CIRCUIT_OPEN");
  EXPECT_EQ(refused.header("retry-after"), "30");

  ASSERT_NO_FATAL_FAILURE(OpenBreaker("inventory"));
  const RawResponse degraded = Get("/v1/check?dependency=inventory");
  EXPECT_EQ(degraded.status, 503);
  EXPECT_EQ(degraded.body, R"({"items":[]})");
  EXPECT_EQ(degraded.header("content-type"), "application/json");
  EXPECT_EQ(degraded.header("x-sluice-degraded"), "CIRCUIT_OPEN");
  EXPECT_EQ(degraded.header("x-sluice-fallback-status"), "203");
}

TEST_F(CheckApiTest, RoutesMatchEachGatewaysForwardedRequest) {
  const std::string traefik =
      "X-Forwarded-Host: Shop.Example.com:443\r\n"
      "X-Forwarded-Uri: /api/cart?x=1\r\nX-Forwarded-Method: POST\r\n"
      "X-User: u1\r\n";
  const RawResponse t = Get("/v1/check", traefik);
  EXPECT_EQ(t.status, 200) << t.body;
  EXPECT_EQ(t.header("x-sluice-dependency"), "shop-api");
  EXPECT_EQ(t.header("x-sluice-key"), "u1");

  const RawResponse ingress =
      Get("/v1/check",
          "X-Original-URL: https://shop.example.com/api/x\r\n"
          "X-Original-Method: GET\r\n");
  EXPECT_EQ(ingress.status, 200) << ingress.body;
  EXPECT_EQ(ingress.header("x-sluice-dependency"), "shop-api");

  // Envoy: the check's own Host and the path after /v1/check.
  const RawResponse envoy = Ask(
      "GET", "/v1/check/api/y", "");  // Host: sluice, not shop.example.com
  EXPECT_EQ(envoy.status, 200);
  EXPECT_EQ(envoy.header("x-sluice-unmatched"), "1");
  EXPECT_EQ(envoy.header("x-sluice-dependency"), "");

  RawConnection c(server_->http_port());
  ASSERT_TRUE(c.Send(
      "GET /v1/check/api/y HTTP/1.1\r\nHost: shop.example.com:8080\r\n\r\n"));
  const RawResponse routed = c.Read();
  EXPECT_EQ(routed.status, 200);
  EXPECT_EQ(routed.header("x-sluice-dependency"), "shop-api");
}

TEST_F(CheckApiTest, ASmallBodyIsDroppedAndALargeOneIsNotRead) {
  // Up to 64 KiB: read and dropped, the connection kept.
  RawConnection c(server_->http_port());
  const std::string body(1000, 'x');
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(c.Send(absl::StrCat(
        "POST /v1/check?dependency=payments HTTP/1.1\r\nHost: s\r\n"
        "Content-Type: text/plain\r\nContent-Length: ",
        body.size(), "\r\n\r\n", body)));
    const RawResponse r = c.Read();
    EXPECT_EQ(r.status, 200) << r.body;
    EXPECT_NE(r.header("connection"), "close");
  }
  // Chunked, or above 64 KiB: answered from the head, then closed.
  RawConnection chunked(server_->http_port());
  ASSERT_TRUE(chunked.Send(
      "POST /v1/check?dependency=payments HTTP/1.1\r\nHost: s\r\n"
      "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"));
  const RawResponse r = chunked.Read();
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.header("connection"), "close");
  RawConnection large(server_->http_port());
  ASSERT_TRUE(large.Send(
      "PUT /v1/check?dependency=payments HTTP/1.1\r\nHost: s\r\n"
      "Content-Length: 10000000\r\n\r\nsome"));
  const RawResponse l = large.Read();
  EXPECT_EQ(l.status, 200);
  EXPECT_EQ(l.header("connection"), "close");
}

TEST_F(CheckApiTest, AMalformedCheckIs400) {
  for (const char* target :
       {"/v1/check?dependency=a&dependency=b", "/v1/check?key=%g0",
        "/v1/check?dependency=catalog&key=%ff", "/v1/check?tenant=x",
        "/v1/check?dependency=no%20spaces"}) {
    const RawResponse r = Get(target);
    EXPECT_EQ(r.status, 400) << target;
    EXPECT_EQ(r.header("content-type"), "application/json") << target;
    EXPECT_NE(r.body.find("INVALID_ARGUMENT"), std::string::npos) << r.body;
  }
  EXPECT_EQ(Get("/v1/check?dependency=catalog", "x-sluice-key: \xff\r\n")
                .status,
            400);
  EXPECT_EQ(Get("/v1/check", "X-Forwarded-Uri: relative\r\n").status, 400);
  // Not the endpoint: /v1/checks is an unknown path.
  EXPECT_EQ(Get("/v1/checks").status, 404);
}

}  // namespace
}  // namespace sluice::http
