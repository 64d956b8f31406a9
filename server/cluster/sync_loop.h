// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CLUSTER_SYNC_LOOP_H_
#define SLUICE_SERVER_CLUSTER_SYNC_LOOP_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/env.h"
#include "base/stats.h"
#include "server/cluster/store.h"
#include "server/core/clock.h"
#include "server/core/engine.h"

namespace sluice::cluster {

// What the sync loop has been doing, for logs, metrics and GetState.
struct SyncStats {
  bool store_up = false;
  uint64_t ticks = 0;
  uint64_t failures = 0;
  uint32_t live_replicas = 0;
  absl::Duration last_tick_duration = absl::ZeroDuration();
  absl::Time last_success = absl::InfinitePast();
  std::string last_error;
  // Reports for other replicas' permits passed on, and received for ours.
  uint64_t reports_forwarded = 0;
  uint64_t reports_received = 0;
  // Forwarded reports refused: unknown issuer, or the queue was full, or
  // the issuer's inbox in the store was full.
  uint64_t reports_not_forwarded = 0;
  // The store's clock minus this replica's (Redis TIME against the local
  // wall clock, at the middle of the last round trip).
  absl::Duration clock_offset = absl::ZeroDuration();
  // Times the store turned out to have lost its data (config or a policy's
  // shared state), each rebuilt from this replica's memory.
  uint64_t store_resets = 0;
  // Policies left out of the last tick as quiet (see SyncLoop).
  uint32_t quiet_policies = 0;
};

// Keeps the engine in step with the cluster: once per interval (and soon
// after a nudge) it drains the engine's demand and breaker state, makes one
// Store::Tick round trip, and hands back grants, other replicas' outcomes,
// the stored breaker records and probe leases. Runs as a periodic task of
// its Env (the process's: its own thread); the request path never waits
// for it.
//
// Store states: a failed tick is retried every `retry` while the replica
// keeps deciding with the grants it holds; only when the store has not
// answered for the stale period (stale_ticks intervals, which is also how
// long a grant lasts) does the engine switch to store-down behaviour (each
// policy's on_store_failure). Both transitions are logged once. Every time
// shared through the store is on the store's clock; this loop converts.
//
// Quiet policies. With a store that answers for the breakers of policies a
// tick leaves out (TickReply::breakers_epoch set: a central replica's
// ledger), a policy that has had nothing to say for quiet_after (and at
// least the stale period) is left out of the tick: no demand, no units in use, no outcomes since
// its last push, no breaker transition to publish, no probe wanted, no
// warm state. Its grants then lapse, and its breaker follows the records
// the store sends for it. Its first demand after that is refused by the
// cluster gates, which nudges the loop (EventSink::OnClusterDemand): the
// policy is pushed with the next tick, kMinGap later. So an idle leaf's
// tick carries only membership, whatever the number of policies.
class SyncLoop final : public base::StatsSource {
 public:
  struct Options {
    // Names this replica in the store; must be unique in the cluster.
    std::string replica_id;
    absl::Duration interval = absl::Seconds(1);
    // A replica silent for this many intervals no longer counts.
    int stale_ticks = 3;
    // Lifetime of state keys in the store, refreshed every tick.
    absl::Duration key_ttl = absl::Minutes(10);
    // Called (from the loop's thread) when the store goes up or down.
    std::function<void(bool up, const std::string& detail)> on_store_change;
    // Called (from the loop's thread) with the shared config whenever its
    // version moved since the last call.
    std::function<void(const ConfigSnapshot& config)> on_config;
    // Called (from the loop's thread) when the store lost its data and this
    // replica rebuilds it from memory.
    std::function<void(const std::string& detail)> on_store_reset;
    // How soon a failed tick is tried again.
    absl::Duration retry = absl::Milliseconds(200);
    // A policy idle this long is left out of ticks (quiet policies,
    // above). Long enough that a policy called every few seconds keeps its
    // grants between calls, whatever the interval.
    absl::Duration quiet_after = absl::Seconds(10);
    // Where the ticks run once started; must outlive the loop. Tests give
    // a manual one.
    base::Env* env = base::Env::Default();
  };

  // `engine`, `store` and `clock` must outlive the loop.
  SyncLoop(core::Engine* engine, Store* store, core::Clock* clock,
           Options options);
  ~SyncLoop();  // Stops the ticks.

  // Starts ticking. The first tick runs at once, which also answers any
  // nudge made before Start.
  void Start() ABSL_LOCKS_EXCLUDED(mu_);
  // Stops the ticks, then Leave()s, so the counts of the final interval
  // reach the store and the grants go back at once.
  void Stop() ABSL_LOCKS_EXCLUDED(mu_);
  // One last tick that gives this replica's grants, leases and membership
  // back to the store. Tests call it after driving ticks by hand.
  absl::Status Leave() ABSL_LOCKS_EXCLUDED(tick_mu_);
  // Asks for a tick soon (a breaker tripped here: tell the others now):
  // kMinGap from now (at most an interval), so that a flapping breaker
  // cannot turn the loop into a busy one.
  void Nudge() ABSL_LOCKS_EXCLUDED(mu_);

  // Takes a report for a permit another replica issued, to pass on with the
  // next tick. False (nothing queued) when `report.issuer` is not a live
  // replica or the queue is full; the permit then expires at its issuer.
  bool Forward(core::ForwardedReport report) ABSL_LOCKS_EXCLUDED(forward_mu_);

  // The policies (from the policies file) to store where the cluster has
  // none of that name. Sent with the next tick, and again whenever the
  // store turns out to have lost its config.
  void SetSeed(std::vector<StoredPolicy> seed) ABSL_LOCKS_EXCLUDED(tick_mu_);

  // One tick on the caller's thread. Tests drive the loop with this.
  absl::Status TickOnce() ABSL_LOCKS_EXCLUDED(tick_mu_);

  SyncStats stats() const ABSL_LOCKS_EXCLUDED(stats_mu_);
  // stats() as the sluice_store_up, sluice_sync_* ... metrics.
  void WriteStats(base::StatsWriter& out) const override
      ABSL_LOCKS_EXCLUDED(stats_mu_);
  const Options& options() const { return options_; }

  // How long after the last tick the next one is due: the interval after a
  // good tick, or sooner when the store asked (TickReply::tick_again_in,
  // never under kMinGap); `retry` after a failed one. The periodic task
  // follows it; tests that drive TickOnce by hand follow it too.
  absl::Duration NextTickIn() const ABSL_LOCKS_EXCLUDED(tick_mu_);

  // The least time between two ticks asked for by a nudge or the store.
  static constexpr absl::Duration kMinGap = kMinTickGap;

 private:
  // One tick's request and the engine state it was built from.
  struct Round {
    absl::Time start;
    // How long the store took to answer.
    absl::Duration took = absl::ZeroDuration();
    std::vector<core::DependencyTick> ticks;
    // The ticks pushed, in request.policies order (they point into ticks).
    std::vector<const core::DependencyTick*> pushed;
    // Policies left out as quiet.
    absl::flat_hash_set<std::string> quiet;
    TickRequest request;
    // The request carries the seed.
    bool seeding = false;
  };

  // A tick, in the steps below: build the request, exchange it with the
  // store, then (unless leaving) take the membership, deliver the inbox,
  // pull the config, apply each policy's grants and breaker records, and
  // record the stats.
  absl::Status Tick(bool leaving) ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  Round BuildRequest(bool leaving) ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_)
      ABSL_LOCKS_EXCLUDED(forward_mu_);
  // Whether `tick` is left out of this round as quiet; keeps each policy's
  // idle time.
  bool LeaveOut(const core::DependencyTick& tick, const Round& round)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  // The stored breaker records of quiet policies the store sent.
  void AddQuietBreakers(const Round& round, const TickReply& reply,
                        std::vector<core::DependencyUpdate>* updates)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  // What this replica pushes for one policy; moves the keys out of `tick`.
  PolicyPush PushFor(core::DependencyTick& tick) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  // One Store::Tick round trip; sets round->took. UNAVAILABLE (with the
  // message TickFailed logs) when the store failed or answered wrongly.
  absl::StatusOr<TickReply> Exchange(Round* round)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  // The store answered: it is up, with these live replicas (returned; the
  // last list when the store left it out as unchanged).
  uint32_t AcceptMembership(const Round& round, const TickReply& reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_) ABSL_LOCKS_EXCLUDED(forward_mu_);
  // Reports other replicas forwarded for this replica's permits.
  void DeliverInbox(const TickReply& reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  // The seed and restore went through; applies the config part.
  void PullConfig(const Round& round, const TickReply& reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  // The engine update for every policy pushed; counts lost ones in *resets.
  std::vector<core::DependencyUpdate> PolicyUpdates(const Round& round,
                                                    const TickReply& reply,
                                                    uint64_t* resets)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  void ReportLostPolicy(const std::string& policy)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  void ApplyGrants(const Round& round, const PolicyPush& push,
                   const PolicyPull& pull, core::DependencyUpdate* update)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  // Other replicas' outcomes, the stored breaker record and probe leases.
  void ApplyBreakerRecords(const core::DependencyTick& tick,
                           const PolicyPush& push, const PolicyPull& pull,
                           core::DependencyUpdate* update)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  void RecordStats(const Round& round, const TickReply& reply, uint32_t live,
                   uint64_t resets) ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_)
      ABSL_LOCKS_EXCLUDED(stats_mu_);
  // A tick that failed: the store counts as down once it has been silent
  // for the stale period, or at once when it `refused` (answered
  // FAILED_PRECONDITION: it cannot serve).
  absl::Status TickFailed(absl::Time start, absl::Duration took,
                          const std::string& error, bool refused,
                          std::vector<core::ForwardedReport> unsent)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  // Applies the config part of a good tick.
  void ApplyConfig(const TickReply& reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  void SetStoreUp(bool up, const std::string& detail)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(tick_mu_);
  absl::Duration stale_after() const {
    return options_.interval * options_.stale_ticks;
  }
 public:
  // How long after its first good tick (and after the store was down or
  // lost its membership) a process waits before it applies per_key static
  // shares: every grant issued before the store counted it has ended by
  // then (see AcceptMembership).
  absl::Duration static_share_wait() const {
    return stale_after() + options_.interval;
  }

 private:

  core::Engine* const engine_;
  Store* const store_;
  core::Clock* const clock_;
  const Options options_;

  // Serializes ticks (the periodic task's and TickOnce callers').
  mutable absl::Mutex tick_mu_;
  absl::Time last_tick_ ABSL_GUARDED_BY(tick_mu_) = absl::InfinitePast();
  absl::Duration next_tick_in_ ABSL_GUARDED_BY(tick_mu_) = options_.interval;
  // When the last good tick was sent: grants hold until stale_after() later.
  absl::Time last_success_ ABSL_GUARDED_BY(tick_mu_) = absl::InfinitePast();
  bool store_up_ ABSL_GUARDED_BY(tick_mu_) = false;
  bool store_known_ ABSL_GUARDED_BY(tick_mu_) = false;
  // Ticks failed in a row (the first one is logged).
  int failed_in_a_row_ ABSL_GUARDED_BY(tick_mu_) = 0;
  // After the store was unreachable, adopt its breaker state before
  // publishing this replica's own.
  bool adopt_first_ ABSL_GUARDED_BY(tick_mu_) = true;
  // The live weight counted for static shares: the most the store reported
  // over the last stale period (recent_live_, by tick start).
  uint32_t live_replicas_ ABSL_GUARDED_BY(tick_mu_) = 1;
  std::deque<std::pair<absl::Time, uint32_t>> recent_live_
      ABSL_GUARDED_BY(tick_mu_);
  // When this process may apply per_key static shares (see
  // AcceptMembership): InfiniteFuture until the store has counted it, and
  // again after the store went down or lost its membership.
  absl::Time statics_from_ ABSL_GUARDED_BY(tick_mu_) = absl::InfiniteFuture();
  // The live replicas as the store last listed them, and the membership
  // (epoch, version) of that list: the store lists them again only when
  // its membership differs (TickRequest::members_seen).
  std::vector<std::string> replicas_ ABSL_GUARDED_BY(tick_mu_);
  std::string members_epoch_ ABSL_GUARDED_BY(tick_mu_);
  uint64_t members_seen_ ABSL_GUARDED_BY(tick_mu_) = 0;
  // This loop's life and tick order (TickRequest::incarnation, sequence).
  const uint64_t incarnation_;
  uint64_t sequence_ ABSL_GUARDED_BY(tick_mu_) = 0;
  absl::Duration offset_ ABSL_GUARDED_BY(tick_mu_) = absl::ZeroDuration();
  bool offset_known_ ABSL_GUARDED_BY(tick_mu_) = false;
  // How much the offset moved at the last good tick (the clocks' drift
  // over a tick, plus the round trip's jitter).
  absl::Duration drift_ ABSL_GUARDED_BY(tick_mu_) = absl::ZeroDuration();
  // The least a grant ends before the store frees it (see ApplyGrants).
  static constexpr absl::Duration kGrantMargin = absl::Milliseconds(50);
  // The config version applied (via on_config), the seed to send, and the
  // config last applied, to rebuild a store that lost it.
  uint64_t config_seen_ ABSL_GUARDED_BY(tick_mu_) = 0;
  std::string config_epoch_ ABSL_GUARDED_BY(tick_mu_);
  std::optional<ConfigSnapshot> config_ ABSL_GUARDED_BY(tick_mu_);
  bool restore_pending_ ABSL_GUARDED_BY(tick_mu_) = false;
  std::vector<StoredPolicy> seed_ ABSL_GUARDED_BY(tick_mu_);
  bool seed_pending_ ABSL_GUARDED_BY(tick_mu_) = false;
  // Each policy's store epoch as last seen.
  absl::flat_hash_map<std::string, std::string> policy_epochs_
      ABSL_GUARDED_BY(tick_mu_);
  // Per policy, the outcome totals last seen from each other replica, and
  // the tick (sequence_) that saw them.
  struct SeenOutcomes {
    core::OutcomeTotals totals;
    uint64_t sequence = 0;
  };
  absl::flat_hash_map<std::string,
                      absl::flat_hash_map<std::string, SeenOutcomes>>
      seen_outcomes_ ABSL_GUARDED_BY(tick_mu_);
  // Quiet policies: the breaker records the store last answered for
  // (TickReply::breakers_epoch; 0: the store does not, and every policy
  // is pushed), and per policy since when it has been idle, the outcome
  // totals it last pushed, and whether the last tick left it out.
  uint64_t breakers_epoch_ ABSL_GUARDED_BY(tick_mu_) = 0;
  uint64_t breakers_seen_ ABSL_GUARDED_BY(tick_mu_) = 0;
  struct PolicyActivity {
    absl::Time idle_since = absl::InfiniteFuture();
    core::OutcomeTotals pushed_outcomes;
    bool left_out = false;
    uint64_t sequence = 0;  // the tick that last saw the policy
  };
  absl::flat_hash_map<std::string, PolicyActivity> activity_
      ABSL_GUARDED_BY(tick_mu_);

  // Reports waiting to be forwarded, and who may receive them.
  static constexpr size_t kMaxForwardQueue = 100000;
  absl::Mutex forward_mu_;
  std::vector<core::ForwardedReport> forward_queue_ ABSL_GUARDED_BY(forward_mu_);
  absl::flat_hash_set<std::string> live_ ABSL_GUARDED_BY(forward_mu_);

  mutable absl::Mutex stats_mu_;
  SyncStats stats_ ABSL_GUARDED_BY(stats_mu_);

  // The ticks once started (null before Start and after Stop).
  absl::Mutex mu_;
  std::unique_ptr<base::PeriodicTask> task_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::cluster

#endif  // SLUICE_SERVER_CLUSTER_SYNC_LOOP_H_
