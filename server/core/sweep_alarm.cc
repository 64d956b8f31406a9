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
  struct Args {
    const bool* stopped;
    const std::atomic<int64_t>* due;
    int64_t below;
  };
  absl::MutexLock lock(&mu_);
  const Args args{&stopped_, &due_, ToNanos(below)};
  const absl::Condition woken(
      +[](const Args* a) { return *a->stopped || a->due->load() < a->below; },
      &args);
  mu_.AwaitWithDeadline(woken, deadline);
  if (stopped_) return Wake::kStopped;
  return due_.load() < args.below ? Wake::kLowered : Wake::kDeadline;
}

void SweepAlarm::Stop() {
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

SweepPlan PlanSweep(absl::Time due, absl::Time earliest, absl::Time latest) {
  SweepPlan plan;
  plan.wake = std::max(earliest, std::min(due, latest));
  plan.wake_if_below =
      plan.wake > earliest ? plan.wake : absl::InfinitePast();
  return plan;
}

}  // namespace sluice::core
