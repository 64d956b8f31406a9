// SPDX-License-Identifier: Apache-2.0
#include "base/backoff.h"

#include <algorithm>

namespace sluice::base {

ExponentialBackoff::ExponentialBackoff(const Options& options)
    : options_(options), rng_(options.seed) {}

absl::Duration ExponentialBackoff::Next() {
  current_ = current_ == absl::ZeroDuration()
                 ? options_.initial
                 : std::min(current_ * 2, options_.max);
  if (options_.jitter <= 0) return current_;
  std::uniform_real_distribution<double> factor(1 - options_.jitter,
                                                1 + options_.jitter);
  return current_ * factor(rng_);
}

}  // namespace sluice::base
