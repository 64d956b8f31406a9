// SPDX-License-Identifier: Apache-2.0
// Warm start end to end (CTest label "integration"): a real standalone
// sluiced with --state-file learns an adaptive limit and trips a breaker, is
// stopped with SIGTERM and started again, and comes back with both; a
// corrupted file is ignored with a warning and the process starts cold.
//
// The adaptive limit moves once per real 1 s window, so these tests take a
// few seconds of wall time; they wait for conditions, never for a fixed time.

#include <signal.h>

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/app/state_file.h"
#include "tests/testing/sluiced_process.h"
#include "tests/testing/wait_for.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using testing::SluicedProcess;
using testing::WaitFor;

constexpr char kPolicies[] = R"(policies:
  - name: search
    adaptive_concurrency: {min_limit: 1, max_limit: 100, initial_limit: 5}
  - name: payments
    breaker:
      consecutive_failures: 3
      open_duration: 120s
      max_open_duration: 300s
)";

class WarmStartTest : public ::testing::Test {
 protected:
  std::string StatePath() const { return sluiced_.dir() + "/sluice.state"; }

  void Start() {
    std::string error;
    ASSERT_TRUE(sluiced_.Start(kPolicies, {"--state-file=" + StatePath()}, "",
                               &error))
        << error;
  }

  // Calls admitted at once on `dep`, none reported: the limit in force.
  // Handed back CANCELLED, which the adaptive limit does not judge.
  int AdmittedAtOnce(const std::string& dep) {
    std::vector<std::string> permits;
    while (permits.size() < 200) {
      const v1::AcquireResponse r = sluiced_.Acquire(dep);
      if (r.verdict() != v1::ALLOW) break;
      permits.push_back(r.permit_id());
    }
    for (const std::string& p : permits) {
      sluiced_.Report(dep, p, v1::CANCELLED);
    }
    return static_cast<int>(permits.size());
  }

  // Keeps the limit of `dep` reached with steady 5 ms calls until it admits
  // at least `target` at once (one step up per 1 s window); false after
  // 20 s.
  bool GrowTo(const std::string& dep, int target) {
    return WaitFor(
               [&] {
                 for (int round = 0; round < 3; ++round) {
                   std::vector<std::string> permits;
                   while (permits.size() < 200) {
                     const v1::AcquireResponse r = sluiced_.Acquire(dep);
                     if (r.verdict() != v1::ALLOW) break;
                     permits.push_back(r.permit_id());
                   }
                   for (const std::string& p : permits) {
                     sluiced_.Report(dep, p, v1::SUCCESS);
                   }
                 }
                 return AdmittedAtOnce(dep) >= target;
               },
               absl::Seconds(20), absl::Milliseconds(50))
        .has_value();
  }

  v1::DependencyState State(const std::string& dep) {
    v1::GetStateRequest request;
    request.set_dependency(dep);
    v1::DependencyState state;
    const grpc::Status status =
        sluiced_.admin()->GetState(sluiced_.Context().get(), request, &state);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return state;
  }

  void Trip(const std::string& dep) {
    for (int i = 0; i < 3; ++i) {
      const v1::AcquireResponse r = sluiced_.Acquire(dep);
      ASSERT_EQ(r.verdict(), v1::ALLOW);
      sluiced_.Report(dep, r.permit_id(), v1::FAILURE);
    }
    ASSERT_EQ(State(dep).breaker_state(), v1::OPEN);
  }

  // The steady limit of `dep` in the state file.
  uint32_t SavedSteadyLimit(const std::string& dep) {
    absl::StatusOr<app::SavedWarmState> saved =
        app::ReadStateFile(StatePath());
    EXPECT_TRUE(saved.ok()) << saved.status();
    if (!saved.ok()) return 0;
    for (const core::DependencyWarmState& d : saved->dependencies) {
      if (d.name == dep && !d.keys.empty() && d.keys[0].limit) {
        return d.keys[0].limit->steady_limit;
      }
    }
    return 0;
  }

  SluicedProcess sluiced_;
};

TEST_F(WarmStartTest, SigtermAndRestartKeepTheLearnedLimitAndTheOpenBreaker) {
  Start();
  EXPECT_THAT(sluiced_.Log(), HasSubstr("does not exist yet; starting cold"));
  ASSERT_EQ(AdmittedAtOnce("search"), 5) << "the initial limit";
  ASSERT_TRUE(GrowTo("search", 8)) << sluiced_.Log();
  Trip("payments");
  const v1::DependencyState open = State("payments");

  ASSERT_EQ(sluiced_.Terminate(), 0);
  EXPECT_THAT(sluiced_.Log(), HasSubstr("written at shutdown"));
  // The limit may have taken one more step after the last count; the file
  // has the one in force at shutdown.
  const uint32_t saved = SavedSteadyLimit("search");
  EXPECT_GE(saved, 8u);

  Start();
  EXPECT_THAT(sluiced_.Log(),
              HasSubstr("took the warm state of 2 dependencies"));
  EXPECT_EQ(AdmittedAtOnce("search"), static_cast<int>(saved));
  const v1::DependencyState after = State("payments");
  EXPECT_EQ(after.breaker_state(), v1::OPEN);
  EXPECT_EQ(after.open_until().seconds(), open.open_until().seconds());
  EXPECT_EQ(after.open_until().nanos(), open.open_until().nanos());
  EXPECT_EQ(after.trip_cause(), open.trip_cause());
  EXPECT_NE(sluiced_.Acquire("payments").verdict(), v1::ALLOW);
  EXPECT_EQ(sluiced_.Terminate(), 0);
}

TEST_F(WarmStartTest, ACorruptStateFileIsIgnoredAndReplaced) {
  Start();
  ASSERT_TRUE(GrowTo("search", 7)) << sluiced_.Log();
  Trip("payments");
  ASSERT_EQ(sluiced_.Terminate(), 0);
  {
    // One byte near the end of the body changes.
    std::fstream f(StatePath(),
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-10, std::ios::end);
    f.put('#');
  }

  Start();
  EXPECT_THAT(sluiced_.Log(),
              HasSubstr("ignored, starting cold: checksum mismatch"));
  EXPECT_EQ(AdmittedAtOnce("search"), 5);
  EXPECT_EQ(sluiced_.Acquire("payments").verdict(), v1::ALLOW);
  ASSERT_EQ(sluiced_.Terminate(), 0);
  // The shutdown wrote a good file over it.
  EXPECT_TRUE(app::ReadStateFile(StatePath()).ok());
}

TEST_F(WarmStartTest, AnEditedPolicyDoesNotTakeBackItsState) {
  Start();
  ASSERT_TRUE(GrowTo("search", 7)) << sluiced_.Log();
  Trip("payments");
  ASSERT_EQ(sluiced_.Terminate(), 0);

  // search's bounds changed between the runs (another digest); payments is
  // the same policy.
  std::string edited = kPolicies;
  const std::string from = "initial_limit: 5}";
  edited.replace(edited.find(from), from.size(), "initial_limit: 4}");
  std::string error;
  ASSERT_TRUE(sluiced_.Start(edited, {"--state-file=" + StatePath()}, "",
                             &error))
      << error;
  EXPECT_THAT(sluiced_.Log(),
              HasSubstr("the policy changed since it was saved (another "
                        "digest) (\"search\")"));
  EXPECT_THAT(sluiced_.Log(),
              HasSubstr("took the warm state of 1 dependency ("));
  EXPECT_EQ(AdmittedAtOnce("search"), 4);
  EXPECT_EQ(State("payments").breaker_state(), v1::OPEN);
  EXPECT_EQ(sluiced_.Terminate(), 0);
}

TEST_F(WarmStartTest, AFileThatIsNotAStateFileIsIgnored) {
  testing::WriteFile(StatePath(), "policies: []\n");
  Start();
  EXPECT_THAT(sluiced_.Log(),
              HasSubstr("ignored, starting cold: not a sluice state file"));
  EXPECT_EQ(AdmittedAtOnce("search"), 5);
  EXPECT_EQ(sluiced_.Terminate(), 0);
}

}  // namespace
}  // namespace sluice
