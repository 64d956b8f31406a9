// SPDX-License-Identifier: Apache-2.0
// The shared operator config (policies and overrides) across replicas, on
// the FakeStore: seeding from the policies file, admin writes with
// compare-and-set, deletes that stick, overrides, and a store that loses its
// config.
#include "server/cluster/cluster_config.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/cluster/sync_loop.h"
#include "server/core/engine.h"
#include "server/policy/policy_file.h"
#include "server/policy/policy_store.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fake_store.h"

namespace sluice::cluster {
namespace {

std::vector<v1::Policy> Parse(const std::string& yaml) {
  auto policies = policy::ParsePolicies(yaml, "test.yaml");
  EXPECT_TRUE(policies.ok()) << policies.status();
  return *policies;
}

// One replica: engine, policy store, shared config and sync loop.
struct Replica {
  Replica(const std::string& id, core::Clock* clock, Store* store,
          const std::string& file)
      : engine(clock, EngineOptions()),
        policies(&engine),
        config(store, &policies, &engine, ConfigOptions()),
        loop(&engine, store, clock, LoopOptions(id, &config)) {
    const std::vector<v1::Policy> from_file = Parse(file);
    EXPECT_TRUE(policies.ReplaceAll(from_file).ok());
    loop.SetSeed(*ClusterConfig::ToStored(from_file));
  }
  static core::Engine::Options EngineOptions() {
    core::Engine::Options o;
    o.cluster = true;
    return o;
  }
  static ClusterConfig::Options ConfigOptions() {
    ClusterConfig::Options o;
    o.apply_timeout = absl::ZeroDuration();  // the test ticks by hand
    return o;
  }
  static SyncLoop::Options LoopOptions(const std::string& id,
                                       ClusterConfig* config) {
    SyncLoop::Options o;
    o.replica_id = id;
    o.on_config = [config](const ConfigSnapshot& s) { config->Apply(s); };
    return o;
  }
  uint64_t Version(const std::string& name) {
    absl::StatusOr<v1::Policy> p = policies.Get(name);
    return p.ok() ? p->version() : 0;
  }
  double Rate(const std::string& name) {
    absl::StatusOr<v1::Policy> p = policies.Get(name);
    return p.ok() ? p->rate_limit().rate() : -1;
  }
  core::Decision Acquire(const std::string& dep) {
    return *engine.Acquire(dep, "", 1);
  }

  core::Engine engine;
  policy::PolicyStore policies;
  ClusterConfig config;
  SyncLoop loop;
};

constexpr char kFileA[] = R"(policies:
  - name: inventory
    rate_limit: { rate: 100 }
    breaker: { consecutive_failures: 3 }
    fallback: { strategy: STATIC, payload: degraded, on: [CIRCUIT_OPEN] }
  - name: search
    rate_limit: { rate: 10 }
)";
// Another replica's file disagrees on inventory and adds payments.
constexpr char kFileB[] = R"(policies:
  - name: inventory
    rate_limit: { rate: 7 }
  - name: payments
    rate_limit: { rate: 5 }
)";

class ClusterConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = std::make_unique<Replica>("a", &clock_, &store_, kFileA);
    b_ = std::make_unique<Replica>("b", &clock_, &store_, kFileB);
    TickBoth();
    TickBoth();
  }
  void TickBoth() {
    clock_.Advance(absl::Milliseconds(100));
    ASSERT_TRUE(a_->loop.TickOnce().ok());
    ASSERT_TRUE(b_->loop.TickOnce().ok());
  }
  static v1::Policy Policy(const std::string& name, double rate) {
    v1::Policy p;
    p.set_name(name);
    p.mutable_rate_limit()->set_rate(rate);
    return p;
  }

  testing::FakeClock clock_;
  testing::FakeStore store_{&clock_};
  std::unique_ptr<Replica> a_, b_;
};

TEST_F(ClusterConfigTest, FilesSeedOnlyWhatTheClusterDoesNotHave) {
  // The first replica's inventory won; payments came from the second file.
  for (Replica* r : {a_.get(), b_.get()}) {
    EXPECT_DOUBLE_EQ(r->Rate("inventory"), 100);
    EXPECT_DOUBLE_EQ(r->Rate("search"), 10);
    EXPECT_DOUBLE_EQ(r->Rate("payments"), 5);
  }
  EXPECT_EQ(a_->Version("payments"), b_->Version("payments"));
  EXPECT_GT(a_->Version("payments"), 0u);
}

TEST_F(ClusterConfigTest, PutOnOneIsAppliedByTheOtherOnItsNextTick) {
  const uint64_t v = a_->Version("search");
  absl::StatusOr<policy::PolicyChange> put =
      a_->config.Put(Policy("search", 42), v);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->old_version, v);
  EXPECT_GT(put->new_version, v);
  EXPECT_DOUBLE_EQ(b_->Rate("search"), 10);
  TickBoth();
  EXPECT_DOUBLE_EQ(b_->Rate("search"), 42);
  EXPECT_EQ(b_->Version("search"), put->new_version);
  EXPECT_EQ(a_->Version("search"), put->new_version);

  // Compare-and-set: B still holding the old version is refused.
  absl::StatusOr<policy::PolicyChange> stale =
      b_->config.Put(Policy("search", 43), v);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kAborted);
  // An invalid policy never reaches the store.
  absl::StatusOr<policy::PolicyChange> bad =
      a_->config.Put(Policy("search", -1), 0);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  TickBoth();
  EXPECT_DOUBLE_EQ(b_->Rate("search"), 42);
}

TEST_F(ClusterConfigTest, LiveStateSurvivesAnEditFromAnotherReplica) {
  // B spends search's bucket (10 tokens), then A raises the rate.
  for (int i = 0; i < 10; ++i) b_->Acquire("search");
  EXPECT_EQ(b_->Acquire("search").reason, core::Reason::kRateLimited);
  ASSERT_TRUE(a_->config.Put(Policy("search", 11), 0).ok());
  TickBoth();
  EXPECT_DOUBLE_EQ(b_->Rate("search"), 11);
  // The bucket kept its level (100 ms of refill at the old 10/s before the
  // edit arrived), not a fresh 11.
  absl::StatusOr<core::LivePolicyStatus> status = b_->engine.Inspect("search");
  ASSERT_TRUE(status.ok());
  EXPECT_NEAR(status->gates->tokens_available, 1.0, 1e-6);
}

TEST_F(ClusterConfigTest, DeleteStaysDeletedAlthoughAFileSeedsIt) {
  ASSERT_TRUE(a_->config.Delete("payments", 0).ok());
  TickBoth();
  // B's file still lists payments and B seeds again (a file reload).
  b_->loop.SetSeed(*ClusterConfig::ToStored(Parse(kFileB)));
  TickBoth();
  TickBoth();
  EXPECT_EQ(a_->Version("payments"), 0u);
  EXPECT_EQ(b_->Version("payments"), 0u);
  EXPECT_EQ(b_->Acquire("payments").reason,
            core::Reason::kUnknownDependency);
  EXPECT_EQ(a_->config.Delete("payments", 0).status().code(),
            absl::StatusCode::kNotFound);
  // Put back by an operator, it is there again.
  ASSERT_TRUE(a_->config.Put(Policy("payments", 5), 0).ok());
  TickBoth();
  EXPECT_DOUBLE_EQ(b_->Rate("payments"), 5);
}

TEST_F(ClusterConfigTest, OverridesReachEveryReplicaAndAutoClearsThem) {
  ASSERT_TRUE(a_->config
                  .SetOverride("inventory", core::BreakerOverride::kForceOpen,
                               "INC-7")
                  .ok());
  TickBoth();
  for (Replica* r : {a_.get(), b_.get()}) {
    const core::Decision d = r->Acquire("inventory");
    EXPECT_EQ(d.verdict, core::Verdict::kDegrade);
    EXPECT_EQ(d.breaker_state, core::BreakerState::kForcedOpen);
  }
  EXPECT_EQ(a_->config.SetOverride("search", core::BreakerOverride::kForceOpen,
                                   "")
                .code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(
      b_->config.SetOverride("inventory", core::BreakerOverride::kAuto, "").ok());
  TickBoth();
  for (Replica* r : {a_.get(), b_.get()}) {
    EXPECT_EQ(r->Acquire("inventory").verdict, core::Verdict::kAllow);
  }
}

TEST_F(ClusterConfigTest, AStoreThatLostItsConfigIsRebuiltFromMemory) {
  ASSERT_TRUE(a_->config.Put(Policy("search", 42), 0).ok());
  ASSERT_TRUE(a_->config.Delete("payments", 0).ok());
  ASSERT_TRUE(a_->config
                  .SetOverride("inventory", core::BreakerOverride::kForceOpen,
                               "maintenance")
                  .ok());
  TickBoth();
  const uint64_t search_version = a_->Version("search");
  store_.WipeConfig();
  TickBoth();  // both see the store's config epoch change
  TickBoth();  // and rebuild it from what they applied
  TickBoth();
  for (Replica* r : {a_.get(), b_.get()}) {
    // The operator's edit, delete and override survive; the policies files
    // (which still name "payments" and say 10 for "search") do not win.
    EXPECT_DOUBLE_EQ(r->Rate("search"), 42);
    EXPECT_EQ(r->Version("search"), search_version);
    EXPECT_EQ(r->Version("payments"), 0u);
    EXPECT_EQ(r->Acquire("inventory").reason, core::Reason::kCircuitOpen);
  }
  EXPECT_EQ(a_->loop.stats().store_resets, 1u);
  // New writes continue above the old versions.
  absl::StatusOr<policy::PolicyChange> put =
      b_->config.Put(Policy("search", 43), 0);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_GT(put->new_version, search_version);
}

}  // namespace
}  // namespace sluice::cluster
