// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_OFFSET_CLOCK_H_
#define SLUICE_TESTS_TESTING_OFFSET_CLOCK_H_

#include "absl/time/time.h"
#include "server/core/clock.h"

namespace sluice::testing {

// Another clock's time plus a fixed offset: a replica whose wall clock is
// skewed, while the test still moves a single clock. Safe for concurrent use
// when `base` is.
class OffsetClock final : public core::Clock {
 public:
  // `base` must outlive this clock.
  OffsetClock(const core::Clock* base, absl::Duration offset)
      : base_(base), offset_(offset) {}

  absl::Time Now() const override { return base_->Now() + offset_; }

 private:
  const core::Clock* const base_;
  const absl::Duration offset_;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_OFFSET_CLOCK_H_
