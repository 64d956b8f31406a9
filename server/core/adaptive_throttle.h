// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_ADAPTIVE_THROTTLE_H_
#define SLUICE_SERVER_CORE_ADAPTIVE_THROTTLE_H_

#include <cstdint>

#include "absl/time/time.h"
#include "server/core/bucket_ring.h"
#include "server/core/outcome.h"
#include "server/core/policy_config.h"

namespace sluice::core {

// What an AdaptiveThrottle shows operators.
struct ThrottleStatus {
  int64_t requests = 0;  // over the trailing window
  int64_t accepts = 0;
  double probability = 0;  // of refusing the next call
  uint64_t refused = 0;    // calls refused since the gate was built
};

// Google SRE's client-side adaptive throttling ("Site Reliability
// Engineering", O'Reilly 2016, chapter 21): refuse a call with probability
//   max(0, (requests - k * accepts) / (requests + 1))
// over a trailing window, where requests are the calls asked for (refused
// ones included) and accepts those reported SUCCESS. While the dependency
// accepts at least 1/k of the calls, nothing is refused; below that the
// refusals keep the calls that do go through at about k times the accepts.
//
// An admitted call counts as a request when its outcome comes (any but
// CANCELLED), a refused one at once. So a call whose outcome never comes
// (a caller that does not report: Envoy without the reporting filter)
// counts neither way, and the throttle cannot refuse a caller it hears
// nothing from.
//
// Refusals are spread evenly instead of drawn at random: every call adds
// the probability to a running credit, and a call is refused when the credit
// reaches 1. Over any run of calls the refused share is the probability to
// within one call, and the gate is deterministic (no random source to seed
// or share between threads).
//
// Not thread-safe; the owner locks. `config` must outlive the throttle or
// be replaced through Reconfigure.
class AdaptiveThrottle {
 public:
  explicit AdaptiveThrottle(const AdaptiveThrottleConfig& config);

  // Whether to refuse the next call; *probability is the refusal
  // probability it was judged by. The owner then counts the call: as
  // Refused() when it is refused, or by its outcome when it goes ahead (a
  // shadow policy's refusal goes ahead).
  bool Refuse(absl::Time now, double* probability);
  // A call refused: one request without an accept.
  void Refused(absl::Time now);
  // The outcome of an admitted call: a request (unless CANCELLED), and an
  // accept if SUCCESS.
  void Record(Outcome outcome, absl::Time now);

  // The refusal probability the window gives at `now`.
  double Probability(absl::Time now);
  // The last non-zero probability judged by (0 before the first).
  double last_positive() const { return last_positive_; }
  // When the probability was last seen above 0 (InfinitePast: never).
  absl::Time last_positive_at() const { return last_positive_at_; }
  ThrottleStatus Status(absl::Time now);
  // No request in the window as of the last call given a time. The window
  // then stays empty (and the probability 0) until Refused or Record.
  bool empty() const { return window_.Sum().requests == 0; }

  void Reconfigure(const AdaptiveThrottleConfig& config, absl::Time now);

 private:
  struct Counts {
    int64_t requests = 0;
    int64_t accepts = 0;
    Counts& operator+=(const Counts& o) {
      requests += o.requests;
      accepts += o.accepts;
      return *this;
    }
    Counts& operator-=(const Counts& o) {
      requests -= o.requests;
      accepts -= o.accepts;
      return *this;
    }
  };
  double ProbabilityOf(const Counts& c) const;

  const AdaptiveThrottleConfig* config_;
  BucketRing<Counts> window_;
  double credit_ = 0;
  double last_positive_ = 0;
  absl::Time last_positive_at_ = absl::InfinitePast();
  uint64_t refused_ = 0;
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_ADAPTIVE_THROTTLE_H_
