// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_GRANT_TREE_TREE_HARNESS_H_
#define SLUICE_TESTS_GRANT_TREE_TREE_HARNESS_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/cluster/cluster_config.h"
#include "server/cluster/leaf_server.h"
#include "server/cluster/lease_ledger.h"
#include "server/cluster/store.h"
#include "server/cluster/sync_loop.h"
#include "server/core/engine.h"
#include "server/core/events.h"
#include "server/policy/policy_file.h"
#include "server/policy/policy_store.h"
#include "tests/grant_tree/in_force_checker.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fake_store.h"
#include "tests/testing/offset_clock.h"

// A simulated grant tree on one fake clock: one FakeStore as Redis, central
// replicas (Engine + LeaseLedger + SyncLoop ticking through the ledger) and
// leaves (Engine + SyncLoop whose store is a LeafPath to a central's
// LeaseLedger::ServeLeaf). Every process ticks once per simulated second at
// its own phase (when it started), retries a failed tick after 200 ms and
// answers a nudge after 50 ms, as SyncLoop::Run does; time moves in 1 ms steps
// and the in-force checker runs after every step.
namespace sluice::tree_testing {

using cluster::ConfigWrite;
using cluster::Store;
using cluster::StoredOverride;
using cluster::StoredPolicy;
using cluster::TickReply;
using cluster::TickRequest;

// A central replica's path to Redis, which a test can cut.
class UpstreamPath final : public Store {
 public:
  explicit UpstreamPath(Store* store) : store_(store) {}
  void set_cut(bool cut) { cut_ = cut; }

  absl::StatusOr<TickReply> Tick(const TickRequest& request) override {
    if (cut_) return absl::UnavailableError("cut off from the store");
    return store_->Tick(request);
  }
  absl::StatusOr<ConfigWrite> PutPolicy(const StoredPolicy& policy,
                                        uint64_t expected_version) override {
    return store_->PutPolicy(policy, expected_version);
  }
  absl::StatusOr<ConfigWrite> DeletePolicy(const std::string& name,
                                           uint64_t expected_version) override {
    return store_->DeletePolicy(name, expected_version);
  }
  absl::StatusOr<ConfigWrite> SetOverride(
      const StoredOverride& override) override {
    return store_->SetOverride(override);
  }
  std::string Describe() const override { return store_->Describe(); }

 private:
  Store* const store_;
  std::atomic<bool> cut_{false};
};

// A leaf's path to a central replica: each Tick calls that central's
// ServeLeaf directly, as LeaseServiceImpl does after decoding. A test can
// cut it, move it to another central, hold requests back and deliver them
// later (a delayed or retried gRPC call), or replay the last one. Admin
// writes are refused, as UpstreamStore refuses them. With `follow` set, a
// tick that finds its central gone moves the path to the next live central
// (pick_first on a broken connection): that tick fails, the next one goes
// to the new central. Not thread-safe; the harness's thread only.
class LeafPath final : public Store {
 public:
  // The central at an index, or null while it is down.
  using Resolver = std::function<cluster::LeafServer*(int central)>;
  // The next live central after `central`, or -1.
  using Next = std::function<int(int central)>;

  LeafPath(Resolver resolve, Next next, int central)
      : resolve_(std::move(resolve)),
        next_(std::move(next)),
        central_(central) {}

  int central() const { return central_; }
  void MoveTo(int central) {
    if (central != central_) ++moves_;
    central_ = central;
  }
  uint64_t moves() const { return moves_; }
  void set_cut(bool cut) { cut_ = cut; }
  void set_follow(bool follow) { follow_ = follow; }
  // While held, requests are kept back and the leaf's tick times out.
  void set_hold(bool hold) { hold_ = hold; }
  // Delivers the requests held back, oldest first, to the current central.
  std::vector<absl::StatusOr<TickReply>> DeliverHeld() {
    std::vector<absl::StatusOr<TickReply>> out;
    for (const TickRequest& r : held_) out.push_back(Send(r));
    held_.clear();
    return out;
  }
  size_t held() const { return held_.size(); }
  // Sends the last delivered request again (a gRPC retry of a call whose
  // reply was lost).
  absl::StatusOr<TickReply> Replay() {
    if (!last_) return absl::FailedPreconditionError("nothing sent yet");
    return Send(*last_);
  }
  const std::optional<TickRequest>& last_sent() const { return last_; }

  absl::StatusOr<TickReply> Tick(const TickRequest& request) override {
    if (cut_) return absl::UnavailableError("leaf path cut");
    if (hold_) {
      held_.push_back(request);
      return absl::DeadlineExceededError("leaf path held the request");
    }
    if (resolve_(central_) == nullptr) {
      if (follow_) {
        const int next = next_(central_);
        if (next >= 0) MoveTo(next);
      }
      return absl::UnavailableError("central replica down");
    }
    last_ = request;
    return Send(request);
  }
  absl::StatusOr<ConfigWrite> PutPolicy(const StoredPolicy&,
                                        uint64_t) override {
    return Refused();
  }
  absl::StatusOr<ConfigWrite> DeletePolicy(const std::string&,
                                           uint64_t) override {
    return Refused();
  }
  absl::StatusOr<ConfigWrite> SetOverride(const StoredOverride&) override {
    return Refused();
  }
  std::string Describe() const override {
    return absl::StrCat("upstream central ", central_);
  }

 private:
  static absl::Status Refused() {
    return absl::FailedPreconditionError(
        "this is a leaf: admin writes go to its upstream central replica");
  }
  absl::StatusOr<TickReply> Send(const TickRequest& request) {
    cluster::LeafServer* server = resolve_(central_);
    if (server == nullptr)
      return absl::UnavailableError("central replica down");
    return server->ServeLeaf(request);
  }

  const Resolver resolve_;
  const Next next_;
  int central_;
  uint64_t moves_ = 0;
  bool cut_ = false;
  bool follow_ = true;
  bool hold_ = false;
  std::vector<TickRequest> held_;
  std::optional<TickRequest> last_;
};

// Shows every tick of one process to the checker.
class ObservedStore final : public Store {
 public:
  ObservedStore(Store* inner, core::Clock* clock, InForceChecker* checker,
                std::string process)
      : inner_(inner),
        clock_(clock),
        checker_(checker),
        process_(std::move(process)) {}

  absl::StatusOr<TickReply> Tick(const TickRequest& request) override {
    const absl::Time start = clock_->Now();
    absl::StatusOr<TickReply> reply = inner_->Tick(request);
    checker_->Note(process_, start, clock_->Now(), request, reply);
    return reply;
  }
  absl::StatusOr<ConfigWrite> PutPolicy(const StoredPolicy& policy,
                                        uint64_t expected_version) override {
    return inner_->PutPolicy(policy, expected_version);
  }
  absl::StatusOr<ConfigWrite> DeletePolicy(const std::string& name,
                                           uint64_t expected_version) override {
    return inner_->DeletePolicy(name, expected_version);
  }
  absl::StatusOr<ConfigWrite> SetOverride(
      const StoredOverride& override) override {
    return inner_->SetOverride(override);
  }
  std::string Describe() const override { return inner_->Describe(); }

 private:
  Store* const inner_;
  core::Clock* const clock_;
  InForceChecker* const checker_;
  const std::string process_;
};

// One simulated sluiced: a central replica (with `upstream`) or a leaf
// (with `path`).
class TreeProcess final : public core::EventSink {
 public:
  struct Options {
    std::string id;
    absl::Duration interval = absl::Seconds(1);
    int stale_ticks = 3;
    // The ledger's margin before the central's own grant ends.
    absl::Duration margin = absl::Milliseconds(200);
    // Nudge the sync loop on a breaker transition (the server does).
    bool nudge_on_transition = true;
    // Give the ledger a nudge callback.
    bool ledger_nudge = true;
    // Nudge the sync loop on a key's first demand (ClusterMode does).
    bool nudge_on_demand = true;
    // A policies file (centrals seed the store from it; leaves have none).
    std::string policies_yaml;
    // How far this process's own clock (its engine's, sync loop's and
    // ledger's) runs ahead of the true one; the harness's schedule and the
    // checker keep the true time.
    absl::Duration skew = absl::ZeroDuration();
  };

  // A central replica over `redis`, or (redis == null) a leaf over `path`.
  TreeProcess(Options options, testing::FakeClock* clock, Store* redis,
              std::unique_ptr<LeafPath> path, InForceChecker* checker)
      : options_(std::move(options)),
        clock_(clock),
        skewed_(
            options_.skew == absl::ZeroDuration()
                ? nullptr
                : std::make_unique<testing::OffsetClock>(clock, options_.skew)),
        own_clock_(skewed_ ? static_cast<core::Clock*>(skewed_.get()) : clock),
        path_(std::move(path)),
        engine_(own_clock_, EngineOptions(), this),
        policies_(&engine_) {
    Store* base = nullptr;
    if (redis != nullptr) {
      upstream_ = std::make_unique<UpstreamPath>(redis);
      cluster::LeaseLedger::Options lo;
      lo.replica_id = options_.id;
      lo.stale_after = options_.interval * options_.stale_ticks;
      lo.interval = options_.interval;
      lo.margin = options_.margin;
      if (options_.ledger_nudge) lo.nudge = [this] { Nudge(); };
      ledger_ = std::make_unique<cluster::LeaseLedger>(
          upstream_.get(), own_clock_, std::move(lo));
      base = ledger_.get();
    } else {
      base = path_.get();
    }
    if (checker != nullptr) checker->Watch(options_.id, &engine_);
    observed_ =
        std::make_unique<ObservedStore>(base, clock, checker, options_.id);
    cluster::ClusterConfig::Options co;
    co.apply_timeout = absl::ZeroDuration();  // ticks are driven by hand
    co.nudge = [this] { Nudge(); };
    config_ = std::make_unique<cluster::ClusterConfig>(
        observed_.get(), &policies_, &engine_, std::move(co));
    cluster::SyncLoop::Options so;
    so.replica_id = options_.id;
    so.interval = options_.interval;
    so.stale_ticks = options_.stale_ticks;
    so.on_config = [c = config_.get()](const cluster::ConfigSnapshot& s) {
      c->Apply(s);
    };
    loop_ = std::make_unique<cluster::SyncLoop>(&engine_, observed_.get(),
                                                own_clock_, std::move(so));
    if (redis != nullptr && !options_.policies_yaml.empty()) {
      absl::StatusOr<std::vector<v1::Policy>> parsed =
          policy::ParsePolicies(options_.policies_yaml, "tree.yaml");
      if (parsed.ok()) {
        policies_.ReplaceAll(*parsed).IgnoreError();
        absl::StatusOr<std::vector<StoredPolicy>> seed =
            cluster::ClusterConfig::ToStored(*parsed);
        if (seed.ok()) loop_->SetSeed(*seed);
      }
    }
  }
  ~TreeProcess() override {
    // The loop and the config refer to the engine and the stores.
    loop_.reset();
    config_.reset();
  }

  // As ClusterMode starts a process: one tick before serving, then the
  // sync thread's first tick at once (the next ms here), then one a second
  // from there. The start is the process's phase.
  void Start() {
    TickNow().IgnoreError();  // a failed first tick is retried
    next_tick_ = clock_->Now() + absl::Milliseconds(1);
  }
  bool Due(absl::Time now) const { return now >= next_tick_; }
  absl::Status TickNow() {
    const absl::Status s = loop_->TickOnce();
    ++ticks_;
    if (!s.ok()) ++failed_ticks_;
    next_tick_ = clock_->Now() + loop_->NextTickIn();
    return s;
  }
  // SyncLoop::Nudge as Run honours it: a tick after at least kMinGap.
  void Nudge() {
    next_tick_ =
        std::min(next_tick_, clock_->Now() + cluster::SyncLoop::kMinGap);
    ++nudges_;
  }

  // One call; counts it. Returns true when admitted.
  bool Call(const std::string& dep, const std::string& key = "") {
    absl::StatusOr<core::Decision> d = engine_.Acquire(dep, key, 1);
    if (!d.ok()) {
      ++errors_;
      last_error_ = d.status().ToString();
      return false;
    }
    if (d->reason == core::Reason::kUnknownDependency) {
      // No policy here (yet): allowed, but not by the tree.
      ++unknown_;
      return false;
    }
    if (d->reason == core::Reason::kStoreUnavailable) {
      ++store_refused_;
      last_store_refusal_ = clock_->Now();
      if (first_store_refusal_ == absl::InfinitePast()) {
        first_store_refusal_ = last_store_refusal_;
      }
    }
    if (d->verdict != core::Verdict::kAllow) return false;
    ++admitted_;
    last_admit_ = clock_->Now();
    if (first_admit_ == absl::InfinitePast()) first_admit_ = last_admit_;
    permits_.push_back({dep, key, d->permit_id});
    return true;
  }
  // Reports every permit still open as a success.
  void SettleAll() {
    for (const auto& [dep, key, id] : permits_) {
      engine_.Report(dep, key, id, core::Outcome::kSuccess,
                     absl::Milliseconds(5));
    }
    permits_.clear();
  }
  // `n` calls of `dep`, each reported as a failure.
  void Fail(const std::string& dep, int n) {
    for (int i = 0; i < n; ++i) {
      absl::StatusOr<core::Decision> d = engine_.Acquire(dep, "", 1);
      if (!d.ok()) continue;
      engine_.Report(dep, "", d->permit_id, core::Outcome::kFailure,
                     absl::Milliseconds(5));
    }
  }

  void OnBreakerTransition(const core::BreakerTransition&) override {
    if (options_.nudge_on_transition) Nudge();
  }
  void OnClusterDemand(const std::string&, const std::string&) override {
    if (options_.nudge_on_demand) {
      Nudge();
      ++demand_nudges_;
    }
  }

  const std::string& id() const { return options_.id; }
  bool is_central() const { return ledger_ != nullptr; }
  core::Engine& engine() { return engine_; }
  policy::PolicyStore& policies() { return policies_; }
  cluster::ClusterConfig& config() { return *config_; }
  cluster::SyncLoop& loop() { return *loop_; }
  cluster::LeaseLedger* ledger() { return ledger_.get(); }
  UpstreamPath* upstream() { return upstream_.get(); }
  LeafPath* path() { return path_.get(); }
  uint64_t admitted() const { return admitted_; }
  uint64_t errors() const { return errors_; }
  // Calls decided without a policy (allowed as an unknown dependency).
  uint64_t unknown() const { return unknown_; }
  // Calls refused because the store is down (on_store_failure FAIL_CLOSED).
  uint64_t store_refused() const { return store_refused_; }
  absl::Time first_store_refusal() const { return first_store_refusal_; }
  const std::string& last_error() const { return last_error_; }
  uint64_t ticks() const { return ticks_; }
  uint64_t failed_ticks() const { return failed_ticks_; }
  uint64_t nudges() const { return nudges_; }
  // Nudges for a key's first demand (OnClusterDemand).
  uint64_t demand_nudges() const { return demand_nudges_; }
  absl::Time first_admit() const { return first_admit_; }
  absl::Time last_admit() const { return last_admit_; }

 private:
  static core::Engine::Options EngineOptions() {
    core::Engine::Options o;
    o.cluster = true;
    return o;
  }
  struct Permit {
    std::string dep;
    std::string key;
    core::PermitId id;
  };

  const Options options_;
  testing::FakeClock* const clock_;
  const std::unique_ptr<testing::OffsetClock> skewed_;
  core::Clock* const own_clock_;  // skewed_, or clock_
  std::unique_ptr<UpstreamPath> upstream_;
  std::unique_ptr<cluster::LeaseLedger> ledger_;
  std::unique_ptr<LeafPath> path_;
  std::unique_ptr<ObservedStore> observed_;
  core::Engine engine_;
  policy::PolicyStore policies_;
  std::unique_ptr<cluster::ClusterConfig> config_;
  std::unique_ptr<cluster::SyncLoop> loop_;

  absl::Time next_tick_ = absl::InfiniteFuture();
  uint64_t ticks_ = 0;
  uint64_t failed_ticks_ = 0;
  uint64_t nudges_ = 0;
  uint64_t demand_nudges_ = 0;
  uint64_t admitted_ = 0;
  uint64_t errors_ = 0;
  uint64_t unknown_ = 0;
  uint64_t store_refused_ = 0;
  absl::Time first_store_refusal_ = absl::InfinitePast();
  absl::Time last_store_refusal_ = absl::InfinitePast();
  std::string last_error_;
  absl::Time first_admit_ = absl::InfinitePast();
  absl::Time last_admit_ = absl::InfinitePast();
  std::vector<Permit> permits_;
};

// The whole tree. Centrals and leaves are numbered separately from 0; a
// dead one keeps its number (null) until restarted. Not thread-safe.
class TreeHarness {
 public:
  struct Options {
    std::string policies_yaml;
    absl::Duration interval = absl::Seconds(1);
    absl::Duration margin = absl::Milliseconds(200);
    bool nudge_on_transition = true;
    bool ledger_nudge = true;
    bool nudge_on_demand = true;
    // Check the invariant after every simulated millisecond.
    bool check = true;
  };
  // Offered load on one leaf: `per_second` calls of (dep, key), spread
  // evenly over each second.
  struct Load {
    std::string dep;
    std::string key;
    int64_t per_second = 0;
  };

  explicit TreeHarness(Options options) : options_(std::move(options)) {
    origin_ = clock_.Now();
  }
  ~TreeHarness() {
    // Leaves first: their paths call into the centrals' ledgers.
    leaves_.clear();
    centrals_.clear();
  }

  // A central replica named `id`, started at the next `phase` into a
  // second (time runs until then), so it ticks at that phase; its clock
  // `skew` ahead of the true one (Redis's).
  int AddCentral(const std::string& id, absl::Duration phase,
                 absl::Duration skew = absl::ZeroDuration()) {
    RunToPhase(phase);
    centrals_.push_back(MakeCentral(id, skew));
    central_ids_.push_back(id);
    centrals_.back()->Start();
    return static_cast<int>(centrals_.size()) - 1;
  }
  // A leaf under central `central`, started at the next `phase` into a
  // second (time runs until then), its clock `skew` ahead of the true one.
  int AddLeaf(const std::string& id, int central, absl::Duration phase,
              absl::Duration skew = absl::ZeroDuration()) {
    RunToPhase(phase);
    auto path = std::make_unique<LeafPath>(
        [this](int c) -> cluster::LeafServer* {
          if (c < 0 || c >= static_cast<int>(centrals_.size()) ||
              centrals_[c] == nullptr) {
            return nullptr;
          }
          return centrals_[c]->ledger();
        },
        [this](int c) { return NextLiveCentral(c); }, central);
    TreeProcess::Options o = ProcessOptions(id);
    o.skew = skew;
    leaves_.push_back(std::make_unique<TreeProcess>(
        std::move(o), &clock_, nullptr, std::move(path), &checker_));
    leaf_ids_.push_back(id);
    loads_.emplace_back();
    leaves_.back()->Start();
    return static_cast<int>(leaves_.size()) - 1;
  }

  // The process dies without a final tick (SIGKILL, node lost).
  void KillCentral(int c) {
    checker_.Forget(central_ids_[c]);
    centrals_[c].reset();
  }
  void KillLeaf(int l) {
    checker_.Forget(leaf_ids_[l]);
    leaves_[l].reset();
  }
  // A new process under the same id (a new incarnation), seeded from the
  // same policies file, as a restarted pod; it starts now.
  void RestartCentral(int c) {
    KillCentral(c);
    centrals_[c] = MakeCentral(central_ids_[c]);
    centrals_[c]->Start();
  }
  void MoveLeaf(int l, int central) { leaves_[l]->path()->MoveTo(central); }

  void SetLoad(int leaf, Load load) { loads_[leaf] = {std::move(load)}; }
  void AddLoad(int leaf, Load load) { loads_[leaf].push_back(std::move(load)); }
  void ClearLoad(int leaf) { loads_[leaf].clear(); }

  // One simulated millisecond: due ticks (centrals first), then the offered
  // calls, then the invariant.
  void Step() {
    clock_.Advance(absl::Milliseconds(1));
    ++ms_;
    const absl::Time now = clock_.Now();
    for (auto& c : centrals_) {
      if (c && c->Due(now)) c->TickNow().IgnoreError();
    }
    for (auto& l : leaves_) {
      if (l && l->Due(now)) l->TickNow().IgnoreError();
    }
    if (options_.check) checker_.Check(now);
    const int64_t second = ms_ / 1000;
    for (size_t i = 0; i < leaves_.size(); ++i) {
      if (!leaves_[i]) continue;
      for (const Load& load : loads_[i]) {
        const int64_t calls =
            ms_ * load.per_second / 1000 - (ms_ - 1) * load.per_second / 1000;
        for (int64_t k = 0; k < calls; ++k) {
          if (leaves_[i]->Call(load.dep, load.key)) {
            Count(load.dep, load.key, second, i);
          }
        }
      }
      // Calls take no time here: settle them so no slot stays taken.
      leaves_[i]->SettleAll();
    }
  }
  // `d` of simulated time; `each_ms` (if set) runs before every step.
  void Run(absl::Duration d, const std::function<void()>& each_ms = nullptr) {
    const int64_t steps = absl::ToInt64Milliseconds(d);
    for (int64_t i = 0; i < steps; ++i) {
      if (each_ms) each_ms();
      Step();
    }
  }
  // Steps until `done()` or `limit` passes; returns the time taken, or
  // InfiniteDuration.
  absl::Duration RunUntil(const std::function<bool()>& done,
                          absl::Duration limit) {
    const absl::Time start = clock_.Now();
    while (clock_.Now() - start < limit) {
      if (done()) return clock_.Now() - start;
      Step();
    }
    return done() ? clock_.Now() - start : absl::InfiniteDuration();
  }

  // Calls admitted for (dep, key) in simulated second `s` since the start.
  int64_t AdmittedIn(const std::string& dep, int64_t s,
                     const std::string& key = "") const {
    auto it = per_second_.find({dep, key});
    if (it == per_second_.end() || s >= static_cast<int64_t>(it->second.size()))
      return 0;
    return it->second[s];
  }
  // Calls admitted by leaf `l` for (dep) in second `s`.
  int64_t LeafAdmittedIn(int l, const std::string& dep, int64_t s) const {
    auto it = per_leaf_second_.find({dep, l});
    if (it == per_leaf_second_.end() ||
        s >= static_cast<int64_t>(it->second.size()))
      return 0;
    return it->second[s];
  }
  // The current simulated second (since the start) and millisecond.
  int64_t second() const { return ms_ / 1000; }
  int64_t ms() const { return ms_; }
  // Moves time to the next whole second boundary.
  void RunToSecondBoundary() {
    while (ms_ % 1000 != 0) Step();
  }
  // Moves time until it is `phase` into a second (not at all if it is).
  void RunToPhase(absl::Duration phase) {
    const int64_t at = absl::ToInt64Milliseconds(phase) % 1000;
    while (ms_ % 1000 != at) Step();
  }

  uint64_t DecisionErrors() const {
    uint64_t n = 0;
    for (const auto& l : leaves_) n += l ? l->errors() : 0;
    for (const auto& c : centrals_) n += c ? c->errors() : 0;
    return n;
  }

  // Calls decided without a policy, over every process.
  uint64_t UnknownDecisions() const {
    uint64_t n = 0;
    for (const auto& l : leaves_) n += l ? l->unknown() : 0;
    return n;
  }

  TreeProcess* central(int c) { return centrals_[c].get(); }
  TreeProcess* leaf(int l) { return leaves_[l].get(); }
  int centrals() const { return static_cast<int>(centrals_.size()); }
  int leaves() const { return static_cast<int>(leaves_.size()); }
  testing::FakeStore& redis() { return redis_; }
  testing::FakeClock& clock() { return clock_; }
  InForceChecker& checker() { return checker_; }
  absl::Time origin() const { return origin_; }
  std::string Violations() const { return checker_.Describe(origin_); }

  int NextLiveCentral(int c) const {
    const int n = static_cast<int>(centrals_.size());
    for (int i = 1; i <= n; ++i) {
      const int j = (c + i) % n;
      if (centrals_[j] != nullptr) return j;
    }
    return -1;
  }

 private:
  TreeProcess::Options ProcessOptions(const std::string& id) const {
    TreeProcess::Options o;
    o.id = id;
    o.interval = options_.interval;
    o.margin = options_.margin;
    o.nudge_on_transition = options_.nudge_on_transition;
    o.nudge_on_demand = options_.nudge_on_demand;
    o.ledger_nudge = options_.ledger_nudge;
    return o;
  }
  std::unique_ptr<TreeProcess> MakeCentral(
      const std::string& id, absl::Duration skew = absl::ZeroDuration()) {
    TreeProcess::Options o = ProcessOptions(id);
    o.policies_yaml = options_.policies_yaml;
    o.skew = skew;
    return std::make_unique<TreeProcess>(std::move(o), &clock_, &redis_,
                                         nullptr, &checker_);
  }
  void Count(const std::string& dep, const std::string& key, int64_t s,
             size_t leaf) {
    auto& v = per_second_[{dep, key}];
    if (static_cast<int64_t>(v.size()) <= s) v.resize(s + 1, 0);
    ++v[s];
    auto& w = per_leaf_second_[{dep, static_cast<int>(leaf)}];
    if (static_cast<int64_t>(w.size()) <= s) w.resize(s + 1, 0);
    ++w[s];
  }

  const Options options_;
  testing::FakeClock clock_;
  testing::FakeStore redis_{&clock_};
  InForceChecker checker_;
  absl::Time origin_;
  int64_t ms_ = 0;
  std::vector<std::unique_ptr<TreeProcess>> centrals_;
  std::vector<std::string> central_ids_;
  std::vector<std::unique_ptr<TreeProcess>> leaves_;
  std::vector<std::string> leaf_ids_;
  std::vector<std::vector<Load>> loads_;
  std::map<std::pair<std::string, std::string>, std::vector<int64_t>>
      per_second_;
  std::map<std::pair<std::string, int>, std::vector<int64_t>> per_leaf_second_;
};

}  // namespace sluice::tree_testing

#endif  // SLUICE_TESTS_GRANT_TREE_TREE_HARNESS_H_
