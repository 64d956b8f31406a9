#include "server/cluster/sync_loop.h"

#include <algorithm>
#include <utility>

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

// This replica's fraction of `limit` given every live replica's demand.
double MyFraction(const std::vector<ReplicaDemand>& demands,
                  const std::string& me, double limit, bool concurrency,
                  const ShareOptions& options) {
  std::vector<double> demand;
  demand.reserve(demands.size());
  size_t mine = demands.size();
  for (size_t i = 0; i < demands.size(); ++i) {
    demand.push_back(concurrency ? demands[i].concurrency_demand
                                 : demands[i].rate_demand);
    if (demands[i].replica == me) mine = i;
  }
  if (mine == demands.size()) return 1.0 / std::max<size_t>(1, demands.size());
  return AllocateShares(demand, limit, options)[mine];
}

}  // namespace

SyncLoop::SyncLoop(core::Engine* engine, Store* store, core::Clock* clock,
                   Options options)
    : engine_(engine),
      store_(store),
      clock_(clock),
      options_(std::move(options)) {}

SyncLoop::~SyncLoop() { Stop(); }

void SyncLoop::Start() {
  absl::MutexLock lock(&mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { Run(); });
}

void SyncLoop::Stop() {
  {
    absl::MutexLock lock(&mu_);
    if (!thread_.joinable()) return;
    stopping_ = true;
  }
  thread_.join();
}

void SyncLoop::Nudge() {
  absl::MutexLock lock(&mu_);
  nudged_ = true;
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

void SyncLoop::Run() {
  // A nudge is honoured after at least this long, so a flapping breaker
  // cannot turn the loop into a busy one.
  const absl::Duration min_gap =
      std::min(options_.interval, absl::Milliseconds(50));
  absl::Time next = absl::Now();
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto due = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || nudged_;
      };
      mu_.AwaitWithDeadline(absl::Condition(&due), next);
      if (stopping_) break;
      if (nudged_) {
        nudged_ = false;
        mu_.Unlock();
        absl::SleepFor(min_gap);
        mu_.Lock();
      }
    }
    TickOnce().IgnoreError();  // logged and counted inside
    next = absl::Now() + options_.interval;
  }
  TickOnce().IgnoreError();
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
    spdlog::error(
        "cluster store {} is unreachable: {}; deciding from local state "
        "(each policy follows on_store_failure)",
        store_->Describe(), detail);
  }
  if (options_.on_store_change) options_.on_store_change(up, detail);
}

absl::Status SyncLoop::TickOnce() {
  absl::MutexLock lock(&tick_mu_);
  const absl::Time start = clock_->Now();
  const absl::Duration since =
      last_tick_ == absl::InfinitePast()
          ? options_.interval
          : std::max(start - last_tick_, absl::Milliseconds(1));
  last_tick_ = start;

  std::vector<core::DependencyTick> ticks = engine_->CollectTick(since);
  TickRequest request;
  request.replica_id = options_.replica_id;
  request.now = start;
  request.stale_after = options_.interval * options_.stale_ticks;
  request.key_ttl = options_.key_ttl;
  request.config_seen = config_seen_;
  const bool seeding = seed_pending_;
  if (seeding) request.seed = seed_;
  {
    absl::MutexLock lock(&forward_mu_);
    request.forwarded.swap(forward_queue_);
  }
  std::vector<const core::DependencyTick*> pushed;
  for (core::DependencyTick& tick : ticks) {
    const bool cluster_limits = tick.cluster_rate || tick.cluster_concurrency;
    if (!cluster_limits && !tick.has_breaker) continue;
    PolicyPush push;
    push.policy = tick.name;
    if (cluster_limits) push.keys = tick.keys;
    push.has_breaker = tick.has_breaker;
    push.outcomes = tick.outcomes;
    push.breaker = tick.breaker;
    push.breaker.replica = options_.replica_id;
    push.leases_wanted = tick.leases_wanted;
    push.lease_cap = tick.lease_cap;
    // A lease outlives a dead replica by a few ticks at most.
    push.lease_ttl = std::max(tick.lease_ttl, request.stale_after);
    request.policies.push_back(std::move(push));
    pushed.push_back(&tick);
  }

  absl::StatusOr<TickReply> reply = store_->Tick(request);
  const absl::Duration took = clock_->Now() - start;
  if (!reply.ok() || reply->policies.size() != request.policies.size()) {
    const std::string error =
        reply.ok() ? "store answered for the wrong number of policies"
                   : reply.status().ToString();
    SetStoreUp(false, error);
    engine_->SetStoreState(false, 0);
    {
      // Pass them on with a later tick; a report that did reach the store
      // and comes twice finds its permit settled and changes nothing.
      absl::MutexLock lock(&forward_mu_);
      for (core::ForwardedReport& f : request.forwarded) {
        if (forward_queue_.size() >= kMaxForwardQueue) break;
        forward_queue_.push_back(std::move(f));
      }
    }
    absl::MutexLock stats_lock(&stats_mu_);
    ++stats_.ticks;
    ++stats_.failures;
    stats_.store_up = false;
    stats_.last_tick_duration = took;
    stats_.last_error = error;
    return reply.ok() ? absl::InternalError(error) : reply.status();
  }

  const uint32_t live = static_cast<uint32_t>(reply->replicas.size());
  SetStoreUp(true, absl::StrCat(live, " live replica", live == 1 ? "" : "s"));
  engine_->SetStoreState(true, live);
  {
    absl::MutexLock lock(&forward_mu_);
    live_.clear();
    live_.insert(reply->replicas.begin(), reply->replicas.end());
  }
  for (const core::ForwardedReport& f : reply->forwarded_to_me) {
    engine_->Report(f.dependency, f.key, f.permit_id, f.outcome, f.latency);
  }
  if (seeding) seed_pending_ = false;
  if (reply->config) {
    if (reply->config->version < config_seen_) {
      // The store lost its config (a restart without persistence): seed it
      // again and take the config it then has, not this empty one.
      spdlog::warn(
          "cluster config version went back from {} to {}; seeding the store "
          "again from the policies file",
          config_seen_, reply->config->version);
      config_seen_ = 0;
      seed_pending_ = true;
    } else if (reply->config->version > 0) {
      if (options_.on_config) options_.on_config(*reply->config);
      config_seen_ = reply->config->version;
    }
  }

  std::vector<core::DependencyUpdate> updates;
  updates.reserve(pushed.size());
  for (size_t i = 0; i < pushed.size(); ++i) {
    const core::DependencyTick& tick = *pushed[i];
    const PolicyPush& push = request.policies[i];
    const PolicyPull& pull = reply->policies[i];
    core::DependencyUpdate update;
    update.name = tick.name;
    for (size_t k = 0; k < push.keys.size() && k < pull.keys.size(); ++k) {
      core::KeyShare share;
      share.key = push.keys[k].key;
      if (tick.cluster_rate) {
        share.rate_fraction =
            MyFraction(pull.keys[k], options_.replica_id, tick.rate_per_second,
                       /*concurrency=*/false, options_.shares);
      }
      if (tick.cluster_concurrency) {
        share.concurrency_fraction =
            MyFraction(pull.keys[k], options_.replica_id, tick.max_in_flight,
                       /*concurrency=*/true, options_.shares);
      }
      update.shares.push_back(std::move(share));
    }
    if (tick.has_breaker) {
      auto& seen = seen_outcomes_[tick.name];
      absl::flat_hash_map<std::string, core::OutcomeTotals> now_seen;
      for (const ReplicaOutcomes& other : pull.outcomes) {
        if (other.replica == options_.replica_id) continue;
        auto it = seen.find(other.replica);
        update.remote_outcomes +=
            Delta(other.totals, it == seen.end() ? nullptr : &it->second);
        now_seen[other.replica] = other.totals;
      }
      seen = std::move(now_seen);
      update.breaker = pull.breaker;
      update.mine =
          pull.breaker && pull.breaker->replica == options_.replica_id;
      update.leases_granted = pull.leases_granted;
    }
    updates.push_back(std::move(update));
  }
  engine_->ApplyTick(updates);

  absl::MutexLock stats_lock(&stats_mu_);
  ++stats_.ticks;
  stats_.store_up = true;
  stats_.live_replicas = live;
  stats_.last_tick_duration = took;
  stats_.last_success = start;
  stats_.reports_forwarded += request.forwarded.size();
  stats_.reports_received += reply->forwarded_to_me.size();
  return absl::OkStatus();
}

SyncStats SyncLoop::stats() const {
  absl::MutexLock lock(&stats_mu_);
  return stats_;
}

}  // namespace sluice::cluster
