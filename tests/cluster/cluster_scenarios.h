// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_CLUSTER_CLUSTER_SCENARIOS_H_
#define SLUICE_TESTS_CLUSTER_CLUSTER_SCENARIOS_H_

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/cluster/sync_loop.h"
#include "server/core/engine.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fake_store.h"
#include "tests/testing/forwarding_store.h"

namespace sluice::cluster {

using core::BreakerState;
using core::Outcome;
using core::PolicyConfig;
using core::Reason;
using core::Verdict;

// One replica's path to the store, which a test can cut (a partition
// between that replica and Redis). Safe for concurrent use.
class CuttableStore final : public testing::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  void set_cut(bool cut) { cut_ = cut; }

  // The next tick request is held back, not sent (the caller sees a
  // timeout), until Deliver() sends it late: a request delayed in the
  // network or retried after a newer one.
  void HoldNext() { hold_next_ = true; }
  // The next tick is applied, but its reply is lost (a timeout).
  void LoseNextReply() { lose_next_ = true; }
  std::optional<TickRequest> TakeHeld() {
    absl::MutexLock lock(&mu_);
    std::optional<TickRequest> held = std::move(held_);
    held_.reset();
    return held;
  }
  // Sends `request` now; its reply goes nowhere.
  void Deliver(const TickRequest& request) {
    if (before_call_) before_call_();
    inner()->Tick(request).IgnoreError();
  }

  // Called before every call that reaches the store (set before use).
  void set_before_call(std::function<void()> f) { before_call_ = std::move(f); }

  absl::StatusOr<TickReply> Tick(const TickRequest& request) override {
    if (cut_) return absl::UnavailableError("cut off from the store");
    if (before_call_) before_call_();
    if (hold_next_.exchange(false)) {
      absl::MutexLock lock(&mu_);
      held_ = request;
      return absl::DeadlineExceededError("tick request held back");
    }
    absl::StatusOr<TickReply> reply = inner()->Tick(request);
    if (lose_next_.exchange(false)) {
      return absl::DeadlineExceededError("tick reply lost");
    }
    return reply;
  }

 private:
  std::function<void()> before_call_;
  std::atomic<bool> cut_{false};
  std::atomic<bool> hold_next_{false};
  std::atomic<bool> lose_next_{false};
  absl::Mutex mu_;
  std::optional<TickRequest> held_ ABSL_GUARDED_BY(mu_);
};

// One sluiced replica: an engine in cluster mode and its sync loop, sharing
// the test's clock and store. Ticks are driven by hand.
struct Replica {
  Replica(const std::string& id, core::Clock* clock, Store* store)
      : engine(clock, EngineOptions()),
        loop(&engine, store, clock, LoopOptions(id, this)) {}

  static core::Engine::Options EngineOptions() {
    core::Engine::Options o;
    o.cluster = true;
    return o;
  }
  static SyncLoop::Options LoopOptions(const std::string& id, Replica* self) {
    SyncLoop::Options o;
    o.replica_id = id;
    // An admin write reaches the replica within its tick, as through
    // ClusterConfig: the policy set aside in `on_next_config` is installed
    // when the store's config version moves.
    o.on_config = [self](const ConfigSnapshot&) {
      if (self->on_next_config) {
        self->engine.PutPolicy(*self->on_next_config);
        self->on_next_config.reset();
      }
    };
    return o;
  }

  core::Decision Acquire(const std::string& dep) {
    absl::StatusOr<core::Decision> d = engine.Acquire(dep, "", 1);
    EXPECT_TRUE(d.ok()) << d.status();
    return *d;
  }

  core::Engine engine;
  std::optional<PolicyConfig> on_next_config;
  SyncLoop loop;
};

// Runs each scenario against a store backend: "fake" (one FakeStore shared
// by every replica), "redis" (one RedisStore per replica, on a real
// redis-server that the integration binary starts) or "redis-cluster" (the
// same on a real 3-master Redis Cluster).
class ClusterScenarioTest : public ::testing::TestWithParam<std::string> {
 public:
  // Set by the redis binary before its tests run.
  static std::string* redis_address;
  // Set by the redis cluster binary: its --redis-cluster seeds.
  static std::string* redis_cluster_seeds;
  // Set by a binary whose redis-server runs with the store clock shim
  // (tests/testing/store_clock_shim.cc): the file of its clock. Every call
  // to the store then sets Redis's clock to the test's simulated time, so
  // Redis expires keys and windows (the recovery window of a new epoch
  // among them) as the FakeStore does.
  static std::string* redis_clock_file;

 protected:
  void SetUp() override;
  Store* StoreFor(const std::string& replica);
  // Sets Redis's clock to clock_ (with redis_clock_file; no-op otherwise).
  void SyncStoreClock();
  // A replica's path to the store, which syncs Redis's clock first.
  std::unique_ptr<CuttableStore> PathFor(const std::string& replica) {
    auto path = std::make_unique<CuttableStore>(StoreFor(replica));
    path->set_before_call([this] { SyncStoreClock(); });
    return path;
  }
  // Adds `n` replicas, named r<index> by their place in replicas_.
  void AddReplicas(int n) {
    for (int i = 0; i < n; ++i) {
      const std::string id = "r" + std::to_string(replicas_.size());
      paths_.push_back(PathFor(id));
      replicas_.push_back(
          std::make_unique<Replica>(id, &clock_, paths_.back().get()));
    }
  }
  void Restart(int i, const std::string& new_id) {
    replicas_[i].reset();
    paths_[i] = PathFor(new_id);
    replicas_[i] =
        std::make_unique<Replica>(new_id, &clock_, paths_[i].get());
  }
  // A graceful stop (SIGTERM): the final tick gives everything back.
  void Stop(int i) {
    replicas_[i]->loop.Leave().IgnoreError();
    replicas_[i].reset();
  }
  // The process dies without its final tick (OOM kill, lost node).
  void Kill(int i) { replicas_[i].reset(); }
  bool Running(int i) const { return replicas_[i] != nullptr; }
  void Install(const PolicyConfig& p) {
    for (auto& r : replicas_) {
      if (r) r->engine.PutPolicy(p);
    }
  }
  void TickAll() {
    for (auto& r : replicas_) {
      if (r) r->loop.TickOnce().IgnoreError();
    }
  }
  // Ticks every replica until each holds its grant: a new policy's first
  // stale period (3 s) grants nothing (its new epoch's recovery window), a
  // new replica starts with nothing, and a grant that shrinks is freed for
  // the others only when its holder confirms it at its next tick. A second
  // passes between rounds so that buckets refill at their granted rate.
  void Converge() {
    for (int i = 0; i < 6; ++i) {
      TickAll();
      clock_.Advance(absl::Seconds(1));
    }
  }

  // Ticks every replica once a second until each applies its static share
  // of per_key policy `dep`: a replica takes static shares only
  // SyncLoop::static_share_wait() after its first tick, once the store's
  // grants that did not count it have ended.
  void SettleStaticShares(const std::string& dep) {
    for (int s = 0; s < 10; ++s) {
      bool all = true;
      for (auto& r : replicas_) {
        if (r && r->engine.StaticUnits(dep) == core::Units{}) all = false;
      }
      if (all) return;
      TickAll();
      clock_.Advance(absl::Seconds(1));
    }
    ADD_FAILURE() << "no static shares of " << dep << " after 10 s";
  }

  // Simulated time in 1 ms steps, for the scenarios with many replicas
  // (the same model as bench/cluster_transients): each running replica
  // ticks once a second at its own offset, and a gateway's traffic of
  // `total` calls/s is split evenly over the running replicas that are
  // loaded. ms_ counts the ms since the first Pod().
  //
  // Adds a replica with `policy` as a new pod under `id`, started as
  // Server::StartCluster does: one tick before serving, then one a second
  // from the next ms on. Returns its index.
  int Pod(const std::string& id, const PolicyConfig& policy) {
    paths_.push_back(PathFor(id));
    replicas_.push_back(
        std::make_unique<Replica>(id, &clock_, paths_.back().get()));
    replicas_.back()->engine.PutPolicy(policy);
    replicas_.back()->loop.TickOnce().IgnoreError();
    tick_at_.resize(replicas_.size(), 0);
    tick_at_.back() = static_cast<int>((ms_ + 1) % 1000);
    loaded_.resize(replicas_.size(), true);
    admitted_by_.resize(replicas_.size(), 0);
    return static_cast<int>(replicas_.size()) - 1;
  }
  int RunningCount() const {
    int n = 0;
    for (const auto& r : replicas_) n += r != nullptr;
    return n;
  }
  // Runs `seconds` of simulated time with `total` calls/s on `dep`, calling
  // `at(ms)` (ms since the start of this span) before each ms. Returns the
  // cluster's admitted count of each second.
  std::vector<int64_t> RunSplitLoad(
      const std::string& dep, int seconds, int64_t total,
      const std::function<void(int64_t ms)>& at = nullptr) {
    std::vector<int64_t> per_second(seconds, 0);
    for (int64_t ms = 0; ms < seconds * 1000; ++ms) {
      if (at) at(ms);
      clock_.Advance(absl::Milliseconds(1));
      ++ms_;
      for (size_t r = 0; r < replicas_.size(); ++r) {
        if (replicas_[r] && ms_ % 1000 == tick_at_[r]) {
          replicas_[r]->loop.TickOnce().IgnoreError();
        }
      }
      int64_t ways = 0;
      for (size_t r = 0; r < replicas_.size(); ++r) {
        ways += replicas_[r] && loaded_[r];
      }
      ways = std::max<int64_t>(1, ways);
      const int64_t calls =
          ms_ * total / (1000 * ways) - (ms_ - 1) * total / (1000 * ways);
      for (size_t r = 0; r < replicas_.size(); ++r) {
        if (!replicas_[r] || !loaded_[r]) continue;
        for (int64_t c = 0; c < calls; ++c) {
          absl::StatusOr<core::Decision> d =
              replicas_[r]->engine.Acquire(dep, "", 1);
          if (d.ok() && d->verdict == Verdict::kAllow) {
            ++per_second[ms / 1000];
            ++admitted_by_[r];
          }
        }
      }
    }
    return per_second;
  }

  Replica& R(int i) { return *replicas_[i]; }
  // The rate of `dep`'s key `key` that running replicas apply now (their
  // grant or static share; with rate == burst, the units). A replica that
  // has not seen the key yet is not counted: touch it first.
  double RateInForce(const std::string& dep, const std::string& key) {
    double sum = 0;
    for (auto& rep : replicas_) {
      if (!rep) continue;
      absl::StatusOr<core::LivePolicyStatus> s = rep->engine.Inspect(dep, key);
      if (s.ok() && s->gates) sum += s->gates->effective_rate;
    }
    return sum;
  }
  // The store loses every grant entry of `policy`'s key "" (Redis evicts
  // the key, or comes back from an older snapshot), its epoch kept.
  void EvictGrants(const std::string& policy);
  // The store loses its membership (the config itself kept).
  void WipeMembership();
  // The store loses everything of `policy` and the config, membership
  // included (a Redis restarted without persistence, or flushed).
  void WipeStore(const std::string& policy);
  // Deletes `key` (after the test's key prefix) from the real Redis.
  void RedisDel(const std::string& key);
  // An admin write of `p` (the store's config version moves): each running
  // replica installs it within the tick that brings the new version.
  void AdminWrite(const PolicyConfig& p) {
    for (auto& r : replicas_) {
      if (r) r->on_next_config = p;
    }
    StoredPolicy stored;
    stored.name = p.name;
    stored.blob = "v" + std::to_string(++admin_writes_);
    SyncStoreClock();
    ASSERT_TRUE(paths_.front()->PutPolicy(stored, 0).ok());
  }
  // Units of cluster resource `r` of `dep` that running replicas apply now
  // from their grants (the grants in force).
  int64_t InForce(const std::string& dep, int r = 0) {
    int64_t sum = 0;
    for (auto& rep : replicas_) {
      if (!rep) continue;
      absl::StatusOr<core::LivePolicyStatus> s = rep->engine.Inspect(dep);
      if (s.ok() && s->gates && s->gates->has_grant) {
        sum += s->gates->granted[r];
      }
    }
    return sum;
  }
  // Cuts replica `i` off from the store, or lets it through again.
  void Cut(int i, bool cut) { paths_[i]->set_cut(cut); }
  // `n` calls on replica `r`, each reported as a failure.
  void FailCalls(int r, const std::string& dep, int n) {
    for (int i = 0; i < n; ++i) {
      const core::Decision d = R(r).Acquire(dep);
      R(r).engine.Report(dep, "", d.permit_id, Outcome::kFailure,
                         absl::Milliseconds(5));
    }
  }
  // Two replicas share "pay" (WithBreaker); replica 0 trips it and refuses
  // a caller, who waits. Then a tick each second, up to the end of the
  // open time, with no tick at that end.
  void TripWithACallerWaitingOnReplica0() {
    AddReplicas(2);
    Install(WithBreaker(ClusterBucket("pay", 1000, 1000)));
    Converge();
    FailCalls(0, "pay", 3);
    EXPECT_EQ(R(0).Acquire("pay").reason, Reason::kCircuitOpen);
    for (int s = 0; s < 5; ++s) {  // open 5 s
      TickAll();
      clock_.Advance(absl::Seconds(1));
    }
  }

  static PolicyConfig ClusterBucket(const std::string& name, double rate,
                                    double burst) {
    PolicyConfig p;
    p.name = name;
    core::RateLimitConfig rl;
    rl.rate = rate;
    rl.burst = burst;
    rl.scope = core::Scope::kCluster;
    p.rate_limit = rl;
    return p;
  }
  static PolicyConfig ClusterWindow(const std::string& name, double rate) {
    PolicyConfig p;
    p.name = name;
    core::RateLimitConfig rl;
    rl.algorithm = core::RateAlgorithm::kSlidingWindow;
    rl.rate = rate;
    rl.scope = core::Scope::kCluster;
    p.rate_limit = rl;
    return p;
  }
  // Calls admitted by the running replicas but `skip`, each flat out
  // (`calls` tries each), over `ms` of 1 ms steps.
  int64_t FlatOut(const std::string& dep, int skip, int64_t ms, int calls) {
    int64_t admitted = 0;
    for (int64_t t = 0; t < ms; ++t) {
      clock_.Advance(absl::Milliseconds(1));
      for (size_t r = 0; r < replicas_.size(); ++r) {
        if (!replicas_[r] || static_cast<int>(r) == skip) continue;
        for (int c = 0; c < calls; ++c) {
          admitted += replicas_[r]->Acquire(dep).verdict == Verdict::kAllow;
        }
      }
    }
    return admitted;
  }
  // The warm-up of the window scenarios: four replicas with a 3/s cluster
  // window `dep`; after the new policy's first stale period (which grants
  // nothing), r0 alone calls it for three seconds, ticking with the
  // others, so that it holds the three units. Then it takes 10 calls at once: returns how
  // many it admitted (3 when it holds the whole window).
  int FillWindowOnFirstOfFour(const std::string& dep) {
    AddReplicas(4);
    Install(ClusterWindow(dep, 3));
    for (int s = 0; s < 4; ++s) {
      TickAll();
      clock_.Advance(absl::Seconds(1));
    }
    for (int s = 0; s < 3; ++s) {
      for (int i = 0; i < 10; ++i) R(0).Acquire(dep);
      TickAll();
      clock_.Advance(absl::Seconds(1));
    }
    int admitted = 0;
    for (int i = 0; i < 10; ++i) {
      admitted += R(0).Acquire(dep).verdict == Verdict::kAllow;
    }
    return admitted;
  }
  // The next 900 ms: the running replicas tick at once and then every
  // 300 ms (more often than a real replica), each flat out between ticks.
  // Returns the calls they admitted.
  int64_t WindowAdmitsWithinASecond(const std::string& dep) {
    int64_t admitted = 0;
    for (int step = 0; step < 3; ++step) {
      TickAll();
      admitted += FlatOut(dep, -1, 300, 2);
    }
    return admitted;
  }
  // An adaptive in-flight limit from 5 (no cluster-scope gate: the limit
  // is each replica's own; only its warm state goes through the store).
  static PolicyConfig Adaptive(const std::string& name, uint64_t digest = 7) {
    PolicyConfig p;
    p.name = name;
    p.digest = digest;
    core::AdaptiveConcurrencyConfig a;
    a.min_limit = 1;
    a.max_limit = 100;
    a.initial_limit = 5;
    p.adaptive_concurrency = a;
    return p;
  }
  // `windows` windows on replica `r` in which the adaptive limit of `dep` is
  // reached and every call takes 5 ms: each steps the limit up. Returns the
  // limit reached.
  uint32_t LearnLimit(int r, const std::string& dep, int windows) {
    for (int w = 0; w < windows; ++w) {
      for (int round = 0; round < 4; ++round) {
        std::vector<core::PermitId> ids;
        while (true) {
          const core::Decision d = R(r).Acquire(dep);
          if (d.verdict != Verdict::kAllow) break;
          ids.push_back(d.permit_id);
        }
        for (const core::PermitId& id : ids) {
          R(r).engine.Report(dep, "", id, Outcome::kSuccess,
                             absl::Milliseconds(5));
        }
      }
      clock_.Advance(absl::Seconds(1));
    }
    // The last window is judged when it is swept (the housekeeping thread
    // in a server; a tick sweeps too), as before the limit is read.
    R(r).engine.Sweep();
    return AdaptiveLimitOf(r, dep);
  }
  uint32_t AdaptiveLimitOf(int r, const std::string& dep) {
    absl::StatusOr<core::LivePolicyStatus> s = R(r).engine.Inspect(dep);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok() || !s->gates->adaptive_limit) return 0;
    return s->gates->adaptive_limit->limit;
  }

  static PolicyConfig WithBreaker(PolicyConfig p) {
    core::BreakerConfig b;
    b.consecutive_failures = 3;
    b.open_duration = absl::Seconds(5);
    b.half_open_probes = 1;
    b.successes_to_close = 1;
    p.breaker = b;
    return p;
  }

  testing::FakeClock clock_;
  testing::FakeStore fake_{&clock_};
  std::vector<std::unique_ptr<Store>> redis_stores_;
  std::vector<std::unique_ptr<CuttableStore>> paths_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  int admin_writes_ = 0;
  // For Pod() and RunSplitLoad().
  int64_t ms_ = 0;
  std::vector<int> tick_at_;
  std::vector<bool> loaded_;
  std::vector<int64_t> admitted_by_;
};

// The fake store's own failure injection, beside the shared scenarios.
class FakeStoreTest : public ClusterScenarioTest {
 protected:
  testing::FakeStore& store_ = fake_;
};

}  // namespace sluice::cluster

#endif  // SLUICE_TESTS_CLUSTER_CLUSTER_SCENARIOS_H_
