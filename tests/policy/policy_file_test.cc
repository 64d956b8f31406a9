// SPDX-License-Identifier: Apache-2.0
#include "server/policy/policy_file.h"

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "server/policy/policy_convert.h"
#include "tests/testing/build_paths.h"

namespace sluice::policy {
namespace {

using ::testing::HasSubstr;

std::string ErrorOf(const std::string& text) {
  absl::StatusOr<std::vector<v1::Policy>> p = ParsePolicies(text, "f.yaml");
  if (p.ok()) return "<parsed>";
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(p.status().message());
}

TEST(ParsePoliciesTest, DesignExample) {
  absl::StatusOr<std::vector<v1::Policy>> p = ParsePolicies(R"(
policies:
  - name: inventory
    call_timeout: 2s
    rate_limit: { algorithm: TOKEN_BUCKET, rate: 100, per: 1s, burst: 150, scope: CLUSTER }
    concurrency: { max_in_flight: 50 }
    breaker:
      consecutive_failures: 5
      failure_rate_threshold: 0.5
      slow_call_duration: 250ms
      slow_call_rate_threshold: 0.8
      window: 10s
      minimum_calls: 20
      open_duration: 15s
      max_open_duration: 5m
      half_open_probes: 2
      successes_to_close: 2
    fallback: { strategy: STATIC, payload: '{"degraded":true}', content_type: application/json,
                on: [CIRCUIT_OPEN] }
    on_store_failure: FAIL_OPEN
    shadow: false
    per_key: false
    max_keys: 100000
)",
                                                            "design.yaml");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 1u);
  const v1::Policy& x = (*p)[0];
  EXPECT_EQ(x.name(), "inventory");
  EXPECT_EQ(x.call_timeout().seconds(), 2);
  EXPECT_EQ(x.rate_limit().algorithm(), v1::RateLimit::TOKEN_BUCKET);
  EXPECT_EQ(x.rate_limit().rate(), 100);
  EXPECT_EQ(x.rate_limit().burst(), 150);
  EXPECT_EQ(x.rate_limit().scope(), v1::CLUSTER);
  EXPECT_EQ(x.concurrency().max_in_flight(), 50u);
  EXPECT_EQ(x.breaker().failure_rate_threshold(), 0.5);
  EXPECT_EQ(x.breaker().slow_call_duration().seconds(), 0);
  EXPECT_EQ(x.breaker().slow_call_duration().nanos(), 250000000);
  EXPECT_EQ(x.breaker().max_open_duration().seconds(), 300);
  EXPECT_EQ(x.fallback().strategy(), v1::Fallback::STATIC);
  EXPECT_EQ(x.fallback().payload(), R"({"degraded":true})");
  EXPECT_EQ(x.fallback().content_type(), "application/json");
  ASSERT_EQ(x.fallback().on_size(), 1);
  EXPECT_EQ(x.fallback().on(0), v1::CIRCUIT_OPEN);
  EXPECT_EQ(x.on_store_failure(), v1::Policy::FAIL_OPEN);
  EXPECT_EQ(x.max_keys(), 100000u);
  EXPECT_TRUE(ToConfig(x).ok());
}

TEST(ParsePoliciesTest, ExampleFileLoadsAndValidates) {
  absl::StatusOr<std::vector<v1::Policy>> p = ParsePoliciesFile(
      absl::StrCat(testing::kSourceDir, "/deploy/policies/example.yaml"));
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 5u);
  bool token_bucket_breaker_static = false, sliding = false,
       concurrency_cache = false, per_key = false, shadow = false;
  for (const v1::Policy& policy : *p) {
    absl::StatusOr<core::PolicyConfig> c = ToConfig(policy);
    ASSERT_TRUE(c.ok()) << c.status();
    if (c->rate_limit &&
        c->rate_limit->algorithm == core::RateAlgorithm::kTokenBucket &&
        c->breaker && c->fallback.strategy == core::FallbackStrategy::kStatic) {
      token_bucket_breaker_static = true;
    }
    if (c->rate_limit &&
        c->rate_limit->algorithm == core::RateAlgorithm::kSlidingWindow) {
      sliding = true;
    }
    if (c->concurrency &&
        c->fallback.strategy == core::FallbackStrategy::kCache) {
      concurrency_cache = true;
    }
    per_key |= c->per_key;
    shadow |= c->shadow;
  }
  EXPECT_TRUE(token_bucket_breaker_static);
  EXPECT_TRUE(sliding);
  EXPECT_TRUE(concurrency_cache);
  EXPECT_TRUE(per_key);
  EXPECT_TRUE(shadow);
}

TEST(ParsePoliciesTest, AdaptiveBlocksLoadAndValidate) {
  absl::StatusOr<std::vector<v1::Policy>> p = ParsePolicies(R"(
policies:
  - name: search
    breaker:
      consecutive_failures: 5
      window: 10s
      latency_baseline: { factor: 2, deviations: 3, success_rate_drop: 0.2,
                          warmup_windows: 4, history_windows: 20 }
    adaptive_throttle: { window: 30s, k: 1.5, minimum_requests: 50 }
    adaptive_concurrency:
      min_limit: 5
      max_limit: 400
      initial_limit: 40
      tolerance: 2
      window: 500ms
      minimum_samples: 20
      baseline_window: 2m
    fallback: { strategy: DEFAULT, on: [ADAPTIVE_THROTTLED] }
)",
                                                            "adaptive.yaml");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 1u);
  absl::StatusOr<core::PolicyConfig> c = ToConfig((*p)[0]);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->breaker->latency_baseline.has_value());
  EXPECT_EQ(c->breaker->latency_baseline->factor, 2);
  EXPECT_EQ(c->breaker->latency_baseline->deviations, 3);
  EXPECT_EQ(c->breaker->latency_baseline->success_rate_drop, 0.2);
  EXPECT_EQ(c->breaker->latency_baseline->warmup_windows, 4u);
  EXPECT_EQ(c->breaker->latency_baseline->history_windows, 20u);
  ASSERT_TRUE(c->adaptive_throttle.has_value());
  EXPECT_EQ(c->adaptive_throttle->window, absl::Seconds(30));
  EXPECT_EQ(c->adaptive_throttle->k, 1.5);
  EXPECT_EQ(c->adaptive_throttle->minimum_requests, 50u);
  ASSERT_TRUE(c->adaptive_concurrency.has_value());
  EXPECT_EQ(c->adaptive_concurrency->min_limit, 5u);
  EXPECT_EQ(c->adaptive_concurrency->max_limit, 400u);
  EXPECT_EQ(c->adaptive_concurrency->initial_limit, 40u);
  EXPECT_EQ(c->adaptive_concurrency->tolerance, 2);
  EXPECT_EQ(c->adaptive_concurrency->window, absl::Milliseconds(500));
  EXPECT_EQ(c->adaptive_concurrency->minimum_samples, 20u);
  EXPECT_EQ(c->adaptive_concurrency->baseline_window, absl::Minutes(2));

  // Written back out (sluicectl get), it reads back as the same policy.
  const std::string yaml = PoliciesToYaml({FromConfig(*c)});
  absl::StatusOr<std::vector<v1::Policy>> back =
      ParsePolicies(yaml, "written.yaml");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  absl::StatusOr<core::PolicyConfig> again = ToConfig((*back)[0]);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->digest, c->digest);
}

TEST(ParsePoliciesTest, AdaptiveBlockErrorsNameTheField) {
  absl::StatusOr<std::vector<v1::Policy>> p = ParsePolicies(R"(
policies:
  - name: search
    adaptive_concurrency: { min_limit: 10, max_limit: 5 }
)",
                                                            "bad.yaml");
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<core::PolicyConfig> c = ToConfig((*p)[0]);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "policy \"search\": adaptive_concurrency.max_limit must be >= "
            "adaptive_concurrency.min_limit (10), got 5");
  // A misspelt field is the file parser's error, with its line.
  EXPECT_THAT(ErrorOf(R"(
policies:
  - name: search
    adaptive_throttle: { windw: 10s }
)"),
              HasSubstr("windw"));
}

TEST(ParsePoliciesTest, HttpRouteHeadersAreAMapping) {
  absl::StatusOr<std::vector<v1::Policy>> p = ParsePolicies(R"(
policies:
  - name: payments
    fallback: {strategy: STATIC, payload: "{}", http_status: 503}
    http_routes:
      - path_prefix: /pay/
        headers:
          x-canary: "1"
          x-tenant:
)",
                                                           "r.yaml");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ((*p)[0].http_routes_size(), 1);
  const auto& headers = (*p)[0].http_routes(0).headers();
  ASSERT_EQ(headers.size(), 2u);
  EXPECT_EQ(headers.at("x-canary"), "1");
  EXPECT_EQ(headers.at("x-tenant"), "");
  EXPECT_EQ((*p)[0].fallback().http_status(), 503u);

  absl::StatusOr<std::vector<v1::Policy>> bad = ParsePolicies(R"(
policies:
  - name: payments
    http_routes:
      - headers: [x-canary]
)",
                                                             "r.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("http_routes[0].headers: must be a mapping, got a list"));
}

TEST(ParsePoliciesTest, EmptyDocumentsAreEmptyLists) {
  for (const char* text : {"", "\n", "# only a comment\n", "policies: []\n",
                           "policies:\n", "{}", "{\"policies\": []}"}) {
    absl::StatusOr<std::vector<v1::Policy>> p = ParsePolicies(text, "e.yaml");
    ASSERT_TRUE(p.ok()) << "'" << text << "': " << p.status();
    EXPECT_TRUE(p->empty()) << text;
  }
}

// Documents on which yaml-cpp 0.7's parser never returns (it emits nodes
// forever): refused as a syntax error, at once. The first was found by
// fuzz/policy_parser_fuzzer, as a comment line of the example file with
// its "#" taken out.
TEST(ParsePoliciesTest, DocumentsTheYamlParserCannotFinishAreRefused) {
  for (const char* text :
       {",", "   , enums are written by name, and fields\n", "- a\n,",
        "---\n,", "&a ,", "policies:\n  - name: a\n,\n"}) {
    absl::StatusOr<std::vector<v1::Policy>> p = ParsePolicies(text, "h.yaml");
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(p.status().message(), HasSubstr("h.yaml"));
    EXPECT_THAT(p.status().message(), HasSubstr("YAML syntax error")) << text;
  }
  // A ',' inside a flow collection or a plain scalar is fine.
  absl::StatusOr<std::vector<v1::Policy>> p = ParsePolicies(
      "policies: [{name: a, description: \"x, y\"}, {name: b}]\n",
      "ok.yaml");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->size(), 2u);
}

TEST(ParsePoliciesTest, JsonInput) {
  absl::StatusOr<std::vector<v1::Policy>> p = ParsePolicies(
      R"({"policies": [
           {"name": "a", "callTimeout": "1.5s",
            "rate_limit": {"rate": 2.5, "burst": 4, "algorithm": "TOKEN_BUCKET"},
            "perKey": true, "maxKeys": 10, "description": "7"},
           {"name": "b", "shadow": true}]})",
      "p.json");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].call_timeout().seconds(), 1);
  EXPECT_EQ((*p)[0].call_timeout().nanos(), 500000000);
  EXPECT_EQ((*p)[0].rate_limit().rate(), 2.5);
  EXPECT_EQ((*p)[0].rate_limit().burst(), 4);
  EXPECT_TRUE((*p)[0].per_key());
  EXPECT_EQ((*p)[0].max_keys(), 10u);
  EXPECT_EQ((*p)[0].description(), "7");
  EXPECT_TRUE((*p)[1].shadow());
}

TEST(ParsePoliciesTest, StringFieldsStayStrings) {
  absl::StatusOr<std::vector<v1::Policy>> p = ParsePolicies(R"(
policies:
  - name: 123
    description: true
    fallback: { strategy: STATIC, payload: 0.50 }
)",
                                                            "s.yaml");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ((*p)[0].name(), "123");
  EXPECT_EQ((*p)[0].description(), "true");
  EXPECT_EQ((*p)[0].fallback().payload(), "0.50");
}

TEST(ParsePoliciesTest, NonFiniteNumbersReachValidation) {
  absl::StatusOr<std::vector<v1::Policy>> p = ParsePolicies(
      "policies:\n  - name: a\n    rate_limit: { rate: .inf }\n", "i.yaml");
  ASSERT_TRUE(p.ok()) << p.status();
  absl::StatusOr<core::PolicyConfig> c = ToConfig((*p)[0]);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "policy \"a\": rate_limit.rate must be > 0 and finite, got inf");
}

TEST(ParsePoliciesTest, NonFiniteNumbersAsWrittenParseAgain) {
  // libFuzzer found `burst: .nan` written back as NaN, which did not parse.
  for (const char* value : {".nan", ".inf", "-.inf"}) {
    absl::StatusOr<std::vector<v1::Policy>> p = ParsePolicies(
        absl::StrCat("policies:\n  - name: a\n    rate_limit: { rate: 1, "
                     "burst: ",
                     value, " }\n"),
        "i.yaml");
    ASSERT_TRUE(p.ok()) << value << ": " << p.status();
    absl::StatusOr<std::vector<v1::Policy>> again =
        ParsePolicies(PoliciesToYaml(*p), "again.yaml");
    ASSERT_TRUE(again.ok()) << value << ": " << again.status();
    const double before = (*p)[0].rate_limit().burst();
    const double after = (*again)[0].rate_limit().burst();
    EXPECT_TRUE(after == before || (std::isnan(after) && std::isnan(before)))
        << value << ": " << before << " became " << after;
  }
}

TEST(ParsePoliciesTest, SyntaxErrorNamesFileAndLine) {
  const std::string error = ErrorOf(
      "policies:\n"
      "  - name: a\n"
      "    rate_limit: { rate: 1\n"
      "  - name: b\n");
  EXPECT_THAT(error, ::testing::StartsWith("f.yaml:4:"));
  EXPECT_THAT(error, HasSubstr("YAML syntax error"));

  EXPECT_THAT(ErrorOf("policies:\n  - name: a\n   bad: [\n"),
              ::testing::StartsWith("f.yaml:"));
  EXPECT_THAT(ErrorOf("policies: [\n"), HasSubstr("YAML syntax error"));
}

TEST(ParsePoliciesTest, UnknownFieldNamesPolicyFieldAndLine) {
  EXPECT_EQ(ErrorOf("policies:\n"
                    "  - name: a\n"
                    "    rate_limit:\n"
                    "      rat: 5\n"),
            "f.yaml:4: policy \"a\": rate_limit: unknown field \"rat\" in "
            "RateLimit");
  EXPECT_EQ(ErrorOf("policies:\n"
                    "  - name: a\n"
                    "\n"
                    "    timeout: 1s\n"),
            "f.yaml:4: policy \"a\": unknown field \"timeout\" in Policy");
}

TEST(ParsePoliciesTest, BadEnumListsTheChoices) {
  EXPECT_EQ(ErrorOf("policies:\n"
                    "  - name: a\n"
                    "    rate_limit: { algorithm: LEAKY_BUCKET, rate: 1 }\n"),
            "f.yaml:3: policy \"a\": rate_limit.algorithm: \"LEAKY_BUCKET\" "
            "is not one of TOKEN_BUCKET, SLIDING_WINDOW");
  EXPECT_EQ(ErrorOf("policies:\n"
                    "  - name: a\n"
                    "    fallback: { strategy: DEFAULT, on: [CIRCUIT_OPEN, "
                    "circuit_open] }\n"),
            "f.yaml:3: policy \"a\": fallback.on[1]: \"circuit_open\" is not "
            "one of RATE_LIMITED, CONCURRENCY_LIMITED, CIRCUIT_OPEN, "
            "PROBE_LIMIT, UNKNOWN_DEPENDENCY, STORE_UNAVAILABLE, "
            "ADAPTIVE_THROTTLED, SHADOW");
}

TEST(ParsePoliciesTest, BadDurations) {
  EXPECT_EQ(ErrorOf("policies:\n  - name: a\n    call_timeout: 15\n"),
            "f.yaml:3: policy \"a\": call_timeout: must be a duration such "
            "as \"15s\" or \"250ms\", got \"15\"");
  EXPECT_EQ(ErrorOf("policies:\n  - name: a\n    call_timeout: soon\n"),
            "f.yaml:3: policy \"a\": call_timeout: must be a duration such "
            "as \"15s\" or \"250ms\", got \"soon\"");
  EXPECT_EQ(ErrorOf("policies:\n  - name: a\n    call_timeout: inf\n"),
            "f.yaml:3: policy \"a\": call_timeout: must be a duration such "
            "as \"15s\" or \"250ms\", got \"inf\"");
  EXPECT_EQ(ErrorOf("policies:\n  - name: a\n    breaker:\n"
                    "      window: { seconds: 3 }\n"),
            "f.yaml:4: policy \"a\": breaker.window: must be a duration such "
            "as \"15s\" or \"250ms\", got a mapping");
  EXPECT_EQ(ErrorOf("policies:\n  - name: a\n    call_timeout: 900000h\n"),
            "f.yaml:3: policy \"a\": call_timeout: must be under 100 years, "
            "got \"900000h\"");
}

TEST(ParsePoliciesTest, WrongValueTypes) {
  EXPECT_EQ(ErrorOf("policies:\n  - name: a\n    concurrency:\n"
                    "      max_in_flight: -1\n"),
            "f.yaml:4: policy \"a\": concurrency.max_in_flight: must be a "
            "whole number >= 0 that fits 32 bits, got \"-1\"");
  EXPECT_EQ(ErrorOf("policies:\n  - name: a\n    max_keys: 1.5\n"),
            "f.yaml:3: policy \"a\": max_keys: must be a whole number >= 0 "
            "that fits 32 bits, got \"1.5\"");
  EXPECT_EQ(ErrorOf("policies:\n  - name: a\n    rate_limit: { rate: lots }\n"),
            "f.yaml:3: policy \"a\": rate_limit.rate: must be a number, got "
            "\"lots\"");
  EXPECT_EQ(ErrorOf("policies:\n  - name: a\n    shadow: yes\n"),
            "f.yaml:3: policy \"a\": shadow: must be true or false, got "
            "\"yes\"");
  EXPECT_EQ(ErrorOf("policies:\n  - name: a\n    rate_limit: 5\n"),
            "f.yaml:3: policy \"a\": rate_limit: must be a mapping, got a "
            "scalar");
  EXPECT_EQ(ErrorOf("policies:\n  - name: a\n    fallback:\n"
                    "      strategy: STATIC\n      payload: {x: 1}\n"),
            "f.yaml:5: policy \"a\": fallback.payload: must be a single "
            "value, got a mapping");
  EXPECT_EQ(ErrorOf("policies:\n  - name: a\n    fallback:\n"
                    "      on: CIRCUIT_OPEN\n"),
            "f.yaml:4: policy \"a\": fallback.on: must be a list, got a "
            "scalar");
}

TEST(ParsePoliciesTest, FieldSetTwice) {
  EXPECT_EQ(ErrorOf("policies:\n  - name: a\n    per_key: true\n"
                    "    perKey: false\n"),
            "f.yaml:4: policy \"a\": perKey: is set twice");
}

TEST(ParsePoliciesTest, NamesRequiredAndUnique) {
  EXPECT_EQ(ErrorOf("policies:\n  - shadow: true\n"),
            "f.yaml:2: policies[0]: name is required");
  EXPECT_EQ(ErrorOf("policies:\n  - name: a\n  - name: ''\n"),
            "f.yaml:3: policies[1]: name is required");
  EXPECT_EQ(ErrorOf("policies:\n"
                    "  - name: a\n"
                    "  - name: b\n"
                    "  - name: a\n"
                    "    shadow: true\n"),
            "f.yaml:4: policy \"a\": duplicate name (first defined at line 2)");
}

TEST(ParsePoliciesTest, DocumentShape) {
  EXPECT_EQ(ErrorOf("policies: []\npolicy: []\n"),
            "f.yaml:2: unknown top-level key \"policy\" (only `policies` is "
            "allowed)");
  EXPECT_EQ(ErrorOf("policies: {name: a}\n"),
            "f.yaml:1: policies must be a list, got a mapping");
  EXPECT_EQ(ErrorOf("- name: a\n"),
            "f.yaml:1: the document must be a mapping with a `policies:` "
            "list");
  EXPECT_EQ(ErrorOf("policies:\n  - just-a-name\n"),
            "f.yaml:2: policies[0]: must be a mapping, got a scalar");
  EXPECT_EQ(ErrorOf("policies: []\n---\npolicies: []\n"),
            "f.yaml: expected one YAML document, found 2");
}

TEST(ParsePoliciesTest, ParsePoliciesFileErrors) {
  absl::StatusOr<std::vector<v1::Policy>> p =
      ParsePoliciesFile("/nonexistent/sluice/policies.yaml");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(p.status().message()),
              HasSubstr("/nonexistent/sluice/policies.yaml"));
  EXPECT_EQ(ParsePoliciesFile("/").status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ParsePoliciesTest, KeepsTheLineOfEveryField) {
  absl::StatusOr<ParsedPolicies> p = ParsePoliciesWithLines(R"(policies:
  - name: a
    rateLimit:
      rate: 5
    envoy_descriptors:
      - domain: edge
        entries:
          - { key: k, value: v }
)",
                                                            "f.yaml");
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->lines.size(), 1u);
  const std::map<std::string, int>& lines = p->lines[0];
  EXPECT_EQ(FieldLine(lines, ""), 2);
  // Under the proto name, whichever spelling the file used.
  EXPECT_EQ(FieldLine(lines, "rate_limit"), 3);
  EXPECT_EQ(FieldLine(lines, "rate_limit.rate"), 4);
  EXPECT_EQ(FieldLine(lines, "envoy_descriptors[0].domain"), 6);
  EXPECT_EQ(FieldLine(lines, "envoy_descriptors[0].entries[0].value"), 8);
  // A field left out: its closest enclosing field, else the policy.
  EXPECT_EQ(FieldLine(lines, "rate_limit.per"), 3);
  EXPECT_EQ(FieldLine(lines, "breaker.window"), 2);
  EXPECT_EQ(FieldLine({}, "name"), 0);
}

TEST(ParsePoliciesTest, RefusesTextThatIsNotUtf8AtItsLine) {
  EXPECT_EQ(ErrorOf("policies:\n  - name: a\n    description: caf\xe9\n"),
            "f.yaml:3: not UTF-8 text (byte 0xe9 at offset 42)");
  // Overlong forms and surrogates are not UTF-8 either.
  EXPECT_THAT(ErrorOf("policies: []\n# \xc0\xaf\n"),
              HasSubstr("f.yaml:2: not UTF-8"));
  EXPECT_THAT(ErrorOf("policies: []\n# \xed\xa0\x80\n"),
              HasSubstr("f.yaml:2: not UTF-8"));
  // Two- and four-byte characters are.
  EXPECT_EQ(ErrorOf("policies:\n  - name: a\n"
                    "    description: \"caf\xc3\xa9 \xf0\x9f\x9a\xb0\"\n"),
            "<parsed>");
}

TEST(ParsePoliciesTest, RefusesAliasesThatExpandTooFar) {
  // About 40 KB of text whose aliases name 4 x 10^8 values.
  std::string text =
      "policies:\n- name: a\n  per_key: true\n  envoy_descriptors:\n"
      "  - &d {domain: x, entries: [&e {key: k, value: v}";
  for (int i = 0; i < 20000; ++i) text += ", *e";
  text += "]}\n";
  for (int i = 0; i < 20000; ++i) text += "  - *d\n";
  EXPECT_THAT(ErrorOf(text), HasSubstr("the document expands to too many "
                                       "values"));
  // Aliases used as intended are fine.
  EXPECT_EQ(ErrorOf("policies:\n"
                    "- name: a\n  breaker: &b {consecutive_failures: 5}\n"
                    "- name: b\n  breaker: *b\n"),
            "<parsed>");
}

TEST(PoliciesToYamlTest, RoundTripsThroughParse) {
  absl::StatusOr<std::vector<v1::Policy>> p = ParsePoliciesFile(
      absl::StrCat(testing::kSourceDir, "/deploy/policies/example.yaml"));
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<v1::Policy> canonical;
  for (const v1::Policy& policy : *p) {
    absl::StatusOr<core::PolicyConfig> c = ToConfig(policy);
    ASSERT_TRUE(c.ok()) << c.status();
    canonical.push_back(FromConfig(*c));
  }
  // Strings that a careless writer would turn into other types.
  canonical[0].set_description("null");
  canonical[1].set_description("123");
  canonical[2].set_description("multi\nline: \"quoted\"");
  canonical[3].set_description("");
  canonical[4].set_version(77);

  const std::string yaml = PoliciesToYaml(canonical);
  absl::StatusOr<std::vector<v1::Policy>> again = ParsePolicies(yaml, "out");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << yaml;
  ASSERT_EQ(again->size(), canonical.size());
  for (size_t i = 0; i < canonical.size(); ++i) {
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
        (*again)[i], canonical[i]))
        << (*again)[i].DebugString() << "\nvs\n"
        << canonical[i].DebugString();
  }
}

TEST(PoliciesToYamlTest, EmptySet) {
  const std::string yaml = PoliciesToYaml({});
  absl::StatusOr<std::vector<v1::Policy>> p = ParsePolicies(yaml, "out");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_TRUE(p->empty());
  EXPECT_THAT(yaml, HasSubstr("policies:"));
}

}  // namespace
}  // namespace sluice::policy
