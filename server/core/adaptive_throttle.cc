// SPDX-License-Identifier: Apache-2.0
#include "server/core/adaptive_throttle.h"

#include <algorithm>

namespace sluice::core {

AdaptiveThrottle::AdaptiveThrottle(const AdaptiveThrottleConfig& config)
    : config_(&config), window_(config.window, config.buckets) {}

double AdaptiveThrottle::ProbabilityOf(const Counts& c) const {
  if (c.requests < static_cast<int64_t>(config_->minimum_requests)) return 0;
  const double excess = static_cast<double>(c.requests) -
                        config_->k * static_cast<double>(c.accepts);
  return std::max(0.0, excess / (static_cast<double>(c.requests) + 1));
}

bool AdaptiveThrottle::Refuse(absl::Time now, double* probability) {
  window_.Advance(now);
  // The probability before this call is counted: the call is judged by
  // what the dependency did with the calls before it.
  const double p = ProbabilityOf(window_.Sum());
  *probability = p;
  if (p <= 0) {
    credit_ = 0;
    return false;
  }
  last_positive_ = p;
  last_positive_at_ = now;
  credit_ += p;
  if (credit_ < 1) return false;
  credit_ -= 1;
  ++refused_;
  return true;
}

void AdaptiveThrottle::Refused(absl::Time now) {
  window_.Advance(now);
  Counts one;
  one.requests = 1;
  window_.Add(one);
}

void AdaptiveThrottle::Record(Outcome outcome, absl::Time now) {
  if (outcome == Outcome::kCancelled) return;
  window_.Advance(now);
  Counts one;
  one.requests = 1;
  one.accepts = outcome == Outcome::kSuccess ? 1 : 0;
  window_.Add(one);
}

double AdaptiveThrottle::Probability(absl::Time now) {
  window_.Advance(now);
  const double p = ProbabilityOf(window_.Sum());
  if (p > 0) {
    last_positive_ = p;
    last_positive_at_ = now;
  }
  return p;
}

ThrottleStatus AdaptiveThrottle::Status(absl::Time now) {
  window_.Advance(now);
  ThrottleStatus s;
  s.requests = window_.Sum().requests;
  s.accepts = window_.Sum().accepts;
  s.probability = ProbabilityOf(window_.Sum());
  s.refused = refused_;
  return s;
}

void AdaptiveThrottle::Reconfigure(const AdaptiveThrottleConfig& config,
                                   absl::Time now) {
  config_ = &config;
  window_.Reshape(config.window, config.buckets, now);
}

}  // namespace sluice::core
