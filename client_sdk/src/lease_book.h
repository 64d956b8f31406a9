// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_CLIENT_SRC_LEASE_BOOK_H_
#define SLUICE_CLIENT_SRC_LEASE_BOOK_H_

#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/std_mutex.h"
#include "counters.h"
#include "grpcpp/alarm.h"
#include "grpcpp/channel.h"
#include "sluice/client/options.h"
#include "sluice/client/types.h"
#include "sluice/v1/decision.grpc.pb.h"

namespace sluice::client::internal {

class LeaseBook;

// One dependency (or one key of a per_key dependency) as the client's
// leases see it: the lease it decides from (if any), what it did with it,
// and how busy it is. Every count is
// cumulative over the client's life, as RenewLeases takes them. Safe for
// concurrent use; its lock is taken once per decision, once per report of
// a leased call that did not simply succeed, and by the renewal.
class LeaseLine {
 public:
  LeaseLine(std::string dependency, std::string key,
            std::weak_ptr<LeaseBook> book, std::shared_ptr<Counters> counters,
            absl::Duration tick, uint32_t hot_calls)
      : dependency_(std::move(dependency)),
        book_(std::move(book)),
        counters_(std::move(counters)),
        tick_(tick),
        hot_calls_(hot_calls),
        key_(std::move(key)) {}

  // What Decide answered.
  enum class Answer {
    kAsk,     // no lease serves the call: ask Sluice
    kAllow,   // admitted from the lease
    kRefuse,  // the lease is spent and Sluice has nothing more
    kOpen,    // Sluice said its breaker is OPEN: refuse as it did
  };
  // Sluice's CIRCUIT_OPEN answer for the dependency, repeated without
  // asking until the breaker may let a call through (see RememberOpen).
  struct OpenRefusal {
    Verdict verdict = Verdict::kReject;
    int http_status = 0;
    std::shared_ptr<const Fallback> fallback;  // null: none
    uint64_t policy_version = 0;
    // kOpen, or kForcedOpen while an operator holds it open.
    BreakerState breaker_state = BreakerState::kOpen;
  };
  struct Decision {
    Answer answer = Answer::kAsk;
    absl::Duration call_timeout = absl::ZeroDuration();
    absl::Duration retry_after = absl::ZeroDuration();
    BreakerState breaker_state = BreakerState::kUnknown;
    uint64_t policy_version = 0;
    // This call made the dependency hot: a renewal is due now.
    bool renew_now = false;
    // kOpen: the answer to repeat.
    std::shared_ptr<const OpenRefusal> open;
  };
  Decision Decide(uint32_t permits, absl::Time now);
  // Settles a call Decide admitted; true when the outcome asks for a
  // renewal at once (the breaker must hear of it). A success within the
  // slow-call time takes no lock.
  bool Settle(Outcome outcome, absl::Duration latency);
  // Whether the lease still holds the limit at `now`: it has not run out,
  // so a call it cannot cover is refused, not decided by on_failure.
  bool HoldsLimit(absl::Time now);
  // Sluice answered an Acquire sent at `sent` with CIRCUIT_OPEN and
  // retry_after: until sent + retry_after (when the breaker may let a
  // probe through) Decide answers kOpen with `refusal` instead of asking,
  // while renewals, one per tick, confirm that the breaker still refuses
  // every call (OPEN or FORCED_OPEN) under the same policy; one that says
  // otherwise, or none for kOpenUnheardFor, ends it early.
  void RememberOpen(std::shared_ptr<const OpenRefusal> refusal, absl::Time sent,
                    absl::Duration retry_after);
  // How long an OPEN answer is repeated without a renewal confirming it:
  // as long as a lease may be decided from without one.
  static constexpr absl::Duration kOpenUnheardFor = absl::Seconds(4);

  // The renewal: what to send (false when the line has nothing to say),
  // and the answer for it.
  bool Fill(absl::Time now, v1::ClientLeaseRenewal* out);
  // Applies the grant for the renewal sent at `sent`.
  void Apply(const v1::ClientLeaseGrant& grant, absl::Time sent);
  // The renewal sent for it failed.
  void RenewalFailed();
  // Stops wanting a lease: the next Fill gives it back.
  void Cool();
  // When the line wants its next renewal: a spent lease's retry_after.
  absl::Time wants_renewal_at();
  // Adds what Decide answered without asking Sluice to `stats` (acquires,
  // leased_decisions, lease_refusals, lease_open_refusals and
  // lease_decisions_while_unreachable): counted under the line's own lock,
  // which a decision holds anyway, not in the client's shared counters.
  void AddStats(ClientStats* stats);

  // A line made for a key the book saw `calls` times this tick: the next
  // Decide turns it hot.
  void Preheat(absl::Time now, uint32_t calls);
  // Holds nothing and wants nothing: no lease, nothing owed to Sluice, no
  // call in flight, not hot, no OPEN answer to repeat. A key's line that
  // is idle is dropped.
  bool Idle();

  const std::string& dependency() const { return dependency_; }
  const std::string& key() const { return key_; }
  std::weak_ptr<LeaseBook> book() const { return book_; }

 private:
  // settled_ packs two counts that Settle raises with one atomic add: fast
  // successes (high half) and calls settled (low half), both modulo 2^32.
  // A call leaves the calls in flight with the release of that add, after
  // its outcome was counted; it pairs with the acquire of a renewal's
  // load, so a renewal that finds the call gone finds its outcome too.
  static constexpr uint64_t kOneSettled = 1;
  static constexpr uint64_t kOneSuccess = uint64_t{1} << 32;
  // Calls admitted and not settled yet.
  uint32_t InFlight(std::memory_order order) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return started_ - static_cast<uint32_t>(settled_.load(order));
  }

  const std::string dependency_;
  const std::weak_ptr<LeaseBook> book_;
  const std::shared_ptr<Counters> counters_;
  const absl::Duration tick_;
  const double hot_calls_;

  // Taken on every leased decision: a std::mutex, which costs the same in
  // any program (see base::StdMutex).
  base::StdMutex mu_;
  // The lease; id 0: none.
  uint64_t lease_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t token_limit_ ABSL_GUARDED_BY(mu_) = 0;
  bool unlimited_tokens_ ABSL_GUARDED_BY(mu_) = false;
  uint32_t slot_limit_ ABSL_GUARDED_BY(mu_) = 0;
  bool unlimited_slots_ ABSL_GUARDED_BY(mu_) = false;
  absl::Duration call_timeout_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  // A success slower than this is slow (the breaker's slow-call rule; the
  // largest value: no such rule); read by Settle without the lock.
  std::atomic<int64_t> slow_after_ns_{std::numeric_limits<int64_t>::max()};
  BreakerState breaker_state_ ABSL_GUARDED_BY(mu_) = BreakerState::kUnknown;
  uint64_t policy_version_ ABSL_GUARDED_BY(mu_) = 0;
  // Spent and Sluice's bucket empty: refuse until then.
  bool exhausted_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time retry_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // A leased call ended badly since the last renewal was built: decide
  // nothing until Sluice's answer to the one that carries it.
  bool suspended_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t bad_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bad_sent_ ABSL_GUARDED_BY(mu_) = 0;
  bool unreachable_ ABSL_GUARDED_BY(mu_) = false;

  // Decide's answers other than kAsk: kAllow is admitted_, kRefuse and
  // kOpen these; unreachable_decided_: any of them made while unreachable_.
  uint64_t refused_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t open_refused_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t unreachable_decided_ ABSL_GUARDED_BY(mu_) = 0;

  // Cumulative, as sent.
  uint64_t tokens_spent_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t admitted_ ABSL_GUARDED_BY(mu_) = 0;
  // Fast successes, as folded in from settled_ by the last renewal: their
  // count modulo 2^32 then, and the total.
  uint32_t successes_seen_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t successes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t slow_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t failures_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t timeouts_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t cancelled_ ABSL_GUARDED_BY(mu_) = 0;
  // Calls admitted (modulo 2^32), raised by Decide; in flight: those not
  // in settled_'s low half, which Settle raises with or without the lock.
  // A renewal reads them first.
  uint32_t started_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> settled_{0};

  // Demand since window_start_: calls and tokens asked for, the most calls
  // in flight at once, calls no slot of the lease could take.
  absl::Time window_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t calls_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t tokens_asked_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t peak_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t slot_misses_ ABSL_GUARDED_BY(mu_) = 0;
  // Hot: it wants a lease; giving_back_: it held one and cooled, and
  // settles it until its calls have ended.
  bool hot_ ABSL_GUARDED_BY(mu_) = false;
  bool giving_back_ ABSL_GUARDED_BY(mu_) = false;
  // What it asks for while hot.
  uint32_t want_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t want_slots_ ABSL_GUARDED_BY(mu_) = 0;
  // Sluice may hold something of the line's: a lease it granted, not yet
  // settled by a renewal that decides from none with no call in flight.
  bool owed_ ABSL_GUARDED_BY(mu_) = false;
  // The OPEN answer Decide repeats while now is before both open_until_
  // and open_heard_until_ (RememberOpen); open_sent_: when the Acquire
  // that brought it was sent (a renewal sent before says nothing of it).
  std::shared_ptr<const OpenRefusal> open_ ABSL_GUARDED_BY(mu_);
  absl::Time open_sent_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time open_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Time open_heard_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Hot, but Sluice lent nothing: no renewal for it before quiet_until_,
  // the wait doubling with each refusal.
  absl::Duration quiet_for_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  absl::Time quiet_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Cumulative, as sent: tokens of the calls a spent lease refused.
  uint64_t tokens_refused_ ABSL_GUARDED_BY(mu_) = 0;
  // Last, with the other fields a decision does not read: a key's line
  // keeps the hot ones where a dependency's line has them.
  const std::string key_;
};

// The client's leases: a line per dependency it has decided on and per hot
// key (KeyLine), and the RenewLeases call that settles and renews them
// about once per tick. It
// has no thread of its own: the first renewal starts from a call, gRPC's
// callback applies each answer and sets a gRPC alarm for the next one
// while any lease is held, and a failed leased call asks for one at once.
// So a lease is renewed, settled and given back even when its calls stop,
// and a decision builds no renewal while the alarm is set.
class LeaseBook : public std::enable_shared_from_this<LeaseBook> {
 public:
  LeaseBook(const LeaseOptions& options, std::shared_ptr<grpc::Channel> channel,
            std::shared_ptr<Counters> counters);

  // The line of `dependency`, made on first use; null when the client
  // already keeps max_leased lines. A thread's last line is answered
  // without the book's lock.
  std::shared_ptr<LeaseLine> Line(absl::string_view dependency);
  // The line of `key` of `dependency`: made only once the key is hot (it
  // had hot_calls calls within a tick; a call that finds none is counted),
  // and dropped once it is idle again, so that many cold keys cost a
  // bounded count each and take no line. A dependency Sluice leases
  // without keys (no per_key) answers with its line for every key.
  std::shared_ptr<LeaseLine> KeyLine(absl::string_view dependency,
                                     absl::string_view key, absl::Time now);
  // The line of `dependency` (and `key`) if there is one.
  std::shared_ptr<LeaseLine> Find(absl::string_view dependency,
                                  absl::string_view key = "");
  // Most keys counted in one tick while they have no line; a key beyond
  // them is not counted that tick.
  static constexpr size_t kMostCountedKeys = 4096;
  // Sends a renewal now if it is due at `now` (or `now_anyway`) and none
  // is in flight. The renewal is timed by absl::Now(), whatever `now` is.
  void MaybeRenew(absl::Time now, bool now_anyway = false);
  // No renewal starts after this; waits for the one in flight, then gives
  // every lease back (one call, at most a tick or 250 ms). The client's
  // destructor calls it, so no callback outlives the channel.
  void Close();

  // The client's id for RenewLeases.
  uint64_t client_id() const { return client_id_; }
  // Adds every line's AddStats.
  void AddStats(ClientStats* stats);

 private:
  struct Renewal;
  // Line, under the book's lock.
  std::shared_ptr<LeaseLine> Lookup(absl::string_view dependency);
  // The key of lines_ for a key's line: the dependency, a NUL (which no
  // name holds), the key. Written into `out`, whose capacity is reused.
  static void KeyLineName(absl::string_view dependency, absl::string_view key,
                          std::string* out);
  // The answer to `renewal` (which it deletes).
  void Done(Renewal* renewal, const grpc::Status& status);
  // Sets the alarm for the renewal due at `at`, unless one is set or the
  // book is closed.
  void ArmAlarm(absl::Time at) ABSL_LOCKS_EXCLUDED(mu_);

  const LeaseOptions options_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::DecisionService::Stub> stub_;
  const std::shared_ptr<Counters> counters_;
  // This book among every book made in the process, from 1 (Line's cache).
  const uint64_t serial_;
  const uint64_t client_id_;

  absl::Mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<LeaseLine>> lines_
      ABSL_GUARDED_BY(mu_);
  // Calls of keys without a line in the tick since keys_counted_at_
  // (KeyLine), and dependencies Sluice leases without keys.
  absl::flat_hash_map<std::string, uint32_t> key_calls_ ABSL_GUARDED_BY(mu_);
  absl::Time keys_counted_at_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::flat_hash_set<std::string> keyless_ ABSL_GUARDED_BY(mu_);
  // What the key lines dropped since had counted (AddStats).
  ClientStats dropped_ ABSL_GUARDED_BY(mu_);
  bool renewing_ ABSL_GUARDED_BY(mu_) = false;
  // Another renewal was asked for while one was in flight.
  bool again_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time next_renewal_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // A relaxed copy of next_renewal_, read without the lock on every call.
  std::atomic<int64_t> next_renewal_ns_{0};
  // The alarm of the next renewal while one is set (it deletes itself
  // when it has run); alarm_set_ mirrors it for the calls' quick check.
  grpc::Alarm* alarm_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::atomic<bool> alarm_set_{false};
  // Renewals and alarms whose callback has not finished; Close waits for
  // none.
  std::atomic<int> outstanding_{0};
};

}  // namespace sluice::client::internal

#endif  // SLUICE_CLIENT_SRC_LEASE_BOOK_H_
