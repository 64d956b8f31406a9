// SPDX-License-Identifier: Apache-2.0
// Cluster mode under transients (issue 8): a store stall, a store that
// restarts empty, a wake-up from idle, one skewed clock, a tiny concurrency
// cap, a tiny sliding window, and a rolling restart, each at N = 3, 10 and 50
// replicas; and sidecars (issue 14): an autoscaler taking the replicas from
// 5 to 50 and back under load, and limits whose share per replica is below
// one unit. Every replica is a real Engine in cluster mode plus a real
// SyncLoop, all sharing one in-memory FakeStore. Time is simulated in 1 ms
// steps and each replica ticks once per simulated second at its own offset,
// so the figures do not depend on the machine.
//
// Prints admitted ÷ limit for every simulated second measured, and the
// largest in-flight count or window count seen for the caps. Goal: every
// second ≤ 1.10 × (limit + burst), caps never exceeded, and the 5 replicas
// left after scaling down reach 90% of the limit again. Exits 1 if any row
// misses it, so that CTest fails.
#include <algorithm>
#include <cmath>
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

core::PolicyConfig BucketPolicy(double rate = kLimit, double burst = kBurst) {
  core::PolicyConfig p;
  p.name = kDependency;
  core::RateLimitConfig rl;
  rl.rate = rate;
  rl.burst = burst;
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

// Calls offered each simulated second: `rate` to every running replica that
// is loaded, or (split) `rate` in all, split evenly over the running loaded
// replicas, as a gateway's traffic is split over its pods.
struct Load {
  int rate = 0;
  bool split = false;
};

// Up to N replicas (slots) on one simulated clock. Slot r ticks once per
// second at offset r × 1000 / N ms (slot 0 at offset 0) until it is started
// again. The first `running` slots run from the start; the others exist but
// do not run until Start(). Not thread-safe.
class Cluster {
 public:
  // Replica 0's clock runs `skew0` ahead of the true one (the store's).
  Cluster(int n, core::PolicyConfig policy,
          absl::Duration skew0 = absl::ZeroDuration(), int running = -1)
      : policy_(std::move(policy)), store_(MakeStore(&clock_)) {
    if (running < 0) running = n;
    for (int r = 0; r < n; ++r) {
      if (r == 0 && skew0 != absl::ZeroDuration()) {
        skewed_ = std::make_unique<testing::OffsetClock>(&clock_, skew0);
        clocks_.push_back(skewed_.get());
      } else {
        clocks_.push_back(&clock_);
      }
      tick_ms_.push_back(r * 1000 / n);
      ids_.push_back(Id(r));
      replicas_.push_back(r < running ? MakeReplica(ids_[r], clocks_[r],
                                                    store_.get(), policy_)
                                      : Replica{});
    }
    loaded_.assign(n, true);
    admitted_by_.assign(n, 0);
  }

  int size() const { return static_cast<int>(replicas_.size()); }
  int running() const {
    return static_cast<int>(std::count_if(
        replicas_.begin(), replicas_.end(),
        [](const Replica& r) { return r.engine != nullptr; }));
  }
  bool is_running(int r) const { return replicas_[r].engine != nullptr; }
  // Simulated ms since the start.
  int64_t now_ms() const { return now_ms_; }
  int tick_ms(int r) const { return tick_ms_[r]; }
  core::Engine& engine(int r) { return *replicas_[r].engine; }
  testing::FakeStore& store() { return *store_; }
  core::Clock* true_clock() { return &clock_; }
  // Whether slot r is offered calls while it runs (all are, at first).
  void set_loaded(int r, bool loaded) { loaded_[r] = loaded; }
  // Calls slot r admitted since the start, over all its lives.
  int64_t admitted_by(int r) const { return admitted_by_[r]; }

  // A graceful stop (SIGTERM): the final tick gives the grants back.
  void Stop(int r) { StopReplica(replicas_[r]); }
  // The process dies without its final tick (OOM kill, lost node): its
  // grants and membership stay in the store until they expire.
  void Kill(int r) {
    replicas_[r].loop.reset();
    replicas_[r].engine.reset();
  }
  // A new process, started as Server::StartCluster does: one tick before
  // serving, then the loop's own first tick at once (in the next Step) and
  // one a second from there. Under the slot's id (a pod restarted in place),
  // or under `id` (a new pod of a Deployment).
  void Start(int r, const std::string& id = "") {
    if (!id.empty()) ids_[r] = id;
    replicas_[r] = MakeReplica(ids_[r], clocks_[r], store_.get(), policy_);
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
    return Step(Load{rate, false}, on_admit);
  }
  int64_t Step(const Load& load,
               const std::function<void(int r, const core::Decision&)>&
                   on_admit = nullptr) {
    for (int r = 0; r < size(); ++r) {
      if (replicas_[r].loop && now_ms_ % 1000 == tick_ms_[r]) {
        TickReplica(replicas_[r]);
      }
    }
    // Per replica: calls per second = rate / ways.
    int64_t ways = 1;
    if (load.split) {
      ways = 0;
      for (int r = 0; r < size(); ++r) ways += is_running(r) && loaded_[r];
      ways = std::max<int64_t>(1, ways);
    }
    const int64_t calls = (now_ms_ + 1) * load.rate / (1000 * ways) -
                          now_ms_ * load.rate / (1000 * ways);
    int64_t admitted = 0;
    for (int r = 0; r < size(); ++r) {
      if (!replicas_[r].engine || !loaded_[r]) continue;
      for (int64_t c = 0; c < calls; ++c) {
        absl::StatusOr<core::Decision> d =
            replicas_[r].engine->Acquire(kDependency, "", 1);
        if (!d.ok() || d->verdict != core::Verdict::kAllow) continue;
        ++admitted;
        ++admitted_by_[r];
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
  std::vector<std::string> ids_;
  std::vector<Replica> replicas_;
  std::vector<bool> loaded_;
  std::vector<int64_t> admitted_by_;
  int64_t now_ms_ = 0;
};

// Runs `seconds` at `rate` calls per second per replica (or `load`),
// calling `at(ms)` (ms since the start of this span) before each ms. Returns
// the cluster's admitted count of each second.
std::vector<int64_t> Run(Cluster& c, int seconds, const Load& load,
                         const std::function<void(int64_t ms)>& at = nullptr) {
  std::vector<int64_t> per_second(seconds, 0);
  for (int64_t ms = 0; ms < seconds * 1000; ++ms) {
    if (at) at(ms);
    per_second[ms / 1000] += c.Step(load);
  }
  return per_second;
}
std::vector<int64_t> Run(Cluster& c, int seconds, int rate,
                         const std::function<void(int64_t ms)>& at = nullptr) {
  return Run(c, seconds, Load{rate, false}, at);
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
    core::PermitId permit_id;
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

// ---------------------------------------------------------------------------
// Sidecars (issue 14): one replica per gateway pod, the replica count
// following the gateway's HorizontalPodAutoscaler, and the gateway's traffic
// split evenly over its pods.

// Most a cluster may admit in one second: 1.10 × (limit + burst).
int64_t Goal(double limit, double burst) {
  return static_cast<int64_t>(std::floor(1.10 * (limit + burst) + 1e-9));
}

// A new pod's name, as a Deployment makes them: the ReplicaSet's name and
// five random characters (a fixed sequence, so runs repeat).
std::string PodName() {
  static uint64_t state = 14;
  static const char kAlphabet[] = "bcdfghjklmnpqrstvwxz2456789";
  std::string name = "sluice-5d8f7c9b4-";
  for (int i = 0; i < 5; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    name += kAlphabet[(state >> 33) % (sizeof(kAlphabet) - 1)];
  }
  return name;
}

constexpr int kGatewayLoad = 2000;  // calls/s offered to the whole cluster
constexpr int kFewPods = 5;
constexpr int kManyPods = 50;

// The schedule, in seconds from the end of the warm-up. Scale-up follows
// the HPA's default behaviour (at most double, or +4, per 15 s): 5 → 10 →
// 20 → 40 → 50; each batch's pods become ready spread over 2 s. After the
// hold (the HPA's 300 s scale-down stabilisation changes nothing at steady
// load, so it is cut to 30 s), scale-down goes straight to 5 (the default
// allows 100% per 15 s): 40 pods stop gracefully and 5 are killed without
// their final tick (an OOM kill, a lost node).
struct ScaleStep {
  int at_s;
  int pods;
};
constexpr ScaleStep kScaleUp[] = {{10, 10}, {25, 20}, {40, 40}, {55, 50}};
constexpr int kAt50From = 60;     // measured "at 50" from here...
constexpr int kScaleDownAt = 85;  // ...to here, where 45 pods go
constexpr int kKilledPods = 5;
constexpr int kAutoscaleSeconds = 115;

struct AutoscaleResult {
  std::vector<int64_t> per_second;
  std::vector<int> pods;  // running at the end of each second
};

AutoscaleResult Autoscale(double burst) {
  Cluster c(kManyPods, BucketPolicy(kLimit, burst), absl::ZeroDuration(),
            kFewPods);
  const Load load{kGatewayLoad, true};
  Run(c, kWarmUpSeconds, load);
  // Slots kFewPods.. run in order of creation; every tenth of the pods
  // removed at scale-down is killed, the rest stop.
  std::vector<std::pair<int64_t, int>> starts;  // (ms, slot)
  int next = kFewPods;
  for (const ScaleStep& step : kScaleUp) {
    for (int k = 0; next < step.pods; ++k, ++next) {
      starts.emplace_back(step.at_s * 1000 + (k * 173) % 2000, next);
    }
  }
  AutoscaleResult result;
  result.per_second.assign(kAutoscaleSeconds, 0);
  for (int64_t ms = 0; ms < kAutoscaleSeconds * 1000; ++ms) {
    for (const auto& [at, slot] : starts) {
      if (at == ms) c.Start(slot, PodName());
    }
    if (ms == kScaleDownAt * 1000) {
      for (int r = kFewPods; r < kManyPods; ++r) {
        if ((r - kFewPods) % ((kManyPods - kFewPods) / kKilledPods) == 4) {
          c.Kill(r);
        } else {
          c.Stop(r);
        }
      }
    }
    result.per_second[ms / 1000] += c.Step(load);
    if (ms % 1000 == 999) result.pods.push_back(c.running());
  }
  return result;
}

// Mean admitted ÷ `limit` over seconds [from, to).
double Mean(const std::vector<int64_t>& s, int from, int to,
            double limit = kLimit) {
  double sum = 0;
  for (int i = from; i < to; ++i) sum += s[i];
  return sum / (to - from) / limit;
}

// Seconds from `from` until the first second from which every second
// admits at least 90% of the limit; -1 if never.
int SecondsToRecover(const std::vector<int64_t>& s, int from) {
  int since = -1;
  for (int i = from; i < static_cast<int>(s.size()); ++i) {
    if (s[i] >= 0.90 * kLimit) {
      if (since < 0) since = i;
    } else {
      since = -1;
    }
  }
  return since < 0 ? -1 : since - from;
}

void PrintSeries(const char* title, const std::vector<int64_t>& s,
                 double limit) {
  std::printf("\n%s, admitted ÷ limit each second:", title);
  for (size_t i = 0; i < s.size(); ++i) {
    std::printf("%s%.2f", i % 20 == 0 ? "\n  " : " ", s[i] / limit);
  }
  std::printf("\n");
}

int PrintAutoscale() {
  int failed = 0;
  std::printf(
      "| burst | goal | seconds over goal | worst | at 5 | scale-up | at 50 "
      "| back at 5: s to ≥ 0.90 | back at 5, last 10 s | result |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<std::pair<std::string, AutoscaleResult>> runs;
  for (double burst : {kBurst, double{kManyPods}}) {
    AutoscaleResult r = Autoscale(burst);
    const std::vector<int64_t>& s = r.per_second;
    const int64_t goal = Goal(kLimit, burst);
    const int64_t over = std::count_if(
        s.begin(), s.end(), [&](int64_t a) { return a > goal; });
    const int recover = SecondsToRecover(s, kScaleDownAt);
    const bool pass = over == 0 && recover >= 0;
    failed += !pass;
    std::printf(
        "| %.0f | %.2f | %lld | %.2f | %.2f | %.2f | %.2f | %d | %.2f | %s "
        "|\n",
        burst, goal / kLimit, static_cast<long long>(over),
        Worst(s) / kLimit, Mean(s, 0, kScaleUp[0].at_s),
        Mean(s, kScaleUp[0].at_s, kAt50From), Mean(s, kAt50From, kScaleDownAt),
        recover, Mean(s, kAutoscaleSeconds - 10, kAutoscaleSeconds),
        PassFail(pass));
    std::fflush(stdout);
    runs.emplace_back("autoscale 5 → 50 → 5, burst " +
                          std::to_string(static_cast<int>(burst)),
                      std::move(r));
  }
  for (const auto& [title, r] : runs) {
    PrintSeries(title.c_str(), r.per_second, kLimit);
    std::printf("  pods running at the end of each 5th second:");
    for (size_t i = 4; i < r.pods.size(); i += 5) std::printf(" %d", r.pods[i]);
    std::printf("\n");
  }
  return failed;
}

// A share below one unit: limit 20/s across 50 replicas.
constexpr double kSmallLimit = 20;
constexpr int kShareSeconds = 60;

struct ShareResult {
  std::vector<int64_t> per_second;
  int loaded = 0;     // replicas offered calls
  int admitting = 0;  // of those, replicas that admitted at least one call
};

ShareResult SmallShare(double burst, int loaded) {
  Cluster c(kManyPods, BucketPolicy(kSmallLimit, burst));
  for (int r = loaded; r < kManyPods; ++r) c.set_loaded(r, false);
  const Load load{kGatewayLoad, true};
  Run(c, kWarmUpSeconds, load);
  std::vector<int64_t> before(kManyPods);
  for (int r = 0; r < kManyPods; ++r) before[r] = c.admitted_by(r);
  ShareResult result;
  result.per_second = Run(c, kShareSeconds, load);
  result.loaded = loaded;
  for (int r = 0; r < loaded; ++r) {
    result.admitting += c.admitted_by(r) > before[r];
  }
  return result;
}

int PrintSmallShare() {
  int failed = 0;
  std::printf(
      "| burst | replicas loaded | calls/s each | goal | worst | mean | "
      "lowest | replicas that admitted in 60 s | result |\n"
      "|---|---|---|---|---|---|---|---|---|\n");
  std::vector<std::pair<std::string, ShareResult>> runs;
  for (double burst : {10.0, kSmallLimit, double{kManyPods}}) {
    for (int loaded : {kManyPods, kFewPods}) {
      ShareResult r = SmallShare(burst, loaded);
      const std::vector<int64_t>& s = r.per_second;
      const int64_t goal = Goal(kSmallLimit, burst);
      const bool pass = Worst(s) <= goal && Mean(s, 0, s.size()) > 0;
      failed += !pass;
      std::printf("| %.0f | %d | %d | %.2f | %.2f | %.2f | %.2f | %d of %d | "
                  "%s |\n",
                  burst, loaded, kGatewayLoad / loaded, goal / kSmallLimit,
                  Worst(s) / kSmallLimit,
                  Mean(s, 0, s.size(), kSmallLimit),
                  *std::min_element(s.begin(), s.end()) / kSmallLimit,
                  r.admitting, r.loaded, PassFail(pass));
      std::fflush(stdout);
      runs.emplace_back("limit 20/s, burst " +
                            std::to_string(static_cast<int>(burst)) + ", " +
                            std::to_string(loaded) + " of 50 loaded",
                        std::move(r));
    }
  }
  for (const auto& [title, r] : runs) {
    PrintSeries(title.c_str(), r.per_second, kSmallLimit);
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

  std::printf(
      "\nSidecars: %d calls/s offered to the whole cluster, split evenly over "
      "the running replicas (one per gateway pod).\n\n"
      "Autoscale 5 → 50 → 5 under load, token bucket %.0f/s: HPA default "
      "scale-up (5 → 10 → 20 → 40 → 50, one step per 15 s, pods ready over "
      "2 s, new pod names), 30 s at 50, then straight back to 5 (40 stop, "
      "%d killed without their final tick). Utilisation = admitted ÷ limit, "
      "mean over each phase.\n\n",
      kGatewayLoad, kLimit, kKilledPods);
  failed += PrintAutoscale();

  std::printf(
      "\nShare below one unit: token bucket %.0f/s across %d replicas, %d s "
      "after a %d s warm-up, the load split over the loaded replicas.\n\n",
      kSmallLimit, kManyPods, kShareSeconds, kWarmUpSeconds);
  failed += PrintSmallShare();

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
