// SPDX-License-Identifier: Apache-2.0
// The grant tree on real processes: a real redis-server, two central
// sluiced replicas on it, and twelve leaves (sluiced --upstream), half of
// them following each central replica first. Measured from outside, the way
// an operator would: admitted calls per second at the leaves, RPC errors, a
// breaker trip's reach, the CPU of an idle leaf from /proc.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/acquire_load.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/sluiced_process.h"
#include "tests/testing/wait_for.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using testing::AcquireLoad;
using testing::DriveAcquire;
using testing::RedisServer;
using testing::SluicedProcess;
using testing::WaitFor;

constexpr int kLeaves = 12;
constexpr absl::Duration kTick = absl::Seconds(1);
// The stale period: 3 ticks (SyncLoop::Options::stale_ticks).
const absl::Duration kGrace = 3 * kTick;
constexpr int kRate = 100;
constexpr int kBurst = 20;

constexpr char kPolicies[] = R"(policies:
  - name: payments
    rate_limit: { rate: 100, per: 1s, burst: 20, scope: CLUSTER }
  - name: fragile
    call_timeout: 5s
    breaker: { consecutive_failures: 3, open_duration: 60s }
)";

// CPU time (user + system) a process has used, from /proc/PID/stat.
absl::Duration CpuTime(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/stat"));
  std::stringstream text;
  text << in.rdbuf();
  const std::string stat = text.str();
  // Fields after the command name, which is in parentheses and may hold
  // spaces: state is field 3, utime 14 and stime 15.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return absl::ZeroDuration();
  const std::vector<std::string> fields =
      absl::StrSplit(stat.substr(close + 2), ' ');
  if (fields.size() < 13) return absl::ZeroDuration();
  const double ticks = std::stod(fields[11]) + std::stod(fields[12]);
  return absl::Seconds(ticks / static_cast<double>(sysconf(_SC_CLK_TCK)));
}

// Most admitted in any one second of [from, to), and the total.
struct Window {
  int64_t total = 0;
  int64_t worst_second = 0;
};
Window Measure(std::vector<absl::Time> all, absl::Time from, absl::Time to) {
  std::sort(all.begin(), all.end());
  Window w;
  size_t lo = 0;
  for (size_t hi = 0; hi < all.size(); ++hi) {
    if (all[hi] < from || all[hi] >= to) continue;
    ++w.total;
    while (all[lo] < from || all[hi] - all[lo] >= absl::Seconds(1)) ++lo;
    w.worst_second = std::max<int64_t>(w.worst_second, hi - lo + 1);
  }
  return w;
}

class TreeProcessTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(redis_.Start()); }

  // A central replica on the test's Redis, seeding `policies`.
  void StartCentral(const std::string& name, const std::string& policies) {
    centrals_.push_back(std::make_unique<SluicedProcess>());
    std::string error;
    ASSERT_TRUE(centrals_.back()->Start(
        policies,
        {"--redis=" + redis_.address(),
         "--sync-interval=" + absl::FormatDuration(kTick),
         "--replica-id=" + name, "--redis-timeout=200ms"},
        "", &error))
        << error;
  }

  // A leaf of `target` (no policies file: it takes them from upstream).
  void StartLeaf(const std::string& name, const std::string& target) {
    leaves_.push_back(std::make_unique<SluicedProcess>());
    std::string error;
    ASSERT_TRUE(leaves_.back()->Start(
        "", {"--policies=", "--upstream=" + target,
             "--sync-interval=" + absl::FormatDuration(kTick),
             "--replica-id=" + name},
        "", &error))
        << error;
  }

  // Waits until every leaf's upstream answers and it holds `policies`.
  void WaitLeavesReady(int policies) {
    for (size_t i = 0; i < leaves_.size(); ++i) {
      ASSERT_TRUE(WaitFor(
          [&] {
            return leaves_[i]->Metric("sluice_store_up") == 1 &&
                   leaves_[i]->Metric("sluice_policies") == policies;
          },
          absl::Seconds(10)))
          << "leaf " << i << " never leased its policies:\n"
          << leaves_[i]->Log();
    }
  }

  // GetState's grant_source: "upstream TARGET (peer ADDRESS)" on a leaf.
  std::string GrantSource(SluicedProcess& p, const std::string& dep) {
    v1::GetStateRequest request;
    request.set_dependency(dep);
    v1::DependencyState state;
    const grpc::Status s =
        p.admin()->GetState(p.Context().get(), request, &state);
    return s.ok() ? state.grant_source() : s.error_message();
  }

  v1::BreakerState BreakerOf(SluicedProcess& p, const std::string& dep) {
    v1::GetStateRequest request;
    request.set_dependency(dep);
    v1::DependencyState state;
    const grpc::Status s =
        p.admin()->GetState(p.Context().get(), request, &state);
    return s.ok() ? state.breaker_state() : v1::BREAKER_STATE_UNSPECIFIED;
  }

  RedisServer redis_;
  std::vector<std::unique_ptr<SluicedProcess>> centrals_;
  std::vector<std::unique_ptr<SluicedProcess>> leaves_;
};

TEST_F(TreeProcessTest, TwelveLeavesUnderTwoCentralReplicas) {
  ASSERT_NO_FATAL_FAILURE(StartCentral("central-a", kPolicies));
  ASSERT_NO_FATAL_FAILURE(StartCentral("central-b", kPolicies));
  const std::string a = centrals_[0]->target(), b = centrals_[1]->target();
  // Every leaf names both central replicas; half list each one first, so
  // that each follows one and can move to the other.
  for (int i = 0; i < kLeaves; ++i) {
    ASSERT_NO_FATAL_FAILURE(StartLeaf(
        absl::StrCat("leaf-", i),
        i % 2 == 0 ? absl::StrCat("ipv4:", a, ",", b)
                   : absl::StrCat("ipv4:", b, ",", a)));
  }
  ASSERT_NO_FATAL_FAILURE(WaitLeavesReady(2));
  // Which central replica each leaf follows (its first address, unless
  // that one was slow to answer its first connect).
  std::vector<bool> under_a(kLeaves);
  int leaves_of_a = 0;
  for (int i = 0; i < kLeaves; ++i) {
    under_a[i] = absl::StrContains(GrantSource(*leaves_[i], "payments"),
                                   "(peer ipv4:" + a + ")");
    leaves_of_a += under_a[i];
  }
  EXPECT_TRUE(WaitFor(
      [&] {
        return centrals_[0]->Metric("sluice_leaves") == leaves_of_a &&
               centrals_[1]->Metric("sluice_leaves") == kLeaves - leaves_of_a;
      },
      2 * kTick))
      << "central A serves " << centrals_[0]->Metric("sluice_leaves")
      << " leaves, B " << centrals_[1]->Metric("sluice_leaves")
      << "; the leaves say " << leaves_of_a << " and "
      << kLeaves - leaves_of_a;
  std::printf("[tree] %d leaves follow central A, %d central B\n",
              leaves_of_a, kLeaves - leaves_of_a);
  ASSERT_GT(leaves_of_a, 0) << "no leaf under the central replica to kill";

  // ---- What an operator sees on a leaf.
  {
    const std::string ctl = absl::StrCat(
        testing::kSluicectlPath, " --target ", leaves_[0]->admin_target());
    const testing::CommandResult state =
        testing::RunCommand(ctl + " state payments");
    EXPECT_EQ(state.exit_code, 0) << state.output;
    EXPECT_THAT(state.output, HasSubstr("grants from"));
    EXPECT_THAT(state.output, HasSubstr("upstream ipv4:" + a));
    const testing::CommandResult write =
        testing::RunCommand(ctl + " delete payments");
    EXPECT_NE(write.exit_code, 0) << write.output;
    EXPECT_THAT(write.output, HasSubstr("this sluiced is a leaf of ipv4:" + a));
    const testing::CommandResult central = testing::RunCommand(absl::StrCat(
        testing::kSluicectlPath, " --target ", centrals_[1]->admin_target(),
        " state payments"));
    EXPECT_THAT(central.output,
                HasSubstr(absl::StrCat("redis ", redis_.address(), ", serving ",
                                       kLeaves - leaves_of_a, " leaves")))
        << central.output;
  }

  // ---- A breaker trip on leaf 0 (under central A) reaches every other
  // leaf, under both central replicas.
  {
    for (int i = 0; i < 3; ++i) {
      const v1::AcquireResponse r = leaves_[0]->Acquire("fragile");
      ASSERT_EQ(r.verdict(), v1::ALLOW);
      leaves_[0]->Report("fragile", r.permit_id(), v1::FAILURE);
    }
    const absl::Time tripped = absl::Now();
    ASSERT_EQ(BreakerOf(*leaves_[0], "fragile"), v1::OPEN);
    std::vector<absl::Time> seen(kLeaves, absl::InfiniteFuture());
    WaitFor(
        [&] {
          bool all = true;
          for (int i = 1; i < kLeaves; ++i) {
            if (seen[i] != absl::InfiniteFuture()) continue;
            if (BreakerOf(*leaves_[i], "fragile") == v1::OPEN) {
              seen[i] = absl::Now();
            } else {
              all = false;
            }
          }
          return all;
        },
        tripped + 4 * kTick, absl::Milliseconds(10));
    absl::Duration slowest = absl::ZeroDuration();
    for (int i = 1; i < kLeaves; ++i) {
      slowest = std::max(slowest, seen[i] - tripped);
    }
    std::printf("[tree] breaker trip on leaf 0 seen by all %d other leaves "
                "after %lld ms (slowest; tick %lld ms)\n",
                kLeaves - 1,
                static_cast<long long>(absl::ToInt64Milliseconds(slowest)),
                static_cast<long long>(absl::ToInt64Milliseconds(kTick)));
    // Two ticks, and the polling and lease round trips of a loaded machine.
    EXPECT_LE(slowest, 2 * kTick + absl::Milliseconds(300));
  }

  // ---- Every leaf flat out on the 100/s cluster limit.
  std::atomic<bool> stop{false};
  std::vector<AcquireLoad> loads(kLeaves);
  std::vector<std::thread> threads;
  for (int i = 0; i < kLeaves; ++i) {
    // About 12 x 150 calls/s offered: 18 times the limit.
    threads.emplace_back(DriveAcquire, leaves_[i].get(), "payments",
                         absl::Microseconds(6500), &stop, &loads[i]);
  }
  const absl::Time start = absl::Now();
  const absl::Time from = start + 2 * kTick;  // warm-up: demand reaches Redis
  const absl::Time to = from + absl::Seconds(5);
  absl::SleepFor(to - absl::Now());

  // ---- Kill central A under that load: its leaves move to B.
  const absl::Time killed = absl::Now();
  centrals_[0]->Kill();
  const absl::Time after_from = killed + kGrace;
  const absl::Time after_to = after_from + absl::Seconds(3);
  absl::SleepFor(after_to - absl::Now() + absl::Milliseconds(100));
  stop = true;
  for (std::thread& t : threads) t.join();

  std::vector<absl::Time> all;
  int64_t errors = 0, asked = 0;
  for (int i = 0; i < kLeaves; ++i) {
    errors += loads[i].errors;
    asked += loads[i].asked;
    all.insert(all.end(), loads[i].admitted.begin(), loads[i].admitted.end());
  }
  const Window before = Measure(all, from, to);
  const Window after = Measure(all, after_from, after_to);
  const Window during = Measure(all, killed, after_from);
  std::printf(
      "[tree] 12 leaves flat out (%lld calls answered, %lld RPC errors): "
      "5 s before the kill admitted %lld (bounds %d..%d), worst 1 s %lld; "
      "the %lld ms grace after it %lld, worst 1 s %lld; the 3 s after the "
      "grace %lld, worst 1 s %lld (bound %d)\n",
      static_cast<long long>(asked), static_cast<long long>(errors),
      static_cast<long long>(before.total), kRate * 5 * 8 / 10,
      (kRate * 5 + kBurst) * 11 / 10,
      static_cast<long long>(before.worst_second),
      static_cast<long long>(absl::ToInt64Milliseconds(kGrace)),
      static_cast<long long>(during.total),
      static_cast<long long>(during.worst_second),
      static_cast<long long>(after.total),
      static_cast<long long>(after.worst_second), (kRate + kBurst) * 11 / 10);
  // Each second from the start of the load (the kill at "|").
  std::string seconds;
  for (absl::Time t = start; t + absl::Seconds(1) <= after_to;
       t += absl::Seconds(1)) {
    if (t <= killed && killed < t + absl::Seconds(1)) seconds += " |";
    absl::StrAppend(&seconds, " ",
                    Measure(all, t, t + absl::Seconds(1)).total);
  }
  std::printf("[tree] admitted each second:%s\n", seconds.c_str());
  EXPECT_EQ(errors, 0);
  EXPECT_LE(before.total, (kRate * 5 + kBurst) * 11 / 10);
  EXPECT_GE(before.total, kRate * 5 * 8 / 10);
  EXPECT_LE(after.worst_second, (kRate + kBurst) * 11 / 10);
  EXPECT_LE(after.total, (kRate * 3 + kBurst) * 11 / 10);
  // The leaves of A moved: every leaf answers through B now.
  for (int i = 0; i < kLeaves; ++i) {
    EXPECT_EQ(leaves_[i]->Metric("sluice_store_up"), 1) << "leaf " << i;
    if (under_a[i]) {
      EXPECT_GE(leaves_[i]->Metric("sluice_upstream_moves_total"), 1)
          << "leaf " << i;
    }
  }
  EXPECT_EQ(centrals_[1]->Metric("sluice_leaves"), kLeaves);
}

// One idle leaf with 100 cluster-scope policies: its CPU from /proc over
// 10 s, printed (the goal is 2 millicores; a loaded machine's scheduling
// makes a tight bound flaky, so only a runaway fails here).
TEST_F(TreeProcessTest, CpuOfAnIdleLeafWithAHundredPolicies) {
  std::string policies = "policies:\n";
  for (int i = 0; i < 100; ++i) {
    absl::StrAppend(&policies, "  - name: dep-", i,
                    "\n    rate_limit: { rate: 50, per: 1s, burst: 10, "
                    "scope: CLUSTER }\n"
                    "    breaker: { consecutive_failures: 5 }\n");
  }
  ASSERT_NO_FATAL_FAILURE(StartCentral("central", policies));
  ASSERT_NO_FATAL_FAILURE(StartLeaf("leaf", centrals_[0]->target()));
  ASSERT_NO_FATAL_FAILURE(WaitLeavesReady(100));
  // Idle: every policy has been quiet for 10 s, and the leaf's ticks
  // leave them all out (sluice_sync_quiet_policies).
  const absl::Time quiet_by = absl::Now() + 20 * kTick;
  while (leaves_[0]->Metric("sluice_sync_quiet_policies") < 100 &&
         absl::Now() < quiet_by) {
    absl::SleepFor(absl::Milliseconds(200));
  }
  ASSERT_EQ(leaves_[0]->Metric("sluice_sync_quiet_policies"), 100);
  // Past the last tick that pushed them.
  absl::SleepFor(2 * kTick);
  const pid_t leaf = leaves_[0]->pid(), central = centrals_[0]->pid();
  const absl::Duration leaf_from = CpuTime(leaf), central_from = CpuTime(central);
  const absl::Time from = absl::Now();
  absl::SleepFor(absl::Seconds(10));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - from);
  const double leaf_mc =
      absl::ToDoubleMilliseconds(CpuTime(leaf) - leaf_from) / seconds;
  const double central_mc =
      absl::ToDoubleMilliseconds(CpuTime(central) - central_from) / seconds;
  std::printf("[tree] idle leaf, 100 policies, tick %lld ms: %.1f millicores "
              "(goal 2); its central replica %.1f millicores\n",
              static_cast<long long>(absl::ToInt64Milliseconds(kTick)),
              leaf_mc, central_mc);
  EXPECT_EQ(leaves_[0]->Metric("sluice_store_up"), 1);
  EXPECT_LE(leaf_mc, 20.0);
}

}  // namespace
}  // namespace sluice
