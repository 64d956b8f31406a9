// SPDX-License-Identifier: Apache-2.0
#include "coarse_clock.h"

#include <time.h>

#include <atomic>
#include <cstdint>

#include "absl/time/clock.h"

namespace sluice::client::internal {
namespace {

// A coarser source than this is no use for leases a tick long.
constexpr absl::Duration kCoarsestUsable = absl::Milliseconds(20);

bool Usable() {
  timespec res{};
  timespec now{};
  return clock_getres(CLOCK_REALTIME_COARSE, &res) == 0 &&
         clock_gettime(CLOCK_REALTIME_COARSE, &now) == 0 &&
         absl::DurationFromTimespec(res) <= kCoarsestUsable;
}

const int64_t kAllowanceNs = absl::ToInt64Nanoseconds(kCoarseLagAllowance);

// Set once CheckCoarseClock found the coarse clock behind.
std::atomic<bool> fell_behind{false};

}  // namespace

absl::Time CoarseNow() {
  static const bool usable = Usable();
  if (!usable || fell_behind.load(std::memory_order_relaxed)) {
    return absl::Now();
  }
  timespec now{};
  clock_gettime(CLOCK_REALTIME_COARSE, &now);
  // In plain nanoseconds: absl's timespec conversions are out-of-line
  // calls, and this is read on every leased decision.
  return absl::FromUnixNanos(int64_t{now.tv_sec} * 1000000000 + now.tv_nsec +
                             kAllowanceNs);
}

void CheckCoarseClock(absl::Time precise) {
  if (CoarseNow() < precise) {
    fell_behind.store(true, std::memory_order_relaxed);
  }
}

}  // namespace sluice::client::internal
