// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_BUCKET_RING_H_
#define SLUICE_SERVER_CORE_BUCKET_RING_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/time/time.h"

namespace sluice::core {

// Counts over a sliding time window, kept in `buckets` sub-buckets of
// window / buckets each, plus the bucket now filling. Sum() covers every
// bucket that overlaps [now - window, now], so it never misses an event of the
// last window length (it may include up to one bucket width more). Used by
// the sliding-window limiter and the breaker's ratio rules.
//
// Counts must be a default-constructible aggregate with operator+= and
// operator-=. The ring keeps a running total, so Sum() is O(1): the breaker
// judges its window after every outcome.
// Not thread-safe; the owner locks.
template <typename Counts>
class BucketRing {
 public:
  BucketRing(absl::Duration window, int buckets)
      : width_ns_(WidthOf(window, buckets)), ring_(buckets + 1) {}

  // Drops buckets that no longer overlap the window ending at `now`.
  void Advance(absl::Time now) {
    const int64_t index = IndexOf(now);
    if (index <= current_) return;
    const int64_t n = static_cast<int64_t>(ring_.size());
    const int64_t stale = index - current_ < n ? index - current_ : n;
    for (int64_t i = 1; i <= stale; ++i) {
      Counts& bucket = ring_[Slot(current_ + i)];
      total_ -= bucket;
      bucket = Counts{};
    }
    current_ = index;
  }

  // Adds to the bucket for `now`; call Advance(now) first.
  void Add(const Counts& delta) {
    ring_[Slot(current_)] += delta;
    total_ += delta;
  }
  // Adds to the bucket for `at`, an earlier time still in the ring (call
  // Advance(now) first): counts that reach the ring late land where they
  // happened. Dropped when that bucket has left the window already; counted
  // now when `at` is later than the bucket now filling.
  void AddAt(absl::Time at, const Counts& delta) {
    const int64_t index = IndexOf(at);
    const int64_t n = static_cast<int64_t>(ring_.size());
    if (index <= current_ - n) return;
    ring_[Slot(index < current_ ? index : current_)] += delta;
    total_ += delta;
  }
  const Counts& Current() const { return ring_[Slot(current_)]; }

  const Counts& Sum() const { return total_; }

  // The oldest bucket still in the window and when it leaves it.
  const Counts& Oldest() const { return ring_[Slot(current_ + 1)]; }
  absl::Time OldestExpiry() const {
    return absl::UnixEpoch() + absl::Nanoseconds(width_ns_ * (current_ + 1));
  }
  // Buckets from oldest to newest, with the time each one leaves the window.
  template <typename Fn>
  void ForEachOldestFirst(Fn fn) const {
    const int64_t n = static_cast<int64_t>(ring_.size());
    for (int64_t i = 1; i <= n; ++i) {
      fn(ring_[Slot(current_ + i)],
         absl::UnixEpoch() + absl::Nanoseconds(width_ns_ * (current_ + i)));
    }
  }

  void Clear() {
    for (Counts& c : ring_) c = Counts{};
    total_ = Counts{};
  }

  // Changes the window shape. The total counted so far moves into the
  // bucket for `now`, so nothing counted is forgotten early (it is
  // remembered up to one new window length instead).
  void Reshape(absl::Duration window, int buckets, absl::Time now) {
    const int64_t width = WidthOf(window, buckets);
    if (width == width_ns_ &&
        static_cast<size_t>(buckets) + 1 == ring_.size()) {
      return;
    }
    Advance(now);
    const Counts total = Sum();
    width_ns_ = width;
    ring_.assign(static_cast<size_t>(buckets) + 1, Counts{});
    current_ = IndexOf(now);
    ring_[Slot(current_)] = total;
    total_ = total;
  }

  absl::Duration bucket_width() const { return absl::Nanoseconds(width_ns_); }
  int buckets() const { return static_cast<int>(ring_.size()) - 1; }

 private:
  // In nanoseconds, at least 1.
  static int64_t WidthOf(absl::Duration window, int buckets) {
    return std::max<int64_t>(absl::ToInt64Nanoseconds(window / buckets), 1);
  }
  int64_t IndexOf(absl::Time t) const {
    const int64_t ns = absl::ToUnixNanos(t);
    const int64_t w = width_ns_;
    // Floor division, so times before the epoch index correctly too.
    return ns >= 0 ? ns / w : -((-ns + w - 1) / w);
  }
  size_t Slot(int64_t index) const {
    const int64_t n = static_cast<int64_t>(ring_.size());
    return static_cast<size_t>(((index % n) + n) % n);
  }

  // A bucket's width in nanoseconds (an int64_t, not an absl::Duration, to
  // keep a per-key breaker small).
  int64_t width_ns_;
  std::vector<Counts> ring_;
  Counts total_{};
  int64_t current_ = 0;
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_BUCKET_RING_H_
