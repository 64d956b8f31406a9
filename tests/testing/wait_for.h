// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_WAIT_FOR_H_
#define SLUICE_TESTS_TESTING_WAIT_FOR_H_

// Waiting on a condition that another thread or process brings about: the
// one poll loop of the tests. A test waits for what it needs (a port file, a
// sync tick, a metric, a policy version, a breaker state), never for a fixed
// time that hopes the condition holds by then. A sleep left in a test is
// the thing under test (a real open_duration, a load's pacing, a measuring
// window) and says so in a comment.

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace sluice::testing {

// How often WaitFor checks by default: well below any interval under test
// (sync ticks of 1 s, open durations of 300 ms), cheap for a local RPC.
inline constexpr absl::Duration kDefaultPoll = absl::Milliseconds(10);

// Checks `done` at once, then every `poll` until it returns true or
// `deadline` passes (it is checked one last time at the deadline). How long
// it took from the call, or nullopt if it never held. The result tests as a
// bool: ASSERT_TRUE(WaitFor(...)).
template <typename Predicate>
std::optional<absl::Duration> WaitFor(Predicate done, absl::Time deadline,
                                      absl::Duration poll = kDefaultPoll) {
  const absl::Time start = absl::Now();
  while (true) {
    if (done()) return absl::Now() - start;
    const absl::Time now = absl::Now();
    if (now >= deadline) return std::nullopt;
    absl::SleepFor(std::min(poll, deadline - now));
  }
}

template <typename Predicate>
std::optional<absl::Duration> WaitFor(Predicate done, absl::Duration timeout,
                                      absl::Duration poll = kDefaultPoll) {
  return WaitFor(std::move(done), absl::Now() + timeout, poll);
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_WAIT_FOR_H_
