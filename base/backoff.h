// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_BASE_BACKOFF_H_
#define SLUICE_BASE_BACKOFF_H_

#include <cstdint>
#include <random>

#include "absl/time/time.h"

namespace sluice::base {

// An exponential backoff: after a failure wait `initial`, and after each
// further failure twice as long as the time before, up to `max`; a success
// (Reset) starts again from `initial`. With `jitter` each wait is scaled by
// a factor drawn uniformly from [1 - jitter, 1 + jitter], from a generator
// seeded with `seed`, so a test sees the same waits every run. Not
// thread-safe; the owner locks.
class ExponentialBackoff {
 public:
  struct Options {
    absl::Duration initial = absl::Milliseconds(100);
    absl::Duration max = absl::Seconds(1);
    double jitter = 0;  // in [0, 1); 0 draws nothing
    uint64_t seed = 1;
  };

  explicit ExponentialBackoff(const Options& options);

  // A failure: the period grows (to `initial` after a success or at the
  // start) and the wait before the next attempt is returned, jittered.
  absl::Duration Next();
  // A success: the next failure waits `initial` again.
  void Reset() { current_ = absl::ZeroDuration(); }
  // The period in force, without jitter (zero after a success).
  absl::Duration current() const { return current_; }

 private:
  const Options options_;
  absl::Duration current_ = absl::ZeroDuration();
  std::mt19937_64 rng_;
};

}  // namespace sluice::base

#endif  // SLUICE_BASE_BACKOFF_H_
