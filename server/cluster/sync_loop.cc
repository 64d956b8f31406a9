// SPDX-License-Identifier: Apache-2.0
#include "server/cluster/sync_loop.h"

#include <algorithm>
#include <random>
#include <utility>

#include "server/cluster/warm_view.h"
#include "spdlog/spdlog.h"

namespace sluice::cluster {
namespace {

// The outcomes another replica added since it was last seen. A replica seen
// for the first time adds nothing: its history is not news.
core::OutcomeWindow Delta(const core::OutcomeTotals& now,
                          const core::OutcomeTotals* before) {
  core::OutcomeWindow d;
  if (before == nullptr || now.calls < before->calls) return d;
  d.calls = static_cast<int64_t>(now.calls - before->calls);
  d.failures = static_cast<int64_t>(
      now.failures >= before->failures ? now.failures - before->failures : 0);
  d.slow = static_cast<int64_t>(now.slow >= before->slow ? now.slow - before->slow
                                                         : 0);
  return d;
}

// A random id for this loop's life; never 0 (0 means "not sent").
uint64_t NewIncarnation() {
  std::random_device rd;
  const uint64_t id = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return id == 0 ? 1 : id;
}

}  // namespace

SyncLoop::SyncLoop(core::Engine* engine, Store* store, core::Clock* clock,
                   Options options)
    : engine_(engine),
      store_(store),
      clock_(clock),
      options_(std::move(options)),
      incarnation_(NewIncarnation()) {}

SyncLoop::~SyncLoop() { Stop(); }

void SyncLoop::Start() {
  absl::MutexLock lock(&mu_);
  if (task_ != nullptr) return;
  base::PeriodicOptions periodic;
  periodic.first_run_in = absl::ZeroDuration();
  periodic.wake_gap = std::min(options_.interval, kMinGap);
  task_ = options_.env->StartPeriodic(periodic, [this] {
    TickOnce().IgnoreError();  // logged and counted inside
    return NextTickIn();
  });
}

void SyncLoop::Stop() {
  std::unique_ptr<base::PeriodicTask> task;
  {
    absl::MutexLock lock(&mu_);
    task = std::move(task_);
  }
  if (task == nullptr) return;
  // Outside mu_: a tick in progress may nudge the loop.
  task->Stop();
  Leave().IgnoreError();  // logged and counted inside
}

absl::Status SyncLoop::Leave() {
  absl::MutexLock lock(&tick_mu_);
  return Tick(/*leaving=*/true);
}

void SyncLoop::Nudge() {
  absl::MutexLock lock(&mu_);
  if (task_ != nullptr) task_->Wake();
}

bool SyncLoop::Forward(core::ForwardedReport report) {
  {
    absl::MutexLock lock(&forward_mu_);
    if (report.issuer != options_.replica_id && live_.contains(report.issuer) &&
        forward_queue_.size() < kMaxForwardQueue) {
      forward_queue_.push_back(std::move(report));
      return true;
    }
  }
  absl::MutexLock lock(&stats_mu_);
  ++stats_.reports_not_forwarded;
  return false;
}

void SyncLoop::SetSeed(std::vector<StoredPolicy> seed) {
  absl::MutexLock lock(&tick_mu_);
  seed_ = std::move(seed);
  seed_pending_ = true;
}

absl::Duration SyncLoop::NextTickIn() const {
  absl::MutexLock lock(&tick_mu_);
  return next_tick_in_;
}

void SyncLoop::SetStoreUp(bool up, const std::string& detail) {
  if (store_known_ && up == store_up_) return;
  const bool first = !store_known_;
  store_known_ = true;
  store_up_ = up;
  if (up) {
    spdlog::info("cluster store {} is up{}; {}", store_->Describe(),
                 first ? "" : " again", detail);
  } else {
    // Stores name themselves in their errors ("UNAVAILABLE: upstream X:
    // ..."), and this line names the store up front: drop the repeat, keep
    // the code and the cause.
    const std::string store = store_->Describe();
    std::string cause = detail;
    if (const size_t at = cause.find(absl::StrCat(store, ": "));
        at != std::string::npos) {
      cause.erase(at, store.size() + 2);
    }
    spdlog::error(
        "cluster store {} is unreachable ({}); deciding from local state "
        "(each policy follows on_store_failure)",
        store, cause);
  }
  if (options_.on_store_change) options_.on_store_change(up, detail);
}

absl::Status SyncLoop::TickOnce() {
  absl::MutexLock lock(&tick_mu_);
  return Tick(/*leaving=*/false);
}

absl::Status SyncLoop::TickFailed(absl::Time start, absl::Duration took,
                                  const std::string& error, bool refused,
                                  std::vector<core::ForwardedReport> unsent) {
  ++failed_in_a_row_;
  const absl::Time held_until = last_success_ + stale_after();
  // A store that answered it cannot serve will not renew the grants within
  // the stale period: holding them would refuse calls on grants that run
  // out, so local state decides at once.
  if (start >= held_until || !store_known_ || refused) {
    SetStoreUp(false, error);
    adopt_first_ = true;
    // Silent for a stale period: the store forgets this process, and counts
    // it again only at its next good tick.
    statics_from_ = absl::InfiniteFuture();
    engine_->SetStoreState(false, 0, /*static_shares=*/false);
  } else if (failed_in_a_row_ == 1) {
    spdlog::warn(
        "cluster store {} did not answer ({}); keeping this replica's grants "
        "for up to {} more, retrying every {}",
        store_->Describe(), error, absl::FormatDuration(held_until - start),
        absl::FormatDuration(std::min(options_.interval, options_.retry)));
  }
  {
    // Pass them on with a later tick; a report that did reach the store
    // and comes twice finds its permit settled and changes nothing.
    absl::MutexLock lock(&forward_mu_);
    for (core::ForwardedReport& f : unsent) {
      if (forward_queue_.size() >= kMaxForwardQueue) break;
      forward_queue_.push_back(std::move(f));
    }
  }
  absl::MutexLock stats_lock(&stats_mu_);
  ++stats_.ticks;
  ++stats_.failures;
  stats_.store_up = store_up_;
  stats_.last_tick_duration = took;
  stats_.last_error = error;
  return absl::UnavailableError(error);
}

void SyncLoop::ApplyConfig(const TickReply& reply) {
  // The store compares the epoch this replica sent with its own.
  config_epoch_ = reply.config_epoch;
  if (reply.config_lost && config_) {
    // The store lost its config (a restart without persistence, a failover
    // to an empty replica): what it answered is not the cluster's config.
    // Rebuild it from what this replica applied last, with the next tick.
    const std::string detail = absl::StrCat(
        "cluster store ", store_->Describe(),
        " lost its config; rebuilding it from this replica's copy (version ",
        config_->version, ", ", config_->policies.size(), " policies, ",
        config_->deleted.size(), " deleted, ", config_->overrides.size(),
        " overrides)");
    spdlog::warn("{}", detail);
    restore_pending_ = true;
    {
      absl::MutexLock stats_lock(&stats_mu_);
      ++stats_.store_resets;
    }
    if (options_.on_store_reset) options_.on_store_reset(detail);
    return;
  }
  if (!reply.config || reply.config->version == 0) return;
  if (options_.on_config) options_.on_config(*reply.config);
  config_seen_ = reply.config->version;
  config_ = *reply.config;
}

absl::Status SyncLoop::Tick(bool leaving) {
  Round round = BuildRequest(leaving);
  absl::StatusOr<TickReply> reply = Exchange(&round);
  // A failed tick is tried again soon: the grants it renews hold only for
  // the stale period, and a store back from a stall is reached at once.
  next_tick_in_ = reply.ok() ? options_.interval
                             : std::min(options_.interval, options_.retry);
  if (reply.ok() && reply->tick_again_in > absl::ZeroDuration()) {
    next_tick_in_ = std::clamp(reply->tick_again_in,
                               std::min(options_.interval, kMinGap),
                               options_.interval);
  }
  if (!reply.ok()) {
    return TickFailed(
        round.start, round.took, std::string(reply.status().message()),
        reply.status().code() == absl::StatusCode::kFailedPrecondition,
        std::move(round.request.forwarded));
  }
  if (leaving) {
    spdlog::info("left the cluster: grants, leases and membership given back");
    return absl::OkStatus();
  }
  const uint32_t live = AcceptMembership(round, *reply);
  DeliverInbox(*reply);
  PullConfig(round, *reply);
  uint64_t resets = 0;
  std::vector<core::DependencyUpdate> updates =
      PolicyUpdates(round, *reply, &resets);
  AddQuietBreakers(round, *reply, &updates);
  breakers_epoch_ = reply->breakers_epoch;
  breakers_seen_ = reply->breakers_version;
  engine_->ApplyTick(updates);
  adopt_first_ = false;
  RecordStats(round, *reply, live, resets);
  return absl::OkStatus();
}

std::vector<core::DependencyUpdate> SyncLoop::PolicyUpdates(
    const Round& round, const TickReply& reply, uint64_t* resets) {
  std::vector<core::DependencyUpdate> updates;
  updates.reserve(round.pushed.size());
  // The live set only for a policy with warm state (built once).
  std::optional<absl::flat_hash_set<std::string>> live;
  for (size_t i = 0; i < round.pushed.size(); ++i) {
    const core::DependencyTick& tick = *round.pushed[i];
    const PolicyPush& push = round.request.policies[i];
    const PolicyPull& pull = reply.policies[i];
    if (pull.lost) {
      ++*resets;
      ReportLostPolicy(tick.name);
    }
    policy_epochs_[tick.name] = pull.epoch;
    core::DependencyUpdate update;
    update.name = tick.name;
    ApplyGrants(round, push, pull, &update);
    if (tick.has_breaker) ApplyBreakerRecords(tick, push, pull, &update);
    if (push.has_warm) {
      if (!live) live.emplace(replicas_.begin(), replicas_.end());
      WarmView view =
          CombineWarm(pull.warm, push.digest, options_.replica_id, *live);
      update.cluster_adaptive = view.adaptive;
      update.cluster_baseline = view.baseline;
    }
    updates.push_back(std::move(update));
  }
  return updates;
}

SyncLoop::Round SyncLoop::BuildRequest(bool leaving) {
  Round round;
  round.start = clock_->Now();
  const absl::Duration since =
      last_tick_ == absl::InfinitePast()
          ? options_.interval
          : std::max(round.start - last_tick_, absl::Milliseconds(1));
  last_tick_ = round.start;

  round.ticks = engine_->CollectTick(since);
  TickRequest& request = round.request;
  request.replica_id = options_.replica_id;
  request.incarnation = incarnation_;
  request.sequence = ++sequence_;
  request.stale_after = stale_after();
  request.key_ttl = options_.key_ttl;
  request.live_replicas = live_replicas_;
  request.leaving = leaving;
  request.config_seen = config_seen_;
  request.config_epoch_seen = config_epoch_;
  request.members_epoch_seen = members_epoch_;
  request.members_seen = members_seen_;
  request.breakers_epoch_seen = breakers_epoch_;
  request.breakers_seen = breakers_seen_;
  if (restore_pending_ && config_) request.restore = config_;
  round.seeding = seed_pending_;
  if (round.seeding) request.seed = seed_;
  {
    absl::MutexLock lock(&forward_mu_);
    request.forwarded.swap(forward_queue_);
  }
  size_t active = 0;
  for (core::DependencyTick& tick : round.ticks) {
    if (tick.keys.empty() && !tick.has_breaker && !tick.has_warm) {
      continue;
    }
    ++active;
    if (LeaveOut(tick, round)) {
      round.quiet.insert(tick.name);
      continue;
    }
    request.policies.push_back(PushFor(tick));
    round.pushed.push_back(&tick);
  }
  if (activity_.size() > active) {
    // Policies deleted, or with nothing to share any more.
    const uint64_t current = sequence_;
    absl::erase_if(activity_, [current](const auto& a) {
      return a.second.sequence != current;
    });
  }
  return round;
}

bool SyncLoop::LeaveOut(const core::DependencyTick& tick, const Round& round) {
  PolicyActivity& activity = activity_[tick.name];
  activity.sequence = sequence_;
  // Idle: nothing in this tick that the store does not have already.
  bool idle = !tick.has_warm && tick.leases_wanted == 0;
  for (const core::KeyTick& key : tick.keys) {
    for (int r = 0; r < core::kClusterResources; ++r) {
      if (key.demand[r] > 0 || key.usage[r] > 0) idle = false;
    }
  }
  if (tick.has_breaker) {
    const core::OutcomeTotals& pushed = activity.pushed_outcomes;
    idle = idle && tick.breaker.generation == tick.breaker.base &&
           tick.outcomes.calls == pushed.calls &&
           tick.outcomes.failures == pushed.failures &&
           tick.outcomes.slow == pushed.slow;
  }
  if (!idle) {
    activity.idle_since = absl::InfiniteFuture();
  } else if (activity.idle_since == absl::InfiniteFuture()) {
    activity.idle_since = round.start;
  }
  // Only with a store that answers for the breakers of policies left out,
  // and not while this replica adopts the store's state first (after the
  // store was unreachable every policy is pushed once).
  const bool quiet =
      idle && breakers_epoch_ != 0 && !adopt_first_ &&
      !round.request.leaving &&
      round.start - activity.idle_since >=
          std::max(options_.quiet_after, stale_after());
  if (quiet) {
    activity.left_out = true;
    return true;
  }
  if (activity.left_out) {
    // Back from quiet: what the others added meanwhile is history, not
    // news for the breaker window, so their totals are taken afresh.
    seen_outcomes_.erase(tick.name);
    activity.left_out = false;
  }
  activity.pushed_outcomes = tick.outcomes;
  return false;
}

void SyncLoop::AddQuietBreakers(const Round& round, const TickReply& reply,
                                std::vector<core::DependencyUpdate>* updates) {
  for (const PolicyBreaker& stored : reply.breakers) {
    // A policy this tick pushed has its record in its pull.
    if (!round.quiet.contains(stored.policy)) continue;
    core::DependencyUpdate update;
    update.name = stored.policy;
    core::BreakerRecord record = stored.record;
    if (record.open_until != absl::InfinitePast()) {
      record.open_until -= offset_;
    }
    update.breaker = std::move(record);
    updates->push_back(std::move(update));
  }
}

PolicyPush SyncLoop::PushFor(core::DependencyTick& tick) const {
  PolicyPush push;
  push.policy = tick.name;
  push.per_key = tick.per_key;
  auto epoch = policy_epochs_.find(tick.name);
  if (epoch != policy_epochs_.end()) push.epoch_seen = epoch->second;
  push.keys = std::move(tick.keys);
  push.has_breaker = tick.has_breaker;
  push.outcomes = tick.outcomes;
  push.breaker = tick.breaker;
  // Shared times are on the store's clock.
  if (push.breaker.open_until != absl::InfinitePast()) {
    push.breaker.open_until += offset_;
  }
  push.publish = !adopt_first_;
  push.leases_wanted = tick.leases_wanted;
  push.lease_cap = tick.lease_cap;
  // A lease outlives a dead replica by a few ticks at most.
  push.lease_ttl = std::max(tick.lease_ttl, stale_after());
  push.has_warm = tick.has_warm;
  push.digest = tick.policy_digest;
  if (tick.adaptive) push.adaptive = *tick.adaptive;
  if (tick.baseline) push.baseline = *tick.baseline;
  return push;
}

absl::StatusOr<TickReply> SyncLoop::Exchange(Round* round) {
  absl::StatusOr<TickReply> reply = store_->Tick(round->request);
  round->took = clock_->Now() - round->start;
  // The message is what TickFailed logs and keeps as last_error.
  if (!reply.ok()) {
    // FAILED_PRECONDITION is the store's answer that it cannot serve (see
    // Store::Tick); any other failure is the store not answering.
    return absl::Status(
        reply.status().code() == absl::StatusCode::kFailedPrecondition
            ? absl::StatusCode::kFailedPrecondition
            : absl::StatusCode::kUnavailable,
        reply.status().ToString());
  }
  // A leave applies nothing from its reply: an upstream may answer it
  // with no policies (a central replica's ledger does).
  const bool empty_leave =
      round->request.leaving && reply->policies.empty();
  if (!empty_leave &&
      reply->policies.size() != round->request.policies.size()) {
    return absl::UnavailableError(
        "store answered for the wrong number of policies");
  }
  return reply;
}

uint32_t SyncLoop::AcceptMembership(const Round& round,
                                    const TickReply& reply) {
  failed_in_a_row_ = 0;
  const absl::Time previous_success = last_success_;
  last_success_ = round.start;
  const absl::Duration offset = reply.store_now - (round.start + round.took / 2);
  drift_ = offset_known_ ? absl::AbsDuration(offset - offset_)
                        : absl::ZeroDuration();
  offset_ = offset;
  offset_known_ = true;
  // The store lists the replicas only when its membership changed since
  // the one this replica applied; otherwise the last list holds.
  const bool listed = !reply.members_unchanged;
  // Static shares of per_key keys. The store counts this process from this
  // tick on (it joins, or comes back after it forgot it: the store lost its
  // membership, or this process was silent for a stale period, or a leaf
  // reached another central), but grants it issued before, which left no
  // room for this process's static share, stay in force for up to a stale
  // period from their own tick, which started before this reply came. A
  // leaf's central counts it at once but its store upstream only from the
  // central's next tick, up to an interval later. So the static shares wait
  // stale_after + interval from this reply.
  const absl::Time replied = round.start + round.took;
  const bool forgotten =
      statics_from_ == absl::InfiniteFuture() ||
      (listed && reply.members_epoch != members_epoch_) ||
      round.start >= previous_success + stale_after();
  if (forgotten) statics_from_ = replied + static_share_wait();
  const bool statics = replied >= statics_from_;
  if (listed) {
    replicas_ = reply.replicas;
    members_epoch_ = reply.members_epoch;
    members_seen_ = reply.members_version;
  }
  const uint32_t live =
      std::max<uint32_t>(1, static_cast<uint32_t>(replicas_.size()));
  // Static shares (and LOCAL splits) count the processes the store knows
  // (weights), and never fewer than it counted over the last stale period:
  // after the store lost its membership, replicas come back one a tick, and
  // the k-th to tick would otherwise see k and take limit / (k + 1) while
  // the others still apply theirs.
  const uint32_t weight = std::max<uint32_t>(live, reply.live_weight);
  recent_live_.emplace_back(round.start, weight);
  while (recent_live_.front().first < round.start - stale_after()) {
    recent_live_.pop_front();
  }
  uint32_t counted = 1;
  for (const auto& [at, n] : recent_live_) counted = std::max(counted, n);
  live_replicas_ = counted;
  SetStoreUp(true, absl::StrCat(live, " live replica", live == 1 ? "" : "s"));
  engine_->SetStoreState(true, counted, statics);
  if (listed) {
    absl::MutexLock lock(&forward_mu_);
    live_.clear();
    live_.insert(replicas_.begin(), replicas_.end());
  }
  return live;
}

void SyncLoop::DeliverInbox(const TickReply& reply) {
  for (const core::ForwardedReport& f : reply.forwarded_to_me) {
    engine_->Report(f.dependency, f.key, f.permit_id, f.outcome, f.latency);
  }
}

void SyncLoop::PullConfig(const Round& round, const TickReply& reply) {
  if (round.seeding) seed_pending_ = false;
  if (round.request.restore) restore_pending_ = false;
  ApplyConfig(reply);
}

void SyncLoop::ReportLostPolicy(const std::string& policy) {
  const std::string detail = absl::StrCat(
      "cluster store ", store_->Describe(), " lost the state of policy \"",
      policy, "\"; this replica keeps its grants for ",
      absl::FormatDuration(stale_after()),
      " and rebuilds its entries from memory");
  spdlog::warn("{}", detail);
  if (options_.on_store_reset) options_.on_store_reset(detail);
}

void SyncLoop::ApplyGrants(const Round& round, const PolicyPush& push,
                           const PolicyPull& pull,
                           core::DependencyUpdate* update) {
  // The store holds a grant for the stale period from when it ran the tick,
  // which is after round.start on its own clock; this replica stops
  // applying it a safety margin earlier: the store keeps whole
  // milliseconds, and the two clocks may drift apart (the change of the
  // measured offset since the last tick), so it ends at least
  // max(kGrantMargin, drift) before the store frees it.
  const absl::Duration margin = std::max(kGrantMargin, drift_);
  const absl::Time valid_until =
      round.start + round.request.stale_after - margin;
  for (size_t k = 0; k < push.keys.size() && k < pull.grants.size(); ++k) {
    core::KeyGrant grant;
    grant.key = push.keys[k].key;
    grant.granted = pull.grants[k].granted;
    grant.units = pull.grants[k].units;
    grant.limit = push.keys[k].limit;
    grant.per_key = push.per_key;
    grant.valid_until =
        std::min(valid_until, round.start + pull.grants[k].valid_for);
    update->grants.push_back(std::move(grant));
  }
}

void SyncLoop::ApplyBreakerRecords(const core::DependencyTick& tick,
                                   const PolicyPush& push,
                                   const PolicyPull& pull,
                                   core::DependencyUpdate* update) {
  // Updated in place (an idle tick allocates nothing): a replica absent
  // from this pull is forgotten, so its history is not news when it comes
  // back.
  auto& seen = seen_outcomes_[tick.name];
  size_t touched = 0;
  for (const ReplicaOutcomes& other : pull.outcomes) {
    if (other.replica == options_.replica_id) continue;
    auto [it, added] = seen.try_emplace(other.replica);
    SeenOutcomes& entry = it->second;
    if (!added && entry.sequence == sequence_) continue;  // named twice
    ++touched;
    update->remote_outcomes +=
        Delta(other.totals, added ? nullptr : &entry.totals);
    entry.totals = other.totals;
    entry.sequence = sequence_;
  }
  if (seen.size() > touched) {
    const uint64_t current = sequence_;
    absl::erase_if(seen, [current](const auto& e) {
      return e.second.sequence != current;
    });
  }
  if (pull.breaker) {
    core::BreakerRecord record = *pull.breaker;
    if (record.open_until != absl::InfinitePast()) {
      record.open_until -= offset_;
    }
    update->mine = record.replica == options_.replica_id &&
                   record.generation >= push.breaker.generation &&
                   push.breaker.generation != push.breaker.base;
    update->rejected =
        !update->mine && push.breaker.generation != push.breaker.base;
    update->breaker = std::move(record);
  }
  update->leases_granted = pull.leases_granted;
}

void SyncLoop::RecordStats(const Round& round, const TickReply& reply,
                           uint32_t live, uint64_t resets) {
  absl::MutexLock stats_lock(&stats_mu_);
  ++stats_.ticks;
  stats_.store_up = true;
  stats_.live_replicas = live;
  stats_.last_tick_duration = round.took;
  stats_.last_success = round.start;
  stats_.clock_offset = offset_;
  stats_.store_resets += resets;
  stats_.quiet_policies = static_cast<uint32_t>(round.quiet.size());
  stats_.reports_forwarded +=
      round.request.forwarded.size() - reply.inbox_dropped;
  stats_.reports_not_forwarded += reply.inbox_dropped;
  stats_.reports_received += reply.forwarded_to_me.size();
}

SyncStats SyncLoop::stats() const {
  absl::MutexLock lock(&stats_mu_);
  return stats_;
}

void SyncLoop::WriteStats(base::StatsWriter& out) const {
  const SyncStats s = stats();
  static constexpr base::MetricDef kStoreUp = base::GaugeDef(
      "sluice_store_up", {},
      "1 while the cluster store answers (Redis; for a leaf, its "
      "upstream central replica), 0 while it does not. Cluster mode "
      "only.");
  out.Write(kStoreUp, s.store_up ? 1 : 0);
  static constexpr base::MetricDef kLiveReplicas = base::GaugeDef(
      "sluice_live_replicas", {},
      "Live replicas at the last successful sync. Cluster mode only.");
  out.Write(kLiveReplicas, s.live_replicas);
  static constexpr base::MetricDef kSyncTickDurationSeconds = base::GaugeDef(
      "sluice_sync_tick_duration_seconds", {},
      "Duration of the last sync tick (one store round trip). Cluster mode "
      "only.");
  out.Write(kSyncTickDurationSeconds,
            absl::ToDoubleSeconds(s.last_tick_duration));
  static constexpr base::MetricDef kSyncTicks =
      base::CounterDef("sluice_sync_ticks_total", {},
                       "Sync ticks attempted. Cluster mode only.");
  out.Write(kSyncTicks, static_cast<double>(s.ticks));
  static constexpr base::MetricDef kSyncErrors = base::CounterDef(
      "sluice_sync_errors_total", {},
      "Sync ticks that failed (store unreachable, slow or erroring). "
      "Cluster mode only.");
  out.Write(kSyncErrors, static_cast<double>(s.failures));
  static constexpr base::MetricDef kForwardedReports = base::CounterDef(
      "sluice_forwarded_reports_total", {"direction"},
      "Reports for permits of another replica: out (passed on to the "
      "issuer), in (received for this replica's permits), dropped (issuer "
      "not live, or the queue full). Cluster mode only.");
  out.WriteBy(kForwardedReports, {{"out", s.reports_forwarded},
                                  {"in", s.reports_received},
                                  {"dropped", s.reports_not_forwarded}});
  static constexpr base::MetricDef kStoreClockOffsetSeconds = base::GaugeDef(
      "sluice_store_clock_offset_seconds", {},
      "The store's clock (Redis TIME) minus this replica's, at the last "
      "sync. Every shared expiry uses the store's clock. Cluster mode "
      "only.");
  out.Write(kStoreClockOffsetSeconds, absl::ToDoubleSeconds(s.clock_offset));
  static constexpr base::MetricDef kStoreResets = base::CounterDef(
      "sluice_store_resets_total", {},
      "Times the store was found to have lost its data (config or a "
      "policy's shared state), rebuilt from this replica's memory. "
      "Cluster mode only.");
  out.Write(kStoreResets, static_cast<double>(s.store_resets));
  static constexpr base::MetricDef kSyncQuietPolicies = base::GaugeDef(
      "sluice_sync_quiet_policies", {},
      "Policies left out of the last sync tick because they have been "
      "idle (no demand, no units in use, no breaker news) for 10 s; "
      "the first call to one wakes it. Leaves of the grant "
      "tree only; 0 elsewhere.");
  out.Write(kSyncQuietPolicies, s.quiet_policies);
}

}  // namespace sluice::cluster
