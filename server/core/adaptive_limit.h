// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_ADAPTIVE_LIMIT_H_
#define SLUICE_SERVER_CORE_ADAPTIVE_LIMIT_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "server/core/policy_config.h"

namespace sluice::core {

// What an AdaptiveLimit shows operators.
struct AdaptiveLimitStatus {
  uint32_t limit = 0;
  uint32_t in_flight = 0;
  // The limit a restart starts from (see AdaptiveLimitState).
  uint32_t steady_limit = 0;
  // Lowest window mean latency remembered; 0 until one window was judged.
  absl::Duration baseline = absl::ZeroDuration();
  // Mean latency of the last window judged; 0 before the first.
  absl::Duration last_latency = absl::ZeroDuration();
  uint64_t refused = 0;  // calls refused since the gate was built
};

// What survives a restart (the state file, or the cluster store).
struct AdaptiveLimitState {
  // The capacity last measured: the limit of the last step down, or the
  // current limit when it has not been raised since (or never stepped
  // down). A restart starts from it.
  uint32_t steady_limit = 0;
  // 0 when none was learned.
  absl::Duration baseline = absl::ZeroDuration();
};

// An in-flight limit that follows the dependency's capacity, judged from
// the latencies its calls report (a gradient on baseline over current
// latency, with Little's law giving the step down):
//
// Every `window`, once `minimum_samples` calls admitted under the current
// limit have reported, the window's mean latency L is compared with the
// baseline B, the lowest window mean of the last `baseline_window`:
//   L > tolerance * B: a queue is building. By Little's law the calls in
//     flight that the throughput explains without a queue are
//     in_flight * B / L, where in_flight is the window's time-weighted mean:
//     the capacity. The new limit is 90% of it (at most a halving per
//     step), so the next window surely runs without a queue.
//   else, if the limit was reached in the window: limit + max(1, limit / 10).
//   else: unchanged (the limit does not grow while demand is below it).
// Bounded by [min_limit, max_limit].
//
// Each step down drains the queue, so the next window sees the latency
// without a queue and renews the baseline (even one learned while a queue
// stood, 10% closer each cycle); in steady overload the limit cycles
// between 0.9 and about tolerance times the capacity. Outcomes of
// calls admitted before the last change are not judged (they queued under
// the old limit), so one overload is not counted twice.
//
// Not thread-safe; the owner locks. `config` must outlive the limit or be
// replaced through Reconfigure.
class AdaptiveLimit {
 public:
  // Epochs start at `first_epoch` (>= 1): a limit that replaces a removed
  // one starts past the epochs it handed out, so their late releases are
  // told apart.
  AdaptiveLimit(const AdaptiveConcurrencyConfig& config, absl::Time now,
                uint32_t first_epoch = 1);

  // Takes a slot if one is free; returns the epoch to hand back to Release
  // (>= 1), or 0 when the limit is reached.
  uint32_t TryTake(absl::Time now);
  // A call that held a slot taken in `epoch` ended; `judged` outcomes carry
  // their latency into the window (CANCELLED ones do not). An epoch this
  // limit never handed out frees nothing. Returns true when the limit
  // moved; then *cause says why.
  bool Release(uint32_t epoch, bool judged, absl::Duration latency,
               absl::Time now, std::string* cause);
  // Judges the window if it is due without a report (an idle dependency,
  // or reports that stopped); same return as Release.
  bool Tick(absl::Time now, std::string* cause);
  // The earliest time Tick may change anything: the end of the window, or,
  // with too few samples to judge it, the time the window starts over.
  // Only TryTake, Release, Import and Reconfigure move it.
  absl::Time NextTick() const;

  uint32_t limit() const { return limit_; }
  uint32_t previous_limit() const { return previous_limit_; }
  uint32_t in_flight() const { return in_flight_; }
  uint32_t epoch() const { return epoch_; }
  // Whether a window was judged or state imported since the gate was
  // built (a replica that has neither is a fresh one: see
  // GateSet::ApplyWarm).
  bool judged() const { return judged_; }
  AdaptiveLimitStatus Status() const;

  AdaptiveLimitState Export() const;
  // Starts from saved state: the limit becomes its steady limit (within
  // the bounds) and the baseline is remembered as if learned now. False
  // (and nothing taken) for a state it could not have learned: a steady
  // limit of 0, a baseline that is negative or infinite.
  bool Import(const AdaptiveLimitState& state, absl::Time now);

  // Keeps the limit (within the new bounds) and the baseline.
  void Reconfigure(const AdaptiveConcurrencyConfig& config, absl::Time now);

 private:
  // Judges the window ending `now` if it is due; true when the limit moved.
  bool MaybeJudge(absl::Time now, std::string* cause);
  void Integrate(absl::Time now);
  void SetLimit(uint32_t limit, absl::Time now);
  void StartWindow(absl::Time now);
  absl::Duration Baseline() const;

  const AdaptiveConcurrencyConfig* config_;
  uint32_t limit_;
  uint32_t previous_limit_;
  uint32_t in_flight_ = 0;
  // Bumped on every limit change; slots of older epochs are not judged.
  const uint32_t first_epoch_;
  uint32_t epoch_;
  uint32_t steady_limit_ = 0;  // 0: no step down yet
  uint64_t refused_ = 0;
  bool judged_ = false;

  // The window being measured.
  absl::Time window_start_;
  absl::Time last_change_;  // of in_flight_, for the time integral
  double in_flight_seconds_ = 0;
  bool reached_ = false;
  int64_t samples_ = 0;
  double latency_sum_us_ = 0;
  absl::Duration last_latency_ = absl::ZeroDuration();

  // The baseline: the lowest window mean of this half and the previous
  // half of baseline_window (0: none).
  absl::Duration min_current_ = absl::ZeroDuration();
  absl::Duration min_previous_ = absl::ZeroDuration();
  absl::Time half_start_;
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_ADAPTIVE_LIMIT_H_
