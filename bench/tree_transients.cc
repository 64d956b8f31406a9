// SPDX-License-Identifier: Apache-2.0
// The transients of bench/cluster_transients, plus killing a central replica
// under load, on the grant tree at 1,000 leaves (issue 24): central replicas
// (LeaseLedger over a FakeStore as Redis) and leaves leasing from them, all
// on one simulated clock in 1 ms steps (tests/grant_tree/tree_harness.h),
// every process ticking once a simulated second at its own phase.
//
// For each transient it prints the worst whole second and the worst sliding
// 1 s span of admitted calls ÷ (limit + burst), and what the harness's
// InForceChecker saw at every simulated millisecond of the run (build and
// warm-up included): milliseconds checked, milliseconds at which the grants
// in force added up to more than the limit, and the highest in force ÷
// limit. Goal: every second ≤ 1.10 × (limit + burst), never over the limit
// in force; for the caps, never more than the cap. The runs take no random
// input: the same flags give the same figures. Exits 1 if any row misses
// its goal.
//
// Usage: tree_transients [--leaves N] [--centrals C] [--rate R] [--burst B]
//                        [--flat-out CALLS_PER_LEAF_PER_S] [--only NAME]
// --only runs the transients whose name contains NAME.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/core/engine.h"
#include "spdlog/spdlog.h"
#include "tests/grant_tree/tree_harness.h"

namespace sluice {
namespace {

using tree_testing::TreeHarness;
using tree_testing::TreeProcess;

constexpr char kDep[] = "api";

struct Flags {
  int leaves = 1000;
  int centrals = 2;
  int rate = 2000;
  int burst = 200;
  // Calls offered to each leaf a second when it is flat out: 10 × the
  // limit over all leaves at the defaults.
  int flat_out = 20;
  std::string only;
};

std::string BucketYaml(int rate, int burst) {
  return absl::StrCat("policies:\n  - name: ", kDep,
                      "\n    rate_limit: { rate: ", rate,
                      ", per: 1s, burst: ", burst, ", scope: CLUSTER }\n");
}
std::string ConcurrencyYaml(int cap) {
  return absl::StrCat("policies:\n  - name: ", kDep,
                      "\n    concurrency: { max_in_flight: ", cap,
                      ", scope: CLUSTER }\n");
}
std::string WindowYaml(int count) {
  return absl::StrCat("policies:\n  - name: ", kDep,
                      "\n    rate_limit: { algorithm: SLIDING_WINDOW, rate: ",
                      count, ", per: 1s, scope: CLUSTER }\n");
}

// A tree under load. Leaves are numbered by slot; a leaf restarted under
// its id gets a new slot (the harness keeps the dead one as null). Calls
// are offered by the bench itself before every simulated ms (not through
// the harness's loads) so that a call can be held open and every admitted
// call is counted by the ms.
class LoadedTree {
 public:
  // Central 0's clock runs `central_skew` ahead of the true one (Redis's),
  // leaf 0's `leaf_skew`.
  LoadedTree(const Flags& flags, const std::string& yaml, int leaves,
             int centrals, absl::Duration central_skew = absl::ZeroDuration(),
             absl::Duration leaf_skew = absl::ZeroDuration())
      : flags_(flags), leaf_skew_(leaf_skew) {
    TreeHarness::Options o;
    o.policies_yaml = yaml;
    tree_ = std::make_unique<TreeHarness>(o);
    for (int c = 0; c < centrals; ++c) {
      // 0, 500, 250, 750, ... ms.
      tree_->AddCentral(absl::StrCat("c", c),
                        absl::Milliseconds((c * 500 + (c / 2) * 250) % 1000),
                        c == 0 ? central_skew : absl::ZeroDuration());
    }
    tree_->RunToSecondBoundary();
    for (int l = 0; l < leaves; ++l) AddLeaf(l % centrals, Phase(l, leaves));
  }

  TreeHarness& tree() { return *tree_; }

  // Calls offered to each loaded leaf per second; or, with `split`, `rate`
  // in all, split evenly over the loaded leaves.
  void SetLoad(int rate, bool split = false) {
    rate_ = rate;
    split_ = split;
  }
  // Every admitted call is held open this long, then reported.
  void set_hold(absl::Duration hold) {
    hold_ms_ = absl::ToInt64Milliseconds(hold);
  }

  // A new leaf under `central`, started at `phase` into a second (time runs
  // there first, with the load offered); returns its slot.
  int AddLeaf(int central, absl::Duration phase) {
    const int64_t at = absl::ToInt64Milliseconds(phase) % 1000;
    while (tree_->ms() % 1000 != at) Step();
    return StartLeaf(absl::StrCat("leaf", next_id_++), central);
  }
  // A leaf started now under `id`.
  int StartLeaf(const std::string& id, int central) {
    const int slot = tree_->AddLeaf(
        id, central, absl::Milliseconds(tree_->ms() % 1000),
        tree_->leaves() == 0 ? leaf_skew_ : absl::ZeroDuration());
    if (static_cast<int>(offset_.size()) <= slot) offset_.resize(slot + 1);
    offset_[slot] = static_cast<int>((slot * 7919) % 1000);
    return slot;
  }
  // A graceful stop (SIGTERM): the leaf's final tick gives its grants back.
  void StopLeaf(int slot) {
    ReleaseHeldBy(slot);
    tree_->leaf(slot)->loop().Leave().IgnoreError();
    tree_->KillLeaf(slot);
  }
  void KillLeaf(int slot) {
    DropHeldBy(slot);
    tree_->KillLeaf(slot);
  }
  void StopCentral(int c) {
    tree_->central(c)->loop().Leave().IgnoreError();
    tree_->KillCentral(c);
  }

  std::vector<int> LiveLeaves() {
    std::vector<int> out;
    for (int l = 0; l < tree_->leaves(); ++l) {
      if (tree_->leaf(l) != nullptr) out.push_back(l);
    }
    return out;
  }

  void Step() {
    Offer();
    tree_->Step();
  }
  void Run(absl::Duration d,
           const std::function<void(int64_t ms)>& at = nullptr) {
    const int64_t start = tree_->ms();
    const int64_t steps = absl::ToInt64Milliseconds(d);
    for (int64_t i = 0; i < steps; ++i) {
      if (at) at(tree_->ms() - start);
      Step();
    }
  }
  void RunToSecondBoundary() {
    while (tree_->ms() % 1000 != 0) Step();
  }

  // Admitted per whole second over [from, to) (seconds since the start).
  std::vector<int64_t> PerSecond(int64_t from, int64_t to) const {
    std::vector<int64_t> out;
    for (int64_t s = from; s < to; ++s) {
      int64_t n = 0;
      for (int64_t ms = s * 1000; ms < (s + 1) * 1000; ++ms) n += At(ms);
      out.push_back(n);
    }
    return out;
  }
  // Most admitted in any 1,000 ms span starting in [from, to) seconds.
  int64_t WorstSpan(int64_t from, int64_t to) const {
    int64_t span = 0;
    for (int64_t ms = from * 1000; ms < from * 1000 + 1000; ++ms)
      span += At(ms);
    int64_t worst = span;
    for (int64_t ms = from * 1000 + 1000; ms < to * 1000; ++ms) {
      span += At(ms) - At(ms - 1000);
      worst = std::max(worst, span);
    }
    return worst;
  }
  int64_t most_held() const { return most_held_; }
  void ResetMostHeld() { most_held_ = 0; }
  uint64_t unknown() const { return unknown_; }
  uint64_t errors() const { return errors_; }
  // Calls admitted by each slot since the start.
  std::vector<int64_t> admitted_by() const { return admitted_by_; }
  // Calls admitted in second `s` by the leaves then under central `c`.
  int64_t AdmittedUnder(int c, int64_t s) const {
    if (c < 0 || c >= static_cast<int>(by_central_.size())) return 0;
    const std::vector<int64_t>& v = by_central_[c];
    return s >= 0 && s < static_cast<int64_t>(v.size()) ? v[s] : 0;
  }

 private:
  struct Held {
    int slot;
    core::PermitId id;
    int64_t release_ms;
  };

  int64_t At(int64_t ms) const {
    return ms < static_cast<int64_t>(per_ms_.size()) ? per_ms_[ms] : 0;
  }

  // The calls of this ms, before the harness's step (its ticks for this ms
  // ran in the step before).
  void Offer() {
    const int64_t ms = tree_->ms();
    while (!held_.empty() && held_.front().release_ms <= ms) {
      const Held& h = held_.front();
      if (tree_->leaf(h.slot) != nullptr) {
        tree_->leaf(h.slot)->engine().Report(kDep, "", h.id,
                                             core::Outcome::kSuccess,
                                             absl::Milliseconds(hold_ms_));
      }
      held_.pop_front();
    }
    if (static_cast<int64_t>(per_ms_.size()) <= ms) per_ms_.resize(ms + 1, 0);
    if (rate_ <= 0) return;
    const std::vector<int> live = LiveLeaves();
    if (live.empty()) return;
    const int64_t ways = split_ ? static_cast<int64_t>(live.size()) : 1;
    for (int slot : live) {
      // Each leaf's calls spread over the second from its own offset.
      const int64_t t = ms + offset_[slot];
      const int64_t calls =
          (t + 1) * rate_ / (1000 * ways) - t * rate_ / (1000 * ways);
      core::Engine& engine = tree_->leaf(slot)->engine();
      for (int64_t k = 0; k < calls; ++k) {
        absl::StatusOr<core::Decision> d = engine.Acquire(kDep, "", 1);
        if (!d.ok()) {
          ++errors_;
          continue;
        }
        if (d->reason == core::Reason::kUnknownDependency) {
          ++unknown_;
          continue;
        }
        if (d->verdict != core::Verdict::kAllow) continue;
        ++per_ms_[ms];
        if (static_cast<int>(admitted_by_.size()) <= slot) {
          admitted_by_.resize(slot + 1, 0);
        }
        ++admitted_by_[slot];
        const int c = tree_->leaf(slot)->path()->central();
        if (c >= 0 && c < tree_->centrals()) {
          if (static_cast<int>(by_central_.size()) <= c) {
            by_central_.resize(c + 1);
          }
          std::vector<int64_t>& v = by_central_[c];
          if (static_cast<int64_t>(v.size()) <= ms / 1000) {
            v.resize(ms / 1000 + 1, 0);
          }
          ++v[ms / 1000];
        }
        if (hold_ms_ > 0) {
          held_.push_back({slot, d->permit_id, ms + hold_ms_});
        } else {
          engine.Report(kDep, "", d->permit_id, core::Outcome::kSuccess,
                        absl::Milliseconds(5));
        }
      }
    }
    most_held_ = std::max<int64_t>(most_held_, held_.size());
  }
  void ReleaseHeldBy(int slot) {
    for (Held& h : held_) {
      if (h.slot != slot) continue;
      tree_->leaf(slot)->engine().Report(kDep, "", h.id,
                                         core::Outcome::kSuccess,
                                         absl::Milliseconds(hold_ms_));
      h.slot = -1;
    }
    DropHeldBy(-1);
  }
  // Calls of a killed leaf are gone with it (their permits with them).
  void DropHeldBy(int slot) {
    held_.erase(
        std::remove_if(held_.begin(), held_.end(),
                       [slot](const Held& h) { return h.slot == slot; }),
        held_.end());
  }
  static absl::Duration Phase(int i, int n) {
    // Spread over the second, off the centrals' phases.
    return absl::Milliseconds(37 + static_cast<int64_t>(i) * 950 / n);
  }

  const Flags flags_;
  const absl::Duration leaf_skew_;
  std::unique_ptr<TreeHarness> tree_;
  int next_id_ = 0;
  int rate_ = 0;
  bool split_ = false;
  int64_t hold_ms_ = 0;
  std::vector<int> offset_;
  std::vector<int64_t> per_ms_;
  std::vector<int64_t> admitted_by_;
  std::vector<std::vector<int64_t>> by_central_;
  std::deque<Held> held_;
  int64_t most_held_ = 0;
  uint64_t unknown_ = 0;
  uint64_t errors_ = 0;
};

// What one transient measured.
struct Result {
  std::string name;
  std::string setup;
  double limit = 0;
  double burst = 0;
  // Per whole second of the measured span.
  std::vector<int64_t> seconds;
  int64_t worst_span = 0;
  // For the caps: the most held at once (concurrency) or admitted in any
  // 1 s span (window), and the cap; cap 0 for a rate row.
  int64_t cap = 0;
  int64_t most = 0;
  // Mean admitted per second over the last 3 s ÷ limit.
  double tail = 0;
  uint64_t checked_ms = 0;
  uint64_t over_ms = 0;
  double worst_in_force = 0;
  std::string violations;
  uint64_t unknown = 0;
  uint64_t errors = 0;
  double real_seconds = 0;
  std::string note;

  int64_t Worst() const {
    return seconds.empty() ? 0
                           : *std::max_element(seconds.begin(), seconds.end());
  }
  bool Pass() const {
    if (over_ms > 0 || errors > 0) return false;
    if (cap > 0) return most <= cap;
    const double bound = 1.10 * (limit + burst) + 1e-9;
    return Worst() <= bound && worst_span <= bound;
  }
};

// Where the live leaves are: "leaves per central: 500 0 ...; 500 moves".
std::string LeavesPerCentral(LoadedTree& t) {
  std::vector<int> under(t.tree().centrals(), 0);
  uint64_t moves = 0;
  for (int slot : t.LiveLeaves()) {
    TreeProcess* leaf = t.tree().leaf(slot);
    const int c = leaf->path()->central();
    if (c >= 0 && c < static_cast<int>(under.size())) ++under[c];
    moves += leaf->path()->moves();
  }
  std::string out = "live leaves per central at the end:";
  for (int n : under) absl::StrAppend(&out, " ", n);
  absl::StrAppend(&out, "; ", moves, " moves");
  return out;
}

// The seconds [from, to) split by the central the admitting leaf was
// under: "under c0: 1000 1000 0 ...; under c1: ...".
std::string PerCentral(const LoadedTree& t, int centrals, int64_t from,
                       int64_t to) {
  std::string out;
  for (int c = 0; c < centrals; ++c) {
    absl::StrAppend(&out, c == 0 ? "" : "\n  ", "admitted under c", c, ":");
    for (int64_t s = from; s < to; ++s) {
      absl::StrAppend(&out, " ", t.AdmittedUnder(c, s));
    }
  }
  return out;
}

// Fills the checker's and the counters' part of `r` and the per-second
// figures over [from, to).
void Finish(LoadedTree& t, int64_t from, int64_t to, Result& r) {
  r.seconds = t.PerSecond(from, to);
  r.worst_span = t.WorstSpan(from, to);
  const int64_t tail_from = std::max(from, to - 3);
  int64_t tail = 0;
  for (int64_t s : t.PerSecond(tail_from, to)) tail += s;
  r.tail = r.limit > 0 ? static_cast<double>(tail) /
                             static_cast<double>(to - tail_from) / r.limit
                       : 0;
  const tree_testing::InForceChecker& c = t.tree().checker();
  r.checked_ms = c.checks();
  r.over_ms = c.violating_checks();
  r.worst_in_force = c.worst_ratio();
  r.violations = t.tree().Violations();
  r.unknown = t.unknown();
  r.errors = t.errors() + t.tree().DecisionErrors();
}

constexpr int kWarmIdleSeconds = 3;
constexpr int kWarmLoadSeconds = 5;

// Builds the tree, runs it idle then flat out, and ends on a second
// boundary; returns the first measured second.
int64_t WarmUp(LoadedTree& t, const Flags& f, bool load = true) {
  t.Run(absl::Seconds(kWarmIdleSeconds));
  if (load) {
    t.SetLoad(f.flat_out);
    t.Run(absl::Seconds(kWarmLoadSeconds));
  }
  t.RunToSecondBoundary();
  return t.tree().second();
}

Result RateResult(const std::string& name, const Flags& f) {
  Result r;
  r.name = name;
  r.limit = f.rate;
  r.burst = f.burst;
  return r;
}

// 1. The baseline: flat out with no transient.
Result Steady(const Flags& f) {
  Result r = RateResult("steady flat out (baseline, no transient)", f);
  LoadedTree t(f, BucketYaml(f.rate, f.burst), f.leaves, f.centrals);
  const int64_t from = WarmUp(t, f);
  t.Run(absl::Seconds(10));
  Finish(t, from, from + 10, r);
  return r;
}

// 2. Redis answers nothing for 600 ms; the tick in flight when it stops (a
// central's) is applied but its reply lost.
Result RedisStalls(const Flags& f) {
  Result r = RateResult("Redis stalls 600 ms", f);
  LoadedTree t(f, BucketYaml(f.rate, f.burst), f.leaves, f.centrals);
  const int64_t from = WarmUp(t, f);
  t.Run(absl::Seconds(5), [&](int64_t ms) {
    if (ms == 0) t.tree().redis().LoseNextReplies(1);
    if (ms == 2) t.tree().redis().SetDown(true);
    if (ms == 600) t.tree().redis().SetDown(false);
  });
  Finish(t, from, from + 5, r);
  return r;
}

// 3. Redis restarts empty under load (every key gone, epoch included).
Result RedisRestartsEmpty(const Flags& f) {
  Result r = RateResult("Redis restarts empty", f);
  LoadedTree t(f, BucketYaml(f.rate, f.burst), f.leaves, f.centrals);
  const int64_t from = WarmUp(t, f);
  t.Run(absl::Seconds(8), [&](int64_t ms) {
    if (ms == 250) t.tree().redis().WipeAll();
  });
  Finish(t, from, from + 8, r);
  uint64_t resets = 0;
  for (int c = 0; c < f.centrals; ++c) {
    resets += t.tree().central(c)->loop().stats().store_resets;
  }
  r.note = absl::StrCat("store resets seen by the centrals: ", resets);
  return r;
}

// 4. Every leaf idle (ticking), then all flat out at once.
Result IdleToFlatOut(const Flags& f) {
  Result r = RateResult("idle to flat out", f);
  LoadedTree t(f, BucketYaml(f.rate, f.burst), f.leaves, f.centrals);
  const int64_t from = WarmUp(t, f, /*load=*/false);
  t.SetLoad(f.flat_out);
  t.Run(absl::Seconds(5));
  Finish(t, from, from + 5, r);
  return r;
}

// 5. One process's clock 4 s ahead of the others' and Redis's: central 0,
// or leaf 0.
Result ClockAhead(const Flags& f, bool central) {
  Result r = RateResult(
      central ? "central 0's clock 4 s ahead" : "leaf 0's clock 4 s ahead", f);
  const absl::Duration skew = absl::Seconds(4);
  LoadedTree t(f, BucketYaml(f.rate, f.burst), f.leaves, f.centrals,
               central ? skew : absl::ZeroDuration(),
               central ? absl::ZeroDuration() : skew);
  const int64_t from = WarmUp(t, f);
  t.Run(absl::Seconds(5));
  Finish(t, from, from + 5, r);
  return r;
}
Result CentralClockAhead(const Flags& f) { return ClockAhead(f, true); }
Result LeafClockAhead(const Flags& f) { return ClockAhead(f, false); }

// 6. A rolling restart of the leaves: a tenth of them at a time stop
// gracefully (final tick) and come back under the same ids 1 s later; the
// next tenth stops 3 s after that.
Result RollingRestartLeaves(const Flags& f) {
  Result r = RateResult("rolling restart, leaves (10 batches)", f);
  LoadedTree t(f, BucketYaml(f.rate, f.burst), f.leaves, f.centrals);
  const int64_t from = WarmUp(t, f);
  constexpr int kBatches = 10;
  const std::vector<int> slots = t.LiveLeaves();
  for (int b = 0; b < kBatches; ++b) {
    std::vector<std::pair<std::string, int>> batch;  // (id, central)
    t.Run(absl::Milliseconds(500));
    for (size_t i = b; i < slots.size(); i += kBatches) {
      TreeProcess* leaf = t.tree().leaf(slots[i]);
      batch.emplace_back(leaf->id(), leaf->path()->central());
      t.StopLeaf(slots[i]);
    }
    t.Run(absl::Seconds(1));
    for (const auto& [id, central] : batch) t.StartLeaf(id, central);
    t.Run(absl::Milliseconds(1500));
  }
  t.Run(absl::Seconds(3));
  const int64_t to = t.tree().second();
  Finish(t, from, to, r);
  return r;
}

// 7. Each central in turn stops gracefully and comes back 1 s later under
// the same id; the next stops 3 s after that. Its leaves move to another
// central on their first tick that finds it gone.
Result RollingRestartCentrals(const Flags& f) {
  Result r = RateResult("rolling restart, centrals", f);
  LoadedTree t(f, BucketYaml(f.rate, f.burst), f.leaves, f.centrals);
  const int64_t from = WarmUp(t, f);
  for (int c = 0; c < f.centrals; ++c) {
    t.Run(absl::Milliseconds(300));
    t.StopCentral(c);
    t.Run(absl::Seconds(1));
    t.tree().RestartCentral(c);
    t.Run(absl::Milliseconds(2700));
  }
  t.Run(absl::Seconds(4));
  const int64_t to = t.tree().second();
  Finish(t, from, to, r);
  r.note = absl::StrCat(LeavesPerCentral(t), "\n  ",
                        PerCentral(t, f.centrals, from, to));
  return r;
}

// 8. A central killed under load (no final tick): its leaves move on.
Result KillCentral(const Flags& f) {
  Result r = RateResult("central killed", f);
  LoadedTree t(f, BucketYaml(f.rate, f.burst), f.leaves, f.centrals);
  const int64_t from = WarmUp(t, f);
  t.Run(absl::Seconds(10), [&](int64_t ms) {
    if (ms == 300) t.tree().KillCentral(f.centrals - 1);
  });
  Finish(t, from, from + 10, r);
  r.note = absl::StrCat(LeavesPerCentral(t), "\n  ",
                        PerCentral(t, f.centrals, from, from + 10));
  return r;
}

// 9. A central restarted under the same id (a new incarnation) while its
// leaves hold leases; they keep ticking to it.
Result RestartCentralSameId(const Flags& f) {
  Result r = RateResult("central restarted, same id", f);
  LoadedTree t(f, BucketYaml(f.rate, f.burst), f.leaves, f.centrals);
  const int64_t from = WarmUp(t, f);
  t.Run(absl::Seconds(8), [&](int64_t ms) {
    if (ms == 600) t.tree().RestartCentral(f.centrals - 1);
  });
  Finish(t, from, from + 8, r);
  r.note = PerCentral(t, f.centrals, from, from + 8);
  return r;
}

// 10. Every central cut off from Redis for 2 s (less than the grace).
Result RedisCut(const Flags& f) {
  Result r = RateResult("Redis cut 2 s from every central", f);
  LoadedTree t(f, BucketYaml(f.rate, f.burst), f.leaves, f.centrals);
  const int64_t from = WarmUp(t, f);
  auto cut = [&](bool on) {
    for (int c = 0; c < f.centrals; ++c)
      t.tree().central(c)->upstream()->set_cut(on);
  };
  t.Run(absl::Seconds(7), [&](int64_t ms) {
    if (ms == 0) cut(true);
    if (ms == 2000) cut(false);
  });
  Finish(t, from, from + 7, r);
  return r;
}

// 11. Cluster max_in_flight 2; every admitted call is held 30 ms.
Result Concurrency(const Flags& f) {
  Result r;
  r.name = "max_in_flight 2, calls held 30 ms";
  r.cap = 2;
  LoadedTree t(f, ConcurrencyYaml(2), f.leaves, f.centrals);
  t.set_hold(absl::Milliseconds(30));
  const int64_t from = WarmUp(t, f);
  t.ResetMostHeld();
  t.Run(absl::Seconds(10));
  Finish(t, from, from + 10, r);
  r.most = t.most_held();
  int64_t admitted = 0;
  for (int64_t s : r.seconds) admitted += s;
  r.note = absl::StrCat(admitted, " admitted in 10 s");
  return r;
}

// 12. Cluster sliding window of 3 per second: most in any 1 s span.
Result Window(const Flags& f) {
  Result r;
  r.name = "sliding window 3/s";
  r.cap = 3;
  LoadedTree t(f, WindowYaml(3), f.leaves, f.centrals);
  const int64_t from = WarmUp(t, f);
  t.Run(absl::Seconds(10));
  Finish(t, from, from + 10, r);
  r.most = r.worst_span;
  int64_t admitted = 0;
  for (int64_t s : r.seconds) admitted += s;
  r.note = absl::StrCat(admitted, " admitted in 10 s");
  return r;
}

// 13. Autoscale under a gateway's load split over its pods: leaves from a
// tenth to all and back. Scale-up doubles every 10 s (a tenth, a fifth,
// two fifths, four fifths, all), each batch's leaves ready over 2 s;
// 15 s at full size; then back to a tenth at once, nine in ten of the
// leaves removed stopping gracefully and one in ten killed.
Result Autoscale(const Flags& f) {
  Result r = RateResult("autoscale, a tenth → all → a tenth", f);
  const int few = std::max(1, f.leaves / 10);
  const int64_t gateway = static_cast<int64_t>(f.rate) * 10;
  r.setup = absl::StrCat(few, " → ", f.leaves, " → ", few, " leaves, ", gateway,
                         " calls/s split over them");
  LoadedTree t(f, BucketYaml(f.rate, f.burst), few, f.centrals);
  t.Run(absl::Seconds(kWarmIdleSeconds));
  t.SetLoad(static_cast<int>(gateway), /*split=*/true);
  t.Run(absl::Seconds(kWarmLoadSeconds));
  t.RunToSecondBoundary();
  const int64_t from = t.tree().second();
  std::vector<std::pair<int64_t, int>> starts;  // (ms, central)
  int target = few;
  int made = few;
  for (int step = 1; target < f.leaves; ++step) {
    target = std::min(f.leaves, target * 2);
    for (int k = 0; made < target; ++k, ++made) {
      starts.emplace_back(step * 10000 + (k * 173) % 2000, made % f.centrals);
    }
  }
  std::sort(starts.begin(), starts.end());
  const int64_t up_end = (starts.empty() ? 0 : starts.back().first) + 1;
  const int64_t down_at = (up_end / 1000 + 15) * 1000;
  const int64_t end = down_at + 15000;
  size_t next = 0;
  for (int64_t ms = 0; ms < end; ++ms) {
    while (next < starts.size() && starts[next].first == ms) {
      t.StartLeaf(absl::StrCat("pod", next), starts[next].second);
      ++next;
    }
    if (ms == down_at) {
      std::vector<int> live = t.LiveLeaves();
      for (size_t i = few; i < live.size(); ++i) {
        if ((i - few) % 10 == 4) {
          t.KillLeaf(live[i]);
        } else {
          t.StopLeaf(live[i]);
        }
      }
    }
    t.Step();
  }
  Finish(t, from, from + end / 1000, r);
  return r;
}

// 14. A share below one unit: 20/s (burst 10) over every leaf, each loaded,
// for 60 s; how many leaves admitted anything.
Result SmallShare(const Flags& f) {
  constexpr int kSmallRate = 20;
  constexpr int kSmallBurst = 10;
  Result r;
  r.name = "limit 20/s over every leaf";
  r.limit = kSmallRate;
  r.burst = kSmallBurst;
  LoadedTree t(f, BucketYaml(kSmallRate, kSmallBurst), f.leaves, f.centrals);
  t.Run(absl::Seconds(kWarmIdleSeconds));
  t.SetLoad(2000, /*split=*/true);
  t.Run(absl::Seconds(kWarmLoadSeconds));
  t.RunToSecondBoundary();
  const int64_t from = t.tree().second();
  const std::vector<int64_t> before = t.admitted_by();
  t.Run(absl::Seconds(60));
  Finish(t, from, from + 60, r);
  const std::vector<int64_t> after = t.admitted_by();
  int admitting = 0;
  for (size_t l = 0; l < after.size(); ++l) {
    admitting += after[l] > (l < before.size() ? before[l] : 0);
  }
  r.setup = "2000 calls/s split over the leaves";
  r.note = absl::StrCat(admitting, " of ", f.leaves,
                        " leaves admitted a call in 60 s");
  return r;
}

void PrintRow(const Result& r) {
  const double denom = r.limit + r.burst;
  if (r.cap > 0) {
    std::printf("| %s | cap %lld | most %lld (÷ cap %.2f) |", r.name.c_str(),
                static_cast<long long>(r.cap), static_cast<long long>(r.most),
                static_cast<double>(r.most) / static_cast<double>(r.cap));
  } else {
    std::printf("| %s | %.2f | %.2f |", r.name.c_str(),
                static_cast<double>(r.Worst()) / denom,
                static_cast<double>(r.worst_span) / denom);
  }
  if (r.cap > 0) {
    std::printf(" — |");
  } else {
    std::printf(" %.2f |", r.tail);
  }
  std::printf(" %llu | %llu | %.3f | %llu | %.1f | %s |\n",
              static_cast<unsigned long long>(r.checked_ms),
              static_cast<unsigned long long>(r.over_ms), r.worst_in_force,
              static_cast<unsigned long long>(r.unknown), r.real_seconds,
              r.Pass() ? "PASS" : "FAIL");
  std::fflush(stdout);
}

void PrintDetail(const Result& r) {
  std::printf("\n%s", r.name.c_str());
  if (!r.setup.empty()) std::printf(" (%s)", r.setup.c_str());
  std::printf(r.cap > 0 ? ", admitted each second:"
                        : ", admitted ÷ limit each second:");
  for (size_t i = 0; i < r.seconds.size(); ++i) {
    std::printf("%s%.2f", i % 20 == 0 ? "\n  " : " ",
                r.limit > 0 ? static_cast<double>(r.seconds[i]) / r.limit
                            : static_cast<double>(r.seconds[i]));
  }
  std::printf("\n");
  if (!r.note.empty()) std::printf("  %s\n", r.note.c_str());
  if (r.errors > 0) {
    std::printf("  %llu decision errors\n",
                static_cast<unsigned long long>(r.errors));
  }
  if (r.over_ms > 0) {
    std::printf("  grants in force over the limit, first instants:\n%s",
                r.violations.c_str());
  }
}

int RunAll(const Flags& f) {
  struct Transient {
    const char* key;
    std::function<Result(const Flags&)> run;
  };
  const std::vector<Transient> all = {
      {"steady", Steady},
      {"stall", RedisStalls},
      {"empty", RedisRestartsEmpty},
      {"idle", IdleToFlatOut},
      {"clock-central", CentralClockAhead},
      {"clock-leaf", LeafClockAhead},
      {"roll-leaves", RollingRestartLeaves},
      {"roll-centrals", RollingRestartCentrals},
      {"kill-central", KillCentral},
      {"restart-central", RestartCentralSameId},
      {"cut", RedisCut},
      {"concurrency", Concurrency},
      {"window", Window},
      {"autoscale", Autoscale},
      {"small-share", SmallShare},
  };
  std::printf(
      "Grant tree on simulated time: %d central replicas (LeaseLedger over a "
      "FakeStore as Redis), %d leaves, 1 s tick; token bucket %d/s burst %d "
      "(scope CLUSTER, FAIL_OPEN); flat out = %d calls/s offered to each "
      "leaf; %d s idle, then %d s flat out before each measured span.\n"
      "Worst second and worst 1 s span are admitted ÷ (limit + burst), goal "
      "≤ 1.10; in force: the InForceChecker over every simulated ms of the "
      "run, goal 0 ms over.\n\n"
      "| transient | worst second | worst 1 s span | last 3 s ÷ limit | ms "
      "checked | ms over | worst in force ÷ limit | calls with no policy | "
      "real s | result |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n",
      f.centrals, f.leaves, f.rate, f.burst, f.flat_out, kWarmIdleSeconds,
      kWarmLoadSeconds);
  std::vector<Result> results;
  int failed = 0;
  for (const Transient& tr : all) {
    if (!f.only.empty() &&
        std::string(tr.key).find(f.only) == std::string::npos) {
      continue;
    }
    const absl::Time t0 = absl::Now();
    Result r = tr.run(f);
    r.real_seconds = absl::ToDoubleSeconds(absl::Now() - t0);
    failed += !r.Pass();
    PrintRow(r);
    results.push_back(std::move(r));
  }
  for (const Result& r : results) PrintDetail(r);
  std::printf("\n%s: %d row%s failed\n", failed == 0 ? "PASS" : "FAIL", failed,
              failed == 1 ? "" : "s");
  return failed == 0 ? 0 : 1;
}

bool ParseInt(const std::string& v, int lo, int hi, int* out) {
  int n = 0;
  if (!absl::SimpleAtoi(v, &n) || n < lo || n > hi) return false;
  *out = n;
  return true;
}

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::off);  // store up/down lines are noise here
  sluice::Flags f;
  bool ok = argc % 2 == 1;
  for (int i = 1; ok && i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--leaves") {
      ok = sluice::ParseInt(value, 1, 20000, &f.leaves);
    } else if (flag == "--centrals") {
      ok = sluice::ParseInt(value, 1, 8, &f.centrals);
    } else if (flag == "--rate") {
      ok = sluice::ParseInt(value, 1, 10000000, &f.rate);
    } else if (flag == "--burst") {
      ok = sluice::ParseInt(value, 0, 10000000, &f.burst);
    } else if (flag == "--flat-out") {
      ok = sluice::ParseInt(value, 1, 1000, &f.flat_out);
    } else if (flag == "--only") {
      f.only = value;
    } else {
      ok = false;
    }
  }
  if (!ok) {
    std::fprintf(stderr,
                 "usage: %s [--leaves N] [--centrals C] [--rate R] [--burst "
                 "B] [--flat-out CALLS_PER_LEAF_PER_S] [--only NAME]\n",
                 argv[0]);
    return 2;
  }
  return sluice::RunAll(f);
}
