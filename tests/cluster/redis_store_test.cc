// SPDX-License-Identifier: Apache-2.0
// The cluster scenarios and the Redis store's own failure handling, against
// a real redis-server started by this binary.
#include "server/cluster/redis_store.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "tests/cluster/cluster_scenarios.h"
#include "tests/cluster/membership_cases.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace sluice::cluster {
namespace {

testing::RedisServer* redis = nullptr;

INSTANTIATE_TEST_SUITE_P(Redis, ClusterScenarioTest,
                         ::testing::Values("redis"));

RedisStore::Options StoreOptions(const std::string& prefix) {
  RedisStore::Options o;
  o.host = "127.0.0.1";
  o.port = redis->port();
  o.timeout = absl::Milliseconds(200);
  o.min_backoff = absl::Milliseconds(10);
  o.max_backoff = absl::Milliseconds(40);
  o.key_prefix = prefix;
  return o;
}

TickRequest Request() {
  TickRequest r;
  r.replica_id = "solo";
  PolicyPush p;
  p.policy = "inv";
  core::KeyTick key;
  key.limit = {10, 0};
  key.demand = {5, 0};
  p.keys.push_back(key);
  r.policies.push_back(p);
  return r;
}

int64_t TotalCalls() { return redis->TotalCommandCalls(); }

TEST(RedisStoreTest, ParsesAddresses) {
  EXPECT_EQ(RedisStore::ParseAddress("redis.ns:6380")->port, 6380);
  EXPECT_EQ(RedisStore::ParseAddress("redis.ns")->port, 6379);
  EXPECT_FALSE(RedisStore::ParseAddress(":6379").ok());
  EXPECT_FALSE(RedisStore::ParseAddress("host:http").ok());
  EXPECT_FALSE(RedisStore::ParseAddress("host:70000").ok());
}

TEST(RedisStoreTest, PausedRedisTimesOutAndComesBack) {
  RedisStore store(StoreOptions("pause:"));
  ASSERT_TRUE(store.Tick(Request()).ok());
  redis->Pause();
  const absl::Time start = absl::Now();
  absl::StatusOr<TickReply> reply = store.Tick(Request());
  const absl::Duration took = absl::Now() - start;
  redis->Resume();
  EXPECT_FALSE(reply.ok());
  EXPECT_LT(took, absl::Seconds(1)) << "a paused Redis must cost one timeout";
  // Back within a few attempts once the backoff has passed.
  EXPECT_TRUE(testing::WaitFor([&] { return store.Tick(Request()).ok(); },
                               absl::Milliseconds(400),
                               absl::Milliseconds(20)));
}

// Issue 24: config.lua lists the replicas only when the membership changed
// (join, leave, weight change, expiry noticed by ZREMRANGEBYSCORE) or the
// replica saw another one, with the epoch made new when Redis lost it.
// Expiry runs on Redis's clock: the test waits in real time.
TEST(RedisStoreTest, ConfigScriptBumpsTheMembershipVersionOnEveryChange) {
  RedisStore store(StoreOptions("members:"));
  testing_members::CheckMembershipVersions(
      &store, [](absl::Duration d) { absl::SleepFor(d); },
      [] { redis->Command("FLUSHALL"); });
}

// A tick that changes nothing reads no key in proportion to the replicas:
// with 200 members, the unchanged tick's script costs about what it costs
// with 2.
TEST(RedisStoreTest, AnUnchangedMembershipCostsNoListRead) {
  RedisStore store(StoreOptions("members-cost:"));
  testing_members::MemberClient a(&store, "a", absl::Seconds(30));
  ASSERT_TRUE(a.Tick());
  for (int i = 0; i < 200; ++i) {
    testing_members::MemberClient other(&store, absl::StrCat("m", i),
                                        absl::Seconds(30));
    ASSERT_TRUE(other.Tick());
  }
  ASSERT_TRUE(a.Tick());
  EXPECT_EQ(a.list.size(), 201u);
  EXPECT_EQ(a.last.live_weight, 201u);
  auto calls = [](const std::string& command) {
    const std::map<std::string, int64_t> all = redis->CommandCalls();
    auto it = all.find(command);
    return it == all.end() ? int64_t{0} : it->second;
  };
  const int64_t zrange = calls("zrange"), hmget = calls("hmget");
  ASSERT_TRUE(a.Tick());
  EXPECT_TRUE(a.last.members_unchanged);
  EXPECT_TRUE(a.last.replicas.empty());
  EXPECT_EQ(a.last.live_weight, 201u);
  EXPECT_EQ(calls("zrange"), zrange) << "an unchanged tick read the members";
  EXPECT_EQ(calls("hmget"), hmget) << "an unchanged tick read the weights";
  // The weights' running total heals when the list is read again: a lost
  // total (the field deleted) comes back with the next change.
  redis->Command("HDEL members-cost:{config}:members weight");
  testing_members::MemberClient late(&store, "late", absl::Seconds(30));
  ASSERT_TRUE(late.Tick());
  EXPECT_EQ(late.last.live_weight, 202u);
  ASSERT_TRUE(a.Tick());
  EXPECT_EQ(a.last.live_weight, 202u);
  ASSERT_TRUE(a.Tick());
  EXPECT_TRUE(a.last.members_unchanged);
  EXPECT_EQ(a.last.live_weight, 202u);
}

TEST(RedisStoreTest, ReloadsItsScriptAfterAScriptFlush) {
  RedisStore store(StoreOptions("flush:"));
  ASSERT_TRUE(store.Tick(Request()).ok());
  redis->Command("SCRIPT FLUSH");
  EXPECT_TRUE(store.Tick(Request()).ok());
}

// A Redis that lost its data gets the config back from a replica's copy:
// policies with their versions, tombstones, overrides and the counter.
TEST(RedisStoreTest, RestoreRebuildsALostConfig) {
  RedisStore store(StoreOptions("restore:"));
  ASSERT_TRUE(store.PutPolicy({"a", "blob-a", 0}, 0).ok());
  ASSERT_TRUE(store.PutPolicy({"b", "blob-b", 0}, 0).ok());
  ASSERT_TRUE(store.DeletePolicy("b", 0).ok());
  StoredOverride force;
  force.dependency = "a";
  force.mode = core::BreakerOverride::kForceOpen;
  force.note = "maintenance";
  ASSERT_TRUE(store.SetOverride(force).ok());
  TickRequest request = Request();
  absl::StatusOr<TickReply> before = store.Tick(request);
  ASSERT_TRUE(before.ok()) << before.status();
  ASSERT_TRUE(before->config.has_value());
  const ConfigSnapshot copy = *before->config;
  ASSERT_EQ(copy.deleted.size(), 1u);

  redis->Command("FLUSHALL");
  request.config_seen = copy.version;
  request.config_epoch_seen = before->config_epoch;
  absl::StatusOr<TickReply> lost = store.Tick(request);
  ASSERT_TRUE(lost.ok()) << lost.status();
  EXPECT_TRUE(lost->config_lost);

  request.config_epoch_seen = lost->config_epoch;
  request.config_seen = 0;
  request.restore = copy;
  // The file still names "b": seeding must not bring it back.
  request.seed = {{"b", "blob-b-from-file", 0}};
  absl::StatusOr<TickReply> after = store.Tick(request);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_FALSE(after->config_lost);
  ASSERT_TRUE(after->config.has_value());
  const ConfigSnapshot& rebuilt = *after->config;
  EXPECT_EQ(rebuilt.version, copy.version);
  ASSERT_EQ(rebuilt.policies.size(), 1u);
  EXPECT_EQ(rebuilt.policies[0].name, "a");
  EXPECT_EQ(rebuilt.policies[0].blob, "blob-a");
  EXPECT_EQ(rebuilt.policies[0].version, copy.policies[0].version);
  ASSERT_EQ(rebuilt.deleted.size(), 1u);
  EXPECT_EQ(rebuilt.deleted[0].first, "b");
  ASSERT_EQ(rebuilt.overrides.size(), 1u);
  EXPECT_EQ(rebuilt.overrides[0].mode, core::BreakerOverride::kForceOpen);
  EXPECT_EQ(rebuilt.overrides[0].note, "maintenance");
  // Writes go on above the old versions.
  absl::StatusOr<ConfigWrite> put = store.PutPolicy({"c", "blob-c", 0}, 0);
  ASSERT_TRUE(put.ok());
  EXPECT_GT(put->new_version, copy.version);
}

TEST(RedisStoreTest, CommandsPerTickStayFlatWhenTheRequestRateGrows) {
  testing::FakeClock clock;
  core::Engine::Options eo;
  eo.cluster = true;
  core::Engine engine(&clock, eo);
  core::PolicyConfig p;
  p.name = "flat";
  core::RateLimitConfig rl;
  rl.rate = 1e9;
  rl.burst = 1e9;
  rl.scope = core::Scope::kCluster;
  p.rate_limit = rl;
  core::BreakerConfig b;
  b.consecutive_failures = 1000;
  p.breaker = b;
  engine.PutPolicy(p);
  RedisStore store(StoreOptions("flat:"));
  SyncLoop::Options lo;
  lo.replica_id = "flat-replica";
  SyncLoop loop(&engine, &store, &clock, lo);
  // The first tick also connects and loads the script.
  ASSERT_TRUE(loop.TickOnce().ok());
  auto run = [&](int per_tick) {
    const int64_t before = TotalCalls();
    for (int t = 0; t < 10; ++t) {
      for (int i = 0; i < per_tick; ++i) {
        auto d = engine.Acquire("flat", "", 1);
        engine.Report("flat", "", d->permit_id, core::Outcome::kSuccess,
                      absl::Milliseconds(1));
      }
      clock.Advance(absl::Seconds(1));
      EXPECT_TRUE(loop.TickOnce().ok());
    }
    return TotalCalls() - before;
  };
  const int64_t slow = run(100);
  const int64_t fast = run(1000);
  // One round trip per tick: four membership commands and one EVALSHA, plus
  // the commands the script itself runs, whatever the request rate. The
  // scripts' record of each replica's life and sequence (a stale request is
  // refused) costs a few O(1) commands a tick.
  EXPECT_EQ(slow, fast);
  EXPECT_GT(slow, 0);
  EXPECT_LE(slow / 10, 40) << "commands per tick";
}


// A temp file holding `text` (a password), removed at the end of the test.
class PasswordFile {
 public:
  explicit PasswordFile(const std::string& text) {
    char name[] = "/tmp/redis_password_XXXXXX";
    const int fd = mkstemp(name);
    path_ = name;
    if (fd >= 0) {
      (void)!write(fd, text.data(), text.size());
      close(fd);
    }
  }
  ~PasswordFile() { unlink(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(RedisStoreTest, WritesIntoTheSelectedDatabase) {
  RedisStore::Options o = StoreOptions("db3:");
  o.db = 3;
  RedisStore store(o);
  ASSERT_TRUE(store.Tick(Request()).ok());
  const std::vector<std::string> in3 =
      redis->Query({"EVAL", "redis.call('SELECT', 3) "
                    "return #redis.call('KEYS', 'db3:*')", "0"});
  ASSERT_EQ(in3.size(), 1u);
  EXPECT_GT(std::stoi(in3[0]), 0);
  EXPECT_EQ(redis->Query({"KEYS", "db3:*"}), std::vector<std::string>{});
}

TEST(RedisStoreTest, AnOutOfRangeDatabaseIsRefusedAndNamesTheFlag) {
  RedisStore::Options o = StoreOptions("db99:");
  o.db = 99;
  RedisStore store(o);
  absl::StatusOr<TickReply> reply = store.Tick(Request());
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().message().find("--redis-db"), std::string::npos)
      << reply.status();
}

TEST(RedisStoreTest, AuthenticatesAsAnAclUser) {
  ASSERT_EQ(redis->Query({"ACL", "SETUSER", "sluice", "on", ">pw", "~*",
                          "+@all"}),
            std::vector<std::string>{"OK"});
  PasswordFile right("pw\n"), wrong("nope\n");
  RedisStore::Options o = StoreOptions("acl:");
  o.user = "sluice";
  o.password_file = right.path();
  RedisStore store(o);
  ASSERT_TRUE(store.Tick(Request()).ok());
  EXPECT_EQ(store.status().errors.count("auth"), 0u);

  o.password_file = wrong.path();
  RedisStore refused(o);
  absl::StatusOr<TickReply> reply = refused.Tick(Request());
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().message().find("as user \"sluice\""),
            std::string::npos)
      << reply.status();
  EXPECT_EQ(reply.status().message().find("nope"), std::string::npos);
  EXPECT_EQ(refused.status().errors.at("auth"), 1u);
}

TEST(RedisStoreTest, AMissingPasswordIsAnAuthErrorWithAHint) {
  testing::RedisServer secured;
  secured.set_args({"--requirepass", "pw"});
  secured.set_password("pw");
  ASSERT_TRUE(secured.Start());
  RedisStore::Options o = StoreOptions("noauth:");
  o.port = secured.port();
  RedisStore store(o);
  absl::StatusOr<TickReply> reply = store.Tick(Request());
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().message().find("set --redis-password-file"),
            std::string::npos)
      << reply.status();
  EXPECT_EQ(store.status().errors.at("auth"), 1u);
  EXPECT_EQ(store.status().endpoint, secured.address());
}

// The documented grant works, and a user without a command the tick sends
// (here LPOP, for the inbox) fails the tick as an auth error instead of
// losing forwarded reports quietly.
TEST(RedisStoreTest, AMissingCommandPermissionFailsTheTick) {
  ASSERT_EQ(redis->Query({"ACL", "SETUSER", "granted", "on", ">pw",
                          "~perm:*", "+@all", "-@dangerous", "+role",
                          "+cluster|slots"}),
            std::vector<std::string>{"OK"});
  ASSERT_EQ(redis->Query({"ACL", "SETUSER", "nolpop", "on", ">pw", "~*",
                          "+@all", "-lpop"}),
            std::vector<std::string>{"OK"});
  PasswordFile pw("pw\n");
  RedisStore::Options o = StoreOptions("perm:");
  o.password_file = pw.path();
  o.user = "granted";
  RedisStore granted(o);
  EXPECT_TRUE(granted.Tick(Request()).ok());
  ASSERT_TRUE(granted.PutPolicy({"perm", "blob", 0}, 0).ok());

  o.user = "nolpop";
  RedisStore store(o);
  absl::StatusOr<TickReply> reply = store.Tick(Request());
  ASSERT_FALSE(reply.ok());
  EXPECT_NE(reply.status().message().find("LPOP"), std::string::npos)
      << reply.status();
  EXPECT_EQ(store.status().errors.at("auth"), 1u);
}

// Admin writes are rare; Redis may close their idle connection meanwhile
// (CLIENT KILL, `timeout`, a restart). The next write reconnects instead
// of failing.
TEST(RedisStoreTest, AnAdminWriteSurvivesAClosedIdleConnection) {
  RedisStore store(StoreOptions("idle:"));
  ASSERT_TRUE(store.PutPolicy({"a", "blob-a", 0}, 0).ok());
  redis->Query({"CLIENT", "KILL", "TYPE", "normal"});
  absl::StatusOr<ConfigWrite> put = store.PutPolicy({"a", "blob-b", 0}, 0);
  EXPECT_TRUE(put.ok()) << put.status();
}

TEST(RedisStoreTest, AReplicaAnswersReadOnly) {
  testing::RedisServer replica;
  replica.set_args({"--replicaof", "127.0.0.1 " + std::to_string(redis->port())});
  ASSERT_TRUE(replica.Start());
  RedisStore::Options o = StoreOptions("ro:");
  o.port = replica.port();
  RedisStore store(o);
  absl::StatusOr<TickReply> reply = store.Tick(Request());
  ASSERT_FALSE(reply.ok());
  EXPECT_EQ(store.status().errors.at("readonly"), 1u) << reply.status();
}
}  // namespace
}  // namespace sluice::cluster

namespace {

// The redis-servers of this binary, started when tests run (not when CTest
// only lists them at build time): one on the real clock for the RedisStore
// tests, and one for the scenarios on their simulated clock (the store
// clock shim preloaded; each scenario sets it before every call).
class RedisEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    ASSERT_TRUE(server_.Start()) << server_.StartError();
    sluice::cluster::redis = &server_;

    ASSERT_NE(std::string(sluice::testing::kStoreClockShimPath), "")
        << "this build has no sluice_store_clock_shim";
    clock_file_ = dir_.File("clock");
    const int fd = open(clock_file_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << clock_file_;
    const int64_t us =
        absl::ToUnixMicros(sluice::testing::FakeClock::DefaultStart());
    const ssize_t written = pwrite(fd, &us, sizeof(us), 0);
    close(fd);
    ASSERT_EQ(written, static_cast<ssize_t>(sizeof(us)));
    scenarios_.set_env(
        {absl::StrCat("LD_PRELOAD=", sluice::testing::kStoreClockShimPath),
         absl::StrCat("SLUICE_STORE_CLOCK_FILE=", clock_file_)});
    ASSERT_TRUE(scenarios_.Start()) << scenarios_.StartError();
    const std::vector<std::string> time = scenarios_.Run({"TIME"});
    ASSERT_EQ(time.size(), 2u);
    ASSERT_EQ(time[0], absl::StrCat(us / 1000000))
        << "the scenarios' redis-server does not run on their clock";
    address_ = scenarios_.address();
    sluice::cluster::ClusterScenarioTest::redis_address = &address_;
    sluice::cluster::ClusterScenarioTest::redis_clock_file = &clock_file_;
  }
  void TearDown() override {
    scenarios_.Kill();
    server_.Kill();
  }

 private:
  sluice::testing::RedisServer server_;
  sluice::testing::TempDir dir_{"cluster_redis"};
  std::string clock_file_;
  sluice::testing::RedisServer scenarios_;
  std::string address_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new RedisEnvironment);
  return RUN_ALL_TESTS();
}
