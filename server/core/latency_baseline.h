// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_LATENCY_BASELINE_H_
#define SLUICE_SERVER_CORE_LATENCY_BASELINE_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "server/core/bucket_ring.h"
#include "server/core/outcome.h"
#include "server/core/policy_config.h"

namespace sluice::core {

// What the baseline has learned, as it survives a restart.
struct BaselineState {
  uint32_t windows = 0;  // windows learned
  double mean_us = 0;    // of the windows' mean latency of successful calls
  double var_us2 = 0;    // its variance across windows
  double success = 1;    // of the windows' success rate
};

// What a LatencyBaseline shows operators.
struct BaselineStatus {
  BaselineState learned;
  bool ready = false;  // warmup_windows learned: the rule may trip
  absl::Duration mean = absl::ZeroDuration();
  absl::Duration stddev = absl::ZeroDuration();
  // The live window (the breaker's).
  int64_t live_calls = 0;
  absl::Duration live_mean = absl::ZeroDuration();
  double live_success = 1;
};

// The breaker's fourth rule: a learned baseline of latency and success
// rate, and the check of the live window against it.
//
// Learning: time is cut into periods of the breaker's `window`. A period
// that ends with at least `minimum_calls` outcomes, while the breaker stayed
// CLOSED and the rule did not trip, adds its mean latency (of successful
// calls) and success rate to exponentially weighted means, with weight
// 2 / (history_windows + 1), and the mean latency's variance.
//
// Judging: once `warmup_windows` periods are learned, the live window (the
// breaker's sliding window, at least `minimum_calls` outcomes) departs when
// its mean latency is beyond every condition set (above factor x mean, and
// above mean + deviations x stddev), or its success rate is more than
// success_rate_drop below the learned one. A standard deviation below 5% of
// the mean counts as 5%, so a very steady dependency does not trip on
// jitter.
//
// Not thread-safe; the breaker that owns it locks.
class LatencyBaseline {
 public:
  // `config` (the breaker's, with latency_baseline set) must outlive this or
  // be replaced through Reconfigure.
  LatencyBaseline(const BreakerConfig& config, absl::Time now);

  // One outcome of a call while the breaker is CLOSED. CANCELLED outcomes
  // are not passed in.
  void Record(Outcome outcome, absl::Duration latency, absl::Time now);
  // Whether the live window departs from the baseline; fills *cause then.
  bool Departs(absl::Time now, std::string* cause);
  // The breaker tripped (by any rule): the period in progress is not
  // learned and the live window starts over.
  void Tripped(absl::Time now);
  // The breaker closed: a new period and live window start.
  void Restart(absl::Time now);

  BaselineStatus Status(absl::Time now);
  BaselineState Export() const { return learned_; }
  // Takes saved state; false (and nothing taken) when it is not a state
  // this class could have learned: a NaN, a negative mean or variance, a
  // success rate outside [0, 1].
  bool Import(const BaselineState& state);

  void Reconfigure(const BreakerConfig& config, absl::Time now);

 private:
  struct Counts {
    int64_t calls = 0;
    int64_t successes = 0;
    double latency_us = 0;  // sum over successful calls
    Counts& operator+=(const Counts& o) {
      calls += o.calls;
      successes += o.successes;
      latency_us += o.latency_us;
      return *this;
    }
    Counts& operator-=(const Counts& o) {
      calls -= o.calls;
      successes -= o.successes;
      latency_us -= o.latency_us;
      return *this;
    }
  };
  const LatencyBaselineConfig& rule() const {
    return *config_->latency_baseline;
  }
  // Ends the period if it is over, learning it when it qualifies (not when
  // the live window departs from the baseline at that moment).
  void MaybeLearn(absl::Time now);
  // Departs without first ending the period.
  bool LiveDeparts(absl::Time now, std::string* cause);
  bool ready() const { return learned_.windows >= rule().warmup_windows; }

  const BreakerConfig* config_;
  BucketRing<Counts> live_;
  Counts period_;
  absl::Time period_start_;
  bool period_tainted_ = false;
  BaselineState learned_;
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_LATENCY_BASELINE_H_
