#ifndef SLUICE_TESTS_TESTING_FAKE_STORE_H_
#define SLUICE_TESTS_TESTING_FAKE_STORE_H_

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/cluster/store.h"

namespace sluice::testing {

// An in-memory cluster store with the same contract as tick.lua, shared by
// every replica of a test. It can fail on demand, before or after applying a
// tick, so store outages are millisecond unit tests. Safe for concurrent use.
class FakeStore final : public cluster::Store {
 public:
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

  absl::StatusOr<cluster::TickReply> Tick(
      const cluster::TickRequest& request) override {
    absl::MutexLock lock(&mu_);
    if (down_) return absl::UnavailableError("fake store is down");
    if (fail_before_ > 0) {
      --fail_before_;
      return absl::UnavailableError("fake store failed the tick");
    }
    const absl::Time now = request.now;
    const std::string& me = request.replica_id;
    for (const cluster::StoredPolicy& seed : request.seed) {
      if (policies_.count(seed.name) || deleted_.count(seed.name)) continue;
      cluster::StoredPolicy p = seed;
      p.version = ++config_version_;
      policies_[p.name] = p;
    }
    members_[me] = now + request.stale_after;
    cluster::TickReply reply;
    for (auto it = members_.begin(); it != members_.end();) {
      if (it->second < now) {
        it = members_.erase(it);
      } else {
        reply.replicas.push_back(it->first);
        ++it;
      }
    }
    for (const cluster::PolicyPush& push : request.policies) {
      cluster::PolicyPull pull;
      for (const core::KeyTick& key : push.keys) {
        auto& entries = demand_[{push.policy, key.key}];
        entries[me] = {key.rate_demand, key.concurrency_demand, now};
        admitted_[{push.policy, key.key, me}] = key.admitted_total;
        std::vector<cluster::ReplicaDemand> live;
        for (auto e = entries.begin(); e != entries.end();) {
          if (e->second.at + request.stale_after < now) {
            e = entries.erase(e);
            continue;
          }
          live.push_back({e->first, e->second.rate, e->second.concurrency});
          ++e;
        }
        pull.keys.push_back(std::move(live));
      }
      if (push.has_breaker) {
        auto& outcomes = outcomes_[push.policy];
        outcomes[me] = {push.outcomes, now};
        for (auto o = outcomes.begin(); o != outcomes.end();) {
          if (o->second.at + request.stale_after < now) {
            o = outcomes.erase(o);
            continue;
          }
          pull.outcomes.push_back({o->first, o->second.totals});
          ++o;
        }
        auto b = breakers_.find(push.policy);
        const uint64_t stored = b == breakers_.end() ? 0 : b->second.generation;
        if (push.breaker.generation > stored) {
          core::BreakerRecord record = push.breaker;
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
          if (l->second.generation != current || l->second.expiry < now) {
            l = leases.erase(l);
            continue;
          }
          if (l->first != me) others += l->second.count;
          ++l;
        }
        const uint32_t cap = push.lease_cap;
        pull.leases_granted =
            std::min(push.leases_wanted, cap > others ? cap - others : 0);
        if (pull.leases_granted > 0) {
          leases[me] = {current, pull.leases_granted, now + push.lease_ttl};
        } else {
          leases.erase(me);
        }
      }
      reply.policies.push_back(std::move(pull));
    }
    for (const core::ForwardedReport& f : request.forwarded) {
      inboxes_[f.issuer].push_back(f);
    }
    auto inbox = inboxes_.find(me);
    if (inbox != inboxes_.end()) {
      reply.forwarded_to_me = std::move(inbox->second);
      inboxes_.erase(inbox);
    }
    if (config_version_ != request.config_seen) {
      cluster::ConfigSnapshot config;
      config.version = config_version_;
      for (const auto& [name, p] : policies_) config.policies.push_back(p);
      for (const auto& [name, o] : overrides_) config.overrides.push_back(o);
      reply.config = std::move(config);
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
    cluster::StoredPolicy p = policy;
    p.version = ++config_version_;
    policies_[p.name] = p;
    deleted_.erase(p.name);
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
    deleted_.insert(name);
    w.config_version = ++config_version_;
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
  // Forgets the whole config, as a Redis restarted without persistence.
  void WipeConfig() {
    absl::MutexLock lock(&mu_);
    policies_.clear();
    overrides_.clear();
    deleted_.clear();
    config_version_ = 0;
  }

 private:
  struct Demand {
    double rate = 0;
    double concurrency = 0;
    absl::Time at;
  };
  struct Outcomes {
    core::OutcomeTotals totals;
    absl::Time at;
  };
  struct Lease {
    uint64_t generation = 0;
    uint32_t count = 0;
    absl::Time expiry;
  };

  mutable absl::Mutex mu_;
  bool down_ = false;
  int fail_before_ = 0;
  int fail_after_ = 0;
  uint64_t applied_ = 0;
  std::map<std::string, absl::Time> members_;
  std::map<std::pair<std::string, std::string>, std::map<std::string, Demand>>
      demand_;
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t>
      admitted_;
  std::map<std::string, std::map<std::string, Outcomes>> outcomes_;
  std::map<std::string, core::BreakerRecord> breakers_;
  std::map<std::string, std::map<std::string, Lease>> leases_;
  uint64_t config_version_ = 0;
  std::map<std::string, cluster::StoredPolicy> policies_;
  std::map<std::string, cluster::StoredOverride> overrides_;
  std::set<std::string> deleted_;
  std::map<std::string, std::vector<core::ForwardedReport>> inboxes_;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_FAKE_STORE_H_
