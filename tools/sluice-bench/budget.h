// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TOOLS_SLUICE_BENCH_BUDGET_H_
#define SLUICE_TOOLS_SLUICE_BENCH_BUDGET_H_

#include <atomic>
#include <cstdint>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace sluice::bench {

// How long a phase runs: `count` calls, or for `duration` when count is 0.
struct PhaseLength {
  uint64_t count = 0;
  absl::Duration duration;
};

// Hands out the calls of a phase: a fixed number, or as many as start
// before the end time. Safe for concurrent use.
class Budget {
 public:
  explicit Budget(PhaseLength length)
      : count_(length.count), end_(absl::Now() + length.duration) {}

  bool Take() {
    if (count_ > 0) {
      return taken_.fetch_add(1, std::memory_order_relaxed) < count_;
    }
    return absl::Now() < end_;
  }

 private:
  const uint64_t count_;
  const absl::Time end_;
  std::atomic<uint64_t> taken_{0};
};

}  // namespace sluice::bench

#endif  // SLUICE_TOOLS_SLUICE_BENCH_BUDGET_H_
