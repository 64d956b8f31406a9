// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_CLIENT_SRC_BACKOFF_H_
#define SLUICE_CLIENT_SRC_BACKOFF_H_

#include <atomic>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/backoff.h"

namespace sluice::client::internal {

// Decides whether to ask Sluice at all. After `after_failures` transport
// failures in a row it backs off: for one backoff period every Acquire is
// decided locally; then exactly one call probes Sluice. A failed probe
// doubles the period (up to `max`), a success ends the backoff. Each period
// is jittered when it starts (base::ExponentialBackoff); a period that
// passes without a probe answered is not.
//
// Time is passed in, so tests drive it without sleeping. Safe for concurrent
// use; the common case (not backing off) is two atomic loads.
class Backoff {
 public:
  struct Options {
    int after_failures = 3;
    absl::Duration initial = absl::Milliseconds(250);
    absl::Duration max = absl::Seconds(5);
    double jitter = 0.2;  // in [0, 1)
    uint64_t seed = 1;
  };

  explicit Backoff(const Options& options);

  // True: ask Sluice. False: decide locally, the client is backing off.
  bool ShouldAsk(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the current period at `now` (the connection to Sluice is back), so
  // that the next ShouldAsk sends the probe at once. The period's length
  // stands: a failed probe still doubles it. No effect when not backing off.
  void EndPeriod(absl::Time now);
  void RecordSuccess() ABSL_LOCKS_EXCLUDED(mu_);
  void RecordFailure(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  bool backing_off() const { return until_ns_.load() != kNotBackingOff; }
  // The period in force (zero when not backing off).
  absl::Duration current() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  static constexpr int64_t kNotBackingOff = INT64_MIN;

  const Options options_;

  // Backing off until this time (unix ns), or kNotBackingOff.
  std::atomic<int64_t> until_ns_{kNotBackingOff};
  std::atomic<int> consecutive_failures_{0};
  // A probe call is out; its failure doubles the period.
  std::atomic<bool> probing_{false};

  mutable absl::Mutex mu_;
  // The period in force (zero when not backing off) and the jitter.
  base::ExponentialBackoff periods_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::client::internal

#endif  // SLUICE_CLIENT_SRC_BACKOFF_H_
