// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_POLICY_CONFIG_H_
#define SLUICE_SERVER_CORE_POLICY_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "server/core/verdict.h"
#include "wire/enums/enum_lists.h"

namespace sluice::core {

enum class Scope : uint8_t { kLocal = 1, kCluster = 2 };

enum class RateAlgorithm : uint8_t { kTokenBucket = 1, kSlidingWindow = 2 };

// Generated from wire/enums/enum_lists.h, with the sluice.v1 numbers.
enum class FallbackStrategy : uint8_t {
  SLUICE_FALLBACK_STRATEGY_LIST(SLUICE_ENUM_ENUMERATOR)
};
enum class StoreFailureMode : uint8_t {
  SLUICE_STORE_FAILURE_MODE_LIST(SLUICE_ENUM_ENUMERATOR)
};

// The core's view of one policy. Every default is already resolved and every
// field already validated by server/policy; the core trusts these values.

struct RateLimitConfig {
  RateAlgorithm algorithm = RateAlgorithm::kTokenBucket;
  double rate = 0;                          // permits per `per`, > 0
  absl::Duration per = absl::Seconds(1);    // > 0
  double burst = 0;                         // token bucket capacity, >= 1
  Scope scope = Scope::kLocal;
  int buckets = 10;                         // sliding window sub-buckets
};

struct ConcurrencyConfig {
  uint32_t max_in_flight = 0;  // > 0
  Scope scope = Scope::kLocal;
};

// The breaker's learned-baseline rule (see sluice.v1.LatencyBaseline).
struct LatencyBaselineConfig {
  double factor = 0;             // > 1; 0 = not used
  double deviations = 0;         // > 0; 0 = not used
  double success_rate_drop = 0;  // (0, 1]; 0 = off
  uint32_t warmup_windows = 5;   // >= 1
  uint32_t history_windows = 30;  // >= 1
};

struct BreakerConfig {
  uint32_t consecutive_failures = 0;  // 0 = rule off
  double failure_rate_threshold = 0;  // (0, 1]; 0 = rule off
  absl::Duration slow_call_duration = absl::ZeroDuration();  // 0 = off
  double slow_call_rate_threshold = 0;                       // (0, 1]; 0 = off
  absl::Duration window = absl::Seconds(10);
  uint32_t minimum_calls = 20;
  absl::Duration open_duration = absl::Seconds(15);
  absl::Duration max_open_duration = absl::Seconds(300);
  uint32_t half_open_probes = 1;
  uint32_t successes_to_close = 1;
  // Sub-buckets of `window` for the ratio rules.
  int buckets = 10;
  std::optional<LatencyBaselineConfig> latency_baseline;

  bool slow_rule_enabled() const {
    return slow_call_duration > absl::ZeroDuration() &&
           slow_call_rate_threshold > 0;
  }
};

// SRE adaptive throttling (see sluice.v1.AdaptiveThrottle).
struct AdaptiveThrottleConfig {
  absl::Duration window = absl::Seconds(10);  // > 0
  double k = 2;                               // >= 1
  uint32_t minimum_requests = 20;
  int buckets = 10;  // sub-buckets of `window`
};

// The adaptive in-flight limit (see sluice.v1.AdaptiveConcurrency).
struct AdaptiveConcurrencyConfig {
  uint32_t min_limit = 1;       // >= 1
  uint32_t max_limit = 1000;    // >= min_limit
  uint32_t initial_limit = 10;  // in [min_limit, max_limit]
  double tolerance = 1.3;       // > 1
  absl::Duration window = absl::Seconds(1);            // > 0
  uint32_t minimum_samples = 10;                       // >= 1
  absl::Duration baseline_window = absl::Seconds(60);  // >= window
};

struct FallbackConfig {
  FallbackStrategy strategy = FallbackStrategy::kNone;
  std::string payload;
  std::string content_type;
  // Bit (1 << Reason) for each reason the fallback applies to; 0 means all.
  uint32_t on_mask = 0;
  absl::Duration cache_ttl = absl::ZeroDuration();
  bool serve_on_failure = false;
  // The status a gateway answers an HTTP request with when it serves the
  // payload (external authorization, /v1/check): 200..599.
  int http_status = 200;

  // Whether a refusal for `reason` is served this fallback (DEGRADE) rather
  // than refused (REJECT). PROBE_LIMIT is covered by CIRCUIT_OPEN.
  bool AppliesTo(Reason reason) const;
};

// A descriptor of Envoy's rate-limit service that a policy answers (see
// sluice.v1.EnvoyDescriptor). The core only carries it; the rate-limit
// front end (server/rpc) matches requests against it.
struct EnvoyDescriptorConfig {
  struct Entry {
    std::string key;
    std::string value;  // empty: any value, which becomes the key
  };
  std::string domain;
  std::vector<Entry> entries;
};

// HTTP requests a policy answers when they do not name a policy (see
// sluice.v1.HttpRoute). Normalised by server/policy: host and header names
// lowercase, methods sorted, headers sorted by name, all unique.
struct HttpRouteConfig {
  std::string host;         // exact, "*.example.com", or "" for any
  std::string path_prefix;  // "" for any
  std::vector<std::string> methods;  // empty for any
  // Name -> exact value; "" means present with any value.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string key_header;  // lowercase; "" when the policy is not per key

  // How specific the route is; when several routes match a request, the
  // larger wins. Compared as a whole: the path_prefix length, then the host
  // (exact over wildcard over any; a longer wildcard over a shorter), then
  // the number of header and method conditions.
  struct Specificity {
    size_t path = 0;
    int host_kind = 0;  // 2 exact, 1 wildcard, 0 any
    size_t host = 0;    // the wildcard's length
    size_t conditions = 0;  // headers, plus one for a method list
    bool operator==(const Specificity& o) const {
      return path == o.path && host_kind == o.host_kind && host == o.host &&
             conditions == o.conditions;
    }
    bool operator<(const Specificity& o) const;
  };
  Specificity specificity() const;
  // Whether some request matches both this route and `other`.
  bool Overlaps(const HttpRouteConfig& other) const;
  // Whether the two are the same route (key_header aside).
  bool SameMatch(const HttpRouteConfig& other) const;
  // A string two routes share whenever they could tie (equally specific,
  // and one request matching both): it holds the path_prefix, the host and
  // the number of conditions. Routes of different groups never tie.
  std::string TieGroup() const;
};

struct PolicyConfig {
  std::string name;
  absl::Duration call_timeout = absl::Seconds(1);
  std::optional<RateLimitConfig> rate_limit;
  std::optional<ConcurrencyConfig> concurrency;
  std::optional<BreakerConfig> breaker;
  FallbackConfig fallback;
  StoreFailureMode on_store_failure = StoreFailureMode::kFailOpen;
  bool shadow = false;
  bool per_key = false;
  uint32_t max_keys = 100000;
  uint64_t version = 0;
  std::string description;
  std::vector<EnvoyDescriptorConfig> envoy_descriptors;
  bool rate_limit_headers = false;
  std::optional<AdaptiveThrottleConfig> adaptive_throttle;
  std::optional<AdaptiveConcurrencyConfig> adaptive_concurrency;
  std::vector<HttpRouteConfig> http_routes;
  // A stable digest of everything the policy says (version excluded),
  // filled in by server/policy: saved adaptive state is only taken back by
  // a policy with the same digest.
  uint64_t digest = 0;
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_POLICY_CONFIG_H_
