// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_SWEEP_ALARM_H_
#define SLUICE_SERVER_CORE_SWEEP_ALARM_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "absl/time/time.h"

namespace sluice::core {

// The earliest time at which a sweep of the engine can change anything,
// and the wait of the thread that sweeps (the server's housekeeping), so
// that an idle engine is not swept for nothing. Safe for concurrent use.
//
// The protocol, which needs no other lock between the two sides:
//  - A sweep pass calls Reset first, then visits every shard; each shard
//    publishes its own earliest due time with Lower while it holds its
//    lock (LivePolicy::Shard::Sweep).
//  - Every change to a shard publishes InfinitePast (sweep at once) with
//    Lower, under the same shard lock (Shard::ChangeLock); a new policy map
//    does too (Engine::Publish).
// A change to a shard either comes before the pass visits it (the pass
// then sees it and publishes the shard's new due time after the Reset) or
// after (its Lower then comes after the Reset): either way due() is at
// most the shard's due time once the pass is over. A Lower that lowers
// due() takes the mutex and then notifies, so a Wait that planned with the
// higher value is either still checking (and sees the new value) or
// asleep (and is woken); one that reads due() after the Lower plans with
// the lower value. No wake-up is lost.
//
// The hot path pays an atomic load and a comparison; only the first change
// after a pass (the one that lowers due() to InfinitePast) pays a
// compare-and-swap and an uncontended lock.
class SweepAlarm {
 public:
  // Why Wait returned.
  enum class Wake {
    kDeadline,  // the deadline passed
    kLowered,   // due() went below the time given
    kStopped,   // Stop was called
  };

  SweepAlarm() = default;
  SweepAlarm(const SweepAlarm&) = delete;
  SweepAlarm& operator=(const SweepAlarm&) = delete;

  // Something may be due at `when` (engine clock time). Lowers due() to
  // it if it is earlier, and then wakes a Wait whose `below` is later.
  void Lower(absl::Time when) {
    const int64_t nanos = ToNanos(when);
    int64_t seen = due_.load();
    while (nanos < seen) {
      if (due_.compare_exchange_weak(seen, nanos)) {
        // A Wait between its check and its sleep holds the mutex: this
        // waits for it to sleep, so the notice reaches it.
        { std::lock_guard<std::mutex> lock(mu_); }
        woken_.notify_all();
        return;
      }
    }
  }

  // Forgets every due time: the sweep pass that follows publishes them
  // anew. Call it before the pass, never after.
  void Reset() { due_.store(kFuture); }

  // The earliest due time published since the last Reset; InfiniteFuture
  // when nothing is due, InfinitePast when a change waits for a sweep.
  absl::Time due() const { return FromNanos(due_.load()); }

  // Blocks until due() is earlier than `below`, Stop is called or
  // `deadline` (real time, as absl::Now) passes, whichever is first; at
  // once when one of them holds already. Stop wins over the others, and
  // a lowered due() over the deadline.
  Wake Wait(absl::Time below, absl::Time deadline);

  // Every Wait, now and later, returns kStopped at once.
  void Stop();

 private:
  static constexpr int64_t kPast = INT64_MIN;
  static constexpr int64_t kFuture = INT64_MAX;
  static int64_t ToNanos(absl::Time t);
  static absl::Time FromNanos(int64_t nanos);

  // Nanoseconds since the Unix epoch; kPast and kFuture stand for the
  // infinite times.
  std::atomic<int64_t> due_{kFuture};
  // std::mutex and std::condition_variable, not absl::Mutex::Await: the
  // core tests run under TSan, which sees a pthread wait release its lock
  // but not Debian's uninstrumented abseil doing so
  // (tests/testing/tsan_absl_mutex.cc shims only Lock and Unlock).
  std::mutex mu_;
  std::condition_variable woken_;
  bool stopped_ = false;  // guarded by mu_
};

// When the sweeper sweeps next, and which lowered due time should wake it
// earlier. Pure, in engine clock time.
struct SweepPlan {
  // due clamped to [earliest, latest].
  absl::Time wake;
  // A due time earlier than this moves `wake` earlier: `wake` itself,
  // or InfinitePast when `wake` is `earliest` already (nothing can move it).
  absl::Time wake_if_below;
};
SweepPlan PlanSweep(absl::Time due, absl::Time earliest, absl::Time latest);

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_SWEEP_ALARM_H_
