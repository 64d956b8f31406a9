// SPDX-License-Identifier: Apache-2.0
#include "server/core/live_policy.h"

#include <sched.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"

namespace sluice::core {
namespace {

// Keys shard `index` of `shards` may hold: max_keys split as evenly as
// whole keys allow, so the shards together hold exactly max_keys.
size_t ShareOf(uint32_t max_keys, size_t index, size_t shards) {
  // At least one, should an edit cut max_keys below the number of shards.
  return std::max<size_t>(
      1, max_keys / shards + (index < max_keys % shards ? 1 : 0));
}

// The CPU whose slice the calling thread uses (see
// LivePolicy::Shard::SliceOfThisThread); kNoCpu until its first decision.
constexpr size_t kNoCpu = ~size_t{0};
thread_local size_t this_thread_cpu = kNoCpu;

size_t CurrentCpu() {
  const int cpu = sched_getcpu();
  return cpu < 0 ? 0 : static_cast<size_t>(cpu);
}

}  // namespace

// One key's state: its gates and its place in the shard's LRU list. The
// ledger's permits point at their key's node, so a key evicted while
// permits of it are still out keeps a tombstone: its gates go at once, the
// node (a few words and the key) stays, unlinked and marked evicted, until
// the last of them is reported or expires.
// The key's bytes follow the node in the same allocation.
struct KeyNode {
  static KeyNode* New(absl::string_view key, const PolicyConfig& policy,
                      absl::Time now, const GateContext* context) {
    void* memory = ::operator new(sizeof(KeyNode) + key.size());
    char* chars = static_cast<char*>(memory) + sizeof(KeyNode);
    if (!key.empty()) std::memcpy(chars, key.data(), key.size());
    return new (memory) KeyNode(absl::string_view(chars, key.size()), policy,
                                now, context);
  }
  static void Delete(KeyNode* node) {
    node->~KeyNode();
    ::operator delete(node);
  }

  absl::string_view key() const {
    return absl::string_view(reinterpret_cast<const char*>(this + 1),
                             key_size);
  }

  // Frees the gates; the node is a tombstone from here on.
  void Evict() {
    evicted = true;
    gates.~GateSet();
  }

  KeyNode* newer = nullptr;
  KeyNode* older = nullptr;
  uint32_t live_permits = 0;
  const uint32_t key_size;
  bool evicted = false;
  // Alive until Evict().
  union {
    GateSet gates;
  };

 private:
  KeyNode(absl::string_view key, const PolicyConfig& policy, absl::Time now,
          const GateContext* context)
      : key_size(static_cast<uint32_t>(key.size())) {
    new (&gates) GateSet(policy, now, context, key);
  }
  ~KeyNode() {
    if (!evicted) gates.~GateSet();
  }
};

// Keeps `policy` alive on the calling thread until its next Acquire (see
// Decision::policy). A thread holds the last few policies it decided under,
// so one that serves a handful of dependencies in turn takes no reference
// count (a write to memory shared with every other thread) per call.
const PolicyConfig* HoldForThisThread(
    const std::shared_ptr<const PolicyConfig>& policy) {
  constexpr size_t kHeld = 4;
  thread_local std::array<std::shared_ptr<const PolicyConfig>, kHeld> held;
  thread_local size_t next = 0;
  for (const auto& h : held) {
    if (h == policy) return h.get();
  }
  held[next] = policy;
  next = (next + 1) % kHeld;
  return policy.get();
}

// The index of a shard's keys holds only node pointers, looked up by the
// node's key (8 bytes a slot rather than a string_view and a pointer).
struct KeyOf {
  using is_transparent = void;
  static absl::string_view Of(absl::string_view key) { return key; }
  static absl::string_view Of(const KeyNode* node) { return node->key(); }
};
struct KeyHash : KeyOf {
  template <typename T>
  size_t operator()(const T& t) const {
    return absl::Hash<absl::string_view>{}(Of(t));
  }
};
struct KeyEq : KeyOf {
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return Of(a) == Of(b);
  }
};

// A part of a dependency's state with its own lock: every key whose hash
// falls here (or the one gate set of a policy without per_key), the permits
// they handed out, and the counters of their calls. Holds a copy of what
// the dependency's calls need (policy, cluster state, override), so a call
// takes this lock and no other.
class alignas(64) LivePolicy::Shard {
 public:
  Shard(std::shared_ptr<const PolicyConfig> policy, size_t max_keys,
        const std::string& name, EventSink* sink,
        std::atomic<bool>* demand_signalled, SweepAlarm* alarm,
        PermitEpochs* epochs, const ClusterState& cluster,
        absl::Duration permit_grace, const SliceOptions& slices,
        absl::Time now)
: alarm_(alarm),
        ledger_(epochs->Next()),
        epochs_(epochs),
        slice_count_(policy->per_key
                         ? 0
                         : std::min(slices.count, SliceOptions::kMaxSlices)),
        slice_slots_(slice_count_ == 0 ? nullptr
                                       : new SliceSlot[slice_count_]),
        slice_index_(slices.index) {
    CoreLock lock(&mu_);
    context_.sink = sink;
    context_.demand_signalled = demand_signalled;
    context_.counters = &counters_;
    context_.dependency = name;
    context_.permit_grace = permit_grace;
    SetPolicy(std::move(policy));
    max_keys_ = max_keys;
    cluster_ = cluster;
    // Lease ids of another life of this dependency are not taken for
    // this one's.
    lease_ids_ = static_cast<uint64_t>(absl::ToUnixMicros(now)) << 12;
    if (!policy_->per_key) {
      single_.emplace(*policy_, now, &context_, absl::string_view());
      InitGates(&*single_, now);
    }
  }

  ~Shard() {
    CoreLock lock(&mu_);
    while (newest_ != nullptr) {
      KeyNode* node = newest_;
      newest_ = node->older;
      KeyNode::Delete(node);
    }
    while (evicted_ != nullptr) {
      KeyNode* node = evicted_;
      evicted_ = node->older;
      KeyNode::Delete(node);
    }
  }

  absl::Status Acquire(absl::string_view key, uint32_t permits,
                       Unreported unreported, Clock* clock, Decision* out)
      ABSL_LOCKS_EXCLUDED(mu_) {
    size_t slice_at = 0;
    if (slice_count_ > 0) {
      slice_at = SliceOfThisThread();
      CoreSlice* slice =
          slice_slots_[slice_at].slice.load(std::memory_order_acquire);
      if (slice != nullptr) {
        if (!slice->mu.TryLock()) {
          // A thread on another CPU has it: from the next call on, this
          // thread takes the slice of the CPU it runs on now, so threads
          // that run at once settle on different slices.
          MoveThisThread();
          slice->mu.Lock();
        }
        slice->mu.AssertHeld();
        const bool decided =
            slice->TryAcquire(permits, unreported, clock->Now(), out);
        if (decided) out->policy = HoldForThisThread(slice->terms().policy);
        slice->mu.Unlock();
        if (decided) return absl::OkStatus();
      }
    }
    ChangeLock lock(this);
    // Read under the lock: a time read before it could be older than one
    // a grant was applied at meanwhile, and the grant's end is checked
    // against it.
    const absl::Time now = clock->Now();
    if (policy_->rate_limit) {
      const RateLimitConfig& rate = *policy_->rate_limit;
      const double most = rate.algorithm == RateAlgorithm::kTokenBucket
                              ? rate.burst
                              : std::floor(rate.rate);
      if (permits > most) {
        return absl::InvalidArgumentError(absl::StrCat(
            "permits ", permits, " can never be admitted by policy \"",
            context_.dependency, "\": its rate_limit admits at most ", most,
            " at once"));
      }
    }
    ExpireDue(now);
    if (slice_count_ > 0) {
      if (ArmAndAcquire(slice_at, permits, unreported, now, out)) {
        return absl::OkStatus();
      }
      // Decided here, exactly: every token and slot back where the gates
      // see them.
      ReclaimSlices(now);
    }
    KeyNode* node = nullptr;
    GateSet* gates;
    if (single_) {
      gates = &*single_;
    } else {
      node = NodeFor(key, now);
      gates = &node->gates;
    }
    const Admission admission = gates->Acquire(*policy_, permits, now, out);
    const bool may_not_report = unreported == Unreported::kRelease;
    // A caller that may never report holds a permit only where one serves:
    // a slot to give back, or an outcome the breaker would judge.
    if (admission.admitted &&
        (!may_not_report || admission.holds_slot ||
         admission.adaptive_epoch != 0 || admission.probe_round != 0 ||
         policy_->breaker.has_value())) {
      PermitLedger::Permit evicted;
      // Its expiry judges nothing, except for a HALF_OPEN probe: a probe
      // whose outcome never comes is a failed probe for every caller, or
      // unreported probes would hold the breaker HALF_OPEN for good.
      out->permit_id.serial =
          ledger_.Issue(now, now + gates->permit_expiry(),
                        admission.holds_slot, admission.probe_round, node,
                        &evicted,
                        may_not_report && admission.probe_round == 0
                            ? Outcome::kCancelled
                            : Outcome::kTimeout,
                        admission.adaptive_epoch);
      if (node != nullptr) ++node->live_permits;
      if (evicted.id != 0) {
        Settle(evicted, evicted.on_expiry, now - evicted.issued, false, now);
      }
    }
    if (node != nullptr && gates->TakeSyncRequest()) {
      // A hot key: share it from the next tick on (allocates once per key
      // and tick, not per call).
      hot_keys_.emplace_back(key);
    }
    out->policy = HoldForThisThread(policy_);
    Count(*out);
    return absl::OkStatus();
  }

  BreakerState Report(absl::string_view key, uint64_t permit_id,
                      Outcome outcome, absl::Duration latency, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_) {
    CoreSlice* slice = SliceOfPermit(permit_id);
    if (slice != nullptr) {
      CoreLock lock(&slice->mu);
      if (slice->TrySettle(permit_id, outcome, latency, now)) {
        return BreakerState::kClosed;
      }
    }
    ChangeLock lock(this);
    ExpireDue(now);
    if (slice != nullptr) {
      PermitLedger::Permit permit;
      bool found;
      {
        CoreLock slice_lock(&slice->mu);
        found = slice->ledger().Retire(permit_id, &permit);
      }
      if (!found) {
        ++counters_.stale_reports;
      } else {
        Settle(permit, outcome, latency, true, now);
        if (!FastSuccess(outcome, latency)) ReclaimSlices(now);
      }
      return single_->breaker_state(now);
    }
    const PermitLedger::Permit* found = ledger_.Find(permit_id);
    const auto* node =
        found == nullptr ? nullptr : static_cast<KeyNode*>(found->holder);
    // A permit settles only the key it was issued for; one of an evicted
    // key goes, harmlessly, with its key.
    if (found == nullptr || (node != nullptr && node->key() != key)) {
      ++counters_.stale_reports;
    } else {
      PermitLedger::Permit permit;
      ledger_.Retire(permit_id, &permit);
      if (!Settle(permit, outcome, latency, true, now)) {
        ++counters_.stale_reports;
      }
      if (!FastSuccess(outcome, latency)) ReclaimSlices(now);
    }
    GateSet* gates = FindGates(key);
    return gates == nullptr ? BreakerState::kClosed
                            : gates->breaker_state(now);
  }

  // Settles a client's lease and answers its next one (ClientLeases),
  // with the gates exact: the slices' loans back first.
  void RenewLease(const LeaseSettlement& in, absl::Time now, LeaseTerms* out)
      ABSL_LOCKS_EXCLUDED(mu_) {
    ChangeLock lock(this);
    ExpireDue(now);
    ReclaimSlices(now);
    leases_.Renew(in, *policy_, &*single_, &lease_ids_, &counters_, now, out);
  }

  // The same for a key of a per_key policy: lent from the key's gates,
  // made for it if it has none (as an Acquire of it would). A key's leases
  // end with its gates: when it is evicted, what they hold goes with them.
  // `most`: the most leases this shard keeps over all its keys.
  void RenewKeyLease(absl::string_view key, const LeaseSettlement& in,
                     size_t most, absl::Time now, LeaseTerms* out)
      ABSL_LOCKS_EXCLUDED(mu_) {
    ChangeLock lock(this);
    ExpireDue(now);
    auto it = key_leases_.find(key);
    if (key_lease_count_ >= most &&
        (it == key_leases_.end() || !it->second.holds(in.client))) {
      *out = LeaseTerms();
      out->policy_version = policy_->version;
      out->reason = "too many client leases on this policy's keys";
      return;
    }
    KeyNode* node = NodeFor(key, now);  // may evict another key's leases
    it = key_leases_.find(key);
    if (it == key_leases_.end()) {
      it = key_leases_.emplace(std::string(key), ClientLeases()).first;
    }
    const size_t before = it->second.size();
    it->second.Renew(in, *policy_, &node->gates, &lease_ids_, &counters_, now,
                     out);
    key_lease_count_ = key_lease_count_ - before + it->second.size();
    key_leases_due_ = std::min(key_leases_due_, it->second.next_due());
    if (it->second.empty()) key_leases_.erase(it);
  }

  BreakerState PeekBreaker(absl::string_view key, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_) {
    ChangeLock lock(this);
    GateSet* gates = FindGates(key);
    return gates == nullptr ? BreakerState::kClosed
                            : gates->breaker_state(now);
  }

  // Does what is due; at once, under the lock, when nothing is (see
  // next_sweep_). Either way it publishes next_sweep_ to the alarm, which
  // the sweep pass has just reset (SweepAlarm).
  void Sweep(absl::Time now) ABSL_LOCKS_EXCLUDED(mu_) {
    CoreLock lock(&mu_);
    SweepLocked(now);
  }

  void Reconfigure(std::shared_ptr<const PolicyConfig> policy,
                   size_t max_keys, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_) {
    ChangeLock lock(this);
    ReclaimSlices(now);
    // The gate sets point into the policy: keep the old one alive until
    // each of them has moved to the new one.
    std::shared_ptr<const PolicyConfig> old = std::move(policy_);
    SetPolicy(std::move(policy));
    max_keys_ = max_keys;
    const PolicyConfig& current = *policy_;
    ForEachGates([&](GateSet& gates) { gates.Reconfigure(current, now); });
    while (index_.size() > max_keys_) EvictOldest();
  }

  void SetOverride(BreakerOverride override, const std::string& cause,
                   absl::Time now) ABSL_LOCKS_EXCLUDED(mu_) {
    ChangeLock lock(this);
    ReclaimSlices(now);
    override_ = override;
    ForEachGates(
        [&](GateSet& gates) { gates.SetOverride(override, now, cause); });
  }

  void SetClusterState(const ClusterState& cluster, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_) {
    ChangeLock lock(this);
    ReclaimSlices(now);
    cluster_ = cluster;
    ForEachGates([&](GateSet& gates) { gates.SetClusterState(cluster, now); });
  }

  // Adds this shard's counters and keys to `out`, and the gates of `key`
  // if they are here.
  void AddStatus(absl::string_view key, bool has_key, absl::Time now,
                 LivePolicyStatus* out) ABSL_LOCKS_EXCLUDED(mu_) {
    ChangeLock lock(this);
    ExpireDue(now);
    ReclaimSlices(now);
    AddCounters(counters_, &out->counters);
    out->keys += single_ ? 1 : index_.size();
    const auto add = [&](const LeaseTotals& t) {
      out->leased.leases += t.leases;
      out->leased.tokens += t.tokens;
      out->leased.slots += t.slots;
    };
    add(leases_.totals());
    for (const auto& [k, leases] : key_leases_) add(leases.totals());
    if (!has_key) return;
    if (single_) {
      out->gates = single_->Status(now);
      out->gates->live_permits = ledger_.live() + SlicePermits();
      const LeaseTotals leased = leases_.totals();
      out->gates->client_leases = leased.leases;
      out->gates->leased_tokens = leased.tokens;
      out->gates->leased_slots = leased.slots;
    } else if (auto it = index_.find(key); it != index_.end()) {
      out->gates = (*it)->gates.Status(now);
      out->gates->live_permits = (*it)->live_permits;
      if (auto leases = key_leases_.find(key); leases != key_leases_.end()) {
        const LeaseTotals leased = leases->second.totals();
        out->gates->client_leases = leased.leases;
        out->gates->leased_tokens = leased.tokens;
        out->gates->leased_slots = leased.slots;
      }
    }
  }

  // The counters and override a dependency built in this one's place takes
  // over.
  void Carry(DecisionCounters* counters, BreakerOverride* override,
             absl::Time now) ABSL_LOCKS_EXCLUDED(mu_) {
    CoreLock lock(&mu_);
    ReclaimSlices(now);
    AddCounters(counters_, counters);
    *override = override_;
  }
  void TakeOver(const DecisionCounters& counters) ABSL_LOCKS_EXCLUDED(mu_) {
    ChangeLock lock(this);
    counters_ = counters;
  }

  std::shared_ptr<const PolicyConfig> policy() const ABSL_LOCKS_EXCLUDED(mu_) {
    CoreLock lock(&mu_);
    return policy_;
  }

  // Cluster mode, a policy without per_key: the one gate set's tick.
  void CollectSingle(absl::Duration interval, absl::Time now,
                     DependencyTick* out) ABSL_LOCKS_EXCLUDED(mu_) {
    CoreLock lock(&mu_);
    // The breaker's outcomes go with the tick, the slices' too.
    ReclaimSlices(now);
    if (cluster_.enabled && single_->has_cluster_limit()) {
      out->keys.emplace_back();
      single_->CollectTick(interval, now, &out->keys.back());
      leases_.AddUsage(*single_, now, &out->keys.back());
    }
    // Per-key breakers stay local; the dependency's breaker is shared.
    single_->CollectBreaker(now, out);
    out->policy_digest = policy_->digest;
    single_->CollectWarm(out);
    SweepAfterTick(now);
  }

  // Cluster mode, per_key: moves up to `most` keys waiting to be pushed
  // into `hot`, oldest first.
  void TakeHotKeys(size_t most, std::vector<std::string>* hot)
      ABSL_LOCKS_EXCLUDED(mu_) {
    ChangeLock lock(this);
    const size_t n = std::min(most, hot_keys_.size());
    hot->insert(hot->end(), std::make_move_iterator(hot_keys_.begin()),
                std::make_move_iterator(hot_keys_.begin() + n));
    hot_keys_.erase(hot_keys_.begin(), hot_keys_.begin() + n);
  }

  // Cluster mode, per_key: the ticks of keys [begin, end) of `hot`.
  void CollectKeys(const std::vector<std::string>& hot, size_t begin,
                   size_t end, absl::Duration interval, absl::Time now,
                   DependencyTick* out) ABSL_LOCKS_EXCLUDED(mu_) {
    ChangeLock lock(this);
    for (size_t k = begin; k < end; ++k) {
      GateSet* gates = FindGates(hot[k]);
      if (gates == nullptr) continue;  // evicted since
      gates->Dequeued();
      if (!gates->has_cluster_limit()) continue;
      out->keys.emplace_back();
      gates->CollectTick(interval, now, &out->keys.back());
      if (auto it = key_leases_.find(hot[k]); it != key_leases_.end()) {
        it->second.AddUsage(*gates, now, &out->keys.back());
      }
    }
  }

  void ApplySingle(const DependencyUpdate& update, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_) {
    CoreLock lock(&mu_);
    ReclaimSlices(now);
    for (const KeyGrant& grant : update.grants) {
      single_->ApplyGrant(grant, now);
    }
    single_->ApplyBreaker(update, now);
    single_->ApplyWarm(update, now);
    SweepAfterTick(now);
  }

  // Warm start: the state of up to `most` keys (the most recently used
  // first), leaving out keys with nothing to keep.
  void ExportWarm(size_t most, absl::Time now,
                  std::vector<KeyWarmState>* out) ABSL_LOCKS_EXCLUDED(mu_) {
    ChangeLock lock(this);
    ReclaimSlices(now);
    const auto keep = [&](GateSet& gates) {
      KeyWarmState state = gates.ExportWarm(now);
      if (state.limit || state.baseline || state.breaker) {
        out->push_back(std::move(state));
      }
    };
    if (single_) {
      keep(*single_);
      return;
    }
    size_t taken = 0;
    for (KeyNode* node = newest_; node != nullptr && taken < most;
         node = node->older, ++taken) {
      keep(node->gates);
    }
  }

  bool ImportWarm(const KeyWarmState& state, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_) {
    ChangeLock lock(this);
    ReclaimSlices(now);
    if (single_) return single_->ImportWarm(state, now);
    return NodeFor(state.key, now)->gates.ImportWarm(state, now);
  }

  void ApplyGrant(const KeyGrant& grant, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_) {
    ChangeLock lock(this);
    GateSet* gates = FindGates(grant.key);
    if (gates == nullptr) return;
    gates->ApplyGrant(grant, now);
    // A key that holds a grant is pushed again next tick to renew it (or to
    // give it back once it has gone quiet).
    if (gates->TakeSyncRequest()) hot_keys_.push_back(grant.key);
  }

 private:
  void SetPolicy(std::shared_ptr<const PolicyConfig> policy)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    policy_ = std::move(policy);
  }

  static void AddCounters(const DecisionCounters& from, DecisionCounters* to) {
    to->acquired += from.acquired;
    to->allowed += from.allowed;
    to->rejected += from.rejected;
    to->degraded += from.degraded;
    to->shadow_refused += from.shadow_refused;
    to->leased += from.leased;
    for (size_t v = 0; v < from.by_verdict_reason.size(); ++v) {
      for (size_t r = 0; r < from.by_verdict_reason[v].size(); ++r) {
        to->by_verdict_reason[v][r] += from.by_verdict_reason[v][r];
      }
    }
    for (size_t o = 0; o < from.outcomes.size(); ++o) {
      to->outcomes[o] += from.outcomes[o];
    }
    to->stale_reports += from.stale_reports;
  }

  template <typename Fn>
  void ForEachGates(Fn fn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (single_) {
      fn(*single_);
      return;
    }
    for (KeyNode* node = newest_; node != nullptr; node = node->older) {
      fn(node->gates);
    }
  }

  // A new gate set takes the dependency's override and cluster state.
  void InitGates(GateSet* gates, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (cluster_.enabled) gates->SetClusterState(cluster_, now);
    if (override_ != BreakerOverride::kAuto) {
      gates->SetOverride(override_, now, "override of the dependency");
    }
  }

  GateSet* FindGates(absl::string_view key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (single_) return &*single_;
    auto it = index_.find(key);
    return it == index_.end() ? nullptr : &(*it)->gates;
  }

  // The node of `key`, created (evicting the least recently used key when
  // the shard is full) or moved to the front of the LRU list.
  KeyNode* NodeFor(absl::string_view key, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = index_.find(key);
    if (it != index_.end()) {
      KeyNode* node = *it;
      if (node != newest_) {
        Unlink(node);
        PushNewest(node);
      }
      return node;
    }
    while (!index_.empty() && index_.size() >= max_keys_) EvictOldest();
    KeyNode* node = KeyNode::New(key, *policy_, now, &context_);
    InitGates(&node->gates, now);
    PushNewest(node);
    index_.insert(node);
    return node;
  }

  void PushNewest(KeyNode* node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    node->newer = nullptr;
    node->older = newest_;
    if (newest_ != nullptr) newest_->newer = node;
    newest_ = node;
    if (oldest_ == nullptr) oldest_ = node;
  }

  void Unlink(KeyNode* node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (node->newer != nullptr) {
      node->newer->older = node->older;
    } else {
      newest_ = node->older;
    }
    if (node->older != nullptr) {
      node->older->newer = node->newer;
    } else {
      oldest_ = node->newer;
    }
    node->newer = node->older = nullptr;
  }

  // Drops the least recently used key. Its permits become harmless: their
  // reports count as stale and their expiry settles nothing.
  void EvictOldest() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    KeyNode* node = oldest_;
    Unlink(node);
    index_.erase(node);
    // Its leases go with its gates: a client that still decides from one
    // hears that it ended at its next renewal.
    if (auto it = key_leases_.find(node->key()); it != key_leases_.end()) {
      key_lease_count_ -= it->second.size();
      key_leases_.erase(it);
    }
    if (node->live_permits == 0) {
      KeyNode::Delete(node);
      return;
    }
    node->Evict();
    node->older = evicted_;
    if (evicted_ != nullptr) evicted_->newer = node;
    evicted_ = node;
  }

  // Settles a permit taken out of the ledger: `reported` by its caller, or
  // expired. False when its key was evicted meanwhile (nothing is settled;
  // the key's node goes with its last permit).
  bool Settle(const PermitLedger::Permit& permit, Outcome outcome,
              absl::Duration latency, bool reported, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Admission admission;
    admission.admitted = true;
    admission.holds_slot = permit.holds_slot;
    admission.probe_round = permit.probe_round;
    admission.adaptive_epoch = permit.adaptive_epoch;
    auto* node = static_cast<KeyNode*>(permit.holder);
    if (node == nullptr) {
      single_->Settle(admission, outcome, latency, reported, now);
      return true;
    }
    --node->live_permits;
    if (node->evicted) {
      if (node->live_permits == 0) FreeEvicted(node);
      return false;
    }
    node->gates.Settle(admission, outcome, latency, reported, now);
    return true;
  }

  void FreeEvicted(KeyNode* node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (node->newer != nullptr) {
      node->newer->older = node->older;
    } else {
      evicted_ = node->older;
    }
    if (node->older != nullptr) node->older->newer = node->newer;
    KeyNode::Delete(node);
  }

  void SweepLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (now < next_sweep_) {
      alarm_->Lower(next_sweep_);
      return;
    }
    ExpireDue(now);
    absl::Time next = std::min({ledger_.NextDeadline(), SlicesNextDue(now),
                                leases_.next_due(), key_leases_due_});
    ForEachGates([&](GateSet& gates) {
      gates.Sweep(now);
      next = std::min(next, gates.NextSweep());
    });
    next_sweep_ = next;
    alarm_->Lower(next);
  }

  // Ends the sync loop's once-a-tick change to a shard without keys, in
  // place of ChangeLock: it sweeps the shard (one gate set: cheap) before
  // the lock is released, so the alarm hears the shard's real next due
  // time instead of "now". Otherwise every tick of an idle cluster-mode
  // server would wake the housekeeping thread for a sweep with nothing to
  // do.
  void SweepAfterTick(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    next_sweep_ = absl::InfinitePast();
    SweepLocked(now);
  }

  // Settles every permit past its deadline as a TIMEOUT (or, for a caller
  // that may never report, as CANCELLED: only its slot is freed).
  void ExpireDue(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (touched_ != 0) SettleSlices(now);
    PermitLedger::Permit permit;
    while (ledger_.PopExpired(now, &permit)) {
      Settle(permit, permit.on_expiry, now - permit.issued, false, now);
    }
    if (single_ && leases_.next_due() <= now) leases_.Expire(&*single_, now);
    if (key_leases_due_ <= now) ExpireKeyLeases(now);
  }

  void ExpireKeyLeases(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    key_leases_due_ = absl::InfiniteFuture();
    key_lease_count_ = 0;
    for (auto it = key_leases_.begin(); it != key_leases_.end();) {
      GateSet* gates = FindGates(it->first);
      if (gates != nullptr) it->second.Expire(gates, now);
      key_lease_count_ += gates == nullptr ? 0 : it->second.size();
      if (gates == nullptr || it->second.empty()) {
        key_leases_.erase(it++);
      } else {
        key_leases_due_ = std::min(key_leases_due_, it->second.next_due());
        ++it;
      }
    }
  }

  // --- Per-core slices (CoreSlice), of a shard without keys -------------

  // Most tokens or slots a slice borrows at once.
  static constexpr double kSliceBatch = 64;

  // The calling thread's slice. A thread keeps the slice of the CPU it
  // first decided on, so one thread always finds its own tokens, and moves
  // (MoveThisThread) when it finds that slice busy.
  size_t SliceOfThisThread() const {
    if (slice_index_ != nullptr) return slice_index_() % slice_count_;
    if (this_thread_cpu == kNoCpu) this_thread_cpu = CurrentCpu();
    return this_thread_cpu % slice_count_;
  }
  void MoveThisThread() const {
    if (slice_index_ == nullptr) this_thread_cpu = CurrentCpu();
  }

  // The slice that issued permit `id`, or null for one of the shard's
  // ledger (or none): the epoch in its high bits names the ledger.
  CoreSlice* SliceOfPermit(uint64_t id) const {
    const auto epoch = static_cast<uint32_t>(id >> 40);
    for (size_t i = 0; i < slice_count_; ++i) {
      if (slice_slots_[i].epoch.load(std::memory_order_acquire) == epoch) {
        return slice_slots_[i].slice.load(std::memory_order_acquire);
      }
    }
    return nullptr;
  }

  template <typename Fn>
  void ForEachTouchedSlice(Fn fn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (size_t i = 0; i < slice_count_; ++i) {
      const uint64_t bit = uint64_t{1} << i;
      if ((touched_ & bit) == 0) continue;
      CoreSlice& slice = *slice_slots_[i].slice.load(std::memory_order_relaxed);
      CoreLock lock(&slice.mu);
      fn(slice);
      if (slice.idle()) touched_ &= ~bit;
    }
  }

  // Arms `slice` with a batch from the gates, when the policy allows
  // slicing now, and decides the call from it. False when the call must be
  // decided under this lock.
  bool ArmAndAcquire(size_t at, uint32_t permits,
                     Unreported unreported, absl::Time now, Decision* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    CoreSlice::Terms terms;
    terms.until = single_->SliceableUntil(now);
    if (terms.until <= now) return false;
    const PolicyConfig& policy = *policy_;
    terms.policy = policy_;
    terms.expiry = single_->permit_expiry();
    terms.has_bucket = single_->has_bucket();
    terms.has_cap = single_->has_cap();
    terms.has_breaker = single_->has_breaker();
    terms.most_permits = terms.has_bucket
                             ? policy.rate_limit->burst
                             : std::numeric_limits<double>::infinity();
    terms.slow_after = SlowAfter(policy);
    // A batch is a small part of what the gates hold, so slices rarely
    // strand what another core needs, and large enough that the lock here
    // is taken once in many calls.
    const double count = static_cast<double>(slice_count_);
    const double tokens =
        terms.has_bucket
            ? std::clamp(std::floor(policy.rate_limit->burst / (4 * count)),
                         1.0, kSliceBatch)
            : 0;
    const uint32_t slots =
        terms.has_cap
            ? static_cast<uint32_t>(std::clamp(
                  std::floor(policy.concurrency->max_in_flight / (4 * count)),
                  1.0, kSliceBatch))
            : 0;
    const double n = permits == 0 ? 1 : permits;
    CoreSlice* slice = SliceAt(at);
    {
      CoreLock lock(&slice->mu);
      if (!slice->Arm(std::move(terms), &*single_, n, std::max(n, tokens),
                      slots, now)) {
        return false;
      }
      touched_ |= uint64_t{1} << at;
      if (!slice->TryAcquire(permits, unreported, now, out)) return false;
    }
    out->policy = HoldForThisThread(policy_);
    return true;
  }

  // Slice `at`, made on its first use: a dependency that is never busy
  // on more than one core never pays for the others.
  CoreSlice* SliceAt(size_t at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    SliceSlot& slot = slice_slots_[at];
    CoreSlice* slice = slot.slice.load(std::memory_order_relaxed);
    if (slice != nullptr) return slice;
    owned_slices_.push_back(std::make_unique<CoreSlice>(epochs_->Next()));
    slice = owned_slices_.back().get();
    slot.slice.store(slice, std::memory_order_release);
    slot.epoch.store(slice->epoch(), std::memory_order_release);
    return slice;
  }

  // Whether a settled outcome leaves what the breaker may trip on as it
  // was: a success no slower than the slow-call rule. Anything else may
  // change it, so the slices stop deciding until they are armed again.
  bool FastSuccess(Outcome outcome, absl::Duration latency) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return outcome == Outcome::kSuccess && latency <= SlowAfter(*policy_);
  }

  // A success slower than this is a slow call to the breaker; infinite
  // without a slow-call rule.
  static absl::Duration SlowAfter(const PolicyConfig& policy) {
    return policy.breaker && policy.breaker->slow_rule_enabled()
               ? policy.breaker->slow_call_duration
               : absl::InfiniteDuration();
  }

  // Hands every slice's counts and successes to the shard and settles the
  // permits of theirs that expired, as ExpireDue does its own. The
  // successes go first: each came before any expiry settled now.
  void SettleSlices(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    bool expired = false;
    ForEachTouchedSlice([&](CoreSlice& slice)
                            ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      slice.mu.AssertHeld();
      slice.Fold(&*single_, &counters_, now);
      expired = expired || slice.ledger().NextDeadline() <= now;
    });
    if (!expired) return;
    ForEachTouchedSlice([&](CoreSlice& slice)
                            ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      slice.mu.AssertHeld();
      PermitLedger::Permit permit;
      while (slice.ledger().PopExpired(now, &permit)) {
        Settle(permit, permit.on_expiry, now - permit.issued, false, now);
      }
      // A timeout is a failure: what the breaker may trip on has changed.
      slice.Reclaim(&*single_, &counters_, now);
    });
  }

  // Takes back every slice's spare tokens and slots and disarms them, so
  // the gates hold everything and decide exactly.
  void ReclaimSlices(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ForEachTouchedSlice([&](CoreSlice& slice)
                            ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      slice.mu.AssertHeld();
      slice.Reclaim(&*single_, &counters_, now);
    });
  }

  // The earliest a slice's permit may expire: the oldest one's deadline,
  // or for an armed slice the deadline of a permit it issued now.
  absl::Time SlicesNextDue(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::Time next = absl::InfiniteFuture();
    ForEachTouchedSlice([&](CoreSlice& slice) {
      slice.mu.AssertHeld();
      next = std::min(next, slice.ledger().NextDeadline());
      if (slice.armed()) next = std::min(next, now + slice.terms().expiry);
    });
    return next;
  }

  size_t SlicePermits() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    size_t live = 0;
    ForEachTouchedSlice([&](CoreSlice& slice) {
      slice.mu.AssertHeld();
      live += slice.ledger().live();
    });
    return live;
  }

  void Count(const Decision& d) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++counters_.acquired;
    switch (d.verdict) {
      case Verdict::kAllow:
        ++counters_.allowed;
        break;
      case Verdict::kReject:
        ++counters_.rejected;
        break;
      case Verdict::kDegrade:
        ++counters_.degraded;
        break;
    }
    if (d.reason == Reason::kShadow) ++counters_.shadow_refused;
    ++counters_.by_verdict_reason[static_cast<int>(d.verdict)]
                                 [static_cast<int>(d.reason)];
  }

  // The lock of every method that may change what a sweep has to do:
  // after it, the next sweep does everything and works out next_sweep_
  // anew, and the alarm wakes the sweeper for it (under the lock: see
  // SweepAlarm for why no wake-up is lost). Only Sweep, the const methods,
  // the constructor and destructor, and the tick methods of a shard without
  // keys (which sweep before they unlock: SweepAfterTick) take mu_ without
  // it.
  class ABSL_SCOPED_LOCKABLE ChangeLock {
   public:
    explicit ChangeLock(Shard* shard) ABSL_EXCLUSIVE_LOCK_FUNCTION(shard->mu_)
        : shard_(shard) {
      shard_->mu_.Lock();
      shard_->next_sweep_ = absl::InfinitePast();
      shard_->alarm_->Lower(absl::InfinitePast());
    }
    ~ChangeLock() ABSL_UNLOCK_FUNCTION() { shard_->mu_.Unlock(); }
    ChangeLock(const ChangeLock&) = delete;
    ChangeLock& operator=(const ChangeLock&) = delete;

   private:
    Shard* const shard_;
  };

  // The engine's: outlives every shard.
  SweepAlarm* const alarm_;
  // Taken by every call on this shard that no slice decides, for 50-100
  // ns. A plain mutex: a spinning lock kept waiters off the futex but made
  // no decision faster (docs/benchmarks.md, "The dependency lock").
  mutable CoreMutex mu_;
  // Before this, Sweep has nothing to do: the earliest of the ledger's next
  // deadline and every gate set's NextSweep, as of the last sweep that did
  // its work. InfinitePast (sweep in full) after any ChangeLock.
  absl::Time next_sweep_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Declared before the gate sets, which count outcomes into it.
  DecisionCounters counters_ ABSL_GUARDED_BY(mu_);
  GateContext context_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const PolicyConfig> policy_ ABSL_GUARDED_BY(mu_);
  size_t max_keys_ ABSL_GUARDED_BY(mu_) = 0;
  BreakerOverride override_ ABSL_GUARDED_BY(mu_) = BreakerOverride::kAuto;
  ClusterState cluster_ ABSL_GUARDED_BY(mu_);
  PermitLedger ledger_ ABSL_GUARDED_BY(mu_);
  // Gates of a policy without per_key.
  std::optional<GateSet> single_ ABSL_GUARDED_BY(mu_);
  // What clients hold on lease from single_ (a per_key policy's are in
  // key_leases_), and where the lease ids of both come from.
  ClientLeases leases_ ABSL_GUARDED_BY(mu_);
  uint64_t lease_ids_ ABSL_GUARDED_BY(mu_) = 0;
  // Its per-core slices (none for a per_key policy): slot i holds slice i
  // once it is made (SliceAt), and the epoch of its permits; the slices
  // themselves are owned_slices_. Bit i of touched_: slice i may hold
  // something.
  struct SliceSlot {
    std::atomic<CoreSlice*> slice{nullptr};
    std::atomic<uint32_t> epoch{0};
  };
  PermitEpochs* const epochs_;
  const size_t slice_count_;
  const std::unique_ptr<SliceSlot[]> slice_slots_;
  size_t (*const slice_index_)();
  std::vector<std::unique_ptr<CoreSlice>> owned_slices_ ABSL_GUARDED_BY(mu_);
  uint64_t touched_ ABSL_GUARDED_BY(mu_) = 0;
  // Keys of a per_key policy: an index, and a list from the most recently
  // used to the least.
  absl::flat_hash_set<KeyNode*, KeyHash, KeyEq> index_ ABSL_GUARDED_BY(mu_);
  KeyNode* newest_ ABSL_GUARDED_BY(mu_) = nullptr;
  KeyNode* oldest_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Evicted keys that still have permits out (linked through `older`).
  KeyNode* evicted_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Cluster mode, per_key: keys to push with the next tick (each once; see
  // GateSet::TakeSyncRequest).
  std::vector<std::string> hot_keys_ ABSL_GUARDED_BY(mu_);
  // per_key: what clients hold on lease from the gates of each key (only
  // keys with a lease; at most one entry per key with gates), and the
  // earliest time one of them may run out.
  absl::flat_hash_map<std::string, ClientLeases> key_leases_
      ABSL_GUARDED_BY(mu_);
  absl::Time key_leases_due_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  // The leases in key_leases_, over all keys.
  size_t key_lease_count_ ABSL_GUARDED_BY(mu_) = 0;
};

size_t LivePolicy::ShardsFor(const PolicyConfig& policy) {
  if (!policy.per_key || policy.max_keys < kShardedKeys) return 1;
  return std::min<size_t>(kMaxShards, policy.max_keys / kKeysPerShard);
}

LivePolicy::LivePolicy(std::shared_ptr<const PolicyConfig> policy,
                       Clock* clock, EventSink* sink, PermitEpochs* epochs,
                       SweepAlarm* alarm, const ClusterState& cluster,
                       absl::Duration permit_grace,
                       const SliceOptions& slices,
                       const LivePolicy* previous)
    : clock_(clock), name_(policy->name), per_key_(policy->per_key) {
  const absl::Time now = clock_->Now();
  const size_t n = ShardsFor(*policy);
  shards_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    shards_.push_back(std::make_unique<Shard>(
        policy, ShareOf(policy->max_keys, i, n), name_, sink,
        &demand_signalled_, alarm, epochs, cluster, permit_grace, slices,
        now));
  }
  if (previous != nullptr) {
    DecisionCounters counters;
    BreakerOverride override = BreakerOverride::kAuto;
    for (const auto& shard : previous->shards_) {
      shard->Carry(&counters, &override, now);
    }
    // The counters are the dependency's since its policy was first
    // installed; they stay whole in the first shard.
    shards_[0]->TakeOver(counters);
    if (override != BreakerOverride::kAuto) {
      SetOverride(override, "override of the dependency");
    }
  }
}

LivePolicy::~LivePolicy() = default;

LivePolicy::Shard& LivePolicy::ShardFor(absl::string_view key) {
  if (shards_.size() == 1) return *shards_[0];
  // The high bits, which the shard's own hash map does not use for its
  // slots.
  const size_t hash = absl::Hash<absl::string_view>{}(key);
  return *shards_[(hash >> 40) % shards_.size()];
}

bool LivePolicy::Fits(const PolicyConfig& policy) const {
  // The number of shards stays what it was at creation: resharding would
  // lose every key's state, its in-flight calls among them.
  return policy.per_key == per_key_;
}

std::shared_ptr<const PolicyConfig> LivePolicy::policy() const {
  return shards_[0]->policy();
}

absl::Status LivePolicy::Acquire(absl::string_view key, uint32_t permits,
                                 Unreported unreported, Decision* out) {
  return ShardFor(key).Acquire(key, permits, unreported, clock_, out);
}

BreakerState LivePolicy::Report(absl::string_view key, uint64_t permit_id,
                                Outcome outcome, absl::Duration latency) {
  return ShardFor(key).Report(key, permit_id, outcome, latency,
                              clock_->Now());
}

BreakerState LivePolicy::PeekBreaker(absl::string_view key) {
  return ShardFor(key).PeekBreaker(key, clock_->Now());
}

void LivePolicy::Sweep(absl::Time now) {
  for (const auto& shard : shards_) shard->Sweep(now);
}

void LivePolicy::Reconfigure(std::shared_ptr<const PolicyConfig> policy) {
  const absl::Time now = clock_->Now();
  const size_t n = shards_.size();
  for (size_t i = 0; i < n; ++i) {
    shards_[i]->Reconfigure(policy, ShareOf(policy->max_keys, i, n), now);
  }
}

void LivePolicy::SetOverride(BreakerOverride override,
                             const std::string& cause) {
  const absl::Time now = clock_->Now();
  for (const auto& shard : shards_) shard->SetOverride(override, cause, now);
}

LivePolicyStatus LivePolicy::Status(absl::string_view key) {
  const absl::Time now = clock_->Now();
  LivePolicyStatus status;
  status.policy = policy();
  // The key's own shard answers for its gates; every shard adds its
  // counters and keys.
  Shard* own = per_key_ ? &ShardFor(key) : shards_[0].get();
  for (const auto& shard : shards_) {
    shard->AddStatus(key, shard.get() == own, now, &status);
  }
  return status;
}

void LivePolicy::RenewLease(absl::string_view key, const LeaseSettlement& in,
                            LeaseTerms* out) {
  if (per_key_ != !key.empty()) {
    *out = LeaseTerms();
    out->policy_version = policy()->version;
    out->reason = per_key_ ? "a per_key policy is leased key by key"
                           : "the policy has no per_key: a lease of it "
                             "takes no key";
  } else if (per_key_) {
    // Each shard its part of kMaxKeyLeases, so that clients that keep
    // changing their id cannot grow a policy's leases without bound.
    const size_t most = std::max<size_t>(64, kMaxKeyLeases / shards_.size());
    ShardFor(key).RenewKeyLease(key, in, most, clock_->Now(), out);
  } else {
    shards_[0]->RenewLease(in, clock_->Now(), out);
  }
  out->per_key = per_key_;
}

DependencyWarmState LivePolicy::ExportWarm(size_t max_keys) {
  const absl::Time now = clock_->Now();
  DependencyWarmState out;
  out.name = name_;
  const std::shared_ptr<const PolicyConfig> current = policy();
  out.digest = current->digest;
  // Each shard keeps its share of the keys, most recently used first.
  const size_t share =
      std::max<size_t>(1, (max_keys + shards_.size() - 1) / shards_.size());
  for (const auto& shard : shards_) shard->ExportWarm(share, now, &out.keys);
  return out;
}

size_t LivePolicy::ImportWarm(const DependencyWarmState& state) {
  const absl::Time now = clock_->Now();
  size_t invalid = 0;
  // Exported most recently used first; taken back in reverse, so the keys
  // end up in the same LRU order (each one taken goes to the front).
  for (auto it = state.keys.rbegin(); it != state.keys.rend(); ++it) {
    if (!per_key_ && !it->key.empty()) continue;
    if (!ShardFor(it->key).ImportWarm(*it, now)) ++invalid;
  }
  return invalid;
}

void LivePolicy::SetClusterState(const ClusterState& cluster) {
  const absl::Time now = clock_->Now();
  for (const auto& shard : shards_) shard->SetClusterState(cluster, now);
}

void LivePolicy::CollectTick(absl::Duration interval, DependencyTick* out) {
  const absl::Time now = clock_->Now();
  out->name = name_;
  out->per_key = per_key_;
  out->keys.clear();
  // Demand refused from here on goes with the next tick: a refusal of a
  // key that pushed none may signal again.
  demand_signalled_.store(false, std::memory_order_relaxed);
  if (!per_key_) {
    shards_[0]->CollectSingle(interval, now, out);
    return;
  }
  // Up to kMaxKeysPerTick keys in all, taken from each shard in turn; the
  // rest wait for the next tick, oldest first.
  const size_t share = std::max<size_t>(1, kMaxKeysPerTick / shards_.size());
  for (const auto& shard : shards_) {
    std::vector<std::string> hot;
    shard->TakeHotKeys(share, &hot);
    out->keys.reserve(out->keys.size() + hot.size());
    // The lock is taken per batch of keys, so Acquire on this shard waits
    // for one batch at most, never for the whole walk.
    for (size_t i = 0; i < hot.size(); i += kKeysPerLock) {
      shard->CollectKeys(hot, i, std::min(hot.size(), i + kKeysPerLock),
                         interval, now, out);
    }
  }
}

void LivePolicy::ApplyTick(const DependencyUpdate& update) {
  const absl::Time now = clock_->Now();
  if (!per_key_) {
    shards_[0]->ApplySingle(update, now);
    return;
  }
  for (const KeyGrant& grant : update.grants) {
    ShardFor(grant.key).ApplyGrant(grant, now);
  }
}

}  // namespace sluice::core
