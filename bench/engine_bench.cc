// SPDX-License-Identifier: Apache-2.0
// Cost of one in-process decision (Engine::Acquire + Engine::Report) beside
// a plain std::mutex counter, measured in the same run, at 1, 2 and 4
// threads. Also counts heap allocations per decision: the goal is none for a
// known dependency, with or without keys.
//
// Reading the scaling table printed last: with real time per op (all
// threads together), throughput(N threads) / throughput(1 thread) =
// time_per_op(1) / time_per_op(N). A ratio time(N)/time(1) at or below 1.0x
// means N threads decide at least as many calls per second as one; 2.0x
// means two threads together do half the work of one.
//
//   build/bench/engine_bench            (or scripts/bench)

#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"
#include "counted_alloc.h"
#include "thread_scaling.h"
#include "server/core/clock.h"
#include "server/core/engine.h"
#include "server/core/live_policy.h"
#include "server/core/policy_config.h"

namespace sluice::core {
namespace {

using bench::AllocationCounter;

// A policy on which every gate runs: a token bucket too large to refuse, a
// concurrency cap the benchmark threads never reach, and a breaker.
PolicyConfig HotPolicy(std::string name, bool per_key) {
  PolicyConfig p;
  p.name = std::move(name);
  p.call_timeout = absl::Seconds(2);
  RateLimitConfig rate;
  rate.rate = 1e12;
  rate.burst = 1e12;
  p.rate_limit = rate;
  ConcurrencyConfig concurrency;
  concurrency.max_in_flight = 1000000;
  p.concurrency = concurrency;
  BreakerConfig breaker;
  breaker.consecutive_failures = 5;
  breaker.failure_rate_threshold = 0.5;
  breaker.slow_call_duration = absl::Seconds(1);
  breaker.slow_call_rate_threshold = 0.8;
  p.breaker = breaker;
  p.per_key = per_key;
  p.max_keys = 100000;
  return p;
}

// HotPolicy with the adaptive gates as well: an adaptive limit the threads
// never reach, SRE throttling and the latency_baseline rule (every call
// succeeds in 1 ms, so none of them refuses).
PolicyConfig AdaptivePolicy(std::string name) {
  PolicyConfig p = HotPolicy(std::move(name), false);
  AdaptiveConcurrencyConfig adaptive;
  adaptive.max_limit = 1000000;
  adaptive.initial_limit = 1000000;
  p.adaptive_concurrency = adaptive;
  p.adaptive_throttle = AdaptiveThrottleConfig{};
  LatencyBaselineConfig baseline;
  baseline.factor = 2;
  p.breaker->latency_baseline = baseline;
  return p;
}

// One engine for the whole binary, so threads of a benchmark share it.
Engine& SharedEngine() {
  static Engine* engine = [] {
    auto* e = new Engine(RealClock::Get(), Engine::Options{});
    PolicyConfig refused;
    refused.name = "refused";
    RateLimitConfig rate;
    rate.rate = 1;
    rate.per = absl::Hours(24);
    rate.burst = 1;
    refused.rate_limit = rate;
    PolicyConfig few_shards = HotPolicy("hot_keys_32", true);
    few_shards.max_keys = LivePolicy::kShardedKeys;
    e->ReplacePolicies({HotPolicy("hot", false), HotPolicy("hot_keys", true),
                        few_shards, AdaptivePolicy("hot_adaptive"), refused});
    (void)e->Acquire("refused", "", 1);  // spends the only token
    return e;
  }();
  return *engine;
}

// Acquire + Report on one dependency, every thread.
void AcquireReportLoop(benchmark::State& state, const char* dependency) {
  Engine& engine = SharedEngine();
  // Warm up this thread's snapshot cache and the permit ring.
  for (int i = 0; i < 64; ++i) {
    auto d = engine.Acquire(dependency, "", 1);
    engine.Report(dependency, "", d->permit_id, Outcome::kSuccess,
                  absl::Milliseconds(1));
  }
  AllocationCounter allocs;
  for (auto _ : state) {
    absl::StatusOr<Decision> d = engine.Acquire(dependency, "", 1);
    if (!d.ok() || d->verdict != Verdict::kAllow) {
      state.SkipWithError("hot dependency refused a call");
      break;
    }
    engine.Report(dependency, "", d->permit_id, Outcome::kSuccess,
                  absl::Milliseconds(1));
  }
  allocs.Report(state);
}

void BM_AcquireReport(benchmark::State& state) {
  AcquireReportLoop(state, "hot");
}
BENCHMARK(BM_AcquireReport)->Threads(1)->Threads(2)->Threads(4)->UseRealTime();

// The same with the adaptive gates on top.
void BM_AcquireReportAdaptive(benchmark::State& state) {
  AcquireReportLoop(state, "hot_adaptive");
}
BENCHMARK(BM_AcquireReportAdaptive)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// Acquire + Report on a per_key policy, each thread on 64 keys of its own.
void AcquireReportKeysLoop(benchmark::State& state, const char* dependency) {
  Engine& engine = SharedEngine();
  std::vector<std::string> keys;
  for (int i = 0; i < 64; ++i) {
    keys.push_back("tenant-" + std::to_string(state.thread_index() * 64 + i));
  }
  for (const std::string& key : keys) {
    auto d = engine.Acquire(dependency, key, 1);
    engine.Report(dependency, key, d->permit_id, Outcome::kSuccess,
                  absl::Milliseconds(1));
  }
  AllocationCounter allocs;
  size_t i = 0;
  for (auto _ : state) {
    const std::string& key = keys[i++ & 63];
    absl::StatusOr<Decision> d = engine.Acquire(dependency, key, 1);
    if (!d.ok() || d->verdict != Verdict::kAllow) {
      state.SkipWithError("hot dependency refused a call");
      break;
    }
    engine.Report(dependency, key, d->permit_id, Outcome::kSuccess,
                  absl::Milliseconds(1));
  }
  allocs.Report(state);
}

// The default max_keys (100,000): 781 shards.
void BM_AcquireReportPerKey(benchmark::State& state) {
  AcquireReportKeysLoop(state, "hot_keys");
}
BENCHMARK(BM_AcquireReportPerKey)
    ->Threads(1)
    ->Threads(2)
    ->Threads(4)
    ->UseRealTime();

// max_keys 4,096, the fewest shards (32) a sharded policy has: every
// thread's 64 keys fall in nearly all of them, so two threads share nearly
// every shard, as they shared all 16 before shards grew with max_keys. The
// baseline for the row above.
void BM_AcquireReportPerKey32Shards(benchmark::State& state) {
  AcquireReportKeysLoop(state, "hot_keys_32");
}
BENCHMARK(BM_AcquireReportPerKey32Shards)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

void BM_AcquireRefused(benchmark::State& state) {
  Engine& engine = SharedEngine();
  (void)engine.Acquire("refused", "", 1);
  AllocationCounter allocs;
  for (auto _ : state) {
    absl::StatusOr<Decision> d = engine.Acquire("refused", "", 1);
    if (!d.ok() || d->reason != Reason::kRateLimited) {
      state.SkipWithError("expected a RATE_LIMITED refusal");
      break;
    }
    benchmark::DoNotOptimize(d->retry_after);
  }
  allocs.Report(state);
}
BENCHMARK(BM_AcquireRefused)->Threads(1)->UseRealTime();

// The baseline: the cheapest correct shared counter with a lock.
void BM_MutexCounter(benchmark::State& state) {
  static std::mutex mu;
  static uint64_t counter = 0;
  AllocationCounter allocs;
  for (auto _ : state) {
    std::lock_guard<std::mutex> lock(mu);
    benchmark::DoNotOptimize(++counter);
  }
  allocs.Report(state);
}
BENCHMARK(BM_MutexCounter)->Threads(1)->Threads(2)->Threads(4)->UseRealTime();

// The scaling table, and before it each benchmark against the mutex
// baseline at the same thread count.
void PrintAgainstMutex(const bench::ThreadScalingReporter::Times& times) {
  const auto base = times.find("BM_MutexCounter");
  if (base == times.end()) return;
  std::printf("\nAgainst the mutex baseline, same thread count (real time "
              "per op):\n");
  for (const auto& [name, by_threads] : times) {
    if (name == base->first) continue;
    for (const auto& [threads, ns] : by_threads) {
      const auto b = base->second.find(threads);
      if (b == base->second.end() || b->second <= 0) continue;
      std::printf("  %-24s threads:%d  %8.1f ns = %6.2fx mutex (%.1f ns)\n",
                  name.c_str(), threads, ns, ns / b->second, b->second);
    }
  }
}

}  // namespace
}  // namespace sluice::core

int main(int argc, char** argv) {
  // As sluiced does: Debian builds abseil with Mutex deadlock detection on,
  // which walks a lock graph on every Lock().
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  sluice::bench::ThreadScalingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  sluice::core::PrintAgainstMutex(reporter.times());
  reporter.PrintScaling();
  benchmark::Shutdown();
  return 0;
}
