// SPDX-License-Identifier: Apache-2.0
#include "server/core/token_bucket.h"

#include <algorithm>
#include <cmath>

namespace sluice::core {

TokenBucket::TokenBucket(double rate, absl::Duration per, double burst,
                         absl::Time now)
    : per_second_(rate / absl::ToDoubleSeconds(per)),
      burst_(burst),
      tokens_(burst),
      last_ns_(absl::ToUnixNanos(now)) {}

void TokenBucket::Refill(absl::Time now) {
  // A clock that steps back must not take tokens away.
  const int64_t now_ns = absl::ToUnixNanos(now);
  if (now_ns <= last_ns_) return;
  // Tokens above the burst (a part of one kept by Reconfigure) do not grow,
  // and tokens out on loan take their room.
  const double room = burst_ - lent_;
  if (tokens_ < room) {
    tokens_ = std::min(
        room, tokens_ + static_cast<double>(now_ns - last_ns_) * 1e-9 *
                            per_second_);
  }
  last_ns_ = now_ns;
}

double TokenBucket::Capped(double t) const {
  if (t <= burst_) return t;
  const double whole = std::floor(burst_);
  return std::min(t, std::max(burst_, whole + (t - std::floor(t))));
}

bool TokenBucket::TryTake(double n, absl::Time now) {
  Refill(now);
  if (tokens_ < n) return false;
  tokens_ -= n;
  return true;
}

void TokenBucket::Refund(double n) { tokens_ = Capped(tokens_ + n); }

double TokenBucket::Lend(double least, double most, absl::Time now) {
  Refill(now);
  const double n = std::min(most, std::floor(tokens_));
  if (n < least || n <= 0) return 0;
  tokens_ -= n;
  lent_ += n;
  return n;
}

void TokenBucket::Repay(double unused, double spent) {
  lent_ = std::max(0.0, lent_ - unused - spent);
  // What comes back fills only the room the loans still out leave (less
  // than was lent when the burst shrank meanwhile).
  tokens_ =
      std::min(Capped(tokens_ + unused), std::max(tokens_, burst_ - lent_));
}

double TokenBucket::Available(absl::Time now) {
  Refill(now);
  return tokens_;
}

absl::Duration TokenBucket::TimeUntil(double n, absl::Time now) {
  Refill(now);
  if (n > burst_ || per_second_ <= 0) return absl::InfiniteDuration();
  if (tokens_ >= n) return absl::ZeroDuration();
  return absl::Seconds((n - tokens_) / per_second_);
}

void TokenBucket::Reconfigure(double rate, absl::Duration per, double burst,
                              absl::Time now) {
  Refill(now);
  per_second_ = rate / absl::ToDoubleSeconds(per);
  burst_ = burst;
  // Tokens out on loan keep their room: a smaller burst (a policy change,
  // a cluster grant that shrank) leaves the bucket what the loans do not
  // hold, so tokens + lent never exceed it until they are repaid.
  tokens_ = lent_ > 0 ? std::min(Capped(tokens_), std::max(0.0, burst_ - lent_))
                      : Capped(tokens_);
}

void TokenBucket::SetRate(double rate, absl::Time now) {
  Refill(now);
  per_second_ = rate;
}

}  // namespace sluice::core
