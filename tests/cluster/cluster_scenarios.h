#ifndef SLUICE_TESTS_CLUSTER_CLUSTER_SCENARIOS_H_
#define SLUICE_TESTS_CLUSTER_CLUSTER_SCENARIOS_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/cluster/sync_loop.h"
#include "server/core/engine.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fake_store.h"

namespace sluice::cluster {

using core::BreakerState;
using core::Outcome;
using core::PolicyConfig;
using core::Reason;
using core::Verdict;

// One replica's path to the store, which a test can cut (a partition
// between that replica and Redis). Safe for concurrent use.
class CuttableStore final : public Store {
 public:
  explicit CuttableStore(Store* store) : store_(store) {}
  void set_cut(bool cut) { cut_ = cut; }

  absl::StatusOr<TickReply> Tick(const TickRequest& request) override {
    if (cut_) return absl::UnavailableError("cut off from the store");
    return store_->Tick(request);
  }
  absl::StatusOr<ConfigWrite> PutPolicy(const StoredPolicy& policy,
                                        uint64_t expected_version) override {
    return store_->PutPolicy(policy, expected_version);
  }
  absl::StatusOr<ConfigWrite> DeletePolicy(const std::string& name,
                                           uint64_t expected_version) override {
    return store_->DeletePolicy(name, expected_version);
  }
  absl::StatusOr<ConfigWrite> SetOverride(
      const StoredOverride& override) override {
    return store_->SetOverride(override);
  }
  std::string Describe() const override { return store_->Describe(); }

 private:
  Store* const store_;
  std::atomic<bool> cut_{false};
};

// One sluiced replica: an engine in cluster mode and its sync loop, sharing
// the test's clock and store. Ticks are driven by hand.
struct Replica {
  Replica(const std::string& id, core::Clock* clock, Store* store)
      : engine(clock, EngineOptions()),
        loop(&engine, store, clock, LoopOptions(id)) {}

  static core::Engine::Options EngineOptions() {
    core::Engine::Options o;
    o.cluster = true;
    return o;
  }
  static SyncLoop::Options LoopOptions(const std::string& id) {
    SyncLoop::Options o;
    o.replica_id = id;
    return o;
  }

  core::Decision Acquire(const std::string& dep) {
    absl::StatusOr<core::Decision> d = engine.Acquire(dep, "", 1);
    EXPECT_TRUE(d.ok()) << d.status();
    return *d;
  }

  core::Engine engine;
  SyncLoop loop;
};

// Runs each scenario against a store backend: "fake" (one FakeStore shared
// by every replica) or "redis" (one RedisStore per replica, on a real
// redis-server that the integration binary starts).
class ClusterScenarioTest : public ::testing::TestWithParam<std::string> {
 public:
  // Set by the redis binary before its tests run.
  static std::string* redis_address;

 protected:
  void SetUp() override;
  Store* StoreFor(const std::string& replica);
  void AddReplicas(int n) {
    for (int i = 0; i < n; ++i) {
      const std::string id = "r" + std::to_string(i);
      paths_.push_back(std::make_unique<CuttableStore>(StoreFor(id)));
      replicas_.push_back(
          std::make_unique<Replica>(id, &clock_, paths_.back().get()));
    }
  }
  void Restart(int i, const std::string& new_id) {
    replicas_[i].reset();
    paths_[i] = std::make_unique<CuttableStore>(StoreFor(new_id));
    replicas_[i] =
        std::make_unique<Replica>(new_id, &clock_, paths_[i].get());
  }
  void Install(const PolicyConfig& p) {
    for (auto& r : replicas_) r->engine.PutPolicy(p);
  }
  void TickAll() {
    for (auto& r : replicas_) r->loop.TickOnce().IgnoreError();
  }
  // Ticks every replica until each holds its grant: a new replica starts
  // with nothing, and a grant that shrinks is freed for the others only when
  // its holder confirms it at its next tick. A second passes between rounds
  // so that buckets refill at their granted rate.
  void Converge() {
    for (int i = 0; i < 3; ++i) {
      TickAll();
      clock_.Advance(absl::Seconds(1));
    }
  }
  Replica& R(int i) { return *replicas_[i]; }
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
};

// The fake store's own failure injection, beside the shared scenarios.
class FakeStoreTest : public ClusterScenarioTest {
 protected:
  testing::FakeStore& store_ = fake_;
};

}  // namespace sluice::cluster

#endif  // SLUICE_TESTS_CLUSTER_CLUSTER_SCENARIOS_H_
