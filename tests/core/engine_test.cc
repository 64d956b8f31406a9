// SPDX-License-Identifier: Apache-2.0
#include "server/core/engine.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/core/engine_test_util.h"

namespace sluice::core {
namespace {

TEST_F(EngineTest, UnknownDependencyAllowsByDefault) {
  Engine::Options options;
  options.unknown_call_timeout = absl::Seconds(3);
  Engine engine(&clock_, options, &sink_);
  absl::StatusOr<Decision> d = engine.Acquire("nope", "", 1);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->verdict, Verdict::kAllow);
  EXPECT_EQ(d->reason, Reason::kUnknownDependency);
  EXPECT_EQ(d->call_timeout, absl::Seconds(3));
  EXPECT_EQ(d->policy, nullptr);
  EXPECT_EQ(d->fallback(), nullptr);
  EXPECT_EQ(engine.Report("nope", "", d->permit_id, Outcome::kFailure,
                          absl::Seconds(1)),
            BreakerState::kClosed);
  EXPECT_FALSE(engine.Inspect("nope").ok());
  EXPECT_EQ(engine.UnknownDecisions(), std::make_pair(uint64_t{1}, uint64_t{0}));
}

TEST_F(EngineTest, UnknownDependencyRejectsWhenConfigured) {
  Engine::Options options;
  options.unknown_dependency = UnknownDependencyAction::kReject;
  Engine engine(&clock_, options, &sink_);
  absl::StatusOr<Decision> d = engine.Acquire("nope", "", 1);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->verdict, Verdict::kReject);
  EXPECT_EQ(d->reason, Reason::kUnknownDependency);
  EXPECT_TRUE(d->permit_id.empty());
  (void)engine.Acquire("nope-either", "", 1);
  EXPECT_EQ(engine.UnknownDecisions(), std::make_pair(uint64_t{0}, uint64_t{2}));
}

TEST_F(EngineTest, AllowCarriesPolicyFields) {
  PolicyConfig p = MakePolicy("inventory");
  p.call_timeout = absl::Seconds(2);
  p.version = 42;
  WithBucket(p, 100, 10);
  WithConcurrency(p, 5);
  engine_.PutPolicy(p);
  const Decision d = Acquire("inventory");
  EXPECT_EQ(d.verdict, Verdict::kAllow);
  EXPECT_EQ(d.reason, Reason::kNone);
  EXPECT_FALSE(d.permit_id.empty());
  EXPECT_EQ(d.call_timeout, absl::Seconds(2));
  EXPECT_EQ(d.remaining, 9);
  EXPECT_EQ(d.policy_version, 42u);
  EXPECT_EQ(d.http_status, 0);
  EXPECT_EQ(d.breaker_state, BreakerState::kClosed);
  ASSERT_NE(d.policy, nullptr);
  EXPECT_EQ(d.policy->name, "inventory");
  EXPECT_EQ(d.fallback(), nullptr);
  // Distinct permits per call.
  EXPECT_NE(Acquire("inventory").permit_id, d.permit_id);
}

TEST_F(EngineTest, RemainingWithoutRateLimitIsMinusOne) {
  PolicyConfig p = MakePolicy("a");
  WithConcurrency(p, 5);
  engine_.PutPolicy(p);
  EXPECT_EQ(Acquire("a").remaining, -1);
}

TEST_F(EngineTest, ZeroPermitsMeansOne) {
  PolicyConfig p = MakePolicy("a");
  WithBucket(p, 1, 10);
  engine_.PutPolicy(p);
  EXPECT_EQ(Acquire("a", "", 0).remaining, 9);
  EXPECT_EQ(Acquire("a", "", 3).remaining, 6);
  EXPECT_NEAR(Gates("a").tokens_available, 6, 1e-9);
}

TEST_F(EngineTest, PermitsThatCanNeverBeAdmittedAreInvalid) {
  PolicyConfig bucket = MakePolicy("bucket");
  WithBucket(bucket, 1000, 10);
  PolicyConfig window = MakePolicy("window");
  WithWindow(window, 5, absl::Seconds(1));
  PolicyConfig open = MakePolicy("open");
  WithConcurrency(open, 5);
  engine_.ReplacePolicies({bucket, window, open});

  EXPECT_EQ(engine_.Acquire("bucket", "", 11).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(engine_.Acquire("bucket", "", 10).ok());
  EXPECT_EQ(engine_.Acquire("window", "", 6).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(engine_.Acquire("window", "", 5).ok());
  EXPECT_EQ(engine_.Acquire("open", "", LivePolicy::kMaxPermits + 1)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<Decision> big =
      engine_.Acquire("open", "", LivePolicy::kMaxPermits);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->verdict, Verdict::kAllow);
  // The refused request spent nothing.
  EXPECT_NEAR(Gates("bucket").tokens_available, 0, 1e-9);
  ExpectConserved(Inspect("bucket").counters);
}

TEST_F(EngineTest, PutPolicyCreatesAndChangesKeepingState) {
  PolicyConfig p = MakePolicy("a");
  p.version = 1;
  WithBucket(p, 1, 10);
  engine_.PutPolicy(p);
  for (int i = 0; i < 4; ++i) Acquire("a");
  p.version = 2;
  p.call_timeout = absl::Seconds(5);
  engine_.PutPolicy(p);
  Decision d = Acquire("a");
  EXPECT_EQ(d.remaining, 5);
  EXPECT_EQ(d.policy_version, 2u);
  EXPECT_EQ(d.call_timeout, absl::Seconds(5));
  // A smaller burst caps the tokens kept.
  p.version = 3;
  WithBucket(p, 1, 3);
  engine_.PutPolicy(p);
  EXPECT_NEAR(Gates("a").tokens_available, 3, 1e-9);
  EXPECT_EQ(Inspect("a").policy->version, 3u);
  // Counters survive policy edits.
  EXPECT_EQ(Inspect("a").counters.acquired, 5u);
}

TEST_F(EngineTest, DeletePolicyMakesDependencyUnknown) {
  PolicyConfig p = MakePolicy("a");
  WithBucket(p, 1, 10);
  engine_.PutPolicy(p);
  Acquire("a");
  EXPECT_TRUE(engine_.DeletePolicy("a"));
  EXPECT_FALSE(engine_.DeletePolicy("a"));
  EXPECT_FALSE(engine_.DeletePolicy("never"));
  EXPECT_EQ(Acquire("a").reason, Reason::kUnknownDependency);
  EXPECT_FALSE(engine_.Inspect("a").ok());
  EXPECT_TRUE(engine_.Policies().empty());
  // Put back, it starts fresh.
  engine_.PutPolicy(p);
  EXPECT_EQ(Acquire("a").remaining, 9);
}

TEST_F(EngineTest, ReplacePoliciesKeepsStateOfNamesThatStay) {
  PolicyConfig a = MakePolicy("a");
  WithBucket(a, 1, 10);
  PolicyConfig b = MakePolicy("b");
  WithBreaker(b, 1);
  engine_.ReplacePolicies({a, b});
  for (int i = 0; i < 4; ++i) Acquire("a");
  Report("b", Acquire("b"), Outcome::kFailure);
  const GateStatus tripped = Gates("b");
  ASSERT_EQ(tripped.breaker_state, BreakerState::kOpen);

  a.version = 2;
  b.version = 2;
  PolicyConfig c = MakePolicy("c");
  WithBucket(c, 1, 2);
  engine_.ReplacePolicies({a, b, c});
  EXPECT_NEAR(Gates("a").tokens_available, 6, 1e-9);
  const GateStatus kept = Gates("b");
  EXPECT_EQ(kept.breaker_state, BreakerState::kOpen);
  EXPECT_EQ(kept.open_until, tripped.open_until);
  EXPECT_EQ(Acquire("b").reason, Reason::kCircuitOpen);
  EXPECT_EQ(Acquire("c").remaining, 1);
  // Still open only until its time.
  clock_.SetTime(tripped.open_until);
  EXPECT_EQ(Acquire("b").verdict, Verdict::kAllow);

  // Removed names go; put back later they start fresh.
  engine_.ReplacePolicies({c});
  EXPECT_EQ(Acquire("a").reason, Reason::kUnknownDependency);
  EXPECT_EQ(Acquire("b").reason, Reason::kUnknownDependency);
  EXPECT_FALSE(engine_.Inspect("a").ok());
  // c kept its state through both swaps (the 15 s refilled one token).
  EXPECT_EQ(Inspect("c").counters.acquired, 1u);
  EXPECT_EQ(Acquire("c").remaining, 1);
  engine_.ReplacePolicies({a, c});
  EXPECT_EQ(Acquire("a").remaining, 9);
  EXPECT_EQ(Inspect("a").counters.acquired, 1u);
}

TEST_F(EngineTest, PoliciesSortedByName) {
  engine_.ReplacePolicies({MakePolicy("c"), MakePolicy("a"), MakePolicy("b")});
  std::vector<std::string> names;
  for (const auto& p : engine_.Policies()) names.push_back(p->name);
  EXPECT_EQ(names, (std::vector<std::string>{"a", "b", "c"}));
}

TEST_F(EngineTest, StaleReportsAreHarmlessAndCounted) {
  PolicyConfig p = MakePolicy("a");
  WithConcurrency(p, 1);
  WithBreaker(p, 2);
  engine_.PutPolicy(p);
  const Decision d = Acquire("a");
  ASSERT_EQ(d.verdict, Verdict::kAllow);
  Report("a", d, Outcome::kFailure);
  EXPECT_EQ(Gates("a").in_flight, 0u);
  const Decision d2 = Acquire("a");
  ASSERT_EQ(d2.verdict, Verdict::kAllow);
  // Repeated and absent permits are stale; made-up ones, and a real one
  // named under another dependency, are refused by the seal. None changes
  // anything.
  Report("a", d, Outcome::kFailure);
  engine_.Report("a", "", PermitId{}, Outcome::kFailure, absl::ZeroDuration());
  engine_.Report("a", "", PermitId{123456789, 0}, Outcome::kFailure,
                 absl::ZeroDuration());
  engine_.Report("a", "", PermitId{d2.permit_id.serial + 1, d2.permit_id.mac},
                 Outcome::kFailure, absl::ZeroDuration());
  engine_.Report("elsewhere", "", d2.permit_id, Outcome::kFailure,
                 absl::ZeroDuration());
  engine_.Report("a", "other-key", d2.permit_id, Outcome::kFailure,
                 absl::ZeroDuration());
  EXPECT_EQ(engine_.PermitReportsRefused().forged, 4u);
  EXPECT_EQ(engine_.PermitReportsRefused().malformed, 0u);
  const LivePolicyStatus s = Inspect("a");
  EXPECT_EQ(s.counters.stale_reports, 2u);
  EXPECT_EQ(Outcomes(s.counters, Outcome::kFailure), 1u);
  ASSERT_TRUE(s.gates.has_value());
  EXPECT_EQ(s.gates->in_flight, 1u);  // d2 still holds its slot
  EXPECT_EQ(s.gates->breaker_state, BreakerState::kClosed);
  EXPECT_EQ(s.gates->window.calls, 1);
  Report("a", d2, Outcome::kSuccess);
  EXPECT_EQ(Gates("a").in_flight, 0u);
}

// The same policies set up the same way on two engines, as a replica does
// before and after a restart: the gate sets line up one to one.
void SetUpRestartPolicies(Engine& engine) {
  PolicyConfig inventory = MakePolicy("inventory");
  WithConcurrency(inventory, 1);
  WithBreaker(inventory, 1);
  PolicyConfig tenants = MakePolicy("tenants");
  tenants.per_key = true;
  tenants.max_keys = 10;
  engine.ReplacePolicies({inventory, tenants});
}

// The first permits of each policy (and of a key) on `engine`.
std::vector<PermitId> FirstPermitIds(Engine& engine) {
  std::vector<PermitId> ids;
  for (const char* key : {"t1", "t2"}) {
    absl::StatusOr<Decision> d = engine.Acquire("tenants", key, 1);
    EXPECT_TRUE(d.ok()) << d.status();
    if (d.ok()) ids.push_back(d->permit_id);
  }
  absl::StatusOr<Decision> d = engine.Acquire("inventory", "", 1);
  EXPECT_TRUE(d.ok()) << d.status();
  if (d.ok()) ids.push_back(d->permit_id);
  return ids;
}

TEST_F(EngineTest, SameSeedGivesTheSamePermitIds) {
  Engine a(&clock_, SeededOptions(42));
  Engine b(&clock_, SeededOptions(42));
  SetUpRestartPolicies(a);
  SetUpRestartPolicies(b);
  const std::vector<PermitId> ids = FirstPermitIds(a);
  EXPECT_EQ(FirstPermitIds(b), ids);
  for (const PermitId& id : ids) EXPECT_FALSE(id.empty());
}

TEST_F(EngineTest, OtherSeedGivesOtherPermitIds) {
  Engine a(&clock_, SeededOptions(42));
  Engine b(&clock_, SeededOptions(43));
  SetUpRestartPolicies(a);
  SetUpRestartPolicies(b);
  const std::vector<PermitId> from_a = FirstPermitIds(a);
  const std::vector<PermitId> from_b = FirstPermitIds(b);
  ASSERT_EQ(from_a.size(), from_b.size());
  for (size_t i = 0; i < from_a.size(); ++i) {
    EXPECT_NE(from_a[i].serial, from_b[i].serial) << i;
    EXPECT_NE(from_a[i].mac, from_b[i].mac) << i;
    EXPECT_FALSE(from_b[i].empty()) << i;
  }
  // And they stay distinct within each engine.
  for (size_t i = 0; i < from_b.size(); ++i) {
    for (size_t j = i + 1; j < from_b.size(); ++j) {
      EXPECT_NE(from_b[i].serial, from_b[j].serial);
    }
  }
}

// Without a seed each engine draws its own, so two process starts of the
// same replica do not share ids (a clash is about 2^-63 likely).
TEST_F(EngineTest, UnseededEnginesDrawTheirOwnSeed) {
  Engine a(&clock_, Engine::Options{});
  Engine b(&clock_, Engine::Options{});
  EXPECT_NE(a.options().permit_id_seed, 0u);
  EXPECT_NE(a.options().permit_id_seed, b.options().permit_id_seed);
  EXPECT_FALSE(a.options().permit_key.empty());
  EXPECT_NE(a.options().permit_key.k0, b.options().permit_key.k0);
  SetUpRestartPolicies(a);
  SetUpRestartPolicies(b);
  EXPECT_NE(FirstPermitIds(a), FirstPermitIds(b));
}

// A late report meant for the process before a restart reaches the new one:
// its seal is of the old process's key, so it is refused there: it neither
// frees a slot nor feeds the breaker.
TEST_F(EngineTest, ReportFromBeforeARestartIsRefused) {
  Engine before(&clock_, SeededOptions(42));
  Engine after(&clock_, SeededOptions(43));
  SetUpRestartPolicies(before);
  SetUpRestartPolicies(after);
  const std::vector<PermitId> old_ids = FirstPermitIds(before);
  const std::vector<PermitId> new_ids = FirstPermitIds(after);
  ASSERT_EQ(old_ids.size(), 3u);
  ASSERT_EQ(new_ids.size(), 3u);

  // inventory allows one call at a time and trips on one failure.
  EXPECT_EQ(after.Report("inventory", "", old_ids[2], Outcome::kFailure,
                         absl::Milliseconds(5)),
            BreakerState::kClosed);
  after.Report("tenants", "t1", old_ids[0], Outcome::kFailure,
               absl::Milliseconds(5));
  absl::StatusOr<LivePolicyStatus> inventory = after.Inspect("inventory");
  ASSERT_TRUE(inventory.ok()) << inventory.status();
  EXPECT_EQ(after.PermitReportsRefused().forged, 2u);
  EXPECT_EQ(inventory->counters.stale_reports, 0u);
  EXPECT_EQ(Outcomes(inventory->counters, Outcome::kFailure), 0u);
  ASSERT_TRUE(inventory->gates.has_value());
  EXPECT_EQ(inventory->gates->in_flight, 1u);
  EXPECT_EQ(inventory->gates->breaker_state, BreakerState::kClosed);
  absl::StatusOr<LivePolicyStatus> tenants = after.Inspect("tenants", "t1");
  ASSERT_TRUE(tenants.ok()) << tenants.status();
  EXPECT_EQ(tenants->counters.stale_reports, 0u);
  EXPECT_EQ(Outcomes(tenants->counters, Outcome::kFailure), 0u);
  // The slot is still held: the next call is refused.
  absl::StatusOr<Decision> refused = after.Acquire("inventory", "", 1);
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_EQ(refused->reason, Reason::kConcurrencyLimited);

  // The new process's own permit settles as usual.
  EXPECT_EQ(after.Report("inventory", "", new_ids[2], Outcome::kSuccess,
                         absl::Milliseconds(5)),
            BreakerState::kClosed);
  inventory = after.Inspect("inventory");
  ASSERT_TRUE(inventory.ok()) << inventory.status();
  ASSERT_TRUE(inventory->gates.has_value());
  EXPECT_EQ(inventory->gates->in_flight, 0u);
  EXPECT_EQ(Outcomes(inventory->counters, Outcome::kSuccess), 1u);
  EXPECT_EQ(inventory->counters.stale_reports, 0u);
  EXPECT_EQ(after.PermitReportsRefused().forged, 2u);
}

TEST_F(EngineTest, ReportReturnsBreakerState) {
  PolicyConfig p = MakePolicy("a");
  WithBreaker(p, 2);
  engine_.PutPolicy(p);
  const Decision d1 = Acquire("a");
  const Decision d2 = Acquire("a");
  EXPECT_EQ(Report("a", d1, Outcome::kFailure), BreakerState::kClosed);
  EXPECT_EQ(Report("a", d2, Outcome::kFailure), BreakerState::kOpen);
  PolicyConfig q = MakePolicy("nobreaker");
  engine_.PutPolicy(q);
  EXPECT_EQ(Report("nobreaker", Acquire("nobreaker"), Outcome::kFailure),
            BreakerState::kClosed);
}

// A long random mix of every kind of answer: the counters stay conserved
// and agree with what the callers saw.
TEST_F(EngineTest, CountersConservedUnderMixedTraffic) {
  PolicyConfig p = MakePolicy("mix");
  WithBucket(p, 50, 20);
  WithConcurrency(p, 8);
  WithBreaker(p, 4);
  p.breaker->open_duration = absl::Milliseconds(300);
  WithFallback(p, Bit(Reason::kCircuitOpen));
  engine_.PutPolicy(p);
  std::mt19937 rng(11);
  std::vector<Decision> held;
  uint64_t seen[4] = {0, 0, 0, 0};
  uint64_t reported[5] = {0, 0, 0, 0, 0};
  uint64_t acquired = 0;
  for (int i = 0; i < 20000; ++i) {
    clock_.Advance(absl::Microseconds(rng() % 20000));
    if (rng() % 2 == 0) {
      const Decision d = Acquire("mix");
      ++acquired;
      ++seen[static_cast<int>(d.verdict)];
      if (d.verdict == Verdict::kAllow) held.push_back(d);
    } else if (!held.empty()) {
      const size_t pick = rng() % held.size();
      const Outcome o = static_cast<Outcome>(1 + rng() % 4);
      Report("mix", held[pick], o);
      ++reported[static_cast<int>(o)];
      held.erase(held.begin() + pick);
    }
    if (rng() % 500 == 0) engine_.Sweep();
  }
  const DecisionCounters c = Inspect("mix").counters;
  ExpectConserved(c);
  EXPECT_EQ(c.acquired, acquired);
  EXPECT_EQ(c.allowed, seen[static_cast<int>(Verdict::kAllow)]);
  EXPECT_EQ(c.rejected, seen[static_cast<int>(Verdict::kReject)]);
  EXPECT_EQ(c.degraded, seen[static_cast<int>(Verdict::kDegrade)]);
  // Every kind of answer happened, so the mix tested something.
  EXPECT_GT(c.allowed, 0u);
  EXPECT_GT(c.rejected, 0u);
  EXPECT_GT(c.degraded, 0u);
  // Each report settles its permit or, when the permit already expired (as
  // a timeout), is stale; nothing is counted twice.
  uint64_t outcomes = 0, total_reported = 0;
  for (int o = 1; o <= 4; ++o) {
    outcomes += c.outcomes[o];
    total_reported += reported[o];
  }
  const uint64_t expired = outcomes + c.stale_reports - total_reported;
  EXPECT_GE(outcomes + c.stale_reports, total_reported);
  EXPECT_LE(c.stale_reports, expired);
  EXPECT_LE(expired, c.outcomes[static_cast<int>(Outcome::kTimeout)]);
  for (Outcome o : {Outcome::kSuccess, Outcome::kFailure, Outcome::kCancelled}) {
    EXPECT_LE(Outcomes(c, o), reported[static_cast<int>(o)]);
  }
}

}  // namespace
}  // namespace sluice::core
