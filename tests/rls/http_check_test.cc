// SPDX-License-Identifier: Apache-2.0
// The HTTP check core that Envoy's external authorization and /v1/check
// share: how a request names its policy and key, and the answer it gets.
// The engine runs on a fake clock and the policies come from YAML, so every
// count is exact.

#include "server/rpc/http_check.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "server/policy/policy_file.h"
#include "server/policy/policy_store.h"
#include "server/rpc/decision_convert.h"
#include "server/rpc/decision_service.h"
#include "tests/testing/fake_clock.h"
#include "wire/quote.h"

namespace sluice::rpc {
namespace {

using Kind = HttpCheckAnswer::Kind;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

constexpr char kPolicies[] = R"yaml(
policies:
  - name: payments
    rate_limit: {rate: 1, per: 1s, burst: 1}
    http_routes:
      - {host: api.example.com, path_prefix: /api/payments/}
  - name: payments-v2
    rate_limit: {rate: 100, per: 1s}
    http_routes:
      - {host: api.example.com, path_prefix: /api/payments/v2/}
  - name: any-host-api
    rate_limit: {rate: 100, per: 1s}
    http_routes:
      - {path_prefix: /api/}
  - name: wildcard-api
    rate_limit: {rate: 100, per: 1s}
    http_routes:
      - {host: "*.example.com", path_prefix: /api/}
  - name: canary-writes
    rate_limit: {rate: 100, per: 1s}
    http_routes:
      - host: "*.example.com"
        path_prefix: /api/
        methods: [POST, PUT]
        headers: {x-canary: "1"}
  - name: per-user
    per_key: true
    rate_limit: {rate: 1, per: 1s, burst: 1}
    http_routes:
      - {path_prefix: /users/, key_header: x-user}
  - name: orders
    concurrency: {max_in_flight: 1}
    breaker: {consecutive_failures: 1, open_duration: 10s}
    call_timeout: 1s
  - name: catalog
    rate_limit: {rate: 1, per: 1s, burst: 1}
    fallback: {strategy: STATIC, payload: '{"items":[]}', content_type: application/json}
  - name: teapot
    rate_limit: {rate: 1, per: 1s, burst: 1}
    fallback: {strategy: STATIC, payload: 'later', http_status: 418}
  - name: keyed
    per_key: true
    concurrency: {max_in_flight: 5}
)yaml";

class HttpCheckTest : public ::testing::Test {
 protected:
  HttpCheckTest()
      : engine_(&clock_, core::Engine::Options()),
        store_(&engine_),
        decisions_(&engine_),
        check_(&engine_, &decisions_) {
    absl::StatusOr<std::vector<v1::Policy>> policies =
        policy::ParsePolicies(kPolicies, "test");
    EXPECT_TRUE(policies.ok()) << policies.status();
    absl::Status installed = store_.ReplaceAll(*policies).status();
    EXPECT_TRUE(installed.ok()) << installed;
  }

  // A request with `headers` (lowercase names).
  struct Request {
    std::string method = "GET";
    std::string host = "api.example.com";
    std::string path = "/";
    std::map<std::string, std::string> headers;
    std::string dependency, key, key_header;
    bool naming_headers = false;
  };

  static Request At(std::string method, std::string host, std::string path,
                    std::map<std::string, std::string> headers = {}) {
    Request r;
    r.method = std::move(method);
    r.host = std::move(host);
    r.path = std::move(path);
    r.headers = std::move(headers);
    return r;
  }

  absl::StatusOr<HttpCheckAnswer> Check(const Request& r) {
    HttpCheckRequest request;
    request.method = r.method;
    request.host = r.host;
    request.path = r.path;
    request.header =
        [&r](absl::string_view name) -> std::optional<absl::string_view> {
      auto it = r.headers.find(std::string(name));
      if (it == r.headers.end()) return std::nullopt;
      return absl::string_view(it->second);
    };
    request.dependency = r.dependency;
    request.key = r.key;
    request.key_header = r.key_header;
    request.naming_headers = r.naming_headers;
    return check_.Check(request);
  }

  // The policy a request to `host` `path` lands on, "" when unmatched.
  std::string Route(const std::string& method, const std::string& host,
                    const std::string& path,
                    std::map<std::string, std::string> headers = {}) {
    Request r;
    r.method = method;
    r.host = host;
    r.path = path;
    r.headers = std::move(headers);
    absl::StatusOr<HttpCheckAnswer> a = Check(r);
    EXPECT_TRUE(a.ok()) << a.status();
    return a.ok() ? a->dependency : "<error>";
  }

  testing::FakeClock clock_;
  core::Engine engine_;
  policy::PolicyStore store_;
  DecisionServiceImpl decisions_;
  HttpCheck check_;
};

TEST_F(HttpCheckTest, OperatorNamesComeBeforeNamingHeadersAndRoutes) {
  Request r;
  r.path = "/api/payments/1";  // a route would pick "payments"
  r.headers[std::string(kDependencyHeader)] = "keyed";
  // Without naming_headers (Envoy's external authorization: the client's
  // own headers), x-sluice-dependency names nothing and the route decides.
  EXPECT_EQ(Check(r)->dependency, "payments");
  // Where a gateway builds the check request, the header beats the route.
  r.naming_headers = true;
  EXPECT_EQ(Check(r)->dependency, "keyed");
  // The operator's name (context extension, query parameter) beats both.
  r.dependency = "orders";
  EXPECT_EQ(Check(r)->dependency, "orders");
}

TEST_F(HttpCheckTest, TheKeyComesFromWhereThePolicysNameCameFrom) {
  Request r;
  r.dependency = "keyed";
  r.naming_headers = true;
  // A client's x-sluice-key never keys a policy the operator named.
  r.headers[std::string(kKeyHeader)] = "from-client";
  EXPECT_EQ(Check(r)->key, "");
  r.headers["x-tenant"] = "from-key-header";
  r.key_header = "x-tenant";
  EXPECT_EQ(Check(r)->key, "from-key-header");
  r.key = "from-operator";
  EXPECT_EQ(Check(r)->key, "from-operator");

  // A policy named by x-sluice-dependency takes x-sluice-key, never the
  // operator's key fields (they come with an operator's name only).
  Request by_header;
  by_header.naming_headers = true;
  by_header.headers[std::string(kDependencyHeader)] = "keyed";
  by_header.headers[std::string(kKeyHeader)] = "from-gateway";
  EXPECT_EQ(Check(by_header)->key, "from-gateway");
}

TEST_F(HttpCheckTest, MostSpecificRouteWins) {
  // A longer path_prefix beats a shorter one.
  EXPECT_EQ(Route("GET", "api.example.com", "/api/payments/v2/x"),
            "payments-v2");
  EXPECT_EQ(Route("GET", "api.example.com", "/api/payments/x"), "payments");
  // Same prefix /api/: exact host (none here) over wildcard over any.
  EXPECT_EQ(Route("GET", "api.example.com", "/api/other"), "wildcard-api");
  EXPECT_EQ(Route("GET", "shop.example.org", "/api/other"), "any-host-api");
  // The wildcard needs a label before the domain.
  EXPECT_EQ(Route("GET", "example.com", "/api/other"), "any-host-api");
  // More conditions beat fewer at the same prefix and host kind.
  EXPECT_EQ(Route("POST", "a.example.com", "/api/x", {{"x-canary", "1"}}),
            "canary-writes");
  EXPECT_EQ(Route("GET", "a.example.com", "/api/x", {{"x-canary", "1"}}),
            "wildcard-api");
  EXPECT_EQ(Route("POST", "a.example.com", "/api/x", {{"x-canary", "2"}}),
            "wildcard-api");
}

TEST_F(HttpCheckTest, HostIsMatchedWithoutPortAndCase) {
  EXPECT_EQ(Route("GET", "API.Example.COM:8443", "/api/payments/1"),
            "payments");
  EXPECT_EQ(NormalizeHost("[::1]:8080"), "[::1]");
  EXPECT_EQ(NormalizeHost("Example.com"), "example.com");
}

TEST_F(HttpCheckTest, UnmatchedRequestIsLetThroughUndecided) {
  absl::StatusOr<HttpCheckAnswer> a =
      Check(At("GET", "api.example.com", "/static/logo.png"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->kind, Kind::kUnmatched);
  EXPECT_EQ(a->http_status, 200);
  EXPECT_THAT(a->headers, ElementsAre(Pair("x-sluice-unmatched", "1")));
  EXPECT_EQ(a->dependency, "");
  EXPECT_EQ(a->permit_id, "");
}

TEST_F(HttpCheckTest, KeyHeaderGivesEachValueItsOwnLimit) {
  Request alice = At("GET", "h", "/users/1", {{"x-user", "alice"}});
  Request bob = At("GET", "h", "/users/1", {{"x-user", "bob"}});
  EXPECT_EQ(Check(alice)->kind, Kind::kAllow);
  EXPECT_EQ(Check(alice)->kind, Kind::kRefuse);
  absl::StatusOr<HttpCheckAnswer> b = Check(bob);
  EXPECT_EQ(b->kind, Kind::kAllow);
  EXPECT_EQ(b->key, "bob");
  EXPECT_THAT(b->headers, Contains(Pair("x-sluice-key", "bob")));
}

TEST_F(HttpCheckTest, AllowCarriesDependencyKeyAndPermitHeaders) {
  Request r;
  r.dependency = "keyed";
  r.key = "tenant a,b%";
  absl::StatusOr<HttpCheckAnswer> a = Check(r);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->kind, Kind::kAllow);
  EXPECT_EQ(a->http_status, 200);
  ASSERT_EQ(a->permit_id.size(), kPermitIdDigits);
  EXPECT_THAT(a->headers, ElementsAre(Pair("x-sluice-dependency", "keyed"),
                                      Pair("x-sluice-key", "tenant%20a%2Cb%25"),
                                      Pair("x-sluice-permit", a->permit_id)));
  EXPECT_EQ(a->key, "tenant a,b%");
  EXPECT_THAT(a->body, IsEmpty());
}

TEST_F(HttpCheckTest, EmptyKeyHasNoKeyHeaderAndNoPermitWithoutTracking) {
  absl::StatusOr<HttpCheckAnswer> a =
      Check(At("GET", "api.example.com", "/api/payments/1"));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->kind, Kind::kAllow);
  // A rate limit alone tracks no call, so no permit is issued.
  EXPECT_THAT(a->headers, ElementsAre(Pair("x-sluice-dependency", "payments")));
}

TEST_F(HttpCheckTest, RateRefusalIs429WithRetryAfterAndJsonBody) {
  Request r = At("GET", "api.example.com", "/api/payments/1");
  ASSERT_EQ(Check(r)->kind, Kind::kAllow);
  absl::StatusOr<HttpCheckAnswer> a = Check(r);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->kind, Kind::kRefuse);
  EXPECT_EQ(a->http_status, 429);
  EXPECT_EQ(a->reason, core::Reason::kRateLimited);
  EXPECT_THAT(a->headers, ElementsAre(Pair("content-type", "application/json"),
                                      Pair("retry-after", "1"),
                                      Pair("x-sluice-reason", "RATE_LIMITED")));
  EXPECT_EQ(a->body, R"({"error":"refused by Sluice","reason":"RATE_LIMITED",)"
                     R"("dependency":"payments","retry_after_seconds":1})");
  // A second later the bucket holds a token again.
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(Check(r)->kind, Kind::kAllow);
}

TEST_F(HttpCheckTest, OpenBreakerIs503AndReportClosesTheLoop) {
  Request r;
  r.dependency = "orders";
  absl::StatusOr<HttpCheckAnswer> first = Check(r);
  ASSERT_EQ(first->kind, Kind::kAllow);
  // The in-flight cap of 1 holds the permit until it is reported.
  EXPECT_EQ(Check(r)->http_status, 429);
  absl::StatusOr<core::PermitId> id = ParsePermitId(first->permit_id);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(engine_.Report("orders", "", *id, core::Outcome::kFailure,
                           absl::Milliseconds(5)),
            core::BreakerState::kOpen);
  absl::StatusOr<HttpCheckAnswer> a = Check(r);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->kind, Kind::kRefuse);
  EXPECT_EQ(a->http_status, 503);
  EXPECT_THAT(a->headers, Contains(Pair("x-sluice-reason", "CIRCUIT_OPEN")));
  EXPECT_THAT(a->headers, Contains(Pair("retry-after", "10")));
}

TEST_F(HttpCheckTest, UnreportedPermitEndsWithoutCountingAsTimeout) {
  Request r;
  r.dependency = "orders";
  ASSERT_EQ(Check(r)->kind, Kind::kAllow);
  // Past 2 x call_timeout the permit ends: the slot is free again and the
  // breaker (one failure opens it) has judged nothing.
  clock_.Advance(absl::Seconds(3));
  engine_.Sweep();
  EXPECT_EQ(engine_.PeekBreaker("orders"), core::BreakerState::kClosed);
  EXPECT_EQ(Check(r)->kind, Kind::kAllow);
}

TEST_F(HttpCheckTest, DegradeServesTheFallbackWithItsStatus) {
  Request r;
  r.dependency = "catalog";
  ASSERT_EQ(Check(r)->kind, Kind::kAllow);
  absl::StatusOr<HttpCheckAnswer> a = Check(r);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->kind, Kind::kDegrade);
  EXPECT_EQ(a->http_status, 200);
  EXPECT_EQ(a->body, R"({"items":[]})");
  EXPECT_THAT(a->headers,
              ElementsAre(Pair("content-type", "application/json"),
                          Pair("x-sluice-degraded", "RATE_LIMITED")));

  r.dependency = "teapot";
  ASSERT_EQ(Check(r)->kind, Kind::kAllow);
  a = Check(r);
  EXPECT_EQ(a->kind, Kind::kDegrade);
  EXPECT_EQ(a->http_status, 418);
  EXPECT_EQ(a->body, "later");
  EXPECT_THAT(a->headers,
              ElementsAre(Pair("x-sluice-degraded", "RATE_LIMITED")));
}

TEST_F(HttpCheckTest, NamesNoPolicyCouldHaveAreInvalidWithUtf8Messages) {
  Request bad_dependency;
  bad_dependency.naming_headers = true;
  bad_dependency.headers[std::string(kDependencyHeader)] = "a b\xff";
  absl::StatusOr<HttpCheckAnswer> a = Check(bad_dependency);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(wire::ToValidUtf8(a.status().message()), a.status().message());
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("policy name"));

  Request bad_key = At("GET", "h", "/users/1", {{"x-user", "caf\xe9"}});
  a = Check(bad_key);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(wire::ToValidUtf8(a.status().message()), a.status().message());
  EXPECT_THAT(std::string(a.status().message()), HasSubstr("not valid UTF-8"));

  Request long_key;
  long_key.dependency = "keyed";
  long_key.key = std::string(1025, 'k');
  EXPECT_EQ(Check(long_key).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(HttpCheckTest, IndexFollowsPolicyChanges) {
  EXPECT_EQ(Route("GET", "h", "/static/x"), "");
  absl::StatusOr<std::vector<v1::Policy>> added = policy::ParsePolicies(R"yaml(
policies:
  - name: statics
    http_routes: [{path_prefix: /static/}]
)yaml",
                                                                        "test");
  ASSERT_TRUE(added.ok()) << added.status();
  ASSERT_TRUE(store_.Put((*added)[0], 0).ok());
  EXPECT_EQ(Route("GET", "h", "/static/x"), "statics");
  ASSERT_TRUE(store_.Delete("statics", 0).ok());
  EXPECT_EQ(Route("GET", "h", "/static/x"), "");
}

TEST(HttpRouteIndexTest, TieFromAnAdoptedSetGoesToTheFirstByNameAndIsNamed) {
  core::PolicyConfig a;
  a.name = "a";
  core::HttpRouteConfig route;
  route.path_prefix = "/x";
  a.http_routes.push_back(route);
  core::PolicyConfig b = a;
  b.name = "b";
  HttpRouteIndex index({std::make_shared<const core::PolicyConfig>(a),
                        std::make_shared<const core::PolicyConfig>(b)});
  HttpCheckRequest request;
  request.path = "/x/1";
  EXPECT_EQ(index.Find(request, "h").policy->name, "a");
  ASSERT_EQ(index.conflicts().size(), 1u);
  EXPECT_THAT(index.conflicts()[0], HasSubstr(R"("a" answers them)"));
}

TEST(PercentEncodeKeyTest, EncodesWhatAHeaderCannotCarry) {
  EXPECT_EQ(PercentEncodeKey("plain-Key_1.~"), "plain-Key_1.~");
  EXPECT_EQ(PercentEncodeKey("a b,c%d"), "a%20b%2Cc%25d");
  EXPECT_EQ(PercentEncodeKey("\x01\x7f\xc3\xa9"), "%01%7F%C3%A9");
  EXPECT_EQ(PercentEncodeKey(""), "");
}

}  // namespace
}  // namespace sluice::rpc
