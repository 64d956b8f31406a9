// SPDX-License-Identifier: Apache-2.0
// Engine::AcquireAll: calls admitted together or not at all.
#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "tests/core/engine_test_util.h"

namespace sluice::core {
namespace {

using ::testing::HasSubstr;

class EngineAcquireAllTest : public EngineTest {
 protected:
  Engine::JointDecision AcquireAll(const std::vector<Engine::Call>& calls) {
    absl::StatusOr<Engine::JointDecision> joint =
        engine_.AcquireAll(calls, Unreported::kRelease);
    EXPECT_TRUE(joint.ok()) << joint.status();
    return joint.ok() ? *std::move(joint) : Engine::JointDecision{};
  }

  // Spends every token of `dependency`'s bucket.
  void Exhaust(absl::string_view dependency) {
    while (Acquire(dependency).verdict == Verdict::kAllow) {
    }
  }
};

TEST_F(EngineAcquireAllTest, AdmitsAllAndEachHoldsItsPermit) {
  PolicyConfig a = MakePolicy("a");
  WithConcurrency(WithBucket(a, 10, 10), 5);
  PolicyConfig b = MakePolicy("b");
  WithConcurrency(b, 5);
  engine_.PutPolicy(a);
  engine_.PutPolicy(b);

  const Engine::JointDecision joint =
      AcquireAll({{"a", "", 3}, {"b", "", 1}});
  EXPECT_TRUE(joint.admitted);
  ASSERT_EQ(joint.decisions.size(), 2u);
  for (const Decision& d : joint.decisions) {
    EXPECT_EQ(d.verdict, Verdict::kAllow);
    EXPECT_FALSE(d.permit_id.empty());
    EXPECT_EQ(d.policy, nullptr);
  }
  EXPECT_EQ(joint.decisions[0].remaining, 7);
  EXPECT_EQ(joint.decisions[1].remaining, -1);
  EXPECT_EQ(Gates("a").in_flight, 1u);
  EXPECT_EQ(Gates("b").in_flight, 1u);
  // The permits are real ones: reporting them frees the slots.
  Report("a", joint.decisions[0], Outcome::kSuccess);
  Report("b", joint.decisions[1], Outcome::kSuccess);
  EXPECT_EQ(Gates("a").in_flight, 0u);
  EXPECT_EQ(Gates("b").in_flight, 0u);
}

TEST_F(EngineAcquireAllTest, OneRefusedCancelsTheOthersTokensStaySpent) {
  PolicyConfig a = MakePolicy("a");
  WithConcurrency(WithBucket(a, 10, 10), 5);
  PolicyConfig b = MakePolicy("b");
  WithBucket(b, 1, 1, absl::Minutes(1));
  engine_.PutPolicy(a);
  engine_.PutPolicy(b);
  Exhaust("b");

  const Engine::JointDecision joint =
      AcquireAll({{"a", "k", 2}, {"b", "", 1}});
  EXPECT_FALSE(joint.admitted);
  ASSERT_EQ(joint.decisions.size(), 2u);
  // Each call keeps its own answer; the admitted one holds nothing now.
  EXPECT_EQ(joint.decisions[0].verdict, Verdict::kAllow);
  EXPECT_EQ(joint.decisions[0].remaining, 8);
  EXPECT_TRUE(joint.decisions[0].permit_id.empty());
  EXPECT_EQ(joint.decisions[1].verdict, Verdict::kReject);
  EXPECT_EQ(joint.decisions[1].reason, Reason::kRateLimited);
  EXPECT_GT(joint.decisions[1].retry_after, absl::ZeroDuration());

  const LivePolicyStatus s = Inspect("a");
  ASSERT_TRUE(s.gates.has_value());
  EXPECT_EQ(s.gates->in_flight, 0u);
  EXPECT_DOUBLE_EQ(s.gates->tokens_available, 8);
  EXPECT_EQ(Outcomes(s.counters, Outcome::kCancelled), 1u);
  EXPECT_EQ(s.counters.allowed, 1u);
  ExpectConserved(s.counters);
}

TEST_F(EngineAcquireAllTest, CancelledProbeFreesItsSlot) {
  PolicyConfig a = MakePolicy("a");
  WithBreaker(a, 1);  // one probe in HALF_OPEN
  PolicyConfig b = MakePolicy("b");
  WithBucket(b, 1, 1, absl::Minutes(10));
  engine_.PutPolicy(a);
  engine_.PutPolicy(b);
  Report("a", Acquire("a"), Outcome::kFailure);
  clock_.Advance(absl::Seconds(15));
  Exhaust("b");

  const Engine::JointDecision joint = AcquireAll({{"a", "", 1}, {"b", "", 1}});
  EXPECT_FALSE(joint.admitted);
  EXPECT_EQ(joint.decisions[0].verdict, Verdict::kAllow);
  EXPECT_EQ(joint.decisions[0].breaker_state, BreakerState::kHalfOpen);
  EXPECT_EQ(Gates("a").probes_in_flight, 0u);
  // The probe slot is free again: the next caller probes, and its success
  // closes the breaker (the cancelled probe judged nothing).
  const Decision probe = Acquire("a");
  ASSERT_EQ(probe.verdict, Verdict::kAllow);
  EXPECT_EQ(Gates("a").probes_in_flight, 1u);
  EXPECT_EQ(Report("a", probe, Outcome::kSuccess), BreakerState::kClosed);
}

TEST_F(EngineAcquireAllTest, DegradedCallRefusesTheRequest) {
  PolicyConfig a = MakePolicy("a");
  WithConcurrency(a, 5);
  PolicyConfig b = MakePolicy("b");
  WithFallback(WithBucket(b, 1, 1, absl::Minutes(1)),
               Bit(Reason::kRateLimited));
  engine_.PutPolicy(a);
  engine_.PutPolicy(b);
  Exhaust("b");

  const Engine::JointDecision joint = AcquireAll({{"a", "", 1}, {"b", "", 1}});
  EXPECT_FALSE(joint.admitted);
  EXPECT_EQ(joint.decisions[1].verdict, Verdict::kDegrade);
  EXPECT_EQ(joint.decisions[1].reason, Reason::kRateLimited);
  // The caller names the fallback from its own view of the policy.
  EXPECT_EQ(joint.decisions[1].policy, nullptr);
  EXPECT_TRUE(joint.decisions[0].permit_id.empty());
  EXPECT_EQ(Gates("a").in_flight, 0u);
}

TEST_F(EngineAcquireAllTest, NoCallsIsAdmitted) {
  const Engine::JointDecision joint = AcquireAll({});
  EXPECT_TRUE(joint.admitted);
  EXPECT_TRUE(joint.decisions.empty());
}

TEST_F(EngineAcquireAllTest, RepeatedCallsEachTakeTheirOwnSlot) {
  PolicyConfig a = MakePolicy("a");
  WithConcurrency(a, 2);
  engine_.PutPolicy(a);

  Engine::JointDecision joint = AcquireAll({{"a", "k", 1}, {"a", "k", 1}});
  EXPECT_TRUE(joint.admitted);
  EXPECT_NE(joint.decisions[0].permit_id, joint.decisions[1].permit_id);
  EXPECT_EQ(Gates("a").in_flight, 2u);
  Report("a", joint.decisions[0], Outcome::kSuccess, absl::Milliseconds(5),
         "k");
  Report("a", joint.decisions[1], Outcome::kSuccess, absl::Milliseconds(5),
         "k");

  // Three of the same with room for two: the third is refused and the
  // first two give their slots back.
  joint = AcquireAll({{"a", "k", 1}, {"a", "k", 1}, {"a", "k", 1}});
  EXPECT_FALSE(joint.admitted);
  EXPECT_EQ(joint.decisions[2].reason, Reason::kConcurrencyLimited);
  EXPECT_EQ(Gates("a").in_flight, 0u);
  EXPECT_EQ(Outcomes(Inspect("a").counters, Outcome::kCancelled), 2u);
}

TEST_F(EngineAcquireAllTest, PermitsNoPolicyCanAdmitAreARefusal) {
  PolicyConfig a = MakePolicy("a");
  WithConcurrency(a, 5);
  PolicyConfig b = MakePolicy("b");
  WithBucket(b, 10, 10);
  engine_.PutPolicy(a);
  engine_.PutPolicy(b);

  Engine::JointDecision joint = AcquireAll({{"a", "", 1}, {"b", "", 11}});
  EXPECT_FALSE(joint.admitted);
  EXPECT_EQ(joint.decisions[1].verdict, Verdict::kReject);
  EXPECT_EQ(joint.decisions[1].reason, Reason::kRateLimited);
  EXPECT_EQ(joint.decisions[1].remaining, 0);
  EXPECT_EQ(Gates("a").in_flight, 0u);
  // Nothing was taken from b's bucket.
  EXPECT_DOUBLE_EQ(Gates("b").tokens_available, 10);

  // Beyond what any policy admits, the same.
  joint = AcquireAll({{"b", "", LivePolicy::kMaxPermits + 1}});
  EXPECT_FALSE(joint.admitted);
  EXPECT_EQ(joint.decisions[0].reason, Reason::kRateLimited);

  // A shadow policy lets it through, as it does its other refusals.
  b.shadow = true;
  engine_.PutPolicy(b);
  joint = AcquireAll({{"a", "", 1}, {"b", "", 11}});
  EXPECT_TRUE(joint.admitted);
  EXPECT_EQ(joint.decisions[1].verdict, Verdict::kAllow);
  EXPECT_EQ(joint.decisions[1].reason, Reason::kShadow);
  EXPECT_EQ(Gates("a").in_flight, 1u);
}

TEST_F(EngineAcquireAllTest, UnknownDependencyFollowsTheEngineOption) {
  PolicyConfig a = MakePolicy("a");
  WithConcurrency(a, 5);
  engine_.PutPolicy(a);
  const Engine::JointDecision joint =
      AcquireAll({{"a", "", 1}, {"nobody", "", 1}});
  EXPECT_TRUE(joint.admitted);
  EXPECT_EQ(joint.decisions[1].reason, Reason::kUnknownDependency);
  EXPECT_TRUE(joint.decisions[1].permit_id.empty());

  Engine::Options options = SeededOptions();
  options.unknown_dependency = UnknownDependencyAction::kReject;
  Engine strict(&clock_, options);
  strict.PutPolicy(a);
  absl::StatusOr<Engine::JointDecision> refused = strict.AcquireAll(
      {{"a", "", 1}, {"nobody", "", 1}}, Unreported::kRelease);
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_FALSE(refused->admitted);
  EXPECT_EQ(refused->decisions[1].verdict, Verdict::kReject);
  absl::StatusOr<LivePolicyStatus> s = strict.Inspect("a");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->gates->in_flight, 0u);
}

TEST_F(EngineAcquireAllTest, LongListIsAllOrNothing) {
  PolicyConfig a = MakePolicy("a");
  WithConcurrency(a, 63);
  engine_.PutPolicy(a);
  std::vector<Engine::Call> calls(64, Engine::Call{"a", "", 1});
  int decided = 0;
  absl::StatusOr<Engine::JointDecision> joint = engine_.AcquireAll(
      calls, Unreported::kRelease, [&decided] { ++decided; });
  ASSERT_TRUE(joint.ok()) << joint.status();
  EXPECT_EQ(decided, 64);
  EXPECT_FALSE(joint->admitted);
  EXPECT_EQ(joint->decisions[62].verdict, Verdict::kAllow);
  EXPECT_EQ(joint->decisions[63].reason, Reason::kConcurrencyLimited);
  EXPECT_EQ(Gates("a").in_flight, 0u);
  EXPECT_EQ(Outcomes(Inspect("a").counters, Outcome::kCancelled), 63u);

  // 63 fit.
  calls.resize(63);
  joint = engine_.AcquireAll(calls, Unreported::kRelease);
  ASSERT_TRUE(joint.ok());
  EXPECT_TRUE(joint->admitted);
  EXPECT_EQ(Gates("a").in_flight, 63u);
}

TEST_F(EngineAcquireAllTest, MoreThanMaxCallsDecidesNothing) {
  PolicyConfig a = MakePolicy("a");
  WithBucket(a, 1e6, 1e6);
  engine_.PutPolicy(a);
  std::vector<Engine::Call> calls(Engine::kMaxCalls + 1,
                                  Engine::Call{"a", "", 1});
  int decided = 0;
  absl::StatusOr<Engine::JointDecision> joint = engine_.AcquireAll(
      calls, Unreported::kRelease, [&decided] { ++decided; });
  ASSERT_FALSE(joint.ok());
  EXPECT_EQ(joint.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(joint.status().message(), HasSubstr("at most 1000"));
  EXPECT_EQ(decided, 0);
  EXPECT_EQ(Inspect("a").counters.acquired, 0u);

  calls.pop_back();
  joint = engine_.AcquireAll(calls, Unreported::kRelease);
  ASSERT_TRUE(joint.ok());
  EXPECT_TRUE(joint->admitted);
  EXPECT_EQ(Inspect("a").counters.acquired, Engine::kMaxCalls);
}

}  // namespace
}  // namespace sluice::core
