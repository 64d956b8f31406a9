// SPDX-License-Identifier: Apache-2.0
// Global-limit accuracy of cluster mode: three replicas share a cluster token
// bucket of 100/s (burst 10) through the real sync loop, under uniform load,
// skewed load, and a step change of skew. Time is simulated (1 ms steps,
// replicas ticking once a second at staggered offsets), so the figures do
// not depend on the machine's speed. The store is the in-memory fake, or a
// real Redis with --redis host:port.
//
// Prints, per scenario, admitted ÷ limit over the steady-state seconds and
// the worst single second, and for the step, each second after the change.
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/cluster/redis_store.h"
#include "spdlog/spdlog.h"
#include "server/cluster/sync_loop.h"
#include "server/core/engine.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fake_store.h"

namespace sluice {
namespace {

constexpr double kLimit = 100;  // per second
constexpr int kReplicas = 3;

// Offered load of replica r during second s, in calls per second.
using Load = std::function<int(int r, int s)>;

struct Result {
  std::vector<int64_t> per_second;  // cluster-wide admitted, each second
};

Result Simulate(const Load& load, int seconds, const std::string& redis,
                const std::string& prefix) {
  testing::FakeClock clock;
  testing::FakeStore fake(&clock);
  std::vector<std::unique_ptr<cluster::Store>> stores;
  std::vector<std::unique_ptr<core::Engine>> engines;
  std::vector<std::unique_ptr<cluster::SyncLoop>> loops;
  core::PolicyConfig p;
  p.name = "inventory";
  core::RateLimitConfig rl;
  rl.rate = kLimit;
  rl.burst = 10;
  rl.scope = core::Scope::kCluster;
  p.rate_limit = rl;
  for (int r = 0; r < kReplicas; ++r) {
    cluster::Store* store = &fake;
    if (!redis.empty()) {
      auto options = cluster::RedisStore::ParseAddress(redis);
      options->key_prefix = prefix;
      stores.push_back(std::make_unique<cluster::RedisStore>(*options));
      store = stores.back().get();
    }
    core::Engine::Options eo;
    eo.cluster = true;
    engines.push_back(std::make_unique<core::Engine>(&clock, eo));
    engines.back()->PutPolicy(p);
    cluster::SyncLoop::Options lo;
    lo.replica_id = "replica-" + std::to_string(r);
    loops.push_back(std::make_unique<cluster::SyncLoop>(
        engines.back().get(), store, &clock, lo));
  }
  Result result;
  for (int s = 0; s < seconds; ++s) {
    int64_t admitted = 0;
    for (int ms = 0; ms < 1000; ++ms) {
      clock.Advance(absl::Milliseconds(1));
      for (int r = 0; r < kReplicas; ++r) {
        const int rate = load(r, s);
        // Spread `rate` calls evenly over the second.
        const int calls = (ms + 1) * rate / 1000 - ms * rate / 1000;
        for (int c = 0; c < calls; ++c) {
          auto d = engines[r]->Acquire("inventory", "", 1);
          if (d.ok() && d->verdict == core::Verdict::kAllow) ++admitted;
        }
        if (ms == r * 333) loops[r]->TickOnce().IgnoreError();
      }
    }
    result.per_second.push_back(admitted);
  }
  return result;
}

void Report(const char* name, const Result& r, int from, int to) {
  int64_t total = 0;
  int64_t worst = 0;
  for (int s = from; s < to; ++s) {
    total += r.per_second[s];
    worst = std::max(worst, r.per_second[s]);
  }
  const double ratio = total / (kLimit * (to - from));
  std::printf("| %-28s | %6.3f | %6.3f |\n", name, ratio, worst / kLimit);
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);  // store up/down lines are noise here
  std::string redis;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--redis") == 0 && i + 1 < argc) redis = argv[++i];
  }
  using sluice::Simulate;
  std::printf("store: %s\n\n", redis.empty() ? "in-memory fake"
                                             : ("redis " + redis).c_str());
  std::printf("| scenario (3 replicas, limit 100/s) | admitted ÷ limit | worst second ÷ limit |\n");
  std::printf("|---|---|---|\n");
  auto uniform = Simulate([](int, int) { return 200; }, 20, redis, "bench-u:");
  sluice::Report("uniform, 200/s each", uniform, 5, 20);
  auto skewed = Simulate([](int r, int) { return r == 0 ? 1000 : 20; }, 20,
                         redis, "bench-s:");
  sluice::Report("skewed, 1000/s + 2 x 20/s", skewed, 5, 20);
  // The skew moves from replica 0 to replica 1 at second 10.
  auto step = Simulate(
      [](int r, int s) {
        const int hot = s < 10 ? 0 : 1;
        return r == hot ? 1000 : 20;
      },
      20, redis, "bench-t:");
  sluice::Report("step, before (s 5-9)", step, 5, 10);
  sluice::Report("step, after (s 12-19)", step, 12, 20);
  std::printf("\nstep: cluster-wide admitted per second after the change at s=10:");
  for (int s = 10; s < 15; ++s) {
    std::printf(" %lld", static_cast<long long>(step.per_second[s]));
  }
  std::printf("\n");
  return 0;
}
