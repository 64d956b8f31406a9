// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_SLIDING_WINDOW_H_
#define SLUICE_SERVER_CORE_SLIDING_WINDOW_H_

#include <cstdint>

#include "absl/time/time.h"
#include "server/core/bucket_ring.h"

namespace sluice::core {

// At most `limit` permits in any span of length `window`. Counts sit in
// sub-buckets; an admission checks every bucket that overlaps the last window
// length, so the limit holds strictly across bucket boundaries (at the price
// of forgetting a permit up to one bucket width late).
// Not thread-safe; the owner locks.
class SlidingWindow {
 public:
  SlidingWindow(int64_t limit, absl::Duration window, int buckets);

  bool TryTake(int64_t n, absl::Time now);
  // Gives back permits taken at `now` by a call a later gate refused.
  void Refund(int64_t n, absl::Time now);
  // Permits counted in the current window.
  int64_t Count(absl::Time now);
  // Room left in the current window.
  int64_t Available(absl::Time now) { return limit_ - Count(now); }
  // How long until `n` more permits fit; infinite if n > limit.
  absl::Duration TimeUntil(int64_t n, absl::Time now);

  // Changes the limit and window shape, keeping the counts (see
  // BucketRing::Reshape).
  void Reconfigure(int64_t limit, absl::Duration window, int buckets,
                   absl::Time now);
  void SetLimit(int64_t limit) { limit_ = limit; }

  int64_t limit() const { return limit_; }

 private:
  struct Count1 {
    int64_t n = 0;
    Count1& operator+=(const Count1& o) {
      n += o.n;
      return *this;
    }
    Count1& operator-=(const Count1& o) {
      n -= o.n;
      return *this;
    }
  };

  int64_t limit_;
  BucketRing<Count1> ring_;
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_SLIDING_WINDOW_H_
