// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_CORE_ENGINE_TEST_UTIL_H_
#define SLUICE_TESTS_CORE_ENGINE_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "server/core/policy_config.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/recording_event_sink.h"

namespace sluice::core {

// Builders for the policies the engine tests use. Every gate is off unless a
// helper turns it on.
inline PolicyConfig MakePolicy(std::string name) {
  PolicyConfig p;
  p.name = std::move(name);
  p.call_timeout = absl::Seconds(1);
  return p;
}

inline PolicyConfig& WithBucket(PolicyConfig& p, double rate, double burst,
                                absl::Duration per = absl::Seconds(1)) {
  RateLimitConfig r;
  r.algorithm = RateAlgorithm::kTokenBucket;
  r.rate = rate;
  r.per = per;
  r.burst = burst;
  p.rate_limit = r;
  return p;
}

inline PolicyConfig& WithWindow(PolicyConfig& p, double limit,
                                absl::Duration per, int buckets = 10) {
  RateLimitConfig r;
  r.algorithm = RateAlgorithm::kSlidingWindow;
  r.rate = limit;
  r.per = per;
  r.burst = limit;
  r.buckets = buckets;
  p.rate_limit = r;
  return p;
}

inline PolicyConfig& WithConcurrency(PolicyConfig& p, uint32_t max_in_flight) {
  ConcurrencyConfig c;
  c.max_in_flight = max_in_flight;
  p.concurrency = c;
  return p;
}

// A breaker that trips after `consecutive` failures and otherwise uses the
// defaults (15 s open, doubling to 300 s, one probe, one success to close).
inline PolicyConfig& WithBreaker(PolicyConfig& p, uint32_t consecutive) {
  BreakerConfig b;
  b.consecutive_failures = consecutive;
  p.breaker = b;
  return p;
}

inline PolicyConfig& WithFallback(PolicyConfig& p, uint32_t on_mask) {
  p.fallback.strategy = FallbackStrategy::kStatic;
  p.fallback.payload = R"({"degraded":true})";
  p.fallback.content_type = "application/json";
  p.fallback.on_mask = on_mask;
  return p;
}

constexpr uint32_t Bit(Reason r) { return uint32_t{1} << static_cast<int>(r); }

inline uint64_t VerdictReason(const DecisionCounters& c, Verdict v, Reason r) {
  return c.by_verdict_reason[static_cast<int>(v)][static_cast<int>(r)];
}

inline uint64_t Outcomes(const DecisionCounters& c, Outcome o) {
  return c.outcomes[static_cast<int>(o)];
}

// Checks the conservation rule on one dependency's counters.
inline void ExpectConserved(const DecisionCounters& c) {
  EXPECT_EQ(c.acquired, c.allowed + c.rejected + c.degraded);
  uint64_t by_verdict[4] = {0, 0, 0, 0};
  for (int v = 0; v < 4; ++v) {
    for (int r = 0; r < kReasonCount; ++r) {
      by_verdict[v] += c.by_verdict_reason[v][r];
    }
  }
  EXPECT_EQ(by_verdict[0], 0u);
  EXPECT_EQ(by_verdict[static_cast<int>(Verdict::kAllow)], c.allowed);
  EXPECT_EQ(by_verdict[static_cast<int>(Verdict::kReject)], c.rejected);
  EXPECT_EQ(by_verdict[static_cast<int>(Verdict::kDegrade)], c.degraded);
}

// Options with a fixed permit_id_seed and a permit_key made from it, so that
// permit ids are the same on every run (and differ between seeds).
inline Engine::Options SeededOptions(uint64_t permit_id_seed = 0x5EED) {
  Engine::Options options;
  options.permit_id_seed = permit_id_seed;
  options.permit_key = {permit_id_seed, ~permit_id_seed};
  return options;
}

// An engine on a fake clock with a recording sink.
class EngineTest : public ::testing::Test {
 protected:
  EngineTest() : engine_(&clock_, SeededOptions(), &sink_) {}

  // Acquire that must succeed (return a decision, not an error).
  Decision Acquire(absl::string_view dependency, absl::string_view key = "",
                   uint32_t permits = 1) {
    absl::StatusOr<Decision> d = engine_.Acquire(dependency, key, permits);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *std::move(d) : Decision{};
  }

  BreakerState Report(absl::string_view dependency, const Decision& d,
                      Outcome outcome,
                      absl::Duration latency = absl::Milliseconds(5),
                      absl::string_view key = "") {
    return engine_.Report(dependency, key, d.permit_id, outcome, latency);
  }

  LivePolicyStatus Inspect(absl::string_view dependency,
                           absl::string_view key = "") {
    absl::StatusOr<LivePolicyStatus> s = engine_.Inspect(dependency, key);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : LivePolicyStatus{};
  }

  GateStatus Gates(absl::string_view dependency, absl::string_view key = "") {
    LivePolicyStatus s = Inspect(dependency, key);
    EXPECT_TRUE(s.gates.has_value());
    return s.gates.value_or(GateStatus{});
  }

  testing::FakeClock clock_;
  testing::RecordingEventSink sink_;
  Engine engine_;
};

}  // namespace sluice::core

#endif  // SLUICE_TESTS_CORE_ENGINE_TEST_UTIL_H_
