// SPDX-License-Identifier: Apache-2.0
// Cluster warm start end to end (CTest label "integration"): two real
// sluiced processes on a real redis-server. Replica A learns an adaptive
// limit from its own traffic; replica B, started fresh, starts from A's
// steady limit on its first ticks, before it has seen a call. Then A goes
// (SIGTERM) and a new replica C, alone, still starts from it.
//
// The limit moves once per real 1 s window, so this takes seconds of wall
// time; it waits for conditions, never for a fixed time.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/sluiced_process.h"
#include "tests/testing/wait_for.h"

namespace sluice {
namespace {

using testing::RedisServer;
using testing::SluicedProcess;
using testing::WaitFor;

constexpr char kPolicies[] = R"(policies:
  - name: search
    adaptive_concurrency: {min_limit: 1, max_limit: 100, initial_limit: 5}
)";

// Calls admitted at once on `dep`, none reported: the limit in force.
// Handed back CANCELLED, which the adaptive limit does not judge.
int AdmittedAtOnce(SluicedProcess& r, const std::string& dep) {
  std::vector<std::string> permits;
  while (permits.size() < 200) {
    const v1::AcquireResponse a = r.Acquire(dep);
    if (a.verdict() != v1::ALLOW) break;
    permits.push_back(a.permit_id());
  }
  for (const std::string& p : permits) r.Report(dep, p, v1::CANCELLED);
  return static_cast<int>(permits.size());
}

// Keeps the limit reached with steady 5 ms calls until it admits at least
// `target` at once; then the count. 0 after 20 s.
int GrowTo(SluicedProcess& r, const std::string& dep, int target) {
  int admitted = 0;
  WaitFor(
      [&] {
        for (int round = 0; round < 3; ++round) {
          std::vector<std::string> permits;
          while (permits.size() < 200) {
            const v1::AcquireResponse a = r.Acquire(dep);
            if (a.verdict() != v1::ALLOW) break;
            permits.push_back(a.permit_id());
          }
          for (const std::string& p : permits) r.Report(dep, p, v1::SUCCESS);
        }
        admitted = AdmittedAtOnce(r, dep);
        return admitted >= target;
      },
      absl::Seconds(20), absl::Milliseconds(50));
  return admitted >= target ? admitted : 0;
}

class WarmProcessTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(redis_.Start()); }

  void StartReplica(SluicedProcess* p, const std::string& id) {
    std::string error;
    ASSERT_TRUE(p->Start(kPolicies,
                         {"--redis=" + redis_.address(), "--sync-interval=1s",
                          "--replica-id=" + id, "--redis-timeout=200ms"},
                         "", &error))
        << error;
  }

  RedisServer redis_;
};

TEST_F(WarmProcessTest, AFreshReplicaStartsFromTheLearnedSteadyLimit) {
  SluicedProcess a, b, c;
  StartReplica(&a, "a");
  ASSERT_EQ(AdmittedAtOnce(a, "search"), 5) << "the initial limit";
  const int learned = GrowTo(a, "search", 9);
  ASSERT_GE(learned, 9) << a.Log();
  // A stops sending calls: its limit stays where it is, and its next
  // ticks store it.
  ASSERT_TRUE(testing::WaitForSyncTicks({&a}, 2, absl::Seconds(10)));
  const int steady = AdmittedAtOnce(a, "search");

  StartReplica(&b, "b");
  // Started cold, B takes A's steady limit within a tick or two (it has
  // ticked once before serving; the next tick follows within 1 s).
  const bool warmed = WaitFor([&] { return AdmittedAtOnce(b, "search") > 5; },
                              absl::Seconds(5))
                          .has_value();
  ASSERT_TRUE(warmed) << b.Log();
  EXPECT_EQ(AdmittedAtOnce(b, "search"), steady);

  // A rollout: A and B go; C starts alone and still starts from there.
  ASSERT_EQ(a.Terminate(), 0);
  ASSERT_EQ(b.Terminate(), 0);
  StartReplica(&c, "c");
  const bool c_warmed =
      WaitFor([&] { return AdmittedAtOnce(c, "search") > 5; },
              absl::Seconds(5))
          .has_value();
  ASSERT_TRUE(c_warmed) << c.Log();
  EXPECT_EQ(AdmittedAtOnce(c, "search"), steady);
  EXPECT_EQ(c.Terminate(), 0);
}

}  // namespace
}  // namespace sluice
