// Cluster mode under transients (issue 8): a store stall, a store that
// restarts empty, a wake-up from idle, one skewed clock, a tiny concurrency
// cap, a tiny sliding window, and a rolling restart, each at N = 3, 10 and 50
// replicas. Every replica is a real Engine in cluster mode plus a real
// SyncLoop, all sharing one in-memory FakeStore. Time is simulated in 1 ms
// steps and each replica ticks once per simulated second at its own offset,
// so the figures do not depend on the machine.
//
// Prints admitted ÷ limit for every simulated second measured, and the
// largest in-flight count or window count seen for the caps. Goal: every
// second ≤ 1.10 × (limit + burst), caps never exceeded. Exits 1 if any row
// misses it, so that CTest fails.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/cluster/store.h"
#include "server/cluster/sync_loop.h"
#include "server/core/engine.h"
#include "server/core/policy_config.h"
#include "spdlog/spdlog.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fake_store.h"
#include "tests/testing/offset_clock.h"

namespace sluice {
namespace {

// The store, keeping `clock`'s time as Redis keeps its own TIME.
std::unique_ptr<testing::FakeStore> MakeStore(core::Clock* clock) {
  return std::make_unique<testing::FakeStore>(clock);
}

// One sluiced replica: an engine in cluster mode and its sync loop, ticked by
// hand. Both are null while the replica is stopped.
struct Replica {
  std::unique_ptr<core::Engine> engine;
  std::unique_ptr<cluster::SyncLoop> loop;
};

Replica MakeReplica(const std::string& id, core::Clock* clock,
                    cluster::Store* store, const core::PolicyConfig& policy) {
  Replica r;
  core::Engine::Options eo;
  eo.cluster = true;
  r.engine = std::make_unique<core::Engine>(clock, eo);
  r.engine->PutPolicy(policy);
  cluster::SyncLoop::Options lo;
  lo.replica_id = id;
  r.loop = std::make_unique<cluster::SyncLoop>(r.engine.get(), store, clock,
                                               std::move(lo));
  return r;
}

void TickReplica(Replica& r) {
  r.loop->TickOnce().IgnoreError();  // a failed tick is a state, not an error
}

// A graceful stop (SIGTERM): the final tick that gives the grants back, as
// SyncLoop::Stop() makes, then the process is gone.
void StopReplica(Replica& r) {
  r.loop->Leave().IgnoreError();
  r.loop.reset();
  r.engine.reset();
}

// ---------------------------------------------------------------------------

constexpr char kDependency[] = "inventory";
constexpr double kLimit = 100;  // per second
constexpr double kBurst = 10;
// Most a cluster may admit in one second: 1.10 × (limit + burst).
constexpr int64_t kMaxPerSecond = 121;
constexpr uint32_t kMaxInFlight = 2;
constexpr int64_t kWindowLimit = 3;
// Calls offered per replica per second: "flat out", far above the limit at
// every N. Steady load is flat out too, so any excess share shows.
constexpr int kFlatOut = 1000;
constexpr int kWarmUpSeconds = 5;
constexpr int kMeasureSeconds = 4;
// The caps are checked over a longer span: they must never be exceeded.
constexpr int kCapSeconds = 10;

core::PolicyConfig BucketPolicy() {
  core::PolicyConfig p;
  p.name = kDependency;
  core::RateLimitConfig rl;
  rl.rate = kLimit;
  rl.burst = kBurst;
  rl.per = absl::Seconds(1);
  rl.scope = core::Scope::kCluster;
  p.rate_limit = rl;
  return p;
}

core::PolicyConfig ConcurrencyPolicy() {
  core::PolicyConfig p;
  p.name = kDependency;
  core::ConcurrencyConfig c;
  c.max_in_flight = kMaxInFlight;
  c.scope = core::Scope::kCluster;
  p.concurrency = c;
  return p;
}

core::PolicyConfig WindowPolicy() {
  core::PolicyConfig p;
  p.name = kDependency;
  core::RateLimitConfig rl;
  rl.algorithm = core::RateAlgorithm::kSlidingWindow;
  rl.rate = kWindowLimit;
  rl.per = absl::Seconds(1);
  rl.scope = core::Scope::kCluster;
  p.rate_limit = rl;
  return p;
}

// N replicas on one simulated clock. Replica r ticks once per second at
// offset r × 1000 / N ms (replica 0 at offset 0). Not thread-safe.
class Cluster {
 public:
  // Replica 0's clock runs `skew0` ahead of the true one (the store's).
  Cluster(int n, core::PolicyConfig policy,
          absl::Duration skew0 = absl::ZeroDuration())
      : policy_(std::move(policy)), store_(MakeStore(&clock_)) {
    for (int r = 0; r < n; ++r) {
      if (r == 0 && skew0 != absl::ZeroDuration()) {
        skewed_ = std::make_unique<testing::OffsetClock>(&clock_, skew0);
        clocks_.push_back(skewed_.get());
      } else {
        clocks_.push_back(&clock_);
      }
      tick_ms_.push_back(r * 1000 / n);
      replicas_.push_back(
          MakeReplica(Id(r), clocks_[r], store_.get(), policy_));
    }
  }

  int size() const { return static_cast<int>(replicas_.size()); }
  // Simulated ms since the start.
  int64_t now_ms() const { return now_ms_; }
  int tick_ms(int r) const { return tick_ms_[r]; }
  core::Engine& engine(int r) { return *replicas_[r].engine; }
  testing::FakeStore& store() { return *store_; }
  core::Clock* true_clock() { return &clock_; }

  void Stop(int r) { StopReplica(replicas_[r]); }
  // A new process under the same id, started as Server::StartCluster does:
  // one tick before serving, then the loop's own first tick at once (in the
  // next Step) and one a second from there.
  void Start(int r) {
    replicas_[r] = MakeReplica(Id(r), clocks_[r], store_.get(), policy_);
    TickReplica(replicas_[r]);
    tick_ms_[r] = static_cast<int>(now_ms_ % 1000);
  }

  // One simulated ms: the replicas due tick, then each running replica is
  // offered its part of `rate` calls per second (spread evenly over the
  // second). Returns how many the cluster admitted; `on_admit`, if set, sees
  // each admitted call.
  int64_t Step(int rate,
               const std::function<void(int r, const core::Decision&)>&
                   on_admit = nullptr) {
    for (int r = 0; r < size(); ++r) {
      if (replicas_[r].loop && now_ms_ % 1000 == tick_ms_[r]) {
        TickReplica(replicas_[r]);
      }
    }
    const int64_t calls = (now_ms_ + 1) * rate / 1000 - now_ms_ * rate / 1000;
    int64_t admitted = 0;
    for (int r = 0; r < size(); ++r) {
      if (!replicas_[r].engine) continue;
      for (int64_t c = 0; c < calls; ++c) {
        absl::StatusOr<core::Decision> d =
            replicas_[r].engine->Acquire(kDependency, "", 1);
        if (!d.ok() || d->verdict != core::Verdict::kAllow) continue;
        ++admitted;
        if (on_admit) on_admit(r, *d);
      }
    }
    clock_.Advance(absl::Milliseconds(1));
    ++now_ms_;
    return admitted;
  }

 private:
  static std::string Id(int r) { return "replica-" + std::to_string(r); }

  const core::PolicyConfig policy_;
  testing::FakeClock clock_;  // the true time, and the store's
  std::unique_ptr<testing::OffsetClock> skewed_;
  std::unique_ptr<testing::FakeStore> store_;
  std::vector<core::Clock*> clocks_;
  std::vector<int> tick_ms_;
  std::vector<Replica> replicas_;
  int64_t now_ms_ = 0;
};

// Runs `seconds` at `rate` calls per second per replica, calling `at(ms)`
// (ms since the start of this span) before each ms. Returns the cluster's
// admitted count of each second.
std::vector<int64_t> Run(Cluster& c, int seconds, int rate,
                         const std::function<void(int64_t ms)>& at = nullptr) {
  std::vector<int64_t> per_second(seconds, 0);
  for (int64_t ms = 0; ms < seconds * 1000; ++ms) {
    if (at) at(ms);
    per_second[ms / 1000] += c.Step(rate);
  }
  return per_second;
}

// 1. The store answers nothing for 600 ms; the tick in flight when it stops
// is applied but its reply lost.
std::vector<int64_t> StoreStall(int n) {
  constexpr int64_t kStallMs = 600;
  Cluster c(n, BucketPolicy());
  Run(c, kWarmUpSeconds, kFlatOut);
  // The span starts on a whole second, where replica 0 ticks: that tick is
  // the one in flight.
  return Run(c, kMeasureSeconds, kFlatOut, [&](int64_t ms) {
    if (ms == 0) c.store().LoseNextReplies(1);
    if (ms == 1) c.store().SetDown(true);
    if (ms == kStallMs) c.store().SetDown(false);
  });
}

// 2. The store restarts empty under load.
std::vector<int64_t> StoreRestartsEmpty(int n) {
  Cluster c(n, BucketPolicy());
  Run(c, kWarmUpSeconds, kFlatOut);
  return Run(c, kMeasureSeconds, kFlatOut, [&](int64_t ms) {
    if (ms == 0) c.store().WipeAll();
  });
}

// 3. Every replica idle (but ticking), then all flat out at once.
std::vector<int64_t> IdleToFlatOut(int n) {
  Cluster c(n, BucketPolicy());
  Run(c, kWarmUpSeconds, 0);
  return Run(c, kMeasureSeconds, kFlatOut);
}

// 4. Replica 0's clock is 4 s ahead of the others' and the store's.
std::vector<int64_t> ClockSkew(int n) {
  Cluster c(n, BucketPolicy(), absl::Seconds(4));
  Run(c, kWarmUpSeconds, kFlatOut);
  return Run(c, kMeasureSeconds, kFlatOut);
}

// 7. Each replica in turn stops gracefully, comes back 1 s later under the
// same id, and the next one stops 3 s after it. Each stop falls half a
// second after that replica's last tick.
std::vector<int64_t> RollingRestart(int n) {
  constexpr int64_t kDownMs = 1000;
  constexpr int64_t kGapMs = 3000;
  Cluster c(n, BucketPolicy());
  Run(c, kWarmUpSeconds, kFlatOut);
  std::vector<int64_t> stop_at;
  for (int r = 0; r < n; ++r) {
    stop_at.push_back(r * kGapMs + (c.tick_ms(r) + 500) % 1000);
  }
  const int seconds = static_cast<int>((n * kGapMs + kDownMs) / 1000) + 1;
  return Run(c, seconds, kFlatOut, [&](int64_t ms) {
    for (int r = 0; r < n; ++r) {
      if (ms == stop_at[r]) c.Stop(r);
      if (ms == stop_at[r] + kDownMs) c.Start(r);
    }
  });
}

struct CapResult {
  int64_t worst = 0;     // most in flight at once, or in any 1 s span
  int64_t admitted = 0;  // calls admitted over the span
};

// 5. Cluster max_in_flight 2; every admitted call is held 30 ms, then
// reported SUCCESS to the replica that admitted it.
CapResult Concurrency(int n) {
  constexpr int64_t kHoldMs = 30;
  struct Held {
    int replica;
    uint64_t permit_id;
    int64_t release_ms;
  };
  Cluster c(n, ConcurrencyPolicy());
  std::deque<Held> held;  // in release order: every call is held as long
  CapResult result;
  const int64_t measure_from = kWarmUpSeconds * 1000;
  const int64_t end = measure_from + kCapSeconds * 1000;
  while (c.now_ms() < end) {
    const int64_t now = c.now_ms();
    while (!held.empty() && held.front().release_ms <= now) {
      c.engine(held.front().replica)
          .Report(kDependency, "", held.front().permit_id,
                  core::Outcome::kSuccess, absl::Milliseconds(kHoldMs));
      held.pop_front();
    }
    const int64_t admitted =
        c.Step(kFlatOut, [&](int r, const core::Decision& d) {
          held.push_back({r, d.permit_id, now + kHoldMs});
        });
    if (now >= measure_from) {
      result.admitted += admitted;
      result.worst = std::max<int64_t>(result.worst, held.size());
    }
  }
  return result;
}

// 6. Cluster sliding window of 3 per second under flat-out load: the most
// admitted in any 1 s span, sliding by 1 ms.
CapResult Window(int n) {
  Cluster c(n, WindowPolicy());
  Run(c, kWarmUpSeconds, kFlatOut);
  std::vector<int64_t> last_second(1000, 0);  // admitted per ms, a ring
  int64_t in_span = 0;
  CapResult result;
  for (int64_t ms = 0; ms < kCapSeconds * 1000; ++ms) {
    const int64_t admitted = c.Step(kFlatOut);
    int64_t& slot = last_second[ms % 1000];
    in_span += admitted - slot;
    slot = admitted;
    result.admitted += admitted;
    result.worst = std::max(result.worst, in_span);
  }
  return result;
}

// ---------------------------------------------------------------------------
// Printing.

constexpr int kReplicaCounts[] = {3, 10, 50};

int64_t Worst(const std::vector<int64_t>& per_second) {
  return *std::max_element(per_second.begin(), per_second.end());
}

const char* PassFail(bool pass) { return pass ? "PASS" : "FAIL"; }

// One table row per N; returns the number of rows that failed.
int PrintPerSecondRows(const char* name,
                       const std::function<std::vector<int64_t>(int)>& run) {
  int failed = 0;
  for (int n : kReplicaCounts) {
    const std::vector<int64_t> s = run(n);
    const bool pass = Worst(s) <= kMaxPerSecond;
    failed += !pass;
    std::printf("| %s | %d |", name, n);
    for (int64_t a : s) std::printf(" %.2f |", a / kLimit);
    std::printf(" %.2f | %s |\n", Worst(s) / kLimit, PassFail(pass));
    std::fflush(stdout);
  }
  return failed;
}

int PrintRollingRestart() {
  int failed = 0;
  std::vector<std::pair<int, std::vector<int64_t>>> rolls;
  std::printf(
      "| N | seconds | seconds over %lld | worst | result |\n"
      "|---|---|---|---|---|\n",
      static_cast<long long>(kMaxPerSecond));
  for (int n : kReplicaCounts) {
    std::vector<int64_t> s = RollingRestart(n);
    const int64_t over = std::count_if(
        s.begin(), s.end(), [](int64_t a) { return a > kMaxPerSecond; });
    const bool pass = over == 0;
    failed += !pass;
    std::printf("| %d | %zu | %lld | %.2f | %s |\n", n, s.size(),
                static_cast<long long>(over), Worst(s) / kLimit,
                PassFail(pass));
    std::fflush(stdout);
    rolls.emplace_back(n, std::move(s));
  }
  for (const auto& [n, s] : rolls) {
    std::printf("\nrolling restart, N=%d, admitted ÷ limit each second:", n);
    for (size_t i = 0; i < s.size(); ++i) {
      std::printf("%s%.2f", i % 20 == 0 ? "\n  " : " ", s[i] / kLimit);
    }
    std::printf("\n");
  }
  return failed;
}

int PrintCapRows(const char* name, int64_t cap,
                 const std::function<CapResult(int)>& run) {
  int failed = 0;
  for (int n : kReplicaCounts) {
    const CapResult r = run(n);
    const bool pass = r.worst <= cap && r.admitted > 0;
    failed += !pass;
    std::printf("| %s | %d | %lld | %lld | %lld | %s |\n", name, n,
                static_cast<long long>(cap), static_cast<long long>(r.worst),
                static_cast<long long>(r.admitted), PassFail(pass));
    std::fflush(stdout);
  }
  return failed;
}

int RunAll() {
  int failed = 0;

  std::printf(
      "Token bucket %.0f/s, burst %.0f, scope CLUSTER, FAIL_OPEN; %d calls/s "
      "offered to each replica; %d s warm-up.\n"
      "Admitted ÷ limit per simulated second; goal: every second ≤ %.2f "
      "(%lld admitted).\n\n",
      kLimit, kBurst, kFlatOut, kWarmUpSeconds, kMaxPerSecond / kLimit,
      static_cast<long long>(kMaxPerSecond));
  std::printf(
      "| scenario | N | s1 | s2 | s3 | s4 | worst | result |\n"
      "|---|---|---|---|---|---|---|---|\n");
  failed += PrintPerSecondRows("store stalls 600 ms", StoreStall);
  failed += PrintPerSecondRows("store restarts empty", StoreRestartsEmpty);
  failed += PrintPerSecondRows("idle to flat out", IdleToFlatOut);
  failed += PrintPerSecondRows("one clock 4 s ahead", ClockSkew);

  std::printf(
      "\nRolling restart: each replica stops (final tick), returns 1 s later "
      "under the same id; the next stops 3 s later.\n\n");
  failed += PrintRollingRestart();

  std::printf(
      "\nCaps, over %d s after the warm-up: concurrency = most calls held at "
      "once (each held 30 ms); window = most admitted in any 1 s span.\n\n",
      kCapSeconds);
  std::printf(
      "| scenario | N | cap | most | admitted | result |\n"
      "|---|---|---|---|---|---|\n");
  failed += PrintCapRows("max_in_flight 2", kMaxInFlight, Concurrency);
  failed += PrintCapRows("sliding window 3/s", kWindowLimit, Window);

  std::printf("\n%s: %d row%s failed\n", failed == 0 ? "PASS" : "FAIL", failed,
              failed == 1 ? "" : "s");
  return failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace sluice

int main() {
  spdlog::set_level(spdlog::level::off);  // store up/down lines are noise here
  return sluice::RunAll();
}
