// SPDX-License-Identifier: Apache-2.0
#include "server/cluster/lease_ledger.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/cluster/grant_book.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/fake_store.h"
#include "tests/testing/forwarding_store.h"
#include "tests/testing/stats_recorder.h"

namespace sluice::cluster {
namespace {

constexpr absl::Duration kStale = absl::Seconds(1);
constexpr absl::Duration kInterval =
    absl::Nanoseconds(333333333);  // kStale / SyncLoop's stale_ticks
constexpr absl::Duration kMargin = absl::Milliseconds(50);
const char kCentral[] = "central";

core::KeyTick Key(const std::string& key, int64_t limit, double demand,
                  int64_t applied = 0,
                  absl::Duration left = absl::ZeroDuration()) {
  core::KeyTick k;
  k.key = key;
  k.limit = {limit, 0};
  k.demand = {demand, 0};
  k.applied = {applied, 0};
  k.applied_left = left;
  return k;
}

PolicyPush Push(const std::string& policy, std::vector<core::KeyTick> keys,
                bool per_key = false) {
  PolicyPush p;
  p.policy = policy;
  p.per_key = per_key;
  p.keys = std::move(keys);
  return p;
}

TickRequest Request(const std::string& id, uint64_t incarnation,
                    uint64_t sequence, std::vector<PolicyPush> policies) {
  TickRequest r;
  r.replica_id = id;
  r.incarnation = incarnation;
  r.sequence = sequence;
  r.stale_after = kStale;
  r.policies = std::move(policies);
  return r;
}

// A store that records what reaches it and passes it on.
class RecordingStore final : public testing::ForwardingStore {
 public:
  using ForwardingStore::ForwardingStore;
  absl::StatusOr<TickReply> Tick(const TickRequest& request) override {
    last = request;
    if (before) before();
    absl::StatusOr<TickReply> reply = ForwardingStore::Tick(request);
    if (after) after();
    return reply;
  }
  std::string Describe() const override { return "recording"; }

  TickRequest last;
  // Run inside Tick, before the request reaches the next store and after
  // its reply comes back (the two halves of a round trip).
  std::function<void()> before;
  std::function<void()> after;
};

class LeaseLedgerTest : public ::testing::Test {
 protected:
  LeaseLedgerTest() : store_(&clock_), recorder_(&store_) {}

  void SetUp() override {
    Settle();
    Make();
  }

  // The store has held the tests' policies for a while, as in a running
  // cluster: their epochs were created before the recovery window that
  // every new epoch opens (one stale period, tick.lua) and its membership
  // entry has ended. The clock then goes back to its start.
  void Settle() {
    const absl::Time start = clock_.Now();
    clock_.SetTime(start - 2 * kStale - absl::Seconds(1));
    TickRequest r;
    r.replica_id = "settler";
    r.incarnation = 1;
    r.sequence = 1;
    r.stale_after = kStale;
    for (const char* policy : {"api", "db", "other", "pk"}) {
      PolicyPush p;
      p.policy = policy;
      r.policies.push_back(p);
    }
    ASSERT_TRUE(store_.Tick(r).ok());
    clock_.SetTime(start);
  }

  void Make(size_t max_leaves = 100) {
    LeaseLedger::Options o;
    o.replica_id = kCentral;
    o.stale_after = kStale;
    o.interval = kInterval;
    o.margin = kMargin;
    o.max_leaves = max_leaves;
    o.nudge = [this] { ++nudges_; };
    ledger_ = std::make_unique<LeaseLedger>(&recorder_, &clock_, o);
  }

  absl::StatusOr<TickReply> Central(std::vector<PolicyPush> policies) {
    return ledger_->Tick(
        Request(kCentral, 1, ++central_seq_, std::move(policies)));
  }
  absl::StatusOr<TickReply> Leaf(const std::string& id,
                                 std::vector<PolicyPush> policies,
                                 uint64_t incarnation = 7) {
    return ledger_->ServeLeaf(
        Request(id, incarnation, ++leaf_seq_[id], std::move(policies)));
  }

  testing::FakeClock clock_;
  testing::FakeStore store_;
  RecordingStore recorder_;
  std::unique_ptr<LeaseLedger> ledger_;
  uint64_t central_seq_ = 0;
  std::map<std::string, uint64_t> leaf_seq_;
  std::atomic<int> nudges_{0};  // nudge is called from any thread
};

TEST(FairSplitTest, SmallDemandsGetWhatTheyAskAndTheRestIsShared) {
  const absl::Time now = testing::FakeClock::DefaultStart();
  const std::vector<int64_t> u =
      FairSplit(100, {"a", "b", "c"}, {10, 1000, 1000}, now);
  ASSERT_EQ(u.size(), 3u);
  EXPECT_EQ(u[0] + u[1] + u[2], 100);
  EXPECT_GE(u[0], 10);  // 10 * 1.05 plus an even part of nothing left
  EXPECT_LE(u[0], 11);
  EXPECT_LE(std::abs(u[1] - u[2]), 1);
  // Nobody wants anything: spread evenly.
  const std::vector<int64_t> even = FairSplit(9, {"a", "b", "c"}, {0, 0, 0}, now);
  EXPECT_EQ(even, (std::vector<int64_t>{3, 3, 3}));
  EXPECT_EQ(FairSplit(0, {"a"}, {5}, now), std::vector<int64_t>{0});
}

TEST(FairSplitTest, TheOrderOfTheNamesDoesNotMatter) {
  // Sorted names take a shortcut (indices stand for names); the split by
  // name must be the same either way, ties and rotation included.
  const absl::Time now = testing::FakeClock::DefaultStart() + absl::Seconds(37);
  const std::vector<std::string> sorted = {"a", "b", "c", "d", "e"};
  const std::vector<double> demand = {3, 3, 0.2, 3, 0.2};
  const std::vector<int64_t> in_order = FairSplit(7, sorted, demand, now);
  const std::vector<size_t> perm = {3, 0, 4, 1, 2};
  std::vector<std::string> names;
  std::vector<double> shuffled;
  for (size_t j : perm) {
    names.push_back(sorted[j]);
    shuffled.push_back(demand[j]);
  }
  const std::vector<int64_t> out = FairSplit(7, names, shuffled, now);
  for (size_t k = 0; k < perm.size(); ++k) {
    EXPECT_EQ(out[k], in_order[perm[k]]) << names[k];
  }
}

TEST(CreditSplitTest, SubUnitSharesTakeTurnsInProportion) {
  // 10 units over 25 parties (0.4 each) and 2 units over 3 parties with
  // shares 0.2, 0.6 and 1.2: split every half second for 10 minutes, a
  // new slot every 2 s, a party holding what the previous split gave it.
  struct Case {
    int64_t total;
    std::vector<double> share;
  };
  const std::vector<Case> cases = {
      {10, std::vector<double>(25, 0.4)},
      {2, {0.2, 0.6, 1.2}},
  };
  for (const Case& c : cases) {
    const size_t n = c.share.size();
    std::vector<SplitCredit> credit(n);
    std::vector<bool> holding(n, false);
    std::vector<double> held(n, 0);  // unit-seconds above the whole share
    std::vector<double> last_turn(n, 0), longest_wait(n, 0);
    constexpr double kStep = 0.5;
    constexpr int kSteps = 1200;
    for (int step = 0; step < kSteps; ++step) {
      const bool new_slot = step % 4 == 0;
      std::vector<SplitCredit> before = credit;
      const std::vector<int64_t> units =
          CreditSplit(c.total, c.share, holding, kStep, 4 * kStep, new_slot,
                      &credit);
      ASSERT_EQ(units.size(), n);
      int64_t sum = 0;
      const double t = step * kStep;
      for (size_t j = 0; j < n; ++j) {
        sum += units[j];
        const auto whole = static_cast<int64_t>(std::floor(c.share[j]));
        EXPECT_GE(units[j], whole);
        EXPECT_LE(units[j], whole + 1);
        holding[j] = units[j] > whole;
        // Between slot starts nobody gains or loses a unit (the number
        // left over does not change here); at a slot start exactly the
        // parties chosen a slot ahead hold one.
        if (!new_slot) {
          EXPECT_EQ(holding[j], before[j].member) << "step " << step;
        } else if (step > 0) {
          EXPECT_EQ(holding[j], before[j].next) << "step " << step;
        }
        if (holding[j]) {
          held[j] += kStep;
          longest_wait[j] = std::max(longest_wait[j], t - last_turn[j]);
          last_turn[j] = t;
        }
      }
      EXPECT_EQ(sum, c.total) << "step " << step;
    }
    const double span = kSteps * kStep;
    for (size_t j = 0; j < n; ++j) {
      const double fraction = c.share[j] - std::floor(c.share[j]);
      longest_wait[j] = std::max(longest_wait[j], span - last_turn[j]);
      // In proportion to the fraction (within the credit kept in hand).
      EXPECT_NEAR(held[j] / span, fraction, 0.03) << "party " << j;
      // Every party takes its turn within seconds, not minutes.
      EXPECT_LE(longest_wait[j], 10.0) << "party " << j;
    }
  }
}

TEST_F(LeaseLedgerTest, LeavesAreRefusedUntilTheCentralHasAGrant) {
  absl::StatusOr<TickReply> r = Leaf("leaf1", {Push("api", {Key("", 100, 10)})});
  // A definite refusal: the leaf decides from local state at once.
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ledger_->stats().refused_unavailable, 1u);
}

TEST_F(LeaseLedgerTest, TheCentralsGrantIsSplitByDemandAndNeverOverspent) {
  // The central pushes what it applies, as its SyncLoop does.
  int64_t central_units = 0;
  auto central = [&]() -> absl::StatusOr<TickReply> {
    absl::StatusOr<TickReply> c = Central(
        {Push("api", {Key("", 100, 30, central_units, kStale)})});
    if (c.ok()) central_units = c->policies[0].grants[0].units[0];
    return c;
  };
  ASSERT_TRUE(central().ok());
  // Alone, the central was given the whole pool.
  EXPECT_EQ(central_units, 100);
  // The leaf's first demand asks for an early central tick; the central
  // still holds everything.
  absl::StatusOr<TickReply> first =
      Leaf("leaf1", {Push("api", {Key("", 100, 60)})});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->policies[0].grants[0].units[0], 0);
  EXPECT_GE(nudges_, 1);
  clock_.Advance(absl::Milliseconds(100));
  absl::StatusOr<TickReply> c = central();
  ASSERT_TRUE(c.ok()) << c.status();
  // Upstream saw the subtree's demand and weight.
  ASSERT_EQ(recorder_.last.policies.size(), 1u);
  EXPECT_DOUBLE_EQ(recorder_.last.policies[0].keys[0].demand[0], 90);
  EXPECT_EQ(recorder_.last.weight, 2u);
  ASSERT_EQ(c->policies.size(), 1u);
  ASSERT_EQ(c->policies[0].grants.size(), 1u);
  // Its new share is 34 and a part, the part a unit that takes turns; the
  // central's turn ends at this slot's end, before its next round would
  // come (an interval on). It gives that unit up now rather than see its
  // whole 34 end with it, and they last as long as the pool does.
  EXPECT_EQ(c->policies[0].grants[0].units[0], 34);
  EXPECT_EQ(c->policies[0].grants[0].valid_for, kStale);
  // The central's share shrank, but it applied 100 when it asked: that is
  // held until its next tick says otherwise.
  EXPECT_LT(central_units, 50);
  absl::StatusOr<TickReply> l = Leaf("leaf1", {Push("api", {Key("", 100, 60)})});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->policies[0].grants[0].units[0], 0);
  clock_.Advance(absl::Milliseconds(100));
  ASSERT_TRUE(central().ok());
  l = Leaf("leaf1", {Push("api", {Key("", 100, 60)})});
  ASSERT_TRUE(l.ok()) << l.status();
  const StoreGrant& g = l->policies[0].grants[0];
  EXPECT_TRUE(g.granted);
  // About 30:60 by demand, the 10 nobody wants spread.
  EXPECT_GE(g.units[0], 60);
  EXPECT_GE(central_units, 30);
  EXPECT_LE(central_units + g.units[0], 100);
  // The lease ends `margin` before the central's grant.
  EXPECT_EQ(g.valid_for, kStale - kMargin);
  const LedgerStats s = ledger_->stats();
  EXPECT_EQ(s.leaves, 1u);
  EXPECT_EQ(s.pool_units[0], 100);
  EXPECT_EQ(s.leaf_units[0], g.units[0]);
  EXPECT_LE(s.self_units[0] + s.leaf_units[0], 100);
}

// Units move between leaves at the pace of the ledger's word, not of whole
// intervals: a leaf that gives units back is asked to confirm at once, and
// a leaf that waits for them is told when they are expected to be free.
TEST_F(LeaseLedgerTest, UnitsChangeHandsWhenTheGiverConfirms) {
  int64_t central_units = 0;
  auto central = [&] {
    absl::StatusOr<TickReply> c =
        Central({Push("api", {Key("", 100, 0, central_units, kStale)})});
    ASSERT_TRUE(c.ok()) << c.status();
    central_units = c->policies[0].grants[0].units[0];
  };
  central();
  ASSERT_TRUE(Leaf("a", {Push("api", {Key("", 100, 200)})}).ok());
  clock_.Advance(absl::Milliseconds(100));
  central();  // the central's share goes to the leaf ...
  clock_.Advance(absl::Milliseconds(100));
  central();  // ... once it says it applies 0
  ASSERT_EQ(central_units, 0);
  absl::StatusOr<TickReply> a = Leaf("a", {Push("api", {Key("", 100, 200)})});
  ASSERT_TRUE(a.ok()) << a.status();
  const StoreGrant first = a->policies[0].grants[0];
  ASSERT_EQ(first.units[0], 100);
  // Nothing to wait for, nothing to give back: the usual interval (the
  // central's next round is an interval away, a's offset after it more).
  EXPECT_EQ(a->tick_again_in, kInterval);

  clock_.Advance(absl::Milliseconds(100));
  absl::StatusOr<TickReply> b = Leaf("b", {Push("api", {Key("", 100, 200)})});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->policies[0].grants[0].units[0], 0);
  // b is told to come back when a's units are expected: a's next tick and
  // its confirmation, well within b's own interval.
  EXPECT_GT(b->tick_again_in, absl::ZeroDuration());
  EXPECT_LT(b->tick_again_in, kInterval + 3 * kMinTickGap);

  clock_.Advance(absl::Milliseconds(100));
  a = Leaf("a", {Push("api", {Key("", 100, 200, 100, first.valid_for -
                                                         absl::Milliseconds(
                                                             200))})});
  ASSERT_TRUE(a.ok());
  const StoreGrant smaller = a->policies[0].grants[0];
  EXPECT_LT(smaller.units[0], 100);
  EXPECT_GE(smaller.units[0], 45);
  // a applied 100 when it asked; until it says it applies less, b still
  // gets nothing, and a is asked to say so at once.
  EXPECT_GT(a->tick_again_in, absl::ZeroDuration());
  EXPECT_LE(a->tick_again_in, kMinTickGap);
  b = Leaf("b", {Push("api", {Key("", 100, 200)})});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->policies[0].grants[0].units[0], 0);
  EXPECT_LE(b->tick_again_in, 3 * kMinTickGap);

  clock_.Advance(kMinTickGap);
  a = Leaf("a", {Push("api", {Key("", 100, 200, smaller.units[0],
                                  smaller.valid_for - kMinTickGap)})});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->policies[0].grants[0].units[0], smaller.units[0]);
  // Nothing to confirm any more: a's usual tick, just after the central's
  // next round (an interval after its last one, 250 ms ago).
  const absl::Duration to_next_round = kInterval - absl::Milliseconds(250);
  EXPECT_GE(a->tick_again_in, to_next_round);
  EXPECT_LT(a->tick_again_in, to_next_round + kInterval / 4);
  clock_.Advance(absl::Milliseconds(20));
  b = Leaf("b", {Push("api", {Key("", 100, 200)})});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->policies[0].grants[0].units[0], 100 - smaller.units[0]);
  EXPECT_EQ(ledger_->stats().leaf_units[0], 100);
}

// A sub-unit share takes turns at slot boundaries (two intervals apart) the
// ledger fixes a slot ahead: the holder's lease ends at the boundary, the
// next holder is told to tick just after it, and the two never overlap.
TEST_F(LeaseLedgerTest, ASubUnitShareChangesHandsAtTheSlotBoundary) {
  int64_t central_units = 0;
  auto central = [&] {
    absl::StatusOr<TickReply> c =
        Central({Push("api", {Key("", 1, 0, central_units, kStale)})});
    ASSERT_TRUE(c.ok()) << c.status();
    central_units = c->policies[0].grants[0].units[0];
  };
  central();
  const int64_t slot = absl::ToInt64Nanoseconds(2 * kInterval);
  auto boundary_after = [&](absl::Time t) {
    return absl::FromUnixNanos((absl::ToUnixNanos(t) / slot + 1) * slot);
  };
  // Each leaf's grant: units, and when it ends.
  struct Held {
    int64_t units = 0;
    absl::Time until = absl::InfinitePast();
    absl::Time tick = absl::InfiniteFuture();  // when it is told to tick
  };
  std::map<std::string, Held> held;
  auto tick = [&](const std::string& id) {
    Held& h = held[id];
    const absl::Time now = clock_.Now();
    const int64_t applied = now < h.until ? h.units : 0;
    absl::StatusOr<TickReply> r = Leaf(
        id, {Push("api", {Key("", 1, 1, applied,
                              now < h.until ? h.until - now
                                            : absl::ZeroDuration())})});
    ASSERT_TRUE(r.ok()) << r.status();
    h.units = r->policies[0].grants[0].units[0];
    h.until = now + r->policies[0].grants[0].valid_for;
    h.tick = r->tick_again_in > absl::ZeroDuration()
                 ? now + r->tick_again_in
                 : absl::InfiniteFuture();
  };
  tick("a");
  tick("b");
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(kInterval / 2);
    central();
  }
  // Eight slots: a tick of each leaf in the middle of each slot, and one
  // when told to.
  std::map<std::string, int> turns;
  for (int s = 0; s < 8; ++s) {
    const absl::Time end = boundary_after(clock_.Now());
    clock_.Advance((end - clock_.Now()) / 2);
    central();
    tick("a");
    tick("b");
    // Exactly one holds the unit; one of them changes at the boundary.
    ASSERT_EQ(held["a"].units + held["b"].units, 1) << "slot " << s;
    const std::string holder = held["a"].units == 1 ? "a" : "b";
    const std::string other = holder == "a" ? "b" : "a";
    ++turns[holder];
    // The two take turns: the holder's lease ends at the boundary and the
    // other is told to tick 20 ms after it.
    EXPECT_LE(held[holder].until, end) << "slot " << s;
    EXPECT_EQ(held[other].tick, end + absl::Milliseconds(20)) << "slot " << s;
    clock_.Advance(end + absl::Milliseconds(20) - clock_.Now());
    tick(other);
    EXPECT_EQ(held[other].units, 1) << "slot " << s;
    tick(holder);
    EXPECT_EQ(held[holder].units, 0) << "slot " << s;
  }
  EXPECT_EQ(turns["a"], 4);
  EXPECT_EQ(turns["b"], 4);
}

// A party's grant has one end, and the renewal must reach the party before
// it: a party whose grant ended refuses calls until its next reply, and its
// bucket starts again from empty. Three leaves and the central share 10
// units, 2.5 each: the units above their whole shares take turns at slot
// boundaries. A leaf's word takes 10 ms each way; it ticks when told
// (tick_again_in, within [kMinTickGap, its interval]) or an interval on,
// and one tick in five comes kMinTickGap after a reply instead, as when a
// refusal wakes it. The central ticks an interval apart, or kMinTickGap
// after the ledger nudges it. In 60 s no party that keeps units from one
// tick to the next is without them in between.
TEST_F(LeaseLedgerTest, EveryRenewalReachesThePartyBeforeTheGrantEnds) {
  constexpr absl::Duration kOneWay = absl::Milliseconds(10);
  struct Party {
    int64_t units = 0;
    absl::Time until = absl::InfinitePast();  // on the party's own side
    absl::Time next;                          // its next request, here
  };
  auto key = [](const Party& p, absl::Time sent) {
    const bool held = sent < p.until;
    return Key("", 10, 10, held ? p.units : 0,
               held ? p.until - sent : absl::ZeroDuration());
  };
  int renewals = 0, unit_given_up = 0;
  auto renewed = [&](const std::string& who, const Party& p,
                     const StoreGrant& g, absl::Time arrives) {
    if (p.units == 0 || g.units[0] == 0) return;
    ++renewals;
    if (p.units == 3 && g.units[0] == 2) ++unit_given_up;
    EXPECT_LE(arrives, p.until)
        << who << ": " << p.units << " units ended " << arrives - p.until
        << " before the renewal to " << g.units[0] << " reached it";
  };
  std::mt19937 rng(11);
  std::bernoulli_distribution woken(0.2);
  Party central;
  central.next = clock_.Now();
  std::map<std::string, Party> leaves;
  for (int i = 0; i < 3; ++i) {
    leaves[absl::StrCat("leaf", i)].next =
        clock_.Now() + absl::Milliseconds(1 + 97 * i);
  }
  int nudges_seen = 0;
  const absl::Time stop = clock_.Now() + absl::Seconds(60);
  while (clock_.Now() < stop) {
    clock_.Advance(absl::Milliseconds(1));
    const absl::Time now = clock_.Now();
    if (nudges_ != nudges_seen) {
      nudges_seen = nudges_;
      central.next = std::min(central.next, now + kMinTickGap);
    }
    if (now >= central.next) {
      absl::StatusOr<TickReply> c = Central({Push("api", {key(central, now)})});
      ASSERT_TRUE(c.ok()) << c.status();
      const StoreGrant& g = c->policies[0].grants[0];
      renewed("central", central, g, now);
      central.units = g.units[0];
      central.until = now + g.valid_for;
      central.next = now + kInterval;
    }
    for (auto& [id, p] : leaves) {
      if (now < p.next) continue;
      // Sent a one-way trip ago; the reply arrives a one-way trip on.
      const absl::Time sent = now - kOneWay, arrives = now + kOneWay;
      absl::StatusOr<TickReply> r = Leaf(id, {Push("api", {key(p, sent)})});
      ASSERT_TRUE(r.ok()) << r.status();
      const StoreGrant& g = r->policies[0].grants[0];
      renewed(id, p, g, arrives);
      p.units = g.units[0];
      p.until = sent + g.valid_for;
      absl::Duration wait =
          r->tick_again_in > absl::ZeroDuration()
              ? std::clamp(r->tick_again_in, kMinTickGap, kInterval)
              : kInterval;
      if (woken(rng)) wait = kMinTickGap;
      p.next = arrives + wait + kOneWay;
    }
  }
  // The case at stake happened, and often: a party kept its 2 whole units
  // through giving up the unit above them.
  EXPECT_GT(renewals, 500);
  EXPECT_GT(unit_given_up, 20);
}

// The central stops serving leaves this long before its own grants end
// (lease_ledger.cc's kLeafHandoff, 500 ms, cut to a quarter of kStale here).
constexpr absl::Duration kHandoff = absl::Milliseconds(250);

TEST_F(LeaseLedgerTest, ALeaseNeverOutlivesThePoolMinusTheMargin) {
  ASSERT_TRUE(Central({Push("api", {Key("", 100, 10)})}).ok());
  clock_.Advance(kStale - kHandoff - absl::Milliseconds(10));
  absl::StatusOr<TickReply> l = Leaf("leaf1", {Push("api", {Key("", 100, 5)})});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->policies[0].grants[0].valid_for,
            kHandoff + absl::Milliseconds(10) - kMargin);
  // A handoff before the central's grants end, its leaves are told it
  // cannot grant, and go to their local state while their grants hold.
  clock_.Advance(absl::Milliseconds(10));
  l = Leaf("leaf1", {Push("api", {Key("", 100, 5)})});
  EXPECT_EQ(l.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(LeaseLedgerTest, KeysOnlyLeavesPushGoUpstreamAndAreStripped) {
  ASSERT_TRUE(Central({Push("api", {Key("a", 100, 10)})}).ok());
  ASSERT_TRUE(Leaf("leaf1", {Push("api", {Key("b", 50, 10)}),
                             Push("other", {Key("", 20, 5)})})
                  .ok());
  absl::StatusOr<TickReply> c = Central({Push("api", {Key("a", 100, 10)})});
  ASSERT_TRUE(c.ok()) << c.status();
  // Upstream: "api" with keys a and b, plus "other".
  ASSERT_EQ(recorder_.last.policies.size(), 2u);
  EXPECT_EQ(recorder_.last.policies[0].keys.size(), 2u);
  EXPECT_EQ(recorder_.last.policies[0].keys[1].key, "b");
  EXPECT_EQ(recorder_.last.policies[1].policy, "other");
  // The central's SyncLoop sees only what it pushed.
  ASSERT_EQ(c->policies.size(), 1u);
  EXPECT_EQ(c->policies[0].grants.size(), 1u);
  // The leaf now leases from the pools.
  absl::StatusOr<TickReply> l = Leaf("leaf1", {Push("api", {Key("b", 50, 10)}),
                                               Push("other", {Key("", 20, 5)})});
  ASSERT_TRUE(l.ok());
  EXPECT_GT(l->policies[0].grants[0].units[0], 0);
  EXPECT_GT(l->policies[1].grants[0].units[0], 0);
}

TEST_F(LeaseLedgerTest, AppliedUpstreamCountsEveryGrantInForce) {
  int64_t mine = 0;
  auto central = [&] {
    absl::StatusOr<TickReply> c =
        Central({Push("api", {Key("", 100, 10, mine, kStale)})});
    ASSERT_TRUE(c.ok()) << c.status();
    mine = c->policies[0].grants[0].units[0];
  };
  central();
  ASSERT_TRUE(Leaf("leaf1", {Push("api", {Key("", 100, 50)})}).ok());
  central();
  central();
  absl::StatusOr<TickReply> l = Leaf("leaf1", {Push("api", {Key("", 100, 50)})});
  ASSERT_TRUE(l.ok());
  const int64_t leaf_units = l->policies[0].grants[0].units[0];
  ASSERT_GT(leaf_units, 0);
  clock_.Advance(absl::Milliseconds(100));
  const int64_t before = mine;
  central();
  const core::KeyTick& up = recorder_.last.policies[0].keys[0];
  // At least the pool Redis granted (it may still be leased from) and what
  // is leased from it.
  EXPECT_GE(up.applied[0], 100);
  EXPECT_GE(up.applied[0], before + leaf_units);
  EXPECT_DOUBLE_EQ(up.demand[0], 60);
  // Until the latest of them ends: the central's own (it said a stale
  // period), the leaf's lease and the pool from the tick before.
  EXPECT_EQ(up.applied_left, kStale);
}

TEST_F(LeaseLedgerTest, OldOrRepeatedRequestsAreAbortedAndChangeNothing) {
  ASSERT_TRUE(Central({Push("api", {Key("", 100, 10)})}).ok());
  TickRequest r = Request("leaf1", 5, 3, {Push("api", {Key("", 100, 10)})});
  ASSERT_TRUE(ledger_->ServeLeaf(r).ok());
  const LedgerStats before = ledger_->stats();
  EXPECT_EQ(ledger_->ServeLeaf(r).status().code(), absl::StatusCode::kAborted);
  r.sequence = 2;
  EXPECT_EQ(ledger_->ServeLeaf(r).status().code(), absl::StatusCode::kAborted);
  const LedgerStats after = ledger_->stats();
  EXPECT_EQ(after.refused_stale, 2u);
  EXPECT_EQ(after.leaf_units, before.leaf_units);
  EXPECT_EQ(after.leaf_ticks, before.leaf_ticks);
  // A new life under the same id starts its own sequence.
  r.incarnation = 6;
  r.sequence = 1;
  EXPECT_TRUE(ledger_->ServeLeaf(r).ok());
  // A late request of the earlier life is refused too.
  r.incarnation = 5;
  r.sequence = 9;
  EXPECT_EQ(ledger_->ServeLeaf(r).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(ledger_->stats().refused_stale, 3u);
}

TEST_F(LeaseLedgerTest, ARestartedLeafsOldGrantStaysCountedUntilItEnds) {
  ASSERT_TRUE(Central({Push("api", {Key("", 100, 1)})}).ok());
  ASSERT_TRUE(Leaf("leaf1", {Push("api", {Key("", 100, 1000)})}, 1).ok());
  ASSERT_TRUE(Central({Push("api", {Key("", 100, 1)})}).ok());
  absl::StatusOr<TickReply> old =
      Leaf("leaf1", {Push("api", {Key("", 100, 1000)})}, 1);
  ASSERT_TRUE(old.ok());
  const int64_t held = old->policies[0].grants[0].units[0];
  ASSERT_GT(held, 50);
  // The same id, a new incarnation, asking little: the old grant is still
  // counted, so another leaf cannot take it.
  leaf_seq_["leaf1"] = 0;
  ASSERT_TRUE(Leaf("leaf1", {Push("api", {Key("", 100, 1)})}, 2).ok());
  absl::StatusOr<TickReply> other =
      Leaf("leaf2", {Push("api", {Key("", 100, 1000)})});
  ASSERT_TRUE(other.ok());
  EXPECT_LE(other->policies[0].grants[0].units[0], 100 - held);
}

// A leaf that comes holding a lease this ledger never issued (one of this
// central's earlier process life, or of another central) is counted here,
// but not pushed upstream as this central's: upstream holds it under the
// entry of the life that issued it, and counting it twice would squeeze
// the other centrals' grants until it ends.
TEST_F(LeaseLedgerTest, ALeaseThisLedgerNeverIssuedIsNotPushedUpstream) {
  // Another replica holds the whole limit: this central's pool is empty.
  ASSERT_TRUE(store_.Tick(Request("other", 1, 1,
                                  {Push("api", {Key("", 100, 1000)})}))
                  .ok());
  ASSERT_TRUE(Central({Push("api", {Key("", 100, 0)})}).ok());
  auto leaf = [&](int64_t applied) {
    absl::StatusOr<TickReply> l = Leaf(
        "leaf1",
        {Push("api", {Key("", 100, 1, applied, absl::Milliseconds(800))})});
    EXPECT_TRUE(l.ok()) << l.status();
    return l.ok() ? l->policies[0].grants[0].units[0] : -1;
  };
  EXPECT_EQ(leaf(30), 0);
  clock_.Advance(absl::Milliseconds(100));
  // Still the same 30 (the grant of 0 is not applied yet).
  EXPECT_EQ(leaf(30), 0);
  clock_.Advance(absl::Milliseconds(100));
  ASSERT_TRUE(Central({Push("api", {Key("", 100, 0)})}).ok());
  const core::KeyTick& up = recorder_.last.policies[0].keys[0];
  EXPECT_EQ(up.applied[0], 0);
  EXPECT_DOUBLE_EQ(up.demand[0], 1);
  // Counted here all the same: once the other replica left and the pool is
  // the whole limit, nobody is leased what the leaf may still apply.
  TickRequest bye = Request("other", 1, 2, {Push("api", {Key("", 100, 0)})});
  bye.leaving = true;
  ASSERT_TRUE(store_.Tick(bye).ok());
  ASSERT_TRUE(Central({Push("api", {Key("", 100, 0)})}).ok());
  absl::StatusOr<TickReply> other =
      Leaf("leaf2", {Push("api", {Key("", 100, 1000)})});
  ASSERT_TRUE(other.ok());
  EXPECT_GT(other->policies[0].grants[0].units[0], 0);
  EXPECT_LE(other->policies[0].grants[0].units[0], 70);
}

TEST_F(LeaseLedgerTest, RefusedOnceTheStoreIsDownPastTheStalePeriod) {
  ASSERT_TRUE(Central({Push("api", {Key("", 100, 10)})}).ok());
  store_.SetDown(true);
  clock_.Advance(absl::Milliseconds(500));
  EXPECT_FALSE(Central({Push("api", {Key("", 100, 10)})}).ok());
  EXPECT_TRUE(Leaf("leaf1", {Push("api", {Key("", 100, 10)})}).ok());
  clock_.Advance(absl::Milliseconds(501));
  EXPECT_FALSE(Central({Push("api", {Key("", 100, 10)})}).ok());
  EXPECT_EQ(Leaf("leaf1", {Push("api", {Key("", 100, 10)})}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  store_.SetDown(false);
  ASSERT_TRUE(Central({Push("api", {Key("", 100, 10)})}).ok());
  EXPECT_TRUE(Leaf("leaf1", {Push("api", {Key("", 100, 10)})}).ok());
  EXPECT_EQ(ledger_->stats().upstream_failures, 2u);
}

TEST_F(LeaseLedgerTest, TooManyLeavesAreRefusedAndSilentOnesDropped) {
  Make(/*max_leaves=*/2);
  ASSERT_TRUE(Central({Push("api", {Key("", 100, 10)})}).ok());
  ASSERT_TRUE(Leaf("a", {}).ok());
  ASSERT_TRUE(Leaf("b", {}).ok());
  EXPECT_EQ(Leaf("c", {}).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ledger_->stats().leaves, 2u);
  // "b" falls silent; "a" keeps ticking.
  for (int i = 0; i < 12; ++i) {
    clock_.Advance(absl::Milliseconds(100));
    ASSERT_TRUE(Central({Push("api", {Key("", 100, 10)})}).ok());
    ASSERT_TRUE(Leaf("a", {}).ok());
  }
  EXPECT_TRUE(Leaf("c", {}).ok());
  EXPECT_EQ(ledger_->stats().leaves, 2u);
  EXPECT_EQ(ledger_->stats().refused_too_many, 1u);
}

// Its metrics are stats(): leaves, their ticks by result, the units by
// resource and holder, their breaker reports and forwarded reports.
TEST_F(LeaseLedgerTest, StatsAreTheMetricsOfTheLeaves) {
  Make(/*max_leaves=*/1);
  ASSERT_TRUE(Central({Push("api", {Key("", 100, 10)})}).ok());
  ASSERT_TRUE(Leaf("a", {Push("api", {Key("", 100, 60)})}).ok());
  EXPECT_FALSE(Leaf("b", {}).ok());
  const LedgerStats s = ledger_->stats();
  sluice::testing::StatsRecorder stats(*ledger_);
  EXPECT_EQ(stats.Sum("sluice_leaves"), 1);
  EXPECT_EQ(stats.Sum("sluice_leaf_ticks_total", {{"result", "ok"}}),
            s.leaf_ticks);
  EXPECT_EQ(stats.Sum("sluice_leaf_ticks_total", {{"result", "too_many"}}),
            1);
  EXPECT_EQ(stats.Find("sluice_leaf_ticks_total").size(), 5u);
  for (const auto& [resource, index] :
       {std::pair<const char*, int>{"rate", core::kRateUnits},
        {"slots", core::kSlotUnits}}) {
    EXPECT_EQ(stats.Sum("sluice_lease_units",
                        {{"resource", resource}, {"holder", "granted"}}),
              s.pool_units[index]);
    EXPECT_EQ(stats.Sum("sluice_lease_units",
                        {{"resource", resource}, {"holder", "leaves"}}),
              s.leaf_units[index]);
    EXPECT_EQ(stats.Sum("sluice_lease_units",
                        {{"resource", resource}, {"holder", "self"}}),
              s.self_units[index]);
  }
  EXPECT_EQ(stats.Sum("sluice_lease_units",
                      {{"resource", "rate"}, {"holder", "granted"}}),
            100);
  EXPECT_EQ(stats.Find("sluice_leaf_breaker_reports_total").size(), 3u);
  EXPECT_EQ(stats.Find("sluice_leaf_forwarded_reports_total").size(), 3u);
}

TEST_F(LeaseLedgerTest, OversizedRequestsAreRefused) {
  ASSERT_TRUE(Central({Push("api", {Key("", 100, 10)})}).ok());
  std::vector<core::KeyTick> keys;
  for (int i = 0; i < 10001; ++i) keys.push_back(Key(absl::StrCat(i), 10, 1));
  EXPECT_EQ(Leaf("a", {Push("api", keys, true)}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Leaf("a", {Push("api", {Key(std::string(2000, 'k'), 10, 1)})})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Leaf(std::string(2000, 'x'), {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Leaf("a", {Push("api", {Key("", 10, -1)})}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ledger_->stats().refused_invalid, 4u);
  EXPECT_EQ(ledger_->stats().pools, 1u);
}

TEST_F(LeaseLedgerTest, LeavesGetTheConfigAsTheStoreWouldAndCannotSeedIt) {
  StoredPolicy p;
  p.name = "api";
  p.blob = "x";
  ASSERT_TRUE(store_.PutPolicy(p, 0).ok());
  ASSERT_TRUE(Central({}).ok());
  TickRequest r = Request("leaf1", 1, 1, {});
  StoredPolicy seed;
  seed.name = "from-leaf";
  seed.blob = "y";
  r.seed.push_back(seed);
  absl::StatusOr<TickReply> l = ledger_->ServeLeaf(r);
  ASSERT_TRUE(l.ok());
  ASSERT_TRUE(l->config.has_value());
  ASSERT_EQ(l->config->policies.size(), 1u);
  EXPECT_EQ(l->config->policies[0].name, "api");
  EXPECT_FALSE(l->config_epoch.empty());
  r.sequence = 2;
  r.config_seen = l->config->version;
  r.config_epoch_seen = l->config_epoch;
  l = ledger_->ServeLeaf(r);
  ASSERT_TRUE(l.ok());
  EXPECT_FALSE(l->config.has_value());
  EXPECT_FALSE(l->config_lost);
  // A newer config reaches the leaf after the central's next tick.
  p.blob = "z";
  ASSERT_TRUE(ledger_->PutPolicy(p, 0).ok());
  ASSERT_TRUE(Central({}).ok());
  r.sequence = 3;
  l = ledger_->ServeLeaf(r);
  ASSERT_TRUE(l.ok());
  ASSERT_TRUE(l->config.has_value());
  EXPECT_EQ(l->config->policies[0].blob, "z");
  // The leaf's seed never reached the store.
  ASSERT_TRUE(Central({}).ok());
  for (const PolicyPush& push : recorder_.last.policies) {
    EXPECT_NE(push.policy, "from-leaf");
  }
  EXPECT_TRUE(recorder_.last.seed.empty());
}

PolicyPush BreakerPush(const std::string& policy, uint64_t base,
                       uint64_t generation, core::BreakerState state,
                       uint64_t calls = 0) {
  PolicyPush p = Push(policy, {});
  p.has_breaker = true;
  p.breaker.base = base;
  p.breaker.generation = generation;
  p.breaker.state = state;
  p.outcomes.calls = calls;
  p.lease_cap = 2;
  return p;
}

TEST_F(LeaseLedgerTest, ALeafsBreakerTransitionIsSharedAndGoesUpstream) {
  ASSERT_TRUE(
      Central({BreakerPush("db", 0, 0, core::BreakerState::kClosed)}).ok());
  const uint64_t g0 = store_.Breaker("db")->generation;
  const int nudges = nudges_;
  absl::StatusOr<TickReply> open =
      Leaf("leaf1", {BreakerPush("db", g0, g0 + 1, core::BreakerState::kOpen)});
  ASSERT_TRUE(open.ok());
  ASSERT_TRUE(open->policies[0].breaker.has_value());
  EXPECT_EQ(open->policies[0].breaker->replica, "leaf1");
  EXPECT_EQ(open->policies[0].breaker->state, core::BreakerState::kOpen);
  EXPECT_GT(nudges_, nudges);
  // Another leaf sees it at once; its own transition from the old
  // generation is refused.
  absl::StatusOr<TickReply> other = Leaf(
      "leaf2", {BreakerPush("db", g0, g0 + 1, core::BreakerState::kClosed)});
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->policies[0].breaker->replica, "leaf1");
  EXPECT_EQ(other->policies[0].breaker->state, core::BreakerState::kOpen);
  EXPECT_EQ(ledger_->stats().breaker_refused, 1u);
  // Upstream gets it with the central's next push; the central adopts it.
  absl::StatusOr<TickReply> c =
      Central({BreakerPush("db", g0, g0, core::BreakerState::kClosed)});
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(store_.Breaker("db").has_value());
  EXPECT_EQ(store_.Breaker("db")->state, core::BreakerState::kOpen);
  EXPECT_EQ(store_.Breaker("db")->generation, g0 + 1);
  ASSERT_TRUE(c->policies[0].breaker.has_value());
  EXPECT_EQ(c->policies[0].breaker->replica, "leaf1");
  EXPECT_EQ(ledger_->stats().breaker_accepted, 1u);
}

TEST_F(LeaseLedgerTest, ATransitionUpstreamRefusesGivesWayToUpstreamsRecord) {
  ASSERT_TRUE(
      Central({BreakerPush("db", 0, 0, core::BreakerState::kClosed)}).ok());
  const uint64_t g0 = store_.Breaker("db")->generation;
  ASSERT_TRUE(
      Leaf("leaf1", {BreakerPush("db", g0, g0 + 1, core::BreakerState::kOpen)})
          .ok());
  // Meanwhile another central moved the stored breaker.
  TickRequest other = Request("other-central", 9, 1,
                              {BreakerPush("db", g0, g0 + 5,
                                           core::BreakerState::kClosed)});
  ASSERT_TRUE(store_.Tick(other).ok());
  ASSERT_TRUE(
      Central({BreakerPush("db", g0, g0, core::BreakerState::kClosed)}).ok());
  EXPECT_EQ(ledger_->stats().breaker_upstream_refused, 1u);
  absl::StatusOr<TickReply> l =
      Leaf("leaf1", {BreakerPush("db", g0 + 1, g0 + 1, core::BreakerState::kOpen)});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->policies[0].breaker->generation, g0 + 5);
  EXPECT_EQ(l->policies[0].breaker->replica, "other-central");
}

TEST_F(LeaseLedgerTest, OutcomesReachEveryoneOnceAndUpstreamGetsAMonotonicSum) {
  ASSERT_TRUE(Central({BreakerPush("db", 0, 0, core::BreakerState::kClosed,
                                   10)})
                  .ok());
  ASSERT_TRUE(
      Leaf("leaf1", {BreakerPush("db", 1, 1, core::BreakerState::kClosed, 5)})
          .ok());
  absl::StatusOr<TickReply> l2 = Leaf(
      "leaf2", {BreakerPush("db", 1, 1, core::BreakerState::kClosed, 3)});
  ASSERT_TRUE(l2.ok());
  // A leaf's first reply leaves the central's entry out (history is not
  // news); later ones carry one entry for the central and its other
  // leaves: what they added since.
  EXPECT_TRUE(l2->policies[0].outcomes.empty());
  absl::StatusOr<TickReply> c = Central(
      {BreakerPush("db", 1, 1, core::BreakerState::kClosed, 12)});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(recorder_.last.policies[0].outcomes.calls, 12u + 5u + 3u);
  ASSERT_TRUE(
      Leaf("leaf1", {BreakerPush("db", 1, 1, core::BreakerState::kClosed, 9)})
          .ok());
  l2 = Leaf("leaf2", {BreakerPush("db", 1, 1, core::BreakerState::kClosed, 3)});
  ASSERT_TRUE(l2.ok());
  std::map<std::string, uint64_t> seen;
  for (const ReplicaOutcomes& o : l2->policies[0].outcomes) {
    seen[o.replica] = o.totals.calls;
  }
  EXPECT_EQ(seen, (std::map<std::string, uint64_t>{
                      {absl::StrCat(kCentral, "/subtree"), 2 + 4}}));
  // The central sees all its leaves as one replica: what they added.
  c = Central({BreakerPush("db", 1, 1, core::BreakerState::kClosed, 12)});
  ASSERT_TRUE(c.ok());
  seen.clear();
  for (const ReplicaOutcomes& o : c->policies[0].outcomes) {
    if (o.replica != kCentral) seen[o.replica] = o.totals.calls;  // skipped
  }
  EXPECT_EQ(seen, (std::map<std::string, uint64_t>{
                      {absl::StrCat(kCentral, "/leaves"), 4}}));
  EXPECT_EQ(recorder_.last.policies[0].outcomes.calls, 12u + 9u + 3u);
  // leaf1 restarts (its totals start again): upstream's sum never drops.
  leaf_seq_["leaf1"] = 0;
  ASSERT_TRUE(Leaf("leaf1",
                   {BreakerPush("db", 1, 1, core::BreakerState::kClosed, 2)},
                   99)
                  .ok());
  ASSERT_TRUE(Central({BreakerPush("db", 1, 1, core::BreakerState::kClosed,
                                   12)})
                  .ok());
  EXPECT_EQ(recorder_.last.policies[0].outcomes.calls, 12u + 9u + 3u + 2u);
}

TEST_F(LeaseLedgerTest, ProbeLeasesAreSummedUpstreamAndNeverOverLeased) {
  auto half_open = [](uint32_t wanted) {
    PolicyPush p = BreakerPush("db", 1, 1, core::BreakerState::kClosed);
    p.leases_wanted = wanted;
    p.lease_cap = 3;
    p.lease_ttl = absl::Seconds(1);
    return p;
  };
  ASSERT_TRUE(Central({half_open(1)}).ok());
  ASSERT_TRUE(Leaf("leaf1", {half_open(2)}).ok());
  ASSERT_TRUE(Leaf("leaf2", {half_open(2)}).ok());
  absl::StatusOr<TickReply> c = Central({half_open(1)});
  ASSERT_TRUE(c.ok());
  // 1 + 2 + 2 wished, the cap is 3.
  EXPECT_EQ(recorder_.last.policies[0].leases_wanted, 3u);
  uint32_t total = c->policies[0].leases_granted;
  absl::StatusOr<TickReply> l1 = Leaf("leaf1", {half_open(2)});
  absl::StatusOr<TickReply> l2 = Leaf("leaf2", {half_open(2)});
  ASSERT_TRUE(l1.ok() && l2.ok());
  total += l1->policies[0].leases_granted + l2->policies[0].leases_granted;
  EXPECT_LE(total, 3u);
  EXPECT_GE(total, 2u);
}

TEST_F(LeaseLedgerTest, ReportsBetweenLeavesAreDeliveredInMemory) {
  ASSERT_TRUE(Central({}).ok());
  ASSERT_TRUE(Leaf("leaf1", {}).ok());
  ASSERT_TRUE(Leaf("leaf2", {}).ok());
  TickRequest r = Request("leaf2", 7, ++leaf_seq_["leaf2"], {});
  core::ForwardedReport to_leaf;
  to_leaf.issuer = "leaf1";
  to_leaf.dependency = "db";
  core::ForwardedReport to_central = to_leaf;
  to_central.issuer = kCentral;
  core::ForwardedReport elsewhere = to_leaf;
  elsewhere.issuer = "other-central";
  r.forwarded = {to_leaf, to_central, elsewhere};
  ASSERT_TRUE(ledger_->ServeLeaf(r).ok());
  absl::StatusOr<TickReply> l1 = Leaf("leaf1", {});
  ASSERT_TRUE(l1.ok());
  ASSERT_EQ(l1->forwarded_to_me.size(), 1u);
  EXPECT_EQ(l1->forwarded_to_me[0].dependency, "db");
  absl::StatusOr<TickReply> c = Central({});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->forwarded_to_me.size(), 1u);
  ASSERT_EQ(recorder_.last.forwarded.size(), 1u);
  EXPECT_EQ(recorder_.last.forwarded[0].issuer, "other-central");
  const LedgerStats s = ledger_->stats();
  EXPECT_EQ(s.forwarded_delivered, 2u);
  EXPECT_EQ(s.forwarded_upstream, 1u);
  // The leaves know each other's ids (to forward to).
  EXPECT_NE(std::find(l1->replicas.begin(), l1->replicas.end(), "leaf2"),
            l1->replicas.end());
}

TEST_F(LeaseLedgerTest, PerKeyStaticSharesAreBudgetedForTheWholeTree) {
  ASSERT_TRUE(Central({Push("pk", {Key("hot", 100, 80)}, true)}).ok());
  ASSERT_TRUE(Leaf("leaf1", {}).ok());
  ASSERT_TRUE(Leaf("leaf2", {}).ok());
  ASSERT_TRUE(Central({Push("pk", {Key("hot", 100, 80)}, true)}).ok());
  // The store does not count weights (FakeStore answers 0): one central
  // with two leaves is three processes.
  absl::StatusOr<TickReply> l = Leaf(
      "leaf1", {Push("pk", {Key("hot", 100, 1), Key("hot", 100, 60)}, true)});
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->live_weight, 3u);
  // 3 processes x floor(100 / 4) <= 100.
  EXPECT_LE(l->live_weight * (100 / (l->live_weight + 1)), 100u);
  // A key the leaf needs no more than its static share of goes back to it.
  EXPECT_FALSE(l->policies[0].grants[0].granted);
  EXPECT_EQ(recorder_.last.weight, 3u);
}

// per_key pools: Redis (tick.lua) keeps floor(limit / live) apart for each
// process without an entry, the central's leaves included, and grants the
// central what is left. The ledger leases the leaves that plus the central's
// grant, in full; what every process applies (its static share
// floor(limit / (live + 1)) or its grant, whichever is more, the central's
// static share included) never adds up to more than the limit. A process
// takes static shares only SyncLoop::static_share_wait() (stale period +
// interval) after its first reply, as SyncLoop::AcceptMembership decides;
// the fixture also keeps what would be in force without that wait. A limit
// of 103: static shares do not divide it, so that what is leased on top of
// them shows.
class PerKeyPoolTest : public LeaseLedgerTest {
 protected:
  static constexpr int64_t kLimit = 103;

  // One round: the central ticks (it does not push the key itself; its
  // SyncLoop says it counts `central_live` processes, by default the
  // count of its last reply), then every leaf pushes the hot key with
  // `demand`. Checks the tree after each step.
  void Round(double demand = 1000, uint32_t central_live = 0) {
    clock_.Advance(kInterval);
    TickRequest c = Request(kCentral, 1, ++central_seq_, {});
    c.live_replicas = central_live > 0 ? central_live : central_live_;
    absl::StatusOr<TickReply> reply = ledger_->Tick(c);
    ASSERT_TRUE(reply.ok()) << reply.status();
    central_live_ = std::max<uint32_t>(
        {1, static_cast<uint32_t>(reply->replicas.size()),
         reply->live_weight});
    Check();
    for (auto& [id, leaf] : leaves_) {
      absl::StatusOr<TickReply> l = Leaf(
          id, {Push("pk",
                    {Key("hot", kLimit, demand, leaf.grant,
                         std::max(leaf.until - clock_.Now(),
                                  absl::ZeroDuration()))},
                    true)});
      ASSERT_TRUE(l.ok()) << l.status();
      const StoreGrant& g = l->policies[0].grants[0];
      leaf.live = std::max<uint32_t>(
          {1, static_cast<uint32_t>(l->replicas.size()), l->live_weight});
      if (!leaf.up) leaf.statics_from = clock_.Now() + kStale + kInterval;
      leaf.up = true;
      leaf.grant = g.granted ? g.units[0] : 0;
      leaf.until = clock_.Now() + std::min(kStale, g.valid_for);
      Check();
    }
  }
  void AddLeaf(const std::string& id) { leaves_[id] = {}; }
  void RemoveLeaf(const std::string& id) {
    // A clean stop: the leaf's last tick gives its membership back; its
    // engine applies nothing after it.
    TickRequest r = Request(id, 7, ++leaf_seq_[id], {});
    r.leaving = true;
    ASSERT_TRUE(ledger_->ServeLeaf(r).ok());
    leaves_.erase(id);
  }
  // What a leaf applies now: its grant while in force, and its static
  // share once its wait is over (GateSet::ClusterUnits), or (`eager`) from
  // its first reply on, as before the wait.
  int64_t Applies(const std::string& id, bool eager = false) const {
    const auto& leaf = leaves_.at(id);
    if (!leaf.up) return 0;  // no store reply yet: nothing cluster-scope
    const bool statics = eager || clock_.Now() >= leaf.statics_from;
    const int64_t base = statics ? kLimit / (leaf.live + 1) : 0;
    return std::max(base, clock_.Now() < leaf.until ? leaf.grant : 0);
  }
  int64_t LeafTotal(bool eager = false) const {
    int64_t sum = 0;
    for (const auto& [id, leaf] : leaves_) sum += Applies(id, eager);
    return sum;
  }
  // The most the tree applies, since the last Reset (the central's static
  // share always counted).
  void Check() {
    const int64_t central = kLimit / (central_live_ + 1);
    worst_ = std::max(worst_, LeafTotal() + central);
    worst_eager_ = std::max(worst_eager_, LeafTotal(true) + central);
  }
  void Reset() { worst_ = worst_eager_ = 0; }

  struct LeafState {
    bool up = false;
    uint32_t live = 1;
    int64_t grant = 0;
    absl::Time until = absl::InfinitePast();
    absl::Time statics_from = absl::InfiniteFuture();
  };
  std::map<std::string, LeafState> leaves_;
  uint32_t central_live_ = 1;
  int64_t worst_ = 0;
  int64_t worst_eager_ = 0;
};

TEST_F(PerKeyPoolTest, TheLeavesStaticSharesRedisKeepsApartAreLeasedOnTop) {
  for (const char* id : {"leaf1", "leaf2", "leaf3"}) AddLeaf(id);
  for (int i = 0; i < 4; ++i) Round();
  Reset();
  for (int i = 0; i < 4; ++i) Round();
  EXPECT_LE(worst_, kLimit);
  // 4 processes: Redis keeps 3 x floor(103 / 4) = 75 for the leaves and
  // grants the central 28. Static shares are floor(103 / 5) = 20, the
  // central's; the leaves lease 28 + 75 - 20 = 83 (27 or 28 each), where
  // before they had their static shares and nothing on top (the ledger
  // took them out of the 28).
  EXPECT_EQ(store_.Held("pk", "hot", 0), 28);
  for (const auto& [id, leaf] : leaves_) {
    EXPECT_GE(leaf.grant, 27) << id;
    EXPECT_LE(leaf.grant, 28) << id;
  }
  EXPECT_EQ(LeafTotal(), 83);
  // Upstream hears what the subtree applies above the leaves' static
  // shares (83 - 75), no more than its grant, and their demand above them.
  const core::KeyTick& up = recorder_.last.policies[0].keys[0];
  EXPECT_EQ(up.applied[0], 28);
  EXPECT_DOUBLE_EQ(up.demand[0], 3 * (1000 - 25));
  EXPECT_EQ(recorder_.last.weight, 4u);
  EXPECT_EQ(recorder_.last.live_replicas, 4u);
}

TEST_F(PerKeyPoolTest, ANewLeafTakesNoStaticShareBeforeTheLeasesThatMissedItEnd) {
  for (const char* id : {"leaf1", "leaf2", "leaf3"}) AddLeaf(id);
  for (int i = 0; i < 8; ++i) Round();
  // The pool is leased out in full. A fourth leaf that took its static
  // share from its first reply on would put the tree over the limit until
  // the others' leases shrink; it waits a stale period and an interval,
  // asking for grants meanwhile, and the tree stays within the limit.
  AddLeaf("leaf4");
  Reset();
  int64_t first_grant = -1;
  for (int i = 0; i < 8; ++i) {
    Round();
    if (first_grant < 0) first_grant = leaves_.at("leaf4").grant;
  }
  EXPECT_LE(worst_, kLimit);
  EXPECT_GT(worst_eager_, kLimit);
  std::printf("joiner: worst %lld, without the wait %lld, first grant %lld\n",
              static_cast<long long>(worst_),
              static_cast<long long>(worst_eager_),
              static_cast<long long>(first_grant));
  // 5 processes: 4 x floor(103 / 5) = 80 kept apart, 23 granted; static
  // shares are floor(103 / 6) = 17, the central's only; the leaves share
  // 23 + 80 - 17 = 86.
  EXPECT_EQ(LeafTotal(), 86);
  for (const auto& [id, leaf] : leaves_) EXPECT_GE(leaf.grant, 17) << id;
  // One leaves: its static share is no longer leased out once it is gone,
  // and the others get it a stale period later.
  RemoveLeaf("leaf4");
  Reset();
  for (int i = 0; i < 8; ++i) Round();
  EXPECT_EQ(LeafTotal(), 83);
  EXPECT_LE(worst_, kLimit);
}

TEST_F(PerKeyPoolTest, TheLargestLiveCountOfThePeriodSetsTheStaticShares) {
  for (const char* id : {"leaf1", "leaf2", "leaf3"}) AddLeaf(id);
  // The central's SyncLoop counts fewer processes than the ledger knows
  // (it has not heard of its leaves yet): the ledger tells Redis its own
  // count, so that Redis keeps a static share for every leaf.
  for (int i = 0; i < 4; ++i) Round(1000, 1);
  Reset();
  for (int i = 0; i < 4; ++i) Round(1000, 1);
  EXPECT_EQ(recorder_.last.live_replicas, 4u);
  EXPECT_EQ(LeafTotal(), 83);
  // It counts more (10: processes that left within its stale period):
  // Redis keeps floor(103 / 10) = 10 for each of 9 and grants 13; the
  // leaves are leased 13 + 3 x 10 less the central's 20, no more than
  // their static shares (20 each), once the leases in force end.
  Round(1000, 10);
  Round(1000, 10);
  EXPECT_EQ(recorder_.last.live_replicas, 10u);
  for (int i = 0; i < 6; ++i) Round(1000, 10);
  EXPECT_EQ(LeafTotal(), 60);
  // The count stays at 10 for a stale period after the last push with it.
  for (int i = 0; i < 2; ++i) Round(1000, 4);
  EXPECT_EQ(LeafTotal(), 60);
  for (int i = 0; i < 8; ++i) Round(1000, 4);
  EXPECT_EQ(LeafTotal(), 83);
  EXPECT_LE(worst_, kLimit);
}

TEST_F(LeaseLedgerTest, ACentralThatStopsKeepsItsEntryWhileLeasesAreInForce) {
  // Rounds until the leaf holds a lease: the central's first grant is the
  // whole pool, held until its next tick gives part of it back; the
  // ledger's stats are taken at the central's ticks.
  int64_t mine = 0;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<TickReply> c =
        Central({Push("api", {Key("", 100, 10, mine, kStale)})});
    ASSERT_TRUE(c.ok());
    mine = c->policies[0].grants[0].units[0];
    ASSERT_TRUE(Leaf("leaf1", {Push("api", {Key("", 100, 50)})}).ok());
  }
  ASSERT_GT(ledger_->stats().leaf_units[0], 0);
  TickRequest leave = Request(kCentral, 1, ++central_seq_,
                              {Push("api", {Key("", 100, 0, mine, kStale)})});
  leave.leaving = true;
  ASSERT_TRUE(ledger_->Tick(leave).ok());
  // Redis was not told to give the entry back: the leaf's lease is still
  // counted there until it ends.
  EXPECT_FALSE(recorder_.last.leaving);
  EXPECT_GE(store_.Held("api", "", 0), ledger_->stats().leaf_units[0]);
  EXPECT_EQ(Leaf("leaf1", {Push("api", {Key("", 100, 50)})}).status().code(),
            absl::StatusCode::kUnavailable);
  // Once nothing is leased, a stopping central gives its entry back (a new
  // life of the process: its own incarnation).
  Make();
  central_seq_ = 0;
  ASSERT_TRUE(ledger_
                  ->Tick(Request(kCentral, 2, ++central_seq_,
                                 {Push("api", {Key("", 100, 10)})}))
                  .ok());
  leave.incarnation = 2;
  leave.sequence = ++central_seq_;
  ASSERT_TRUE(ledger_->Tick(leave).ok());
  EXPECT_TRUE(recorder_.last.leaving);
}

TEST_F(LeaseLedgerTest, LeavesGetTheWarmStateTheCentralLastSaw) {
  PolicyPush warm = Push("api", {});
  warm.has_warm = true;
  warm.digest = 42;
  warm.adaptive.steady_limit = 80;
  warm.adaptive.baseline = absl::Milliseconds(12);
  ASSERT_TRUE(Central({warm}).ok());
  ASSERT_TRUE(Central({warm}).ok());  // the store answers entries stored before
  PolicyPush ask = Push("api", {});
  ask.has_warm = true;
  ask.digest = 42;
  absl::StatusOr<TickReply> l = Leaf("leaf1", {ask});
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(l->policies[0].warm.size(), 1u);
  EXPECT_EQ(l->policies[0].warm[0].replica, kCentral);
  EXPECT_EQ(l->policies[0].warm[0].adaptive.steady_limit, 80u);
  // A leaf's own warm state does not go upstream.
  ask.adaptive.steady_limit = 7;
  ask.adaptive.baseline = absl::Milliseconds(1);
  ASSERT_TRUE(Leaf("leaf1", {ask}).ok());
  ASSERT_TRUE(Central({warm}).ok());
  EXPECT_EQ(recorder_.last.policies[0].adaptive.steady_limit, 80u);
}

TEST_F(LeaseLedgerTest, LeavesAreServedWhileTheCentralTicks) {
  // Leaves on four threads while the central ticks: no lock is held across
  // the upstream call (a leaf is served from inside it), and the books add
  // up afterwards. Run under TSan/ASan it also checks the locking.
  ASSERT_TRUE(Central({Push("api", {Key("", 1000, 100)})}).ok());
  int served_inside = 0;
  recorder_.before = [&] {
    if (ledger_->ServeLeaf(Request("inside", 1, ++leaf_seq_["inside"],
                                   {Push("api", {Key("", 1000, 10)})}))
            .ok()) {
      ++served_inside;
    }
  };
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([this, t, &ok] {
      const std::string id = absl::StrCat("leaf", t);
      for (uint64_t seq = 1; seq <= 300; ++seq) {
        if (ledger_
                ->ServeLeaf(Request(id, 1, seq,
                                    {Push("api", {Key("", 1000, 50),
                                                  Key("k", 1000, 5)})}))
                .ok()) {
          ++ok;
        }
      }
    });
  }
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(Central({Push("api", {Key("", 1000, 100)})}).ok());
  }
  for (std::thread& t : threads) t.join();
  recorder_.before = nullptr;
  EXPECT_EQ(ok.load(), 1200);
  EXPECT_EQ(served_inside, 50);
  const LedgerStats s = ledger_->stats();
  EXPECT_EQ(s.leaf_ticks, 1250u);
  EXPECT_EQ(s.leaves, 5u);
  // The clock stood still: every grant issued is in force, and together
  // they stay within what the store holds for the central.
  EXPECT_LE(s.leaf_units[0] + s.self_units[0],
            store_.Held("api", "", 0) + store_.Held("api", "k", 0));
  EXPECT_GT(s.leaf_units[0], 0);
}

// The invariant, at every simulated millisecond: the grants in force under
// the central (its own and every leaf's, by each party's valid_until, lost
// replies and restarts included) never add up to more than the central's
// entry in the store holds, nor, with another replica's grant, to more than
// the limit.
class LeaseInvariantTest : public ::testing::TestWithParam<int> {};

TEST_P(LeaseInvariantTest, GrantsInForceNeverExceedTheCentralsGrant) {
  std::mt19937 rng(static_cast<uint32_t>(GetParam()));
  auto chance = [&](double p) {
    return std::uniform_real_distribution<double>(0, 1)(rng) < p;
  };
  auto between = [&](int lo, int hi) {
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  constexpr int64_t kLimit = 100;
  testing::FakeClock clock;
  testing::FakeStore store(&clock);
  RecordingStore upstream(&store);
  LeaseLedger::Options o;
  o.replica_id = kCentral;
  o.stale_after = kStale;
  o.margin = kMargin;
  LeaseLedger ledger(&upstream, &clock, o);

  struct Applied {
    int64_t units = 0;
    absl::Time until = absl::InfinitePast();
  };
  struct Party {
    Applied now;
    std::vector<Applied> ghosts;  // grants of earlier lives, until they end
    uint64_t incarnation = 1;
    uint64_t sequence = 0;
    absl::Time next;
    double demand = 0;
  };
  std::map<std::string, Party> leaves;
  for (int i = 0; i < 5; ++i) leaves[absl::StrCat("leaf", i)] = Party{};
  Party central;
  // Another replica of the same store (not under this central) competes
  // for the limit: it lowers the central's pool.
  Party other;
  int64_t other_hold = 0;
  absl::Time other_entry_until = absl::InfinitePast();
  absl::Time other_hold_until = absl::InfinitePast();
  int64_t other_entry_grant = 0;
  bool central_busy = false;
  int64_t max_seen = 0;
  uint64_t checks = 0;

  auto in_force = [](const Applied& a, absl::Time t) {
    return t < a.until ? a.units : 0;
  };
  auto check = [&] {
    const absl::Time t = clock.Now();
    int64_t tree = in_force(central.now, t);
    for (auto& [id, p] : leaves) {
      tree += in_force(p.now, t);
      for (const Applied& g : p.ghosts) tree += in_force(g, t);
    }
    int64_t other_entry = 0;
    if (t <= other_entry_until) {
      other_entry = other_entry_grant;
      if (t <= other_hold_until) other_entry = std::max(other_entry, other_hold);
    }
    const int64_t central_entry = store.Held("api", "", 0) - other_entry;
    ASSERT_LE(tree, central_entry) << "at " << t;
    ASSERT_LE(tree + in_force(other.now, t), kLimit) << "at " << t;
    max_seen = std::max(max_seen, tree);
    ++checks;
  };
  std::function<void()> step;
  auto leaf_tick = [&](const std::string& id, Party& p) {
    const absl::Time now = clock.Now();
    if (chance(0.02)) {
      // A restart: the old life's grant may still be applied by it until
      // its end (counted as a ghost); the new life has nothing.
      p.ghosts.push_back(p.now);
      p.now = Applied{};
      p.incarnation++;
      p.sequence = 0;
    }
    // The leaf's tick started a little before the central saw it.
    const absl::Time start = now - absl::Milliseconds(between(0, 20));
    core::KeyTick key = Key("", kLimit, p.demand);
    if (now < p.now.until) {
      key.applied = {p.now.units, 0};
      key.applied_left = p.now.until - start;
    }
    TickRequest r = Request(id, p.incarnation, ++p.sequence,
                            {Push("api", {key})});
    if (chance(0.05)) --r.sequence;  // a duplicate or late request
    absl::StatusOr<TickReply> reply = ledger.ServeLeaf(r);
    if (!reply.ok() || chance(0.1)) return;  // refused, or the reply lost
    const StoreGrant& g = reply->policies[0].grants[0];
    if (!g.granted) return;
    p.now.units = g.units[0];
    p.now.until = start + std::min(kStale, g.valid_for);
  };
  auto central_tick = [&] {
    if (central_busy) return;
    central_busy = true;
    const absl::Time start = clock.Now();
    core::KeyTick key = Key("", kLimit, central.demand);
    if (start < central.now.until) {
      key.applied = {central.now.units, 0};
      key.applied_left = central.now.until - start;
    }
    const bool lose = chance(0.05), fail = chance(0.05);
    // The round trip to Redis takes time, during which leaves tick.
    const int before = between(0, 40), after = between(0, 40);
    upstream.before = [&, before, lose, fail] {
      for (int i = 0; i < before; ++i) step();
      if (lose) store.LoseNextReplies(1);
      if (fail) store.FailNextTicks(1);
    };
    upstream.after = [&, after] {
      // The faults were for this tick only (a failed tick leaves the lost
      // reply pending), not for the other replica's.
      store.FailNextTicks(0);
      store.LoseNextReplies(0);
      for (int i = 0; i < after; ++i) step();
    };
    absl::StatusOr<TickReply> reply = ledger.Tick(Request(
        kCentral, 1, ++central.sequence, {Push("api", {key})}));
    upstream.before = nullptr;
    upstream.after = nullptr;
    if (reply.ok()) {
      const StoreGrant& g = reply->policies[0].grants[0];
      central.now.units = g.units[0];
      central.now.until = start + std::min(kStale, g.valid_for);
    }
    central_busy = false;
  };
  auto other_tick = [&] {
    const absl::Time now = clock.Now();
    core::KeyTick key = Key("", kLimit, other.demand);
    if (now < other.now.until) {
      key.applied = {other.now.units, 0};
      key.applied_left = other.now.until - now;
    }
    absl::StatusOr<TickReply> reply = store.Tick(
        Request("other", 1, ++other.sequence, {Push("api", {key})}));
    if (!reply.ok()) return;  // the store is down
    const StoreGrant& g = reply->policies[0].grants[0];
    other_entry_grant = g.units[0];
    other_entry_until = now + kStale;
    other_hold = key.applied[0];
    other_hold_until = now + std::min(key.applied_left, kStale);
    other.now.units = g.units[0];
    other.now.until = now + kStale;
  };
  absl::Time central_next = clock.Now();
  absl::Time other_next = clock.Now() + absl::Milliseconds(50);
  const absl::Time end = clock.Now() + absl::Seconds(30);
  step = [&] {
    clock.Advance(absl::Milliseconds(1));
    const absl::Time now = clock.Now();
    // Demands move now and then. Between 10 s and 20 s the other replica's
    // demand jumps up and down (the pool is lowered and raised again).
    if (chance(0.002)) central.demand = between(0, 80);
    for (auto& [id, p] : leaves) {
      if (chance(0.002)) p.demand = between(0, 80);
      if (now >= p.next) {
        p.next = now + absl::Milliseconds(between(20, 200));
        // One leaf goes quiet for a while now and then.
        if (!chance(0.05)) leaf_tick(id, p);
      }
    }
    const bool churn =
        now > end - absl::Seconds(20) && now < end - absl::Seconds(10);
    if (!churn) {
      other.demand = 5;
    } else if (chance(0.003)) {
      other.demand = other.demand > 50 ? 5 : 95;
    }
    if (now >= other_next) {
      other_next = now + absl::Milliseconds(100);
      other_tick();
    }
    // A store outage longer than the stale period once.
    const bool down = now > end - absl::Seconds(6) && now < end - absl::Seconds(4);
    store.SetDown(down);
    check();
    if (now >= central_next && !central_busy) {
      central_next = now + absl::Milliseconds(between(50, 150));
      central_tick();
    }
  };
  for (auto& [id, p] : leaves) p.demand = between(5, 60);
  central.demand = 20;
  while (clock.Now() < end && !::testing::Test::HasFatalFailure()) step();
  EXPECT_GE(checks, 30000u);
  // The tree was actually granted something (the check is not vacuous).
  EXPECT_GT(max_seen, kLimit / 2);
  EXPECT_GT(ledger.stats().refused_unavailable, 0u);
  EXPECT_GT(ledger.stats().refused_stale, 0u);
}

INSTANTIATE_TEST_SUITE_P(Seeds, LeaseInvariantTest, ::testing::Range(1, 17));

}  // namespace
}  // namespace sluice::cluster

namespace sluice::cluster {
namespace {

// Issue 24: the ledger answers a leaf's tick with the replica list only
// when its membership (epoch, version) differs from the one the leaf saw.
class LeaseLedgerMembershipTest : public LeaseLedgerTest {
 protected:
  // A leaf's tick that reports, and then applies, the membership it saw.
  absl::StatusOr<TickReply> Tick(const std::string& id, bool leaving = false) {
    TickRequest r = Request(id, 7, ++leaf_seq_[id], {});
    r.leaving = leaving;
    r.members_epoch_seen = seen_[id].first;
    r.members_seen = seen_[id].second;
    absl::StatusOr<TickReply> reply = ledger_->ServeLeaf(r);
    if (reply.ok() && !reply->members_unchanged) {
      seen_[id] = {reply->members_epoch, reply->members_version};
      lists_[id] = reply->replicas;
    }
    return reply;
  }
  bool Lists(const std::string& leaf, const std::string& id) {
    const std::vector<std::string>& l = lists_[leaf];
    return std::find(l.begin(), l.end(), id) != l.end();
  }

  std::map<std::string, std::pair<std::string, uint64_t>> seen_;
  std::map<std::string, std::vector<std::string>> lists_;
};

TEST_F(LeaseLedgerMembershipTest, ALeafGetsTheListOnlyWhenTheMembershipChanged) {
  ASSERT_TRUE(Central({}).ok());
  absl::StatusOr<TickReply> r = Tick("leaf1");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->members_unchanged);
  EXPECT_TRUE(Lists("leaf1", "leaf1"));
  EXPECT_TRUE(Lists("leaf1", kCentral));
  const uint32_t weight = r->live_weight;
  r = Tick("leaf1");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->members_unchanged);
  EXPECT_TRUE(r->replicas.empty());
  EXPECT_EQ(r->live_weight, weight);  // sent every time

  // A join.
  ASSERT_TRUE(Tick("leaf2").ok());
  r = Tick("leaf1");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->members_unchanged);
  EXPECT_TRUE(Lists("leaf1", "leaf2"));
  EXPECT_EQ(r->live_weight, weight + 1);
  ASSERT_TRUE(Tick("leaf2").ok());
  r = Tick("leaf1");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->members_unchanged);

  // A leave.
  ASSERT_TRUE(Tick("leaf2", /*leaving=*/true).ok());
  r = Tick("leaf1");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->members_unchanged);
  EXPECT_FALSE(Lists("leaf1", "leaf2"));

  // An expiry: leaf3 goes silent while the central and leaf1 tick.
  ASSERT_TRUE(Tick("leaf3").ok());
  ASSERT_TRUE(Tick("leaf1").ok());
  EXPECT_TRUE(Lists("leaf1", "leaf3"));
  for (int i = 0; i < 8; ++i) {
    clock_.Advance(kStale / 4);
    ASSERT_TRUE(Central({}).ok());
    ASSERT_TRUE(Tick("leaf1").ok());
  }
  EXPECT_FALSE(Lists("leaf1", "leaf3"));
  r = Tick("leaf1");
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->members_unchanged);

  // The upstream store's membership changes: another central joins.
  {
    TickRequest other = Request("central-b", 3, 1, {});
    ASSERT_TRUE(store_.Tick(other).ok());
  }
  ASSERT_TRUE(Central({}).ok());
  r = Tick("leaf1");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->members_unchanged);
  EXPECT_TRUE(Lists("leaf1", "central-b"));

  // A new life of the central (a new ledger) never answers "unchanged" to
  // what the old one listed, even at the same version.
  Make();
  ASSERT_TRUE(Central({}).ok());
  r = Tick("leaf1");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->members_unchanged);
}

// The central's own SyncLoop gets the same treatment, and the ledger asks
// its store with its own membership seen, so Redis lists the centrals
// only when they change.
TEST_F(LeaseLedgerMembershipTest, TheCentralAndItsStoreLeaveTheListOutToo) {
  TickRequest c = Request(kCentral, 1, ++central_seq_, {});
  absl::StatusOr<TickReply> r = ledger_->Tick(c);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->members_unchanged);
  EXPECT_FALSE(r->replicas.empty());
  const uint64_t kept = store_.membership_kept();
  c = Request(kCentral, 1, ++central_seq_, {});
  c.members_epoch_seen = r->members_epoch;
  c.members_seen = r->members_version;
  r = ledger_->Tick(c);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->members_unchanged);
  EXPECT_TRUE(r->replicas.empty());
  EXPECT_EQ(store_.membership_kept(), kept + 1);
  EXPECT_FALSE(recorder_.last.members_epoch_seen.empty());
  // A leaf joins: the central's next reply lists it.
  ASSERT_TRUE(Tick("leaf1").ok());
  c = Request(kCentral, 1, ++central_seq_, {});
  c.members_epoch_seen = r->members_epoch;
  c.members_seen = r->members_version;
  r = ledger_->Tick(c);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->members_unchanged);
  EXPECT_NE(std::find(r->replicas.begin(), r->replicas.end(), "leaf1"),
            r->replicas.end());
}

// Outcomes in replies: a leaf is answered the other centrals' entries and
// one for the central and all its other leaves.

PolicyPush OutcomePush(uint64_t calls, uint64_t failures) {
  PolicyPush p = BreakerPush("db", 1, 1, core::BreakerState::kClosed, calls);
  p.outcomes.failures = failures;
  return p;
}

// What a replica's SyncLoop counts from the outcomes in its pulls, as
// SyncLoop::ApplyBreakerRecords does: per other replica, what its totals
// grew since the last pull that named it; nothing on a first sight or when
// its calls dropped; a replica a pull leaves out is forgotten. Also checks
// that no entry ever drops (a drop makes a SyncLoop skip that tick).
class OutcomeView {
 public:
  explicit OutcomeView(std::string self) : self_(std::move(self)) {}

  void Take(const absl::StatusOr<TickReply>& reply) {
    ASSERT_TRUE(reply.ok()) << reply.status();
    ASSERT_EQ(reply->policies.size(), 1u);
    std::map<std::string, core::OutcomeTotals> next;
    for (const ReplicaOutcomes& o : reply->policies[0].outcomes) {
      if (o.replica == self_) continue;
      auto before = seen_.find(o.replica);
      if (before != seen_.end()) {
        const core::OutcomeTotals& b = before->second;
        EXPECT_GE(o.totals.calls, b.calls) << self_ << " sees " << o.replica;
        EXPECT_GE(o.totals.failures, b.failures)
            << self_ << " sees " << o.replica;
        if (o.totals.calls >= b.calls) {
          calls += o.totals.calls - b.calls;
          failures += o.totals.failures >= b.failures
                          ? o.totals.failures - b.failures
                          : 0;
        }
      }
      next[o.replica] = o.totals;
    }
    seen_ = std::move(next);
  }

  uint64_t calls = 0;
  uint64_t failures = 0;

 private:
  std::string self_;
  std::map<std::string, core::OutcomeTotals> seen_;
};

TEST_F(LeaseLedgerTest, ALeafsReplyCarriesOneEntryForTheCentralAndItsLeaves) {
  ASSERT_TRUE(Central({OutcomePush(0, 0)}).ok());
  // Another central, straight on the store.
  TickRequest other = Request("other-central", 9, 1, {OutcomePush(40, 4)});
  ASSERT_TRUE(store_.Tick(other).ok());
  ASSERT_TRUE(Central({OutcomePush(0, 0)}).ok());
  constexpr int kLeaves = 50;
  for (int round = 1; round <= 2; ++round) {
    for (int i = 0; i < kLeaves; ++i) {
      const std::string id = absl::StrCat("leaf", i);
      absl::StatusOr<TickReply> r = Leaf(id, {OutcomePush(round * 10, round)});
      ASSERT_TRUE(r.ok()) << r.status();
      if (round == 1) continue;
      std::map<std::string, uint64_t> seen;
      for (const ReplicaOutcomes& o : r->policies[0].outcomes) {
        seen[o.replica] = o.totals.calls;
      }
      // The others' growth this round: 10 calls for each leaf before it.
      EXPECT_EQ(seen, (std::map<std::string, uint64_t>{
                          {"other-central", 40},
                          {absl::StrCat(kCentral, "/subtree"),
                           static_cast<uint64_t>(i) * 10}}))
          << id;
    }
  }
  // The central's own view: the other central and its leaves as one.
  absl::StatusOr<TickReply> c = Central({OutcomePush(0, 0)});
  ASSERT_TRUE(c.ok());
  std::map<std::string, uint64_t> seen;
  for (const ReplicaOutcomes& o : c->policies[0].outcomes) {
    // Its own entry as the store has it is there too (its SyncLoop skips
    // it).
    if (o.replica != kCentral) seen[o.replica] = o.totals.calls;
  }
  EXPECT_EQ(seen, (std::map<std::string, uint64_t>{
                      {"other-central", 40},
                      {absl::StrCat(kCentral, "/leaves"), kLeaves * 10}}));
}

TEST_F(LeaseLedgerTest, ALeafsFailuresReachTheOthersOnceAndNeverItself) {
  OutcomeView central(kCentral), a("a"), b("b");
  central.Take(Central({OutcomePush(5, 1)}));
  for (int i = 0; i < 2; ++i) {
    a.Take(Leaf("a", {OutcomePush(10, 2)}));
    b.Take(Leaf("b", {OutcomePush(7, 0)}));
    central.Take(Central({OutcomePush(5, 1)}));
  }
  EXPECT_EQ(a.failures + b.failures + central.failures, 0u);
  // A burst on a: b sees it at its next tick, the central at its own.
  a.Take(Leaf("a", {OutcomePush(30, 17)}));
  EXPECT_EQ(a.failures, 0u);
  b.Take(Leaf("b", {OutcomePush(7, 0)}));
  EXPECT_EQ(b.calls, 20u);
  EXPECT_EQ(b.failures, 15u);
  central.Take(Central({OutcomePush(5, 1)}));
  EXPECT_EQ(central.failures, 15u);
  // The central's failures and b's reach a, and each the other.
  central.Take(Central({OutcomePush(9, 4)}));
  b.Take(Leaf("b", {OutcomePush(9, 2)}));
  a.Take(Leaf("a", {OutcomePush(30, 17)}));
  central.Take(Central({OutcomePush(9, 4)}));
  EXPECT_EQ(a.failures, 3u + 2u);
  EXPECT_EQ(b.failures, 15u + 3u);
  EXPECT_EQ(central.failures, 15u + 2u);
  // Nothing new: nobody counts anything twice.
  a.Take(Leaf("a", {OutcomePush(30, 17)}));
  b.Take(Leaf("b", {OutcomePush(9, 2)}));
  central.Take(Central({OutcomePush(9, 4)}));
  EXPECT_EQ(a.failures, 5u);
  EXPECT_EQ(b.failures, 18u);
  EXPECT_EQ(central.failures, 17u);
}

TEST_F(LeaseLedgerTest, ARestartedLeafMakesNoOneSeeADropOrItsPastAgain) {
  OutcomeView central(kCentral), b("b");
  central.Take(Central({OutcomePush(0, 0)}));
  for (int i = 0; i < 3; ++i) {
    // a's totals grow in the last round only, once b knows the central's
    // entry.
    ASSERT_TRUE(Leaf("a", {OutcomePush(i < 2 ? 100 : 200, i < 2 ? 50 : 100)})
                    .ok());
    b.Take(Leaf("b", {OutcomePush(0, 0)}));
    central.Take(Central({OutcomePush(0, 0)}));
  }
  EXPECT_EQ(b.failures, 50u);
  EXPECT_EQ(central.failures, 50u);
  // a restarts: a new life, its totals from 0. Its first push is not news
  // (the others would not have counted it either); what it adds after is.
  leaf_seq_["a"] = 0;
  OutcomeView a("a");
  a.Take(Leaf("a", {OutcomePush(4, 1)}, 99));
  b.Take(Leaf("b", {OutcomePush(0, 0)}));
  central.Take(Central({OutcomePush(0, 0)}));
  EXPECT_EQ(b.failures, 50u);
  EXPECT_EQ(central.failures, 50u);
  a.Take(Leaf("a", {OutcomePush(14, 9)}, 99));
  b.Take(Leaf("b", {OutcomePush(3, 3)}));
  central.Take(Central({OutcomePush(0, 0)}));
  a.Take(Leaf("a", {OutcomePush(14, 9)}, 99));
  EXPECT_EQ(b.failures, 50u + 8u);
  EXPECT_EQ(central.failures, 50u + 8u + 3u);
  // The new life sees b's failures, not its own nor its past life's.
  EXPECT_EQ(a.failures, 3u);
}

TEST_F(LeaseLedgerTest, AnExpiredLeafLeavesTheSumWhereItWas) {
  OutcomeView central(kCentral), a("a"), b("b");
  central.Take(Central({OutcomePush(0, 0)}));
  for (int i = 0; i < 3; ++i) {
    a.Take(Leaf("a", {OutcomePush(i < 2 ? 10 : 40, i < 2 ? 0 : 30)}));
    b.Take(Leaf("b", {OutcomePush(0, 0)}));
    central.Take(Central({OutcomePush(0, 0)}));
  }
  EXPECT_EQ(b.failures, 30u);
  // a goes silent and is dropped; b and the central tick on.
  for (int i = 0; i < 12; ++i) {
    clock_.Advance(kStale / 4);
    b.Take(Leaf("b", {OutcomePush(0, 0)}));
    central.Take(Central({OutcomePush(0, 0)}));
  }
  EXPECT_EQ(ledger_->stats().leaves, 1u);
  EXPECT_EQ(b.failures, 30u);
  EXPECT_EQ(central.failures, 30u);
  // a comes back in the same life with more failures: it is news from
  // its second push on, to the others; a never counts its own past.
  a.Take(Leaf("a", {OutcomePush(60, 40)}));
  a.Take(Leaf("a", {OutcomePush(70, 45)}));
  b.Take(Leaf("b", {OutcomePush(1, 1)}));
  central.Take(Central({OutcomePush(0, 0)}));
  a.Take(Leaf("a", {OutcomePush(70, 45)}));
  EXPECT_EQ(a.failures, 1u);
  EXPECT_EQ(b.failures, 35u);
  EXPECT_EQ(central.failures, 36u);
}

TEST_F(LeaseLedgerTest, ALeafThatMovesToAnotherCentralCountsNoHistory) {
  LeaseLedger::Options o;
  o.replica_id = "central-b";
  o.stale_after = kStale;
  o.interval = kInterval;
  o.margin = kMargin;
  LeaseLedger other(&store_, &clock_, o);
  uint64_t other_seq = 0;
  auto other_central = [&](uint64_t calls, uint64_t failures) {
    return other.Tick(
        Request("central-b", 1, ++other_seq, {OutcomePush(calls, failures)}));
  };
  // History: the central, and leaf b under it, saw many failures.
  OutcomeView a("a");
  ASSERT_TRUE(Central({OutcomePush(1000, 500)}).ok());
  ASSERT_TRUE(other_central(0, 0).ok());
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(Leaf("b", {OutcomePush(200, 100)}).ok());
    a.Take(Leaf("a", {OutcomePush(300, 100)}));
    ASSERT_TRUE(Central({OutcomePush(1000, 500)}).ok());
    ASSERT_TRUE(other_central(0, 0).ok());
  }
  a.Take(Leaf("a", {OutcomePush(300, 100)}));
  EXPECT_EQ(a.failures, 0u);
  // a moves to central-b, which answers the first central's totals as the
  // store has them (its leaves' included): news only from there on.
  for (int i = 0; i < 2; ++i) {
    a.Take(other.ServeLeaf(Request("a", 7, ++leaf_seq_["a"],
                                   {OutcomePush(300, 100)})));
  }
  EXPECT_EQ(a.failures, 0u);
  ASSERT_TRUE(Central({OutcomePush(1010, 505)}).ok());
  ASSERT_TRUE(other_central(3, 2).ok());
  ASSERT_TRUE(other_central(3, 2).ok());
  a.Take(other.ServeLeaf(Request("a", 7, ++leaf_seq_["a"],
                                 {OutcomePush(300, 100)})));
  EXPECT_EQ(a.failures, 5u + 2u);
}

// The central's own grant ends where the ledger counts it to end: a unit
// it holds above its whole share, taking turns with a leaf at slot
// boundaries, is not applied by the central past the boundary after which
// the leaf holds it, even when the central's next tick comes late (it
// said at its last tick that it applied nothing). Both tick every
// interval, the leaf also when told to, and the central stalls after each
// tick that gave it the unit; both apply each grant from their tick's
// start for valid_for, and say what they apply at their next tick.
TEST_F(LeaseLedgerTest, TheCentralsGrantEndsWhereTheLedgerCountsIt) {
  struct Party {
    int64_t units = 0;
    absl::Time until = absl::InfinitePast();
    absl::Time next = absl::InfinitePast();
  };
  auto applied = [](const Party& p, absl::Time now) {
    return Key("", 1, 1, now < p.until ? p.units : 0,
               now < p.until ? p.until - now : absl::ZeroDuration());
  };
  auto in_force = [](const Party& p, absl::Time now) {
    return now < p.until ? p.units : 0;
  };
  Party central, leaf;
  const absl::Time start = clock_.Now();
  leaf.next = start + absl::Milliseconds(150);
  int64_t central_ms = 0, leaf_ms = 0;
  for (int ms = 0; ms < 8000; ++ms) {
    const absl::Time now = clock_.Now();
    if (now >= central.next) {
      absl::StatusOr<TickReply> c =
          Central({Push("api", {applied(central, now)})});
      ASSERT_TRUE(c.ok()) << c.status();
      const StoreGrant& g = c->policies[0].grants[0];
      const bool gained = in_force(central, now) == 0 && g.units[0] > 0;
      central.units = g.granted ? g.units[0] : 0;
      central.until = now + std::min(kStale, g.valid_for);
      central.next = now + (gained ? 2 * kInterval : kInterval);
    }
    if (now >= leaf.next) {
      absl::StatusOr<TickReply> l =
          Leaf("leaf1", {Push("api", {applied(leaf, now)})});
      ASSERT_TRUE(l.ok()) << l.status();
      const StoreGrant& g = l->policies[0].grants[0];
      leaf.units = g.granted ? g.units[0] : 0;
      leaf.until = now + std::min(kStale, g.valid_for);
      leaf.next =
          now + (l->tick_again_in > absl::ZeroDuration()
                     ? std::clamp(l->tick_again_in, kMinTickGap, kInterval)
                     : kInterval);
    }
    ASSERT_LE(in_force(central, now) + in_force(leaf, now), 1)
        << "at +" << (now - start);
    central_ms += in_force(central, now);
    leaf_ms += in_force(leaf, now);
    clock_.Advance(absl::Milliseconds(1));
  }
  // The unit took turns (the check is not vacuous), and was seldom idle.
  EXPECT_GT(central_ms, 2000);
  EXPECT_GT(leaf_ms, 2000);
  EXPECT_GT(central_ms + leaf_ms, 6500);
}

// A leaf's usual tick comes just after the central's next upstream round
// has returned (the round starts an interval after the last one returned
// and takes a round trip), at an offset of the leaf's own within a quarter
// of the interval, and never more than an interval away: a breaker another
// central stored reaches the leaf then, not an interval later. The ledger
// follows the central's latest round (an early tick moves the cadence), one
// under way included, and does not align while the last round failed.
TEST_F(LeaseLedgerTest, ALeafTicksJustAfterTheCentralsNextRound) {
  constexpr absl::Duration kTrip = absl::Milliseconds(10);
  recorder_.after = [this] { clock_.Advance(kTrip); };
  auto central = [&] {
    const absl::Time start = clock_.Now();
    EXPECT_TRUE(Central({Push("api", {Key("", 100, 10)})}).ok());
    return start;
  };
  // When a leaf with nothing owed is told to tick next.
  auto told = [&](const std::string& id) {
    absl::StatusOr<TickReply> r = Leaf(id, {});
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return absl::InfinitePast();
    EXPECT_GE(r->tick_again_in, kMinTickGap);
    EXPECT_LE(r->tick_again_in, kInterval);
    return clock_.Now() + r->tick_again_in;
  };
  absl::Time start = central();
  absl::Time next_round = start + kTrip + kInterval + kTrip;
  clock_.Advance(kInterval / 2);
  const absl::Duration offset = told("leaf0") - next_round;
  EXPECT_GE(offset, absl::ZeroDuration());
  EXPECT_LT(offset, kInterval / 4);
  // The offset is the leaf's own, the same at another time; the leaves'
  // offsets spread over the quarter.
  clock_.Advance(absl::Milliseconds(30));
  EXPECT_EQ(told("leaf0") - next_round, offset);
  absl::Duration least = absl::InfiniteDuration();
  absl::Duration most = -absl::InfiniteDuration();
  for (int i = 1; i < 50; ++i) {
    const absl::Duration o = told(absl::StrCat("leaf", i)) - next_round;
    EXPECT_GE(o, absl::ZeroDuration()) << "leaf" << i;
    EXPECT_LT(o, kInterval / 4) << "leaf" << i;
    least = std::min(least, o);
    most = std::max(most, o);
  }
  EXPECT_LT(least, kInterval / 16);
  EXPECT_GT(most, kInterval / 4 - kInterval / 16);

  // An early central tick (a nudge) moves the cadence.
  start = central();
  next_round = start + kTrip + kInterval + kTrip;
  clock_.Advance(kInterval / 2);
  EXPECT_EQ(told("leaf0") - next_round, offset);

  // A leaf served while a round is under way aims just after it returns,
  // or as soon as it may tick again.
  absl::Time inside = absl::InfinitePast();
  recorder_.before = [&] { inside = told("leaf0"); };
  start = central();
  recorder_.before = nullptr;
  EXPECT_EQ(inside, std::max(start + kTrip + offset, start + kMinTickGap));

  // The last round failed: the central retries at its own pace, and the
  // leaf, owed nothing, is asked back an interval later, or when the
  // central starts refusing leaves (a handoff before its grants end, a
  // stale period after its last good round) if that comes sooner.
  const absl::Time last_good = start;
  clock_.Advance(kInterval / 2);
  store_.FailNextTicks(1);
  EXPECT_FALSE(Central({Push("api", {Key("", 100, 10)})}).ok());
  absl::StatusOr<TickReply> r = Leaf("leaf0", {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tick_again_in, kInterval);
  const absl::Time refused_from = last_good + kStale - kHandoff;
  clock_.Advance(refused_from - kInterval / 2 - clock_.Now());
  r = Leaf("leaf0", {});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tick_again_in, kInterval / 2);
  clock_.Advance(kInterval / 2);
  EXPECT_EQ(Leaf("leaf0", {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // The next good round aligns it again.
  start = central();
  next_round = start + kTrip + kInterval + kTrip;
  clock_.Advance(kInterval / 2);
  EXPECT_EQ(told("leaf0") - next_round, offset);
}

}  // namespace
}  // namespace sluice::cluster

namespace sluice::cluster {
namespace {

// Issue 24, quiet policies: a leaf leaves a policy with nothing to push out
// of its tick, and hears of that policy's breaker record changes in
// TickReply::breakers instead of its pull.
// A limit lowered from 1000 to 100 reaches a leaf before its central's
// pool is split again: the leaf pushes the new limit and applies what it is
// granted as a grant under 100, so the ledger scales its share of the pool
// (split under 1000) by 100/1000, as the engine scales a grant split under
// a higher limit. Unscaled, the leaf would apply min(share, 100) = 100 while
// the central still applies its share of the old split.
TEST_F(LeaseLedgerTest, AGrantFromAPoolSplitUnderAHigherLimitIsScaled) {
  int64_t central_units = 0;
  auto central = [&](int64_t limit) {
    absl::StatusOr<TickReply> c = Central(
        {Push("api", {Key("", limit, 300, central_units, kStale)})});
    ASSERT_TRUE(c.ok()) << c.status();
    central_units = c->policies[0].grants[0].units[0];
  };
  central(1000);
  int64_t before = 0;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<TickReply> l =
        Leaf("leaf1", {Push("api", {Key("", 1000, 600, before, kStale)})});
    ASSERT_TRUE(l.ok()) << l.status();
    before = l->policies[0].grants[0].units[0];
    clock_.Advance(absl::Milliseconds(250));
    central(1000);
  }
  ASSERT_GE(before, 500);
  absl::StatusOr<TickReply> lowered =
      Leaf("leaf1", {Push("api", {Key("", 100, 600, before, kStale)})});
  ASSERT_TRUE(lowered.ok()) << lowered.status();
  const int64_t after = lowered->policies[0].grants[0].units[0];
  EXPECT_EQ(after, before * 100 / 1000);
  // What both apply under the new limit (the central's engine scales its
  // own grant, split under 1000, the same way) stays within it.
  EXPECT_LE(after + central_units * 100 / 1000, 100);
}

class LeaseLedgerBreakersTest : public LeaseLedgerTest {
 protected:
  // A leaf's tick that reports, and then takes, the breakers version it
  // saw, as the leaf's SyncLoop does.
  absl::StatusOr<TickReply> Tick(const std::string& id,
                                 std::vector<PolicyPush> policies = {}) {
    TickRequest r = Request(id, 7, ++leaf_seq_[id], std::move(policies));
    r.breakers_epoch_seen = seen_[id].first;
    r.breakers_seen = seen_[id].second;
    absl::StatusOr<TickReply> reply = ledger_->ServeLeaf(r);
    if (reply.ok()) {
      seen_[id] = {reply->breakers_epoch, reply->breakers_version};
    }
    return reply;
  }

  // The central and leaf1 push db CLOSED at the stored generation (*g0).
  void DbClosedAtLeaf1(uint64_t* g0) {
    ASSERT_TRUE(
        Central({BreakerPush("db", 0, 0, core::BreakerState::kClosed)}).ok());
    *g0 = store_.Breaker("db")->generation;
    ASSERT_TRUE(Tick("leaf1", {BreakerPush("db", *g0, *g0,
                                           core::BreakerState::kClosed)})
                    .ok());
  }

  std::map<std::string, std::pair<uint64_t, uint64_t>> seen_;
};

// The policies a reply's `breakers` names, in order.
std::vector<std::string> Named(const TickReply& reply) {
  std::vector<std::string> names;
  for (const PolicyBreaker& b : reply.breakers) names.push_back(b.policy);
  return names;
}

TEST_F(LeaseLedgerBreakersTest, ALeafThatLeftAPolicyOutHearsOfItsTripOnce) {
  absl::StatusOr<TickReply> c =
      Central({BreakerPush("db", 0, 0, core::BreakerState::kClosed)});
  ASSERT_TRUE(c.ok()) << c.status();
  // The central's own tick answers as upstream (Redis) does: no breakers
  // version, so its SyncLoop keeps pushing every policy.
  EXPECT_EQ(c->breakers_epoch, 0u);
  EXPECT_TRUE(c->breakers.empty());
  const uint64_t g0 = store_.Breaker("db")->generation;
  absl::StatusOr<TickReply> l =
      Tick("leaf1", {BreakerPush("db", g0, g0, core::BreakerState::kClosed)});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_NE(l->breakers_epoch, 0u);
  EXPECT_TRUE(l->breakers.empty());  // db is in the pull
  // Quiet: db left out, nothing changed, nothing to hear.
  l = Tick("leaf1");
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->breakers.empty());

  // leaf2 trips db.
  ASSERT_TRUE(
      Tick("leaf2", {BreakerPush("db", g0, g0 + 1, core::BreakerState::kOpen)})
          .ok());
  l = Tick("leaf1");
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(Named(*l), std::vector<std::string>{"db"});
  EXPECT_EQ(l->breakers[0].record.generation, g0 + 1);
  EXPECT_EQ(l->breakers[0].record.state, core::BreakerState::kOpen);
  EXPECT_EQ(l->breakers[0].record.replica, "leaf2");
  // Once: the next tick saw it.
  l = Tick("leaf1");
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->breakers.empty());
  // Upstream's copy of the same record (named under the central's id from
  // its second tick on, times to the millisecond) is no news either.
  for (int i = 0; i < 2; ++i) {
    clock_.Advance(absl::Milliseconds(100));
    ASSERT_TRUE(
        Central({BreakerPush("db", g0 + 1, g0 + 1, core::BreakerState::kOpen)})
            .ok());
    l = Tick("leaf1");
    ASSERT_TRUE(l.ok());
    EXPECT_TRUE(l->breakers.empty()) << "central tick " << i;
  }
  EXPECT_EQ(store_.Breaker("db")->generation, g0 + 1);
}

TEST_F(LeaseLedgerBreakersTest, ALeafOfAnotherEpochGetsEveryRecord) {
  ASSERT_TRUE(Central({BreakerPush("db", 0, 0, core::BreakerState::kClosed),
                       BreakerPush("api", 0, 0, core::BreakerState::kClosed)})
                  .ok());
  // A new leaf (epoch 0): every record.
  absl::StatusOr<TickReply> l = Tick("leaf1");
  ASSERT_TRUE(l.ok()) << l.status();
  std::vector<std::string> names = Named(*l);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"api", "db"}));
  for (const PolicyBreaker& b : l->breakers) {
    EXPECT_EQ(b.record.generation, store_.Breaker(b.policy)->generation)
        << b.policy;
  }
  const auto [epoch, version] = seen_["leaf1"];
  l = Tick("leaf1");
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->breakers.empty());
  // An epoch of another central (or an earlier life of this one), or a
  // version this life never answered: every record again.
  for (const auto& [stale_epoch, stale_version] :
       std::vector<std::pair<uint64_t, uint64_t>>{
           {epoch + 1, version}, {epoch, version + 5}, {0, 0}}) {
    seen_["leaf1"] = {stale_epoch, stale_version};
    l = Tick("leaf1");
    ASSERT_TRUE(l.ok());
    EXPECT_EQ(l->breakers.size(), 2u) << stale_epoch << " " << stale_version;
    EXPECT_EQ(l->breakers_epoch, epoch);
    EXPECT_EQ(l->breakers_version, version);
  }
}

TEST_F(LeaseLedgerBreakersTest, APushedPolicyIsNeverInBreakers) {
  ASSERT_TRUE(Central({BreakerPush("db", 0, 0, core::BreakerState::kClosed),
                       BreakerPush("api", 0, 0, core::BreakerState::kClosed)})
                  .ok());
  const uint64_t g0 = store_.Breaker("db")->generation;
  auto db = [&](uint64_t base) {
    return BreakerPush("db", base, base, core::BreakerState::kClosed);
  };
  // A new leaf pushing db: only api's record.
  absl::StatusOr<TickReply> l = Tick("leaf1", {db(g0)});
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(Named(*l), std::vector<std::string>{"api"});
  // db trips while leaf1 pushes it: in its pull, not in breakers.
  ASSERT_TRUE(
      Tick("leaf2", {BreakerPush("db", g0, g0 + 1, core::BreakerState::kOpen)})
          .ok());
  l = Tick("leaf1", {db(g0)});
  ASSERT_TRUE(l.ok());
  ASSERT_TRUE(l->policies[0].breaker.has_value());
  EXPECT_EQ(l->policies[0].breaker->generation, g0 + 1);
  EXPECT_TRUE(l->breakers.empty());
  // It saw that version; left out now, db is no news.
  l = Tick("leaf1");
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->breakers.empty());
}

TEST_F(LeaseLedgerBreakersTest, ARecordChangedUpstreamReachesALeafThatLeftItOut) {
  uint64_t g0 = 0;
  ASSERT_NO_FATAL_FAILURE(DbClosedAtLeaf1(&g0));
  // Another central trips db in the store; this central takes the record
  // with its next tick.
  TickRequest other = Request("other-central", 9, 1,
                              {BreakerPush("db", g0, g0 + 5,
                                           core::BreakerState::kOpen)});
  ASSERT_TRUE(store_.Tick(other).ok());
  absl::StatusOr<TickReply> l = Tick("leaf1");
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->breakers.empty());  // not taken yet
  ASSERT_TRUE(
      Central({BreakerPush("db", g0, g0, core::BreakerState::kClosed)}).ok());
  l = Tick("leaf1");
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(Named(*l), std::vector<std::string>{"db"});
  EXPECT_EQ(l->breakers[0].record.generation, g0 + 5);
  EXPECT_EQ(l->breakers[0].record.state, core::BreakerState::kOpen);
  EXPECT_EQ(l->breakers[0].record.replica, "other-central");
  l = Tick("leaf1");
  ASSERT_TRUE(l.ok());
  EXPECT_TRUE(l->breakers.empty());
}

// A transition the ledger accepted that upstream refuses gives way to the
// other writer's record, even under the same generation: leaves told of
// the first hear of the second.
TEST_F(LeaseLedgerBreakersTest, AnotherWritersRecordUnderTheSameGenerationIsNews) {
  uint64_t g0 = 0;
  ASSERT_NO_FATAL_FAILURE(DbClosedAtLeaf1(&g0));
  ASSERT_TRUE(
      Tick("leaf2", {BreakerPush("db", g0, g0 + 1, core::BreakerState::kOpen)})
          .ok());
  absl::StatusOr<TickReply> l = Tick("leaf1");
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(Named(*l), std::vector<std::string>{"db"});
  EXPECT_EQ(l->breakers[0].record.replica, "leaf2");
  // Another central's transition from the same base reached the store
  // first, as generation g0 + 1 too.
  PolicyPush theirs = BreakerPush("db", g0, g0 + 1, core::BreakerState::kOpen);
  theirs.breaker.cause = "theirs";
  ASSERT_TRUE(store_.Tick(Request("other-central", 9, 1, {theirs})).ok());
  ASSERT_TRUE(
      Central({BreakerPush("db", g0, g0, core::BreakerState::kClosed)}).ok());
  ASSERT_EQ(ledger_->stats().breaker_upstream_refused, 1u);
  l = Tick("leaf1");
  ASSERT_TRUE(l.ok());
  ASSERT_EQ(Named(*l), std::vector<std::string>{"db"});
  EXPECT_EQ(l->breakers[0].record.generation, g0 + 1);
  EXPECT_EQ(l->breakers[0].record.replica, "other-central");
  EXPECT_EQ(l->breakers[0].record.cause, "theirs");
}

// A store that lost its records rebuilds one from the first replica that
// pushes: another state under the same generation is news too.
TEST_F(LeaseLedgerBreakersTest, ARebuiltRecordOfAnotherStateIsNews) {
  uint64_t g0 = 0;
  ASSERT_NO_FATAL_FAILURE(DbClosedAtLeaf1(&g0));
  store_.WipeAll();
  ASSERT_TRUE(store_.Tick(Request("other-central", 9, 1,
                                  {BreakerPush("db", g0, g0,
                                               core::BreakerState::kOpen)}))
                  .ok());
  ASSERT_EQ(store_.Breaker("db")->generation, g0);
  ASSERT_TRUE(
      Central({BreakerPush("db", g0, g0, core::BreakerState::kClosed)}).ok());
  absl::StatusOr<TickReply> l = Tick("leaf1");
  ASSERT_TRUE(l.ok()) << l.status();
  ASSERT_EQ(Named(*l), std::vector<std::string>{"db"});
  EXPECT_EQ(l->breakers[0].record.generation, g0);
  EXPECT_EQ(l->breakers[0].record.state, core::BreakerState::kOpen);
}

// Leaving a policy out is not giving it up: the leaf's outcome totals stay,
// so that its next push of them counts only what they grew.
TEST_F(LeaseLedgerBreakersTest, ALeftOutPolicyKeepsTheLeafsOutcomeTotals) {
  ASSERT_TRUE(Central({OutcomePush(10, 0)}).ok());
  ASSERT_TRUE(Tick("leaf1", {OutcomePush(5, 1)}).ok());
  // Quiet for longer than a stale period (the leaf itself keeps ticking).
  for (int i = 0; i < 4; ++i) {
    clock_.Advance(kStale / 2);
    ASSERT_TRUE(Central({OutcomePush(10, 0)}).ok());
    ASSERT_TRUE(Tick("leaf1").ok());
  }
  absl::StatusOr<TickReply> l = Tick("leaf1", {OutcomePush(8, 2)});
  ASSERT_TRUE(l.ok()) << l.status();
  // Not a first sight: the entry for the central and its other leaves is
  // there.
  ASSERT_EQ(l->policies[0].outcomes.size(), 1u);
  EXPECT_EQ(l->policies[0].outcomes[0].replica,
            absl::StrCat(kCentral, "/subtree"));
  ASSERT_TRUE(Central({OutcomePush(10, 0)}).ok());
  // 10 + 8: the leaf's 5 counted once, then the 3 it grew.
  EXPECT_EQ(recorder_.last.policies[0].outcomes.calls, 10u + 8u);
}

}  // namespace
}  // namespace sluice::cluster
