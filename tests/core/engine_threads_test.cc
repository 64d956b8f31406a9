// SPDX-License-Identifier: Apache-2.0
// Many threads on one Engine. Run under TSan too (-DSLUICE_TSAN=ON).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "tests/core/engine_test_util.h"

namespace sluice::core {
namespace {

constexpr int kThreads = 8;

// Tracks calls the test holds between Acquire and Report.
struct InFlight {
  std::atomic<int> now{0};
  std::atomic<int> max{0};
  void Enter() {
    const int n = now.fetch_add(1) + 1;
    int seen = max.load();
    while (n > seen && !max.compare_exchange_weak(seen, n)) {
    }
  }
  void Leave() { now.fetch_sub(1); }
};

// Fixed time, so the budget is exact: burst B admits exactly B calls in
// total however the threads interleave, and never more than the cap at once.
TEST_F(EngineTest, ThreadsShareAnExactBudgetAndTheCap) {
  constexpr int kBurst = 2000;
  constexpr uint32_t kCap = 3;
  PolicyConfig p = MakePolicy("hot");
  WithBucket(p, 1, kBurst, absl::Hours(24));
  WithConcurrency(p, kCap);
  engine_.PutPolicy(p);

  InFlight in_flight;
  std::atomic<uint64_t> calls{0}, allowed{0}, rate_limited{0},
      concurrency_limited{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      // Tokens come back when the cap refuses, so the bucket is empty only
      // after exactly kBurst admissions; stop once it says so.
      for (;;) {
        absl::StatusOr<Decision> d = engine_.Acquire("hot", "", 1);
        calls.fetch_add(1);
        if (!d.ok()) {
          errors.fetch_add(1);
          return;
        }
        if (d->verdict == Verdict::kAllow) {
          in_flight.Enter();
          allowed.fetch_add(1);
          in_flight.Leave();
          engine_.Report("hot", "", d->permit_id, Outcome::kSuccess,
                         absl::Milliseconds(1));
        } else if (d->reason == Reason::kConcurrencyLimited) {
          concurrency_limited.fetch_add(1);
        } else if (d->reason == Reason::kRateLimited) {
          rate_limited.fetch_add(1);
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();

  EXPECT_EQ(errors.load(), 0u);
  EXPECT_EQ(allowed.load(), static_cast<uint64_t>(kBurst));
  EXPECT_EQ(rate_limited.load(), static_cast<uint64_t>(kThreads));
  EXPECT_LE(in_flight.max.load(), static_cast<int>(kCap));
  const LivePolicyStatus s = Inspect("hot");
  ExpectConserved(s.counters);
  EXPECT_EQ(s.counters.acquired, calls.load());
  EXPECT_EQ(s.counters.allowed, static_cast<uint64_t>(kBurst));
  EXPECT_EQ(VerdictReason(s.counters, Verdict::kReject,
                          Reason::kConcurrencyLimited),
            concurrency_limited.load());
  EXPECT_EQ(Outcomes(s.counters, Outcome::kSuccess),
            static_cast<uint64_t>(kBurst));
  ASSERT_TRUE(s.gates.has_value());
  EXPECT_EQ(s.gates->in_flight, 0u);
  EXPECT_NEAR(s.gates->tokens_available, 0, 1e-6);
}

// Per-core slices under real threads: permits go from the threads that
// acquire them to others that report them (so reports cross slices), while
// one more thread reads the status and edits the policy (which take every
// slice's loans back). Nothing is lost: every admitted call is settled once,
// and at the end no slot, permit or token is left out on loan.
TEST_F(EngineTest, SlicesLoseNothingWhenReportsCrossCores) {
  constexpr int kPairs = 4;
  constexpr int kCalls = 5000;
  PolicyConfig p = MakePolicy("crossed");
  WithBucket(p, 1, 1e9, absl::Hours(24));
  WithConcurrency(p, 100000);
  WithBreaker(p, 1000000);
  engine_.PutPolicy(p);

  std::atomic<uint64_t> allowed{0};
  std::atomic<bool> done{false};
  std::vector<std::vector<PermitId>> handed(kPairs);
  std::vector<std::atomic<size_t>> ready(kPairs);
  std::vector<std::thread> threads;
  for (int t = 0; t < kPairs; ++t) handed[t].resize(kCalls);
  for (int t = 0; t < kPairs; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        absl::StatusOr<Decision> d = engine_.Acquire("crossed", "", 1);
        ASSERT_TRUE(d.ok());
        ASSERT_EQ(d->verdict, Verdict::kAllow);
        allowed.fetch_add(1);
        handed[t][i] = d->permit_id;
        ready[t].store(i + 1, std::memory_order_release);
      }
    });
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls; ++i) {
        while (ready[t].load(std::memory_order_acquire) <= size_t(i)) {
          std::this_thread::yield();
        }
        engine_.Report("crossed", "", handed[t][i], Outcome::kSuccess,
                       absl::Milliseconds(1));
      }
    });
  }
  std::thread editor([&] {
    PolicyConfig edited = p;
    while (!done.load()) {
      (void)Inspect("crossed");
      edited.call_timeout += absl::Milliseconds(1);
      engine_.PutPolicy(edited);
      std::this_thread::yield();
    }
  });
  for (auto& t : threads) t.join();
  done.store(true);
  editor.join();

  const LivePolicyStatus s = Inspect("crossed");
  ExpectConserved(s.counters);
  EXPECT_EQ(allowed.load(), static_cast<uint64_t>(kPairs) * kCalls);
  EXPECT_EQ(s.counters.allowed, allowed.load());
  EXPECT_EQ(Outcomes(s.counters, Outcome::kSuccess), allowed.load());
  EXPECT_EQ(s.counters.stale_reports, 0u);
  ASSERT_TRUE(s.gates.has_value());
  EXPECT_EQ(s.gates->in_flight, 0u);
  EXPECT_EQ(s.gates->live_permits, 0u);
  EXPECT_DOUBLE_EQ(s.gates->tokens_available,
                   1e9 - static_cast<double>(allowed.load()));
  EXPECT_EQ(s.gates->window.calls, static_cast<int64_t>(allowed.load()));
}

// The engine's own cap, seen from inside: the callers hold their permits
// for a while (yielding) so many calls overlap.
TEST_F(EngineTest, ThreadsNeverExceedTheConcurrencyCap) {
  constexpr uint32_t kCap = 4;
  PolicyConfig p = MakePolicy("capped");
  WithConcurrency(p, kCap);
  engine_.PutPolicy(p);
  InFlight in_flight;
  std::atomic<uint64_t> allowed{0}, refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 3000; ++i) {
        absl::StatusOr<Decision> d = engine_.Acquire("capped", "", 1);
        ASSERT_TRUE(d.ok());
        if (d->verdict != Verdict::kAllow) {
          ASSERT_EQ(d->reason, Reason::kConcurrencyLimited);
          refused.fetch_add(1);
          continue;
        }
        allowed.fetch_add(1);
        in_flight.Enter();
        std::this_thread::yield();
        in_flight.Leave();
        engine_.Report("capped", "", d->permit_id, Outcome::kSuccess,
                       absl::Milliseconds(1));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(in_flight.max.load(), static_cast<int>(kCap));
  EXPECT_GT(allowed.load(), 0u);
  const LivePolicyStatus s = Inspect("capped");
  ExpectConserved(s.counters);
  EXPECT_EQ(s.counters.acquired, static_cast<uint64_t>(kThreads) * 3000);
  EXPECT_EQ(s.counters.allowed, allowed.load());
  EXPECT_EQ(s.counters.rejected, refused.load());
  EXPECT_EQ(s.gates->in_flight, 0u);
}

// One thread moves the fake clock while the others hammer: the total
// admitted never exceeds burst + rate * elapsed.
TEST_F(EngineTest, ThreadsWithAdvancingClockStayWithinRate) {
  constexpr double kRate = 1000, kBurst = 50;
  PolicyConfig p = MakePolicy("timed");
  WithBucket(p, kRate, kBurst);
  WithConcurrency(p, 6);
  engine_.PutPolicy(p);
  const absl::Time start = clock_.Now();
  std::atomic<bool> done{false};
  std::atomic<uint64_t> rate_limited{0}, allowed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads - 1; ++t) {
    threads.emplace_back([&] {
      while (!done.load()) {
        absl::StatusOr<Decision> d = engine_.Acquire("timed", "", 1);
        ASSERT_TRUE(d.ok());
        if (d->reason == Reason::kRateLimited) rate_limited.fetch_add(1);
        if (d->verdict == Verdict::kAllow) {
          allowed.fetch_add(1);
          engine_.Report("timed", "", d->permit_id, Outcome::kSuccess,
                         absl::Milliseconds(1));
        }
      }
    });
  }
  threads.emplace_back([&] {
    // Steps only after a worker found the bucket empty, so demand always
    // exceeds the 0.1 token a step adds and no token is lost to the cap.
    uint64_t seen = 0;
    for (int i = 0; i < 2000; ++i) {
      while (rate_limited.load() == seen) std::this_thread::yield();
      seen = rate_limited.load();
      clock_.Advance(absl::Microseconds(100));
    }
    done.store(true);
  });
  for (auto& t : threads) t.join();
  const double elapsed = absl::ToDoubleSeconds(clock_.Now() - start);
  EXPECT_LE(allowed.load(), kBurst + kRate * elapsed + 1);
  EXPECT_GE(allowed.load(), 0.95 * (kBurst + kRate * elapsed));
  const LivePolicyStatus s = Inspect("timed");
  ExpectConserved(s.counters);
  EXPECT_EQ(s.counters.allowed, allowed.load());
}

// Policy swaps race with decisions: every answer is well-formed, counters of
// the dependency that stays are conserved, and nothing crashes (TSan).
TEST_F(EngineTest, ReplacePoliciesConcurrentWithAcquire) {
  PolicyConfig stay = MakePolicy("stay");
  WithBucket(stay, 1e12, 1e12, absl::Hours(1));  // never runs dry
  WithConcurrency(stay, 1000);
  WithBreaker(stay, 1000);
  PolicyConfig flap = MakePolicy("flap");
  WithBucket(flap, 1, 100, absl::Hours(1));
  WithConcurrency(flap, 2);
  flap.per_key = true;
  flap.max_keys = 4;
  engine_.ReplacePolicies({stay, flap});

  std::atomic<bool> done{false};
  std::atomic<uint64_t> stay_calls{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      int i = 0;
      while (!done.load()) {
        ++i;
        const std::string key = "k" + std::to_string((t + i) % 6);
        absl::StatusOr<Decision> a = engine_.Acquire("stay", "", 1);
        ASSERT_TRUE(a.ok());
        stay_calls.fetch_add(1);
        ASSERT_NE(a->policy, nullptr);
        ASSERT_EQ(a->policy->name, "stay");
        engine_.Report("stay", "", a->permit_id, Outcome::kSuccess,
                       absl::Milliseconds(1));
        absl::StatusOr<Decision> f = engine_.Acquire("flap", key, 1);
        if (f.ok()) {
          if (f->reason == Reason::kUnknownDependency) {
            ASSERT_EQ(f->policy, nullptr);
          } else {
            ASSERT_NE(f->policy, nullptr);
            ASSERT_EQ(f->policy->name, "flap");
          }
          engine_.Report("flap", key, f->permit_id, Outcome::kFailure,
                         absl::Milliseconds(1));
        }
        if (i % 64 == 0) engine_.Sweep();
        (void)engine_.Inspect("flap", key);
      }
    });
  }
  threads.emplace_back([&] {
    for (int i = 0; i < 400; ++i) {
      PolicyConfig s = stay;
      s.version = i;
      PolicyConfig f = flap;
      f.version = i;
      f.concurrency->max_in_flight = 1 + i % 3;
      switch (i % 3) {
        case 0:
          engine_.ReplacePolicies({s, f});
          break;
        case 1:
          engine_.ReplacePolicies({s});
          break;
        default:
          engine_.PutPolicy(f);
          engine_.DeletePolicy("flap");
          engine_.PutPolicy(f);
          break;
      }
      std::this_thread::yield();
    }
    done.store(true);
  });
  threads.emplace_back([&] {
    while (!done.load()) {
      (void)engine_.SetOverride("stay", BreakerOverride::kForceClosed, "t");
      (void)engine_.SetOverride("stay", BreakerOverride::kAuto, "t");
      (void)engine_.Policies();
      clock_.Advance(absl::Milliseconds(1));
    }
  });
  for (auto& t : threads) t.join();

  const LivePolicyStatus s = Inspect("stay");
  ExpectConserved(s.counters);
  EXPECT_EQ(s.counters.acquired, stay_calls.load());
  EXPECT_EQ(s.counters.allowed, stay_calls.load());
  EXPECT_EQ(s.gates->in_flight, 0u);
  EXPECT_EQ(s.policy->version, 399u);
  if (absl::StatusOr<LivePolicyStatus> f = engine_.Inspect("flap"); f.ok()) {
    ExpectConserved(f->counters);
    EXPECT_LE(f->keys, 4u);
  }
}

// Sharded per-key state: threads on their own keys and on shared ones, with
// sweeps, inspections and evictions going on. Each key's budget stays exact
// and max_keys holds.
TEST_F(EngineTest, ShardedKeysUnderManyThreads) {
  PolicyConfig p = MakePolicy("tenants");
  WithBucket(p, 1, 50, absl::Hours(1));  // fixed time: 50 calls per key
  WithConcurrency(p, 4);
  WithBreaker(p, 1000);
  p.per_key = true;
  p.max_keys = LivePolicy::kShardedKeys;
  engine_.PutPolicy(p);
  ASSERT_EQ(LivePolicy::ShardsFor(p), 32u);

  constexpr int kCallsPerThread = 2000;
  std::atomic<int> shared_allowed{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCallsPerThread; ++i) {
        // Half the calls on a key shared by every thread, half on keys of
        // this thread's own (which churn through the shards and evict).
        const bool shared = i % 2 == 0;
        const std::string key = shared ? "shared"
                                       : absl::StrCat("t", t, "-", i % 1500);
        absl::StatusOr<Decision> d = engine_.Acquire("tenants", key, 1);
        ASSERT_TRUE(d.ok());
        if (d->verdict == Verdict::kAllow) {
          if (shared) shared_allowed.fetch_add(1);
          engine_.Report("tenants", key, d->permit_id, Outcome::kSuccess,
                         absl::Milliseconds(1));
        }
        if (i % 256 == 0) {
          engine_.Sweep();
          (void)engine_.Inspect("tenants", key);
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  // The shared key is used on every other call, so it is never evicted:
  // exactly its burst got through.
  EXPECT_EQ(shared_allowed.load(), 50);
  const LivePolicyStatus s = *engine_.Inspect("tenants", "shared");
  EXPECT_LE(s.keys, p.max_keys);
  EXPECT_EQ(s.counters.acquired,
            static_cast<uint64_t>(kThreads) * kCallsPerThread);
  EXPECT_EQ(s.gates->in_flight, 0u);
}

}  // namespace
}  // namespace sluice::core
