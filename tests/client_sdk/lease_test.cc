// SPDX-License-Identifier: Apache-2.0
// Leases (ClientOptions::lease): the SDK against a real DecisionServiceImpl
// and core Engine, in process. The server's clock is fake and stands
// still, so the bucket refills nothing during a test; the client's ticks
// are long, so every renewal here is one the test caused and waits for.
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "server/rpc/decision_service.h"
#include "sluice/client/client.h"
#include "tests/client_sdk/policies_from_yaml.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/wait_for.h"

namespace sluice::client {
namespace {

constexpr char kPolicies[] = R"yaml(
policies:
  - name: roomy
    call_timeout: 300ms
    rate_limit: { rate: 1, per: 1h, burst: 1000 }
    concurrency: { max_in_flight: 100 }
  - name: tight
    rate_limit: { rate: 1, per: 1h, burst: 5 }
  - name: fragile
    breaker:
      consecutive_failures: 3
      open_duration: 1h
      max_open_duration: 1h
  - name: brittle
    breaker:
      consecutive_failures: 1
      open_duration: 1h
      max_open_duration: 1h
    fallback:
      strategy: STATIC
      payload: '{"stale":true}'
      content_type: application/json
      on: [CIRCUIT_OPEN]
  - name: blinking
    breaker:
      consecutive_failures: 1
      open_duration: 50ms
      max_open_duration: 50ms
  - name: keyed
    rate_limit: { rate: 1, per: 1h, burst: 1000 }
    per_key: true
  - name: windowed
    rate_limit: { rate: 1000, per: 1h, algorithm: SLIDING_WINDOW }
)yaml";

class LeaseTest : public ::testing::Test {
 protected:
  LeaseTest() : engine_(&clock_, core::Engine::Options()), service_(&engine_) {
    InstallPolicies(kPolicies, &engine_);
    // A real port (0: any free one), so that the client's channel outlives
    // a server the test stops, as it would a sluiced that went away.
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~LeaseTest() override {
    client_.reset();
    if (!stopped_) server_->Shutdown();
  }

  void StartClient(uint32_t hot_calls = 4,
                   absl::Duration tick = absl::Seconds(4)) {
    ClientOptions options;
    options.target = absl::StrCat("127.0.0.1:", port_);
    options.acquire_timeout = absl::Seconds(5);
    options.lease.enabled = true;
    // By default long enough that no renewal comes on its own during a
    // test.
    options.lease.tick = tick;
    options.lease.hot_calls = hot_calls;
    auto client = Client::Create(options);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  // Waits until `n` renewals were answered (a completion, not time).
  void AwaitRenewals(uint64_t n) {
    ASSERT_TRUE(testing::WaitFor(
        [&] { return client_->stats().lease_renewals >= n; },
        absl::Seconds(10), absl::Milliseconds(1)))
        << "renewals answered: " << client_->stats().lease_renewals;
  }

  // `n` calls that each report a fast success; how many were admitted.
  int CallAndSucceed(absl::string_view dependency, int n,
                     absl::string_view key = "") {
    int admitted = 0;
    for (int i = 0; i < n; ++i) {
      Permit p = client_->Acquire(dependency, key);
      if (!p.allowed()) continue;
      ++admitted;
      p.Report(Outcome::kSuccess, absl::Milliseconds(1));
    }
    return admitted;
  }

  // Trips `dependency`'s one-failure breaker with a call Sluice admits,
  // and waits until the failure's report has reached it.
  void Trip(absl::string_view dependency) {
    Permit p = client_->Acquire(dependency);
    ASSERT_TRUE(p.allowed());
    ASSERT_FALSE(p.leased());
    p.Report(Outcome::kFailure, absl::Milliseconds(1));
    ASSERT_TRUE(testing::WaitFor(
        [&] {
          return engine_.PeekBreaker(dependency) == core::BreakerState::kOpen;
        },
        absl::Seconds(10), absl::Milliseconds(1)));
  }

  // Calls `dependency` until Sluice answers a call rather than the
  // client's lease line, and returns that answer (reported, if admitted).
  Permit AwaitAnswerFromSluice(absl::string_view dependency) {
    Permit answer;
    EXPECT_TRUE(testing::WaitFor(
        [&] {
          Permit p = client_->Acquire(dependency);
          if (p.leased()) return false;
          if (p.allowed()) p.Report(Outcome::kSuccess, absl::Milliseconds(1));
          answer = std::move(p);
          return true;
        },
        absl::Seconds(10), absl::Milliseconds(1)));
    return answer;
  }

  core::LivePolicyStatus Inspect(absl::string_view dependency) {
    auto s = engine_.Inspect(dependency);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : core::LivePolicyStatus{};
  }

  testing::FakeClock clock_;
  core::Engine engine_;
  rpc::DecisionServiceImpl service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  bool stopped_ = false;
  std::unique_ptr<Client> client_;
};

// A hot dependency is decided in the client: no Acquire reaches Sluice,
// and the calls count there when the client settles them.
TEST_F(LeaseTest, AHotDependencyIsDecidedWithoutAsking) {
  StartClient();
  // The 4th call makes it hot and asks for a lease.
  EXPECT_EQ(CallAndSucceed("roomy", 4), 4);
  AwaitRenewals(1);
  EXPECT_EQ(Inspect("roomy").gates->client_leases, 1u);
  const uint64_t asked = Inspect("roomy").counters.acquired;
  EXPECT_EQ(asked, 4u);

  // Twice the four calls of the first tick: 8 tokens lent.
  int admitted = 0;
  for (int i = 0; i < 8; ++i) {
    Permit p = client_->Acquire("roomy");
    ASSERT_TRUE(p.allowed());
    EXPECT_TRUE(p.leased());
    EXPECT_FALSE(p.decided_locally());
    EXPECT_FALSE(p.reported());
    EXPECT_EQ(p.call_timeout(), absl::Milliseconds(300));
    ++admitted;
    p.Report(Outcome::kSuccess, absl::Milliseconds(1));
    EXPECT_TRUE(p.reported());
  }
  EXPECT_EQ(Inspect("roomy").counters.acquired, asked);
  EXPECT_EQ(client_->stats().leased_decisions, 8u);

  // The client gives its lease back when it closes: the leased calls are
  // settled and the unused tokens return.
  client_.reset();
  const core::LivePolicyStatus s = Inspect("roomy");
  EXPECT_EQ(s.counters.allowed, 12u);
  EXPECT_EQ(s.counters.leased, 8u);
  EXPECT_EQ(s.counters.outcomes[static_cast<int>(core::Outcome::kSuccess)],
            12u);
  EXPECT_EQ(s.gates->client_leases, 0u);
  EXPECT_DOUBLE_EQ(s.gates->leased_tokens, 0);
  EXPECT_EQ(s.gates->leased_slots, 0u);
  EXPECT_DOUBLE_EQ(s.gates->tokens_available, 1000 - 12);
}

// A lease spent while Sluice's bucket is empty refuses in the client, as
// the bucket would: 429, RATE_LIMITED, without asking.
TEST_F(LeaseTest, ASpentLeaseOfAnEmptyBucketRefuses) {
  StartClient(2);
  EXPECT_EQ(CallAndSucceed("tight", 2), 2);
  AwaitRenewals(1);
  // 3 tokens were left, all lent: the bucket is empty.
  EXPECT_EQ(CallAndSucceed("tight", 3), 3);
  Permit refused = client_->Acquire("tight");
  EXPECT_EQ(refused.verdict(), Verdict::kReject);
  EXPECT_EQ(refused.reason(), Reason::kRateLimited);
  EXPECT_EQ(refused.http_status(), 429);
  EXPECT_TRUE(refused.leased());
  EXPECT_FALSE(refused.decided_locally());
  EXPECT_GT(refused.retry_after(), absl::ZeroDuration());
  EXPECT_EQ(client_->stats().lease_refusals, 1u);
  EXPECT_EQ(Inspect("tight").counters.acquired, 2u);
}

// A leased call that fails goes up at once: the breaker trips on the
// third, the lease ends, and the next call hears CIRCUIT_OPEN from Sluice.
TEST_F(LeaseTest, LeasedFailuresTripTheBreakerAtOnce) {
  StartClient();
  EXPECT_EQ(CallAndSucceed("fragile", 4), 4);
  AwaitRenewals(1);
  uint64_t renewals = 1;
  for (int i = 0; i < 3; ++i) {
    Permit p = client_->Acquire("fragile");
    ASSERT_TRUE(p.allowed());
    EXPECT_TRUE(p.leased());
    // The failure suspends the lease and goes up at once; Sluice renews
    // it while the breaker stays CLOSED.
    p.Report(Outcome::kFailure, absl::Milliseconds(1));
    AwaitRenewals(++renewals);
  }
  EXPECT_EQ(engine_.PeekBreaker("fragile"), core::BreakerState::kOpen);
  Permit p = client_->Acquire("fragile");
  EXPECT_EQ(p.verdict(), Verdict::kReject);
  EXPECT_EQ(p.reason(), Reason::kCircuitOpen);
  EXPECT_FALSE(p.leased());
}

// Once Sluice has answered CIRCUIT_OPEN, the client repeats that answer,
// fallback and all, without asking, until the breaker may probe.
TEST_F(LeaseTest, AnOpenBreakerIsRepeatedWithoutAsking) {
  StartClient(/*hot_calls=*/100);
  Trip("brittle");
  Permit asked = client_->Acquire("brittle");
  ASSERT_EQ(asked.reason(), Reason::kCircuitOpen);
  EXPECT_EQ(asked.verdict(), Verdict::kDegrade);
  EXPECT_FALSE(asked.leased());
  const uint64_t acquired = Inspect("brittle").counters.acquired;

  for (int i = 0; i < 5; ++i) {
    Permit p = client_->Acquire("brittle");
    EXPECT_EQ(p.verdict(), Verdict::kDegrade) << i;
    EXPECT_EQ(p.reason(), Reason::kCircuitOpen) << i;
    EXPECT_EQ(p.breaker_state(), BreakerState::kOpen) << i;
    EXPECT_TRUE(p.leased()) << i;
    EXPECT_FALSE(p.decided_locally()) << i;
    EXPECT_EQ(p.fallback().payload, R"({"stale":true})") << i;
    EXPECT_EQ(p.fallback().content_type, "application/json") << i;
    EXPECT_GT(p.retry_after(), absl::Minutes(59)) << i;
    EXPECT_LE(p.retry_after(), absl::Hours(1)) << i;
    EXPECT_EQ(p.policy_version(), asked.policy_version()) << i;
    EXPECT_TRUE(p.reported()) << i;
  }
  EXPECT_EQ(Inspect("brittle").counters.acquired, acquired);
  EXPECT_EQ(client_->stats().lease_open_refusals, 5u);

  // A call with a key is not the dependency's: it still asks.
  Permit keyed = client_->Acquire("brittle", "tenant-a");
  EXPECT_EQ(keyed.reason(), Reason::kCircuitOpen);
  EXPECT_FALSE(keyed.leased());
  EXPECT_EQ(Inspect("brittle").counters.acquired, acquired + 1);
}

// A renewal that finds the breaker no longer OPEN (here an operator's
// override) ends the repeat within a tick: the next call asks again.
TEST_F(LeaseTest, ARenewalThatFindsTheBreakerClosedEndsTheRepeat) {
  StartClient(/*hot_calls=*/100, absl::Milliseconds(20));
  Trip("brittle");
  ASSERT_EQ(client_->Acquire("brittle").reason(), Reason::kCircuitOpen);
  ASSERT_TRUE(client_->Acquire("brittle").leased());
  const uint64_t renewals = client_->stats().lease_renewals;
  // Renewals still say OPEN: the repeat goes on.
  AwaitRenewals(renewals + 2);
  ASSERT_TRUE(client_->Acquire("brittle").leased());

  ASSERT_TRUE(
      engine_
          .SetOverride("brittle", core::BreakerOverride::kForceClosed, "test")
          .ok());
  // The next renewal hears FORCED_CLOSED; the repeat ends with it, and so
  // do the renewals, which had nothing else to carry.
  const Permit p = AwaitAnswerFromSluice("brittle");
  EXPECT_TRUE(p.allowed());
  EXPECT_EQ(p.breaker_state(), BreakerState::kForcedClosed);
}

// An operator's FORCE_OPEN is repeated as well, renewal after renewal,
// until the override is lifted.
TEST_F(LeaseTest, AForcedOpenBreakerIsRepeatedUntilLifted) {
  StartClient(/*hot_calls=*/100, absl::Milliseconds(20));
  ASSERT_TRUE(engine_
                  .SetOverride("brittle", core::BreakerOverride::kForceOpen,
                               "test")
                  .ok());
  Permit asked = client_->Acquire("brittle");
  ASSERT_EQ(asked.reason(), Reason::kCircuitOpen);
  ASSERT_EQ(asked.breaker_state(), BreakerState::kForcedOpen);
  const uint64_t acquired = Inspect("brittle").counters.acquired;
  AwaitRenewals(client_->stats().lease_renewals + 3);
  Permit repeated = client_->Acquire("brittle");
  EXPECT_TRUE(repeated.leased());
  EXPECT_EQ(repeated.breaker_state(), BreakerState::kForcedOpen);
  EXPECT_EQ(Inspect("brittle").counters.acquired, acquired);

  ASSERT_TRUE(
      engine_.SetOverride("brittle", core::BreakerOverride::kAuto, "test")
          .ok());
  EXPECT_TRUE(AwaitAnswerFromSluice("brittle").allowed());
}

// The repeat lasts only as long as Sluice said the breaker stays OPEN
// (retry_after, counted from when the question left): then the client
// asks, and a breaker that may probe answers.
TEST_F(LeaseTest, TheRepeatEndsWhenTheBreakerMayProbe) {
  StartClient(/*hot_calls=*/100);
  Trip("blinking");
  Permit asked = client_->Acquire("blinking");
  ASSERT_EQ(asked.reason(), Reason::kCircuitOpen);
  ASSERT_LE(asked.retry_after(), absl::Milliseconds(50));
  const uint64_t acquired = Inspect("blinking").counters.acquired;
  // Sluice's clock stands still, so its breaker stays OPEN and each
  // question brings another 50 ms of repeats; the client keeps asking
  // again after each.
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        (void)client_->Acquire("blinking");
        return Inspect("blinking").counters.acquired >= acquired + 2;
      },
      absl::Seconds(10), absl::Milliseconds(1)));
  EXPECT_GT(client_->stats().lease_open_refusals, 0u);
}

// While Sluice cannot be asked, a lease that has not run out keeps the
// limit: the client admits what it holds and refuses the rest instead of
// failing open.
TEST_F(LeaseTest, AGoneSluiceLeavesTheLeaseHoldingTheLimit) {
  StartClient(2);
  EXPECT_EQ(CallAndSucceed("tight", 2), 2);
  AwaitRenewals(1);
  server_->Shutdown();
  stopped_ = true;
  EXPECT_EQ(CallAndSucceed("tight", 3), 3);
  for (int i = 0; i < 5; ++i) {
    Permit p = client_->Acquire("tight");
    EXPECT_EQ(p.verdict(), Verdict::kReject) << i;
    EXPECT_EQ(p.reason(), Reason::kRateLimited) << i;
  }
  EXPECT_EQ(client_->stats().leased_decisions, 3u);
}

// Dependencies whose gates must see each call keep asking Sluice, and so
// do calls without a key of a per_key policy.
TEST_F(LeaseTest, UnleasableGatesKeepAsking) {
  StartClient(2);
  EXPECT_EQ(CallAndSucceed("keyed", 2), 2);
  EXPECT_EQ(CallAndSucceed("windowed", 2), 2);
  AwaitRenewals(1);
  EXPECT_EQ(CallAndSucceed("keyed", 5), 5);
  EXPECT_EQ(CallAndSucceed("windowed", 5), 5);
  EXPECT_EQ(client_->stats().leased_decisions, 0u);
  EXPECT_EQ(Inspect("keyed").counters.acquired, 7u);
  EXPECT_EQ(Inspect("windowed").counters.acquired, 7u);
}

// A per_key policy is leased key by key: a hot key gets a lease out of its
// own gates, while cold keys, however many, keep asking.
TEST_F(LeaseTest, AHotKeyIsLeasedAndColdKeysKeepAsking) {
  StartClient(4);
  for (int k = 0; k < 50; ++k) {
    EXPECT_EQ(CallAndSucceed("keyed", 3, absl::StrCat("cold-", k)), 3);
  }
  // The 4th call of a key within a tick makes it hot and asks for a lease.
  EXPECT_EQ(CallAndSucceed("keyed", 4, "hot"), 4);
  AwaitRenewals(1);
  EXPECT_EQ(engine_.Inspect("keyed", "hot")->gates->client_leases, 1u);
  EXPECT_DOUBLE_EQ(engine_.Inspect("keyed", "hot")->gates->leased_tokens, 8);
  const uint64_t asked = Inspect("keyed").counters.acquired;
  EXPECT_EQ(asked, 50u * 3 + 4);

  for (int i = 0; i < 8; ++i) {
    Permit p = client_->Acquire("keyed", "hot");
    ASSERT_TRUE(p.allowed());
    EXPECT_TRUE(p.leased());
    EXPECT_EQ(p.dependency(), "keyed");
    EXPECT_EQ(p.key(), "hot");
    p.Report(Outcome::kSuccess, absl::Milliseconds(1));
  }
  // (A 4th call of cold-1 would make it hot too.)
  Permit cold = client_->Acquire("keyed", "cold-x");
  EXPECT_FALSE(cold.leased());
  cold.Report(Outcome::kSuccess, absl::Milliseconds(1));
  EXPECT_EQ(Inspect("keyed").counters.acquired, asked + 1);
  EXPECT_EQ(client_->stats().leased_decisions, 8u);

  // Closing gives the key's lease back: settled, and nothing left lent.
  client_.reset();
  const core::LivePolicyStatus s = Inspect("keyed");
  EXPECT_EQ(s.counters.leased, 8u);
  EXPECT_EQ(s.leased.leases, 0u);
  EXPECT_DOUBLE_EQ(engine_.Inspect("keyed", "hot")->gates->tokens_available,
                   1000 - 12);
}

// Calls with a key of a policy without per_key are one partition: once
// Sluice says so, they share the dependency's own lease.
TEST_F(LeaseTest, KeyedCallsOfAPolicyWithoutPerKeyShareItsLease) {
  StartClient(4);
  EXPECT_EQ(CallAndSucceed("roomy", 4, "tenant-a"), 4);
  AwaitRenewals(1);  // no lease: roomy is leased without a key
  EXPECT_EQ(CallAndSucceed("roomy", 4, "tenant-b"), 4);
  AwaitRenewals(2);
  EXPECT_EQ(Inspect("roomy").gates->client_leases, 1u);
  for (const char* key : {"tenant-a", "tenant-b", "tenant-c", ""}) {
    Permit p = client_->Acquire("roomy", key);
    ASSERT_TRUE(p.allowed());
    EXPECT_TRUE(p.leased()) << key;
    p.Report(Outcome::kSuccess, absl::Milliseconds(1));
  }
  EXPECT_EQ(client_->stats().leased_decisions, 4u);
}

// Every malformed renewal is refused whole, naming the field; none of a
// request's renewals is applied when one is malformed.
TEST_F(LeaseTest, MalformedRenewalsAreRefusedWhole) {
  const auto refuse = [&](const v1::RenewLeasesRequest& request,
                          const std::string& message) {
    v1::RenewLeasesResponse response;
    const absl::Status s = service_.RenewMany(request, &response);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_NE(s.message().find(message), absl::string_view::npos)
        << s.message();
    EXPECT_EQ(response.grants_size(), 0);
  };
  v1::RenewLeasesRequest good;
  good.set_client(42);
  v1::ClientLeaseRenewal* r = good.add_leases();
  r->set_dependency("roomy");
  r->set_admitted(3);
  r->set_successes(2);
  r->set_in_flight(1);
  r->set_want_tokens(10);
  r->set_want_slots(2);

  v1::RenewLeasesRequest bad = good;
  bad.set_client(0);
  refuse(bad, "client: must not be 0");
  bad = good;
  *bad.add_leases() = good.leases(0);
  refuse(bad, "leases[1]: the dependency is renewed twice");
  bad = good;
  bad.mutable_leases(0)->set_failures(2);
  refuse(bad, "leases[0]: successes + slow + failures + timeouts + cancelled");
  bad = good;
  bad.mutable_leases(0)->set_in_flight(2);
  refuse(bad, "leases[0]: in_flight: 2 is more than");
  bad = good;
  bad.mutable_leases(0)->set_want_slots(1000001);
  refuse(bad, "leases[0]: want_slots: at most 1000000");
  bad = good;
  bad.add_leases()->set_dependency("");
  refuse(bad, "leases[1]: ");
  bad = good;
  bad.mutable_leases(0)->set_key(std::string(2000, 'k'));
  refuse(bad, "leases[0]: key");
  bad = good;
  bad.mutable_leases(0)->set_key("a");
  *bad.add_leases() = bad.leases(0);
  refuse(bad, "leases[1]: the dependency and key are renewed twice");
  bad = good;
  for (int i = 0; i < 256; ++i) {
    bad.add_leases()->set_dependency(absl::StrCat("dep-", i));
  }
  refuse(bad, "leases: at most 256 per call, got 257");
  EXPECT_EQ(Inspect("roomy").gates->client_leases, 0u);

  v1::RenewLeasesResponse response;
  ASSERT_TRUE(service_.RenewMany(good, &response).ok());
  ASSERT_EQ(response.grants_size(), 1);
  EXPECT_NE(response.grants(0).lease(), 0u);
  EXPECT_EQ(response.grants(0).token_limit(), 10u);
  EXPECT_EQ(response.grants(0).slot_limit(), 2u);
  EXPECT_EQ(Inspect("roomy").gates->client_leases, 1u);
}

TEST(LeaseOptionsTest, BadLeaseOptionsAreRefused) {
  ClientOptions options;
  options.target = "127.0.0.1:1";
  options.lease.enabled = true;
  options.lease.tick = absl::Milliseconds(1);
  EXPECT_EQ(Client::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.lease.tick = absl::Milliseconds(250);
  options.lease.hot_calls = 0;
  EXPECT_EQ(Client::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.lease.hot_calls = 16;
  options.lease.max_leased = 1000;
  EXPECT_EQ(Client::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sluice::client
