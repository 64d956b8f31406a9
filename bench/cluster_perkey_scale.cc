// SPDX-License-Identifier: Apache-2.0
// Per-key cluster limits at scale: three replicas (each an Engine, a
// SyncLoop and a RedisStore, in this process) share a per_key token bucket
// through a real redis-server that this program starts. Every replica sees
// the same N active keys (default 100,000).
//
//   cold: each key is asked for less than its static share per tick, so no
//         key needs sharing;
//   hot:  each key is asked for more than its static share on every
//         replica, so every key is shared through Redis (the worst case).
//
// For each phase it prints the tick duration of each replica, Redis's
// memory per key, and the Acquire p50/p99 of a load thread while a tick runs
// and between ticks. Time is real; ticks are driven one replica after the
// other by this program.
//
//   cluster_perkey_scale [--keys N] [--seconds S]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/percentile.h"
#include "server/cluster/redis_store.h"
#include "server/cluster/sync_loop.h"
#include "server/core/engine.h"
#include "spdlog/spdlog.h"
#include "tests/testing/redis_server.h"

namespace sluice {
namespace {

constexpr char kPolicy[] = "tenant";
constexpr int kReplicas = 3;

struct Replica {
  std::unique_ptr<cluster::RedisStore> store;
  std::unique_ptr<core::Engine> engine;
  std::unique_ptr<cluster::SyncLoop> loop;
};

std::string Key(int i) { return absl::StrCat("tenant-", i); }

int64_t UsedMemory(const testing::RedisServer& redis) {
  const std::string info = redis.Command("INFO memory");
  const size_t at = info.find("used_memory:");
  return at == std::string::npos ? 0 : std::atoll(info.c_str() + at + 12);
}

struct Latencies {
  std::mutex mu;
  std::vector<absl::Duration> during, between;
};

void RunPhase(const char* name, std::vector<Replica>& replicas, int keys,
              int calls_per_key, int seconds, testing::RedisServer& redis) {
  const int64_t memory_before = UsedMemory(redis);
  std::atomic<bool> ticking{false};
  std::atomic<bool> stop{false};
  Latencies latencies;
  // A load thread on replica 0: random keys, paced (about 50,000 calls a
  // second) so that it does not make keys hot by itself.
  std::thread load([&] {
    std::mt19937 random(7);
    std::vector<absl::Duration> during, between;
    while (!stop.load()) {
      const std::string key = Key(static_cast<int>(random() % keys));
      const bool in_tick = ticking.load();
      const absl::Time t0 = absl::Now();
      replicas[0].engine->Acquire(kPolicy, key, 1).IgnoreError();
      const absl::Duration d = absl::Now() - t0;
      (in_tick && ticking.load() ? during : between).push_back(d);
      absl::SleepFor(absl::Microseconds(20));
    }
    std::lock_guard<std::mutex> lock(latencies.mu);
    latencies.during = std::move(during);
    latencies.between = std::move(between);
  });
  std::vector<absl::Duration> tick_durations;
  for (int s = 0; s < seconds; ++s) {
    const absl::Time second_start = absl::Now();
    // Demand of this second on every replica.
    for (Replica& r : replicas) {
      for (int i = 0; i < keys; ++i) {
        const std::string key = Key(i);
        for (int c = 0; c < calls_per_key; ++c) {
          r.engine->Acquire(kPolicy, key, 1).IgnoreError();
        }
      }
    }
    for (Replica& r : replicas) {
      ticking = true;
      const absl::Time t0 = absl::Now();
      if (absl::Status st = r.loop->TickOnce(); !st.ok()) {
        std::printf("tick failed: %s\n", st.ToString().c_str());
      }
      tick_durations.push_back(absl::Now() - t0);
      ticking = false;
    }
    const absl::Duration left = absl::Seconds(1) - (absl::Now() - second_start);
    if (left > absl::ZeroDuration()) absl::SleepFor(left);
  }
  stop = true;
  load.join();
  const int64_t memory_after = UsedMemory(redis);
  const int64_t redis_keys = std::atoll(redis.Command("DBSIZE").c_str());
  auto status = replicas[0].engine->Inspect(kPolicy, Key(0));
  std::printf("\n## %s: %d keys on each of %d replicas, %d calls per key per "
              "tick\n\n",
              name, keys, kReplicas, calls_per_key);
  std::printf("| figure | value |\n|---|---|\n");
  std::printf(
      "| tick duration, median / worst | %s / %s |\n",
      absl::FormatDuration(base::Percentile(tick_durations, 0.5)).c_str(),
      absl::FormatDuration(base::Percentile(tick_durations, 1.0)).c_str());
  std::printf("| keys in Redis | %lld |\n", static_cast<long long>(redis_keys));
  std::printf("| Redis memory growth | %lld bytes (%.0f per active key) |\n",
              static_cast<long long>(memory_after - memory_before),
              static_cast<double>(memory_after - memory_before) / keys);
  std::printf("| key 0 on replica 0 holds a grant | %s |\n",
              status.ok() && status->gates && status->gates->has_grant ? "yes"
                                                                       : "no");
  std::lock_guard<std::mutex> lock(latencies.mu);
  std::printf(
      "| Acquire p50 / p99 between ticks (%zu calls) | %s / %s |\n",
      latencies.between.size(),
      absl::FormatDuration(base::Percentile(latencies.between, 0.5)).c_str(),
      absl::FormatDuration(base::Percentile(latencies.between, 0.99)).c_str());
  std::printf(
      "| Acquire p50 / p99 during ticks (%zu calls) | %s / %s |\n",
      latencies.during.size(),
      absl::FormatDuration(base::Percentile(latencies.during, 0.5)).c_str(),
      absl::FormatDuration(base::Percentile(latencies.during, 0.99)).c_str());
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);
  int keys = 100000;
  int seconds = 6;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--keys") == 0) keys = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atoi(argv[i + 1]);
  }
  sluice::testing::RedisServer redis;
  if (!redis.Start()) {
    std::fprintf(stderr, "cannot start redis-server\n");
    return 1;
  }
  sluice::core::PolicyConfig p;
  p.name = sluice::kPolicy;
  p.per_key = true;
  p.max_keys = static_cast<uint32_t>(keys) * 2;
  sluice::core::RateLimitConfig rl;
  rl.rate = 40;
  rl.burst = 40;
  rl.scope = sluice::core::Scope::kCluster;
  p.rate_limit = rl;

  auto run = [&](const char* name, int calls_per_key) {
    redis.Command("FLUSHALL");
    std::vector<sluice::Replica> replicas(sluice::kReplicas);
    for (int r = 0; r < sluice::kReplicas; ++r) {
      auto options = sluice::cluster::RedisStore::ParseAddress(redis.address());
      options->timeout = absl::Seconds(5);  // measure, do not time out
      replicas[r].store =
          std::make_unique<sluice::cluster::RedisStore>(*options);
      sluice::core::Engine::Options eo;
      eo.cluster = true;
      replicas[r].engine = std::make_unique<sluice::core::Engine>(
          sluice::core::RealClock::Get(), eo);
      replicas[r].engine->PutPolicy(p);
      sluice::cluster::SyncLoop::Options lo;
      lo.replica_id = absl::StrCat("r", r);
      replicas[r].loop = std::make_unique<sluice::cluster::SyncLoop>(
          replicas[r].engine.get(), replicas[r].store.get(),
          sluice::core::RealClock::Get(), lo);
    }
    for (auto& r : replicas) r.loop->TickOnce().IgnoreError();
    sluice::RunPhase(name, replicas, keys, calls_per_key, seconds, redis);
  };
  std::printf("per_key token bucket 40/s burst 40, scope CLUSTER; static share "
              "per replica floor(40 / 4) = 10\n");
  run("cold keys", 5);
  run("hot keys", 20);
  redis.Kill();
  return 0;
}
