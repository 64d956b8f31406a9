// SPDX-License-Identifier: Apache-2.0
#include "server/core/sweep_alarm.h"

#include <algorithm>

namespace sluice::core {

int64_t SweepAlarm::ToNanos(absl::Time t) {
  if (t == absl::InfinitePast()) return kPast;
  if (t == absl::InfiniteFuture()) return kFuture;
  // Saturates, well inside the two sentinels for any real clock.
  return std::clamp(absl::ToUnixNanos(t), kPast + 1, kFuture - 1);
}

absl::Time SweepAlarm::FromNanos(int64_t nanos) {
  if (nanos == kPast) return absl::InfinitePast();
  if (nanos == kFuture) return absl::InfiniteFuture();
  return absl::FromUnixNanos(nanos);
}

SweepAlarm::Wake SweepAlarm::Wait(absl::Time below, absl::Time deadline) {
  const int64_t below_nanos = ToNanos(below);
  std::unique_lock<std::mutex> lock(mu_);
  const auto woken = [&] { return stopped_ || due_.load() < below_nanos; };
  if (deadline == absl::InfiniteFuture()) {
    woken_.wait(lock, woken);
  } else if (deadline != absl::InfinitePast()) {
    woken_.wait_until(lock, absl::ToChronoTime(deadline), woken);
  }
  if (stopped_) return Wake::kStopped;
  return due_.load() < below_nanos ? Wake::kLowered : Wake::kDeadline;
}

void SweepAlarm::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  woken_.notify_all();
}

SweepPlan PlanSweep(absl::Time due, absl::Time earliest, absl::Time latest) {
  SweepPlan plan;
  plan.wake = std::max(earliest, std::min(due, latest));
  plan.wake_if_below =
      plan.wake > earliest ? plan.wake : absl::InfinitePast();
  return plan;
}

}  // namespace sluice::core
