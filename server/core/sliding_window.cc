// SPDX-License-Identifier: Apache-2.0
#include "server/core/sliding_window.h"

#include <algorithm>

namespace sluice::core {

SlidingWindow::SlidingWindow(int64_t limit, absl::Duration window, int buckets)
    : limit_(limit), ring_(window, buckets) {}

int64_t SlidingWindow::Count(absl::Time now) {
  ring_.Advance(now);
  return ring_.Sum().n;
}

bool SlidingWindow::TryTake(int64_t n, absl::Time now) {
  if (Count(now) + n > limit_) return false;
  ring_.Add(Count1{n});
  return true;
}

void SlidingWindow::Refund(int64_t n, absl::Time now) {
  ring_.Advance(now);
  ring_.Add(Count1{-std::min(n, ring_.Current().n)});
}

absl::Duration SlidingWindow::TimeUntil(int64_t n, absl::Time now) {
  if (n > limit_) return absl::InfiniteDuration();
  int64_t excess = Count(now) + n - limit_;
  if (excess <= 0) return absl::ZeroDuration();
  // Walk the buckets oldest first until enough of them have left the window.
  absl::Duration wait = absl::InfiniteDuration();
  ring_.ForEachOldestFirst([&](const Count1& c, absl::Time leaves) {
    if (excess <= 0 || c.n == 0) return;
    excess -= c.n;
    if (excess <= 0) wait = leaves - now;
  });
  return wait;
}

void SlidingWindow::Reconfigure(int64_t limit, absl::Duration window,
                                int buckets, absl::Time now) {
  limit_ = limit;
  ring_.Reshape(window, buckets, now);
}

}  // namespace sluice::core
