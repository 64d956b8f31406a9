// SPDX-License-Identifier: Apache-2.0
// The RedisStore on a real Redis Cluster (3 masters, 3 replicas, started by
// this binary): the shared cluster scenarios, key slots against Redis's own,
// how ticks spread over the masters, a slot migration (ASK, then MOVED) and
// a failover under ticks, and what one tick.lua EVALSHA costs Redis.
#include "server/cluster/redis_cluster.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/cluster/redis_store.h"
#include "tests/cluster/cluster_scenarios.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/redis_cluster.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace sluice::cluster {
namespace {

testing::RedisCluster* redis_cluster = nullptr;

INSTANTIATE_TEST_SUITE_P(RedisCluster, ClusterScenarioTest,
                         ::testing::Values("redis-cluster"));

RedisStore::Options StoreOptions(const std::string& prefix) {
  RedisStore::Options o =
      *RedisStore::ParseClusterSeeds(redis_cluster->Seeds());
  o.timeout = absl::Milliseconds(500);
  o.min_backoff = absl::Milliseconds(10);
  o.max_backoff = absl::Milliseconds(40);
  o.key_prefix = prefix;
  return o;
}

// A tick of `policies` policies "<name>0".. with `keys` cluster-scope keys
// each (per_key when there are more than one).
TickRequest Request(const std::string& name, int policies, int keys = 1) {
  TickRequest r;
  r.replica_id = "solo";
  for (int p = 0; p < policies; ++p) {
    PolicyPush push;
    push.policy = name + std::to_string(p);
    push.per_key = keys > 1;
    for (int k = 0; k < keys; ++k) {
      core::KeyTick key;
      key.key = keys > 1 ? absl::StrCat("user-", k) : "";
      key.limit = {100, 0};
      key.demand = {5, 0};
      push.keys.push_back(key);
    }
    r.policies.push_back(std::move(push));
  }
  return r;
}

// One command's figure from INFO commandstats: "calls" or "usec_per_call".
double CommandStat(const testing::RedisServer* node, const std::string& command,
                   const std::string& field) {
  std::istringstream info(node->Command("INFO commandstats"));
  std::string line;
  const std::string prefix = "cmdstat_" + command + ":";
  while (std::getline(info, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    const size_t at = line.find(field + "=");
    if (at != std::string::npos) {
      return std::atof(line.c_str() + at + field.size() + 1);
    }
  }
  return 0;
}

TEST(RedisClusterTest, KeySlotsAreRedisOwn) {
  std::vector<std::string> keys = {
      "foo", "", "{}", "{a}{b}", "a{}b", "}{x}", "sluice:{config}:epoch"};
  for (int i = 0; i < 200; ++i) {
    keys.push_back(absl::StrCat("sluice:{policy-", i, "}:g:user-", i * 7));
    keys.push_back(absl::StrCat("sluice:inbox:replica-", i));
  }
  for (const std::string& key : keys) {
    EXPECT_EQ(KeySlot(key), redis_cluster->SlotOf(key)) << key;
  }
}

TEST(RedisClusterTest, ThirtyPoliciesSpreadOverTheMasters) {
  RedisStore store(StoreOptions("spread:"));
  const std::vector<testing::RedisServer*> masters = redis_cluster->Masters();
  ASSERT_EQ(masters.size(), 3u);
  std::vector<double> before;
  for (auto* m : masters) before.push_back(CommandStat(m, "evalsha", "calls"));
  constexpr int kTicks = 10;
  const TickRequest request = Request("p", 30);
  for (int t = 0; t < kTicks; ++t) {
    absl::StatusOr<TickReply> reply = store.Tick(request);
    ASSERT_TRUE(reply.ok()) << reply.status();
    ASSERT_EQ(reply->policies.size(), 30u);
    for (const PolicyPull& p : reply->policies) {
      ASSERT_EQ(p.grants.size(), 1u);
      EXPECT_TRUE(p.grants[0].granted);
      // New policies: their first stale period (on Redis's real clock here)
      // grants nothing beyond what is applied (tick.lua's recovery window
      // of a new epoch), so the units are 0 or, on a slow run, the limit.
      EXPECT_LE(p.grants[0].units[0], 100);
    }
  }
  // Every policy's keys are on the master of its own slot.
  std::printf(
      "[redis-cluster] master calls (EVALSHA over %d ticks of 30 "
      "policies + 1 config read)\n",
      kTicks);
  double total = 0;
  for (size_t i = 0; i < masters.size(); ++i) {
    const double calls =
        CommandStat(masters[i], "evalsha", "calls") - before[i];
    total += calls;
    std::printf("[redis-cluster]   %-16s %6.0f\n",
                masters[i]->address().c_str(), calls);
    EXPECT_GT(calls, kTicks) << masters[i]->address();
  }
  EXPECT_EQ(total, kTicks * 31);
  const StoreStatus status = store.status();
  EXPECT_NE(status.endpoint.find("redis cluster: 3 masters ("),
            std::string::npos)
      << status.endpoint;
  EXPECT_EQ(status.events.at("slots_refreshed"), 1u)
      << "one slot map, then none while nothing moves";
  EXPECT_EQ(status.events.at("moved"), 0u);
}

TEST(RedisClusterTest, AdminWritesReachTheConfigSlot) {
  RedisStore store(StoreOptions("admin:"));
  ASSERT_TRUE(store.PutPolicy({"a", "blob-a", 0}, 0).ok());
  const int slot = KeySlot("admin:{config}:policies");
  testing::RedisServer* owner = redis_cluster->OwnerOf(slot);
  ASSERT_NE(owner, nullptr);
  EXPECT_EQ(owner->Run({"HGET", "admin:{config}:policies", "a"}),
            std::vector<std::string>{"blob-a"});
  absl::StatusOr<TickReply> reply = store.Tick(Request("q", 1));
  ASSERT_TRUE(reply.ok()) << reply.status();
  ASSERT_TRUE(reply->config.has_value());
  EXPECT_EQ(reply->config->policies.size(), 1u);
}

// Ticks `request` every 20 ms on its own thread until stopped, counting the
// failed ones and the "lost" answers (Redis lost the policy's state).
class Ticker {
 public:
  Ticker(RedisStore* store, TickRequest request,
         absl::Duration every = absl::Milliseconds(20))
      : thread_([this, store, request, every]() mutable {
          while (!stop_) {
            const int index = started_++;
            absl::StatusOr<TickReply> r = store->Tick(request);
            ++ticks_;
            if (!r.ok()) {
              ++failed_;
              std::lock_guard<std::mutex> lock(mu_);
              last_error_ = r.status().ToString();
              failed_starts_.push_back(index);
            } else {
              for (const PolicyPull& p : r->policies) lost_ += p.lost;
            }
            request_epochs(r, &request);
            absl::SleepFor(every);
          }
        }) {}
  ~Ticker() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int ticks() const { return ticks_; }
  int failed() const { return failed_; }
  // Ticks started so far (the last may still be running), and the failed
  // ones among those started as the `n`th or later: a tick that was under
  // way when the test moved on belongs to what came before.
  int started() const { return started_; }
  int failed_from(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int>(std::count_if(failed_starts_.begin(),
                                          failed_starts_.end(),
                                          [n](int i) { return i >= n; }));
  }
  int lost() const { return lost_; }
  std::string last_error() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_error_;
  }

 private:
  // Pushes the epochs seen, as the sync loop does, so a lost state shows.
  static void request_epochs(const absl::StatusOr<TickReply>& r,
                             TickRequest* request) {
    if (!r.ok()) return;
    for (size_t i = 0; i < r->policies.size(); ++i) {
      request->policies[i].epoch_seen = r->policies[i].epoch;
    }
    request->config_epoch_seen = r->config_epoch;
  }

  std::atomic<bool> stop_{false};
  std::atomic<int> ticks_{0}, failed_{0}, lost_{0}, started_{0};
  std::mutex mu_;
  std::string last_error_;
  std::vector<int> failed_starts_;
  std::thread thread_;
};

TEST(RedisClusterTest, FollowsAskThenMovedWhileASlotMigrates) {
  RedisStore store(StoreOptions("migrate:"));
  const TickRequest request = Request("m", 1, 3);
  ASSERT_TRUE(store.Tick(request).ok());
  const int slot = KeySlot("migrate:{m0}:epoch");
  testing::RedisServer* from = redis_cluster->OwnerOf(slot);
  ASSERT_NE(from, nullptr);
  testing::RedisServer* to = nullptr;
  for (auto* m : redis_cluster->Masters()) {
    if (m != from) to = m;
  }
  const std::vector<std::string> epoch_before =
      from->Run({"GET", "migrate:{m0}:epoch"});
  ASSERT_EQ(epoch_before.size(), 1u);

  Ticker ticker(&store, request);
  // 300 ms MIGRATING with the keys still on the owner, then 600 ms with
  // them on the new owner (ASK), then the new owner (MOVED).
  std::map<std::string, std::pair<int, int>> at;  // step -> ticks, failed
  std::map<std::string, int> started_at;          // step -> ticks started
  ASSERT_TRUE(redis_cluster->MoveSlot(
      slot, to, absl::Milliseconds(300), absl::Milliseconds(600),
      [&](const std::string& step) {
        at[step] = {ticker.ticks(), ticker.failed()};
        started_at[step] = ticker.started();
      }));
  absl::SleepFor(absl::Milliseconds(500));
  ticker.Stop();
  const StoreStatus status = store.status();
  const int failed_migrating = at["keys moved"].second - at["migrating"].second;
  // Only ticks that started once the keys had moved: one that was under
  // way while they moved may meet them half moved.
  const int failed_after = ticker.failed_from(started_at["keys moved"]);
  std::printf(
      "[redis-cluster] slot %d %s -> %s: %d ticks; failed: %d before "
      "the move, %d of %d while MIGRATING with the keys on the owner "
      "(%s), %d after the keys moved; %d lost; events moved=%llu "
      "ask=%llu slots_refreshed=%llu\n",
      slot, from->address().c_str(), to->address().c_str(), ticker.ticks(),
      at["migrating"].second, failed_migrating,
      at["keys moved"].first - at["migrating"].first,
      ticker.last_error().substr(0, 60).c_str(), failed_after, ticker.lost(),
      static_cast<unsigned long long>(status.events.at("moved")),
      static_cast<unsigned long long>(status.events.at("ask")),
      static_cast<unsigned long long>(status.events.at("slots_refreshed")));
  EXPECT_EQ(at["migrating"].second, 0);
  // While the keys wait on the migrating owner, a script that touches a key
  // the owner lacks (a new key, or one never written like ":recovering")
  // is refused there; Redis's TRYAGAIN for multi-key commands, in effect.
  // The sync loop then decides from local state. Once the keys moved, ASK
  // and then MOVED are followed without a failed tick.
  EXPECT_EQ(failed_after, 0) << ticker.last_error();
  EXPECT_EQ(ticker.lost(), 0) << "the policy's state must move, not restart";
  EXPECT_GT(status.events.at("ask"), 0u);
  EXPECT_GT(status.events.at("moved"), 0u);
  // The state now lives on the new owner, with the same epoch.
  EXPECT_EQ(to->Run({"GET", "migrate:{m0}:epoch"}), epoch_before);
  EXPECT_TRUE(store.Tick(request).ok());
}

// redis-cli's own reshard, in batches of 10 keys (its default), of a slot
// that holds a policy with 200 keys while it ticks back to back; with
// --cluster-replace, as docs/cluster.md advises. Ticks fail while the slot
// migrates (the script meets keys that moved), none after.
TEST(RedisClusterTest, FollowsARedisCliReshard) {
  testing::RedisServer* from = redis_cluster->Masters()[0];
  const int slot = redis_cluster->FirstSlotOf(from);
  ASSERT_GE(slot, 0);
  // A policy name whose slot is that one.
  std::string name;
  for (int i = 0; name.empty(); ++i) {
    if (KeySlot(absl::StrCat("cli", i, "0")) == slot) {
      name = absl::StrCat("cli", i);
    }
  }
  RedisStore store(StoreOptions("reshard:"));
  TickRequest request = Request(name, 1, 200);
  // Demand above the static share, so that every key keeps a grant entry.
  for (core::KeyTick& key : request.policies[0].keys) key.demand = {80, 0};
  ASSERT_TRUE(store.Tick(request).ok());
  ASSERT_GE(
      std::atoi(from->Command(absl::StrCat("CLUSTER COUNTKEYSINSLOT ", slot))
                    .c_str()),
      200);
  testing::RedisServer* to = redis_cluster->Masters()[1];
  // Back to back ticks: some land between two batches of the reshard.
  Ticker ticker(&store, request, absl::ZeroDuration());
  const int failed_before = ticker.failed();
  const bool resharded =
      redis_cluster->Reshard(from, to, 1, {"--cluster-replace"});
  const int failed_during = ticker.failed() - failed_before;
  const int ticks_during = ticker.ticks();
  absl::SleepFor(absl::Milliseconds(300));
  const int failed_after = ticker.failed() - failed_before - failed_during;
  ticker.Stop();
  std::printf(
      "[redis-cluster] redis-cli reshard of slot %d (policy %s, 200 "
      "keys) %s -> %s: %s; ticks failed %d of %d during, %d after; "
      "%d lost (%s)\n",
      slot, name.c_str(), from->address().c_str(), to->address().c_str(),
      resharded ? "done" : "FAILED", failed_during, ticks_during, failed_after,
      ticker.lost(), ticker.last_error().substr(0, 80).c_str());
  EXPECT_TRUE(resharded);
  EXPECT_EQ(redis_cluster->OwnerOf(slot), to);
  EXPECT_EQ(failed_after, 0) << ticker.last_error();
  EXPECT_TRUE(store.Tick(request).ok());
}

TEST(RedisClusterTest, FollowsAFailover) {
  RedisStore store(StoreOptions("failover:"));
  const TickRequest request = Request("f", 1);
  ASSERT_TRUE(store.Tick(request).ok());
  const int slot = KeySlot("failover:{f0}:epoch");
  testing::RedisServer* owner = redis_cluster->OwnerOf(slot);
  ASSERT_NE(owner, nullptr);
  Ticker ticker(&store, request);
  ASSERT_TRUE(redis_cluster->Failover(owner));
  testing::RedisServer* new_owner = redis_cluster->OwnerOf(slot);
  absl::SleepFor(absl::Milliseconds(500));
  ticker.Stop();
  const StoreStatus status = store.status();
  std::printf(
      "[redis-cluster] failover of %s -> %s: %d ticks, %d failed, %d "
      "lost; events moved=%llu slots_refreshed=%llu\n",
      owner->address().c_str(), new_owner ? new_owner->address().c_str() : "?",
      ticker.ticks(), ticker.failed(), ticker.lost(),
      static_cast<unsigned long long>(status.events.at("moved")),
      static_cast<unsigned long long>(status.events.at("slots_refreshed")));
  ASSERT_NE(new_owner, nullptr);
  EXPECT_NE(new_owner, owner);
  // A manual failover loses nothing: the replica took over in sync.
  EXPECT_EQ(ticker.lost(), 0);
  EXPECT_GT(status.events.at("moved") + status.events.at("slots_refreshed"),
            2u);
  EXPECT_TRUE(store.Tick(request).ok());
  EXPECT_NE(store.status().endpoint.find(new_owner->address()),
            std::string::npos);
}

// What one tick.lua EVALSHA costs Redis with K keys of a per_key policy
// (INFO commandstats usec_per_call on the policy's master), the figure
// docs/cluster.md sizes Redis with.
TEST(RedisClusterTest, MeasuresEvalshaCostPerKey) {
  std::printf("[redis-cluster] tick.lua EVALSHA cost by active keys\n");
  std::printf("[redis-cluster]   %6s %12s %14s\n", "keys", "usec/call",
              "usec/key-tick");
  double first = 0, last = 0;
  for (int keys : {1, 100, 1000}) {
    RedisStore store(StoreOptions(absl::StrCat("cost", keys, ":")));
    TickRequest request = Request("c", 1, keys);
    testing::RedisServer* owner = redis_cluster->OwnerOf(
        KeySlot(absl::StrCat("cost", keys, ":{c0}:epoch")));
    ASSERT_NE(owner, nullptr);
    // Three replicas' entries per key, as a small cluster has.
    for (const char* id : {"a", "b", "c"}) {
      request.replica_id = id;
      ASSERT_TRUE(store.Tick(request).ok());
    }
    owner->Run({"CONFIG", "RESETSTAT"});
    for (int t = 0; t < 20; ++t) {
      request.replica_id = t % 2 == 0 ? "a" : "b";
      ASSERT_TRUE(store.Tick(request).ok());
    }
    const double usec = CommandStat(owner, "evalsha", "usec_per_call");
    std::printf("[redis-cluster]   %6d %12.1f %14.2f\n", keys, usec,
                usec / keys);
    if (keys == 1) first = usec;
    last = usec;
  }
  EXPECT_GT(last, first) << "a tick with 1000 keys costs more than with 1";

  // Each key's hash holds one entry per replica, and every tick reads them
  // all: the cost per key grows with the replicas.
  std::printf("[redis-cluster] tick.lua EVALSHA cost, 100 keys, by replicas\n");
  std::printf("[redis-cluster]   %8s %12s %14s\n", "replicas", "usec/call",
              "usec/key-tick");
  double few = 0, many = 0;
  for (int replicas : {3, 10, 30}) {
    const std::string prefix = absl::StrCat("costr", replicas, ":");
    RedisStore store(StoreOptions(prefix));
    TickRequest request = Request("c", 1, 100);
    request.live_replicas = replicas;
    testing::RedisServer* owner =
        redis_cluster->OwnerOf(KeySlot(prefix + "{c0}:epoch"));
    ASSERT_NE(owner, nullptr);
    for (int r = 0; r < replicas; ++r) {
      request.replica_id = absl::StrCat("r", r);
      ASSERT_TRUE(store.Tick(request).ok());
    }
    owner->Run({"CONFIG", "RESETSTAT"});
    for (int t = 0; t < 20; ++t) {
      request.replica_id = absl::StrCat("r", t % replicas);
      ASSERT_TRUE(store.Tick(request).ok());
    }
    const double usec = CommandStat(owner, "evalsha", "usec_per_call");
    std::printf("[redis-cluster]   %8d %12.1f %14.2f\n", replicas, usec,
                usec / 100);
    if (replicas == 3) few = usec;
    many = usec;
  }
  EXPECT_GT(many, few) << "30 replicas' entries cost more than 3";
}

}  // namespace
}  // namespace sluice::cluster

namespace {

// The Redis Clusters of this binary, started when tests run (not when CTest
// only lists them at build time): one on the real clock for the slot,
// migration and failover tests, and one for the scenarios on their
// simulated clock (the store clock shim preloaded in every node; each
// scenario sets it before every call), with timeouts long enough that the
// clock's jumps fail nothing over.
class RedisClusterEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    ASSERT_TRUE(cluster_.Start()) << cluster_.StartError();
    sluice::cluster::redis_cluster = &cluster_;

    ASSERT_NE(std::string(sluice::testing::kStoreClockShimPath), "")
        << "this build has no sluice_store_clock_shim";
    // The nodes form the cluster on the real clock (the shim uses it while
    // the file does not exist; a clock stopped there stalls the forming),
    // then the file appears whole (renamed into place) and they follow it.
    clock_file_ = dir_.File("clock");
    scenarios_.set_env(
        {absl::StrCat("LD_PRELOAD=", sluice::testing::kStoreClockShimPath),
         absl::StrCat("SLUICE_STORE_CLOCK_FILE=", clock_file_)});
    scenarios_.set_timeouts_ms(int64_t{24} * 3600 * 1000);
    ASSERT_TRUE(scenarios_.Start()) << scenarios_.StartError();
    const std::string next = dir_.File("clock.next");
    const int fd = open(next.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << next;
    const int64_t us =
        absl::ToUnixMicros(sluice::testing::FakeClock::DefaultStart());
    const ssize_t written = pwrite(fd, &us, sizeof(us), 0);
    close(fd);
    ASSERT_EQ(written, static_cast<ssize_t>(sizeof(us)));
    ASSERT_EQ(rename(next.c_str(), clock_file_.c_str()), 0) << clock_file_;
    seeds_ = scenarios_.Seeds();
    sluice::cluster::ClusterScenarioTest::redis_cluster_seeds = &seeds_;
    sluice::cluster::ClusterScenarioTest::redis_clock_file = &clock_file_;
  }
  void TearDown() override {
    for (sluice::testing::RedisServer* node : scenarios_.nodes()) node->Kill();
    for (sluice::testing::RedisServer* node : cluster_.nodes()) node->Kill();
  }

 private:
  sluice::testing::RedisCluster cluster_;
  sluice::testing::TempDir dir_{"cluster_clock"};
  std::string clock_file_;
  sluice::testing::RedisCluster scenarios_;
  std::string seeds_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new RedisClusterEnvironment);
  return RUN_ALL_TESTS();
}
