// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_CIRCUIT_BREAKER_H_
#define SLUICE_SERVER_CORE_CIRCUIT_BREAKER_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/core/breaker_state.h"
#include "server/core/bucket_ring.h"
#include "server/core/latency_baseline.h"
#include "server/core/outcome.h"
#include "server/core/policy_config.h"

namespace sluice::core {

// Told about every state change of a CircuitBreaker.
class BreakerListener {
 public:
  virtual ~BreakerListener() = default;
  virtual void OnTransition(BreakerState from, BreakerState to,
                            const std::string& cause, absl::Time at,
                            uint64_t generation, absl::Time open_until) = 0;
};

// Cumulative outcome counts a breaker took into its window since it was
// created (cluster mode shares them).
struct OutcomeTotals {
  uint64_t calls = 0;
  uint64_t failures = 0;
  uint64_t slow = 0;
};

// The shared state of one dependency's breaker in cluster mode. The store
// takes a replica's transition only if the stored generation is still the
// one the transition started from (compare-and-set), so a replica that was
// cut off cannot overwrite what the others decided meanwhile.
struct BreakerRecord {
  uint64_t generation = 0;
  // The stored generation this state was derived from (Export only).
  uint64_t base = 0;
  // kOpen or kClosed; HALF_OPEN follows from open_until by time.
  BreakerState state = BreakerState::kClosed;
  absl::Time open_until = absl::InfinitePast();
  absl::Duration open_duration = absl::ZeroDuration();
  std::string cause;
  std::string replica;  // who stored it; filled in by the sync loop
};

// Outcome counts over the breaker window. Sums and deltas count in 64 bits
// (OutcomeWindow); one bucket of the window's ring in 32, since a bucket
// never counts 2^32 outcomes.
template <typename Count>
struct OutcomeCounts {
  Count calls = 0;     // successes + failures + timeouts (not cancelled)
  Count failures = 0;  // failures + timeouts
  Count timeouts = 0;
  Count slow = 0;
  OutcomeCounts& operator+=(const OutcomeCounts& o) {
    calls += o.calls;
    failures += o.failures;
    timeouts += o.timeouts;
    slow += o.slow;
    return *this;
  }
  OutcomeCounts& operator-=(const OutcomeCounts& o) {
    calls -= o.calls;
    failures -= o.failures;
    timeouts -= o.timeouts;
    slow -= o.slow;
    return *this;
  }
};
using OutcomeWindow = OutcomeCounts<int64_t>;

// CLOSED -> OPEN when a rule trips (consecutive failures, failure rate, slow
// call rate, a departure from the learned baseline: see LatencyBaseline); OPEN -> HALF_OPEN once the open time has passed (checked
// lazily); HALF_OPEN lets at most `half_open_probes` probes run at once and
// closes after `successes_to_close` successful probes; a failed probe opens
// it again for twice the previous open time, up to `max_open_duration`.
// FORCED_OPEN / FORCED_CLOSED are operator overrides that hold until AUTO.
//
// TIMEOUT counts as a failure, CANCELLED counts as nothing. While CLOSED,
// every outcome feeds the rules; while OPEN or HALF_OPEN only probe outcomes
// matter (late reports of calls admitted before the trip are ignored).
//
// Not thread-safe; the owner locks.
//
// A breaker per key of a per_key policy is common, so it holds no copy of
// its config (it points at the policy's, which must outlive it or be
// replaced through Reconfigure) and keeps its window in 32-bit counts.
class CircuitBreaker {
 public:
  // `config` and `listener` (which may be null) must outlive the breaker.
  CircuitBreaker(const BreakerConfig& config, absl::Time now,
                 BreakerListener* listener);

  // The state at `now`, moving OPEN to HALF_OPEN when the open time is over.
  BreakerState State(absl::Time now);

  // Whether a call may pass the breaker at all: false when OPEN or
  // FORCED_OPEN. In HALF_OPEN a passing call still needs TryTakeProbe().
  bool Permits(absl::Time now) {
    const BreakerState s = State(now);
    return s != BreakerState::kOpen && s != BreakerState::kForcedOpen;
  }

  // In HALF_OPEN, takes one of the probe slots and returns the round it
  // belongs to (the generation, >= 1). 0 when every slot is taken.
  uint64_t TryTakeProbe();

  // Feeds one reported outcome. `probe_round` is what TryTakeProbe returned
  // for the call, 0 if it was no probe. A probe of an earlier round (the
  // breaker re-opened or closed meanwhile) counts as a late report.
  void Record(Outcome outcome, absl::Duration latency, uint64_t probe_round,
              absl::Time now);

  // `n` successful calls, none slower than the slow-call rule, that
  // finished by `at` (at most `now`) and reach the breaker together (a
  // per-core slice settles them in batches). Counted in the window where
  // `at` falls, or not at all once that has left it. Judges nothing: the
  // batch comes only while SuccessesCannotTripUntil holds, and a success
  // cannot trip the consecutive rule. Ignored unless CLOSED or
  // FORCED_CLOSED, as late reports are.
  void RecordSuccesses(uint32_t n, absl::Time at, absl::Time now);
  // Until when no number of fast successes (as RecordSuccesses takes) can
  // trip the breaker, as long as nothing else is recorded meanwhile:
  // InfinitePast unless CLOSED without an override and without the
  // latency_baseline rule (which judges each latency). A rate rule trips on
  // a success only below minimum_calls, when the success brings the window
  // up to it; the window only loses counts as it slides, so the answer
  // holds until enough calls have left it.
  absl::Time SuccessesCannotTripUntil(absl::Time now);

  // FORCE_OPEN / FORCE_CLOSED hold until AUTO, which returns to CLOSED with
  // fresh counts.
  void SetOverride(BreakerOverride override, absl::Time now,
                   const std::string& cause);

  // Keeps the state, the open-until time and the window counts; resizes the
  // window when its length changed. `config` must outlive the breaker.
  void Reconfigure(const BreakerConfig& config, absl::Time now);

  // How long until the breaker may let calls through again.
  absl::Duration RetryAfter(absl::Time now);

  // Cluster mode. Probe slots then come from cluster-wide leases: at most
  // `leases` probes run here, and never more than half_open_probes.
  void SetProbeLeases(uint32_t leases) {
    leased_probes_ = true;
    probe_capacity_ = leases;
  }
  // Back to half_open_probes slots of its own (standalone, or store down).
  void UseLocalProbes() {
    leased_probes_ = false;
    probe_capacity_ = config_->half_open_probes;
  }
  // A call was refused because the breaker is OPEN: a caller waits for it
  // to probe. Cluster mode asks for a probe lease while callers wait, so
  // that the first call after the open time probes at once (see
  // GateSet::CollectBreaker). Forgotten on the next transition.
  void NoteCallerWaiting() {
    if (state_ == BreakerState::kOpen) callers_waiting_ = true;
  }
  bool callers_waiting() const { return callers_waiting_; }
  // Probe slots refused since the last call, counting callers that waited
  // through the open time as one; tells whether to ask for a lease.
  uint32_t TakeProbeRefusals() {
    const uint32_t n = probe_refusals_;
    probe_refusals_ = 0;
    return n;
  }
  // Outcomes other replicas saw: they join the window of the ratio rules,
  // which may trip. The consecutive-failure rule stays this replica's own.
  void AddRemoteOutcomes(const OutcomeWindow& delta, absl::Time now);
  // The state to share with the other replicas.
  BreakerRecord Export(absl::Time now);
  // Takes on the shared state (the caller decides when: see
  // GateSet::ApplyBreaker); it becomes the base of later transitions.
  // `origin` names where it comes from in the transition's cause; empty
  // means the replica that stored it.
  void Adopt(const BreakerRecord& record, absl::Time now,
             absl::string_view origin = {});
  // The store took this breaker's state at `generation`.
  void Published(uint64_t generation) {
    base_generation_ = generation;
    generation_ = std::max(generation_, generation);
  }
  // The stored generation the current state derives from.
  uint64_t base_generation() const { return base_generation_; }
  const OutcomeTotals& totals() const { return totals_; }

  absl::Time open_until() const { return open_until_; }
  // The earliest time State() may move by itself (OPEN to HALF_OPEN):
  // open_until while OPEN, InfiniteFuture otherwise.
  absl::Time NextMove() const {
    return state_ == BreakerState::kOpen ? open_until_ : absl::InfiniteFuture();
  }
  // Increases with every trip and every close (the version of the state that
  // replicas share).
  absl::Duration current_open_duration() const { return open_duration_; }
  uint64_t generation() const { return generation_; }
  const std::string& trip_cause() const;
  uint32_t probes_in_flight() const { return probes_in_flight_; }
  uint32_t consecutive_failures() const { return consecutive_failures_; }
  BreakerOverride override_mode() const { return override_; }
  OutcomeWindow WindowCounts(absl::Time now) {
    window_.Advance(now);
    return Widen(window_.Sum());
  }
  const BreakerConfig& config() const { return *config_; }
  // The latency_baseline rule; null when the policy has none.
  LatencyBaseline* baseline() { return baseline_.get(); }

 private:
  void Trip(absl::Time now, const std::string& cause);
  void SetTripCause(const std::string& cause);
  void Close(absl::Time now, const std::string& cause);
  void MoveTo(BreakerState to, absl::Time now, const std::string& cause);
  // Checks the rules after an outcome while CLOSED; trips if one holds.
  void Judge(absl::Time now);
  // The latency_baseline rule, when there is one.
  void JudgeBaseline(absl::Time now);

  using WindowBucket = OutcomeCounts<uint32_t>;
  static OutcomeWindow Widen(const WindowBucket& b);
  static WindowBucket Narrow(const OutcomeWindow& w);

  const BreakerConfig* config_;
  BreakerListener* const listener_;

  BreakerState state_ = BreakerState::kClosed;
  BreakerOverride override_ = BreakerOverride::kAuto;
  uint32_t consecutive_failures_ = 0;
  BucketRing<WindowBucket> window_;
  absl::Time open_until_ = absl::InfinitePast();
  // Open time of the current (or next) trip; doubles after a failed probe.
  absl::Duration open_duration_;
  uint64_t generation_ = 0;
  uint64_t base_generation_ = 0;
  // Why it last tripped; absent until it first does (a string is 4 times
  // the size of a pointer, and most breakers never trip).
  std::unique_ptr<std::string> trip_cause_;
  uint32_t probes_in_flight_ = 0;
  uint32_t probe_successes_ = 0;
  uint32_t probe_capacity_;
  uint32_t probe_refusals_ = 0;
  bool leased_probes_ = false;
  bool callers_waiting_ = false;
  // Outcomes this breaker counted into its window since creation.
  OutcomeTotals totals_;
  // The fourth rule, when configured.
  std::unique_ptr<LatencyBaseline> baseline_;
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_CIRCUIT_BREAKER_H_
