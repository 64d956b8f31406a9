// SPDX-License-Identifier: Apache-2.0
#include "backoff.h"

namespace sluice::client::internal {
namespace {

base::ExponentialBackoff::Options PeriodOptions(
    const Backoff::Options& options) {
  base::ExponentialBackoff::Options out;
  out.initial = options.initial;
  out.max = options.max;
  out.jitter = options.jitter;
  out.seed = options.seed;
  return out;
}

}  // namespace

Backoff::Backoff(const Options& options)
    : options_(options), periods_(PeriodOptions(options)) {}

bool Backoff::ShouldAsk(absl::Time now) {
  int64_t until = until_ns_.load();
  if (until == kNotBackingOff) return true;
  const int64_t now_ns = absl::ToUnixNanos(now);
  if (now_ns < until) return false;
  // The period is over: one caller wins the probe; the others keep deciding
  // locally for another period unless the probe succeeds first.
  absl::MutexLock lock(&mu_);
  const int64_t next = absl::ToUnixNanos(now + periods_.current());
  if (!until_ns_.compare_exchange_strong(until, next)) {
    return until == kNotBackingOff;
  }
  probing_.store(true);
  return true;
}

void Backoff::EndPeriod(absl::Time now) {
  const int64_t now_ns = absl::ToUnixNanos(now);
  int64_t until = until_ns_.load();
  while (until != kNotBackingOff && until > now_ns &&
         !until_ns_.compare_exchange_weak(until, now_ns)) {
  }
}

void Backoff::RecordSuccess() {
  consecutive_failures_.store(0, std::memory_order_relaxed);
  if (until_ns_.load() == kNotBackingOff) return;
  absl::MutexLock lock(&mu_);
  until_ns_.store(kNotBackingOff);
  probing_.store(false);
  periods_.Reset();
}

void Backoff::RecordFailure(absl::Time now) {
  const int failures = consecutive_failures_.fetch_add(1) + 1;
  const bool backing_off = until_ns_.load() != kNotBackingOff;
  if (!backing_off && failures < options_.after_failures) return;
  absl::MutexLock lock(&mu_);
  if (until_ns_.load() == kNotBackingOff) {
    periods_.Reset();  // the first period is `initial`
  } else if (!probing_.exchange(false)) {
    // A call that started before the backoff; the period stands.
    return;
  }
  // Otherwise the probe failed: the period doubles.
  until_ns_.store(absl::ToUnixNanos(now + periods_.Next()));
}

absl::Duration Backoff::current() const {
  absl::MutexLock lock(&mu_);
  return periods_.current();
}

}  // namespace sluice::client::internal
