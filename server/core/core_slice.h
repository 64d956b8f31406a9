// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_CORE_SLICE_H_
#define SLUICE_SERVER_CORE_CORE_SLICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"
#include "server/core/core_mutex.h"
#include "server/core/decision.h"
#include "server/core/gate_set.h"
#include "server/core/outcome.h"
#include "server/core/permit_ledger.h"
#include "server/core/policy_config.h"

namespace sluice::core {

// How a dependency without keys spreads its decisions over cores.
struct SliceOptions {
  // Slices per dependency (at most kMaxSlices); 0: none, every call is
  // decided under the dependency's lock.
  size_t count = 0;
  // Which slice the calling thread uses (taken modulo count); null: the CPU
  // it runs on. Tests pin threads to slices with it.
  size_t (*index)() = nullptr;

  static constexpr size_t kMaxSlices = 64;
  // One slice per CPU this process may run on, at most kMaxSlices.
  static SliceOptions PerCpu();
};

// One core's part of a dependency without keys: tokens and in-flight slots
// borrowed from the dependency's gates in batches, the permits it issued
// from them, and the successes and counts it has not handed back yet. A
// thread on that core decides a call by taking this slice's lock alone, a
// lock no other core takes in the common case, so decisions on one
// dependency scale with cores instead of queueing on its lock.
//
// Nothing is decided here that the gates would decide otherwise:
// - Tokens and slots are lent out of the bucket and the cap, and count
//   against them until handed back (TokenBucket::Lend), so the bucket's
//   bound (rate x time + burst, over any window) and the cap hold exactly.
//   A call a slice cannot serve goes to the dependency's lock, which takes
//   every slice's spare tokens and slots back before it refuses anything.
// - Only an ALLOW is decided here, only while the gates allow slicing
//   (GateSet::SliceableUntil) and the slice's terms have not run out.
// - Only a success no slower than the slow-call rule is settled here; any
//   other outcome goes to the dependency's lock, which first hands every
//   slice's successes to the breaker, so the breaker sees each core's
//   outcomes in order and no success settles after a later failure.
//
// The owner (LivePolicy's shard) locks this slice's mu for every method,
// and its own lock first when it holds both.
class alignas(64) CoreSlice {
 public:
  explicit CoreSlice(PermitLedger::Origin origin)
      : ledger_(origin), epoch_(ledger_.epoch()) {}
  CoreSlice(const CoreSlice&) = delete;
  CoreSlice& operator=(const CoreSlice&) = delete;

  // What a slice decides under, set when the owner arms it.
  struct Terms {
    std::shared_ptr<const PolicyConfig> policy;
    // Calls at or after this go to the owner (GateSet::SliceableUntil).
    absl::Time until = absl::InfinitePast();
    // A permit's life: it expires this long after it is issued.
    absl::Duration expiry = absl::ZeroDuration();
    // The most permits one call may ask for (the bucket's burst).
    double most_permits = 0;
    bool has_bucket = false;
    bool has_cap = false;
    bool has_breaker = false;
    // A success slower than this is a slow call, which the owner settles.
    absl::Duration slow_after = absl::InfiniteDuration();
  };

  // Decides one call from the slice if it can: an ALLOW with a permit,
  // every field of `out` but policy filled. False (and nothing changed)
  // when the owner must decide it.
  bool TryAcquire(uint32_t permits, Unreported unreported, absl::Time now,
                  Decision* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Settles permit `id` if it is this slice's and a fast success; false
  // (nothing changed) otherwise.
  bool TrySettle(uint64_t id, Outcome outcome, absl::Duration latency,
                 absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Arms the slice with `terms` and what `gates` lends it: at least
  // `least` tokens, up to `tokens`, and up to `slots` slots. False, with
  // nothing borrowed and the slice disarmed, when the gates cannot lend
  // enough for one call. `gates` must be the owner's, locked.
  bool Arm(Terms terms, GateSet* gates, double least, double tokens,
           uint32_t slots, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Hands the slice's counts to `counters` and its successes, spent
  // tokens and admitted permits (a cluster share's books) to `gates`.
  void Fold(GateSet* gates, DecisionCounters* counters, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Fold, and gives back every spare token and slot and disarms.
  void Reclaim(GateSet* gates, DecisionCounters* counters, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // The permit ledger's epoch: ids of this slice carry it (PermitLedger).
  uint32_t epoch() const { return epoch_; }
  PermitLedger& ledger() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return ledger_; }
  bool armed() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return armed_; }
  // Whether it has nothing of the owner's: not armed, no permit alive.
  bool idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return !armed_ && ledger_.live() == 0;
  }
  const Terms& terms() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return terms_;
  }

  CoreMutex mu;

 private:
  bool armed_ ABSL_GUARDED_BY(mu) = false;
  Terms terms_ ABSL_GUARDED_BY(mu);
  // Borrowed and not used yet; infinite without a bucket.
  double tokens_ ABSL_GUARDED_BY(mu) = 0;
  uint32_t slots_ ABSL_GUARDED_BY(mu) = 0;
  // Tokens in the dependency's bucket when it last lent to this slice
  // (Decision::remaining counts them with the slice's own).
  double bucket_left_ ABSL_GUARDED_BY(mu) = 0;
  // Since the last Fold: permits admitted, borrowed tokens used, calls
  // admitted, successes settled (and, with a breaker, not yet handed to
  // it; the last at last_success_).
  double permits_ ABSL_GUARDED_BY(mu) = 0;
  double spent_ ABSL_GUARDED_BY(mu) = 0;
  uint64_t admitted_ ABSL_GUARDED_BY(mu) = 0;
  uint64_t successes_ ABSL_GUARDED_BY(mu) = 0;
  uint32_t pending_ ABSL_GUARDED_BY(mu) = 0;
  absl::Time last_success_ ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  PermitLedger ledger_ ABSL_GUARDED_BY(mu);
  const uint32_t epoch_;
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_CORE_SLICE_H_
