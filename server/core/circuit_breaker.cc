// SPDX-License-Identifier: Apache-2.0
#include "server/core/circuit_breaker.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sluice::core {
namespace {

std::string Percent(double ratio) {
  return absl::StrFormat("%.0f%%", ratio * 100);
}

// Clamps a count into a window bucket's 32 bits.
uint32_t Clamp32(int64_t n) {
  return static_cast<uint32_t>(
      std::clamp<int64_t>(n, 0, std::numeric_limits<uint32_t>::max()));
}

}  // namespace

OutcomeWindow CircuitBreaker::Widen(const WindowBucket& b) {
  OutcomeWindow w;
  w.calls = b.calls;
  w.failures = b.failures;
  w.timeouts = b.timeouts;
  w.slow = b.slow;
  return w;
}

CircuitBreaker::WindowBucket CircuitBreaker::Narrow(const OutcomeWindow& w) {
  WindowBucket b;
  b.calls = Clamp32(w.calls);
  b.failures = Clamp32(w.failures);
  b.timeouts = Clamp32(w.timeouts);
  b.slow = Clamp32(w.slow);
  return b;
}

CircuitBreaker::CircuitBreaker(const BreakerConfig& config, absl::Time now,
                               BreakerListener* listener)
    : config_(&config),
      listener_(listener),
      window_(config.window, config.buckets),
      open_duration_(config.open_duration),
      probe_capacity_(config.half_open_probes) {
  window_.Advance(now);
  if (config.latency_baseline) {
    baseline_ = std::make_unique<LatencyBaseline>(config, now);
  }
}

const std::string& CircuitBreaker::trip_cause() const {
  static const std::string* const none = new std::string();
  return trip_cause_ ? *trip_cause_ : *none;
}

void CircuitBreaker::SetTripCause(const std::string& cause) {
  if (trip_cause_) {
    *trip_cause_ = cause;
  } else {
    trip_cause_ = std::make_unique<std::string>(cause);
  }
}

BreakerState CircuitBreaker::State(absl::Time now) {
  if (state_ == BreakerState::kOpen && now >= open_until_) {
    probes_in_flight_ = 0;
    probe_successes_ = 0;
    // Whoever waited wants a probe now: keep asking for the probe lease
    // (in cluster mode) until a probe is in flight.
    if (callers_waiting_) probe_refusals_ = std::max(probe_refusals_, 1u);
    MoveTo(BreakerState::kHalfOpen, now,
           absl::StrCat("open for ", absl::FormatDuration(open_duration_),
                        ", probing"));
  }
  return state_;
}

uint64_t CircuitBreaker::TryTakeProbe() {
  if (state_ != BreakerState::kHalfOpen) return 0;
  if (probes_in_flight_ >= std::min(probe_capacity_, config_->half_open_probes)) {
    ++probe_refusals_;
    return 0;
  }
  ++probes_in_flight_;
  return generation_;
}

void CircuitBreaker::Record(Outcome outcome, absl::Duration latency,
                            uint64_t probe_round, absl::Time now) {
  const BreakerState state = State(now);
  // A probe slot belongs to the HALF_OPEN round that handed it out; a
  // report arriving after the round ended (re-opened, closed) frees nothing.
  const bool live_probe = probe_round != 0 &&
                          state == BreakerState::kHalfOpen &&
                          probe_round == generation_;
  if (live_probe && probes_in_flight_ > 0) --probes_in_flight_;
  if (outcome == Outcome::kCancelled) return;

  const bool failed =
      outcome == Outcome::kFailure || outcome == Outcome::kTimeout;
  const bool slow =
      config_->slow_rule_enabled() && latency > config_->slow_call_duration;

  switch (state) {
    case BreakerState::kForcedOpen:
    case BreakerState::kOpen:
      // Late reports of calls admitted before the trip are old news.
      return;
    case BreakerState::kHalfOpen:
      if (!live_probe) return;
      if (failed) {
        open_duration_ = std::min(open_duration_ * 2, config_->max_open_duration);
        Trip(now, absl::StrCat("probe failed (", OutcomeName(outcome), ")"));
      } else if (slow) {
        open_duration_ = std::min(open_duration_ * 2, config_->max_open_duration);
        Trip(now, absl::StrCat("probe slow (",
                               absl::FormatDuration(latency), " > ",
                               absl::FormatDuration(config_->slow_call_duration),
                               ")"));
      } else if (++probe_successes_ >= config_->successes_to_close) {
        Close(now, absl::StrCat(probe_successes_, " successful probe",
                                probe_successes_ == 1 ? "" : "s"));
      }
      return;
    case BreakerState::kClosed:
    case BreakerState::kForcedClosed: {
      window_.Advance(now);
      WindowBucket one;
      one.calls = 1;
      one.failures = failed ? 1 : 0;
      one.timeouts = outcome == Outcome::kTimeout ? 1 : 0;
      one.slow = slow ? 1 : 0;
      window_.Add(one);
      consecutive_failures_ = failed ? consecutive_failures_ + 1 : 0;
      ++totals_.calls;
      if (failed) ++totals_.failures;
      if (slow) ++totals_.slow;
      // The baseline learns only what the breaker judges: not what an
      // operator's FORCED_CLOSED lets through.
      if (baseline_ && state == BreakerState::kClosed) {
        baseline_->Record(outcome, latency, now);
      }
      // FORCED_CLOSED keeps counting so GetState shows what it hides.
      if (state == BreakerState::kClosed) Judge(now);
      return;
    }
  }
}

void CircuitBreaker::RecordSuccesses(uint32_t n, absl::Time at,
                                     absl::Time now) {
  if (n == 0) return;
  const BreakerState state = State(now);
  if (state != BreakerState::kClosed && state != BreakerState::kForcedClosed) {
    return;
  }
  window_.Advance(now);
  WindowBucket calls;
  calls.calls = n;
  window_.AddAt(std::min(at, now), calls);
  consecutive_failures_ = 0;
  totals_.calls += n;
}

absl::Time CircuitBreaker::SuccessesCannotTripUntil(absl::Time now) {
  if (State(now) != BreakerState::kClosed || baseline_ != nullptr) {
    return absl::InfinitePast();
  }
  window_.Advance(now);
  const WindowBucket& sum = window_.Sum();
  // The most calls a rule with `threshold` may see its `bad` count in
  // without tripping; a window holding fewer calls than this (but at least
  // minimum_calls) trips on the success that brings it there.
  const auto calls_needed = [&](double threshold, uint32_t bad) -> int64_t {
    if (threshold <= 0 || bad == 0) return 0;
    // bad / calls >= threshold trips: calls must exceed bad / threshold.
    return static_cast<int64_t>(std::floor(bad / threshold)) + 1;
  };
  int64_t needed = calls_needed(config_->failure_rate_threshold, sum.failures);
  if (config_->slow_rule_enabled()) {
    needed = std::max(
        needed, calls_needed(config_->slow_call_rate_threshold, sum.slow));
  }
  // At or below minimum_calls the rule is not judged; a success can bring
  // the window to minimum_calls, where it is.
  const int64_t minimum = config_->minimum_calls;
  if (needed <= minimum) return absl::InfiniteFuture();
  // Safe while the calls that stay in the window number at least `needed`
  // (the failures that leave with them only help).
  int64_t staying = sum.calls;
  if (staying < needed) return absl::InfinitePast();
  absl::Time until = absl::InfiniteFuture();
  window_.ForEachOldestFirst([&](const WindowBucket& b, absl::Time leaves) {
    if (until != absl::InfiniteFuture()) return;
    staying -= b.calls;
    if (staying < needed) until = leaves;
  });
  return until;
}

void CircuitBreaker::Judge(absl::Time now) {
  if (config_->consecutive_failures > 0 &&
      consecutive_failures_ >= config_->consecutive_failures) {
    Trip(now, absl::StrCat(consecutive_failures_, " consecutive failures"));
    return;
  }
  const OutcomeWindow w = Widen(window_.Sum());
  if (w.calls == 0 || w.calls < static_cast<int64_t>(config_->minimum_calls)) {
    // The baseline rule counts its own window (this replica's calls only).
    JudgeBaseline(now);
    return;
  }
  // Built only for a trip: this runs on every report once minimum_calls is
  // reached, and the hot path must not allocate.
  const auto over = [&] {
    return absl::StrCat(" over ", absl::FormatDuration(config_->window), ", ",
                        w.calls, " calls");
  };
  const double failure_rate = static_cast<double>(w.failures) / w.calls;
  if (config_->failure_rate_threshold > 0 &&
      failure_rate >= config_->failure_rate_threshold) {
    Trip(now, absl::StrCat("failure rate ", Percent(failure_rate),
                           " >= ", Percent(config_->failure_rate_threshold),
                           over()));
    return;
  }
  const double slow_rate = static_cast<double>(w.slow) / w.calls;
  if (config_->slow_rule_enabled() &&
      slow_rate >= config_->slow_call_rate_threshold) {
    Trip(now, absl::StrCat("slow call rate ", Percent(slow_rate), " >= ",
                           Percent(config_->slow_call_rate_threshold),
                           " (slower than ",
                           absl::FormatDuration(config_->slow_call_duration),
                           ")", over()));
    return;
  }
  JudgeBaseline(now);
}

void CircuitBreaker::JudgeBaseline(absl::Time now) {
  if (!baseline_) return;
  std::string cause;
  if (baseline_->Departs(now, &cause)) Trip(now, cause);
}

void CircuitBreaker::Trip(absl::Time now, const std::string& cause) {
  ++generation_;
  SetTripCause(cause);
  open_until_ = now + open_duration_;
  probes_in_flight_ = 0;
  probe_successes_ = 0;
  consecutive_failures_ = 0;
  window_.Clear();
  if (baseline_) baseline_->Tripped(now);
  MoveTo(BreakerState::kOpen, now, cause);
}

void CircuitBreaker::Close(absl::Time now, const std::string& cause) {
  // A close is news for the other replicas too, so it is a new generation.
  ++generation_;
  open_duration_ = config_->open_duration;
  open_until_ = absl::InfinitePast();
  probes_in_flight_ = 0;
  probe_successes_ = 0;
  consecutive_failures_ = 0;
  window_.Clear();
  if (baseline_) baseline_->Restart(now);
  MoveTo(BreakerState::kClosed, now, cause);
}

void CircuitBreaker::MoveTo(BreakerState to, absl::Time now,
                            const std::string& cause) {
  const BreakerState from = state_;
  if (from == to) return;
  state_ = to;
  callers_waiting_ = false;
  if (listener_ != nullptr) {
    listener_->OnTransition(from, to, cause, now, generation_,
                            to == BreakerState::kOpen ? open_until_
                                                      : absl::InfinitePast());
  }
}

void CircuitBreaker::SetOverride(BreakerOverride override, absl::Time now,
                                 const std::string& cause) {
  if (override == override_) return;
  override_ = override;
  switch (override) {
    case BreakerOverride::kForceOpen:
      MoveTo(BreakerState::kForcedOpen, now, cause);
      return;
    case BreakerOverride::kForceClosed:
      MoveTo(BreakerState::kForcedClosed, now, cause);
      return;
    case BreakerOverride::kAuto:
      Close(now, cause);
      return;
  }
}

void CircuitBreaker::Reconfigure(const BreakerConfig& config, absl::Time now) {
  config_ = &config;
  if (!leased_probes_) probe_capacity_ = config.half_open_probes;
  window_.Reshape(config.window, config.buckets, now);
  if (!config.latency_baseline) {
    baseline_.reset();
  } else if (baseline_) {
    baseline_->Reconfigure(config, now);
  } else {
    baseline_ = std::make_unique<LatencyBaseline>(config, now);
  }
  if (state_ == BreakerState::kClosed) {
    open_duration_ = config.open_duration;
  } else {
    open_duration_ = std::clamp(open_duration_, config.open_duration,
                                config.max_open_duration);
  }
}

absl::Duration CircuitBreaker::RetryAfter(absl::Time now) {
  switch (State(now)) {
    case BreakerState::kOpen:
      return std::max(open_until_ - now, absl::ZeroDuration());
    case BreakerState::kForcedOpen:
      // Nobody knows when the operator lifts it; suggest one open time.
      return config_->open_duration;
    default:
      return absl::ZeroDuration();
  }
}

void CircuitBreaker::AddRemoteOutcomes(const OutcomeWindow& delta,
                                       absl::Time now) {
  if (delta.calls == 0) return;
  const BreakerState state = State(now);
  if (state != BreakerState::kClosed && state != BreakerState::kForcedClosed) {
    return;
  }
  window_.Advance(now);
  window_.Add(Narrow(delta));
  if (state == BreakerState::kClosed) Judge(now);
}

BreakerRecord CircuitBreaker::Export(absl::Time now) {
  BreakerRecord record;
  record.generation = generation_;
  record.base = base_generation_;
  const BreakerState state = State(now);
  record.state = state == BreakerState::kOpen || state == BreakerState::kHalfOpen
                     ? BreakerState::kOpen
                     : BreakerState::kClosed;
  // An override is not the breaker's own state: share what the rules say.
  if (state == BreakerState::kForcedOpen || state == BreakerState::kForcedClosed) {
    record.state = open_until_ > absl::InfinitePast() ? BreakerState::kOpen
                                                      : BreakerState::kClosed;
  }
  record.open_until = open_until_;
  record.open_duration = open_duration_;
  record.cause = trip_cause();
  return record;
}

void CircuitBreaker::Adopt(const BreakerRecord& record, absl::Time now,
                           absl::string_view origin) {
  base_generation_ = record.generation;
  const bool same = record.generation == generation_ &&
                    open_until_ == record.open_until &&
                    (record.state == BreakerState::kOpen) ==
                        (open_until_ != absl::InfinitePast());
  if (same) return;
  generation_ = record.generation;
  open_duration_ = record.open_duration > absl::ZeroDuration()
                       ? record.open_duration
                       : config_->open_duration;
  // A closed record still carries its last trip's cause, which is not why
  // it closed.
  const absl::string_view what = record.state == BreakerState::kOpen
                                     ? absl::string_view(record.cause)
                                     : "closed";
  const std::string cause =
      origin.empty()
          ? absl::StrCat(what, " (from replica ", record.replica, ")")
          : absl::StrCat(what, " (", origin, ")");
  probes_in_flight_ = 0;
  probe_successes_ = 0;
  consecutive_failures_ = 0;
  window_.Clear();
  if (baseline_) {
    if (record.state == BreakerState::kOpen) {
      baseline_->Tripped(now);
    } else {
      baseline_->Restart(now);
    }
  }
  if (record.state == BreakerState::kOpen) {
    open_until_ = record.open_until;
    SetTripCause(record.cause);
  } else {
    open_until_ = absl::InfinitePast();
    open_duration_ = config_->open_duration;
  }
  // An operator override outranks the cluster's breaker state.
  if (override_ != BreakerOverride::kAuto) return;
  if (record.state == BreakerState::kOpen) {
    if (state_ == BreakerState::kOpen) {
      // Already open here: only the times change, which is no transition.
      return;
    }
    MoveTo(BreakerState::kOpen, now, cause);
    State(now);  // straight on to HALF_OPEN if that time has come
  } else {
    MoveTo(BreakerState::kClosed, now, cause);
  }
}

}  // namespace sluice::core
