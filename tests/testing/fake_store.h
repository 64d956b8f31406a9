// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_FAKE_STORE_H_
#define SLUICE_TESTS_TESTING_FAKE_STORE_H_

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "server/cluster/store.h"
#include "server/core/clock.h"

namespace sluice::testing {

// An in-memory cluster store with the same contract as tick.lua and
// config.lua, shared by every replica of a test. Its grant arithmetic and
// tick.lua's answer the same golden cases
// (tests/cluster/golden/grant_cases.txt, run by grant_golden_test). Its clock is the store's
// own (Redis TIME). It can fail on demand, before or after applying a tick,
// and lose all its data, so store outages are millisecond unit tests. Safe
// for concurrent use.
class FakeStore final : public cluster::Store {
 public:
  // `clock` (the store's TIME) must outlive the store.
  explicit FakeStore(core::Clock* clock) : clock_(clock) {}

  // RedisStore::Options::stale_after: how old the config's epoch must be
  // before a policy an admin write creates gets its epoch at once.
  void set_stale_after(absl::Duration stale) {
    absl::MutexLock lock(&mu_);
    stale_after_ = stale;
  }

  // The next `n` ticks fail without touching the state.
  void FailNextTicks(int n) {
    absl::MutexLock lock(&mu_);
    fail_before_ = n;
  }
  // The next `n` ticks are applied, but the caller sees them fail (a reply
  // lost to a timeout).
  void LoseNextReplies(int n) {
    absl::MutexLock lock(&mu_);
    fail_after_ = n;
  }
  // While down, every tick fails.
  void SetDown(bool down) {
    absl::MutexLock lock(&mu_);
    down_ = down;
  }
  uint64_t ticks_applied() const {
    absl::MutexLock lock(&mu_);
    return applied_;
  }
  // What the store recorded as admitted by `replica` for `policy`/`key`.
  uint64_t Admitted(const std::string& policy, const std::string& replica,
                    const std::string& key = "") const {
    absl::MutexLock lock(&mu_);
    auto it = admitted_.find({policy, key, replica});
    return it == admitted_.end() ? 0 : it->second;
  }
  std::optional<core::BreakerRecord> Breaker(const std::string& policy) const {
    absl::MutexLock lock(&mu_);
    auto it = breakers_.find(policy);
    if (it == breakers_.end()) return std::nullopt;
    return it->second;
  }
  // Units of resource `r` that live grant entries of `policy`/`key` hold
  // (grant, previous grant and usage), summed over replicas.
  int64_t Held(const std::string& policy, const std::string& key,
               int r) const {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    int64_t sum = 0;
    auto it = grants_.find({policy, key});
    if (it == grants_.end()) return 0;
    for (const auto& [replica, e] : it->second) sum += HeldBy(e, r, now);
    return sum;
  }
  // Forgets everything, as a Redis restarted without persistence.
  void WipeAll() {
    absl::MutexLock lock(&mu_);
    members_.clear();
    members_epoch_.clear();
    members_version_ = 0;
    members_weight_ = 0;
    lives_.clear();
    grants_.clear();
    admitted_.clear();
    outcomes_.clear();
    breakers_.clear();
    leases_.clear();
    epochs_.clear();
    recovering_until_.clear();
    least_.clear();
    warm_.clear();
    policies_.clear();
    overrides_.clear();
    deleted_.clear();
    config_version_ = 0;
    config_epoch_.clear();
    inboxes_.clear();
  }
  // Forgets every replica's grant entry of `policy`/`key`, as Redis evicting
  // the key, or restored from a snapshot taken before they were written.
  void EvictGrants(const std::string& policy, const std::string& key) {
    absl::MutexLock lock(&mu_);
    grants_.erase({policy, key});
  }
  // Forgets the membership alone (its keys evicted, or restored from an
  // older snapshot). The membership's epoch and version stay, as in Redis
  // when the <prefix>:replicas and :lives keys go without :members.
  void WipeMembership() {
    absl::MutexLock lock(&mu_);
    members_.clear();
  }
  // Forgets the membership's epoch and version alone (config.lua's
  // <prefix>:members key evicted): the next tick starts a new epoch.
  void WipeMembershipVersion() {
    absl::MutexLock lock(&mu_);
    members_epoch_.clear();
    members_version_ = 0;
  }
  // Ticks answered with the membership list (listed) and without it.
  uint64_t membership_listed() const {
    absl::MutexLock lock(&mu_);
    return membership_listed_;
  }
  uint64_t membership_kept() const {
    absl::MutexLock lock(&mu_);
    return membership_kept_;
  }
  // Forgets the whole config, as a Redis restarted without persistence.
  void WipeConfig() {
    absl::MutexLock lock(&mu_);
    policies_.clear();
    overrides_.clear();
    deleted_.clear();
    config_version_ = 0;
    config_epoch_.clear();
  }

  absl::StatusOr<cluster::TickReply> Tick(
      const cluster::TickRequest& request) override {
    absl::MutexLock lock(&mu_);
    if (down_) return absl::UnavailableError("fake store is down");
    if (fail_before_ > 0) {
      --fail_before_;
      return absl::UnavailableError("fake store failed the tick");
    }
    const absl::Time now = clock_->Now();
    const std::string& me = request.replica_id;
    // A request older than one already applied for the same process life is
    // ignored as a whole (config.lua and tick.lua refuse it alike).
    if (Stale(request, now)) {
      return absl::AbortedError("stale tick request: a newer one was applied");
    }
    // A leave of another life of this replica (the process restarted under
    // the same name meanwhile) gives back nothing of the new one's.
    const bool other_life = OtherLife(request, now);
    cluster::TickReply reply;
    reply.store_now = absl::FromUnixMillis(absl::ToUnixMillis(now));
    if (request.restore) Restore(*request.restore);

    // config.lua read: membership, epoch, seeds, config.
    Membership(request, now, other_life, &reply);
    if (config_epoch_.empty()) {
      config_epoch_ = NewEpoch(now);
      config_epoch_at_ = now;
    }
    reply.config_epoch = config_epoch_;
    reply.config_lost = !request.config_epoch_seen.empty() &&
                        request.config_epoch_seen != config_epoch_;
    for (const cluster::StoredPolicy& seed : request.seed) {
      if (policies_.count(seed.name) || deleted_.count(seed.name)) continue;
      cluster::StoredPolicy p = seed;
      p.version = ++config_version_;
      policies_[p.name] = p;
    }
    if (config_version_ != request.config_seen) {
      cluster::ConfigSnapshot config;
      config.version = config_version_;
      for (const auto& [name, p] : policies_) config.policies.push_back(p);
      for (const auto& [name, o] : overrides_) config.overrides.push_back(o);
      for (const auto& [name, v] : deleted_) config.deleted.emplace_back(name, v);
      reply.config = std::move(config);
    }

    for (const cluster::PolicyPush& push : request.policies) {
      reply.policies.push_back(TickPolicy(request, push, now, other_life));
    }
    for (const core::ForwardedReport& f : request.forwarded) {
      auto& inbox = inboxes_[f.issuer];
      inbox.push_back(f);
      if (inbox.size() > static_cast<size_t>(cluster::kMaxInbox)) {
        inbox.erase(inbox.begin());
        ++reply.inbox_dropped;
      }
    }
    auto inbox = inboxes_.find(me);
    if (inbox != inboxes_.end()) {
      reply.forwarded_to_me = std::move(inbox->second);
      inboxes_.erase(inbox);
    }
    ++applied_;
    if (fail_after_ > 0) {
      --fail_after_;
      return absl::DeadlineExceededError("fake store lost the reply");
    }
    return reply;
  }

  std::string Describe() const override { return "fake store"; }

  // The shared config, as config.lua keeps it.
  absl::StatusOr<cluster::ConfigWrite> PutPolicy(
      const cluster::StoredPolicy& policy, uint64_t expected_version) override {
    absl::MutexLock lock(&mu_);
    if (down_) return absl::UnavailableError("fake store is down");
    auto it = policies_.find(policy.name);
    const uint64_t stored = it == policies_.end() ? 0 : it->second.version;
    if (expected_version != 0 && stored != expected_version) {
      return absl::AbortedError("expected version mismatch");
    }
    cluster::ConfigWrite w;
    w.old_version = stored;
    if (it != policies_.end() && it->second.blob == policy.blob) {
      w.new_version = stored;
      w.config_version = config_version_;
      return w;
    }
    // config.lua's "fresh" answer: a name neither stored nor deleted, the
    // config's epoch at least a stale period old. RedisStore then creates
    // the policy's epoch (NX: one that exists stays) without a recovery
    // window.
    const absl::Time now = clock_->Now();
    const bool fresh = it == policies_.end() && !deleted_.count(policy.name) &&
                       !config_epoch_.empty() &&
                       now - config_epoch_at_ >= stale_after_;
    cluster::StoredPolicy p = policy;
    p.version = ++config_version_;
    policies_[p.name] = p;
    deleted_.erase(p.name);
    if (fresh) {
      std::string& epoch = epochs_[p.name];
      if (epoch.empty()) epoch = NewEpoch(now);
    }
    w.new_version = p.version;
    w.config_version = config_version_;
    return w;
  }
  absl::StatusOr<cluster::ConfigWrite> DeletePolicy(
      const std::string& name, uint64_t expected_version) override {
    absl::MutexLock lock(&mu_);
    if (down_) return absl::UnavailableError("fake store is down");
    auto it = policies_.find(name);
    if (it == policies_.end()) return absl::NotFoundError("no such policy");
    if (expected_version != 0 && it->second.version != expected_version) {
      return absl::AbortedError("expected version mismatch");
    }
    cluster::ConfigWrite w;
    w.old_version = it->second.version;
    policies_.erase(it);
    overrides_.erase(name);
    w.config_version = ++config_version_;
    deleted_[name] = config_version_;
    return w;
  }
  absl::StatusOr<cluster::ConfigWrite> SetOverride(
      const cluster::StoredOverride& override) override {
    absl::MutexLock lock(&mu_);
    if (down_) return absl::UnavailableError("fake store is down");
    if (policies_.count(override.dependency) == 0) {
      return absl::NotFoundError("no such policy");
    }
    if (override.mode == core::BreakerOverride::kAuto) {
      overrides_.erase(override.dependency);
    } else {
      overrides_[override.dependency] = override;
    }
    cluster::ConfigWrite w;
    w.config_version = ++config_version_;
    return w;
  }
 private:
  struct Member {
    absl::Time expiry;
    uint64_t incarnation = 0;
    uint64_t sequence = 0;
    uint32_t weight = 1;
  };
  // tick.lua's per-policy record of each replica's life and last sequence.
  struct Life {
    uint64_t incarnation = 0;
    uint64_t sequence = 0;
    absl::Time until;
    // When this life first ticked the policy (tick.lua's `since`).
    absl::Time since;
  };

  // Whether the membership or any pushed policy already applied a newer
  // request of the same life.
  bool Stale(const cluster::TickRequest& request, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto m = members_.find(request.replica_id);
    if (m != members_.end() && m->second.expiry >= now &&
        m->second.incarnation == request.incarnation &&
        m->second.sequence > request.sequence) {
      return true;
    }
    for (const cluster::PolicyPush& push : request.policies) {
      auto p = lives_.find(push.policy);
      if (p == lives_.end()) continue;
      auto l = p->second.find(request.replica_id);
      if (l != p->second.end() && l->second.until >= now &&
          l->second.incarnation == request.incarnation &&
          l->second.sequence > request.sequence) {
        return true;
      }
    }
    return false;
  }
  // config.lua's membership part: expiry noticed, this replica's join,
  // refresh or leave, the version bumped once when any of it changed the
  // membership, and the list (with the weights summed again) only when it
  // differs from the one the request saw.
  void Membership(const cluster::TickRequest& request, absl::Time now,
                  bool other_life, cluster::TickReply* reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string& me = request.replica_id;
    bool changed = false;
    if (members_epoch_.empty()) {
      members_epoch_ = NewEpoch(now);
      members_version_ = 0;
      changed = true;
    }
    for (auto it = members_.begin(); it != members_.end();) {
      if (it->second.expiry < now) {
        it = members_.erase(it);
        changed = true;
      } else {
        ++it;
      }
    }
    if (request.leaving) {
      if (!other_life && members_.erase(me) > 0) changed = true;
    } else {
      const uint32_t weight = std::max<uint32_t>(1, request.weight);
      auto m = members_.find(me);
      if (m == members_.end() || m->second.incarnation != request.incarnation ||
          m->second.weight != weight) {
        changed = true;
      }
      members_[me] = {now + request.stale_after, request.incarnation,
                      request.sequence, weight};
    }
    if (changed) ++members_version_;
    reply->members_epoch = members_epoch_;
    reply->members_version = members_version_;
    reply->members_unchanged =
        !changed && request.members_epoch_seen == members_epoch_ &&
        request.members_seen == members_version_;
    if (!reply->members_unchanged) {
      members_weight_ = 0;
      for (const auto& [id, m] : members_) {
        reply->replicas.push_back(id);
        members_weight_ += m.weight;
      }
    }
    reply->live_weight = members_weight_;
    ++(reply->members_unchanged ? membership_kept_ : membership_listed_);
  }

  // A leave whose replica id is live under another life.
  bool OtherLife(const cluster::TickRequest& request, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!request.leaving) return false;
    auto m = members_.find(request.replica_id);
    return m != members_.end() && m->second.expiry >= now &&
           m->second.incarnation != request.incarnation;
  }

  struct GrantEntry {
    core::Units grant{};
    // Live (a competitor with a demand) until then.
    absl::Time expiry;
    core::Units hold{};
    absl::Time hold_until;
    core::Units usage{};
    // Grant and usage may be in use until then (KeyTick::usage_left).
    absl::Time usage_until;
    // The process life that wrote it.
    uint64_t incarnation = 0;
    std::array<double, core::kClusterResources> demand{};
  };
  struct Outcomes {
    core::OutcomeTotals totals;
    absl::Time at;
  };
  struct Lease {
    uint64_t generation = 0;
    uint32_t count = 0;
    absl::Time expiry;
    absl::Time alive_until;
  };

  // What an entry holds of resource `r` now (a live one also its static
  // share `each`).
  static int64_t HeldBy(const GrantEntry& e, int r, absl::Time now,
                        int64_t each = 0) {
    int64_t held = 0;
    if (e.expiry >= now) held = std::max({e.grant[r], e.usage[r], each});
    if (e.hold_until >= now) held = std::max(held, e.hold[r]);
    if (e.usage_until >= now) held = std::max({held, e.grant[r], e.usage[r]});
    return held;
  }
  // The field an entry of another life of a replica is kept under.
  static bool EarlierLife(const std::string& field) {
    return absl::EndsWith(field, absl::string_view("\0prev", 5));
  }
  static absl::Time LastOf(const GrantEntry& e) {
    return std::max({e.expiry, e.hold_until, e.usage_until});
  }
  // A demand as tick.lua stores it: 4 significant digits, which is what the
  // other replicas' splits see.
  static double StoredDemand(double demand) {
    double stored = 0;
    return absl::SimpleAtod(absl::StrFormat("%.4g", demand), &stored) ? stored
                                                                     : 0;
  }
  static std::string NewEpoch(absl::Time now) {
    static uint64_t serial = 0;
    return absl::StrCat(absl::ToUnixMicros(now), ".", ++serial);
  }

  // tick.lua's allocate(): max-min fair, then whole units by largest
  // remainder, ties by name in an order that turns every 10 s.
  static std::vector<int64_t> Allocate(int64_t total,
                                       const std::vector<std::string>& names,
                                       const std::vector<double>& demand,
                                       absl::Time now) {
    const size_t n = names.size();
    std::vector<int64_t> units(n, 0);
    if (n == 0 || total <= 0) return units;
    std::vector<size_t> order(n);
    for (size_t j = 0; j < n; ++j) order[j] = j;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      if (demand[a] != demand[b]) return demand[a] < demand[b];
      return names[a] < names[b];
    });
    std::vector<double> share(n, 0);
    double left = static_cast<double>(total);
    size_t remaining = n;
    for (size_t j : order) {
      const double give = std::min(demand[j] * 1.05, left / remaining);
      share[j] = give;
      left -= give;
      --remaining;
    }
    int64_t used = 0;
    for (size_t j = 0; j < n; ++j) {
      share[j] += left / n;
      units[j] = static_cast<int64_t>(std::floor(share[j] + 1e-9));
      used += units[j];
    }
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return names[a] < names[b]; });
    const int64_t turn = absl::ToUnixMillis(now) / 10000;
    std::vector<int64_t> rank(n);
    for (size_t pos = 0; pos < n; ++pos) {
      rank[order[pos]] = (static_cast<int64_t>(pos) + turn) % n;
    }
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const double ra = share[a] - units[a], rb = share[b] - units[b];
      if (ra != rb) return ra > rb;
      return rank[a] < rank[b];
    });
    const int64_t extra =
        std::min<int64_t>(n, std::max<int64_t>(0, total - used));
    for (int64_t k = 0; k < extra; ++k) ++units[order[k]];
    return units;
  }

  void Restore(const cluster::ConfigSnapshot& config)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const cluster::StoredPolicy& p : config.policies) {
      if (policies_.count(p.name) || deleted_.count(p.name)) continue;
      policies_[p.name] = p;
    }
    for (const auto& [name, v] : config.deleted) {
      if (!policies_.count(name)) deleted_.emplace(name, v);
    }
    for (const cluster::StoredOverride& o : config.overrides) {
      if (policies_.count(o.dependency)) overrides_.emplace(o.dependency, o);
    }
    config_version_ = std::max(config_version_, config.version);
  }

  // tick.lua's warm section: the entries stored before this tick and
  // younger than key_ttl; this replica's own stored only once it learned
  // something.
  void TickWarm(const cluster::TickRequest& request,
                const cluster::PolicyPush& push, absl::Time now,
                cluster::PolicyPull* pull) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto& entries = warm_[push.policy];
    for (auto w = entries.begin(); w != entries.end();) {
      if (w->second.updated + request.key_ttl < now) {
        w = entries.erase(w);
        continue;
      }
      pull->warm.push_back(w->second);
      ++w;
    }
    const bool learned = (push.adaptive.steady_limit > 0 &&
                          push.adaptive.baseline > absl::ZeroDuration()) ||
                         push.baseline.windows > 0;
    if (!learned) return;
    cluster::ReplicaWarm& mine = entries[request.replica_id];
    mine.replica = request.replica_id;
    mine.digest = push.digest;
    // Redis keeps whole microseconds and milliseconds.
    mine.adaptive.steady_limit = push.adaptive.steady_limit;
    mine.adaptive.baseline =
        absl::Microseconds(absl::ToInt64Microseconds(push.adaptive.baseline));
    mine.baseline = push.baseline;
    mine.updated = absl::FromUnixMillis(absl::ToUnixMillis(now));
  }

  cluster::PolicyPull TickPolicy(const cluster::TickRequest& request,
                                 const cluster::PolicyPush& push,
                                 absl::Time now, bool other_life)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string& me = request.replica_id;
    bool settled = false;
    {
      auto& lives = lives_[push.policy];
      auto l = lives.find(me);
      if (l != lives.end() && l->second.until >= now &&
          l->second.incarnation != request.incarnation && request.leaving) {
        other_life = true;
      }
      absl::Time since = now;
      if (l != lives.end() && l->second.until >= now &&
          l->second.incarnation == request.incarnation) {
        since = l->second.since;
      }
      if (!other_life) {
        lives[me] = {request.incarnation, request.sequence,
                     now + request.key_ttl, since};
      }
      settled = now - since >= request.stale_after / 2;
    }
    const absl::Duration stale = request.stale_after;
    const int64_t live = std::max<uint32_t>(1, request.live_replicas);
    cluster::PolicyPull pull;
    std::string& epoch = epochs_[push.policy];
    if (epoch.empty()) {
      epoch = NewEpoch(now);
      // tick.lua: every new epoch opens the recovery window (the policy's
      // state may have been lost, whoever notices first).
      recovering_until_[push.policy] = now + stale;
    }
    pull.epoch = epoch;
    pull.lost = !push.epoch_seen.empty() && push.epoch_seen != epoch;
    // tick.lua's :recovering key, set with PX stale: Redis keeps a key
    // until its expiry time included, so the window's last millisecond is
    // still in it.
    auto rec = recovering_until_.find(push.policy);
    bool recovering = rec != recovering_until_.end() && now <= rec->second;

    // tick.lua's <prefix>:least: the smallest live count sent within the
    // last stale period, which per_key static shares are reserved with.
    int64_t least = live;
    if (push.per_key) {
      Least& q = least_[push.policy];
      // tick.lua's key expires a stale period (+1 ms) after its last write.
      if (q.written + stale + absl::Milliseconds(1) < now) q = Least{};
      if (q.held > 0 && q.held_until < now) {
        q.held = q.pending;
        q.held_until = q.pending_until;
        q.pending = 0;
        if (q.held > 0 && q.held_until < now) q.held = 0;
      }
      if (!settled) {
        // A life ticking the policy for less than half a stale period
        // leaves the record alone.
        if (q.held > 0) least = q.held;
      } else {
        if (q.held == 0 || live <= q.held) {
          q.held = live;
          q.held_until = now + stale;
          q.pending = 0;
        } else if (q.pending == 0 || live <= q.pending) {
          q.pending = live;
          q.pending_until = now + stale;
        } else {
          q.pending_until = now + stale;
        }
        q.written = now;
        least = q.held;
      }
    }

    for (const core::KeyTick& key : push.keys) {
      auto& entries = grants_[{push.policy, key.key}];
      core::Units each{};
      if (push.per_key) {
        for (int r = 0; r < core::kClusterResources; ++r) {
          each[r] = key.limit[r] / least;
        }
      }
      // tick.lua's uexp: units taken under a grant stay in use this much
      // longer than the grant.
      absl::Duration keep = absl::ZeroDuration();
      for (int r = 0; r < core::kClusterResources; ++r) {
        if (key.limit[r] > 0) keep = std::max(keep, key.usage_left[r]);
      }
      absl::Time usage_until = keep > absl::ZeroDuration()
                                   ? now + stale + keep
                                   : absl::InfinitePast();
      if (request.leaving) {
        usage_until = key.usage[0] > 0 || key.usage[1] > 0
                          ? now + keep
                          : absl::InfinitePast();
      }
      // An entry of another life of this replica keeps holding, as
      // another replica's would, under its own name.
      const std::string prev = me + std::string(1, '\0') + "prev";
      auto mine = entries.find(me);
      if (mine != entries.end() &&
          mine->second.incarnation != request.incarnation &&
          !request.leaving) {
        entries[prev] = mine->second;
        entries.erase(me);
      }
      core::Units held{};
      std::array<std::vector<std::string>, core::kClusterResources> names;
      std::array<std::vector<double>, core::kClusterResources> wants;
      int64_t others = 0;
      for (auto e = entries.begin(); e != entries.end();) {
        if (LastOf(e->second) < now) {
          e = entries.erase(e);
          continue;
        }
        if (e->first != me) {
          const bool alive = e->second.expiry >= now;
          others += alive;
          for (int r = 0; r < core::kClusterResources; ++r) {
            held[r] += HeldBy(e->second, r, now, each[r]);
            // tick.lua: an earlier life's entry holds, but takes no part
            // in the split (its replica competes under its own name).
            if (alive && !EarlierLife(e->first)) {
              names[r].push_back(e->first);
              wants[r].push_back(e->second.demand[r]);
            }
          }
        }
        ++e;
      }
      // tick.lua: a replica that applies a grant always has its entry; one
      // that is missing means lost data, and a recovery window.
      auto own = entries.find(me);
      const bool in_force = key.applied_left > absl::ZeroDuration() &&
                            key.applied_left != absl::InfiniteDuration() &&
                            (key.applied[core::kRateUnits] > 0 ||
                             key.applied[core::kSlotUnits] > 0);
      if (in_force && !request.leaving &&
          (own == entries.end() ||
           own->second.incarnation != request.incarnation)) {
        auto& until = recovering_until_[push.policy];
        if (until < now) {
          until = now + stale;
          pull.lost = true;
        }
        recovering = true;
      }
      const int64_t cold = std::max<int64_t>(0, live - others - 1);
      cluster::StoreGrant grant;
      if (request.leaving) {
        // The grant goes back; the usage stays held while it may be in use.
        for (const std::string& field : {me, prev}) {
          auto own = entries.find(field);
          if (own == entries.end() ||
              own->second.incarnation != request.incarnation) {
            continue;
          }
          if (usage_until > now) {
            GrantEntry left;
            left.expiry = absl::InfinitePast();
            left.hold_until = absl::InfinitePast();
            left.usage = key.usage;
            left.usage_until = usage_until;
            left.incarnation = request.incarnation;
            own->second = left;
          } else {
            entries.erase(own);
          }
        }
        grant.granted = false;
      } else {
        bool back_to_static = push.per_key;
        for (int r = 0; r < core::kClusterResources; ++r) {
          const int64_t limit = key.limit[r];
          const int64_t pool = limit - cold * each[r];
          const int64_t avail = pool - held[r];
          names[r].push_back(me);
          wants[r].push_back(key.demand[r]);
          const std::vector<int64_t> split =
              Allocate(pool, names[r], wants[r], now);
          int64_t units = std::max<int64_t>(0, std::min(split.back(), avail));
          if (recovering) units = std::min(units, key.applied[r]);
          grant.units[r] = units;
          if (limit > 0) {
            const int64_t stat = limit / (live + 1);
            if (key.demand[r] * 1.05 > stat || key.usage[r] > stat ||
                avail < each[r]) {
              back_to_static = false;
            }
          }
        }
        if (back_to_static) {
          // Not live, but what it applies stays held until it ends.
          GrantEntry e;
          e.expiry = absl::InfinitePast();
          e.hold = key.applied;
          e.hold_until = now + std::min(key.applied_left, stale);
          e.usage_until = absl::InfinitePast();
          e.incarnation = request.incarnation;
          entries[me] = e;
          grant.granted = false;
          grant.units = {};
        } else {
          GrantEntry e;
          e.grant = grant.units;
          e.expiry = now + stale;
          e.hold = key.applied;
          e.hold_until = now + std::min(key.applied_left, stale);
          e.usage = key.usage;
          e.usage_until = usage_until;
          e.incarnation = request.incarnation;
          // tick.lua stores demand with 4 significant digits ("%.4g").
          for (int r = 0; r < core::kClusterResources; ++r) {
            e.demand[r] = StoredDemand(key.demand[r]);
          }
          entries[me] = e;
        }
      }
      if (!push.per_key) admitted_[{push.policy, key.key, me}] = key.admitted_total;
      pull.grants.push_back(grant);
    }

    if (push.has_warm) TickWarm(request, push, now, &pull);
    if (!push.has_breaker) return pull;
    auto& outcomes = outcomes_[push.policy];
    if (request.leaving) {
      if (!other_life) outcomes.erase(me);
    } else {
      outcomes[me] = {push.outcomes, now};
    }
    for (auto o = outcomes.begin(); o != outcomes.end();) {
      if (o->second.at + stale < now) {
        o = outcomes.erase(o);
        continue;
      }
      pull.outcomes.push_back({o->first, o->second.totals});
      ++o;
    }
    // Compare-and-set on the generation; a lost record is rebuilt from the
    // first replica that pushes.
    auto b = breakers_.find(push.policy);
    bool store = false;
    if (b == breakers_.end()) {
      store = !request.leaving;
    } else if (push.publish && push.breaker.generation != push.breaker.base &&
               b->second.generation == push.breaker.base) {
      store = true;
    }
    if (store) {
      core::BreakerRecord record = push.breaker;
      record.generation = std::max(
          record.generation,
          (b == breakers_.end() ? 0 : b->second.generation) + 1);
      record.base = 0;
      record.replica = me;
      // The store keeps millisecond times, as Redis does.
      record.open_until =
          record.open_until == absl::InfinitePast()
              ? absl::InfinitePast()
              : absl::FromUnixMillis(absl::ToUnixMillis(record.open_until));
      breakers_[push.policy] = record;
    }
    b = breakers_.find(push.policy);
    if (b != breakers_.end()) pull.breaker = b->second;
    const uint64_t current = b == breakers_.end() ? 0 : b->second.generation;
    auto& leases = leases_[push.policy];
    uint32_t others = 0;
    for (auto l = leases.begin(); l != leases.end();) {
      if (l->second.generation != current || l->second.expiry < now ||
          l->second.alive_until < now) {
        l = leases.erase(l);
        continue;
      }
      if (l->first != me) others += l->second.count;
      ++l;
    }
    const uint32_t cap = push.lease_cap;
    pull.leases_granted =
        request.leaving
            ? 0
            : std::min(push.leases_wanted, cap > others ? cap - others : 0);
    if (pull.leases_granted > 0) {
      leases[me] = {current, pull.leases_granted, now + push.lease_ttl,
                    now + stale};
    } else if (!other_life) {
      leases.erase(me);
    }
    return pull;
  }

  core::Clock* const clock_;
  mutable absl::Mutex mu_;
  bool down_ = false;
  int fail_before_ = 0;
  int fail_after_ = 0;
  uint64_t applied_ = 0;
  std::map<std::string, Member> members_;
  // config.lua's <prefix>:members hash: the membership's epoch, version
  // and the weights summed when the list was last read.
  std::string members_epoch_;
  uint64_t members_version_ = 0;
  uint32_t members_weight_ = 0;
  // Ticks answered with the membership list, and without it.
  uint64_t membership_listed_ = 0;
  uint64_t membership_kept_ = 0;
  std::map<std::string, std::map<std::string, Life>> lives_;
  std::map<std::pair<std::string, std::string>,
           std::map<std::string, GrantEntry>>
      grants_;
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t>
      admitted_;
  std::map<std::string, std::map<std::string, Outcomes>> outcomes_;
  std::map<std::string, core::BreakerRecord> breakers_;
  std::map<std::string, std::map<std::string, Lease>> leases_;
  std::map<std::string, std::string> epochs_;
  std::map<std::string, absl::Time> recovering_until_;
  // tick.lua's <prefix>:least per policy ("least until pending
  // pending_until"), and when it was last written (its key's expiry).
  struct Least {
    int64_t held = 0;
    absl::Time held_until = absl::InfinitePast();
    int64_t pending = 0;
    absl::Time pending_until = absl::InfinitePast();
    absl::Time written = absl::InfinitePast();
  };
  std::map<std::string, Least> least_;
  std::map<std::string, std::map<std::string, cluster::ReplicaWarm>> warm_;
  uint64_t config_version_ = 0;
  std::string config_epoch_;
  absl::Time config_epoch_at_;
  absl::Duration stale_after_ = absl::Seconds(3);
  std::map<std::string, cluster::StoredPolicy> policies_;
  std::map<std::string, cluster::StoredOverride> overrides_;
  std::map<std::string, uint64_t> deleted_;
  std::map<std::string, std::vector<core::ForwardedReport>> inboxes_;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_FAKE_STORE_H_
