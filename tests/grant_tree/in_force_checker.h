// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_GRANT_TREE_IN_FORCE_CHECKER_H_
#define SLUICE_TESTS_GRANT_TREE_IN_FORCE_CHECKER_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/cluster/store.h"
#include "server/core/engine.h"
#include "server/core/tick.h"

namespace sluice::tree_testing {

// The grant tree's invariant, checked from outside: the cluster-scope units
// every process (central replica or leaf) may apply at an instant never add
// up to more than the limit, per (policy, key) and resource.
//
// It sees only what a process's SyncLoop sees: each tick's request and the
// reply, with the tick's start. A reply's grant is in force on that process
// from the reply until start + min(stale period, valid_for), the bound
// SyncLoop::ApplyGrants gives the engine, and a newer reply replaces it.
// A per_key key also holds its static share on every process whose engine
// has the policy, whether or not the process pushed the key (a central that
// never sees the key applies it all the same to the first call): the
// checker asks each process's engine (Engine::StaticUnits, the share
// GateSet::ClusterUnits applies; zero while the sync loop holds static
// shares back or the store is down). Not thread-safe; the harness calls it
// from its one thread.
class InForceChecker {
 public:
  struct Violation {
    absl::Time at;
    std::string policy;
    std::string key;
    int resource = 0;
    int64_t in_force = 0;
    int64_t limit = 0;
    // Each holder and its units, e.g. "c0=40 leaf3=12".
    std::string holders;
  };

  // A tick of `process` that started at `start` and ended (now) with `reply`.
  void Note(const std::string& process, absl::Time start, absl::Time now,
            const cluster::TickRequest& request,
            const absl::StatusOr<cluster::TickReply>& reply) {
    Process& p = processes_[process];
    for (const cluster::PolicyPush& push : request.policies) {
      for (const core::KeyTick& key : push.keys) {
        p.limits[{push.policy, key.key}] = key.limit;
      }
    }
    if (!reply.ok() || request.leaving) return;
    if (reply->policies.size() != request.policies.size()) return;
    for (size_t i = 0; i < request.policies.size(); ++i) {
      const cluster::PolicyPush& push = request.policies[i];
      const cluster::PolicyPull& pull = reply->policies[i];
      for (size_t k = 0; k < push.keys.size() && k < pull.grants.size(); ++k) {
        Held& held = p.held[{push.policy, push.keys[k].key}];
        held.granted = pull.grants[k].granted;
        held.units =
            pull.grants[k].granted ? pull.grants[k].units : core::Units{};
        held.from = now;
        held.until =
            start + std::min(request.stale_after, pull.grants[k].valid_for);
      }
    }
  }

  // The engine of `process`, asked for its static shares; must outlive the
  // process's entry (Forget it first).
  void Watch(const std::string& process, core::Engine* engine) {
    processes_[process].engine = engine;
  }

  // The process is gone (killed, or stopped): its engine applies nothing.
  void Forget(const std::string& process) { processes_.erase(process); }

  // Units of `resource` process `process` may apply now for (policy, key).
  int64_t UnitsOf(const std::string& process, const std::string& policy,
                  const std::string& key, int resource, absl::Time now) const {
    auto p = processes_.find(process);
    if (p == processes_.end()) return 0;
    const std::map<Key, core::Units> limits = Limits();
    auto limit = limits.find({policy, key});
    if (limit == limits.end()) return 0;
    return Units(p->second, policy, key, limit->second[resource], resource,
                 now);
  }

  // Checks every (policy, key) seen so far at `now`.
  void Check(absl::Time now) {
    ++checks_;
    for (const auto& [pk, limit] : Limits()) {
      for (int r = 0; r < core::kClusterResources; ++r) {
        if (limit[r] <= 0) continue;
        int64_t sum = 0;
        for (const auto& [name, p] : processes_) {
          sum += Units(p, pk.first, pk.second, limit[r], r, now);
        }
        worst_ratio_ =
            std::max(worst_ratio_,
                     static_cast<double>(sum) / static_cast<double>(limit[r]));
        if (sum <= limit[r]) continue;
        ++violating_ms_;
        if (violations_.size() >= kMaxKept) continue;
        Violation v;
        v.at = now;
        v.policy = pk.first;
        v.key = pk.second;
        v.resource = r;
        v.in_force = sum;
        v.limit = limit[r];
        for (const auto& [name, p] : processes_) {
          const int64_t u = Units(p, pk.first, pk.second, limit[r], r, now);
          if (u > 0) absl::StrAppend(&v.holders, name, "=", u, " ");
        }
        violations_.push_back(std::move(v));
      }
    }
  }

  const std::vector<Violation>& violations() const { return violations_; }
  // Checks (instants) at which some (policy, key, resource) was over.
  uint64_t violating_checks() const { return violating_ms_; }
  uint64_t checks() const { return checks_; }
  // The highest in-force ÷ limit seen.
  double worst_ratio() const { return worst_ratio_; }

  // The first violations, one a line, for a failure message.
  std::string Describe(absl::Time origin, size_t most = 5) const {
    std::string out;
    for (size_t i = 0; i < violations_.size() && i < most; ++i) {
      const Violation& v = violations_[i];
      absl::StrAppend(&out, "at +", absl::FormatDuration(v.at - origin), " ",
                      v.policy, "/'", v.key, "' resource ", v.resource, ": ",
                      v.in_force, " in force > limit ", v.limit, " (",
                      v.holders, ")\n");
    }
    return out;
  }

 private:
  static constexpr size_t kMaxKept = 50;
  struct Held {
    bool granted = false;
    core::Units units{};
    absl::Time from = absl::InfinitePast();
    absl::Time until = absl::InfinitePast();
  };
  using Key = std::pair<std::string, std::string>;  // (policy, key)
  struct Process {
    // The limits this process pushed last, per (policy, key).
    std::map<Key, core::Units> limits;
    core::Engine* engine = nullptr;
    std::map<Key, Held> held;
  };

  static int64_t Units(const Process& p, const std::string& policy,
                       const std::string& key, int64_t limit, int r,
                       absl::Time now) {
    // What the engine applies to a key without a grant, capped at the
    // limit checked (the engine's own policy may have a higher one while a
    // change spreads; its grant is scaled the same way).
    const int64_t base =
        p.engine == nullptr
            ? 0
            : std::min(limit, p.engine->StaticUnits(policy)[r]);
    auto h = p.held.find({policy, key});
    if (h == p.held.end()) return base;
    const Held& held = h->second;
    if (!held.granted || now < held.from || now >= held.until) return base;
    return std::max(base, held.units[r]);
  }

  // The limit of each (policy, key): the highest any process still running
  // pushed last. While a policy change spreads, the processes that have it
  // and those that do not yet push different limits; the grants in force
  // are held to the higher (a lowered limit is held to the new one once
  // every process has it).
  std::map<Key, core::Units> Limits() const {
    std::map<Key, core::Units> out;
    for (const auto& [name, p] : processes_) {
      for (const auto& [key, limit] : p.limits) {
        core::Units& l = out[key];
        for (int r = 0; r < core::kClusterResources; ++r) {
          l[r] = std::max(l[r], limit[r]);
        }
      }
    }
    return out;
  }

  std::map<std::string, Process> processes_;
  std::vector<Violation> violations_;
  uint64_t violating_ms_ = 0;
  uint64_t checks_ = 0;
  double worst_ratio_ = 0;
};

}  // namespace sluice::tree_testing

#endif  // SLUICE_TESTS_GRANT_TREE_IN_FORCE_CHECKER_H_
