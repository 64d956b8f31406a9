// SPDX-License-Identifier: Apache-2.0
#include "server/policy/policy_convert.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace sluice::policy {
namespace {

v1::Policy Parse(const std::string& text) {
  v1::Policy p;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &p)) << text;
  return p;
}

TEST(ToConfigTest, MinimalPolicyGetsDefaults) {
  absl::StatusOr<core::PolicyConfig> c =
      ToConfig(Parse(R"(name: "inventory")"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "inventory");
  EXPECT_EQ(c->call_timeout, absl::Seconds(1));
  EXPECT_FALSE(c->rate_limit.has_value());
  EXPECT_FALSE(c->concurrency.has_value());
  EXPECT_FALSE(c->breaker.has_value());
  EXPECT_EQ(c->fallback.strategy, core::FallbackStrategy::kNone);
  EXPECT_EQ(c->fallback.on_mask, 0u);
  EXPECT_EQ(c->on_store_failure, core::StoreFailureMode::kFailOpen);
  EXPECT_FALSE(c->shadow);
  EXPECT_FALSE(c->per_key);
  EXPECT_EQ(c->max_keys, 100000u);
}

TEST(ToConfigTest, RateLimitDefaults) {
  absl::StatusOr<core::PolicyConfig> c =
      ToConfig(Parse(R"(name: "a" rate_limit { rate: 50 })"));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->rate_limit.has_value());
  EXPECT_EQ(c->rate_limit->algorithm, core::RateAlgorithm::kTokenBucket);
  EXPECT_EQ(c->rate_limit->rate, 50);
  EXPECT_EQ(c->rate_limit->per, absl::Seconds(1));
  EXPECT_EQ(c->rate_limit->burst, 50);  // burst 0 means rate
  EXPECT_EQ(c->rate_limit->buckets, 10);
  EXPECT_EQ(c->rate_limit->scope, core::Scope::kLocal);
}

TEST(ToConfigTest, BreakerDefaults) {
  absl::StatusOr<core::PolicyConfig> c =
      ToConfig(Parse(R"(name: "a" breaker { consecutive_failures: 5 })"));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->breaker.has_value());
  const core::BreakerConfig& b = *c->breaker;
  EXPECT_EQ(b.consecutive_failures, 5u);
  EXPECT_EQ(b.failure_rate_threshold, 0);
  EXPECT_FALSE(b.slow_rule_enabled());
  EXPECT_EQ(b.window, absl::Seconds(10));
  EXPECT_EQ(b.minimum_calls, 20u);
  EXPECT_EQ(b.open_duration, absl::Seconds(15));
  EXPECT_EQ(b.max_open_duration, absl::Seconds(300));
  EXPECT_EQ(b.half_open_probes, 1u);
  EXPECT_EQ(b.successes_to_close, 1u);
  EXPECT_EQ(b.buckets, 10);
}

TEST(ToConfigTest, EverySettingIsMapped) {
  absl::StatusOr<core::PolicyConfig> c = ToConfig(Parse(R"(
    name: "full.set_1-x"
    call_timeout { seconds: 2 nanos: 500000000 }
    rate_limit { algorithm: SLIDING_WINDOW rate: 600 per { seconds: 60 }
                 scope: CLUSTER buckets: 60 }
    concurrency { max_in_flight: 7 scope: CLUSTER }
    breaker { failure_rate_threshold: 1 slow_call_duration { seconds: 1 }
              slow_call_rate_threshold: 0.8 window { seconds: 30 }
              minimum_calls: 5 open_duration { seconds: 20 }
              max_open_duration { seconds: 20 } half_open_probes: 1
              successes_to_close: 4 }
    fallback { strategy: CACHE payload: "{}" content_type: "application/json"
               on: [RATE_LIMITED, CIRCUIT_OPEN] cache_ttl { seconds: 30 }
               serve_on_failure: true }
    on_store_failure: FAIL_CLOSED
    shadow: true per_key: true max_keys: 10000000 version: 42
    description: "d"
  )"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->call_timeout, absl::Milliseconds(2500));
  EXPECT_EQ(c->rate_limit->algorithm, core::RateAlgorithm::kSlidingWindow);
  EXPECT_EQ(c->rate_limit->per, absl::Minutes(1));
  EXPECT_EQ(c->rate_limit->scope, core::Scope::kCluster);
  EXPECT_EQ(c->rate_limit->buckets, 60);
  EXPECT_EQ(c->concurrency->max_in_flight, 7u);
  EXPECT_EQ(c->concurrency->scope, core::Scope::kCluster);
  EXPECT_EQ(c->breaker->failure_rate_threshold, 1);
  EXPECT_TRUE(c->breaker->slow_rule_enabled());
  EXPECT_EQ(c->breaker->window, absl::Seconds(30));
  EXPECT_EQ(c->breaker->minimum_calls, 5u);
  // Probes run one after another, so more successes than probes is fine.
  EXPECT_EQ(c->breaker->successes_to_close, 4u);
  EXPECT_EQ(c->fallback.strategy, core::FallbackStrategy::kCache);
  EXPECT_EQ(c->fallback.on_mask, (1u << 1) | (1u << 3));
  EXPECT_EQ(c->fallback.cache_ttl, absl::Seconds(30));
  EXPECT_TRUE(c->fallback.serve_on_failure);
  EXPECT_EQ(c->fallback.content_type, "application/json");
  EXPECT_EQ(c->on_store_failure, core::StoreFailureMode::kFailClosed);
  EXPECT_TRUE(c->shadow);
  EXPECT_TRUE(c->per_key);
  EXPECT_EQ(c->max_keys, 10000000u);
  EXPECT_EQ(c->version, 42u);
  EXPECT_EQ(c->description, "d");
}

TEST(ToConfigTest, OtherEnumValues) {
  absl::StatusOr<core::PolicyConfig> c = ToConfig(Parse(R"(
    name: "a" rate_limit { algorithm: TOKEN_BUCKET rate: 1 scope: LOCAL }
    fallback { strategy: STATIC payload: "x" on: [CONCURRENCY_LIMITED,
               PROBE_LIMIT, STORE_UNAVAILABLE] }
    on_store_failure: LOCAL)"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rate_limit->algorithm, core::RateAlgorithm::kTokenBucket);
  EXPECT_EQ(c->fallback.strategy, core::FallbackStrategy::kStatic);
  EXPECT_EQ(c->fallback.on_mask, (1u << 2) | (1u << 4) | (1u << 6));
  EXPECT_EQ(c->on_store_failure, core::StoreFailureMode::kLocal);

  c = ToConfig(Parse(R"(name: "a" fallback { strategy: DEFAULT }
                        on_store_failure: FAIL_OPEN)"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->fallback.strategy, core::FallbackStrategy::kDefault);
  EXPECT_EQ(c->on_store_failure, core::StoreFailureMode::kFailOpen);

  c = ToConfig(Parse(R"(name: "a" fallback { strategy: NONE })"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->fallback.strategy, core::FallbackStrategy::kNone);
}

TEST(ToConfigTest, SlidingWindowBoundariesAccepted) {
  // per / buckets exactly 1ms, rate exactly 1.
  EXPECT_TRUE(ToConfig(Parse(R"(name: "a" rate_limit {
      algorithm: SLIDING_WINDOW rate: 1 per { nanos: 10000000 } })"))
                  .ok());
  // A fractional token bucket rate is fine once the burst holds a token.
  EXPECT_TRUE(
      ToConfig(Parse(R"(name: "a" rate_limit { rate: 0.5 burst: 1 })")).ok());
  EXPECT_TRUE(
      ToConfig(Parse(absl::StrCat("name: \"", std::string(256, 'n'), "\"")))
          .ok());
}

struct BadCase {
  const char* text;
  const char* message;
};

class ToConfigErrorTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(ToConfigErrorTest, NamesPolicyFieldRuleAndValue) {
  absl::StatusOr<core::PolicyConfig> c = ToConfig(Parse(GetParam().text));
  ASSERT_FALSE(c.ok()) << GetParam().text;
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(c.status().message()), GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    Rules, ToConfigErrorTest,
    ::testing::Values(
        BadCase{R"(name: "")", R"(policy "": name is required)"},
        BadCase{R"(name: "a b")",
                R"(policy "a b": name must match [A-Za-z0-9._-]+, got "a b")"},
        BadCase{R"(name: "a/b")",
                R"(policy "a/b": name must match [A-Za-z0-9._-]+, got "a/b")"},
        BadCase{R"(name: "a" call_timeout {})",
                R"(policy "a": call_timeout must be > 0, got 0)"},
        BadCase{R"(name: "a" call_timeout { seconds: -1 })",
                R"(policy "a": call_timeout must be > 0, got -1s)"},
        BadCase{
            R"(name: "a" call_timeout { seconds: 1 nanos: -5 })",
            R"(policy "a": call_timeout must be a valid duration, got {seconds: 1, nanos: -5})"},
        BadCase{R"(name: "a" rate_limit {})",
                R"(policy "a": rate_limit.rate must be > 0 and finite, got 0)"},
        BadCase{
            R"(name: "a" rate_limit { rate: -3 })",
            R"(policy "a": rate_limit.rate must be > 0 and finite, got -3)"},
        BadCase{
            R"(name: "a" rate_limit { rate: inf })",
            R"(policy "a": rate_limit.rate must be > 0 and finite, got inf)"},
        BadCase{
            R"(name: "a" rate_limit { rate: nan })",
            R"(policy "a": rate_limit.rate must be > 0 and finite, got nan)"},
        BadCase{R"(name: "a" rate_limit { rate: 1 per {} })",
                R"(policy "a": rate_limit.per must be > 0, got 0)"},
        BadCase{
            R"(name: "a" rate_limit { rate: 1 burst: -1 })",
            R"(policy "a": rate_limit.burst must be >= 0 and finite, got -1)"},
        BadCase{
            R"(name: "a" rate_limit { rate: 5 burst: 0.5 })",
            R"(policy "a": rate_limit.burst must be >= 1 for TOKEN_BUCKET (it defaults to rate), got 0.5)"},
        BadCase{
            R"(name: "a" rate_limit { rate: 0.25 })",
            R"(policy "a": rate_limit.burst must be >= 1 for TOKEN_BUCKET (it defaults to rate), got 0.25)"},
        BadCase{
            R"(name: "a" rate_limit { rate: 1 buckets: 1001 })",
            R"(policy "a": rate_limit.buckets must be at most 1000, got 1001)"},
        BadCase{
            R"(name: "a" rate_limit { algorithm: SLIDING_WINDOW rate: 0.5 })",
            R"(policy "a": rate_limit.rate must be a whole number >= 1 for SLIDING_WINDOW, got 0.5)"},
        BadCase{
            R"(name: "a" rate_limit { algorithm: SLIDING_WINDOW rate: 2.5 })",
            R"(policy "a": rate_limit.rate must be a whole number >= 1 for SLIDING_WINDOW, got 2.5)"},
        BadCase{
            R"(name: "a" rate_limit { algorithm: SLIDING_WINDOW rate: 1e16 })",
            R"(policy "a": rate_limit.rate must be at most 1e+15 for SLIDING_WINDOW, got 1e+16)"},
        BadCase{
            R"(name: "a" rate_limit { algorithm: SLIDING_WINDOW rate: 5
                     per { nanos: 5000000 } })",
            R"(policy "a": rate_limit.per divided by rate_limit.buckets (10) must be >= 1ms for SLIDING_WINDOW, got 5ms)"},
        BadCase{
            R"(name: "a" rate_limit { rate: 1 algorithm: 7 })",
            R"(policy "a": rate_limit.algorithm must be TOKEN_BUCKET or SLIDING_WINDOW, got 7)"},
        BadCase{
            R"(name: "a" rate_limit { rate: 1 scope: 9 })",
            R"(policy "a": rate_limit.scope must be LOCAL or CLUSTER, got 9)"},
        BadCase{R"(name: "a" concurrency {})",
                R"(policy "a": concurrency.max_in_flight must be >= 1, got 0)"},
        BadCase{
            R"(name: "a" concurrency { max_in_flight: 1 scope: 5 })",
            R"(policy "a": concurrency.scope must be LOCAL or CLUSTER, got 5)"},
        BadCase{
            R"(name: "a" breaker { window { seconds: 5 } })",
            R"(policy "a": breaker needs at least one rule (consecutive_failures, failure_rate_threshold, slow_call_rate_threshold or latency_baseline))"},
        BadCase{
            R"(name: "inventory" breaker { failure_rate_threshold: 1.5 })",
            R"(policy "inventory": breaker.failure_rate_threshold must be in (0, 1], got 1.5)"},
        BadCase{
            R"(name: "a" breaker { failure_rate_threshold: -0.1 })",
            R"(policy "a": breaker.failure_rate_threshold must be in (0, 1], got -0.1)"},
        BadCase{
            R"(name: "a" breaker { failure_rate_threshold: nan })",
            R"(policy "a": breaker.failure_rate_threshold must be in (0, 1], got nan)"},
        BadCase{
            R"(name: "a" breaker { slow_call_rate_threshold: 2
                     slow_call_duration { seconds: 1 } })",
            R"(policy "a": breaker.slow_call_rate_threshold must be in (0, 1], got 2)"},
        BadCase{
            R"(name: "a" breaker { slow_call_rate_threshold: 0.5 })",
            R"(policy "a": breaker.slow_call_rate_threshold requires breaker.slow_call_duration, got 0.5)"},
        BadCase{
            R"(name: "a" breaker { consecutive_failures: 1
                     slow_call_duration { seconds: 1 } })",
            R"(policy "a": breaker.slow_call_duration requires breaker.slow_call_rate_threshold, got 1s)"},
        BadCase{
            R"(name: "a" breaker { consecutive_failures: 1
                     slow_call_duration { seconds: -1 } })",
            R"(policy "a": breaker.slow_call_duration must be >= 0, got -1s)"},
        BadCase{R"(name: "a" breaker { consecutive_failures: 1 window {} })",
                R"(policy "a": breaker.window must be > 0, got 0)"},
        BadCase{
            R"(name: "a" breaker { consecutive_failures: 1
                     window { nanos: 5000000 } })",
            R"(policy "a": breaker.window must be at least 10ms (10 buckets of >= 1ms), got 5ms)"},
        BadCase{R"(name: "a" breaker { consecutive_failures: 1
                     open_duration { seconds: -1 } })",
                R"(policy "a": breaker.open_duration must be > 0, got -1s)"},
        BadCase{R"(name: "a" breaker { consecutive_failures: 1
                     max_open_duration {} })",
                R"(policy "a": breaker.max_open_duration must be > 0, got 0)"},
        BadCase{
            R"(name: "a" breaker { consecutive_failures: 1
                     max_open_duration { seconds: 10 } })",
            R"(policy "a": breaker.max_open_duration must be >= breaker.open_duration (15s), got 10s)"},
        BadCase{
            R"(name: "a" fallback {})",
            R"(policy "a": fallback.strategy must be set to NONE, DEFAULT, STATIC or CACHE)"},
        BadCase{
            R"(name: "a" fallback { strategy: 9 })",
            R"(policy "a": fallback.strategy must be NONE, DEFAULT, STATIC or CACHE, got 9)"},
        BadCase{R"(name: "a" fallback { strategy: STATIC })",
                R"(policy "a": fallback.payload is required for STATIC)"},
        BadCase{
            R"(name: "a" fallback { strategy: NONE payload: "abc" })",
            R"(policy "a": fallback.payload is only used by STATIC and CACHE, got 3 bytes)"},
        BadCase{
            R"(name: "a" fallback { strategy: DEFAULT
                     on: [RATE_LIMITED, SHADOW] })",
            R"(policy "a": fallback.on[1] must be a refusal reason (RATE_LIMITED, CONCURRENCY_LIMITED, CIRCUIT_OPEN, PROBE_LIMIT, STORE_UNAVAILABLE, ADAPTIVE_THROTTLED), got SHADOW)"},
        BadCase{
            R"(name: "a" fallback { strategy: DEFAULT
                     on: [UNKNOWN_DEPENDENCY] })",
            R"(policy "a": fallback.on[0] must be a refusal reason (RATE_LIMITED, CONCURRENCY_LIMITED, CIRCUIT_OPEN, PROBE_LIMIT, STORE_UNAVAILABLE, ADAPTIVE_THROTTLED), got UNKNOWN_DEPENDENCY)"},
        BadCase{
            R"(name: "a" fallback { strategy: DEFAULT
                     on: [REASON_UNSPECIFIED] })",
            R"(policy "a": fallback.on[0] must be a refusal reason (RATE_LIMITED, CONCURRENCY_LIMITED, CIRCUIT_OPEN, PROBE_LIMIT, STORE_UNAVAILABLE, ADAPTIVE_THROTTLED), got REASON_UNSPECIFIED)"},
        BadCase{
            R"(name: "a" fallback { strategy: STATIC payload: "x"
                     cache_ttl { seconds: 5 } })",
            R"(policy "a": fallback.cache_ttl is only used by CACHE, got 5s)"},
        BadCase{R"(name: "a" fallback { strategy: CACHE })",
                R"(policy "a": fallback.cache_ttl is required for CACHE)"},
        BadCase{R"(name: "a" fallback { strategy: CACHE cache_ttl {} })",
                R"(policy "a": fallback.cache_ttl must be > 0, got 0)"},
        BadCase{
            R"(name: "a" on_store_failure: 9)",
            R"(policy "a": on_store_failure must be FAIL_OPEN, LOCAL or FAIL_CLOSED, got 9)"},
        BadCase{
            R"(name: "a" max_keys: 10000001)",
            R"(policy "a": max_keys must be at most 10000000, got 10000001)"},
        BadCase{
            R"(name: "a" envoy_descriptors { entries { key: "k" value: "v" } })",
            R"(policy "a": envoy_descriptors[0].domain must be 1 to 256 bytes, got "")"},
        BadCase{
            R"(name: "a" envoy_descriptors { domain: "edge" })",
            R"(policy "a": envoy_descriptors[0].entries must have 1 to 8 entries, got 0)"},
        BadCase{
            R"(name: "a" envoy_descriptors { domain: "edge" entries { key: "k" value: "v" } entries { value: "w" } })",
            R"(policy "a": envoy_descriptors[0].entries[1].key must be 1 to 256 bytes, got "")"},
        BadCase{
            R"(name: "a" envoy_descriptors { domain: "edge" entries { key: "tenant" } })",
            R"(policy "a": envoy_descriptors[0].entries[0].value is empty, which matches any value of "tenant" and gives each value its own limit; that needs per_key: true)"},
        BadCase{
            R"(name: "a" envoy_descriptors { domain: "edge" entries { key: "k" value: "v" } } envoy_descriptors { domain: "edge" entries { key: "k" value: "v" } })",
            R"(policy "a": envoy_descriptors[1] repeats envoy_descriptors[0])"},
        // fallback.http_status and http_routes
        BadCase{
            R"(name: "a" fallback { strategy: DEFAULT http_status: 199 })",
            R"(policy "a": fallback.http_status must be 0 (200) or in 200..599, got 199)"},
        BadCase{
            R"(name: "a" fallback { strategy: DEFAULT http_status: 600 })",
            R"(policy "a": fallback.http_status must be 0 (200) or in 200..599, got 600)"},
        BadCase{
            R"(name: "a" http_routes { path_prefix: "api/" })",
            R"(policy "a": http_routes[0].path_prefix must start with "/", got "api/")"},
        BadCase{
            R"(name: "a" http_routes { host: "api.example.com:8080" })",
            R"(policy "a": http_routes[0].host must be a host name without port (letters, digits, '-', '.'), or "*." followed by one, got "api.example.com:8080")"},
        BadCase{
            R"(name: "a" http_routes { host: "*example.com" })",
            R"(policy "a": http_routes[0].host must be a host, or "*." followed by a domain, got "*example.com")"},
        BadCase{
            R"(name: "a" http_routes { methods: ["get"] })",
            R"(policy "a": http_routes[0].methods[0] must be an upper-case HTTP method, e.g. "GET", got "get")"},
        BadCase{
            R"(name: "a" http_routes { headers { key: "x tenant" value: "" } })",
            R"(policy "a": http_routes[0].headers["x tenant"] must be an HTTP header name (a token), got "x tenant")"},
        BadCase{
            R"(name: "a" http_routes { headers { key: "X-A" value: "1" }
                                          headers { key: "x-a" value: "1" } })",
            R"(policy "a": http_routes[0].headers names a header twice (names are case-insensitive), got "x-a")"},
        BadCase{
            R"(name: "a" http_routes { key_header: "x-user" })",
            R"(policy "a": http_routes[0].key_header gives each value of the header its own limit; that needs per_key: true)"},
        BadCase{
            R"(name: "a" http_routes { path_prefix: "/p" methods: ["GET", "POST"] }
                         http_routes { path_prefix: "/p" methods: ["POST", "GET"] })",
            R"(policy "a": http_routes[1] repeats http_routes[0])"},
        BadCase{
            R"(name: "a" per_key: true
               http_routes { path_prefix: "/p" methods: ["GET"] key_header: "x-user" }
               http_routes { path_prefix: "/p" headers { key: "x-t" value: "" } })",
            R"(policy "a": http_routes[1] ties with http_routes[0] (a request can match both, equally specific) but names another key_header)"},
        // adaptive_throttle
        BadCase{R"(name: "a" adaptive_throttle { window {} })",
                R"(policy "a": adaptive_throttle.window must be > 0, got 0)"},
        BadCase{
            R"(name: "a" adaptive_throttle { window { nanos: 5000000 } })",
            R"(policy "a": adaptive_throttle.window must be at least 10ms (10 buckets of >= 1ms), got 5ms)"},
        BadCase{
            R"(name: "a" adaptive_throttle { window { seconds: 86401 } })",
            R"(policy "a": adaptive_throttle.window must be at most 24h, got 24h1s)"},
        BadCase{
            R"(name: "a" adaptive_throttle { window { seconds: 315576000001 } })",
            R"(policy "a": adaptive_throttle.window must be a valid duration, got {seconds: 315576000001, nanos: 0})"},
        BadCase{R"(name: "a" adaptive_throttle { k: 0.5 })",
                R"(policy "a": adaptive_throttle.k must be >= 1 and finite, got 0.5)"},
        BadCase{R"(name: "a" adaptive_throttle { k: -2 })",
                R"(policy "a": adaptive_throttle.k must be >= 1 and finite, got -2)"},
        BadCase{R"(name: "a" adaptive_throttle { k: nan })",
                R"(policy "a": adaptive_throttle.k must be >= 1 and finite, got nan)"},
        BadCase{R"(name: "a" adaptive_throttle { k: inf })",
                R"(policy "a": adaptive_throttle.k must be >= 1 and finite, got inf)"},
        // adaptive_concurrency
        BadCase{
            R"(name: "a" adaptive_concurrency { min_limit: 20 max_limit: 10 })",
            R"(policy "a": adaptive_concurrency.max_limit must be >= adaptive_concurrency.min_limit (20), got 10)"},
        BadCase{
            R"(name: "a" adaptive_concurrency { min_limit: 2000 })",
            R"(policy "a": adaptive_concurrency.min_limit must be <= adaptive_concurrency.max_limit (default 1000; set max_limit too), got 2000)"},
        BadCase{
            R"(name: "a" adaptive_concurrency { window { nanos: 50000000 } })",
            R"(policy "a": adaptive_concurrency.window must be at least 100ms, got 50ms)"},
        BadCase{
            R"(name: "a" adaptive_concurrency { max_limit: 10000001 })",
            R"(policy "a": adaptive_concurrency.max_limit must be at most 10000000, got 10000001)"},
        BadCase{
            R"(name: "a" adaptive_concurrency { min_limit: 5 initial_limit: 4 })",
            R"(policy "a": adaptive_concurrency.initial_limit must be in [min_limit, max_limit] = [5, 1000], got 4)"},
        BadCase{
            R"(name: "a" adaptive_concurrency { max_limit: 50 initial_limit: 51 })",
            R"(policy "a": adaptive_concurrency.initial_limit must be in [min_limit, max_limit] = [1, 50], got 51)"},
        BadCase{
            R"(name: "a" adaptive_concurrency { tolerance: 1 })",
            R"(policy "a": adaptive_concurrency.tolerance must be > 1 and finite, got 1)"},
        BadCase{
            R"(name: "a" adaptive_concurrency { tolerance: 0.5 })",
            R"(policy "a": adaptive_concurrency.tolerance must be > 1 and finite, got 0.5)"},
        BadCase{
            R"(name: "a" adaptive_concurrency { tolerance: nan })",
            R"(policy "a": adaptive_concurrency.tolerance must be > 1 and finite, got nan)"},
        BadCase{
            R"(name: "a" adaptive_concurrency { tolerance: inf })",
            R"(policy "a": adaptive_concurrency.tolerance must be > 1 and finite, got inf)"},
        BadCase{
            R"(name: "a" adaptive_concurrency { window { seconds: -1 } })",
            R"(policy "a": adaptive_concurrency.window must be > 0, got -1s)"},
        BadCase{
            R"(name: "a" adaptive_concurrency { window { seconds: 100000 }
                     baseline_window { seconds: 200000 } })",
            R"(policy "a": adaptive_concurrency.window must be at most 24h, got 27h46m40s)"},
        BadCase{
            R"(name: "a" adaptive_concurrency { baseline_window {} })",
            R"(policy "a": adaptive_concurrency.baseline_window must be > 0, got 0)"},
        BadCase{
            R"(name: "a" adaptive_concurrency { baseline_window { seconds: 90000 } })",
            R"(policy "a": adaptive_concurrency.baseline_window must be at most 24h, got 25h)"},
        BadCase{
            R"(name: "a" adaptive_concurrency { window { seconds: 2 }
                     baseline_window { seconds: 1 } })",
            R"(policy "a": adaptive_concurrency.baseline_window must be >= adaptive_concurrency.window (2s), got 1s)"},
        BadCase{
            R"(name: "a" adaptive_concurrency { window { seconds: 90 } })",
            R"(policy "a": adaptive_concurrency.baseline_window must be >= adaptive_concurrency.window (1m30s), got 1m)"},
        // breaker.latency_baseline
        BadCase{
            R"(name: "a" breaker { latency_baseline {} })",
            R"(policy "a": breaker.latency_baseline needs at least one of factor, deviations or success_rate_drop)"},
        BadCase{
            R"(name: "a" breaker { latency_baseline { factor: 1 } })",
            R"(policy "a": breaker.latency_baseline.factor must be > 1 and finite, got 1)"},
        BadCase{
            R"(name: "a" breaker { latency_baseline { factor: -3 } })",
            R"(policy "a": breaker.latency_baseline.factor must be > 1 and finite, got -3)"},
        BadCase{
            R"(name: "a" breaker { latency_baseline { factor: inf } })",
            R"(policy "a": breaker.latency_baseline.factor must be > 1 and finite, got inf)"},
        BadCase{
            R"(name: "a" breaker { latency_baseline { factor: nan } })",
            R"(policy "a": breaker.latency_baseline.factor must be > 1 and finite, got nan)"},
        BadCase{
            R"(name: "a" breaker { latency_baseline { deviations: -1 } })",
            R"(policy "a": breaker.latency_baseline.deviations must be > 0 and finite, got -1)"},
        BadCase{
            R"(name: "a" breaker { latency_baseline { deviations: nan } })",
            R"(policy "a": breaker.latency_baseline.deviations must be > 0 and finite, got nan)"},
        BadCase{
            R"(name: "a" breaker { latency_baseline { success_rate_drop: 1.5 } })",
            R"(policy "a": breaker.latency_baseline.success_rate_drop must be in (0, 1], got 1.5)"},
        BadCase{
            R"(name: "a" breaker { latency_baseline { success_rate_drop: -0.1 } })",
            R"(policy "a": breaker.latency_baseline.success_rate_drop must be in (0, 1], got -0.1)"},
        BadCase{
            R"(name: "a" breaker { latency_baseline { success_rate_drop: nan } })",
            R"(policy "a": breaker.latency_baseline.success_rate_drop must be in (0, 1], got nan)"},
        BadCase{
            R"(name: "a" breaker { latency_baseline { factor: 2
                     warmup_windows: 100001 } })",
            R"(policy "a": breaker.latency_baseline.warmup_windows must be at most 100000, got 100001)"},
        BadCase{
            R"(name: "a" breaker { latency_baseline { factor: 2
                     history_windows: 100001 } })",
            R"(policy "a": breaker.latency_baseline.history_windows must be at most 100000, got 100001)"},
        // The baseline rule is validated within the breaker.
        BadCase{
            R"(name: "a" breaker { consecutive_failures: 3
                     window {} latency_baseline { factor: 2 } })",
            R"(policy "a": breaker.window must be > 0, got 0)"}));

TEST(ToConfigTest, EnvoyDescriptorsAreMappedAndRoundTrip) {
  absl::StatusOr<core::PolicyConfig> c = ToConfig(Parse(R"(
      name: "search" per_key: true rate_limit_headers: true
      envoy_descriptors {
        domain: "edge"
        entries { key: "destination_cluster" value: "search" }
        entries { key: "tenant" }
      })"));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->envoy_descriptors.size(), 1u);
  EXPECT_EQ(c->envoy_descriptors[0].domain, "edge");
  ASSERT_EQ(c->envoy_descriptors[0].entries.size(), 2u);
  EXPECT_EQ(c->envoy_descriptors[0].entries[1].key, "tenant");
  EXPECT_EQ(c->envoy_descriptors[0].entries[1].value, "");
  EXPECT_TRUE(c->rate_limit_headers);
  EXPECT_EQ(EnvoyDescriptorString(c->envoy_descriptors[0]),
            R"("edge" ["destination_cluster": "search", "tenant": *])");
  absl::StatusOr<core::PolicyConfig> again = ToConfig(FromConfig(*c));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(SameEnvoyDescriptor(again->envoy_descriptors[0],
                                  c->envoy_descriptors[0]));
  EXPECT_TRUE(again->rate_limit_headers);
}

TEST(ToConfigTest, HttpRoutesAreNormalisedAndRoundTrip) {
  absl::StatusOr<core::PolicyConfig> c = ToConfig(Parse(R"(
      name: "payments" per_key: true
      fallback { strategy: STATIC payload: "{}" http_status: 203 }
      http_routes {
        host: "API.Example.com" path_prefix: "/api/payments/"
        methods: ["POST", "GET", "POST"]
        headers { key: "X-Tenant" value: "" }
        headers { key: "x-canary" value: "1" }
        key_header: "X-User"
      }
      http_routes { host: "*.example.com" })"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->fallback.http_status, 203);
  ASSERT_EQ(c->http_routes.size(), 2u);
  const core::HttpRouteConfig& r = c->http_routes[0];
  EXPECT_EQ(r.host, "api.example.com");
  EXPECT_EQ(r.path_prefix, "/api/payments/");
  EXPECT_THAT(r.methods, testing::ElementsAre("GET", "POST"));
  EXPECT_THAT(r.headers,
              testing::ElementsAre(testing::Pair("x-canary", "1"),
                                   testing::Pair("x-tenant", "")));
  EXPECT_EQ(r.key_header, "x-user");

  const v1::Policy canonical = FromConfig(*c);
  EXPECT_EQ(canonical.fallback().http_status(), 203u);
  absl::StatusOr<core::PolicyConfig> again = ToConfig(canonical);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->http_routes.size(), 2u);
  EXPECT_TRUE(again->http_routes[0].SameMatch(r));
  EXPECT_EQ(again->http_routes[0].key_header, "x-user");
  EXPECT_EQ(again->http_routes[1].host, "*.example.com");
  EXPECT_EQ(again->digest, c->digest);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
      FromConfig(*again), canonical));
  EXPECT_TRUE(CanonicalHttpRoute(canonical.http_routes(0)).SameMatch(r));
}

TEST(ToConfigTest, FallbackHttpStatusDefaultsTo200AndKeepsTheDigest) {
  absl::StatusOr<core::PolicyConfig> unset =
      ToConfig(Parse(R"(name: "a" fallback { strategy: DEFAULT })"));
  absl::StatusOr<core::PolicyConfig> explicit_200 = ToConfig(
      Parse(R"(name: "a" fallback { strategy: DEFAULT http_status: 200 })"));
  ASSERT_TRUE(unset.ok()) << unset.status();
  ASSERT_TRUE(explicit_200.ok()) << explicit_200.status();
  EXPECT_EQ(unset->fallback.http_status, 200);
  // The same policy either way, so the same digest as before the field.
  EXPECT_EQ(unset->digest, explicit_200->digest);
  EXPECT_EQ(FromConfig(*unset).fallback().http_status(), 0u);
}

TEST(HttpRouteTest, MoreSpecificRoutesRankHigher) {
  auto route = [](const std::string& text) {
    absl::StatusOr<core::PolicyConfig> c = ToConfig(
        Parse(absl::StrCat(R"(name: "a" http_routes { )", text, " }")));
    EXPECT_TRUE(c.ok()) << c.status();
    return c->http_routes.at(0);
  };
  // A longer path_prefix beats any host and condition.
  EXPECT_LT(route(R"(host: "a.example.com" methods: ["GET"] path_prefix: "/a")")
                .specificity(),
            route(R"(path_prefix: "/ab")").specificity());
  // Exact host over wildcard over any.
  EXPECT_LT(route(R"(host: "*.example.com")").specificity(),
            route(R"(host: "a.example.com")").specificity());
  EXPECT_LT(route("").specificity(), route(R"(host: "*.example.com")").specificity());
  // A longer wildcard over a shorter one.
  EXPECT_LT(route(R"(host: "*.example.com")").specificity(),
            route(R"(host: "*.eu.example.com")").specificity());
  // Then more conditions.
  EXPECT_LT(route(R"(methods: ["GET"])").specificity(),
            route(R"(methods: ["GET"] headers { key: "x" value: "" })")
                .specificity());
}

TEST(HttpRouteTest, OverlapNeedsAPathHostMethodAndHeadersBothAccept) {
  auto route = [](const std::string& text) {
    absl::StatusOr<core::PolicyConfig> c = ToConfig(
        Parse(absl::StrCat(R"(name: "a" http_routes { )", text, " }")));
    EXPECT_TRUE(c.ok()) << c.status();
    return c->http_routes.at(0);
  };
  EXPECT_TRUE(route(R"(path_prefix: "/a")").Overlaps(route(R"(path_prefix: "/a/b")")));
  EXPECT_FALSE(route(R"(path_prefix: "/a")").Overlaps(route(R"(path_prefix: "/b")")));
  EXPECT_TRUE(route(R"(host: "*.example.com")").Overlaps(route(R"(host: "x.example.com")")));
  EXPECT_FALSE(route(R"(host: "*.example.com")").Overlaps(route(R"(host: "example.com")")));
  EXPECT_FALSE(route(R"(host: "a.example.com")").Overlaps(route(R"(host: "b.example.com")")));
  EXPECT_FALSE(route(R"(methods: ["GET"])").Overlaps(route(R"(methods: ["POST"])")));
  EXPECT_TRUE(route(R"(methods: ["GET", "PUT"])").Overlaps(route(R"(methods: ["PUT"])")));
  EXPECT_FALSE(route(R"(headers { key: "x" value: "1" })")
                   .Overlaps(route(R"(headers { key: "x" value: "2" })")));
  EXPECT_TRUE(route(R"(headers { key: "x" value: "1" })")
                  .Overlaps(route(R"(headers { key: "x" value: "" })")));
}

TEST(ToConfigTest, NameLongerThan256BytesIsRejected) {
  const std::string name(257, 'n');
  absl::StatusOr<core::PolicyConfig> c =
      ToConfig(Parse(absl::StrCat("name: \"", name, "\"")));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(
      c.status().message(),
      absl::StrCat("policy \"", std::string(64, 'n'),
                   "\"...: name must be at most 256 bytes, got 257 bytes"));
}

TEST(ToConfigTest, PayloadOver64KiBIsRejected) {
  v1::Policy p = Parse(R"(name: "a" fallback { strategy: STATIC })");
  p.mutable_fallback()->set_payload(std::string(64 * 1024, 'x'));
  EXPECT_TRUE(ToConfig(p).ok());
  p.mutable_fallback()->set_payload(std::string(64 * 1024 + 1, 'x'));
  absl::StatusOr<core::PolicyConfig> c = ToConfig(p);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "policy \"a\": fallback.payload must be at most 65536 bytes, got "
            "65537 bytes");
}

TEST(ToConfigTest, AdaptiveBlocksAreAbsentUnlessGiven) {
  absl::StatusOr<core::PolicyConfig> c =
      ToConfig(Parse(R"(name: "a" breaker { consecutive_failures: 5 })"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->adaptive_throttle.has_value());
  EXPECT_FALSE(c->adaptive_concurrency.has_value());
  EXPECT_FALSE(c->breaker->latency_baseline.has_value());
  const v1::Policy out = FromConfig(*c);
  EXPECT_FALSE(out.has_adaptive_throttle());
  EXPECT_FALSE(out.has_adaptive_concurrency());
  EXPECT_FALSE(out.breaker().has_latency_baseline());
}

TEST(ToConfigTest, AdaptiveThrottleDefaults) {
  absl::StatusOr<core::PolicyConfig> c =
      ToConfig(Parse(R"(name: "a" adaptive_throttle {})"));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->adaptive_throttle.has_value());
  EXPECT_EQ(c->adaptive_throttle->window, absl::Seconds(10));
  EXPECT_EQ(c->adaptive_throttle->k, 2);
  EXPECT_EQ(c->adaptive_throttle->minimum_requests, 20u);
  EXPECT_EQ(c->adaptive_throttle->buckets, 10);
}

TEST(ToConfigTest, AdaptiveThrottleSettings) {
  absl::StatusOr<core::PolicyConfig> c = ToConfig(Parse(R"(
      name: "a" adaptive_throttle { window { nanos: 10000000 } k: 1
                                    minimum_requests: 3 })"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->adaptive_throttle->window, absl::Milliseconds(10));
  EXPECT_EQ(c->adaptive_throttle->k, 1);  // the bound itself is allowed
  EXPECT_EQ(c->adaptive_throttle->minimum_requests, 3u);

  c = ToConfig(Parse(
      R"(name: "a" adaptive_throttle { window { seconds: 86400 } k: 1.25 })"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->adaptive_throttle->window, absl::Hours(24));
  EXPECT_EQ(c->adaptive_throttle->k, 1.25);
}

TEST(ToConfigTest, AdaptiveConcurrencyDefaults) {
  absl::StatusOr<core::PolicyConfig> c =
      ToConfig(Parse(R"(name: "a" adaptive_concurrency {})"));
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->adaptive_concurrency.has_value());
  const core::AdaptiveConcurrencyConfig& a = *c->adaptive_concurrency;
  EXPECT_EQ(a.min_limit, 1u);
  EXPECT_EQ(a.max_limit, 1000u);
  EXPECT_EQ(a.initial_limit, 10u);
  EXPECT_EQ(a.tolerance, 1.3);
  EXPECT_EQ(a.window, absl::Seconds(1));
  EXPECT_EQ(a.minimum_samples, 10u);
  EXPECT_EQ(a.baseline_window, absl::Seconds(60));
}

TEST(ToConfigTest, AdaptiveConcurrencyInitialLimitDefaultsWithinBounds) {
  auto initial = [](const std::string& block) -> uint32_t {
    absl::StatusOr<core::PolicyConfig> c = ToConfig(
        Parse(absl::StrCat(R"(name: "a" adaptive_concurrency { )", block,
                           " }")));
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? c->adaptive_concurrency->initial_limit : 0;
  };
  EXPECT_EQ(initial("min_limit: 4"), 40u);
  // min_limit x 10 above max_limit: clamped to it.
  EXPECT_EQ(initial("min_limit: 4 max_limit: 25"), 25u);
  EXPECT_EQ(initial("min_limit: 7 max_limit: 7"), 7u);
  // No overflow of min_limit x 10.
  EXPECT_EQ(initial("min_limit: 9000000 max_limit: 10000000"), 10000000u);
  // Given, the bounds themselves are allowed.
  EXPECT_EQ(initial("min_limit: 5 initial_limit: 5"), 5u);
  EXPECT_EQ(initial("max_limit: 50 initial_limit: 50"), 50u);
}

TEST(ToConfigTest, AdaptiveConcurrencySettings) {
  absl::StatusOr<core::PolicyConfig> c = ToConfig(Parse(R"(
      name: "a" adaptive_concurrency {
        min_limit: 2 max_limit: 300 initial_limit: 17 tolerance: 1.1
        window { nanos: 500000000 } minimum_samples: 1
        baseline_window { nanos: 500000000 } })"));
  ASSERT_TRUE(c.ok()) << c.status();
  const core::AdaptiveConcurrencyConfig& a = *c->adaptive_concurrency;
  EXPECT_EQ(a.min_limit, 2u);
  EXPECT_EQ(a.max_limit, 300u);
  EXPECT_EQ(a.initial_limit, 17u);
  EXPECT_EQ(a.tolerance, 1.1);
  EXPECT_EQ(a.window, absl::Milliseconds(500));
  EXPECT_EQ(a.minimum_samples, 1u);
  // baseline_window == window is the bound, allowed.
  EXPECT_EQ(a.baseline_window, absl::Milliseconds(500));
}

TEST(ToConfigTest, LatencyBaselineDefaultsAndSettings) {
  absl::StatusOr<core::PolicyConfig> c = ToConfig(
      Parse(R"(name: "a" breaker { latency_baseline { factor: 2 } })"));
  ASSERT_TRUE(c.ok()) << c.status();
  // The baseline alone is a breaker rule.
  ASSERT_TRUE(c->breaker->latency_baseline.has_value());
  const core::LatencyBaselineConfig& b = *c->breaker->latency_baseline;
  EXPECT_EQ(b.factor, 2);
  EXPECT_EQ(b.deviations, 0);
  EXPECT_EQ(b.success_rate_drop, 0);
  EXPECT_EQ(b.warmup_windows, 5u);
  EXPECT_EQ(b.history_windows, 30u);

  c = ToConfig(Parse(R"(name: "a" breaker { latency_baseline {
      deviations: 0.5 warmup_windows: 1 history_windows: 1 } })"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->breaker->latency_baseline->deviations, 0.5);
  EXPECT_EQ(c->breaker->latency_baseline->warmup_windows, 1u);
  EXPECT_EQ(c->breaker->latency_baseline->history_windows, 1u);

  c = ToConfig(Parse(R"(name: "a" breaker { latency_baseline {
      success_rate_drop: 1 } })"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->breaker->latency_baseline->success_rate_drop, 1);
}

TEST(ToConfigTest, AdaptiveThrottledIsAFallbackReason) {
  absl::StatusOr<core::PolicyConfig> c = ToConfig(Parse(R"(
      name: "a" adaptive_throttle {}
      fallback { strategy: DEFAULT on: [ADAPTIVE_THROTTLED] })"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->fallback.on_mask,
            1u << static_cast<int>(core::Reason::kAdaptiveThrottled));
}

TEST(FromConfigTest, AdaptiveBlocksRoundTripWithDefaultsWritten) {
  absl::StatusOr<core::PolicyConfig> c = ToConfig(Parse(R"(
      name: "a"
      adaptive_throttle { k: 3 }
      adaptive_concurrency { max_limit: 200 }
      breaker { latency_baseline { deviations: 3 success_rate_drop: 0.2 } })"));
  ASSERT_TRUE(c.ok()) << c.status();
  const v1::Policy out = FromConfig(*c);
  EXPECT_EQ(out.adaptive_throttle().window().seconds(), 10);
  EXPECT_EQ(out.adaptive_throttle().k(), 3);
  EXPECT_EQ(out.adaptive_throttle().minimum_requests(), 20u);
  const v1::AdaptiveConcurrency& a = out.adaptive_concurrency();
  EXPECT_EQ(a.min_limit(), 1u);
  EXPECT_EQ(a.max_limit(), 200u);
  EXPECT_EQ(a.initial_limit(), 10u);
  EXPECT_EQ(a.tolerance(), 1.3);
  EXPECT_EQ(a.window().seconds(), 1);
  EXPECT_EQ(a.minimum_samples(), 10u);
  EXPECT_EQ(a.baseline_window().seconds(), 60);
  const v1::LatencyBaseline& b = out.breaker().latency_baseline();
  EXPECT_EQ(b.factor(), 0);
  EXPECT_EQ(b.deviations(), 3);
  EXPECT_EQ(b.success_rate_drop(), 0.2);
  EXPECT_EQ(b.warmup_windows(), 5u);
  EXPECT_EQ(b.history_windows(), 30u);

  absl::StatusOr<core::PolicyConfig> again = ToConfig(out);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
      FromConfig(*again), out));
}

// The digest is FNV-1a (64-bit) of the deterministic bytes: fixed values,
// not a per-process hash. Expected values computed independently.
TEST(PolicyDigestTest, IsFnv1aOfTheSerializedContent) {
  EXPECT_EQ(PolicyDigest(v1::Policy()), 0xcbf29ce484222325ULL);  // no bytes
  // name: "a" is the bytes 0a 01 61.
  EXPECT_EQ(PolicyDigest(Parse(R"(name: "a")")), 0x2fe85b189d1c0a8fULL);
  // The version is not content.
  EXPECT_EQ(PolicyDigest(Parse(R"(name: "a" version: 9)")),
            0x2fe85b189d1c0a8fULL);
}

constexpr char kDigestPolicy[] = R"(
    name: "inventory" description: "stock"
    rate_limit { rate: 100 }
    concurrency { max_in_flight: 50 }
    breaker { consecutive_failures: 5
              latency_baseline { factor: 2 deviations: 3 } }
    adaptive_throttle { k: 2 }
    adaptive_concurrency { max_limit: 200 }
    fallback { strategy: DEFAULT on: [ADAPTIVE_THROTTLED] })";

TEST(PolicyDigestTest, StableAcrossConversionsAndVersions) {
  absl::StatusOr<core::PolicyConfig> a = ToConfig(Parse(kDigestPolicy));
  absl::StatusOr<core::PolicyConfig> b = ToConfig(Parse(kDigestPolicy));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(a->digest, 0u);
  EXPECT_EQ(a->digest, b->digest);
  EXPECT_EQ(a->digest, PolicyDigest(FromConfig(*a)));

  // Defaults written out or left to the converter: the same policy.
  absl::StatusOr<core::PolicyConfig> canonical = ToConfig(FromConfig(*a));
  ASSERT_TRUE(canonical.ok()) << canonical.status();
  EXPECT_EQ(canonical->digest, a->digest);

  v1::Policy versioned = Parse(kDigestPolicy);
  versioned.set_version(17);
  absl::StatusOr<core::PolicyConfig> v = ToConfig(versioned);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->version, 17u);
  EXPECT_EQ(v->digest, a->digest);
}

TEST(PolicyDigestTest, AnyEditChangesIt) {
  absl::StatusOr<core::PolicyConfig> base = ToConfig(Parse(kDigestPolicy));
  ASSERT_TRUE(base.ok()) << base.status();
  const std::vector<std::string> edits = {
      R"(description: "stock2")",
      R"(rate_limit { rate: 101 })",
      R"(concurrency { max_in_flight: 51 })",
      R"(breaker { latency_baseline { factor: 2.5 } })",
      R"(breaker { latency_baseline { warmup_windows: 6 } })",
      R"(adaptive_throttle { k: 2.5 })",
      R"(adaptive_throttle { minimum_requests: 21 })",
      R"(adaptive_concurrency { initial_limit: 11 })",
      R"(adaptive_concurrency { baseline_window { seconds: 61 } })",
      R"(shadow: true)",
  };
  for (const std::string& edit : edits) {
    v1::Policy p = Parse(kDigestPolicy);
    v1::Policy patch = Parse(edit);
    p.MergeFrom(patch);
    absl::StatusOr<core::PolicyConfig> edited = ToConfig(p);
    ASSERT_TRUE(edited.ok()) << edit << ": " << edited.status();
    EXPECT_NE(edited->digest, base->digest) << edit;
  }
  // Dropping a block changes it too.
  v1::Policy p = Parse(kDigestPolicy);
  p.clear_adaptive_throttle();
  absl::StatusOr<core::PolicyConfig> dropped = ToConfig(p);
  ASSERT_TRUE(dropped.ok()) << dropped.status();
  EXPECT_NE(dropped->digest, base->digest);
}

TEST(FromConfigTest, WritesEveryDefaultAndRoundTrips) {
  const v1::Policy in = Parse(R"(
    name: "a" version: 3
    rate_limit { rate: 10 }
    breaker { consecutive_failures: 2 }
    fallback { strategy: STATIC payload: "p" on: [CIRCUIT_OPEN] })");
  absl::StatusOr<core::PolicyConfig> c = ToConfig(in);
  ASSERT_TRUE(c.ok()) << c.status();
  const v1::Policy out = FromConfig(*c);
  EXPECT_EQ(out.version(), 3u);
  EXPECT_EQ(out.call_timeout().seconds(), 1);
  EXPECT_EQ(out.rate_limit().algorithm(), v1::RateLimit::TOKEN_BUCKET);
  EXPECT_EQ(out.rate_limit().per().seconds(), 1);
  EXPECT_EQ(out.rate_limit().burst(), 10);
  EXPECT_EQ(out.rate_limit().buckets(), 10u);
  EXPECT_EQ(out.rate_limit().scope(), v1::LOCAL);
  EXPECT_EQ(out.breaker().window().seconds(), 10);
  EXPECT_EQ(out.breaker().minimum_calls(), 20u);
  EXPECT_EQ(out.breaker().open_duration().seconds(), 15);
  EXPECT_EQ(out.breaker().max_open_duration().seconds(), 300);
  EXPECT_EQ(out.breaker().half_open_probes(), 1u);
  EXPECT_EQ(out.breaker().successes_to_close(), 1u);
  EXPECT_FALSE(out.breaker().has_slow_call_duration());
  EXPECT_FALSE(out.has_concurrency());
  ASSERT_EQ(out.fallback().on_size(), 1);
  EXPECT_EQ(out.fallback().on(0), v1::CIRCUIT_OPEN);
  EXPECT_EQ(out.on_store_failure(), v1::Policy::FAIL_OPEN);
  EXPECT_EQ(out.max_keys(), 100000u);

  // The written-out form means the same policy.
  absl::StatusOr<core::PolicyConfig> again = ToConfig(out);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(
      FromConfig(*again), out));
}

TEST(FromConfigTest, NoFallbackBecomesExplicitNone) {
  absl::StatusOr<core::PolicyConfig> c = ToConfig(Parse(R"(name: "a")"));
  ASSERT_TRUE(c.ok());
  const v1::Policy out = FromConfig(*c);
  EXPECT_EQ(out.fallback().strategy(), v1::Fallback::NONE);
  EXPECT_TRUE(ToConfig(out).ok());
}

TEST(FromConfigTest, SubSecondDurations) {
  absl::StatusOr<core::PolicyConfig> c =
      ToConfig(Parse(R"(name: "a" call_timeout { nanos: 250000000 })"));
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->call_timeout, absl::Milliseconds(250));
  const v1::Policy out = FromConfig(*c);
  EXPECT_EQ(out.call_timeout().seconds(), 0);
  EXPECT_EQ(out.call_timeout().nanos(), 250000000);
}

}  // namespace
}  // namespace sluice::policy
