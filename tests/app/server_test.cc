// SPDX-License-Identifier: Apache-2.0
// app::Server in process: the whole server on a fake clock, its cluster
// store in memory, talked to over in-process channels. Standalone and
// cluster mode (two servers sharing one FakeStore, their sync ticks driven
// by the test). No sleeps: time moves only when the test says so.

#include "server/app/server.h"

#include <google/protobuf/text_format.h>
#include <grpcpp/grpcpp.h>

#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "server/app/options.h"
#include "sluice/v1/admin.grpc.pb.h"
#include "sluice/v1/decision.grpc.pb.h"
#include "tests/app/in_process_server.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fake_store.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_certs.h"

namespace sluice::app {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

v1::Policy P(const std::string& text) {
  v1::Policy p;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &p)) << text;
  return p;
}

// A started server and stubs on its in-process channels.
class Running {
 public:
  Running(ServerOptions options, Server::Dependencies deps)
      : server_(std::move(options), std::move(deps)) {
    status_ = server_.BuildAndStart();
    if (!status_.ok()) return;
    decisions_ = v1::DecisionService::NewStub(server_.InProcessChannel());
    health_ = grpc::health::v1::Health::NewStub(server_.InProcessChannel());
    admin_ = v1::AdminService::NewStub(server_.AdminInProcessChannel());
  }

  const absl::Status& status() const { return status_; }
  Server& server() { return server_; }

  v1::AcquireResponse Acquire(const std::string& dependency) {
    v1::AcquireRequest request;
    request.set_dependency(dependency);
    v1::AcquireResponse response;
    grpc::ClientContext context;
    const grpc::Status s = decisions_->Acquire(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response;
  }
  grpc::Status Report(const std::string& dependency,
                      const std::string& permit_id, v1::Outcome outcome) {
    v1::ReportResultRequest request;
    request.set_dependency(dependency);
    request.set_permit_id(permit_id);
    request.set_outcome(outcome);
    request.mutable_latency()->set_nanos(5000000);
    v1::ReportResultResponse response;
    grpc::ClientContext context;
    return decisions_->ReportResult(&context, request, &response);
  }
  grpc::health::v1::HealthCheckResponse::ServingStatus Health(
      const std::string& service) {
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    grpc::ClientContext context;
    const grpc::Status s = health_->Check(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response.status();
  }
  // The version now in force, or 0 after logging the error.
  uint64_t Put(const v1::Policy& policy) {
    v1::PutPolicyRequest request;
    *request.mutable_policy() = policy;
    v1::PutPolicyResponse response;
    grpc::ClientContext context;
    const grpc::Status s = admin_->PutPolicy(&context, request, &response);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return response.version();
  }
  grpc::Status GetPolicy(const std::string& name, v1::Policy* out) {
    v1::GetPolicyRequest request;
    request.set_name(name);
    grpc::ClientContext context;
    return admin_->GetPolicy(&context, request, out);
  }
  v1::DependencyState State(const std::string& dependency) {
    v1::GetStateRequest request;
    request.set_dependency(dependency);
    v1::DependencyState state;
    grpc::ClientContext context;
    const grpc::Status s = admin_->GetState(&context, request, &state);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return state;
  }

 private:
  Server server_;
  absl::Status status_;
  std::unique_ptr<v1::DecisionService::Stub> decisions_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
};

class StandaloneServerTest : public ::testing::Test {
 protected:
  std::unique_ptr<Running> Start(
      ServerOptions options = testing::LoopbackServerOptions()) {
    Server::Dependencies deps;
    deps.clock = &clock_;
    deps.metrics_listener = false;
    auto running = std::make_unique<Running>(std::move(options), deps);
    EXPECT_TRUE(running->status().ok()) << running->status();
    return running;
  }

  testing::FakeClock clock_;
};

TEST_F(StandaloneServerTest, ServesHealthAndPicksFreePorts) {
  std::unique_ptr<Running> r = Start();
  ASSERT_TRUE(r->status().ok());
  EXPECT_EQ(r->Health(""), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(r->Health("sluice.v1.DecisionService"),
            grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_GT(r->server().port(), 0);
  EXPECT_GT(r->server().admin_port(), 0);
  EXPECT_EQ(r->server().metrics_port(), 0);  // no listener asked for
  EXPECT_THAT(r->server().SyncNow().message(), HasSubstr("standalone"));
}

TEST_F(StandaloneServerTest, AnAdminUpsertDecidesTheNextAcquire) {
  ServerOptions options = testing::LoopbackServerOptions();
  options.unknown_dependency = core::UnknownDependencyAction::kReject;
  std::unique_ptr<Running> r = Start(options);
  ASSERT_TRUE(r->status().ok());
  v1::AcquireResponse before = r->Acquire("inventory");
  EXPECT_EQ(before.verdict(), v1::REJECT);
  EXPECT_EQ(before.reason(), v1::UNKNOWN_DEPENDENCY);

  const uint64_t version = r->Put(P(R"pb(
    name: "inventory"
    rate_limit {
      rate: 2
      burst: 2
      per { seconds: 1 }
    }
  )pb"));
  ASSERT_GT(version, 0u);
  for (int i = 0; i < 2; ++i) {
    v1::AcquireResponse allowed = r->Acquire("inventory");
    EXPECT_EQ(allowed.verdict(), v1::ALLOW) << i;
    EXPECT_EQ(allowed.policy_version(), version);
    EXPECT_TRUE(r->Report("inventory", allowed.permit_id(), v1::SUCCESS).ok());
  }
  v1::AcquireResponse limited = r->Acquire("inventory");
  EXPECT_EQ(limited.verdict(), v1::REJECT);
  EXPECT_EQ(limited.reason(), v1::RATE_LIMITED);
  // Half a second refills one token at 2/s.
  clock_.Advance(absl::Milliseconds(500));
  EXPECT_EQ(r->Acquire("inventory").verdict(), v1::ALLOW);
  EXPECT_EQ(r->Acquire("inventory").verdict(), v1::REJECT);
}

TEST_F(StandaloneServerTest, ReportedFailuresOpenTheBreaker) {
  std::unique_ptr<Running> r = Start();
  ASSERT_TRUE(r->status().ok());
  ASSERT_GT(r->Put(P(R"pb(
    name: "payments"
    breaker {
      consecutive_failures: 2
      open_duration { seconds: 30 }
    }
  )pb")),
            0u);
  for (int i = 0; i < 2; ++i) {
    v1::AcquireResponse d = r->Acquire("payments");
    ASSERT_EQ(d.verdict(), v1::ALLOW) << i;
    ASSERT_TRUE(r->Report("payments", d.permit_id(), v1::FAILURE).ok());
  }
  v1::AcquireResponse open = r->Acquire("payments");
  EXPECT_EQ(open.verdict(), v1::REJECT);
  EXPECT_EQ(open.reason(), v1::CIRCUIT_OPEN);
  EXPECT_EQ(open.breaker_state(), v1::OPEN);
  EXPECT_EQ(r->State("payments").breaker_state(), v1::OPEN);
}

// Every component that exports metrics is registered once started, and
// writes only metrics metric_list.h declares, as declared.
TEST_F(StandaloneServerTest, EveryComponentExportsOnlyListedMetrics) {
  testing::TempDir dir("sluice_server_stats");
  testing::TestCerts certs(dir.path());
  ASSERT_TRUE(certs.ok()) << certs.error();
  ServerOptions options = testing::LoopbackServerOptions();
  options.http_listen = "127.0.0.1:0";
  options.tls_cert_file = certs.server_cert();
  options.tls_key_file = certs.server_key();
  options.policies_path = dir.File("policies.yaml");
  {
    std::ofstream(options.policies_path)
        << "policies:\n  - name: inventory\n    rate_limit:\n      rate: 5\n";
  }
  options.admin_token_file = dir.File("admin.token");
  {
    std::ofstream(options.admin_token_file) << "secret-token\n";
  }
  options.state_file = dir.File("sluice.state");
  std::unique_ptr<Running> r = Start(options);
  ASSERT_TRUE(r->status().ok());

  const std::string body = r->server().metrics().Render();
  for (const char* written_by_a_component :
       {"sluice_watchers", "sluice_watch_events_dropped_total",
        "sluice_decide_streams", "sluice_rls_requests_total",
        "sluice_ext_authz_checks_total", "sluice_access_log_entries_total",
        "sluice_http_connections", "sluice_tls_reloads_total",
        "sluice_policy_reloads_total", "sluice_admin_token_reloads_total",
        "sluice_state_file_writes_total"}) {
    EXPECT_TRUE(absl::StrContains(
        body, absl::StrCat("# TYPE ", written_by_a_component, " ")))
        << written_by_a_component;
  }
  EXPECT_THAT(body, Not(HasSubstr("sluice_store_up")));
  EXPECT_THAT(r->server().metrics().refused_writes(), IsEmpty());
}

// Two replicas sharing one in-memory store. Neither runs its sync thread:
// the test ticks them with SyncNow (an admin write runs the tick it waits
// for on its own thread).
class ClusterServerTest : public ::testing::Test {
 protected:
  std::unique_ptr<Running> Start(const std::string& replica_id,
                                 const std::string& policies_path = "") {
    ServerOptions options = testing::LoopbackServerOptions();
    options.redis = "in-memory:6379";  // selects cluster mode
    options.replica_id = replica_id;
    options.policies_path = policies_path;
    auto running = std::make_unique<Running>(
        std::move(options),
        testing::DrivenServerDependencies(&clock_, &store_));
    EXPECT_TRUE(running->status().ok()) << running->status();
    return running;
  }
  // Each replica ticks `rounds` times, a second apart. A replica's first
  // tick after the policy appears only learns of it, its second asks for a
  // share, and a grant that shrinks is freed for the other replica only when
  // its holder confirms it on its next tick: five rounds settle a split.
  void Converge(Running& a, Running& b, int rounds = 5) {
    for (int i = 0; i < rounds; ++i) {
      ASSERT_TRUE(a.server().SyncNow().ok());
      ASSERT_TRUE(b.server().SyncNow().ok());
      clock_.Advance(absl::Seconds(1));
    }
  }

  // A policies file holding `entries` (YAML list items); its path.
  std::string PoliciesFile(const std::string& entries) {
    const std::string path = dir_.File("policies.yaml");
    std::ofstream(path) << "policies:" << entries;
    return path;
  }

  testing::FakeClock clock_;
  testing::FakeStore store_{&clock_};
  testing::TempDir dir_{"sluice_cluster_server"};
};

TEST_F(ClusterServerTest, AnAdminWriteReachesTheOtherReplicaOnItsNextTick) {
  std::unique_ptr<Running> a = Start("replica-a");
  std::unique_ptr<Running> b = Start("replica-b");
  ASSERT_TRUE(a->status().ok() && b->status().ok());
  EXPECT_EQ(a->Health(""), grpc::health::v1::HealthCheckResponse::SERVING);

  const uint64_t version = a->Put(P(R"pb(
    name: "inventory"
    rate_limit { rate: 100 }
  )pb"));
  ASSERT_GT(version, 0u);
  // The write returns once it is applied on the replica that took it.
  v1::Policy on_a;
  EXPECT_TRUE(a->GetPolicy("inventory", &on_a).ok());
  EXPECT_EQ(on_a.version(), version);
  // The other replica has not ticked yet.
  v1::Policy on_b;
  EXPECT_EQ(b->GetPolicy("inventory", &on_b).error_code(),
            grpc::StatusCode::NOT_FOUND);

  ASSERT_TRUE(b->server().SyncNow().ok());
  ASSERT_TRUE(b->GetPolicy("inventory", &on_b).ok());
  EXPECT_EQ(on_b.version(), version);
  v1::AcquireResponse decided = b->Acquire("inventory");
  EXPECT_EQ(decided.verdict(), v1::ALLOW);
  EXPECT_EQ(decided.policy_version(), version);
}

TEST_F(ClusterServerTest, AClusterCapIsSplitBetweenTheReplicas) {
  std::unique_ptr<Running> a = Start("replica-a");
  std::unique_ptr<Running> b = Start("replica-b");
  ASSERT_TRUE(a->status().ok() && b->status().ok());
  ASSERT_GT(a->Put(P(R"pb(
    name: "search"
    concurrency { max_in_flight: 4 scope: CLUSTER }
  )pb")),
            0u);
  Converge(*a, *b);

  for (Running* r : {a.get(), b.get()}) {
    const v1::DependencyState state = r->State("search");
    EXPECT_EQ(state.store_status(), "up");
    EXPECT_EQ(state.live_replicas(), 2u);
    EXPECT_TRUE(state.has_grant());
    EXPECT_EQ(state.effective_max_in_flight(), 2u) << state.replica_id();
  }
  // Each replica admits its half of the cap and refuses the rest.
  for (Running* r : {a.get(), b.get()}) {
    EXPECT_EQ(r->Acquire("search").verdict(), v1::ALLOW);
    EXPECT_EQ(r->Acquire("search").verdict(), v1::ALLOW);
    v1::AcquireResponse refused = r->Acquire("search");
    EXPECT_EQ(refused.verdict(), v1::REJECT);
    EXPECT_EQ(refused.reason(), v1::CONCURRENCY_LIMITED);
  }
}

// A new replica reports SERVING only once its cluster-scope limit can
// admit a call here, so that Kubernetes sends it traffic only then. On a
// fresh store nothing is granted for the first stale period (the store
// cannot tell a new policy from one whose data it lost); the replica still
// decides calls meanwhile.
TEST_F(ClusterServerTest, HealthIsServingOnceTheClusterLimitCanAdmit) {
  std::unique_ptr<Running> a = Start("replica-a", PoliciesFile(R"(
  - name: inventory
    rate_limit: {rate: 100, burst: 100, scope: CLUSTER}
)"));
  ASSERT_TRUE(a->status().ok());
  EXPECT_EQ(a->Health(""), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(a->Health("sluice.v1.DecisionService"),
            grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  v1::AcquireResponse early = a->Acquire("inventory");
  EXPECT_EQ(early.verdict(), v1::REJECT);
  EXPECT_EQ(early.reason(), v1::RATE_LIMITED);

  // NOT_SERVING for as long as the store grants nothing: its stale period
  // is 3 intervals.
  int rounds = 0;
  while (a->State("inventory").effective_rate() == 0 && rounds < 10) {
    EXPECT_EQ(a->Health(""),
              grpc::health::v1::HealthCheckResponse::NOT_SERVING);
    clock_.Advance(absl::Seconds(1));
    ASSERT_TRUE(a->server().SyncNow().ok());
    ++rounds;
  }
  EXPECT_GE(rounds, 3);
  ASSERT_LT(rounds, 10);
  // The grant fills the bucket at the granted rate (100/s here): ready with
  // its first whole token, well before the bounded wait would end.
  clock_.Advance(absl::Milliseconds(50));
  ASSERT_TRUE(a->server().SyncNow().ok());
  EXPECT_EQ(a->Health(""), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(a->Health("sluice.v1.DecisionService"),
            grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(a->Acquire("inventory").verdict(), v1::ALLOW);
}

// With the store out of reach a replica decides from local state (each
// policy's on_store_failure) and is ready at once.
TEST_F(ClusterServerTest, HealthIsServingAtOnceWithTheStoreDown) {
  store_.SetDown(true);
  std::unique_ptr<Running> a = Start("replica-a", PoliciesFile(R"(
  - name: inventory
    rate_limit: {rate: 100, scope: CLUSTER}
)"));
  ASSERT_TRUE(a->status().ok());
  EXPECT_EQ(a->Health(""), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(a->Acquire("inventory").verdict(), v1::ALLOW);
}

// A limit too small to leave a replica a share (one in-flight call, two
// replicas) keeps it NOT_SERVING no longer than a stale period and two
// intervals after its first tick.
TEST_F(ClusterServerTest, ALimitWithNoShareHereDelaysServingBoundedly) {
  const std::string policies = PoliciesFile(R"(
  - name: search
    concurrency: {max_in_flight: 1, scope: CLUSTER}
)");
  std::unique_ptr<Running> a = Start("replica-a", policies);
  std::unique_ptr<Running> b = Start("replica-b", policies);
  ASSERT_TRUE(a->status().ok() && b->status().ok());
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(absl::Seconds(1));
    ASSERT_TRUE(a->server().SyncNow().ok());
    ASSERT_TRUE(b->server().SyncNow().ok());
  }
  // One of them holds the slot; the other has none yet.
  const bool a_ready =
      a->Health("") == grpc::health::v1::HealthCheckResponse::SERVING;
  const bool b_ready =
      b->Health("") == grpc::health::v1::HealthCheckResponse::SERVING;
  EXPECT_NE(a_ready, b_ready);
  clock_.Advance(absl::Seconds(1));
  ASSERT_TRUE(a->server().SyncNow().ok());
  ASSERT_TRUE(b->server().SyncNow().ok());
  EXPECT_EQ(a->Health(""), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(b->Health(""), grpc::health::v1::HealthCheckResponse::SERVING);
}

// A central replica exports its sync loop, its store and its leaves.
TEST_F(ClusterServerTest, TheSyncLoopAndTheLedgerExportOnlyListedMetrics) {
  std::unique_ptr<Running> r = Start("replica-a");
  ASSERT_TRUE(r->server().SyncNow().ok());
  const std::string body = r->server().metrics().Render();
  for (const char* written_by_a_component :
       {"sluice_store_up", "sluice_sync_ticks_total", "sluice_leaves",
        "sluice_leaf_ticks_total", "sluice_lease_units"}) {
    EXPECT_TRUE(absl::StrContains(
        body, absl::StrCat("# TYPE ", written_by_a_component, " ")))
        << written_by_a_component;
  }
  EXPECT_THAT(body, Not(HasSubstr("sluice_upstream_info")));
  EXPECT_THAT(r->server().metrics().refused_writes(), IsEmpty());
}

TEST(ValidateOptionsTest, NamesTheFlagAndTheRule) {
  EXPECT_TRUE(ValidateOptions(ServerOptions()).ok());
  ServerOptions listen;
  listen.admin_listen = "nowhere";
  EXPECT_THAT(ValidateOptions(listen).message(),
              HasSubstr("--admin-listen: expected HOST:PORT"));
  ServerOptions sync;
  sync.sync_interval = absl::Milliseconds(5);
  EXPECT_THAT(ValidateOptions(sync).message(),
              HasSubstr("--sync-interval must be at least 10ms"));
  ServerOptions redis;
  redis.redis = "127.0.0.1:port";
  EXPECT_FALSE(ValidateOptions(redis).ok());
  ServerOptions replicas;
  replicas.expected_replicas = 0;
  EXPECT_THAT(ValidateOptions(replicas).message(),
              HasSubstr("--expected-replicas must be at least 1"));
}

// The range errors word for word, as operators see them at startup.
TEST(ValidateOptionsTest, RangeErrorsGiveTheValue) {
  const struct {
    void (*change)(ServerOptions&);
    const char* error;
  } cases[] = {
      {[](ServerOptions& o) { o.sync_interval = absl::Milliseconds(5); },
       "--sync-interval must be at least 10ms, got 5ms"},
      {[](ServerOptions& o) { o.redis_timeout = absl::ZeroDuration(); },
       "--redis-timeout must be > 0, got 0"},
      {[](ServerOptions& o) { o.state_file_interval = -absl::Seconds(2); },
       "state file interval must be > 0, got -2s"},
      {[](ServerOptions& o) { o.expected_replicas = 0; },
       "--expected-replicas must be at least 1, got 0"},
      {[](ServerOptions& o) { o.http_threads = kMaxHttpThreads + 1; },
       "--http-threads must be in [1, 256], got 257"},
      {[](ServerOptions& o) { o.http_max_connections = -1; },
       "--http-max-connections must be in [1, 1000000], got -1"},
      {[](ServerOptions& o) { o.max_leaves = kMaxLeavesLimit + 1; },
       "--max-leaves must be in [0, 100000], got 100001"},
      {[](ServerOptions& o) { o.upstream_timeout = absl::ZeroDuration(); },
       "--upstream-timeout must be > 0, got 0"},
  };
  for (const auto& c : cases) {
    ServerOptions options;
    c.change(options);
    EXPECT_EQ(ValidateOptions(options).message(), c.error);
  }
}

TEST(ValidateOptionsTest, RedisAccessFlags) {
  ServerOptions both;
  both.redis = "127.0.0.1:6379";
  both.redis_sentinels = "127.0.0.1:26379";
  both.redis_master = "m";
  EXPECT_THAT(ValidateOptions(both).message(),
              HasSubstr("--redis, --redis-sentinels and --redis-cluster exclude each other"));
  ServerOptions no_master;
  no_master.redis_sentinels = "127.0.0.1:26379";
  EXPECT_THAT(ValidateOptions(no_master).message(),
              HasSubstr("--redis-sentinels needs --redis-master"));
  ServerOptions no_sentinels;
  no_sentinels.redis_master = "m";
  EXPECT_THAT(ValidateOptions(no_sentinels).message(),
              HasSubstr("--redis-master needs --redis-sentinels"));
  ServerOptions bad_sentinel;
  bad_sentinel.redis_sentinels = "a:1,b:http";
  bad_sentinel.redis_master = "m";
  EXPECT_THAT(ValidateOptions(bad_sentinel).message(),
              HasSubstr("--redis-sentinels: "));
  ServerOptions sentinel = bad_sentinel;
  sentinel.redis_sentinels = "a:1,b";
  EXPECT_TRUE(ValidateOptions(sentinel).ok());
  EXPECT_TRUE(ClusterModeEnabled(sentinel));
  ServerOptions db;
  db.redis = "127.0.0.1:6379";
  db.redis_db = -1;
  EXPECT_THAT(ValidateOptions(db).message(), HasSubstr("--redis-db"));
  ServerOptions user;
  user.redis = "127.0.0.1:6379";
  user.redis_user = "sluice";
  EXPECT_THAT(ValidateOptions(user).message(),
              HasSubstr("--redis-user needs --redis-password-file"));
  ServerOptions standalone;
  standalone.redis_db = 2;
  EXPECT_THAT(ValidateOptions(standalone).message(),
              HasSubstr("--redis-db needs --redis, --redis-sentinels or "
                        "--redis-cluster"));
  standalone.redis_db = 0;
  standalone.redis_password_file = "/nonexistent/redis-password";
  EXPECT_THAT(ValidateOptions(standalone).message(),
              HasSubstr("--redis-password-file needs --redis"));
  ServerOptions missing;
  missing.redis = "127.0.0.1:6379";
  missing.redis_password_file = "/nonexistent/redis-password";
  EXPECT_THAT(ValidateOptions(missing).message(),
              HasSubstr("--redis-password-file: cannot read the password "
                        "file: /nonexistent/redis-password does not exist"));
}

TEST(ValidateOptionsTest, RedisClusterSeeds) {
  ServerOptions seeds;
  seeds.redis_cluster = "10.0.0.1:7000, 10.0.0.2:7000,[::1]:7001";
  EXPECT_TRUE(ValidateOptions(seeds).ok());
  ServerOptions both = seeds;
  both.redis = "10.0.0.1:6379";
  EXPECT_THAT(ValidateOptions(both).message(),
              HasSubstr("--redis, --redis-sentinels and --redis-cluster exclude each other"));
  ServerOptions bad;
  bad.redis_cluster = "10.0.0.1:7000,redis";
  EXPECT_THAT(ValidateOptions(bad).message(),
              HasSubstr("--redis-cluster: seed \"redis\""));
  bad.redis_cluster = "10.0.0.1:7000,";
  EXPECT_THAT(ValidateOptions(bad).message(), HasSubstr("--redis-cluster"));
  bad.redis_cluster = "10.0.0.1:0";
  EXPECT_THAT(ValidateOptions(bad).message(),
              HasSubstr("--redis-cluster: seed port must be 1-65535"));
  ServerOptions db = seeds;
  db.redis_db = 2;
  EXPECT_THAT(ValidateOptions(db).message(),
              HasSubstr("Redis Cluster has database 0 only"));
  EXPECT_TRUE(ClusterModeEnabled(seeds));
}

TEST(ValidateOptionsTest, UnixSocketListeners) {
  ServerOptions unix;
  unix.listen = "unix:/run/sluice/sluice.sock";
  unix.admin_listen = "unix:/run/sluice/admin.sock";
  EXPECT_TRUE(ValidateOptions(unix).ok());
  unix.admin_listen = unix.listen;
  EXPECT_THAT(ValidateOptions(unix).message(),
              HasSubstr("--listen and --admin-listen are the same socket"));
  ServerOptions relative;  // one file, spelled two ways
  relative.listen = "unix:sluice.sock";
  relative.admin_listen = "unix:./run/../sluice.sock";
  EXPECT_THAT(ValidateOptions(relative).message(),
              HasSubstr("--listen and --admin-listen are the same socket"));
  EXPECT_EQ(NormalizeListenAddress("unix:/run/./x/../s.sock"), "unix:/run/s.sock");
  EXPECT_EQ(NormalizeListenAddress("127.0.0.1:0"), "127.0.0.1:0");
  ServerOptions metrics;
  metrics.metrics_listen = "unix:/run/sluice/metrics.sock";
  EXPECT_THAT(ValidateOptions(metrics).message(),
              HasSubstr("--metrics-listen: /metrics is served over TCP only"));
  ServerOptions empty;
  empty.listen = "unix:";
  EXPECT_THAT(ValidateOptions(empty).message(),
              HasSubstr("--listen: unix socket path is empty"));
  ServerOptions mode;
  mode.socket_mode = 0460;
  EXPECT_THAT(ValidateOptions(mode).message(),
              HasSubstr("--socket-mode must be at most 0777 and let the owner "
                        "read and write (0600 at least), got 0460"));
}

TEST(ParseSocketModeTest, OctalWithTheOwnerAllowed) {
  EXPECT_EQ(*ParseSocketMode("0660"), 0660u);
  EXPECT_EQ(*ParseSocketMode("600"), 0600u);
  EXPECT_EQ(*ParseSocketMode("0777"), 0777u);
  for (const char* bad : {"", "66", "08", "0o660", "06600", "rw-"}) {
    EXPECT_THAT(ParseSocketMode(bad).status().message(),
                HasSubstr("three or four octal digits"))
        << bad;
  }
  EXPECT_THAT(ParseSocketMode("1777").status().message(),
              HasSubstr("must be at most 0777 and let the owner read and "
                        "write (0600 at least), got 1777"));
  EXPECT_THAT(ParseSocketMode("0440").status().message(),
              HasSubstr("must be at most 0777 and let the owner read and "
                        "write (0600 at least), got 0440"));
}

// Listeners on Unix sockets: reachable over the socket (a real channel, not
// the in-process one), with the configured mode, and removed at shutdown.
TEST_F(StandaloneServerTest, ServesOnUnixSocketsAndRemovesThemAtShutdown) {
  testing::TempDir dir("sluice_server_unix");
  const std::string data = dir.File("sluice.sock");
  const std::string admin = dir.File("admin.sock");
  ServerOptions options = testing::LoopbackServerOptions();
  options.listen = "unix:" + data;
  options.admin_listen = "unix:" + admin;
  options.socket_mode = 0660;
  {
    std::unique_ptr<Running> r = Start(options);
    ASSERT_TRUE(r->status().ok());
    EXPECT_EQ(r->server().target(), "unix:" + data);
    EXPECT_EQ(r->server().admin_target(), "unix:" + admin);
    for (const std::string& path : {data, admin}) {
      struct stat info {};
      ASSERT_EQ(lstat(path.c_str(), &info), 0) << path;
      EXPECT_TRUE(S_ISSOCK(info.st_mode)) << path;
      EXPECT_EQ(info.st_mode & 0777, 0660u) << path;
    }
    auto channel = grpc::CreateChannel(r->server().target(),
                                       grpc::InsecureChannelCredentials());
    grpc::health::v1::HealthCheckRequest request;
    request.set_service("sluice.v1.DecisionService");
    grpc::health::v1::HealthCheckResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    const grpc::Status status =
        grpc::health::v1::Health::NewStub(channel)->Check(&context, request,
                                                          &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.status(),
              grpc::health::v1::HealthCheckResponse::SERVING);
    r->server().Shutdown(absl::Now());
    struct stat info {};
    EXPECT_NE(lstat(data.c_str(), &info), 0) << "data socket left behind";
    EXPECT_NE(lstat(admin.c_str(), &info), 0) << "admin socket left behind";
    EXPECT_NE(lstat((data + ".lock").c_str(), &info), 0) << "lock left behind";
  }
}

TEST_F(StandaloneServerTest, RefusesASocketAnotherServerServes) {
  testing::TempDir dir("sluice_server_unix");
  ServerOptions options = testing::LoopbackServerOptions();
  options.listen = "unix:" + dir.File("sluice.sock");
  {
    std::unique_ptr<Running> first = Start(options);
    ASSERT_TRUE(first->status().ok());
    Server::Dependencies deps;
    deps.clock = &clock_;
    deps.metrics_listener = false;
    Server second(options, deps);
    const absl::Status status = second.BuildAndStart();
    EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(status.message(), HasSubstr("another sluiced holds"));
    // The first keeps its socket.
    EXPECT_EQ(first->Health(""),
              grpc::health::v1::HealthCheckResponse::SERVING);
    struct stat info {};
    EXPECT_EQ(lstat(dir.File("sluice.sock").c_str(), &info), 0);
  }
}

TEST(ServerTest, BuildAndStartRefusesOptionsThatFailValidation) {
  // An embedder that skips ValidateOptions gets the same error, not a crash.
  testing::FakeClock clock;
  ServerOptions options = testing::LoopbackServerOptions();
  options.admin_listen = "nowhere";
  options.redis = "127.0.0.1:port";
  Server::Dependencies deps;
  deps.clock = &clock;
  deps.metrics_listener = false;
  Server server(options, deps);
  const absl::Status status = server.BuildAndStart();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("--admin-listen: expected HOST:PORT"));
}

}  // namespace
}  // namespace sluice::app
