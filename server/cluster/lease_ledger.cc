// SPDX-License-Identifier: Apache-2.0
#include "server/cluster/lease_ledger.h"

#include <algorithm>
#include <array>
#include <limits>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/numeric/int128.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/cluster/grant_book.h"

namespace sluice::cluster {
namespace {

// Bounds on what one leaf may send (a leaf is a network peer).
constexpr size_t kMaxLeafPolicies = 4096;
constexpr size_t kMaxLeafKeys = 10000;  // per policy
constexpr size_t kMaxNameBytes = 1024;  // replica ids, policies, keys, causes
constexpr size_t kMaxLeafForwarded = 10000;
// Bounds on what the ledger keeps.
constexpr size_t kMaxPolicies = 10000;
constexpr size_t kMaxPools = 1000000;  // (policy, key) pairs
constexpr size_t kMaxLeafInbox = 10000;
constexpr size_t kMaxUpstreamForwards = 100000;
// How long after a unit is free the party it goes to is asked to tick: a
// leaf's word on when its grant ends reaches the ledger a one-way trip late.
constexpr absl::Duration kHandOver = absl::Milliseconds(20);
// How long before its own grants end a central cut off from its store stops
// serving leaves (FAILED_PRECONDITION), so that they go to their local state
// while their grants still hold: a leaf's round trip and its tick's slack on
// a loaded machine (250 ms was seen to fall short in pods on two busy
// cores). Going local early costs nothing: a local share is within the
// limit by construction. At most a quarter of the stale period.
constexpr absl::Duration kLeafHandoff = absl::Milliseconds(500);

// Leaves tick a moment after the central's upstream round returns, each at
// its own offset within the interval / kAlignSpread after it (AlignedTick),
// so that a thousand leaves do not arrive in the same millisecond.
constexpr int kAlignSpread = 4;

// Earlier lives of a leaf remembered.
constexpr size_t kMaxPastLives = 8;
// Leaf ids listed in a reply's replicas at most.
constexpr size_t kMaxListedLeaves = 1000;
// Tree weights remembered over a stale period at most (StaticWeight).
constexpr size_t kMaxWeights = 1024;

// A random membership epoch for this ledger's life: with the membership
// version it makes a pair that no other life of a central answers.
std::string NewMembersEpoch() {
  std::random_device rd;
  return absl::StrCat(absl::Hex(rd(), absl::kZeroPad8),
                      absl::Hex(rd(), absl::kZeroPad8));
}

// A random breakers epoch for this ledger's life, never 0 (a store that
// answers 0 keeps no breakers version; see TickReply::breakers_epoch).
uint64_t NewBreakersEpoch() {
  std::random_device rd;
  uint64_t epoch = 0;
  while (epoch == 0) {
    epoch = (static_cast<uint64_t>(rd()) << 32) | rd();
  }
  return epoch;
}

constexpr int kR = core::kClusterResources;

// FNV-1a of a leaf id: the same on every central and in every process life,
// so a leaf keeps its place in the spread when it moves or a central
// restarts.
uint64_t StableHash(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

absl::Time Later(absl::Time a, absl::Time b) { return a < b ? b : a; }

// One party's (the central's or a leaf's) record in one pool.
struct Holding {
  // The grant last issued and when it ends (the ledger's clock).
  core::Units grant{};
  absl::Time grant_until = absl::InfinitePast();
  // What the party said it applies when it asked (its previous grant, kept
  // in case this reply is lost), until it said it ends. A party's ticks
  // are serialized (each starts after the previous one returned), so this
  // replaces the grant issued before: either the party applied that one
  // and says so, or it never will.
  core::Units hold{};
  absl::Time hold_until = absl::InfinitePast();
  // The hold is not a grant of this ledger: a lease of another central, or
  // of this central's earlier process life, that the party still applies
  // (it said so before this ledger ever granted it anything, and has said
  // the same units since). Upstream counts it under the entry of the life
  // that issued it, until that grant ends; it is counted here (the ledger
  // never leases it again) but not pushed upstream as this life's.
  bool hold_foreign = false;
  // Grants of the party's earlier lives (another incarnation under the
  // same id), which may still be applied: the most of them until the
  // latest of their ends.
  core::Units ghost{};
  absl::Time ghost_until = absl::InfinitePast();
  // per_key: the static share the party was told it may use (counted
  // while it pushes the key).
  core::Units base{};
  // What this holding adds to its pool's held_sum.
  core::Units counted{};
  // What the party pushed last, and when; how long its usage may outlive
  // its grants (KeyTick::usage_left).
  core::Units usage{};
  std::array<absl::Duration, kR> usage_left{};
  std::array<double, kR> demand{};
  uint64_t admitted_total = 0;
  absl::Time pushed = absl::InfinitePast();
  // The party's standing in the split of sub-unit shares, and its whole
  // share at the last split.
  std::array<SplitCredit, kR> credit{};
  core::Units whole{};
  // The party's tick interval as seen: the gap between its pushes, which
  // an early tick (a nudge, tick_again_in) shortens by an eighth at most.
  // Zero until its second push.
  absl::Duration interval = absl::ZeroDuration();
};

// What Redis granted this central for one (policy, key), and who holds what
// of it.
struct Pool {
  bool per_key = false;
  core::Units limit{};
  // The upstream grant in force: units until `until` (the central's clock).
  // `granted` false: a per_key key Redis sent back to its static share.
  bool have = false;
  bool granted = true;
  core::Units units{};
  absl::Time until = absl::InfinitePast();
  // The limits upstream split `units` under (what the central pushed; a
  // policy change may reach a party before the pool is split again).
  core::Units units_limit{};
  // per_key: the static shares upstream keeps for this central's leaves
  // outside the grant (it counts them among the processes without an
  // entry), which the pool adds to `units`: `each` per leaf, and `statics`
  // for all the leaves it counts (see Impl::ReservedLeaves).
  core::Units each{};
  core::Units statics{};
  std::map<std::string, Holding> parties;
  // Running totals, so that a leaf's tick does not scan every other party:
  // the sum of what every holding counted when it last changed (holdings
  // only shrink with time, so the sum is never below the truth; it is
  // recounted exactly every refresh), and the fair split as last computed
  // (a party's share by id, and the units split).
  core::Units held_sum{};
  absl::flat_hash_map<std::string, core::Units> fair;
  core::Units fair_total{};
  core::Units split_units{};
  core::Units split_statics{};
  absl::Time split_at = absl::InfinitePast();
  // The slot of the last split (see CreditSplit, Impl::SlotOf).
  int64_t slot = std::numeric_limits<int64_t>::min();
};

struct LeafLease {
  uint64_t generation = 0;
  uint32_t wanted = 0;
  uint32_t count = 0;
  absl::Time until = absl::InfinitePast();
};

struct PendingBreaker {
  core::BreakerRecord record;  // generation and state to store; base below
  uint64_t base = 0;
  std::string leaf;
  bool sent = false;
};

// A leaf's outcome totals as it last pushed them, and what they added to
// PolicyState::shared while this entry lived.
struct LeafOutcomes {
  core::OutcomeTotals totals;
  core::OutcomeTotals added;
};

struct PolicyState {
  bool per_key = false;
  std::string epoch;
  absl::flat_hash_map<std::string, Pool> pools;
  // Breakers: the ledger's record (store clock) and a leaf's transition
  // waiting to go upstream.
  std::optional<core::BreakerRecord> record;
  std::optional<PendingBreaker> pending;
  // The breakers version of the record's last change (0: no record yet).
  uint64_t record_version = 0;
  std::vector<ReplicaOutcomes> upstream_outcomes;  // other centrals
  core::OutcomeTotals central_totals;
  bool central_has_totals = false;
  std::map<std::string, LeafOutcomes> leaf_totals;
  core::OutcomeTotals leaf_sum;  // monotonic sum of the leaves' deltas
  // What the central and its known leaves added since (Growth): a leaf is
  // answered `shared` minus its own `added`, the central `shared` minus
  // `central_added`. Both only grow.
  core::OutcomeTotals shared;
  core::OutcomeTotals central_added;
  // Probe leases Redis granted this central for `lease_generation`.
  uint64_t lease_generation = 0;
  uint32_t leases_held = 0;
  uint32_t central_leases = 0;
  std::map<std::string, LeafLease> leaf_leases;
  // Warm state as the central last saw it.
  std::vector<ReplicaWarm> warm;
};

struct LeafRecord {
  uint64_t incarnation = 0;
  // Earlier incarnations under this id (their late requests are refused).
  std::vector<uint64_t> past;
  uint64_t sequence = 0;
  absl::Time seen = absl::InfinitePast();
  std::deque<core::ForwardedReport> inbox;
};

// Longest a party may say its usage outlives its grant (a leaf is a peer).
constexpr absl::Duration kMaxUsageLeft = absl::Minutes(10);

// When what was admitted under an authorization of resource r (a grant, or
// what the party said it applies) that ends at `end` stops counting: at
// the end, once the party has reported its usage since; otherwise as long
// after it as the party said its usage may outlive it (a sliding window's
// count lives for the window, a call in flight until its permit expires).
absl::Time UsedUntil(const Holding& h, int r, absl::Time end) {
  if (end == absl::InfinitePast() || h.pushed >= end) return end;
  return end + h.usage_left[r];
}

// Units of resource r a holding keeps from others at `now`: its grant and
// what it said it applies, with what was admitted under them (UsedUntil);
// its usage while it pushes, and at least `floor` then (a per_key party's
// static share); its earlier lives on top. Without `foreign`, a hold this
// ledger never issued is left out (what is this ledger's own).
int64_t Held(const Holding& h, int r, absl::Time now, absl::Duration stale,
             int64_t floor = 0, bool foreign = true) {
  int64_t held = 0;
  if (now < UsedUntil(h, r, h.grant_until)) held = std::max(held, h.grant[r]);
  if (now < UsedUntil(h, r, h.hold_until) && (foreign || !h.hold_foreign)) {
    held = std::max(held, h.hold[r]);
  }
  if (now <= h.pushed + stale) held = std::max({held, h.usage[r], floor});
  // An earlier life is another process: on top.
  if (now < h.ghost_until) held += h.ghost[r];
  return held;
}

absl::Time HeldUntil(const Holding& h, absl::Duration stale) {
  absl::Time until = Later(h.ghost_until, h.pushed + stale);
  for (int r = 0; r < kR; ++r) {
    until = Later(until, Later(UsedUntil(h, r, h.grant_until),
                               UsedUntil(h, r, h.hold_until)));
  }
  return until;
}

// What a holding keeps from others, a per_key party's static share
// included.
core::Units Counted(const Holding& h, bool per_key, absl::Time now,
                    absl::Duration stale) {
  core::Units c{};
  for (int r = 0; r < kR; ++r) {
    c[r] = Held(h, r, now, stale, per_key ? h.base[r] : 0);
  }
  return c;
}

core::OutcomeTotals Plus(const core::OutcomeTotals& a,
                         const core::OutcomeTotals& b) {
  core::OutcomeTotals s;
  s.calls = a.calls + b.calls;
  s.failures = a.failures + b.failures;
  s.slow = a.slow + b.slow;
  return s;
}

// What cumulative totals added since `before`, as a replica's SyncLoop
// counts it: nothing the first time (history is not news) or after a drop
// in calls (a restart); a field that dropped adds nothing.
core::OutcomeTotals Growth(const core::OutcomeTotals& now,
                           const core::OutcomeTotals* before) {
  core::OutcomeTotals d;
  if (before == nullptr || now.calls < before->calls) return d;
  d.calls = now.calls - before->calls;
  d.failures = now.failures >= before->failures ? now.failures - before->failures
                                                : 0;
  d.slow = now.slow >= before->slow ? now.slow - before->slow : 0;
  return d;
}

core::OutcomeTotals Minus(const core::OutcomeTotals& a,
                          const core::OutcomeTotals& b) {
  core::OutcomeTotals s;
  s.calls = a.calls - b.calls;
  s.failures = a.failures - b.failures;
  s.slow = a.slow - b.slow;
  return s;
}

absl::Status CheckName(const std::string& what, const std::string& s) {
  if (s.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "lease request: ", what, " is ", s.size(), " bytes, at most ",
        kMaxNameBytes));
  }
  return absl::OkStatus();
}

absl::Status CheckLeafRequest(const TickRequest& request) {
  if (request.replica_id.empty()) {
    return absl::InvalidArgumentError("lease request: replica_id is empty");
  }
  absl::Status s = CheckName("replica_id", request.replica_id);
  if (!s.ok()) return s;
  if (request.policies.size() > kMaxLeafPolicies) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease request: ", request.policies.size(),
                     " policies, at most ", kMaxLeafPolicies));
  }
  if (request.forwarded.size() > kMaxLeafForwarded) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease request: ", request.forwarded.size(),
                     " forwarded reports, at most ", kMaxLeafForwarded));
  }
  for (const PolicyPush& push : request.policies) {
    if (!(s = CheckName("policy", push.policy)).ok()) return s;
    if (!(s = CheckName("breaker cause", push.breaker.cause)).ok()) return s;
    if (push.keys.size() > kMaxLeafKeys) {
      return absl::InvalidArgumentError(absl::StrCat(
          "lease request: policy \"", push.policy, "\" pushes ",
          push.keys.size(), " keys, at most ", kMaxLeafKeys));
    }
    for (const core::KeyTick& key : push.keys) {
      if (!(s = CheckName("key", key.key)).ok()) return s;
      for (int r = 0; r < kR; ++r) {
        if (key.limit[r] < 0 || key.usage[r] < 0 || key.applied[r] < 0 ||
            !(key.demand[r] >= 0) || key.demand[r] > 1e18) {
          return absl::InvalidArgumentError(absl::StrCat(
              "lease request: policy \"", push.policy,
              "\": a key's limit, demand, usage and applied must be "
              "finite and not negative"));
        }
      }
    }
  }
  for (const core::ForwardedReport& f : request.forwarded) {
    if (!(s = CheckName("forwarded issuer", f.issuer)).ok()) return s;
    if (!(s = CheckName("forwarded dependency", f.dependency)).ok()) return s;
    if (!(s = CheckName("forwarded key", f.key)).ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

class LeaseLedger::Impl {
 public:
  Impl(Store* upstream, core::Clock* clock, Options options)
      : upstream_(upstream), clock_(clock), options_(std::move(options)) {}

  absl::StatusOr<TickReply> Tick(const TickRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<TickReply> ServeLeaf(const TickRequest& request)
      ABSL_LOCKS_EXCLUDED(mu_);
  LedgerStats stats() const ABSL_LOCKS_EXCLUDED(mu_);

  Store* const upstream_;
  core::Clock* const clock_;
  const Options options_;

 private:
  // What one upstream round carries besides the central's own request.
  struct Round {
    absl::Time start;
    TickRequest up;
    size_t own_policies = 0;
    std::vector<size_t> own_keys;  // per own policy
    // The leaves' forwarded reports sent with this round.
    std::vector<core::ForwardedReport> leaf_forwards;
    bool leaving = false;
  };

  bool UpstreamGood(absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !stopping_ && last_good_ != absl::InfinitePast() &&
           now < last_good_ + options_.stale_after;
  }
  // When leaves start being refused for want of a store: a handoff before
  // the central's own grants end (a stale period after its last good
  // round), so that a leaf told so goes local before its grants end.
  absl::Time LeavesRefusedFrom() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Duration handoff =
        std::min(kLeafHandoff, options_.stale_after / 4);
    return last_good_ + options_.stale_after - handoff;
  }
  // When a leaf should tick next to hear what the central's next upstream
  // round brings: a moment after that round has returned, kMinTickGap to
  // an interval from `now`. InfiniteFuture when the ledger cannot tell (no
  // good round yet, or the last one failed and the central retries at its
  // own pace).
  absl::Time AlignedTick(const std::string& leaf, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint32_t LiveLeaves(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ForgetLeaf(const std::string& id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // How many sluiced processes share static shares across the tree.
  uint32_t TreeWeight(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The smallest tree weight of the last stale period: a process applies
  // the static share of the count it last heard (SyncLoop updates it at its
  // next tick), so what the subtree's static shares may add up to follows
  // the smallest count any of them may still use.
  uint32_t StaticWeight(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // per_key: the leaves whose static shares upstream keeps outside this
  // central's grant, and the most processes upstream may count when it
  // does (see SentRound).
  int64_t ReservedLeaves(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint32_t ReservedLive() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The processes of the subtree that use a per_key key's static share
  // without asking (the central and leaves that do not push it), and what
  // the subtree may apply of it at `now`, static shares included.
  int64_t ColdParties(const Pool& pool, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  core::Units SubtreeInForce(const Pool& pool, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<std::string> Replicas(absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The membership part of a reply: the list only when it differs from
  // the one the request saw.
  void AnswerMembers(const TickRequest& request, absl::Time now,
                     TickReply* reply) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  PolicyState* FindOrAddPolicy(const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Pool* FindOrAddPool(PolicyState* policy, const PolicyPush& push,
                      const core::KeyTick& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a party's push of one key.
  void Record(Pool* pool, const std::string& party, const core::KeyTick& key,
              absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The party's grant from the pool, valid until `end` (at most), issued
  // and recorded at `now`. With `again`, lowers *again to when the party
  // should tick next to get units owed to it or to free units it gave
  // back (TickReply::tick_again_in). `told`: the tick the reply asks of
  // the party besides (AlignedTick); InfiniteFuture when none.
  StoreGrant Issue(Pool* pool, const std::string& party, absl::Time now,
                   absl::Time end, const core::KeyTick& key,
                   absl::Time* again = nullptr,
                   absl::Time told = absl::InfiniteFuture())
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Slots of Options::interval x 2 on the ledger's clock: units above
  // whole shares change hands at their boundaries.
  absl::Duration SlotLength() const { return 2 * options_.interval; }
  int64_t SlotNanos() const {
    return std::max<int64_t>(1, absl::ToInt64Nanoseconds(SlotLength()));
  }
  int64_t SlotOf(absl::Time t) const {
    return absl::ToUnixNanos(t) / SlotNanos();
  }
  absl::Time SlotEnd(int64_t slot) const {
    return absl::FromUnixNanos((slot + 1) * SlotNanos());
  }
  // When units held above their fair split by parties other than `party`
  // are expected to be free: the earliest such party's confirming tick
  // (see Issue), or the end of a silent party's holding. InfiniteFuture
  // when nobody holds more than its split.
  absl::Time ExpectedRelease(const Pool& pool, const std::string& party,
                             absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Brings the pool's held_sum up to date with one changed holding.
  void Recount(Pool* pool, Holding* h, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Recounts every holding and splits the pool again.
  void Resplit(Pool* pool, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A party's new life: what its old one held becomes a ghost.
  void Bury(Holding* h, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops expired holdings; true when the pool can go.
  bool Prune(Pool* pool, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Replaces a policy's breaker record. A change that leaves must hear of
  // (`news`) is a new breakers version.
  void SetRecord(const std::string& name, PolicyState* policy,
                 core::BreakerRecord record, bool news)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ServeLeaf's parts.
  void ServeBreaker(const std::string& leaf, const PolicyPush& push,
                    PolicyState* policy, absl::Time now, PolicyPull* pull)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RouteForwards(const TickRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void LeafConfig(const TickRequest& request, TickReply* reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The breaker records of policies the request left out that changed
  // since the version it saw (TickReply::breakers).
  void AnswerBreakers(const TickRequest& request, TickReply* reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Tick's parts.
  Round BuildRound(const TickRequest& request, absl::Time start)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds the leaves' part of one policy to the push upstream (`own`: the
  // central's own push of it, or null for a policy only leaves push).
  void AddSubtree(const PolicyPush* own, PolicyState* policy,
                  absl::Time start, PolicyPush* push)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<TickReply> TakeReply(const TickRequest& request,
                                      Round* round, TickReply reply)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TakeBreaker(const PolicyPush& push, PolicyState* policy,
                   PolicyPull* pull) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  // The last upstream tick that succeeded (its start, the central's clock),
  // and the store clock's offset from the central's then.
  absl::Time last_good_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Duration offset_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  // The latest upstream round begun (its start; it may be under way), how
  // long the last good one took, and whether the last one that returned
  // failed: when the central's ticks bring news (AlignedTick).
  absl::Time round_start_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Duration round_took_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  bool round_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::string> upstream_replicas_ ABSL_GUARDED_BY(mu_);
  uint32_t upstream_weight_ ABSL_GUARDED_BY(mu_) = 0;
  // TreeWeight as it changed (StaticWeight), oldest first, bounded.
  std::deque<std::pair<absl::Time, uint32_t>> weights_ ABSL_GUARDED_BY(mu_);
  // The weight of the last push upstream answered.
  uint32_t sent_weight_ ABSL_GUARDED_BY(mu_) = 1;
  // The pushes upstream answered within the last stale period: the weight
  // (1 + leaves) and the live count sent. Every other replica hears a
  // leaf in the store's live weight at its next tick and keeps counting
  // it a stale period, so a leaf every push of the period counted is one
  // that every replica's tick counts among the processes on their static
  // share (tick.lua's `cold`).
  struct SentRound {
    absl::Time start;
    uint32_t weight = 1;
    uint32_t live = 1;
  };
  std::deque<SentRound> sent_ ABSL_GUARDED_BY(mu_);
  std::optional<ConfigSnapshot> config_ ABSL_GUARDED_BY(mu_);
  std::string config_epoch_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, PolicyState> policies_ ABSL_GUARDED_BY(mu_);
  size_t pools_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, LeafRecord> leaves_ ABSL_GUARDED_BY(mu_);
  // Reports for the central itself (delivered with its next reply), and
  // for processes outside this subtree (sent with its next push).
  std::vector<core::ForwardedReport> to_central_ ABSL_GUARDED_BY(mu_);
  std::vector<core::ForwardedReport> to_upstream_ ABSL_GUARDED_BY(mu_);
  // A leaf's tick asked for an early central tick.
  bool nudge_wanted_ ABSL_GUARDED_BY(mu_) = false;
  // The probe leases the central itself wished for at its last tick, by
  // policy (the push upstream adds its leaves' wishes).
  absl::flat_hash_map<std::string, uint32_t> central_wish_ ABSL_GUARDED_BY(mu_);
  LedgerStats stats_ ABSL_GUARDED_BY(mu_);
  absl::Time next_purge_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Changes with the membership (upstream replicas, leaves); the replica
  // list answered is rebuilt when it does.
  uint64_t membership_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t replicas_version_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> replicas_ ABSL_GUARDED_BY(mu_);
  // This life's membership epoch (answered with membership_), and the
  // upstream store's membership that upstream_replicas_ lists.
  const std::string members_epoch_ = NewMembersEpoch();
  // Names of the aggregated outcome entries (not replicas: no store uses
  // them): what a leaf sees of the central and its other leaves, and what
  // the central's own SyncLoop sees of all its leaves. Not the central's
  // own id, which names its totals in the store (a leaf that moves to
  // another central sees those there, and must not take them for the
  // same series).
  const std::string subtree_id_ =
      absl::StrCat(options_.replica_id, "/subtree");
  const std::string leaves_id_ = absl::StrCat(options_.replica_id, "/leaves");
  std::string upstream_members_epoch_ ABSL_GUARDED_BY(mu_);
  uint64_t upstream_members_seen_ ABSL_GUARDED_BY(mu_) = 0;
  // Breaker records as leaves hear of them: this life's epoch, a version
  // that grows with every change of a policy's record, and the policy of
  // each change by version (one entry per policy that has a record, its
  // last change: at most kMaxPolicies), so that a leaf a few changes behind
  // is answered without a scan of every policy.
  const uint64_t breakers_epoch_ = NewBreakersEpoch();
  uint64_t breakers_version_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, std::string> breaker_changes_ ABSL_GUARDED_BY(mu_);
};

absl::Time LeaseLedger::Impl::AlignedTick(const std::string& leaf,
                                          absl::Time now) const {
  const absl::Duration interval = options_.interval;
  if (last_good_ == absl::InfinitePast() || interval <= absl::ZeroDuration()) {
    return absl::InfiniteFuture();
  }
  if (round_failed_) {
    // The central is riding out a store failure on its grants. Ask the
    // leaf back when ServeLeaf starts refusing it, a handoff before those
    // grants end (when that is sooner than an interval): the leaf then
    // goes to its local state while its own grants still hold, instead of
    // refusing calls on ended grants until its next tick.
    return std::min(std::max(LeavesRefusedFrom(), now + kMinTickGap),
                    now + interval);
  }
  // The central's SyncLoop starts a tick an interval after the previous
  // one returned, and a round takes about as long as the last good one:
  // rounds return a period apart, the latest (perhaps still under way) at
  // round_start_ + round_took_. The leaf has heard every round returned by
  // now; it aims at the first one after, at its offset.
  const absl::Duration period = interval + round_took_;
  absl::Time news = round_start_ + round_took_;
  if (news <= now) {
    // At most a few periods: the latest round is within the stale period
    // (UpstreamGood).
    absl::Duration rest;
    news += (absl::IDivDuration(now - news, period, &rest) + 1) * period;
  }
  const int64_t spread = absl::ToInt64Nanoseconds(interval / kAlignSpread);
  const absl::Duration offset = absl::Nanoseconds(
      spread > 0 ? static_cast<int64_t>(StableHash(leaf) %
                                        static_cast<uint64_t>(spread))
                 : 0);
  // Not sooner than the leaf may tick again (then still after that round),
  // and not later than an interval: a leaf that ticks between the last
  // round's return and its offset ticks an interval later, after the next
  // round unless it ticked within a round trip of the last one. A leaf
  // arrives its own round trip after the time it is given besides.
  return std::min(std::max(news + offset, now + kMinTickGap), now + interval);
}

uint32_t LeaseLedger::Impl::LiveLeaves(absl::Time now) {
  // Silent leaves are dropped at most every tenth of a stale period, so a
  // leaf tick does not scan every leaf.
  if (now >= next_purge_) {
    next_purge_ = now + options_.stale_after / 10;
    for (auto it = leaves_.begin(); it != leaves_.end();) {
      if (it->second.seen + options_.stale_after < now) {
        // Gone. Its grants stay in the pools until they end.
        ForgetLeaf(it->first);
        it = leaves_.erase(it);
      } else {
        ++it;
      }
    }
  }
  return static_cast<uint32_t>(leaves_.size());
}

void LeaseLedger::Impl::ForgetLeaf(const std::string& id) {
  for (auto& [name, policy] : policies_) {
    policy.leaf_leases.erase(id);
    policy.leaf_totals.erase(id);
  }
  ++membership_;
}

uint32_t LeaseLedger::Impl::TreeWeight(absl::Time now) {
  const uint32_t mine = 1 + LiveLeaves(now);
  if (upstream_weight_ > 0) {
    // Upstream counted this central with the weight of its last push;
    // leaves that came since count too.
    const uint32_t others =
        upstream_weight_ > sent_weight_ ? upstream_weight_ - sent_weight_ : 0;
    return others + std::max(mine, sent_weight_);
  }
  // The upstream store does not count weights: assume every central serves
  // as many leaves as this one.
  const uint32_t centrals =
      std::max<uint32_t>(1, static_cast<uint32_t>(upstream_replicas_.size()));
  return centrals * mine;
}

int64_t LeaseLedger::Impl::ReservedLeaves(absl::Time now) {
  // Only with a push at least a stale period old: the leaves counted since
  // are not yet in every replica's live count.
  if (sent_.empty() || sent_.front().start > now - options_.stale_after) {
    return 0;
  }
  uint32_t weight = sent_.front().weight;
  for (const SentRound& s : sent_) weight = std::min(weight, s.weight);
  return std::min<int64_t>(weight > 0 ? weight - 1 : 0, LiveLeaves(now));
}

uint32_t LeaseLedger::Impl::ReservedLive() const {
  uint32_t live = 1;
  for (const SentRound& s : sent_) live = std::max(live, s.live);
  return live;
}

uint32_t LeaseLedger::Impl::StaticWeight(absl::Time now) {
  const uint32_t weight = TreeWeight(now);
  if (weights_.empty() || weights_.back().second != weight) {
    weights_.emplace_back(now, weight);
  }
  // An entry holds until the next one: the first is dropped once the
  // second is older than the stale period.
  while (weights_.size() > 1 &&
         (weights_[1].first <= now - options_.stale_after ||
          weights_.size() > kMaxWeights)) {
    weights_.pop_front();
  }
  uint32_t least = weight;
  for (const auto& [at, w] : weights_) least = std::min(least, w);
  return least;
}

int64_t LeaseLedger::Impl::ColdParties(const Pool& pool, absl::Time now) {
  int64_t pushing = 0;
  for (const auto& [id, h] : pool.parties) {
    if (now <= h.pushed + options_.stale_after) ++pushing;
  }
  return std::max<int64_t>(0, 1 + LiveLeaves(now) - pushing);
}

core::Units LeaseLedger::Impl::SubtreeInForce(const Pool& pool,
                                              absl::Time now) {
  const int64_t tree = StaticWeight(now);
  const int64_t cold = ColdParties(pool, now);
  core::Units total{};
  for (int r = 0; r < kR; ++r) {
    // A foreign hold is upstream's already (see AddSubtree).
    for (const auto& [id, h] : pool.parties) {
      total[r] += Held(h, r, now, options_.stale_after, h.base[r],
                       /*foreign=*/false);
    }
    total[r] += cold * (pool.limit[r] / (tree + 1));
  }
  return total;
}

std::vector<std::string> LeaseLedger::Impl::Replicas(absl::Time now) {
  LiveLeaves(now);
  if (replicas_version_ != membership_) {
    // Leaf ids are listed (so that reports can be forwarded between leaves
    // of this central) while there are few; live_weight counts them all.
    std::vector<std::string> out = upstream_replicas_;
    out.push_back(options_.replica_id);
    if (leaves_.size() <= kMaxListedLeaves) {
      for (const auto& [id, leaf] : leaves_) out.push_back(id);
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    replicas_ = std::move(out);
    replicas_version_ = membership_;
  }
  return replicas_;
}

void LeaseLedger::Impl::AnswerMembers(const TickRequest& request,
                                      absl::Time now, TickReply* reply) {
  LiveLeaves(now);  // expired leaves change membership_ first
  reply->members_epoch = members_epoch_;
  reply->members_version = membership_;
  reply->members_unchanged = request.members_epoch_seen == members_epoch_ &&
                             request.members_seen == membership_;
  reply->replicas.clear();
  if (!reply->members_unchanged) reply->replicas = Replicas(now);
}

PolicyState* LeaseLedger::Impl::FindOrAddPolicy(const std::string& name) {
  auto it = policies_.find(name);
  if (it != policies_.end()) return &it->second;
  if (policies_.size() >= kMaxPolicies) return nullptr;
  return &policies_[name];
}

Pool* LeaseLedger::Impl::FindOrAddPool(PolicyState* policy,
                                       const PolicyPush& push,
                                       const core::KeyTick& key) {
  auto it = policy->pools.find(key.key);
  Pool* pool = nullptr;
  if (it != policy->pools.end()) {
    pool = &it->second;
  } else {
    if (pools_ >= kMaxPools) return nullptr;
    ++pools_;
    pool = &policy->pools[key.key];
  }
  pool->per_key = push.per_key;
  policy->per_key = push.per_key;
  pool->limit = key.limit;
  return pool;
}

void LeaseLedger::Impl::Record(Pool* pool, const std::string& party,
                               const core::KeyTick& key, absl::Time now) {
  Holding& h = pool->parties[party];
  h.demand = key.demand;
  h.usage = key.usage;
  for (int r = 0; r < kR; ++r) {
    h.usage_left[r] = std::clamp(key.usage_left[r], absl::ZeroDuration(),
                                 kMaxUsageLeft);
  }
  h.admitted_total = key.admitted_total;
  if (h.pushed != absl::InfinitePast() && now > h.pushed) {
    const absl::Duration gap = std::min(now - h.pushed, options_.stale_after);
    h.interval = std::max(gap, h.interval - h.interval / 8);
  }
  h.pushed = now;
  // What the party says it applies counts until it says it ends (at most
  // a stale period).
  const absl::Duration left =
      std::min(std::max(key.applied_left, absl::ZeroDuration()),
               options_.stale_after);
  // A party's ticks are serialized: what it applies now is the grant
  // issued at its last tick, or what it applied then (that reply lost).
  // Before this ledger issued it anything, it is foreign; the same units
  // as then, and not the grant issued since, still are.
  const bool issued = h.grant_until != absl::InfinitePast();
  h.hold_foreign = !issued || (h.hold_foreign && key.applied == h.hold &&
                               key.applied != h.grant);
  h.hold = key.applied;
  h.hold_until = now + left;
  if (pool->per_key) {
    const int64_t tree = StaticWeight(now);
    for (int r = 0; r < kR; ++r) h.base[r] = pool->limit[r] / (tree + 1);
  }
  Recount(pool, &h, now);
}

void LeaseLedger::Impl::Recount(Pool* pool, Holding* h, absl::Time now) {
  const core::Units c = Counted(*h, pool->per_key, now, options_.stale_after);
  for (int r = 0; r < kR; ++r) pool->held_sum[r] += c[r] - h->counted[r];
  h->counted = c;
}

void LeaseLedger::Impl::Resplit(Pool* pool, absl::Time now) {
  const absl::Duration stale = options_.stale_after;
  // Exact totals again (what ended is no longer counted).
  pool->held_sum = {};
  std::vector<std::string> names;
  std::vector<Holding*> asking;
  for (auto& [id, h] : pool->parties) {
    h.counted = Counted(h, pool->per_key, now, stale);
    for (int r = 0; r < kR; ++r) pool->held_sum[r] += h.counted[r];
    if (now > h.pushed + stale) continue;
    names.push_back(id);
    asking.push_back(&h);
  }
  // Parties still asking (pushed within the stale period) share the pool
  // by demand. per_key: every process of the subtree that does not push
  // the key uses its static share without asking.
  int64_t cold = 0;
  const int64_t tree = StaticWeight(now);
  if (pool->per_key) {
    const int64_t subtree = 1 + LiveLeaves(now);
    cold = std::max<int64_t>(0, subtree - static_cast<int64_t>(names.size()));
  }
  pool->fair.clear();
  for (const std::string& id : names) pool->fair[id] = {};
  const int64_t slot = SlotOf(now);
  const bool new_slot = slot != pool->slot;
  const double seconds =
      pool->split_at == absl::InfinitePast() || now < pool->split_at
          ? 0.0
          : absl::ToDoubleSeconds(now - pool->split_at);
  std::vector<double> demand(names.size());
  std::vector<bool> holding(names.size());
  std::vector<SplitCredit> credit(names.size());
  for (int r = 0; r < kR; ++r) {
    // per_key: upstream granted the central `units` on top of the static
    // shares it keeps for the leaves (pool->statics); the subtree's own
    // static shares (of every party, pushing or not) come out of both.
    // The pool is leased out in full: a process that joins meanwhile takes
    // no static share before every lease issued without counting it has
    // ended (SyncLoop::AcceptMembership).
    const int64_t base = pool->per_key ? pool->limit[r] / (tree + 1) : 0;
    pool->fair_total[r] = pool->units[r] + pool->statics[r] - cold * base;
    if (pool->limit[r] <= 0) continue;  // not cluster-scope: nothing to split
    for (size_t j = 0; j < names.size(); ++j) {
      const Holding& h = *asking[j];
      demand[j] = h.demand[r];
      // A unit above its whole share in use: issued, or said applied.
      int64_t in_use = 0;
      if (now < h.grant_until) in_use = std::max(in_use, h.grant[r]);
      if (now < h.hold_until) in_use = std::max(in_use, h.hold[r]);
      holding[j] = in_use > h.whole[r];
      credit[j] = h.credit[r];
    }
    const std::vector<double> share =
        FairShares(pool->fair_total[r], demand);
    const std::vector<int64_t> split =
        CreditSplit(pool->fair_total[r], share, holding, seconds,
                    absl::ToDoubleSeconds(SlotLength()), new_slot, &credit);
    for (size_t j = 0; j < names.size(); ++j) {
      Holding& h = *asking[j];
      h.credit[r] = credit[j];
      h.whole[r] = static_cast<int64_t>(std::floor(share[j] + 1e-9));
      pool->fair[names[j]][r] = split[j];
    }
  }
  pool->split_units = pool->units;
  pool->split_statics = pool->statics;
  pool->split_at = now;
  pool->slot = slot;
}

StoreGrant LeaseLedger::Impl::Issue(Pool* pool, const std::string& party,
                                    absl::Time now, absl::Time end,
                                    const core::KeyTick& key, absl::Time* again,
                                    absl::Time told) {
  StoreGrant grant;
  const bool usable = pool->have && pool->granted && end > now;
  if (!usable) {
    // Nothing to lease from: a per_key key falls back to its static share,
    // any other key has nothing until the pool is filled.
    grant.granted = !pool->per_key;
    grant.valid_for = absl::ZeroDuration();
    return grant;
  }
  // The split is computed again when the pool changed, a party joined, or
  // a sixth of the stale period passed (demands move; what ended is let
  // go): a leaf's tick is O(its keys) otherwise.
  const absl::Duration refresh = options_.stale_after / 6;
  auto fair = pool->fair.find(party);
  if (fair == pool->fair.end() || pool->split_units != pool->units ||
      pool->split_statics != pool->statics ||
      now >= pool->split_at + refresh || now < pool->split_at ||
      SlotOf(now) != pool->slot) {
    Resplit(pool, now);
    fair = pool->fair.find(party);
  }
  Holding& h = pool->parties[party];
  // Units above whole shares change hands at the slot's end: a party that
  // has one now and not in the next slot holds it until then, and one that
  // gains a unit then is asked to tick just after it.
  const absl::Time slot_end = SlotEnd(pool->slot);
  bool leaving = false, joining = false, has_whole = false;
  for (int r = 0; r < kR; ++r) {
    if (pool->limit[r] <= 0) continue;
    const SplitCredit& c = h.credit[r];
    if (c.member && !c.next) leaving = true;
    if (!c.member && c.next) joining = true;
    if (h.whole[r] > 0) has_whole = true;
  }
  // But a grant has one end, and a party's whole units must not end with
  // the unit it loses: they would be gone until its next tick (an
  // interval, for the central), and its bucket would start again from
  // empty. Such a party gives the unit up at its last tick before the
  // slot's end instead. A party that can be asked to tick (a leaf, through
  // `again`) is asked for that tick a margin before the end (kMinTickGap
  // early is late enough); one that cannot (the central's own share) ticks
  // an interval or so apart, so its last tick before the end is the one
  // whose next would come within a margin of it.
  bool give_up = false;
  if (leaving && has_whole) {
    const absl::Time last_tick = slot_end - options_.margin;
    const bool can_be_asked = again != nullptr;
    give_up = can_be_asked
                  ? now >= last_tick - kMinTickGap
                  : now + std::max(h.interval, options_.interval) >= last_tick;
  }
  bool wants_more = false;
  bool above_whole = false;
  bool waiting = false;    // others hold units of this party's split
  bool giving_back = false;  // it applies more than it is granted now
  for (int r = 0; r < kR; ++r) {
    if (pool->limit[r] <= 0) continue;
    // What every other party holds (the running total, never below the
    // truth), this party's earlier lives included.
    int64_t others = pool->held_sum[r] - h.counted[r];
    if (now < h.ghost_until) others += h.ghost[r];
    int64_t share = fair == pool->fair.end() ? 0 : fair->second[r];
    if (give_up && h.credit[r].member && !h.credit[r].next) {
      share = std::min(share, h.whole[r]);
    }
    grant.units[r] =
        std::max<int64_t>(0, std::min(share, pool->fair_total[r] - others));
    if (grant.units[r] < share) waiting = true;
    // A party that pushed a lower limit than the pool was split under (the
    // policy change reached it first) applies the grant as one made under
    // its own limit (SyncLoop sets KeyGrant::limit to the limit pushed), so
    // it gets the units scaled as its engine scales a grant split under a
    // higher limit (GateSet::GrantUnits), not the pool's units.
    const int64_t from = pool->units_limit[r];
    if (from > key.limit[r] && grant.units[r] > 0) {
      grant.units[r] = static_cast<int64_t>(
          absl::int128(grant.units[r]) * std::max<int64_t>(0, key.limit[r]) /
          from);
    }
    if (now < h.hold_until && grant.units[r] < h.hold[r]) giving_back = true;
    if (grant.units[r] > h.whole[r]) above_whole = true;
    if (pool->per_key &&
        (key.demand[r] * 1.05 > static_cast<double>(h.base[r]) ||
         key.usage[r] > h.base[r])) {
      wants_more = true;
    }
  }
  if (pool->per_key && !wants_more) {
    // tick.lua's rule one level down: a per_key key this party does not
    // need more than its static share of goes back to it.
    grant.granted = false;
    grant.units = {};
  }
  // A grant above the party's whole share lasts until just after its next
  // tick, so that once the party is told to give the unit back, it is free
  // for another a moment later (not a stale period later). Its next tick
  // is the one the reply asks for, or else one interval on; never sooner
  // than its ticks have come so far. "Just after" is a fifth of the gap,
  // and at least the margin: the renewal must reach the party (a round
  // trip, two on a loaded node) before the grant it renews ends, or the
  // party refuses on an ended grant and its bucket starts again from
  // empty. Short gaps (a new party's first ticks, a hand-over) need the
  // margin most.
  if (above_whole && h.interval > absl::ZeroDuration()) {
    absl::Duration gap = h.interval;
    gap = std::max(gap, told != absl::InfiniteFuture() ? told - now
                                                      : options_.interval);
    end = std::min(end, now + gap + std::max(gap / 5, options_.margin));
  }
  if (leaving && !give_up) end = std::min(end, slot_end);
  h.grant = grant.units;
  h.grant_until = end;
  Recount(pool, &h, now);
  grant.valid_for = std::max(end - now, absl::ZeroDuration());
  if (again != nullptr && grant.granted) {
    // Units move between parties at the pace of their ticks: the one that
    // gives units back is asked to confirm at once (what it applied stays
    // counted until it does), and the one waiting for them to tick again
    // when they are expected to be free, instead of a whole interval later.
    if (waiting) *again = std::min(*again, ExpectedRelease(*pool, party, now));
    if (giving_back) *again = now;
    if (joining) *again = std::min(*again, slot_end + kHandOver);
    if (leaving && has_whole && !give_up) {
      *again = std::min(*again, slot_end - options_.margin);
    }
  }
  return grant;
}

absl::Time LeaseLedger::Impl::ExpectedRelease(const Pool& pool,
                                              const std::string& party,
                                              absl::Time now) const {
  const absl::Duration stale = options_.stale_after;
  absl::Time first = absl::InfiniteFuture();
  for (const auto& [id, j] : pool.parties) {
    if (id == party) continue;
    auto fair = pool.fair.find(id);
    if (fair == pool.fair.end() || now > j.pushed + stale) {
      // Not asking any more: what it holds ends by itself.
      const absl::Time until = HeldUntil(j, stale);
      if (until > now) first = std::min(first, until);
      continue;
    }
    bool over = false, told = false;
    absl::Time ends = absl::InfinitePast();
    for (int r = 0; r < kR; ++r) {
      if (j.counted[r] <= fair->second[r]) continue;
      over = true;
      const absl::Time grant_end = UsedUntil(j, r, j.grant_until);
      const absl::Time hold_end = UsedUntil(j, r, j.hold_until);
      if (now < grant_end && j.grant[r] > fair->second[r]) {
        ends = Later(ends, grant_end);
      }
      if (now < hold_end && j.hold[r] > fair->second[r]) {
        ends = Later(ends, hold_end);
      }
      if (j.grant[r] < j.counted[r]) told = true;
    }
    if (!over) continue;
    // What it holds above its split ends by itself, or sooner when it
    // confirms a smaller grant: one already granted less does so right
    // away (Issue asks it to), one not told yet at its next tick, and the
    // confirming tick comes at least kMinTickGap after.
    const absl::Duration interval =
        j.interval > absl::ZeroDuration() ? j.interval : options_.interval;
    absl::Time at = (told ? j.pushed : j.pushed + interval) + 2 * kMinTickGap;
    if (ends != absl::InfinitePast()) at = std::min(at, ends + kHandOver);
    first = std::min(first, std::max(at, now));
  }
  return first;
}

void LeaseLedger::Impl::Bury(Holding* h, absl::Time now) {
  if (now >= h->ghost_until) h->ghost = {};
  // Each earlier life is a process of its own: their holdings add up, with
  // what the last one admitted for as long as it may outlive it.
  const absl::Duration stale = options_.stale_after;
  absl::Time until = h->ghost_until;
  for (int r = 0; r < kR; ++r) {
    h->ghost[r] = Held(*h, r, now, stale);  // earlier ghosts included
    until = Later(until, Later(UsedUntil(*h, r, h->grant_until),
                               UsedUntil(*h, r, h->hold_until)));
    if (now <= h->pushed + stale && h->usage[r] > 0) {
      until = Later(until, h->pushed + h->usage_left[r]);
    }
  }
  h->ghost_until = until;
  h->grant = {};
  h->grant_until = absl::InfinitePast();
  h->hold = {};
  h->hold_until = absl::InfinitePast();
}

bool LeaseLedger::Impl::Prune(Pool* pool, absl::Time now) {
  for (auto it = pool->parties.begin(); it != pool->parties.end();) {
    if (HeldUntil(it->second, options_.stale_after) < now) {
      for (int r = 0; r < kR; ++r) pool->held_sum[r] -= it->second.counted[r];
      pool->fair.erase(it->first);
      it = pool->parties.erase(it);
    } else {
      ++it;
    }
  }
  return pool->parties.empty() && !(pool->have && now < pool->until);
}

void LeaseLedger::Impl::LeafConfig(const TickRequest& request,
                                   TickReply* reply) {
  reply->config_epoch = config_epoch_;
  reply->config_lost = !request.config_epoch_seen.empty() &&
                       request.config_epoch_seen != config_epoch_;
  if (config_ && config_->version != request.config_seen) {
    reply->config = *config_;
  }
}

void LeaseLedger::Impl::SetRecord(const std::string& name,
                                  PolicyState* policy,
                                  core::BreakerRecord record, bool news) {
  policy->record = std::move(record);
  if (!news) return;
  breaker_changes_.erase(policy->record_version);
  policy->record_version = ++breakers_version_;
  breaker_changes_.emplace(policy->record_version, name);
}

void LeaseLedger::Impl::AnswerBreakers(const TickRequest& request,
                                       TickReply* reply) {
  reply->breakers_epoch = breakers_epoch_;
  reply->breakers_version = breakers_version_;
  // A version of this life: the changes after it. Any other (a new leaf,
  // one that moved from another central, a restarted central, a version
  // this life never answered): every record.
  const bool this_life = request.breakers_epoch_seen == breakers_epoch_ &&
                         request.breakers_seen <= breakers_version_;
  if (this_life && request.breakers_seen == breakers_version_) return;
  auto change = this_life ? breaker_changes_.upper_bound(request.breakers_seen)
                          : breaker_changes_.begin();
  if (change == breaker_changes_.end()) return;
  // A pushed policy's record is in its pull already.
  absl::flat_hash_set<absl::string_view> pushed;
  for (const PolicyPush& push : request.policies) pushed.insert(push.policy);
  for (; change != breaker_changes_.end(); ++change) {
    if (pushed.contains(change->second)) continue;
    auto policy = policies_.find(change->second);
    if (policy == policies_.end()) continue;
    reply->breakers.push_back({change->second, *policy->second.record});
  }
}

void LeaseLedger::Impl::RouteForwards(const TickRequest& request) {
  for (const core::ForwardedReport& f : request.forwarded) {
    if (f.issuer == request.replica_id) {
      ++stats_.forwarded_dropped;
      continue;
    }
    auto leaf = leaves_.find(f.issuer);
    if (leaf != leaves_.end()) {
      if (leaf->second.inbox.size() >= kMaxLeafInbox) {
        leaf->second.inbox.pop_front();
        ++stats_.forwarded_dropped;
      }
      leaf->second.inbox.push_back(f);
      ++stats_.forwarded_delivered;
    } else if (f.issuer == options_.replica_id) {
      if (to_central_.size() >= kMaxUpstreamForwards) {
        ++stats_.forwarded_dropped;
        continue;
      }
      to_central_.push_back(f);
      ++stats_.forwarded_delivered;
    } else {
      if (to_upstream_.size() >= kMaxUpstreamForwards) {
        ++stats_.forwarded_dropped;
        continue;
      }
      to_upstream_.push_back(f);
    }
  }
}

void LeaseLedger::Impl::ServeBreaker(const std::string& leaf,
                                     const PolicyPush& push,
                                     PolicyState* policy, absl::Time now,
                                     PolicyPull* pull) {
  // Outcomes: the leaf's totals feed the monotonic sum that goes upstream
  // (a first sight or a restart counted in full there), and what the others
  // see of them, which grows as their own SyncLoop would count it.
  auto [seen, first] = policy->leaf_totals.try_emplace(leaf);
  LeafOutcomes& entry = seen->second;
  const core::OutcomeTotals growth =
      Growth(push.outcomes, first ? nullptr : &entry.totals);
  const bool fresh = first || push.outcomes.calls < entry.totals.calls;
  policy->leaf_sum = Plus(policy->leaf_sum, fresh ? push.outcomes : growth);
  policy->shared = Plus(policy->shared, growth);
  entry.added = Plus(entry.added, growth);
  entry.totals = push.outcomes;
  // Everyone else's totals: other centrals' as upstream has them, and one
  // entry (subtree_id_) for the central and all its other leaves: what
  // they added, so it only grows, and never by this leaf's own. On a first
  // sight (a new leaf, a new life, a leaf back after expiry, a restarted
  // ledger) it is left out, so that the leaf forgets what it saw under that
  // name and takes the next one as a fresh start.
  pull->outcomes = policy->upstream_outcomes;
  if (!first) {
    pull->outcomes.push_back(
        {subtree_id_, Minus(policy->shared, entry.added)});
  }

  // A transition is compare-and-set against the ledger's record.
  const core::BreakerRecord& mine = push.breaker;
  if (push.publish && mine.generation != mine.base) {
    const bool accept =
        !policy->record || policy->record->generation == mine.base;
    if (accept) {
      core::BreakerRecord stored = mine;
      const uint64_t before = policy->record ? policy->record->generation : 0;
      stored.generation = std::max(mine.generation, before + 1);
      stored.base = 0;
      stored.replica = leaf;
      PendingBreaker pending;
      pending.record = stored;
      pending.base = before;
      pending.leaf = leaf;
      policy->pending = std::move(pending);
      SetRecord(push.policy, policy, std::move(stored), /*news=*/true);
      ++stats_.breaker_accepted;
      nudge_wanted_ = true;
    } else {
      ++stats_.breaker_refused;
    }
  }
  pull->breaker = policy->record;

  // Probe leases: from what Redis granted this central for the current
  // generation, never more than it holds.
  const uint64_t generation = policy->record ? policy->record->generation : 0;
  const uint32_t wanted = std::min(push.leases_wanted, push.lease_cap);
  if (wanted == 0) {
    // Nearly every tick: no probe wanted, and whatever the leaf held it
    // gives back with this push. Only leaves that want probes are kept, so
    // the scans below cost nothing while no breaker is HALF_OPEN.
    policy->leaf_leases.erase(leaf);
    pull->leases_granted = 0;
    return;
  }
  LeafLease& lease = policy->leaf_leases[leaf];
  const uint32_t wished_before = lease.wanted;
  lease.wanted = wanted;
  lease.count = 0;
  uint32_t others = policy->central_leases;
  for (const auto& [id, l] : policy->leaf_leases) {
    if (id != leaf && l.generation == generation && now < l.until) {
      others += l.count;
    }
  }
  if (policy->lease_generation == generation &&
      policy->leases_held > others) {
    lease.count = std::min(lease.wanted, policy->leases_held - others);
  }
  lease.generation = generation;
  lease.until = now + options_.stale_after;
  // A new wish reaches Redis with the central's next tick; ask for it soon.
  if (lease.wanted > lease.count && lease.wanted > wished_before) {
    nudge_wanted_ = true;
  }
  pull->leases_granted = lease.count;
}

absl::StatusOr<TickReply> LeaseLedger::Impl::ServeLeaf(
    const TickRequest& request) {
  absl::Status valid = CheckLeafRequest(request);
  bool nudge = false;
  TickReply reply;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_->Now();
    if (!valid.ok()) {
      ++stats_.leaf_ticks_refused;
      ++stats_.refused_invalid;
      return valid;
    }
    if (request.replica_id == options_.replica_id) {
      ++stats_.leaf_ticks_refused;
      ++stats_.refused_invalid;
      return absl::InvalidArgumentError(
          "lease request: replica_id is the central replica's own");
    }
    if (!UpstreamGood(now) || now >= LeavesRefusedFrom()) {
      ++stats_.leaf_ticks_refused;
      ++stats_.refused_unavailable;
      // Stopping: UNAVAILABLE, and the leaf moves to another central. Cut off
      // from the store: FAILED_PRECONDITION, a definite answer, so the leaf
      // decides from local state at once. This central already waited out
      // its stale period; a leaf waiting out its own as well would refuse
      // calls on a grant that nobody renews.
      if (stopping_) {
        return absl::UnavailableError("central replica is stopping");
      }
      return absl::FailedPreconditionError(
          "central replica has no current grant from its store");
    }
    auto leaf = leaves_.find(request.replica_id);
    if (leaf == leaves_.end()) {
      if (request.leaving) {
        ++stats_.leaf_ticks;
        return reply;
      }
      if (LiveLeaves(now) >= options_.max_leaves) {
        ++stats_.leaf_ticks_refused;
        ++stats_.refused_too_many;
        return absl::ResourceExhaustedError(absl::StrCat(
            "central replica serves ", options_.max_leaves,
            " leaves already (max_leaves)"));
      }
      leaf = leaves_.emplace(request.replica_id, LeafRecord{}).first;
      leaf->second.incarnation = request.incarnation;
      ++membership_;
      nudge = true;
    } else if (request.incarnation == leaf->second.incarnation &&
               request.sequence <= leaf->second.sequence) {
      ++stats_.leaf_ticks_refused;
      ++stats_.refused_stale;
      return absl::AbortedError(absl::StrCat(
          "lease request from \"", request.replica_id, "\": sequence ",
          request.sequence, " is not newer than ", leaf->second.sequence));
    } else if (request.incarnation != leaf->second.incarnation) {
      std::vector<uint64_t>& past = leaf->second.past;
      if (std::find(past.begin(), past.end(), request.incarnation) !=
          past.end()) {
        // A late request of an earlier life.
        ++stats_.leaf_ticks_refused;
        ++stats_.refused_stale;
        return absl::AbortedError(absl::StrCat(
            "lease request from \"", request.replica_id,
            "\": incarnation ", request.incarnation, " has been replaced"));
      }
      // A new life under the same id: its old grants stay counted (in the
      // pools) until they end; its outcome totals start again.
      if (past.size() >= kMaxPastLives) past.erase(past.begin());
      past.push_back(leaf->second.incarnation);
      leaf->second.incarnation = request.incarnation;
      leaf->second.inbox.clear();
      for (auto& [name, policy] : policies_) {
        policy.leaf_totals.erase(request.replica_id);
        policy.leaf_leases.erase(request.replica_id);
        for (auto& [key, pool] : policy.pools) {
          auto h = pool.parties.find(request.replica_id);
          if (h == pool.parties.end()) continue;
          Bury(&h->second, now);
          Recount(&pool, &h->second, now);
        }
      }
    }
    LeafRecord& record = leaf->second;
    record.sequence = request.sequence;
    record.seen = now;
    if (request.leaving) {
      // It gives its leases and membership back; what it was granted stays
      // counted until it ends (the leaf may still apply it until it stops).
      ForgetLeaf(request.replica_id);
      leaves_.erase(leaf);
      ++stats_.leaf_ticks;
      return reply;
    }

    reply.store_now = now + offset_;
    LeafConfig(request, &reply);
    AnswerMembers(request, now, &reply);
    reply.live_weight = TreeWeight(now);
    reply.policies.reserve(request.policies.size());
    absl::Time again = absl::InfiniteFuture();
    const absl::Time aligned = AlignedTick(request.replica_id, now);
    for (const PolicyPush& push : request.policies) {
      PolicyPull pull;
      PolicyState* policy = FindOrAddPolicy(push.policy);
      if (policy == nullptr) {
        // Past the ledger's bound: nothing to lease, static shares only.
        for (size_t k = 0; k < push.keys.size(); ++k) {
          StoreGrant g;
          g.granted = !push.per_key;
          g.valid_for = absl::ZeroDuration();
          pull.grants.push_back(g);
        }
        reply.policies.push_back(std::move(pull));
        continue;
      }
      pull.epoch = policy->epoch;
      pull.lost = !push.epoch_seen.empty() && !policy->epoch.empty() &&
                  push.epoch_seen != policy->epoch;
      pull.grants.reserve(push.keys.size());
      for (const core::KeyTick& key : push.keys) {
        Pool* pool = FindOrAddPool(policy, push, key);
        if (pool == nullptr) {
          StoreGrant g;
          g.granted = !push.per_key;
          g.valid_for = absl::ZeroDuration();
          pull.grants.push_back(g);
          continue;
        }
        if (!pool->have && pool->parties.empty()) nudge = true;
        Record(pool, request.replica_id, key, now);
        // A leaf's lease ends `margin` before the central's grant does,
        // and lasts a stale period at most.
        const absl::Time end =
            std::min(now + options_.stale_after,
                     pool->until - options_.margin);
        pull.grants.push_back(
            Issue(pool, request.replica_id, now, end, key, &again, aligned));
      }
      if (push.has_breaker) {
        ServeBreaker(request.replica_id, push, policy, now, &pull);
      }
      if (push.has_warm) pull.warm = policy->warm;
      reply.policies.push_back(std::move(pull));
    }
    // The leaf's next tick hears the central's next upstream round (a
    // breaker another central stored reaches it then, not an interval
    // later), unless units owed or given back want it sooner. An aligned
    // tick less than kMinTickGap before the one `again` asks for is left
    // out: the leaf could not tick again in time for its units.
    const absl::Time next = again < aligned + kMinTickGap ? again : aligned;
    if (next != absl::InfiniteFuture()) {
      // Positive, so that the leaf sees it; it waits at least kMinGap.
      reply.tick_again_in = std::max(next - now, absl::Nanoseconds(1));
    }
    AnswerBreakers(request, &reply);
    RouteForwards(request);
    reply.forwarded_to_me.assign(record.inbox.begin(), record.inbox.end());
    record.inbox.clear();
    ++stats_.leaf_ticks;
    nudge = nudge || nudge_wanted_;
    nudge_wanted_ = false;
  }
  if (nudge && options_.nudge) options_.nudge();
  return reply;
}

void LeaseLedger::Impl::AddSubtree(const PolicyPush* own,
                                   PolicyState* policy, absl::Time start,
                                   PolicyPush* push) {
  const absl::Duration stale = options_.stale_after;
  const std::string& self = options_.replica_id;
  absl::flat_hash_set<std::string> own_keys;
  // Sums a pool's subtree into the key pushed upstream: the leaves' demand,
  // usage and books on top of the central's, and as `applied` every grant
  // in force under this central (with the pool itself while it lasts: the
  // leases issued from it while this tick is under way are within it).
  auto sum_into = [&](Pool* pool, core::KeyTick* key)
                      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    core::Units applied{};
    absl::Time latest = absl::InfinitePast();
    // per_key: the leaves' demand and usage within their static shares,
    // which upstream keeps for them outside the central's entry.
    std::array<double, kR> static_demand{};
    core::Units static_usage{};
    for (const auto& [id, h] : pool->parties) {
      // A foreign hold is upstream's already, under the entry of the life
      // that issued it: pushed as this one's too, it would be counted
      // twice and squeeze the other centrals' grants while it lasts.
      for (int r = 0; r < kR; ++r) {
        applied[r] += Held(h, r, start, stale, 0, /*foreign=*/false);
      }
      for (int r = 0; r < kR; ++r) {
        const absl::Time grant_end = UsedUntil(h, r, h.grant_until);
        const absl::Time hold_end = UsedUntil(h, r, h.hold_until);
        if (start < grant_end) latest = Later(latest, grant_end);
        if (start < hold_end && !h.hold_foreign) {
          latest = Later(latest, hold_end);
        }
      }
      if (start < h.ghost_until) latest = Later(latest, h.ghost_until);
      if (id == self || start > h.pushed + stale) continue;
      for (int r = 0; r < kR; ++r) {
        key->demand[r] += h.demand[r];
        key->usage[r] += h.usage[r];
        static_demand[r] +=
            std::min(h.demand[r], static_cast<double>(pool->each[r]));
        static_usage[r] += std::min(h.usage[r], pool->each[r]);
      }
      key->admitted_total += h.admitted_total;
    }
    if (pool->per_key) {
      // The central's entry upstream holds what the subtree applies above
      // the leaves' static shares upstream keeps apart (the pool's
      // statics): counted in the entry too, they would be counted twice.
      const core::Units total = SubtreeInForce(*pool, start);
      for (int r = 0; r < kR; ++r) {
        applied[r] = std::max<int64_t>(0, total[r] - pool->statics[r]);
        key->demand[r] -= std::min(static_demand[r],
                                   static_cast<double>(pool->statics[r]));
        key->usage[r] -= std::min(static_usage[r], pool->statics[r]);
      }
    }
    if (pool->have && pool->granted && start < pool->until) {
      for (int r = 0; r < kR; ++r) {
        applied[r] = std::max(applied[r], pool->units[r]);
      }
      latest = Later(latest, pool->until);
    }
    key->applied = applied;
    key->applied_left = latest > start ? latest - start : absl::ZeroDuration();
  };
  if (own != nullptr) {
    for (core::KeyTick& key : push->keys) {
      own_keys.insert(key.key);
      Pool* pool = FindOrAddPool(policy, *push, key);
      if (pool == nullptr) continue;
      Record(pool, self, key, start);
      sum_into(pool, &key);
    }
  }
  for (auto& [key_name, pool] : policy->pools) {
    if (own_keys.contains(key_name)) continue;
    bool asked = false;
    for (const auto& [id, h] : pool.parties) {
      if (id != self && start <= h.pushed + stale) asked = true;
    }
    if (!asked) continue;
    core::KeyTick key;
    key.key = key_name;
    key.limit = pool.limit;
    sum_into(&pool, &key);
    push->keys.push_back(std::move(key));
  }
  if (own == nullptr || !own->has_breaker) return;
  const core::OutcomeTotals growth = Growth(
      own->outcomes,
      policy->central_has_totals ? &policy->central_totals : nullptr);
  policy->shared = Plus(policy->shared, growth);
  policy->central_added = Plus(policy->central_added, growth);
  policy->central_totals = own->outcomes;
  policy->central_has_totals = true;
  push->outcomes = Plus(own->outcomes, policy->leaf_sum);
  uint64_t wanted = own->leases_wanted;
  const uint64_t generation = policy->record ? policy->record->generation : 0;
  for (const auto& [id, l] : policy->leaf_leases) {
    if (l.generation == generation && start < l.until) wanted += l.wanted;
  }
  push->leases_wanted =
      static_cast<uint32_t>(std::min<uint64_t>(wanted, own->lease_cap));
  if (policy->pending && push->publish) {
    // A leaf's transition the ledger accepted goes upstream in place of
    // the central's own state (which then adopts it).
    push->breaker = policy->pending->record;
    push->breaker.base = policy->pending->base;
    push->breaker.replica.clear();
    policy->pending->sent = true;
  }
}

LeaseLedger::Impl::Round LeaseLedger::Impl::BuildRound(
    const TickRequest& request, absl::Time start) {
  Round round;
  round.start = start;
  round.up = request;
  round.leaving = request.leaving;
  const uint32_t live = LiveLeaves(start);
  round.up.weight = 1 + live;
  // The store counts every leaf of this central among the processes on a
  // per_key static share (see ReservedLeaves).
  round.up.live_replicas = std::max(request.live_replicas, TreeWeight(start));
  if (request.leaving) {
    stopping_ = true;
    // Giving the central's entry back would free what its leaves may still
    // apply: while any lease is in force, push as usual (Redis keeps
    // counting it until it ends) and let the entry expire.
    bool leased = false;
    for (const auto& [name, policy] : policies_) {
      for (const auto& [key, pool] : policy.pools) {
        for (const auto& [id, h] : pool.parties) {
          if (id != options_.replica_id &&
              HeldUntil(h, options_.stale_after) >= start) {
            leased = true;
          }
        }
      }
    }
    if (leased) round.up.leaving = false;
  }
  const uint64_t known = config_ ? config_->version : 0;
  round.up.config_seen = std::min(request.config_seen, known);
  round.up.members_epoch_seen = upstream_members_epoch_;
  round.up.members_seen = upstream_members_seen_;
  round.own_policies = request.policies.size();
  absl::flat_hash_set<std::string> own;
  for (size_t i = 0; i < round.own_policies; ++i) {
    PolicyPush& push = round.up.policies[i];
    round.own_keys.push_back(push.keys.size());
    own.insert(push.policy);
    PolicyState* policy = FindOrAddPolicy(push.policy);
    if (policy == nullptr) continue;
    AddSubtree(&request.policies[i], policy, start, &push);
  }
  for (auto& [name, policy] : policies_) {
    if (own.contains(name)) continue;
    PolicyPush push;
    push.policy = name;
    push.per_key = policy.per_key;
    push.epoch_seen = policy.epoch;
    AddSubtree(nullptr, &policy, start, &push);
    if (!push.keys.empty()) round.up.policies.push_back(std::move(push));
  }
  round.leaf_forwards = std::move(to_upstream_);
  to_upstream_.clear();
  round.up.forwarded.insert(round.up.forwarded.end(),
                            round.leaf_forwards.begin(),
                            round.leaf_forwards.end());
  return round;
}

void LeaseLedger::Impl::TakeBreaker(const PolicyPush& push,
                                    PolicyState* policy, PolicyPull* pull) {
  const std::string& self = options_.replica_id;
  policy->upstream_outcomes.clear();
  for (const ReplicaOutcomes& o : pull->outcomes) {
    if (o.replica != self) policy->upstream_outcomes.push_back(o);
  }
  if (pull->breaker) {
    core::BreakerRecord record = *pull->breaker;
    bool refused = false;
    if (policy->pending && policy->pending->sent) {
      if (record.generation == policy->pending->record.generation &&
          record.replica == self) {
        record.replica = policy->pending->leaf;
      } else {
        ++stats_.breaker_upstream_refused;
        refused = true;
      }
      policy->pending.reset();
    }
    if (!policy->pending) {
      // News to the leaves: a new generation or state, or another writer's
      // record in place of the transition the ledger accepted (possibly
      // under the same generation). Upstream's copy of the record held
      // (named under the central's id, times to the millisecond) is not.
      const bool news = refused || !policy->record ||
                        policy->record->generation != record.generation ||
                        policy->record->state != record.state;
      SetRecord(push.policy, policy, record, news);
    }
    pull->breaker = std::move(record);
  }
  // Probe leases: the central's share of what Redis granted it is what its
  // leaves do not hold.
  const uint64_t generation = policy->record ? policy->record->generation : 0;
  policy->lease_generation = generation;
  policy->leases_held = pull->leases_granted;
  uint32_t leaves = 0;
  const absl::Time now = clock_->Now();
  for (const auto& [id, l] : policy->leaf_leases) {
    if (l.generation == generation && now < l.until) leaves += l.count;
  }
  policy->central_leases = 0;
  pull->leases_granted = 0;
  // The central's own wish is the one it pushed before the leaves' were
  // added (central_wish_).
  auto wish = central_wish_.find(push.policy);
  const uint32_t central_wanted = wish == central_wish_.end() ? 0 : wish->second;
  if (policy->leases_held > leaves) {
    policy->central_leases =
        std::min(central_wanted, policy->leases_held - leaves);
  }
  pull->leases_granted = policy->central_leases;
  // The central sees all its leaves as one more replica: what they added.
  pull->outcomes.push_back(
      {leaves_id_, Minus(policy->shared, policy->central_added)});
}

absl::StatusOr<TickReply> LeaseLedger::Impl::TakeReply(
    const TickRequest& request, Round* round, TickReply reply) {
  const absl::Time now = clock_->Now();
  const absl::Duration stale = options_.stale_after;
  last_good_ = round->start;
  offset_ = reply.store_now - (round->start + (now - round->start) / 2);
  if (!reply.members_unchanged) {
    upstream_members_epoch_ = reply.members_epoch;
    upstream_members_seen_ = reply.members_version;
    if (upstream_replicas_ != reply.replicas) {
      upstream_replicas_ = reply.replicas;
      ++membership_;
    }
  }
  upstream_weight_ = reply.live_weight;
  sent_weight_ = round->up.weight;
  // The last push at least a stale period old stays (its weight held
  // until the next one).
  sent_.push_back({round->start, round->up.weight,
                   std::max<uint32_t>(1, round->up.live_replicas)});
  while (sent_.size() > 1 && sent_[1].start <= round->start - stale) {
    sent_.pop_front();
  }
  const int64_t reserved_leaves = ReservedLeaves(round->start);
  const int64_t reserved_live = ReservedLive();
  config_epoch_ = reply.config_epoch;
  if (reply.config && !reply.config_lost) config_ = *reply.config;
  for (size_t i = 0; i < round->up.policies.size(); ++i) {
    const PolicyPush& push = round->up.policies[i];
    PolicyPull& pull = reply.policies[i];
    auto found = policies_.find(push.policy);
    if (found == policies_.end()) continue;
    PolicyState& policy = found->second;
    policy.epoch = pull.epoch;
    const size_t own_keys = i < round->own_policies ? round->own_keys[i] : 0;
    for (size_t k = 0; k < push.keys.size() && k < pull.grants.size(); ++k) {
      auto pool_it = policy.pools.find(push.keys[k].key);
      if (pool_it == policy.pools.end()) continue;
      Pool& pool = pool_it->second;
      const StoreGrant& got = pull.grants[k];
      pool.have = true;
      pool.granted = got.granted;
      pool.units = got.granted ? got.units : core::Units{};
      pool.units_limit = push.keys[k].limit;
      pool.until = round->start + std::min(stale, got.valid_for);
      if (pool.per_key) {
        // tick.lua keeps floor(limit / live) for each process without an
        // entry, with the live count this central sent (the most of the
        // period, for the smallest share).
        for (int r = 0; r < kR; ++r) {
          pool.each[r] = pool.limit[r] / reserved_live;
          pool.statics[r] = reserved_leaves * pool.each[r];
        }
      }
      if (k < own_keys) {
        // The central's own share, computed as a leaf's is; it ends with
        // the pool (same clock, same start), or where Issue ended it
        // sooner (a unit above the central's whole share, one it holds
        // only until the slot's end), as the ledger counts it.
        StoreGrant mine = Issue(&pool, options_.replica_id, now, pool.until,
                                request.policies[i].keys[k]);
        mine.valid_for = std::min(mine.valid_for + (now - round->start),
                                  pool.until - round->start);
        mine.granted = mine.granted && got.granted;
        pull.grants[k] = mine;
      }
    }
    if (i < round->own_policies && push.has_breaker) {
      TakeBreaker(push, &policy, &pull);
    }
    if (push.has_warm) policy.warm = pull.warm;
  }
  // What goes back to the central's SyncLoop: its own policies and keys.
  reply.policies.resize(round->own_policies);
  for (size_t i = 0; i < round->own_policies; ++i) {
    reply.policies[i].grants.resize(
        std::min(reply.policies[i].grants.size(), round->own_keys[i]));
  }
  if (reply.config && reply.config->version == request.config_seen) {
    reply.config.reset();
  }
  AnswerMembers(request, now, &reply);
  reply.live_weight = TreeWeight(now);
  for (core::ForwardedReport& f : to_central_) {
    reply.forwarded_to_me.push_back(std::move(f));
  }
  to_central_.clear();
  stats_.forwarded_upstream += round->leaf_forwards.size();
  // Pools and holdings that ended.
  for (auto& [name, policy] : policies_) {
    for (auto it = policy.pools.begin(); it != policy.pools.end();) {
      if (Prune(&it->second, now)) {
        policy.pools.erase(it++);
        --pools_;
      } else {
        ++it;
      }
    }
  }
  return reply;
}

absl::StatusOr<TickReply> LeaseLedger::Impl::Tick(const TickRequest& request) {
  Round round;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time start = clock_->Now();
    for (const PolicyPush& push : request.policies) {
      central_wish_[push.policy] = push.leases_wanted;
    }
    round = BuildRound(request, start);
    round_start_ = start;
  }
  // Never under the lock: leaves are served from memory meanwhile.
  absl::StatusOr<TickReply> reply = upstream_->Tick(round.up);
  absl::MutexLock lock(&mu_);
  ++stats_.upstream_ticks;
  round_failed_ =
      !reply.ok() || reply->policies.size() != round.up.policies.size();
  if (round_failed_) {
    ++stats_.upstream_failures;
    // Leaves' reports go again with the next tick; a leaf transition too.
    for (core::ForwardedReport& f : round.leaf_forwards) {
      if (to_upstream_.size() >= kMaxUpstreamForwards) {
        ++stats_.forwarded_dropped;
        continue;
      }
      to_upstream_.push_back(std::move(f));
    }
    for (auto& [name, policy] : policies_) {
      if (policy.pending) policy.pending->sent = false;
    }
    if (!reply.ok()) return reply.status();
    return absl::UnavailableError(
        "store answered for the wrong number of policies");
  }
  round_took_ = std::max(clock_->Now() - round.start, absl::ZeroDuration());
  // The breakers part of the reply stays as upstream answered it (Redis:
  // epoch 0), not this ledger's: upstream answers breakers only for the
  // policies pushed, and the ledger takes a record only from the pull of a
  // policy the central pushed (TakeBreaker), so the central must keep
  // pushing every policy with a breaker, quiet or not.
  return TakeReply(request, &round, *std::move(reply));
}

LedgerStats LeaseLedger::Impl::stats() const {
  absl::MutexLock lock(&mu_);
  LedgerStats out = stats_;
  const absl::Time now = clock_->Now();
  for (const auto& [id, leaf] : leaves_) {
    if (now <= leaf.seen + options_.stale_after) ++out.leaves;
  }
  out.leaf_ticks_refused = out.refused_stale + out.refused_unavailable +
                           out.refused_too_many + out.refused_invalid;
  out.pools = pools_;
  for (const auto& [name, policy] : policies_) {
    for (const auto& [key, pool] : policy.pools) {
      for (int r = 0; r < kR; ++r) {
        if (pool.have && pool.granted && now < pool.until) {
          out.pool_units[r] += pool.units[r];
        }
        for (const auto& [id, h] : pool.parties) {
          const int64_t held = Held(h, r, now, options_.stale_after);
          if (id == options_.replica_id) {
            out.self_units[r] += held;
          } else {
            out.leaf_units[r] += held;
          }
        }
      }
    }
  }
  return out;
}

LeaseLedger::LeaseLedger(Store* upstream, core::Clock* clock, Options options)
    : impl_(std::make_unique<Impl>(upstream, clock, std::move(options))) {}

LeaseLedger::~LeaseLedger() = default;

absl::StatusOr<TickReply> LeaseLedger::Tick(const TickRequest& request) {
  return impl_->Tick(request);
}

absl::StatusOr<TickReply> LeaseLedger::ServeLeaf(const TickRequest& request) {
  return impl_->ServeLeaf(request);
}

absl::StatusOr<ConfigWrite> LeaseLedger::PutPolicy(const StoredPolicy& policy,
                                                   uint64_t expected_version) {
  return impl_->upstream_->PutPolicy(policy, expected_version);
}

absl::StatusOr<ConfigWrite> LeaseLedger::DeletePolicy(
    const std::string& name, uint64_t expected_version) {
  return impl_->upstream_->DeletePolicy(name, expected_version);
}

absl::StatusOr<ConfigWrite> LeaseLedger::SetOverride(
    const StoredOverride& override) {
  return impl_->upstream_->SetOverride(override);
}

std::string LeaseLedger::Describe() const {
  return impl_->upstream_->Describe();
}

StoreStatus LeaseLedger::status() const { return impl_->upstream_->status(); }

LedgerStats LeaseLedger::stats() const { return impl_->stats(); }

void LeaseLedger::WriteStats(base::StatsWriter& out) const {
  Store::WriteStats(out);
  const LedgerStats s = stats();
  static constexpr base::MetricDef kLeaves = base::GaugeDef(
      "sluice_leaves", {},
      "Leaves (sluiced --upstream) this central replica serves: heard "
      "from within the stale period. Central replicas only.");
  out.Write(kLeaves, s.leaves);
  static constexpr base::MetricDef kLeafTicks = base::CounterDef(
      "sluice_leaf_ticks_total", {"result"},
      "Lease ticks of leaves this central replica answered, by result: ok, "
      "stale (an older sequence than one applied, ABORTED), unavailable "
      "(no good Redis tick within the stale period), too_many "
      "(--max-leaves reached) or invalid (over a bound). Central replicas "
      "only.");
  out.WriteBy(kLeafTicks, {{"ok", s.leaf_ticks},
                           {"stale", s.refused_stale},
                           {"unavailable", s.refused_unavailable},
                           {"too_many", s.refused_too_many},
                           {"invalid", s.refused_invalid}});
  static constexpr base::MetricDef kLeaseUnits = base::GaugeDef(
      "sluice_lease_units", {"resource", "holder"},
      "Cluster units under this central replica now, by resource (rate: "
      "token refill or window count, slots: max_in_flight) and holder: "
      "granted (what Redis granted this replica for itself and its leaves "
      "and still in force), leaves (leased to its leaves), self (in force "
      "on this replica). Summed over policies and keys. Central replicas "
      "only.");
  for (const auto& [resource, index] :
       {std::pair<const char*, int>{"rate", core::kRateUnits},
        {"slots", core::kSlotUnits}}) {
    for (const auto& [holder, n] :
         {std::pair<const char*, int64_t>{"granted", s.pool_units[index]},
          {"leaves", s.leaf_units[index]},
          {"self", s.self_units[index]}}) {
      out.Write(kLeaseUnits, {resource, holder}, static_cast<double>(n));
    }
  }
  static constexpr base::MetricDef kLeafBreakerReports = base::CounterDef(
      "sluice_leaf_breaker_reports_total", {"result"},
      "Breaker transitions reported by leaves, by result: accepted (passed "
      "on to Redis), refused (older than the record held), "
      "upstream_refused (Redis held a newer one). Central replicas only.");
  out.WriteBy(kLeafBreakerReports,
              {{"accepted", s.breaker_accepted},
               {"refused", s.breaker_refused},
               {"upstream_refused", s.breaker_upstream_refused}});
  static constexpr base::MetricDef kLeafForwardedReports = base::CounterDef(
      "sluice_leaf_forwarded_reports_total", {"route"},
      "Reports for permits of another sluiced received from leaves, by "
      "route: delivered (to a leaf or this replica, in memory), upstream "
      "(passed on through Redis), dropped (issuer unknown or its inbox "
      "full). Central replicas only.");
  out.WriteBy(kLeafForwardedReports, {{"delivered", s.forwarded_delivered},
                                      {"upstream", s.forwarded_upstream},
                                      {"dropped", s.forwarded_dropped}});
}

}  // namespace sluice::cluster
