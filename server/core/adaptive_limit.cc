// SPDX-License-Identifier: Apache-2.0
#include "server/core/adaptive_limit.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace sluice::core {
namespace {

// A step down goes to this share of the capacity Little's law gives.
constexpr double kDrain = 0.9;
// A window that has not seen minimum_samples reports in this many windows
// starts over.
constexpr int kStaleWindows = 10;

std::string Millis(absl::Duration d) {
  return absl::StrFormat("%.1fms", absl::ToDoubleMilliseconds(d));
}

}  // namespace

AdaptiveLimit::AdaptiveLimit(const AdaptiveConcurrencyConfig& config,
                             absl::Time now, uint32_t first_epoch)
    : config_(&config),
      limit_(std::clamp(config.initial_limit, config.min_limit,
                        config.max_limit)),
      previous_limit_(limit_),
      first_epoch_(std::max<uint32_t>(1, first_epoch)),
      epoch_(first_epoch_),
      half_start_(now) {
  StartWindow(now);
}

uint32_t AdaptiveLimit::TryTake(absl::Time now) {
  if (in_flight_ >= limit_) {
    reached_ = true;
    ++refused_;
    return 0;
  }
  Integrate(now);
  ++in_flight_;
  if (in_flight_ >= limit_) reached_ = true;
  return epoch_;
}

bool AdaptiveLimit::Release(uint32_t epoch, bool judged,
                            absl::Duration latency, absl::Time now,
                            std::string* cause) {
  if (epoch < first_epoch_ || epoch > epoch_) {
    return MaybeJudge(now, cause);  // a slot of a limit this one replaced
  }
  Integrate(now);
  if (in_flight_ > 0) --in_flight_;
  // A call admitted under an earlier limit waited in the queue that limit
  // allowed: its latency says nothing about the current one.
  if (judged && epoch == epoch_) {
    ++samples_;
    latency_sum_us_ +=
        std::max(0.0, absl::ToDoubleMicroseconds(latency));
  }
  return MaybeJudge(now, cause);
}

bool AdaptiveLimit::Tick(absl::Time now, std::string* cause) {
  return MaybeJudge(now, cause);
}

absl::Time AdaptiveLimit::NextTick() const {
  // Mirrors the tests at the top of MaybeJudge.
  if (samples_ < static_cast<int64_t>(config_->minimum_samples)) {
    return window_start_ + kStaleWindows * config_->window;
  }
  return window_start_ + config_->window;
}

void AdaptiveLimit::Integrate(absl::Time now) {
  if (now > last_change_) {
    in_flight_seconds_ +=
        in_flight_ * absl::ToDoubleSeconds(now - last_change_);
    last_change_ = now;
  }
}

void AdaptiveLimit::StartWindow(absl::Time now) {
  window_start_ = now;
  last_change_ = now;
  in_flight_seconds_ = 0;
  reached_ = in_flight_ >= limit_;
  samples_ = 0;
  latency_sum_us_ = 0;
}

absl::Duration AdaptiveLimit::Baseline() const {
  if (min_current_ == absl::ZeroDuration()) return min_previous_;
  if (min_previous_ == absl::ZeroDuration()) return min_current_;
  return std::min(min_current_, min_previous_);
}

void AdaptiveLimit::SetLimit(uint32_t limit, absl::Time now) {
  previous_limit_ = limit_;
  limit_ = limit;
  // One change a window at most: 2^32 epochs outlast any process.
  ++epoch_;
}

bool AdaptiveLimit::MaybeJudge(absl::Time now, std::string* cause) {
  if (now - window_start_ < config_->window) return false;
  if (samples_ < static_cast<int64_t>(config_->minimum_samples)) {
    // Too few reports to judge: keep measuring. The limit does not grow
    // either, since nothing says the dependency could take more. After
    // kStaleWindows windows, start over: what it saw is too old to judge.
    if (now - window_start_ >= kStaleWindows * config_->window) {
      StartWindow(now);
    }
    return false;
  }
  Integrate(now);
  const double elapsed = absl::ToDoubleSeconds(now - window_start_);
  const double mean_in_flight = in_flight_seconds_ / elapsed;
  const absl::Duration latency =
      absl::Microseconds(latency_sum_us_ / static_cast<double>(samples_));
  last_latency_ = latency;
  judged_ = true;

  // The baseline remembers the lowest window mean of the last
  // baseline_window, kept as the minimum of two half windows so that it
  // renews without storing every window.
  if (now - half_start_ >= config_->baseline_window / 2) {
    min_previous_ = min_current_;
    min_current_ = absl::ZeroDuration();
    half_start_ = now;
  }
  if (latency > absl::ZeroDuration() &&
      (min_current_ == absl::ZeroDuration() || latency < min_current_)) {
    min_current_ = latency;
  }
  const absl::Duration baseline = Baseline();

  uint32_t next = limit_;
  if (baseline > absl::ZeroDuration() &&
      latency > config_->tolerance * baseline) {
    // Little's law: the calls the throughput keeps in flight without a
    // queue are in_flight x baseline / latency: the capacity.
    const double capacity =
        mean_in_flight * absl::FDivDuration(baseline, latency);
    // 10% below it, so the next window surely runs without a queue and
    // renews the baseline: one learned while a queue stood (at start under
    // overload) would otherwise hold the limit above the capacity for good.
    const double floor = std::ceil(limit_ / 2.0);
    next = static_cast<uint32_t>(
        std::max(std::round(kDrain * capacity), floor));
    next = std::clamp(next, config_->min_limit, config_->max_limit);
    if (next < limit_) {
      steady_limit_ = next;
      if (cause != nullptr) {
        *cause = absl::StrFormat(
            "mean latency %s > %.2g x baseline %s at %.1f in flight: "
            "capacity about %.1f",
            Millis(latency), config_->tolerance, Millis(baseline),
            mean_in_flight, capacity);
      }
    }
  } else if (reached_) {
    const uint32_t step = std::max<uint32_t>(1, limit_ / 10);
    next = static_cast<uint32_t>(std::min<uint64_t>(
        uint64_t{limit_} + step, config_->max_limit));
    if (next > limit_ && cause != nullptr) {
      *cause = absl::StrFormat(
          "limit reached, mean latency %s within %.2g x baseline %s",
          Millis(latency), config_->tolerance, Millis(baseline));
    }
  }
  const bool moved = next != limit_;
  if (moved) SetLimit(next, now);
  StartWindow(now);
  return moved;
}

AdaptiveLimitStatus AdaptiveLimit::Status() const {
  AdaptiveLimitStatus s;
  s.limit = limit_;
  s.in_flight = in_flight_;
  s.steady_limit = Export().steady_limit;
  s.baseline = Baseline();
  s.last_latency = last_latency_;
  s.refused = refused_;
  return s;
}

AdaptiveLimitState AdaptiveLimit::Export() const {
  AdaptiveLimitState state;
  state.steady_limit =
      steady_limit_ == 0 ? limit_ : std::min(limit_, steady_limit_);
  state.baseline = Baseline();
  return state;
}

bool AdaptiveLimit::Import(const AdaptiveLimitState& state, absl::Time now) {
  if (state.steady_limit == 0 || state.baseline < absl::ZeroDuration() ||
      state.baseline == absl::InfiniteDuration()) {
    return false;
  }
  // Taken state counts as judged: a later cluster view does not replace it.
  judged_ = true;
  if (state.steady_limit > 0) {
    const uint32_t limit = std::clamp(state.steady_limit, config_->min_limit,
                                      config_->max_limit);
    steady_limit_ = limit;
    if (limit != limit_) SetLimit(limit, now);
  }
  if (state.baseline > absl::ZeroDuration()) {
    min_current_ = state.baseline;
    min_previous_ = absl::ZeroDuration();
    half_start_ = now;
  }
  StartWindow(now);
  return true;
}

void AdaptiveLimit::Reconfigure(const AdaptiveConcurrencyConfig& config,
                                absl::Time now) {
  config_ = &config;
  const uint32_t limit =
      std::clamp(limit_, config.min_limit, config.max_limit);
  if (limit != limit_) SetLimit(limit, now);
  if (steady_limit_ != 0) {
    steady_limit_ =
        std::clamp(steady_limit_, config.min_limit, config.max_limit);
  }
}

}  // namespace sluice::core
