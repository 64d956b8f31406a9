// SPDX-License-Identifier: Apache-2.0
#include "server/policy/policy_convert.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "google/protobuf/duration.pb.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "wire/enums/enum_lists.h"
#include "wire/limits.h"
#include "wire/status.h"
#include "wire/time.h"

namespace sluice::policy {
namespace {

// Every default is the one core::PolicyConfig and its parts declare.
constexpr uint32_t kMaxBuckets = 1000;
constexpr uint32_t kMaxKeysLimit = 10'000'000;
constexpr size_t kMaxPayloadBytes = 64 * 1024;
constexpr int kMaxEnvoyDescriptors = 64;
constexpr int kMaxEnvoyEntries = 8;
constexpr int kMaxHttpRoutes = 64;
constexpr int kMaxRouteMethods = 16;
constexpr int kMaxRouteHeaders = 16;
constexpr size_t kMaxHeaderNameBytes = 256;
// A sliding window keeps an int64 count; far below that, and far above any
// real limit.
constexpr double kMaxWindowLimit = 1e15;
// The breaker judges its ratio rules over core::BreakerConfig::buckets
// sub-buckets of `window`; each must be at least this wide.
constexpr absl::Duration kMinBucketWidth = absl::Milliseconds(1);
// The adaptive blocks' windows: past a day they no longer adapt to anything.
constexpr absl::Duration kMaxAdaptiveWindow = absl::Hours(24);
// Keeps the adaptive limit's arithmetic (a 10% step up) far from uint32
// overflow; far above any real in-flight count.
constexpr uint32_t kMaxAdaptiveLimit = 10'000'000;
// The shortest adaptive_concurrency.window.
constexpr absl::Duration kMinAdaptiveWindow = absl::Milliseconds(100);
// Window counts of the latency baseline; beyond this it would never be
// ready, or never forget.
constexpr uint32_t kMaxBaselineWindows = 100'000;

std::string Quote(absl::string_view s) {
  return absl::StrCat("\"", absl::CHexEscape(s), "\"");
}

std::string Num(double v) { return absl::StrCat(v); }

std::string Dur(absl::Duration d) { return absl::FormatDuration(d); }

// Builds errors that all read `policy "<name>": <field> <rule>, got <value>`.
// Each carries an ErrorLocation naming the policy and the field, so that a
// policies file check can point at the field's line.
class Errors {
 public:
  explicit Errors(absl::string_view name) : name_(name) {
    // Keep the prefix readable even for an absurdly long name.
    if (name.size() > 64) {
      prefix_ = absl::StrCat("policy ", Quote(name.substr(0, 64)), "...: ");
    } else {
      prefix_ = absl::StrCat("policy ", Quote(name), ": ");
    }
  }

  absl::Status Bad(absl::string_view field, absl::string_view rule,
                   absl::string_view got) const {
    return AttachErrorLocation(
        absl::InvalidArgumentError(
            absl::StrCat(prefix_, field, " ", rule, ", got ", got)),
        {name_, std::string(field)});
  }
  absl::Status Bad(absl::string_view field, absl::string_view rule) const {
    return AttachErrorLocation(
        absl::InvalidArgumentError(absl::StrCat(prefix_, field, " ", rule)),
        {name_, std::string(field)});
  }
  // `status`, whose message already names `field`, about this policy.
  absl::Status About(absl::string_view field,
                     const absl::Status& status) const {
    return AttachErrorLocation(
        absl::Status(status.code(), absl::StrCat(prefix_, status.message())),
        {name_, std::string(field)});
  }

 private:
  std::string name_;
  std::string prefix_;
};

// Converts a proto duration, rejecting malformed ones (mixed signs, nanos out
// of range) that JSON parsing would refuse but a binary RPC can carry.
absl::Status ToDuration(const Errors& errors, absl::string_view field,
                        const google::protobuf::Duration& in,
                        absl::Duration* out) {
  absl::StatusOr<absl::Duration> d = wire::DurationFromProto(in, field);
  if (!d.ok()) return errors.About(field, d.status());  // adds the policy
  *out = *d;
  return absl::OkStatus();
}

// A duration that must be > 0 when present; `fallback` when absent.
absl::Status PositiveDuration(const Errors& errors, absl::string_view field,
                              bool present,
                              const google::protobuf::Duration& in,
                              absl::Duration fallback, absl::Duration* out) {
  if (!present) {
    *out = fallback;
    return absl::OkStatus();
  }
  SLUICE_RETURN_IF_ERROR(ToDuration(errors, field, in, out));
  if (*out <= absl::ZeroDuration()) {
    return errors.Bad(field, "must be > 0", Dur(*out));
  }
  return absl::OkStatus();
}

// A ratio rule threshold: 0 is "off", otherwise in (0, 1].
absl::Status Threshold(const Errors& errors, absl::string_view field,
                       double v) {
  if (!(v >= 0 && v <= 1)) {  // also catches NaN
    return errors.Bad(field, "must be in (0, 1]", Num(v));
  }
  return absl::OkStatus();
}

absl::StatusOr<core::Scope> ToScope(const Errors& errors,
                                    absl::string_view field, v1::Scope s) {
  switch (s) {
    case v1::SCOPE_UNSPECIFIED:
    case v1::LOCAL:
      return core::Scope::kLocal;
    case v1::CLUSTER:
      return core::Scope::kCluster;
    default:
      return errors.Bad(field, "must be LOCAL or CLUSTER",
                        absl::StrCat(static_cast<int>(s)));
  }
}

v1::Scope FromScope(core::Scope s) {
  return s == core::Scope::kCluster ? v1::CLUSTER : v1::LOCAL;
}

absl::Status ConvertRateLimit(const Errors& errors, const v1::RateLimit& in,
                              core::RateLimitConfig* out) {
  const core::RateLimitConfig defaults;
  switch (in.algorithm()) {
    case v1::RateLimit::ALGORITHM_UNSPECIFIED:
    case v1::RateLimit::TOKEN_BUCKET:
      out->algorithm = core::RateAlgorithm::kTokenBucket;
      break;
    case v1::RateLimit::SLIDING_WINDOW:
      out->algorithm = core::RateAlgorithm::kSlidingWindow;
      break;
    default:
      return errors.Bad("rate_limit.algorithm",
                        "must be TOKEN_BUCKET or SLIDING_WINDOW",
                        absl::StrCat(static_cast<int>(in.algorithm())));
  }
  const bool window = out->algorithm == core::RateAlgorithm::kSlidingWindow;

  if (!(in.rate() > 0) || !std::isfinite(in.rate())) {
    return errors.Bad("rate_limit.rate", "must be > 0 and finite",
                      Num(in.rate()));
  }
  out->rate = in.rate();
  SLUICE_RETURN_IF_ERROR(PositiveDuration(errors, "rate_limit.per",
                                          in.has_per(), in.per(),
                                          defaults.per, &out->per));

  if (!(in.burst() >= 0) || !std::isfinite(in.burst())) {
    return errors.Bad("rate_limit.burst", "must be >= 0 and finite",
                      Num(in.burst()));
  }
  out->burst = in.burst() == 0 ? in.rate() : in.burst();

  if (in.buckets() > kMaxBuckets) {
    return errors.Bad("rate_limit.buckets",
                      absl::StrCat("must be at most ", kMaxBuckets),
                      absl::StrCat(in.buckets()));
  }
  out->buckets =
      in.buckets() == 0 ? defaults.buckets : static_cast<int>(in.buckets());

  SLUICE_ASSIGN_OR_RETURN(out->scope,
                          ToScope(errors, "rate_limit.scope", in.scope()));

  if (window) {
    // The window counts whole permits.
    if (out->rate < 1 || out->rate != std::floor(out->rate)) {
      return errors.Bad("rate_limit.rate",
                        "must be a whole number >= 1 for SLIDING_WINDOW",
                        Num(out->rate));
    }
    if (out->rate > kMaxWindowLimit) {
      return errors.Bad("rate_limit.rate",
                        absl::StrCat("must be at most ", Num(kMaxWindowLimit),
                                     " for SLIDING_WINDOW"),
                        Num(out->rate));
    }
    if (out->per / out->buckets < kMinBucketWidth) {
      return errors.Bad(
          "rate_limit.per",
          absl::StrCat("divided by rate_limit.buckets (", out->buckets,
                       ") must be >= 1ms for SLIDING_WINDOW"),
          Dur(out->per));
    }
  } else if (out->burst < 1) {
    // A bucket that can never hold one token admits nothing.
    return errors.Bad("rate_limit.burst",
                      "must be >= 1 for TOKEN_BUCKET (it defaults to rate)",
                      Num(out->burst));
  }
  return absl::OkStatus();
}

// A double that must be finite and above `min` (0: "not used" is left to
// the caller).
absl::Status Above(const Errors& errors, absl::string_view field, double v,
                   double min) {
  if (!(v > min) || !std::isfinite(v)) {  // also catches NaN
    return errors.Bad(field, absl::StrCat("must be > ", Num(min), " and finite"),
                      Num(v));
  }
  return absl::OkStatus();
}

// A duration at most kMaxAdaptiveWindow.
absl::Status AtMostADay(const Errors& errors, absl::string_view field,
                        absl::Duration d) {
  if (d > kMaxAdaptiveWindow) {
    return errors.Bad(field,
                      absl::StrCat("must be at most ", Dur(kMaxAdaptiveWindow)),
                      Dur(d));
  }
  return absl::OkStatus();
}

// A count of baseline windows: 0 takes `fallback`.
absl::Status BaselineWindows(const Errors& errors, absl::string_view field,
                             uint32_t in, uint32_t fallback, uint32_t* out) {
  if (in > kMaxBaselineWindows) {
    return errors.Bad(field,
                      absl::StrCat("must be at most ", kMaxBaselineWindows),
                      absl::StrCat(in));
  }
  *out = in == 0 ? fallback : in;
  return absl::OkStatus();
}

absl::Status ConvertLatencyBaseline(const Errors& errors,
                                    const v1::LatencyBaseline& in,
                                    core::LatencyBaselineConfig* out) {
  const core::LatencyBaselineConfig defaults;
  // 0 means "not used" for each condition; a set one must make sense.
  if (in.factor() != 0) {
    SLUICE_RETURN_IF_ERROR(
        Above(errors, "breaker.latency_baseline.factor", in.factor(), 1));
  }
  out->factor = in.factor();
  if (in.deviations() != 0) {
    SLUICE_RETURN_IF_ERROR(Above(errors, "breaker.latency_baseline.deviations",
                                 in.deviations(), 0));
  }
  out->deviations = in.deviations();
  if (!(in.success_rate_drop() >= 0 && in.success_rate_drop() <= 1)) {
    return errors.Bad("breaker.latency_baseline.success_rate_drop",
                      "must be in (0, 1]", Num(in.success_rate_drop()));
  }
  out->success_rate_drop = in.success_rate_drop();
  if (out->factor == 0 && out->deviations == 0 &&
      out->success_rate_drop == 0) {
    return errors.Bad("breaker.latency_baseline",
                      "needs at least one of factor, deviations or "
                      "success_rate_drop");
  }
  SLUICE_RETURN_IF_ERROR(BaselineWindows(
      errors, "breaker.latency_baseline.warmup_windows", in.warmup_windows(),
      defaults.warmup_windows, &out->warmup_windows));
  SLUICE_RETURN_IF_ERROR(BaselineWindows(
      errors, "breaker.latency_baseline.history_windows", in.history_windows(),
      defaults.history_windows, &out->history_windows));
  return absl::OkStatus();
}

absl::Status ConvertAdaptiveThrottle(const Errors& errors,
                                     const v1::AdaptiveThrottle& in,
                                     core::AdaptiveThrottleConfig* out) {
  const core::AdaptiveThrottleConfig defaults;
  SLUICE_RETURN_IF_ERROR(PositiveDuration(errors, "adaptive_throttle.window",
                                          in.has_window(), in.window(),
                                          defaults.window, &out->window));
  SLUICE_RETURN_IF_ERROR(
      AtMostADay(errors, "adaptive_throttle.window", out->window));
  out->buckets = defaults.buckets;
  if (out->window / out->buckets < kMinBucketWidth) {
    return errors.Bad(
        "adaptive_throttle.window",
        absl::StrCat("must be at least ", Dur(kMinBucketWidth * out->buckets),
                     " (", out->buckets, " buckets of >= 1ms)"),
        Dur(out->window));
  }
  // k = 0 is the proto default: not set.
  out->k = in.k() == 0 ? defaults.k : in.k();
  if (!(out->k >= 1) || !std::isfinite(out->k)) {
    return errors.Bad("adaptive_throttle.k", "must be >= 1 and finite",
                      Num(out->k));
  }
  out->minimum_requests = in.minimum_requests() == 0
                              ? defaults.minimum_requests
                              : in.minimum_requests();
  return absl::OkStatus();
}

absl::Status ConvertAdaptiveConcurrency(const Errors& errors,
                                        const v1::AdaptiveConcurrency& in,
                                        core::AdaptiveConcurrencyConfig* out) {
  const core::AdaptiveConcurrencyConfig defaults;
  out->min_limit = in.min_limit() == 0 ? defaults.min_limit : in.min_limit();
  out->max_limit = in.max_limit() == 0 ? defaults.max_limit : in.max_limit();
  if (out->max_limit > kMaxAdaptiveLimit) {
    return errors.Bad("adaptive_concurrency.max_limit",
                      absl::StrCat("must be at most ", kMaxAdaptiveLimit),
                      absl::StrCat(out->max_limit));
  }
  if (out->max_limit < out->min_limit) {
    // Blame the field the user wrote: min_limit above the default
    // max_limit is min_limit's error.
    if (in.max_limit() == 0) {
      return errors.Bad("adaptive_concurrency.min_limit",
                        absl::StrCat("must be <= adaptive_concurrency.max_limit "
                                     "(default ",
                                     out->max_limit, "; set max_limit too)"),
                        absl::StrCat(out->min_limit));
    }
    return errors.Bad("adaptive_concurrency.max_limit",
                      absl::StrCat("must be >= adaptive_concurrency.min_limit (",
                                   out->min_limit, ")"),
                      absl::StrCat(out->max_limit));
  }
  if (in.initial_limit() == 0) {
    // min_limit x 10, within the bounds (in 64 bits: no overflow).
    out->initial_limit = static_cast<uint32_t>(
        std::clamp<uint64_t>(uint64_t{out->min_limit} * 10, out->min_limit,
                             out->max_limit));
  } else if (in.initial_limit() < out->min_limit ||
             in.initial_limit() > out->max_limit) {
    return errors.Bad("adaptive_concurrency.initial_limit",
                      absl::StrCat("must be in [min_limit, max_limit] = [",
                                   out->min_limit, ", ", out->max_limit, "]"),
                      absl::StrCat(in.initial_limit()));
  } else {
    out->initial_limit = in.initial_limit();
  }
  out->tolerance = in.tolerance() == 0 ? defaults.tolerance : in.tolerance();
  SLUICE_RETURN_IF_ERROR(
      Above(errors, "adaptive_concurrency.tolerance", out->tolerance, 1));
  SLUICE_RETURN_IF_ERROR(PositiveDuration(errors, "adaptive_concurrency.window",
                                          in.has_window(), in.window(),
                                          defaults.window, &out->window));
  SLUICE_RETURN_IF_ERROR(
      AtMostADay(errors, "adaptive_concurrency.window", out->window));
  // The limit moves at most once a window; shorter windows see too few
  // reports to judge, and would wear out the limit's 32-bit epochs.
  if (out->window < kMinAdaptiveWindow) {
    return errors.Bad("adaptive_concurrency.window",
                      absl::StrCat("must be at least ", Dur(kMinAdaptiveWindow)),
                      Dur(out->window));
  }
  out->minimum_samples = in.minimum_samples() == 0 ? defaults.minimum_samples
                                                   : in.minimum_samples();
  SLUICE_RETURN_IF_ERROR(PositiveDuration(
      errors, "adaptive_concurrency.baseline_window", in.has_baseline_window(),
      in.baseline_window(), defaults.baseline_window, &out->baseline_window));
  SLUICE_RETURN_IF_ERROR(AtMostADay(
      errors, "adaptive_concurrency.baseline_window", out->baseline_window));
  if (out->baseline_window < out->window) {
    return errors.Bad("adaptive_concurrency.baseline_window",
                      absl::StrCat("must be >= adaptive_concurrency.window (",
                                   Dur(out->window), ")"),
                      Dur(out->baseline_window));
  }
  return absl::OkStatus();
}

absl::Status ConvertBreaker(const Errors& errors, const v1::Breaker& in,
                            core::BreakerConfig* out) {
  const core::BreakerConfig defaults;
  out->consecutive_failures = in.consecutive_failures();
  SLUICE_RETURN_IF_ERROR(Threshold(errors, "breaker.failure_rate_threshold",
                                   in.failure_rate_threshold()));
  out->failure_rate_threshold = in.failure_rate_threshold();
  SLUICE_RETURN_IF_ERROR(Threshold(errors, "breaker.slow_call_rate_threshold",
                                   in.slow_call_rate_threshold()));
  out->slow_call_rate_threshold = in.slow_call_rate_threshold();

  out->slow_call_duration = absl::ZeroDuration();
  if (in.has_slow_call_duration()) {
    SLUICE_RETURN_IF_ERROR(ToDuration(errors, "breaker.slow_call_duration",
                                      in.slow_call_duration(),
                                      &out->slow_call_duration));
    if (out->slow_call_duration < absl::ZeroDuration()) {
      return errors.Bad("breaker.slow_call_duration", "must be >= 0",
                        Dur(out->slow_call_duration));
    }
  }
  const bool slow_duration = out->slow_call_duration > absl::ZeroDuration();
  const bool slow_rate = out->slow_call_rate_threshold > 0;
  if (slow_rate && !slow_duration) {
    return errors.Bad("breaker.slow_call_rate_threshold",
                      "requires breaker.slow_call_duration",
                      Num(out->slow_call_rate_threshold));
  }
  if (slow_duration && !slow_rate) {
    return errors.Bad("breaker.slow_call_duration",
                      "requires breaker.slow_call_rate_threshold",
                      Dur(out->slow_call_duration));
  }
  out->latency_baseline.reset();
  if (in.has_latency_baseline()) {
    core::LatencyBaselineConfig baseline;
    SLUICE_RETURN_IF_ERROR(
        ConvertLatencyBaseline(errors, in.latency_baseline(), &baseline));
    out->latency_baseline = baseline;
  }
  if (out->consecutive_failures == 0 && out->failure_rate_threshold == 0 &&
      !slow_rate && !out->latency_baseline.has_value()) {
    return errors.Bad("breaker",
                      "needs at least one rule (consecutive_failures, "
                      "failure_rate_threshold, slow_call_rate_threshold or "
                      "latency_baseline)");
  }

  SLUICE_RETURN_IF_ERROR(PositiveDuration(errors, "breaker.window",
                                          in.has_window(), in.window(),
                                          defaults.window, &out->window));
  out->buckets = defaults.buckets;
  if (out->window / out->buckets < kMinBucketWidth) {
    return errors.Bad(
        "breaker.window",
        absl::StrCat("must be at least ", Dur(kMinBucketWidth * out->buckets),
                     " (", out->buckets, " buckets of >= 1ms)"),
        Dur(out->window));
  }
  out->minimum_calls =
      in.minimum_calls() == 0 ? defaults.minimum_calls : in.minimum_calls();

  SLUICE_RETURN_IF_ERROR(PositiveDuration(
      errors, "breaker.open_duration", in.has_open_duration(),
      in.open_duration(), defaults.open_duration, &out->open_duration));
  SLUICE_RETURN_IF_ERROR(PositiveDuration(
      errors, "breaker.max_open_duration", in.has_max_open_duration(),
      in.max_open_duration(), defaults.max_open_duration,
      &out->max_open_duration));
  if (out->max_open_duration < out->open_duration) {
    return errors.Bad("breaker.max_open_duration",
                      absl::StrCat("must be >= breaker.open_duration (",
                                   Dur(out->open_duration), ")"),
                      Dur(out->max_open_duration));
  }
  // Probes run one after another as slots free up, so any successes_to_close
  // >= 1 is reachable whatever half_open_probes is.
  out->half_open_probes = in.half_open_probes() == 0
                              ? defaults.half_open_probes
                              : in.half_open_probes();
  out->successes_to_close = in.successes_to_close() == 0
                                ? defaults.successes_to_close
                                : in.successes_to_close();
  return absl::OkStatus();
}

// The core's reasons carry the proto numbers (wire/enums/enum_lists.h).
bool IsRefusalReason(int r) {
  return v1::Reason_IsValid(r) &&
         core::FallbackMayApply(static_cast<core::Reason>(r));
}

// "RATE_LIMITED, CONCURRENCY_LIMITED, ...": every reason a fallback may
// name, in proto order.
std::string RefusalReasonNames() {
  std::string names;
  for (int r = 0; r < core::kReasonCount; ++r) {
    if (!IsRefusalReason(r)) continue;
    absl::StrAppend(&names, names.empty() ? "" : ", ",
                    core::ReasonName(static_cast<core::Reason>(r)));
  }
  return names;
}

// The proto enum values other than UNSPECIFIED, generated from
// wire/enums/enum_lists.h; nullopt for UNSPECIFIED and unknown numbers.
std::optional<core::FallbackStrategy> StrategyFromProto(int strategy) {
  using E = core::FallbackStrategy;
  switch (strategy) {
    SLUICE_FALLBACK_STRATEGY_LIST(SLUICE_ENUM_FROM_PROTO_CASE)
    default:
      return std::nullopt;
  }
}

v1::Fallback::Strategy StrategyToProto(core::FallbackStrategy strategy) {
  using E = core::FallbackStrategy;
  switch (strategy) { SLUICE_FALLBACK_STRATEGY_LIST(SLUICE_ENUM_TO_PROTO_CASE) }
  return v1::Fallback::STRATEGY_UNSPECIFIED;
}

std::optional<core::StoreFailureMode> StoreFailureModeFromProto(int mode) {
  using E = core::StoreFailureMode;
  switch (mode) {
    SLUICE_STORE_FAILURE_MODE_LIST(SLUICE_ENUM_FROM_PROTO_CASE)
    default:
      return std::nullopt;
  }
}

v1::Policy::StoreFailureMode StoreFailureModeToProto(
    core::StoreFailureMode mode) {
  using E = core::StoreFailureMode;
  switch (mode) { SLUICE_STORE_FAILURE_MODE_LIST(SLUICE_ENUM_TO_PROTO_CASE) }
  return v1::Policy::STORE_FAILURE_MODE_UNSPECIFIED;
}

absl::Status ConvertFallback(const Errors& errors, const v1::Fallback& in,
                             core::FallbackConfig* out) {
  if (in.strategy() == v1::Fallback::STRATEGY_UNSPECIFIED) {
    // A fallback block without a strategy is almost surely a mistake; an
    // absent block already means NONE.
    return errors.Bad("fallback.strategy",
                      "must be set to NONE, DEFAULT, STATIC or CACHE");
  }
  const std::optional<core::FallbackStrategy> strategy =
      StrategyFromProto(in.strategy());
  if (!strategy.has_value()) {
    return errors.Bad("fallback.strategy",
                      "must be NONE, DEFAULT, STATIC or CACHE",
                      absl::StrCat(static_cast<int>(in.strategy())));
  }
  out->strategy = *strategy;
  const bool uses_payload = out->strategy == core::FallbackStrategy::kStatic ||
                            out->strategy == core::FallbackStrategy::kCache;
  if (in.payload().size() > kMaxPayloadBytes) {
    return errors.Bad("fallback.payload", "must be at most 65536 bytes",
                      absl::StrCat(in.payload().size(), " bytes"));
  }
  if (out->strategy == core::FallbackStrategy::kStatic &&
      in.payload().empty()) {
    return errors.Bad("fallback.payload", "is required for STATIC");
  }
  if (!uses_payload && !in.payload().empty()) {
    return errors.Bad("fallback.payload", "is only used by STATIC and CACHE",
                      absl::StrCat(in.payload().size(), " bytes"));
  }
  out->payload = in.payload();
  out->content_type = in.content_type();

  out->on_mask = 0;
  for (int i = 0; i < in.on_size(); ++i) {
    const int reason = in.on(i);
    if (!IsRefusalReason(reason)) {
      const std::string name =
          v1::Reason_IsValid(reason)
              ? v1::Reason_Name(static_cast<v1::Reason>(reason))
              : absl::StrCat(reason);
      return errors.Bad(absl::StrCat("fallback.on[", i, "]"),
                        absl::StrCat("must be a refusal reason (",
                                     RefusalReasonNames(), ")"),
                        name);
    }
    out->on_mask |= uint32_t{1} << reason;
  }

  out->cache_ttl = absl::ZeroDuration();
  if (out->strategy == core::FallbackStrategy::kCache) {
    if (!in.has_cache_ttl()) {
      return errors.Bad("fallback.cache_ttl", "is required for CACHE");
    }
    SLUICE_RETURN_IF_ERROR(
        PositiveDuration(errors, "fallback.cache_ttl", true, in.cache_ttl(),
                         absl::ZeroDuration(), &out->cache_ttl));
  } else if (in.has_cache_ttl()) {
    absl::Duration ttl;
    SLUICE_RETURN_IF_ERROR(
        ToDuration(errors, "fallback.cache_ttl", in.cache_ttl(), &ttl));
    if (ttl != absl::ZeroDuration()) {
      return errors.Bad("fallback.cache_ttl", "is only used by CACHE",
                        Dur(ttl));
    }
  }
  out->serve_on_failure = in.serve_on_failure();
  if (in.http_status() != 0 &&
      (in.http_status() < 200 || in.http_status() > 599)) {
    return errors.Bad("fallback.http_status",
                      "must be 0 (200) or in 200..599",
                      absl::StrCat(in.http_status()));
  }
  out->http_status = in.http_status() == 0 ? 200 : in.http_status();
  return absl::OkStatus();
}

absl::Status ValidateName(const Errors& errors, const std::string& name) {
  if (name.empty()) return errors.Bad("name", "is required");
  if (name.size() > wire::kMaxNameBytes) {
    return errors.Bad("name",
                      absl::StrCat("must be at most ", wire::kMaxNameBytes,
                                   " bytes"),
                      absl::StrCat(name.size(), " bytes"));
  }
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok)
      return errors.Bad("name", "must match [A-Za-z0-9._-]+", Quote(name));
  }
  return absl::OkStatus();
}

absl::Status ConvertEnvoyDescriptors(const Errors& errors,
                                     const v1::Policy& policy,
                                     core::PolicyConfig* config) {
  if (policy.envoy_descriptors_size() > kMaxEnvoyDescriptors) {
    return errors.Bad("envoy_descriptors",
                      absl::StrCat("must have at most ", kMaxEnvoyDescriptors,
                                   " entries"),
                      absl::StrCat(policy.envoy_descriptors_size()));
  }
  for (int i = 0; i < policy.envoy_descriptors_size(); ++i) {
    const v1::EnvoyDescriptor& in = policy.envoy_descriptors(i);
    const std::string field = absl::StrCat("envoy_descriptors[", i, "]");
    if (in.domain().empty() || in.domain().size() > wire::kMaxNameBytes) {
      return errors.Bad(
          absl::StrCat(field, ".domain"),
          absl::StrCat("must be 1 to ", wire::kMaxNameBytes, " bytes"),
          Quote(in.domain()));
    }
    if (in.entries_size() < 1 || in.entries_size() > kMaxEnvoyEntries) {
      return errors.Bad(absl::StrCat(field, ".entries"),
                        absl::StrCat("must have 1 to ", kMaxEnvoyEntries,
                                     " entries"),
                        absl::StrCat(in.entries_size()));
    }
    core::EnvoyDescriptorConfig out;
    out.domain = in.domain();
    for (int j = 0; j < in.entries_size(); ++j) {
      const v1::EnvoyDescriptor::Entry& entry = in.entries(j);
      const std::string at = absl::StrCat(field, ".entries[", j, "]");
      if (entry.key().empty() || entry.key().size() > wire::kMaxNameBytes) {
        return errors.Bad(
            absl::StrCat(at, ".key"),
            absl::StrCat("must be 1 to ", wire::kMaxNameBytes, " bytes"),
            Quote(entry.key()));
      }
      if (entry.value().size() > wire::kMaxKeyBytes) {
        return errors.Bad(absl::StrCat(at, ".value"),
                          absl::StrCat("must be at most ", wire::kMaxKeyBytes,
                                       " bytes"),
                          absl::StrCat(entry.value().size(), " bytes"));
      }
      if (entry.value().empty() && !policy.per_key()) {
        return errors.Bad(
            absl::StrCat(at, ".value"),
            absl::StrCat("is empty, which matches any value of \"",
                         absl::CHexEscape(entry.key()),
                         "\" and gives each value its own limit; that needs "
                         "per_key: true"));
      }
      out.entries.push_back({entry.key(), entry.value()});
    }
    for (int k = 0; k < i; ++k) {
      const core::EnvoyDescriptorConfig& earlier = config->envoy_descriptors[k];
      if (SameEnvoyDescriptor(earlier, out)) {
        return errors.Bad(field, absl::StrCat("repeats envoy_descriptors[", k,
                                              "]"));
      }
    }
    config->envoy_descriptors.push_back(std::move(out));
  }
  config->rate_limit_headers = policy.rate_limit_headers();
  return absl::OkStatus();
}

// A header name as HTTP allows it (an RFC 9110 token), 1 to
// kMaxHeaderNameBytes bytes; lowercased into `out`.
absl::Status HeaderName(const Errors& errors, absl::string_view field,
                        absl::string_view name, std::string* out) {
  if (name.empty() || name.size() > kMaxHeaderNameBytes) {
    return errors.Bad(field,
                      absl::StrCat("must be 1 to ", kMaxHeaderNameBytes,
                                   " bytes"),
                      Quote(name));
  }
  for (char c : name) {
    const bool token = absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                       absl::string_view("!#$%&'*+-.^_`|~").find(c) !=
                           absl::string_view::npos;
    if (!token) {
      return errors.Bad(field, "must be an HTTP header name (a token)",
                        Quote(name));
    }
  }
  *out = absl::AsciiStrToLower(name);
  return absl::OkStatus();
}

// "example.com", "api.example.com", "*.example.com" or an IPv6 literal
// "[::1]": letters, digits, '-', '.' (and ':' inside brackets), lowercased
// into `out`.
absl::Status RouteHost(const Errors& errors, absl::string_view field,
                       absl::string_view host, std::string* out) {
  if (host.size() > wire::kMaxNameBytes) {
    return errors.Bad(field,
                      absl::StrCat("must be at most ", wire::kMaxNameBytes,
                                   " bytes"),
                      absl::StrCat(host.size(), " bytes"));
  }
  absl::string_view rest = host;
  if (absl::StartsWith(host, "*")) {
    if (!absl::StartsWith(host, "*.") || host.size() < 3) {
      return errors.Bad(field,
                        "must be a host, or \"*.\" followed by a domain",
                        Quote(host));
    }
    rest = host.substr(2);
  }
  const bool literal = absl::StartsWith(rest, "[") && absl::EndsWith(rest, "]");
  if (literal) rest = rest.substr(1, rest.size() - 2);
  for (char c : rest) {
    const bool ok = absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                    c == '-' || c == '.' || (literal && c == ':');
    if (!ok) {
      return errors.Bad(field,
                        "must be a host name without port (letters, "
                        "digits, '-', '.'), or \"*.\" followed by one",
                        Quote(host));
    }
  }
  *out = absl::AsciiStrToLower(host);
  return absl::OkStatus();
}

absl::Status ConvertHttpRoute(const Errors& errors, absl::string_view field,
                              const v1::Policy& policy,
                              const v1::HttpRoute& in,
                              core::HttpRouteConfig* out) {
  SLUICE_RETURN_IF_ERROR(RouteHost(errors, absl::StrCat(field, ".host"),
                                   in.host(), &out->host));
  if (in.path_prefix().size() > wire::kMaxKeyBytes) {
    return errors.Bad(absl::StrCat(field, ".path_prefix"),
                      absl::StrCat("must be at most ", wire::kMaxKeyBytes,
                                   " bytes"),
                      absl::StrCat(in.path_prefix().size(), " bytes"));
  }
  if (!in.path_prefix().empty() && in.path_prefix()[0] != '/') {
    return errors.Bad(absl::StrCat(field, ".path_prefix"),
                      "must start with \"/\"", Quote(in.path_prefix()));
  }
  out->path_prefix = in.path_prefix();
  if (in.methods_size() > kMaxRouteMethods) {
    return errors.Bad(absl::StrCat(field, ".methods"),
                      absl::StrCat("must have at most ", kMaxRouteMethods,
                                   " entries"),
                      absl::StrCat(in.methods_size()));
  }
  for (int i = 0; i < in.methods_size(); ++i) {
    const std::string& m = in.methods(i);
    const bool ok = !m.empty() && m.size() <= 32 &&
                    std::all_of(m.begin(), m.end(), [](char c) {
                      return c >= 'A' && c <= 'Z';
                    });
    if (!ok) {
      return errors.Bad(absl::StrCat(field, ".methods[", i, "]"),
                        "must be an upper-case HTTP method, e.g. \"GET\"",
                        Quote(m));
    }
    out->methods.push_back(m);
  }
  std::sort(out->methods.begin(), out->methods.end());
  out->methods.erase(std::unique(out->methods.begin(), out->methods.end()),
                     out->methods.end());
  if (in.headers_size() > kMaxRouteHeaders) {
    return errors.Bad(absl::StrCat(field, ".headers"),
                      absl::StrCat("must have at most ", kMaxRouteHeaders,
                                   " entries"),
                      absl::StrCat(in.headers_size()));
  }
  for (const auto& [name, value] : in.headers()) {
    const std::string at = absl::StrCat(field, ".headers[", Quote(name), "]");
    std::string lower;
    SLUICE_RETURN_IF_ERROR(HeaderName(errors, at, name, &lower));
    if (value.size() > wire::kMaxKeyBytes) {
      return errors.Bad(at,
                        absl::StrCat("must be at most ", wire::kMaxKeyBytes,
                                     " bytes"),
                        absl::StrCat(value.size(), " bytes"));
    }
    out->headers.emplace_back(std::move(lower), value);
  }
  std::sort(out->headers.begin(), out->headers.end());
  for (size_t i = 1; i < out->headers.size(); ++i) {
    if (out->headers[i].first == out->headers[i - 1].first) {
      return errors.Bad(absl::StrCat(field, ".headers"),
                        "names a header twice (names are case-insensitive)",
                        Quote(out->headers[i].first));
    }
  }
  if (!in.key_header().empty()) {
    SLUICE_RETURN_IF_ERROR(HeaderName(errors,
                                      absl::StrCat(field, ".key_header"),
                                      in.key_header(), &out->key_header));
    if (!policy.per_key()) {
      return errors.Bad(absl::StrCat(field, ".key_header"),
                        "gives each value of the header its own limit; that "
                        "needs per_key: true");
    }
  }
  return absl::OkStatus();
}

absl::Status ConvertHttpRoutes(const Errors& errors, const v1::Policy& policy,
                               core::PolicyConfig* config) {
  if (policy.http_routes_size() > kMaxHttpRoutes) {
    return errors.Bad("http_routes",
                      absl::StrCat("must have at most ", kMaxHttpRoutes,
                                   " entries"),
                      absl::StrCat(policy.http_routes_size()));
  }
  for (int i = 0; i < policy.http_routes_size(); ++i) {
    const std::string field = absl::StrCat("http_routes[", i, "]");
    core::HttpRouteConfig out;
    SLUICE_RETURN_IF_ERROR(
        ConvertHttpRoute(errors, field, policy, policy.http_routes(i), &out));
    for (size_t k = 0; k < config->http_routes.size(); ++k) {
      const core::HttpRouteConfig& earlier = config->http_routes[k];
      if (earlier.SameMatch(out)) {
        return errors.Bad(field, absl::StrCat("repeats http_routes[", k, "]"));
      }
      // Within one policy a tie only matters when it leaves the key open.
      if (earlier.key_header != out.key_header &&
          earlier.specificity() == out.specificity() &&
          earlier.Overlaps(out)) {
        return errors.Bad(
            field, absl::StrCat("ties with http_routes[", k,
                                "] (a request can match both, equally "
                                "specific) but names another key_header"));
      }
    }
    config->http_routes.push_back(std::move(out));
  }
  return absl::OkStatus();
}

// The ErrorLocation payload: "<size of policy>:<policy><field>".
constexpr absl::string_view kErrorLocationUrl =
    "type.sluice.dev/sluice.ErrorLocation";

}  // namespace

absl::Status AttachErrorLocation(absl::Status status,
                                 const ErrorLocation& where) {
  status.SetPayload(kErrorLocationUrl,
                    absl::Cord(absl::StrCat(where.policy.size(), ":",
                                            where.policy, where.field)));
  return status;
}

std::optional<ErrorLocation> ErrorLocationOf(const absl::Status& status) {
  const absl::optional<absl::Cord> payload =
      status.GetPayload(kErrorLocationUrl);
  if (!payload.has_value()) return std::nullopt;
  const std::string text(*payload);
  const size_t colon = text.find(':');
  size_t size = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(absl::string_view(text).substr(0, colon), &size) ||
      size > text.size() - colon - 1) {
    return std::nullopt;
  }
  ErrorLocation where;
  where.policy = text.substr(colon + 1, size);
  where.field = text.substr(colon + 1 + size);
  return where;
}


core::HttpRouteConfig CanonicalHttpRoute(const v1::HttpRoute& canonical) {
  core::HttpRouteConfig out;
  out.host = canonical.host();
  out.path_prefix = canonical.path_prefix();
  out.methods.assign(canonical.methods().begin(), canonical.methods().end());
  for (const auto& [name, value] : canonical.headers()) {
    out.headers.emplace_back(name, value);
  }
  std::sort(out.headers.begin(), out.headers.end());
  out.key_header = canonical.key_header();
  return out;
}

std::string HttpRouteString(const core::HttpRouteConfig& route) {
  std::string out = absl::StrCat(
      "host ", route.host.empty() ? "*" : Quote(route.host), " path ",
      route.path_prefix.empty() ? "*" : Quote(route.path_prefix) + "...");
  if (!route.methods.empty()) {
    absl::StrAppend(&out, " methods ", absl::StrJoin(route.methods, ","));
  }
  for (const auto& [name, value] : route.headers) {
    absl::StrAppend(&out, " header ", Quote(name),
                    value.empty() ? "" : absl::StrCat("=", Quote(value)));
  }
  return out;
}

bool SameEnvoyDescriptor(const core::EnvoyDescriptorConfig& a,
                         const core::EnvoyDescriptorConfig& b) {
  if (a.domain != b.domain || a.entries.size() != b.entries.size()) {
    return false;
  }
  for (size_t i = 0; i < a.entries.size(); ++i) {
    if (a.entries[i].key != b.entries[i].key ||
        a.entries[i].value != b.entries[i].value) {
      return false;
    }
  }
  return true;
}

std::string EnvoyDescriptorString(const core::EnvoyDescriptorConfig& d) {
  std::string out = absl::StrCat(Quote(d.domain), " [");
  for (size_t i = 0; i < d.entries.size(); ++i) {
    absl::StrAppend(&out, i == 0 ? "" : ", ", Quote(d.entries[i].key), ": ",
                    d.entries[i].value.empty() ? "*"
                                               : Quote(d.entries[i].value));
  }
  out += "]";
  return out;
}

absl::StatusOr<core::PolicyConfig> ToConfig(const v1::Policy& policy) {
  const Errors errors(policy.name());
  core::PolicyConfig config;
  SLUICE_RETURN_IF_ERROR(ValidateName(errors, policy.name()));
  config.name = policy.name();

  SLUICE_RETURN_IF_ERROR(PositiveDuration(
      errors, "call_timeout", policy.has_call_timeout(), policy.call_timeout(),
      config.call_timeout, &config.call_timeout));

  if (policy.has_rate_limit()) {
    core::RateLimitConfig rate;
    SLUICE_RETURN_IF_ERROR(
        ConvertRateLimit(errors, policy.rate_limit(), &rate));
    config.rate_limit = rate;
  }
  if (policy.has_concurrency()) {
    core::ConcurrencyConfig concurrency;
    if (policy.concurrency().max_in_flight() < 1) {
      return errors.Bad("concurrency.max_in_flight", "must be >= 1",
                        absl::StrCat(policy.concurrency().max_in_flight()));
    }
    concurrency.max_in_flight = policy.concurrency().max_in_flight();
    SLUICE_ASSIGN_OR_RETURN(
        concurrency.scope,
        ToScope(errors, "concurrency.scope", policy.concurrency().scope()));
    config.concurrency = concurrency;
  }
  if (policy.has_breaker()) {
    core::BreakerConfig breaker;
    SLUICE_RETURN_IF_ERROR(ConvertBreaker(errors, policy.breaker(), &breaker));
    config.breaker = breaker;
  }
  if (policy.has_adaptive_throttle()) {
    core::AdaptiveThrottleConfig throttle;
    SLUICE_RETURN_IF_ERROR(ConvertAdaptiveThrottle(
        errors, policy.adaptive_throttle(), &throttle));
    config.adaptive_throttle = throttle;
  }
  if (policy.has_adaptive_concurrency()) {
    core::AdaptiveConcurrencyConfig concurrency;
    SLUICE_RETURN_IF_ERROR(ConvertAdaptiveConcurrency(
        errors, policy.adaptive_concurrency(), &concurrency));
    config.adaptive_concurrency = concurrency;
  }
  if (policy.has_fallback()) {
    SLUICE_RETURN_IF_ERROR(
        ConvertFallback(errors, policy.fallback(), &config.fallback));
  }

  if (policy.on_store_failure() ==
      v1::Policy::STORE_FAILURE_MODE_UNSPECIFIED) {
    config.on_store_failure = core::StoreFailureMode::kFailOpen;
  } else if (const std::optional<core::StoreFailureMode> mode =
                 StoreFailureModeFromProto(policy.on_store_failure())) {
    config.on_store_failure = *mode;
  } else {
    return errors.Bad(
        "on_store_failure", "must be FAIL_OPEN, LOCAL or FAIL_CLOSED",
        absl::StrCat(static_cast<int>(policy.on_store_failure())));
  }

  config.shadow = policy.shadow();
  config.per_key = policy.per_key();
  if (policy.max_keys() > kMaxKeysLimit) {
    return errors.Bad("max_keys", "must be at most 10000000",
                      absl::StrCat(policy.max_keys()));
  }
  if (policy.max_keys() != 0) config.max_keys = policy.max_keys();
  config.version = policy.version();
  config.description = policy.description();
  SLUICE_RETURN_IF_ERROR(ConvertEnvoyDescriptors(errors, policy, &config));
  SLUICE_RETURN_IF_ERROR(ConvertHttpRoutes(errors, policy, &config));
  config.digest = PolicyDigest(FromConfig(config));
  return config;
}

uint64_t PolicyDigest(const v1::Policy& canonical) {
  v1::Policy content = canonical;
  content.set_version(0);
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    content.SerializeToCodedStream(&coded);
  }  // the stream flushes into `bytes` when it goes
  // FNV-1a, 64 bits: fixed constants, so the same bytes give the same digest
  // in every process and build.
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

v1::Policy FromConfig(const core::PolicyConfig& config) {
  v1::Policy out;
  out.set_name(config.name);
  wire::DurationToProto(config.call_timeout, out.mutable_call_timeout());

  if (config.rate_limit.has_value()) {
    const core::RateLimitConfig& in = *config.rate_limit;
    v1::RateLimit* rate = out.mutable_rate_limit();
    rate->set_algorithm(in.algorithm == core::RateAlgorithm::kSlidingWindow
                            ? v1::RateLimit::SLIDING_WINDOW
                            : v1::RateLimit::TOKEN_BUCKET);
    rate->set_rate(in.rate);
    wire::DurationToProto(in.per, rate->mutable_per());
    rate->set_burst(in.burst);
    rate->set_scope(FromScope(in.scope));
    rate->set_buckets(static_cast<uint32_t>(in.buckets));
  }
  if (config.concurrency.has_value()) {
    v1::Concurrency* concurrency = out.mutable_concurrency();
    concurrency->set_max_in_flight(config.concurrency->max_in_flight);
    concurrency->set_scope(FromScope(config.concurrency->scope));
  }
  if (config.breaker.has_value()) {
    const core::BreakerConfig& in = *config.breaker;
    v1::Breaker* breaker = out.mutable_breaker();
    breaker->set_consecutive_failures(in.consecutive_failures);
    breaker->set_failure_rate_threshold(in.failure_rate_threshold);
    // Zero means "rule off"; leave it unset rather than write "0s".
    if (in.slow_call_duration > absl::ZeroDuration()) {
      wire::DurationToProto(in.slow_call_duration, breaker->mutable_slow_call_duration());
    }
    breaker->set_slow_call_rate_threshold(in.slow_call_rate_threshold);
    wire::DurationToProto(in.window, breaker->mutable_window());
    breaker->set_minimum_calls(in.minimum_calls);
    wire::DurationToProto(in.open_duration, breaker->mutable_open_duration());
    wire::DurationToProto(in.max_open_duration, breaker->mutable_max_open_duration());
    breaker->set_half_open_probes(in.half_open_probes);
    breaker->set_successes_to_close(in.successes_to_close);
    if (in.latency_baseline.has_value()) {
      const core::LatencyBaselineConfig& b = *in.latency_baseline;
      v1::LatencyBaseline* baseline = breaker->mutable_latency_baseline();
      baseline->set_factor(b.factor);
      baseline->set_deviations(b.deviations);
      baseline->set_success_rate_drop(b.success_rate_drop);
      baseline->set_warmup_windows(b.warmup_windows);
      baseline->set_history_windows(b.history_windows);
    }
  }
  if (config.adaptive_throttle.has_value()) {
    const core::AdaptiveThrottleConfig& in = *config.adaptive_throttle;
    v1::AdaptiveThrottle* throttle = out.mutable_adaptive_throttle();
    wire::DurationToProto(in.window, throttle->mutable_window());
    throttle->set_k(in.k);
    throttle->set_minimum_requests(in.minimum_requests);
  }
  if (config.adaptive_concurrency.has_value()) {
    const core::AdaptiveConcurrencyConfig& in = *config.adaptive_concurrency;
    v1::AdaptiveConcurrency* concurrency = out.mutable_adaptive_concurrency();
    concurrency->set_min_limit(in.min_limit);
    concurrency->set_max_limit(in.max_limit);
    concurrency->set_initial_limit(in.initial_limit);
    concurrency->set_tolerance(in.tolerance);
    wire::DurationToProto(in.window, concurrency->mutable_window());
    concurrency->set_minimum_samples(in.minimum_samples);
    wire::DurationToProto(in.baseline_window,
                          concurrency->mutable_baseline_window());
  }

  const core::FallbackConfig& fb = config.fallback;
  v1::Fallback* fallback = out.mutable_fallback();
  fallback->set_strategy(StrategyToProto(fb.strategy));
  fallback->set_payload(fb.payload);
  fallback->set_content_type(fb.content_type);
  for (int r = 0; r < core::kReasonCount; ++r) {
    if (fb.on_mask & (uint32_t{1} << r)) {
      fallback->add_on(static_cast<v1::Reason>(r));
    }
  }
  if (fb.cache_ttl > absl::ZeroDuration()) {
    wire::DurationToProto(fb.cache_ttl, fallback->mutable_cache_ttl());
  }
  fallback->set_serve_on_failure(fb.serve_on_failure);
  // The default left unwritten, so that the digest of a policy written
  // before the field existed stays what it was (saved adaptive state is
  // taken back by digest).
  if (fb.http_status != 200) {
    fallback->set_http_status(static_cast<uint32_t>(fb.http_status));
  }

  out.set_on_store_failure(StoreFailureModeToProto(config.on_store_failure));
  out.set_shadow(config.shadow);
  out.set_per_key(config.per_key);
  out.set_max_keys(config.max_keys);
  out.set_version(config.version);
  out.set_description(config.description);
  for (const core::EnvoyDescriptorConfig& d : config.envoy_descriptors) {
    v1::EnvoyDescriptor* descriptor = out.add_envoy_descriptors();
    descriptor->set_domain(d.domain);
    for (const core::EnvoyDescriptorConfig::Entry& e : d.entries) {
      v1::EnvoyDescriptor::Entry* entry = descriptor->add_entries();
      entry->set_key(e.key);
      entry->set_value(e.value);
    }
  }
  out.set_rate_limit_headers(config.rate_limit_headers);
  for (const core::HttpRouteConfig& r : config.http_routes) {
    v1::HttpRoute* route = out.add_http_routes();
    route->set_host(r.host);
    route->set_path_prefix(r.path_prefix);
    for (const std::string& m : r.methods) route->add_methods(m);
    for (const auto& [name, value] : r.headers) {
      (*route->mutable_headers())[name] = value;
    }
    route->set_key_header(r.key_header);
  }
  return out;
}

}  // namespace sluice::policy
