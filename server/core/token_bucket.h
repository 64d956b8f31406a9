// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_TOKEN_BUCKET_H_
#define SLUICE_SERVER_CORE_TOKEN_BUCKET_H_

#include <cstdint>

#include "absl/time/time.h"

namespace sluice::core {

// `rate` tokens per `per`, holding at most `burst`. Refills lazily on each
// call, so no timer exists. Starts full. Not thread-safe; the owner locks.
class TokenBucket {
 public:
  TokenBucket(double rate, absl::Duration per, double burst, absl::Time now);

  // Takes `n` tokens if they are there.
  bool TryTake(double n, absl::Time now);
  // Gives back tokens taken by a call that a later gate refused.
  void Refund(double n);
  // Tokens available at `now`.
  double Available(absl::Time now);
  // How long until `n` tokens are available; zero if they are now, infinite
  // if n > burst.
  absl::Duration TimeUntil(double n, absl::Time now);

  // Changes the parameters, keeping the tokens. A smaller burst takes the
  // whole tokens above it away but keeps the progress toward the next one:
  // a cluster share moves a token of capacity at a time, and a bucket that
  // gives one up and later gets one back goes on from where it was, so
  // sub-unit shares that move between replicas lose no rate.
  void Reconfigure(double rate, absl::Duration per, double burst,
                   absl::Time now);
  // Replaces the refill rate only (cluster shares); keeps the tokens.
  void SetRate(double rate, absl::Time now);

  // Lending, for per-core slices (see CoreSlice): moves up to `most`
  // whole tokens out to a borrower, and none unless at least `least` are
  // there. Lent tokens still count against the burst until repaid, so the
  // bucket and its borrowers together never hold more than the burst, and
  // no window of time admits more than rate x time + burst.
  double Lend(double least, double most, absl::Time now);
  // The borrower hands back `unused` tokens and reports `spent` ones used:
  // both stop counting against the burst. A burst made smaller while
  // tokens are out (Reconfigure) leaves the bucket only the room the loans
  // do not take: tokens + lent stay within it.
  void Repay(double unused, double spent);
  double lent() const { return lent_; }

  double burst() const { return burst_; }
  double rate_per_second() const { return per_second_; }

 private:
  void Refill(absl::Time now);
  // `t` tokens held within the burst: never more whole tokens than the
  // burst allows, the part of a token above it kept.
  double Capped(double t) const;

  double per_second_;
  double burst_;
  double tokens_;
  // When it last refilled, in nanoseconds since the Unix epoch (half the
  // size of an absl::Time; a bucket per key adds up).
  int64_t last_ns_;
  // Tokens out on loan (Lend), counted against the burst.
  double lent_ = 0;
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_TOKEN_BUCKET_H_
