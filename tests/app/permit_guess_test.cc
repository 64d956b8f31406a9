// SPDX-License-Identifier: Apache-2.0
// Permit ids on the wire against a client that guesses them: through
// DecisionServiceImpl's per-call handlers (which every front end shares),
// on a fake clock, standalone and with reports forwarded between two
// replicas.

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "server/rpc/decision_convert.h"
#include "server/rpc/decision_service.h"
#include "tests/core/engine_test_util.h"
#include "tests/testing/fake_clock.h"

namespace sluice::rpc {
namespace {

using ::testing::HasSubstr;

// One concurrency slot, and a breaker that trips on the first failure.
core::PolicyConfig Inventory() {
  core::PolicyConfig p = core::MakePolicy("inventory");
  core::WithConcurrency(p, 1);
  core::WithBreaker(p, 1);
  return p;
}

class PermitGuessTest : public ::testing::Test {
 protected:
  PermitGuessTest() : engine_(&clock_, {}), service_(&engine_) {
    engine_.PutPolicy(Inventory());
  }

  std::string AcquireId() {
    v1::AcquireRequest request;
    request.set_dependency("inventory");
    v1::AcquireResponse response;
    EXPECT_TRUE(service_.AcquireOne(request, &response).ok());
    EXPECT_EQ(response.verdict(), v1::ALLOW);
    return response.permit_id();
  }

  absl::StatusOr<core::BreakerState> ReportFailure(const std::string& id) {
    v1::ReportResultRequest request;
    request.set_dependency("inventory");
    request.set_permit_id(id);
    request.set_outcome(v1::FAILURE);
    return service_.ReportOne(request);
  }

  core::GateStatus Gates() {
    absl::StatusOr<core::LivePolicyStatus> s = engine_.Inspect("inventory");
    EXPECT_TRUE(s.ok() && s->gates.has_value());
    return s.ok() && s->gates ? *s->gates : core::GateStatus{};
  }

  testing::FakeClock clock_;
  core::Engine engine_;
  DecisionServiceImpl service_;
};

// 10,000 wire ids around a held permit's: every other digit in each of the
// 32 positions, the serial's and the MAC's neighbours, every single-bit
// flip, and random ids, some with the real serial. Each is accepted and
// ignored; none frees the slot or trips the breaker. The real id does both.
TEST_F(PermitGuessTest, TenThousandGuessesAroundAHeldIdSettleNothing) {
  const std::string real = AcquireId();
  ASSERT_EQ(real.size(), kPermitIdDigits);
  const core::PermitId id = *ParsePermitId(real);

  absl::flat_hash_set<std::string> guesses;
  const std::string hex = "0123456789abcdef";
  for (size_t i = 0; i < real.size(); ++i) {
    for (char c : hex) {
      std::string g = real;
      g[i] = c;
      guesses.insert(g);
    }
  }
  for (uint64_t d = 1; d <= 1500; ++d) {
    guesses.insert(FormatPermitId({id.serial + d, id.mac}));
    guesses.insert(FormatPermitId({id.serial - d, id.mac}));
    guesses.insert(FormatPermitId({id.serial, id.mac + d}));
    guesses.insert(FormatPermitId({id.serial, id.mac - d}));
  }
  for (int bit = 0; bit < 64; ++bit) {
    guesses.insert(FormatPermitId({id.serial ^ (uint64_t{1} << bit), id.mac}));
    guesses.insert(FormatPermitId({id.serial, id.mac ^ (uint64_t{1} << bit)}));
  }
  std::mt19937_64 random(25);
  while (guesses.size() < 10001) {
    const uint64_t serial = guesses.size() % 2 ? id.serial : random();
    guesses.insert(FormatPermitId({serial, random()}));
  }
  guesses.erase(real);
  ASSERT_EQ(guesses.size(), 10000u);

  for (const std::string& guess : guesses) {
    absl::StatusOr<core::BreakerState> state = ReportFailure(guess);
    ASSERT_TRUE(state.ok()) << guess << ": " << state.status();
    EXPECT_EQ(*state, core::BreakerState::kClosed) << guess;
  }
  EXPECT_EQ(engine_.PermitReportsRefused().forged, 10000u);
  EXPECT_EQ(Gates().in_flight, 1u);
  EXPECT_EQ(Gates().window.calls, 0);
  EXPECT_EQ(Gates().breaker_state, core::BreakerState::kClosed);

  absl::StatusOr<core::BreakerState> state = ReportFailure(real);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(*state, core::BreakerState::kOpen);
  EXPECT_EQ(Gates().in_flight, 0u);
  EXPECT_EQ(engine_.PermitReportsRefused().forged, 10000u);
}

TEST_F(PermitGuessTest, MalformedIdsAreRefusedAndCounted) {
  const std::string real = AcquireId();
  // The decimal ids of earlier versions, and other junk.
  for (const std::string& bad : {std::string("4947054341749086717"),
                                real.substr(1), real + "0", std::string("x")}) {
    absl::StatusOr<core::BreakerState> state = ReportFailure(bad);
    EXPECT_EQ(state.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(state.status().message(), HasSubstr("permit_id")) << bad;
  }
  v1::ReportResultsRequest batch;
  for (const std::string& id : {real, std::string("nope")}) {
    v1::ReportResultRequest* r = batch.add_reports();
    r->set_dependency("inventory");
    r->set_permit_id(id);
    r->set_outcome(v1::FAILURE);
  }
  v1::ReportResultsResponse answer;
  EXPECT_THAT(service_.ReportMany(batch, &answer).message(),
              HasSubstr("reports[1]: permit_id"));
  EXPECT_EQ(engine_.PermitReportsRefused().malformed, 5u);
  EXPECT_EQ(engine_.PermitReportsRefused().forged, 0u);
  // All or nothing: the valid one in the refused batch was not applied.
  EXPECT_EQ(Gates().in_flight, 1u);
  // A bad outcome is not a bad permit id.
  v1::ReportResultRequest no_outcome;
  no_outcome.set_dependency("inventory");
  no_outcome.set_permit_id(real);
  EXPECT_FALSE(service_.ReportOne(no_outcome).ok());
  EXPECT_EQ(engine_.PermitReportsRefused().malformed, 5u);
}

// A permit reported under another key or dependency than it was issued
// for does not verify.
TEST_F(PermitGuessTest, APermitSettlesOnlyItsOwnDependencyAndKey) {
  core::PolicyConfig other = Inventory();
  other.name = "search";
  engine_.PutPolicy(other);
  const std::string real = AcquireId();
  v1::ReportResultRequest request;
  request.set_dependency("search");
  request.set_permit_id(real);
  request.set_outcome(v1::FAILURE);
  EXPECT_TRUE(service_.ReportOne(request).ok());
  request.set_dependency("inventory");
  request.set_key("another-key");
  EXPECT_TRUE(service_.ReportOne(request).ok());
  EXPECT_EQ(engine_.PermitReportsRefused().forged, 2u);
  EXPECT_EQ(Gates().in_flight, 1u);
}

// Cluster mode: replica b receives reports for replica a's permit and
// forwards them as they came; a checks the MAC. A guessed id forwarded to
// a settles nothing there; the real one settles.
TEST(PermitForwardingTest, TheIssuerChecksForwardedIds) {
  testing::FakeClock clock;
  core::Engine engine_a(&clock, {});
  core::Engine engine_b(&clock, {});
  engine_a.PutPolicy(Inventory());
  engine_b.PutPolicy(Inventory());
  DecisionServiceImpl a(&engine_a);
  DecisionServiceImpl b(&engine_b);
  std::vector<core::ForwardedReport> to_a;
  a.EnableForwarding("a", [](core::ForwardedReport) { return true; });
  b.EnableForwarding("b", [&to_a](core::ForwardedReport f) {
    to_a.push_back(std::move(f));
    return true;
  });

  v1::AcquireRequest acquire;
  acquire.set_dependency("inventory");
  v1::AcquireResponse granted;
  ASSERT_TRUE(a.AcquireOne(acquire, &granted).ok());
  const std::string real = granted.permit_id();
  ASSERT_EQ(real.substr(kPermitIdDigits), "@a");
  const core::PermitId id = *ParsePermitId(real);

  v1::ReportResultRequest report;
  report.set_dependency("inventory");
  report.set_outcome(v1::FAILURE);
  for (uint64_t d = 1; d <= 100; ++d) {
    report.set_permit_id(FormatPermitId({id.serial + d, id.mac}) + "@a");
    ASSERT_TRUE(b.ReportOne(report).ok());
  }
  report.set_permit_id(real);
  ASSERT_TRUE(b.ReportOne(report).ok());
  ASSERT_EQ(to_a.size(), 101u);
  EXPECT_EQ(to_a.back().permit_id, id);
  // What a's sync loop does with its inbox.
  core::BreakerState last = core::BreakerState::kClosed;
  for (size_t i = 0; i < to_a.size(); ++i) {
    const core::ForwardedReport& f = to_a[i];
    if (i + 1 == to_a.size()) {
      EXPECT_EQ(engine_a.PermitReportsRefused().forged, 100u);
      absl::StatusOr<core::LivePolicyStatus> s = engine_a.Inspect("inventory");
      ASSERT_TRUE(s.ok());
      EXPECT_EQ(s->gates->in_flight, 1u);
    }
    last = engine_a.Report(f.dependency, f.key, f.permit_id, f.outcome,
                           f.latency);
  }
  EXPECT_EQ(last, core::BreakerState::kOpen);
  EXPECT_EQ(engine_a.PermitReportsRefused().forged, 100u);
  EXPECT_EQ(engine_b.PermitReportsRefused().forged, 0u);
}

}  // namespace
}  // namespace sluice::rpc
