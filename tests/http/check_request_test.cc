// SPDX-License-Identifier: Apache-2.0
// What a forward-auth check (/v1/check) reads from its head before
// anything is decided: the strict query string (percent-decoding, a name
// given twice, UTF-8, unknown names, a bound on the count) and the
// original request from each gateway's forwarded headers.

#include "server/http/check_request.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/http/request_parser.h"

namespace sluice::http {
namespace {

// The head of "GET <target>" with `headers` (each ending in "\r\n").
ParsedHead Head(const std::string& target, const std::string& headers,
                const std::string& method = "GET") {
  const ParseOutcome out = ParseRequest(absl::StrCat(
      method, " ", target, " HTTP/1.1\r\nHost: sluice:8090\r\n", headers,
      "\r\n"));
  EXPECT_EQ(out.kind, ParseOutcome::Kind::kRequest) << target;
  return out.head;
}

TEST(CheckRequestTest, CheckPaths) {
  EXPECT_TRUE(IsCheckPath("/v1/check"));
  EXPECT_TRUE(IsCheckPath("/v1/check/"));
  EXPECT_TRUE(IsCheckPath("/v1/check/api/payments/1"));
  EXPECT_FALSE(IsCheckPath("/v1/checks"));
  EXPECT_FALSE(IsCheckPath("/v1/chec"));
  EXPECT_FALSE(IsCheckPath("/v2/check"));
}

TEST(CheckRequestTest, PercentDecodes) {
  EXPECT_EQ(*PercentDecode("tenant%2D42"), "tenant-42");
  EXPECT_EQ(*PercentDecode("a+b%20c"), "a b c");
  EXPECT_EQ(*PercentDecode("%c3%a9t%C3%A9"), "\xc3\xa9t\xc3\xa9");  // été
  EXPECT_EQ(*PercentDecode("%25"), "%");  // decoded once, not twice
  EXPECT_EQ(*PercentDecode(""), "");
  for (const char* bad : {"%", "%4", "%zz", "a%g1", "%%41"}) {
    const absl::StatusOr<std::string> out = PercentDecode(bad);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  // Bytes that are not UTF-8, whether sent raw or escaped.
  for (const char* bad : {"%ff", "%c3", "%ed%a0%80", "\xff", "%c0%af"}) {
    const absl::StatusOr<std::string> out = PercentDecode(bad);
    ASSERT_FALSE(out.ok()) << bad;
    EXPECT_NE(out.status().message().find("UTF-8"), std::string::npos)
        << out.status();
  }
}

TEST(CheckRequestTest, ParsesTheThreeParameters) {
  absl::StatusOr<CheckParameters> p = ParseCheckParameters(
      "dependency=payments&key=tenant%2042&key_header=X-Tenant");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->dependency, "payments");
  EXPECT_EQ(p->key, "tenant 42");
  EXPECT_EQ(p->key_header, "x-tenant");

  p = ParseCheckParameters("");
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->dependency.has_value());
  EXPECT_FALSE(p->key.has_value());
  EXPECT_FALSE(p->key_header.has_value());

  // An empty value is given (the key ""), and empty pieces are skipped.
  p = ParseCheckParameters("&dependency=catalog&&key=&");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->dependency, "catalog");
  EXPECT_EQ(p->key, "");
}

TEST(CheckRequestTest, RefusesWhatIsAmbiguousOrUnknown) {
  const auto refusal = [](const std::string& query) {
    const absl::StatusOr<CheckParameters> p = ParseCheckParameters(query);
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << query;
    return std::string(p.status().message());
  };
  EXPECT_NE(refusal("dependency=a&dependency=b").find("given twice"),
            std::string::npos);
  // The same name however it is spelt on the wire.
  EXPECT_NE(refusal("key=a&%6bey=b").find("given twice"), std::string::npos);
  EXPECT_NE(refusal("dependancy=a").find("unknown query parameter"),
            std::string::npos);
  EXPECT_NE(refusal("key=%zz").find("hex digits"), std::string::npos);
  EXPECT_NE(refusal("key=%ff%fe").find("UTF-8"), std::string::npos);
  EXPECT_NE(refusal("key_header=X%20Tenant").find("not a header name"),
            std::string::npos);
  EXPECT_NE(refusal("key_header=").find("not a header name"),
            std::string::npos);
  // The error quotes hostile bytes escaped: the message stays UTF-8.
  EXPECT_NE(refusal("\xff=1").find("\\xff"), std::string::npos);
}

TEST(CheckRequestTest, BoundsTheParameterCount) {
  std::string query;
  for (size_t i = 0; i < kMaxQueryParameters; ++i) {
    absl::StrAppend(&query, "p", i, "=1&");
  }
  EXPECT_TRUE(ParseQuery(query).ok());
  absl::StrAppend(&query, "one=more");
  const auto out = ParseQuery(query);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("more than"), std::string::npos);
  // Ten thousand empty pieces are skipped, not counted or stored.
  EXPECT_TRUE(ParseQuery(std::string(10000, '&')).ok());
}

TEST(CheckRequestTest, ParametersOfTheShortFormOnly) {
  absl::StatusOr<CheckParameters> p =
      CheckParametersOf(Head("/v1/check?dependency=catalog&key=k", ""));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->dependency, "catalog");
  EXPECT_EQ(p->key, "k");
  // Envoy's HTTP-mode ext_authz appends the original path and query: that
  // query string is the original request's, not parameters.
  p = CheckParametersOf(Head("/v1/check/api/items?dependency=x&foo=1", ""));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_FALSE(p->dependency.has_value());
  EXPECT_EQ(CheckParametersOf(Head("/v1/check?a=1&a=2", "")).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CheckRequestTest, TraefikForwardedHeaders) {
  const absl::StatusOr<ForwardedRequest> r = ForwardedRequestOf(
      Head("/v1/check", "X-Forwarded-Method: POST\r\n"
                        "X-Forwarded-Host: Shop.Example.com:8443\r\n"
                        "X-Forwarded-Uri: /api/payments/1?amount=3\r\n"
                        "X-Original-URI: /ignored\r\n"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->host, "shop.example.com");
  EXPECT_EQ(r->path, "/api/payments/1");
  EXPECT_EQ(r->method, "POST");
}

TEST(CheckRequestTest, IngressNginxOriginalUrl) {
  const absl::StatusOr<ForwardedRequest> r = ForwardedRequestOf(
      Head("/v1/check", "X-Original-URL: https://api.example.com/v2/x?y=1\r\n"
                        "X-Original-Method: DELETE\r\n"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->host, "api.example.com");
  EXPECT_EQ(r->path, "/v2/x");
  EXPECT_EQ(r->method, "DELETE");

  const absl::StatusOr<ForwardedRequest> bare = ForwardedRequestOf(
      Head("/v1/check", "X-Original-URL: http://[::1]:8080\r\n"));
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->host, "[::1]");
  EXPECT_EQ(bare->path, "/");
}

TEST(CheckRequestTest, NginxOriginalUri) {
  const absl::StatusOr<ForwardedRequest> r = ForwardedRequestOf(
      Head("/v1/check?dependency=a", "X-Original-URI: /api/catalog/7?x\r\n"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->host, "sluice");  // the check's own Host, without the port
  EXPECT_EQ(r->path, "/api/catalog/7");
  EXPECT_EQ(r->method, "GET");
}

TEST(CheckRequestTest, EnvoyAppendedPathAndOwnHost) {
  const absl::StatusOr<ForwardedRequest> r = ForwardedRequestOf(
      Head("/v1/check/api/items/3?page=2", "", "PUT"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->host, "sluice");
  EXPECT_EQ(r->path, "/api/items/3");
  EXPECT_EQ(r->method, "PUT");

  const absl::StatusOr<ForwardedRequest> root =
      ForwardedRequestOf(Head("/v1/check", ""));
  ASSERT_TRUE(root.ok());
  EXPECT_EQ(root->path, "/");

  // A fragment a client sent is not part of the path (libFuzzer found it
  // kept there: "PUT /v1/check/api/ms/#...").
  const absl::StatusOr<ForwardedRequest> fragment =
      ForwardedRequestOf(Head("/v1/check/api/ms/#\xff\xfd" "age=2", ""));
  ASSERT_TRUE(fragment.ok()) << fragment.status();
  EXPECT_EQ(fragment->path, "/api/ms/");
  const absl::StatusOr<ForwardedRequest> only_fragment =
      ForwardedRequestOf(Head("/v1/check/#top", ""));
  ASSERT_TRUE(only_fragment.ok()) << only_fragment.status();
  EXPECT_EQ(only_fragment->path, "/");
}

TEST(CheckRequestTest, RefusesHostileForwardedHeaders) {
  for (const char* headers :
       {"X-Forwarded-Uri: /a\r\nX-Forwarded-Uri: /b\r\n",
        "X-Forwarded-Host: a\r\nx-forwarded-host: b\r\n",
        "X-Forwarded-Method: GET\r\nX-Forwarded-Method: POST\r\n",
        "X-Forwarded-Uri: api/no-slash\r\n",
        "X-Original-URI: http://elsewhere/\r\n",
        "X-Forwarded-Host: user@host\r\n",
        "X-Forwarded-Host: host/path\r\n",
        "X-Forwarded-Host: [::1\r\n",
        "X-Forwarded-Host: h\xc3\xa9\r\n",
        "X-Original-URL: /relative\r\n",
        "X-Forwarded-Method: G(T\r\n"}) {
    const absl::StatusOr<ForwardedRequest> r =
        ForwardedRequestOf(Head("/v1/check", headers));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << headers;
  }
}

TEST(CheckRequestTest, NamingHeadersOnceAndUtf8) {
  CheckParameters tenant;
  tenant.key_header = "x-tenant";
  EXPECT_TRUE(CheckNamingHeaders(
                  Head("/v1/check", "X-Sluice-Dependency: a\r\n"
                                    "X-Sluice-Key: t\xc3\xa9\r\n"
                                    "X-Tenant: b\r\n"),
                  tenant)
                  .ok());
  EXPECT_TRUE(CheckNamingHeaders(Head("/v1/check", ""), tenant).ok());
  for (const char* headers :
       {"X-Sluice-Key: \xff\xfe\r\n", "X-Sluice-Dependency: \xc3\r\n",
        "X-Tenant: \xed\xa0\x80\r\n",
        "X-Sluice-Key: a\r\nX-Sluice-Key: b\r\n",
        "X-Tenant: a\r\nx-tenant: a\r\n"}) {
    EXPECT_EQ(CheckNamingHeaders(Head("/v1/check", headers), tenant).code(),
              absl::StatusCode::kInvalidArgument)
        << headers;
  }
  // Another header of bytes that are not UTF-8 is none of the check's
  // business.
  EXPECT_TRUE(
      CheckNamingHeaders(Head("/v1/check", "X-Other: \xff\r\n"), tenant)
          .ok());
}

}  // namespace
}  // namespace sluice::http
