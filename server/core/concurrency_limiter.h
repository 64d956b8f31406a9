// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_CONCURRENCY_LIMITER_H_
#define SLUICE_SERVER_CORE_CONCURRENCY_LIMITER_H_

#include <algorithm>
#include <cstdint>

namespace sluice::core {

// A bulkhead: at most `max_in_flight` calls hold a slot at once.
// Not thread-safe; the owner locks.
class ConcurrencyLimiter {
 public:
  explicit ConcurrencyLimiter(uint32_t max_in_flight) : max_(max_in_flight) {}

  bool TryTake() {
    if (in_flight_ >= max_) return false;
    ++in_flight_;
    return true;
  }
  // Takes a slot even past the cap (the cap is suspended, the count goes on).
  void ForceTake() { ++in_flight_; }
  void Release() { Release(1); }
  // Takes up to `n` slots at once (a per-core slice's batch); returns how
  // many it took.
  uint32_t TakeUpTo(uint32_t n) {
    const uint32_t taken =
        in_flight_ >= max_ ? 0 : std::min(n, max_ - in_flight_);
    in_flight_ += taken;
    return taken;
  }
  // Gives back `n` slots (never below none in flight).
  void Release(uint32_t n) { in_flight_ -= std::min(n, in_flight_); }
  // Keeps the calls in flight; new calls wait until they drop below `max`.
  void SetMax(uint32_t max_in_flight) { max_ = max_in_flight; }

  uint32_t in_flight() const { return in_flight_; }
  uint32_t max() const { return max_; }

 private:
  uint32_t max_;
  uint32_t in_flight_ = 0;
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_CONCURRENCY_LIMITER_H_
