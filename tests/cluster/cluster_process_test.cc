// SPDX-License-Identifier: Apache-2.0
// Cluster mode end to end: three real sluiced processes share limits and
// breakers through a real redis-server on loopback. These tests run for
// seconds of wall time by nature (the sync interval is 1 s); they assert the
// behaviour the cluster promises, with margins for a busy 2-core machine.
#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/redis_cluster.h"
#include "tests/testing/acquire_load.h"
#include "tests/testing/sluiced_process.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/wait_for.h"

namespace sluice {
namespace {

using testing::AcquireLoad;
using testing::DriveAcquire;
using testing::RedisServer;
using testing::SluicedProcess;
using testing::WaitFor;

class ClusterProcessTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(redis_.Start()); }

  // Starts `n` replicas r0..r(n-1) with `policies`.
  void StartReplicas(int n, const std::string& policies) {
    for (int i = 0; i < n; ++i) {
      replicas_.push_back(std::make_unique<SluicedProcess>());
      std::string error;
      ASSERT_TRUE(replicas_.back()->Start(
          policies,
          {"--redis=" + redis_.address(), "--sync-interval=1s",
           "--replica-id=r" + std::to_string(i), "--redis-timeout=200ms"},
          "", &error))
          << error;
    }
  }

  // Waits until every replica counts all of them live: each has ticked
  // since the last one joined.
  void WaitAllLive() {
    const int n = static_cast<int>(replicas_.size());
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(replicas_[i]->WaitForLiveReplicas(n, absl::Seconds(10)))
          << "r" << i << " never saw " << n << " live replicas:\n"
          << replicas_[i]->Log();
    }
  }

  RedisServer redis_;
  std::vector<std::unique_ptr<SluicedProcess>> replicas_;
};

TEST_F(ClusterProcessTest, SkewedLoadHoldsTheGlobalLimitAndTheBooksBalance) {
  StartReplicas(3, R"(policies:
  - name: inventory
    rate_limit: { rate: 100, per: 1s, burst: 10, scope: CLUSTER }
)");
  // Replica 0 flat out (far above 100/s), replicas 1 and 2 paced at ~20/s.
  std::atomic<bool> stop{false};
  std::vector<AcquireLoad> loads(3);
  std::vector<std::thread> threads;
  threads.emplace_back(DriveAcquire, replicas_[0].get(), "inventory",
                       absl::Microseconds(200), &stop, &loads[0]);
  for (int r = 1; r < 3; ++r) {
    threads.emplace_back(DriveAcquire, replicas_[r].get(), "inventory",
                         absl::Milliseconds(50), &stop, &loads[r]);
  }
  const absl::Time start = absl::Now();
  const absl::Time from = start + absl::Seconds(4);  // a few ticks of warm-up
  const absl::Time to = from + absl::Seconds(10);
  absl::SleepFor(to - start + absl::Milliseconds(100));  // the measured window
  stop = true;
  for (auto& t : threads) t.join();

  std::vector<absl::Time> all;
  int64_t paced_asked = 0, paced_allowed = 0;
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(loads[r].errors, 0) << "replica " << r;
    all.insert(all.end(), loads[r].admitted.begin(), loads[r].admitted.end());
    if (r > 0) {
      paced_asked += loads[r].asked;
      paced_allowed += loads[r].allowed;
    }
  }
  std::sort(all.begin(), all.end());
  int64_t in_window = 0;
  for (absl::Time t : all) in_window += t >= from && t < to;
  // Admitted over 10 s at 100/s: within 5% of 1000.
  EXPECT_GE(in_window, 950);
  EXPECT_LE(in_window, 1050);
  // No span of one second admits more than 110.
  size_t lo = 0;
  int64_t worst = 0;
  for (size_t hi = 0; hi < all.size(); ++hi) {
    if (all[hi] < from || all[hi] >= to) continue;
    while (all[hi] - all[lo] >= absl::Seconds(1)) ++lo;
    worst = std::max<int64_t>(worst, hi - lo + 1);
  }
  EXPECT_LE(worst, 110);
  // The paced replicas still get most of their calls through.
  EXPECT_GE(paced_allowed * 10, paced_asked * 7)
      << paced_allowed << " of " << paced_asked;
  std::printf("admitted in 10 s: %lld; worst 1 s: %lld; paced %lld/%lld\n",
              static_cast<long long>(in_window),
              static_cast<long long>(worst),
              static_cast<long long>(paced_allowed),
              static_cast<long long>(paced_asked));

  // Conservation: after a clean stop (each replica pushes a last tick),
  // Redis holds exactly what each replica admitted.
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(replicas_[r]->Terminate(), 0);
    const std::string stored = redis_.Command(
        absl::StrCat("HGET sluice:{inventory}:a: r", r));
    EXPECT_EQ(stored, std::to_string(loads[r].allowed)) << "replica " << r;
  }
}

TEST_F(ClusterProcessTest, TripOnOneReplicaReachesTheOthersWithinATick) {
  StartReplicas(3, R"(policies:
  - name: payments
    call_timeout: 5s
    breaker: { consecutive_failures: 3, open_duration: 2s,
               half_open_probes: 1, successes_to_close: 1 }
    fallback: { strategy: STATIC, payload: 'cached', on: [CIRCUIT_OPEN] }
)");
  ASSERT_NO_FATAL_FAILURE(WaitAllLive());
  for (int i = 0; i < 3; ++i) {
    const v1::AcquireResponse r = replicas_[0]->Acquire("payments");
    ASSERT_EQ(r.verdict(), v1::ALLOW);
    replicas_[0]->Report("payments", r.permit_id(), v1::FAILURE);
  }
  const absl::Time tripped = absl::Now();
  EXPECT_EQ(replicas_[0]->Acquire("payments").reason(), v1::CIRCUIT_OPEN);
  for (int r = 1; r < 3; ++r) {
    absl::Time seen = absl::InfiniteFuture();
    if (WaitFor(
            [&] {
              return replicas_[r]->Acquire("payments").reason() ==
                     v1::CIRCUIT_OPEN;
            },
            tripped + absl::Seconds(3))) {
      seen = absl::Now();
    }
    // Within sync_interval + 200 ms of the trip.
    EXPECT_LE(seen - tripped, absl::Milliseconds(1200)) << "replica " << r;
    std::printf("replica %d refused %lld ms after the trip\n", r,
                static_cast<long long>(absl::ToInt64Milliseconds(seen - tripped)));
  }

  // HALF_OPEN: at most one probe in flight across the cluster. Probes are
  // never reported here (call_timeout 5s keeps them alive), so every ALLOW
  // is a probe that still holds its lease.
  std::atomic<int> probes{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      while (!stop) {
        if (replicas_[r]->Acquire("payments").verdict() == v1::ALLOW) ++probes;
        absl::SleepFor(absl::Milliseconds(5));  // paces the load
      }
    });
  }
  // Under test: the real open_duration (2 s), then 2.5 s of HALF_OPEN.
  absl::SleepFor(tripped + absl::Seconds(2) + absl::Milliseconds(2500) -
                 absl::Now());
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(probes.load(), 1);
}

TEST_F(ClusterProcessTest, ReportsReachingAnotherReplicaSettleAtTheIssuer) {
  StartReplicas(2, R"(policies:
  - name: payments
    call_timeout: 1s
    concurrency: { max_in_flight: 3 }
    breaker: { consecutive_failures: 3, open_duration: 30s }
)");
  ASSERT_NO_FATAL_FAILURE(WaitAllLive());  // both replicas know each other
  // Replica 0 admits three calls; a gateway balancing per request reports
  // them to replica 1.
  std::vector<std::string> permits;
  for (int i = 0; i < 3; ++i) {
    const v1::AcquireResponse r = replicas_[0]->Acquire("payments");
    ASSERT_EQ(r.verdict(), v1::ALLOW);
    EXPECT_NE(r.permit_id().find("@r0"), std::string::npos) << r.permit_id();
    permits.push_back(r.permit_id());
  }
  EXPECT_EQ(replicas_[0]->Acquire("payments").reason(), v1::CONCURRENCY_LIMITED);
  const absl::Time reported = absl::Now();
  for (const std::string& permit : permits) {
    replicas_[1]->Report("payments", permit, v1::FAILURE);
  }
  // Within two ticks replica 0 has settled them: the failures opened its
  // breaker (and the cluster's), and no slot stayed held to expire later.
  const bool open =
      WaitFor(
          [&] {
            return replicas_[0]->Acquire("payments").reason() ==
                   v1::CIRCUIT_OPEN;
          },
          reported + absl::Seconds(4), absl::Milliseconds(20))
          .has_value();
  EXPECT_TRUE(open) << replicas_[0]->Log();
  EXPECT_LE(absl::Now() - reported, absl::Milliseconds(2500));
  EXPECT_NE(replicas_[0]->Log().find("3 consecutive failures"),
            std::string::npos);
}

// Load on three policies with different on_store_failure while Redis is
// killed, restarted, and paused.
TEST_F(ClusterProcessTest, StoreOutagesFollowEachPolicysFailureMode) {
  StartReplicas(2, R"(policies:
  - name: open
    rate_limit: { rate: 20, per: 1s, burst: 2, scope: CLUSTER }
  - name: local
    rate_limit: { rate: 20, per: 1s, burst: 2, scope: CLUSTER }
    on_store_failure: LOCAL
  - name: closed
    rate_limit: { rate: 20, per: 1s, burst: 2, scope: CLUSTER }
    on_store_failure: FAIL_CLOSED
)");
  struct Sample {
    absl::Time at;
    std::string dep;
    v1::Reason reason;
    bool allowed;
    absl::Duration latency;
    bool error;
  };
  std::mutex mu;
  std::vector<Sample> samples;
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    for (const char* dep : {"open", "local", "closed"}) {
      threads.emplace_back([&, r, dep] {
        while (!stop) {
          grpc::Status status;
          const absl::Time t0 = absl::Now();
          const v1::AcquireResponse resp = replicas_[r]->Acquire(dep, &status);
          const absl::Time t1 = absl::Now();
          {
            std::lock_guard<std::mutex> lock(mu);
            samples.push_back({t1, dep, resp.reason(),
                               resp.verdict() == v1::ALLOW, t1 - t0,
                               !status.ok()});
          }
          absl::SleepFor(absl::Milliseconds(4));  // paces the load
        }
      });
    }
  }
  // The phases' lengths are the scenario (load, kill, restart, pause), not
  // waits for a condition: the assertions below judge each phase's window.
  const absl::Time t0 = absl::Now();
  absl::SleepFor(absl::Seconds(4));
  redis_.Kill();
  const absl::Time killed = absl::Now();
  absl::SleepFor(absl::Seconds(7));
  // Redis may answer before Start returns: the outage ends when it begins.
  const absl::Time restarting = absl::Now();
  ASSERT_TRUE(redis_.Start());
  const absl::Time restarted = absl::Now();
  absl::SleepFor(absl::Seconds(5));
  redis_.Pause();
  const absl::Time paused = absl::Now();
  absl::SleepFor(absl::Seconds(6));
  redis_.Resume();
  stop = true;
  for (auto& t : threads) t.join();

  // Admitted per second and latencies of one policy over [from, to).
  auto admitted_rate = [&](const std::string& dep, absl::Time from,
                           absl::Time to) {
    int64_t n = 0;
    for (const Sample& s : samples) {
      n += s.dep == dep && s.allowed && s.at >= from && s.at < to;
    }
    return n / absl::ToDoubleSeconds(to - from);
  };
  auto p99 = [&](absl::Time from, absl::Time to) {
    std::vector<absl::Duration> l;
    for (const Sample& s : samples) {
      if (s.at >= from && s.at < to) l.push_back(s.latency);
    }
    std::sort(l.begin(), l.end());
    return l.empty() ? absl::ZeroDuration() : l[l.size() * 99 / 100];
  };
  auto all_reason = [&](const std::string& dep, absl::Time from,
                        absl::Time to, v1::Reason reason) {
    int64_t total = 0, matching = 0;
    for (const Sample& s : samples) {
      if (s.dep != dep || s.at < from || s.at >= to) continue;
      ++total;
      matching += s.reason == reason;
    }
    return total > 0 && matching == total;
  };
  int64_t errors = 0;
  for (const Sample& s : samples) errors += s.error;
  EXPECT_EQ(errors, 0) << "no Redis failure may become an RPC error";

  // The store counts as down once it has been silent for the stale period
  // (3 ticks) since the last good tick; judge after 4 s.
  const absl::Time down_from = killed + absl::Seconds(4);
  const absl::Time down_to = restarting;
  const double limit = 20;
  EXPECT_LE(admitted_rate("open", t0 + absl::Seconds(2), killed), limit * 1.3);
  EXPECT_GT(admitted_rate("open", down_from, down_to), limit * 3)
      << "FAIL_OPEN: the cluster limit stops limiting";
  EXPECT_LE(admitted_rate("local", down_from, down_to), limit * 1.5)
      << "LOCAL: the last share keeps enforcing";
  EXPECT_GT(admitted_rate("local", down_from, down_to), limit * 0.5);
  EXPECT_TRUE(all_reason("closed", down_from, down_to, v1::STORE_UNAVAILABLE))
      << "FAIL_CLOSED: every call refused for the store";
  // Restarted: enforced again within a few ticks.
  const absl::Time back = restarted + absl::Seconds(3);
  EXPECT_LE(admitted_rate("open", back, paused), limit * 1.3);
  EXPECT_EQ(admitted_rate("closed", back, paused) > 0, true);
  // A paused Redis is a dead one, once it has been silent as long.
  EXPECT_TRUE(all_reason("closed", paused + absl::Seconds(4),
                         paused + absl::Seconds(6), v1::STORE_UNAVAILABLE));
  EXPECT_GT(admitted_rate("open", paused + absl::Seconds(4),
                          paused + absl::Seconds(6)),
            limit * 3);
  // Acquire latency does not depend on Redis.
  const absl::Duration before = p99(t0 + absl::Seconds(1), killed);
  const absl::Duration during = p99(down_from, down_to);
  const absl::Duration stopped = p99(paused + absl::Seconds(1),
                                     paused + absl::Seconds(6));
  std::printf("Acquire p99: redis up %s, killed %s, paused %s\n",
              absl::FormatDuration(before).c_str(),
              absl::FormatDuration(during).c_str(),
              absl::FormatDuration(stopped).c_str());
  EXPECT_LE(during, std::max(before * 3, before + absl::Milliseconds(10)));
  EXPECT_LE(stopped, std::max(before * 3, before + absl::Milliseconds(10)));
  // The outage was logged once, not once per tick.
  const std::string log = replicas_[0]->Log();
  size_t downs = 0;
  for (size_t at = log.find("is unreachable"); at != std::string::npos;
       at = log.find("is unreachable", at + 1)) {
    ++downs;
  }
  EXPECT_EQ(downs, 2u) << "one line for the kill, one for the pause";
}

TEST_F(ClusterProcessTest, StartsWithRedisDownAndJoinsWhenItComes) {
  redis_.Kill();
  StartReplicas(1, R"(policies:
  - name: closed
    rate_limit: { rate: 1000, per: 1s, scope: CLUSTER }
    on_store_failure: FAIL_CLOSED
  - name: open
    rate_limit: { rate: 1000, per: 1s, scope: CLUSTER }
)");
  // Serving from local state: no RPC errors, each policy by its mode.
  grpc::Status status;
  EXPECT_EQ(replicas_[0]->Acquire("open", &status).verdict(), v1::ALLOW);
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(replicas_[0]->Acquire("closed", &status).reason(),
            v1::STORE_UNAVAILABLE);
  EXPECT_TRUE(status.ok());
  ASSERT_TRUE(redis_.Start());
  const absl::Time started = absl::Now();
  const bool joined =
      WaitFor(
          [&] { return replicas_[0]->Acquire("closed").verdict() == v1::ALLOW; },
          started + absl::Seconds(7), absl::Milliseconds(50))
          .has_value();
  EXPECT_TRUE(joined) << replicas_[0]->Log();
  // Within two ticks of Redis coming back and the stale period (3 s) after
  // it: the empty Redis creates the policy's epoch, whose recovery window
  // grants nothing beyond what is applied (docs/cluster.md, When Redis
  // loses its data).
  EXPECT_LE(absl::Now() - started, absl::Seconds(5) + absl::Milliseconds(300));
  EXPECT_GE(absl::Now() - started, absl::Seconds(3)) << "no recovery window";
  EXPECT_NE(redis_.Command("ZSCORE sluice:{config}:replicas r0"), "");
}

TEST_F(ClusterProcessTest, RedisCommandsPerTickStayFlatAsTheRateGrows) {
  StartReplicas(1, R"(policies:
  - name: flat
    rate_limit: { rate: 1000000, per: 1s, burst: 1000000, scope: CLUSTER }
    breaker: { consecutive_failures: 1000 }
)");
  auto run = [&](absl::Duration pause) {
    redis_.Command("CONFIG RESETSTAT");
    std::atomic<bool> stop{false};
    AcquireLoad load;
    std::thread t(DriveAcquire, replicas_[0].get(), "flat", pause, &stop, &load);
    absl::SleepFor(absl::Seconds(5));  // the measured window
    stop = true;
    t.join();
    const auto stats = redis_.CommandCalls();
    const int64_t total = redis_.TotalCommandCalls();
    const int64_t ticks = stats.count("zadd") ? stats.at("zadd") : 0;
    return std::make_pair(load.asked, ticks > 0 ? total / ticks : -1);
  };
  const auto slow = run(absl::Milliseconds(10));
  const auto fast = run(absl::Microseconds(100));
  std::printf("requests %lld -> %lld; commands per tick %lld -> %lld\n",
              static_cast<long long>(slow.first),
              static_cast<long long>(fast.first),
              static_cast<long long>(slow.second),
              static_cast<long long>(fast.second));
  ASSERT_GE(fast.first, slow.first * 5) << "the load did not grow enough";
  EXPECT_GT(slow.second, 0);
  EXPECT_EQ(slow.second, fast.second);
}

// Times in [from, to) of `admitted`, as a count.
int64_t CountIn(const std::vector<absl::Time>& admitted, absl::Time from,
                absl::Time to) {
  return std::count_if(admitted.begin(), admitted.end(),
                       [&](absl::Time t) { return t >= from && t < to; });
}

int CountLines(const std::string& log, const std::string& what) {
  int n = 0;
  for (size_t at = log.find(what); at != std::string::npos;
       at = log.find(what, at + 1)) {
    ++n;
  }
  return n;
}

// Two replicas on a real Redis Cluster under load while the policy's slot
// moves to another master (MIGRATING, keys moved: ASK, owner set: MOVED) and
// then that master fails over to its replica: no RPC fails, the cluster
// limit holds, and the replicas follow every redirection.
TEST(RedisClusterProcessTest, ReshardAndFailoverUnderLoadKeepTheLimit) {
  testing::RedisCluster cluster;
  ASSERT_TRUE(cluster.Start());
  std::vector<std::unique_ptr<SluicedProcess>> replicas;
  for (int i = 0; i < 2; ++i) {
    replicas.push_back(std::make_unique<SluicedProcess>());
    std::string error;
    ASSERT_TRUE(replicas.back()->Start(R"(policies:
  - name: inventory
    rate_limit: { rate: 100, per: 1s, burst: 10, scope: CLUSTER }
)",
                                       {"--redis-cluster=" + cluster.Seeds(),
                                        "--sync-interval=1s",
                                        "--replica-id=r" + std::to_string(i),
                                        "--redis-timeout=200ms"},
                                       "", &error))
        << error;
  }
  for (auto& r : replicas) {
    ASSERT_TRUE(r->WaitForLiveReplicas(2, absl::Seconds(10))) << r->Log();
  }
  std::atomic<bool> stop{false};
  std::vector<AcquireLoad> loads(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back(DriveAcquire, replicas[r].get(), "inventory",
                         absl::Milliseconds(1), &stop, &loads[r]);
  }
  const absl::Time start = absl::Now();
  absl::SleepFor(absl::Seconds(4));  // warm-up: grants settle
  const absl::Time before = absl::Now();
  absl::SleepFor(absl::Seconds(4));  // the steady state, for comparison

  const int slot = cluster.SlotOf("sluice:{inventory}:epoch");
  testing::RedisServer* from = cluster.OwnerOf(slot);
  ASSERT_NE(from, nullptr);
  testing::RedisServer* to = nullptr;
  for (auto* m : cluster.Masters()) {
    if (m != from) to = m;
  }
  const absl::Time moving = absl::Now();
  std::map<std::string, absl::Time> steps;
  // 1 s MIGRATING with the keys still on the owner, 1.5 s with them on the
  // new owner (ASK), then MOVED.
  ASSERT_TRUE(cluster.MoveSlot(slot, to, absl::Seconds(1),
                               absl::Milliseconds(1500),
                               [&](const std::string& step) {
                                 steps[step] = absl::Now();
                               }));
  absl::SleepFor(absl::Seconds(2));
  const absl::Time failing_over = absl::Now();
  ASSERT_TRUE(cluster.Failover(to));
  const absl::Time failed_over = absl::Now();
  absl::SleepFor(absl::Seconds(4));
  const absl::Time end = absl::Now();
  stop = true;
  for (auto& t : threads) t.join();

  std::vector<absl::Time> all;
  int64_t errors = 0;
  for (const AcquireLoad& l : loads) {
    all.insert(all.end(), l.admitted.begin(), l.admitted.end());
    errors += l.errors;
  }
  auto rate = [&](absl::Time a, absl::Time b) {
    return static_cast<double>(CountIn(all, a, b)) /
           absl::ToDoubleSeconds(b - a);
  };
  std::printf("[redis-cluster] slot %d of sluice:{inventory}: %s -> %s, then "
              "failover of %s (%.1f s)\n",
              slot, from->address().c_str(), to->address().c_str(),
              to->address().c_str(),
              absl::ToDoubleSeconds(failed_over - failing_over));
  std::printf("[redis-cluster] admitted/s (limit 100, 2 replicas):\n");
  std::printf("[redis-cluster]   steady before          %6.1f\n",
              rate(before, moving));
  std::printf("[redis-cluster]   MIGRATING, keys on old %6.1f\n",
              rate(moving, steps["keys moved"]));
  std::printf("[redis-cluster]   keys moved (ASK)       %6.1f\n",
              rate(steps["keys moved"], steps["owner set"]));
  std::printf("[redis-cluster]   owner set (MOVED)..end %6.1f\n",
              rate(steps["owner set"], end));
  std::printf("[redis-cluster]   whole move + failover  %6.1f\n",
              rate(moving, end));
  std::printf("[redis-cluster]   per second from the move:");
  for (absl::Time t = moving; t + absl::Seconds(1) <= end;
       t += absl::Seconds(1)) {
    std::printf(" %lld", static_cast<long long>(
                             CountIn(all, t, t + absl::Seconds(1))));
  }
  std::printf("\n");
  int ask = 0, moved = 0;
  for (int r = 0; r < 2; ++r) {
    const std::string log = replicas[r]->Log();
    ask += CountLines(log, "redis cluster: ASK slot");
    moved += CountLines(log, "redis cluster: MOVED slot");
    std::printf("[redis-cluster]   r%d: sync ticks %.0f, failed %.0f, "
                "ASK %d, MOVED %d, RPC errors %lld\n",
                r, replicas[r]->Metric("sluice_sync_ticks_total"),
                replicas[r]->Metric("sluice_sync_errors_total"),
                CountLines(log, "redis cluster: ASK slot"),
                CountLines(log, "redis cluster: MOVED slot"),
                static_cast<long long>(loads[r].errors));
  }
  (void)start;
  EXPECT_EQ(errors, 0);
  const double whole = rate(moving, end);
  EXPECT_GE(whole, 90);
  EXPECT_LE(whole, 110);
  const double after = rate(steps["owner set"], end);
  EXPECT_GE(after, 90);
  EXPECT_LE(after, 110);
  EXPECT_GT(ask, 0) << "the replicas never followed an ASK";
  EXPECT_GT(moved, 0) << "the replicas never followed a MOVED";
  for (auto& r : replicas) EXPECT_EQ(r->Terminate(), 0);
}

}  // namespace
}  // namespace sluice
