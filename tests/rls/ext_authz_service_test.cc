// SPDX-License-Identifier: Apache-2.0
// Envoy's external authorization (gRPC) against app::Server in process: a
// client built from our external_auth.proto calls Check over a real TCP
// gRPC channel, while the server decides on a fake clock. Policies come from
// a YAML policies file, as an operator writes them.

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "envoy/service/auth/v3/external_auth.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "server/app/server.h"
#include "sluice/v1/decision.grpc.pb.h"
#include "tests/rls/in_process_server.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/http_get.h"
#include "tests/testing/temp_dir.h"
#include "wire/quote.h"

namespace sluice {
namespace {

using envoy::service::auth::v3::Authorization;
using envoy::service::auth::v3::CheckRequest;
using envoy::service::auth::v3::CheckResponse;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Key;
using ::testing::Not;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

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
  - name: per-user
    per_key: true
    rate_limit: {rate: 1, per: 1s, burst: 1}
    http_routes:
      - {path_prefix: /users/, key_header: x-user}
  - name: orders
    call_timeout: 1s
    concurrency: {max_in_flight: 2}
    breaker: {consecutive_failures: 1, open_duration: 10s}
  - name: catalog
    rate_limit: {rate: 1, per: 1s, burst: 1}
    fallback: {strategy: STATIC, payload: '{"items":[]}', content_type: application/json}
    http_routes:
      - {path_prefix: /catalog/}
  - name: teapot
    rate_limit: {rate: 1, per: 1s, burst: 1}
    fallback: {strategy: STATIC, payload: 'later', http_status: 418}
)yaml";

class ExtAuthzServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = dir_.File("policies.yaml");
    std::ofstream(path) << kPolicies;
    server_ =
        std::make_unique<rls_test::InProcessServer>(path, &clock_,
                                                    /*metrics_listener=*/true);
    ASSERT_TRUE(server_->status().ok()) << server_->status();
    authz_ = Authorization::NewStub(server_->channel());
  }

  static CheckRequest Request(
      const std::string& method, const std::string& host,
      const std::string& path, std::map<std::string, std::string> headers = {},
      std::map<std::string, std::string> extensions = {}) {
    CheckRequest r;
    auto* http = r.mutable_attributes()->mutable_request()->mutable_http();
    http->set_method(method);
    http->set_host(host);
    http->set_path(path);
    for (auto& [k, v] : headers) (*http->mutable_headers())[k] = v;
    for (auto& [k, v] : extensions) {
      (*r.mutable_attributes()->mutable_context_extensions())[k] = v;
    }
    return r;
  }

  grpc::Status Call(const CheckRequest& request, CheckResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    return authz_->Check(&context, request, response);
  }

  CheckResponse Ask(const CheckRequest& request) {
    CheckResponse response;
    const grpc::Status s = Call(request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response;
  }

  // Sends serialized bytes as a Check call, whatever they hold.
  grpc::Status CallRaw(const std::string& bytes) {
    grpc::GenericStub stub(server_->channel());
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(5));
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    grpc::Status status;
    absl::Mutex mu;
    bool done = false;
    stub.UnaryCall(&context, "/envoy.service.auth.v3.Authorization/Check",
                   grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) {
                     absl::MutexLock lock(&mu);
                     status = std::move(s);
                     done = true;
                   });
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&done));
    return status;
  }

  using HeaderList = std::vector<std::pair<std::string, std::string>>;
  template <typename Options>
  static HeaderList Headers(const Options& options) {
    HeaderList out;
    for (const auto& o : options) {
      EXPECT_FALSE(o.append().value()) << o.header().key();
      EXPECT_EQ(o.append_action(), envoy::config::core::v3::HeaderValueOption::
                                       OVERWRITE_IF_EXISTS_OR_ADD);
      out.emplace_back(o.header().key(), o.header().value());
    }
    return out;
  }

  double Metric(const std::string& result) {
    return testing::MetricSample(
        server_->server().metrics_port(),
        absl::StrCat("sluice_ext_authz_checks_total{result=\"", result, "\"}"));
  }

  testing::TempDir dir_{"ext_authz_test"};
  testing::FakeClock clock_;
  std::unique_ptr<rls_test::InProcessServer> server_;
  std::unique_ptr<Authorization::Stub> authz_;
};

TEST_F(ExtAuthzServiceTest, AllowSendsPermitHeadersAndMetadata) {
  const CheckResponse r =
      Ask(Request("GET", "api.example.com", "/x", {},
                  {{"sluice_dependency", "orders"}, {"sluice_key", "t 1"}}));
  EXPECT_EQ(r.status().code(), grpc::StatusCode::OK);
  ASSERT_TRUE(r.has_ok_response());
  const auto& fields = r.dynamic_metadata().fields();
  ASSERT_EQ(fields.count("sluice_permits"), 1);
  const auto& permits = fields.at("sluice_permits").list_value();
  ASSERT_EQ(permits.values_size(), 1);
  const auto& permit = permits.values(0).struct_value().fields();
  EXPECT_EQ(permit.at("dependency").string_value(), "orders");
  EXPECT_EQ(permit.at("key").string_value(), "t 1");
  const std::string id = permit.at("permit_id").string_value();
  EXPECT_EQ(id.size(), 32);
  EXPECT_THAT(Headers(r.ok_response().headers()),
              UnorderedElementsAre(Pair("x-sluice-dependency", "orders"),
                                   Pair("x-sluice-key", "t%201"),
                                   Pair("x-sluice-permit", id)));
  // What the answer does not set, the upstream must not get from a client.
  EXPECT_THAT(r.ok_response().headers_to_remove(),
              UnorderedElementsAre("x-sluice-unmatched"));
  EXPECT_EQ(Metric("allow"), 1);
}

TEST_F(ExtAuthzServiceTest, PermitReportedWithTheMetadataIdsClosesTheLoop) {
  const CheckRequest request =
      Request("POST", "h", "/orders", {}, {{"sluice_dependency", "orders"}});
  const CheckResponse allowed = Ask(request);
  const auto& permit = allowed.dynamic_metadata()
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
  report.mutable_latency()->set_nanos(5000000);
  v1::ReportResultResponse reported;
  grpc::ClientContext context;
  ASSERT_TRUE(
      server_->decisions()->ReportResult(&context, report, &reported).ok());
  // One failure opens the breaker: the next request is refused with 503.
  EXPECT_EQ(reported.breaker_state(), v1::OPEN);
  const CheckResponse refused = Ask(request);
  EXPECT_EQ(refused.status().code(), grpc::StatusCode::UNAVAILABLE);
  ASSERT_TRUE(refused.has_denied_response());
  EXPECT_EQ(refused.denied_response().status().code(), 503);
  EXPECT_THAT(Headers(refused.denied_response().headers()),
              Contains(Pair("x-sluice-reason", "CIRCUIT_OPEN")));
  EXPECT_THAT(Headers(refused.denied_response().headers()),
              Contains(Pair("retry-after", "10")));
}

TEST_F(ExtAuthzServiceTest, RateRefusalIs429WithRetryAfter) {
  const CheckRequest request =
      Request("GET", "api.example.com", "/api/payments/1");
  EXPECT_EQ(Ask(request).status().code(), grpc::StatusCode::OK);
  const CheckResponse r = Ask(request);
  EXPECT_EQ(r.status().code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  ASSERT_TRUE(r.has_denied_response());
  EXPECT_EQ(r.denied_response().status().code(), 429);
  EXPECT_THAT(Headers(r.denied_response().headers()),
              UnorderedElementsAre(Pair("content-type", "application/json"),
                                   Pair("retry-after", "1"),
                                   Pair("x-sluice-reason", "RATE_LIMITED")));
  EXPECT_THAT(r.denied_response().body(),
              HasSubstr(R"("reason":"RATE_LIMITED")"));
  EXPECT_EQ(Metric("refuse"), 1);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(Ask(request).status().code(), grpc::StatusCode::OK);
}

TEST_F(ExtAuthzServiceTest, DegradeIsAnsweredWithTheFallbackAndItsStatus) {
  const CheckRequest catalog = Request("GET", "shop", "/catalog/items");
  EXPECT_EQ(Ask(catalog).status().code(), grpc::StatusCode::OK);
  CheckResponse r = Ask(catalog);
  // Denied, so that Envoy answers the client itself.
  EXPECT_EQ(r.status().code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  ASSERT_TRUE(r.has_denied_response());
  EXPECT_EQ(r.denied_response().status().code(), 200);
  EXPECT_EQ(r.denied_response().body(), R"({"items":[]})");
  EXPECT_THAT(Headers(r.denied_response().headers()),
              UnorderedElementsAre(Pair("content-type", "application/json"),
                                   Pair("x-sluice-degraded", "RATE_LIMITED")));

  const CheckRequest teapot =
      Request("GET", "shop", "/", {}, {{"sluice_dependency", "teapot"}});
  Ask(teapot);
  r = Ask(teapot);
  EXPECT_EQ(r.denied_response().status().code(), 418);
  EXPECT_EQ(r.denied_response().body(), "later");
  EXPECT_EQ(Metric("degrade"), 2);
}

TEST_F(ExtAuthzServiceTest, UnmatchedIsAllowedAndMarked) {
  const CheckResponse r = Ask(Request("GET", "api.example.com", "/static/a.css",
                                      {{"x-sluice-permit", "forged"}}));
  EXPECT_EQ(r.status().code(), grpc::StatusCode::OK);
  EXPECT_THAT(Headers(r.ok_response().headers()),
              UnorderedElementsAre(Pair("x-sluice-unmatched", "1")));
  EXPECT_THAT(r.ok_response().headers_to_remove(), Contains("x-sluice-permit"));
  EXPECT_FALSE(r.has_dynamic_metadata());
  EXPECT_EQ(Metric("unmatched"), 1);
}

TEST_F(ExtAuthzServiceTest, ContextExtensionsNameThePolicyBeforeRoutes) {
  // The route would say payments (1/s); the extension says payments-v2.
  const CheckRequest r = Request("GET", "api.example.com", "/api/payments/1",
                                 {}, {{"sluice_dependency", "payments-v2"}});
  for (int i = 0; i < 3; ++i) {
    const CheckResponse answer = Ask(r);
    EXPECT_EQ(answer.status().code(), grpc::StatusCode::OK) << i;
    EXPECT_THAT(Headers(answer.ok_response().headers()),
                Contains(Pair("x-sluice-dependency", "payments-v2")));
  }
}

TEST_F(ExtAuthzServiceTest, TheClientsOwnNamingHeadersNameNothing) {
  // The headers Envoy checks are the client's: sending x-sluice-dependency
  // and x-sluice-key must not move a request off its route's policy, nor
  // make an unmatched one decided.
  const CheckRequest routed =
      Request("GET", "api.example.com", "/api/payments/1",
              {{"x-sluice-dependency", "payments-v2"}, {"x-sluice-key", "k"}});
  const CheckResponse answer = Ask(routed);
  EXPECT_THAT(Headers(answer.ok_response().headers()),
              Contains(Pair("x-sluice-dependency", "payments")));
  EXPECT_THAT(Headers(answer.ok_response().headers()),
              Not(Contains(Key("x-sluice-key"))));
  const CheckResponse unmatched = Ask(Request(
      "GET", "api.example.com", "/static/x",
      {{"x-sluice-dependency", "payments-v2"}}));
  EXPECT_THAT(Headers(unmatched.ok_response().headers()),
              UnorderedElementsAre(Pair("x-sluice-unmatched", "1")));
}

TEST_F(ExtAuthzServiceTest, MostSpecificRouteWinsAndQueryIsIgnored) {
  const CheckResponse v2 =
      Ask(Request("GET", "API.example.com:443", "/api/payments/v2/x?a=/b"));
  EXPECT_THAT(Headers(v2.ok_response().headers()),
              Contains(Pair("x-sluice-dependency", "payments-v2")));
  const CheckResponse v1 = Ask(Request("GET", "api.example.com",
                                       "/api/payments/x?to=/api/payments/v2/"));
  EXPECT_THAT(Headers(v1.ok_response().headers()),
              Contains(Pair("x-sluice-dependency", "payments")));
}

TEST_F(ExtAuthzServiceTest, KeyHeaderLimitsEachValueApart) {
  auto user = [](const std::string& name) {
    return Request("GET", "h", "/users/me", {{"x-user", name}});
  };
  EXPECT_EQ(Ask(user("alice")).status().code(), grpc::StatusCode::OK);
  EXPECT_EQ(Ask(user("alice")).status().code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  const CheckResponse bob = Ask(user("bob"));
  EXPECT_EQ(bob.status().code(), grpc::StatusCode::OK);
  EXPECT_THAT(Headers(bob.ok_response().headers()),
              Contains(Pair("x-sluice-key", "bob")));
}

TEST_F(ExtAuthzServiceTest, RawHeaderMapIsReadLikeHeaders) {
  CheckRequest r = Request("GET", "h", "/users/me");
  auto* header = r.mutable_attributes()
                     ->mutable_request()
                     ->mutable_http()
                     ->mutable_header_map()
                     ->add_headers();
  header->set_key("x-user");
  header->set_raw_value("carol");
  const CheckResponse answer = Ask(r);
  EXPECT_THAT(Headers(answer.ok_response().headers()),
              Contains(Pair("x-sluice-key", "carol")));
}

TEST_F(ExtAuthzServiceTest, OversizedRequestIsRefusedBeforeParsing) {
  CheckRequest r = Request("GET", "h", "/");
  r.mutable_attributes()->mutable_request()->mutable_http()->set_path(
      "/" + std::string(300 << 10, 'a'));
  CheckResponse response;
  const grpc::Status s = Call(r, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("CheckRequest is"));
  EXPECT_EQ(Metric("invalid"), 1);
}

TEST_F(ExtAuthzServiceTest, TooManyHeadersAreRefused) {
  std::map<std::string, std::string> headers;
  for (int i = 0; i < 300; ++i) headers[absl::StrCat("h", i)] = "v";
  CheckResponse response;
  const grpc::Status s = Call(Request("GET", "h", "/", headers), &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("at most 256 headers, got 300"));

  // Far more than any budget: refused for the field count on the raw bytes.
  headers.clear();
  for (int i = 0; i < 5000; ++i) headers[absl::StrCat("h", i)] = "";
  const grpc::Status many = Call(Request("GET", "h", "/", headers), &response);
  EXPECT_EQ(many.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(many.error_message(), HasSubstr("fields"));
}

TEST_F(ExtAuthzServiceTest, BadUtf8InHeadersGetsAValidUtf8Error) {
  // A raw header value that is not UTF-8 becomes the key: refused, and the
  // message quotes it in valid UTF-8.
  CheckRequest r = Request("GET", "h", "/users/me");
  auto* header = r.mutable_attributes()
                     ->mutable_request()
                     ->mutable_http()
                     ->mutable_header_map()
                     ->add_headers();
  header->set_key("x-user");
  header->set_raw_value("caf\xe9\xff");
  CheckResponse response;
  grpc::Status s = Call(r, &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(wire::ToValidUtf8(s.error_message()), s.error_message());
  EXPECT_THAT(s.error_message(), HasSubstr("not valid UTF-8"));

  // Invalid UTF-8 in a string header of the map: the bytes are not a valid
  // CheckRequest at all.
  std::string bytes =
      Request("GET", "h", "/", {{"x-user", "MARKER"}}).SerializeAsString();
  const size_t at = bytes.find("MARKER");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 6, "\xff\xfe\xfd\xfc\xfb\xfa");
  s = CallRaw(bytes);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(wire::ToValidUtf8(s.error_message()), s.error_message());

  // A dependency no policy could have, from a context extension.
  s = Call(Request("GET", "h", "/", {}, {{"sluice_dependency", "a\"b"}}),
           &response);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(wire::ToValidUtf8(s.error_message()), s.error_message());
}

TEST_F(ExtAuthzServiceTest, HealthReportsTheService) {
  auto health = grpc::health::v1::Health::NewStub(server_->channel());
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("envoy.service.auth.v3.Authorization");
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(health->Check(&context, request, &response).ok());
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

}  // namespace
}  // namespace sluice
