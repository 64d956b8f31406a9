// SPDX-License-Identifier: Apache-2.0
#include "server/core/permit_ledger.h"

#include <cstdint>
#include <deque>
#include <random>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "tests/testing/fake_clock.h"

namespace sluice::core {
namespace {

using Permit = PermitLedger::Permit;

const absl::Time kT0 = testing::FakeClock::DefaultStart();
constexpr uint64_t kSeqMask = (uint64_t{1} << 40) - 1;

// The id the ledger issues after `id`: same epoch, next 40-bit sequence.
uint64_t NextId(uint64_t id) {
  return (id & ~kSeqMask) | ((id + 1) & kSeqMask);
}

uint64_t IssueAt(PermitLedger& ledger, absl::Time t,
                 absl::Duration ttl = absl::Seconds(2),
                 bool holds_slot = false, uint64_t probe_round = 0) {
  Permit evicted;
  const uint64_t id =
      ledger.Issue(t, t + ttl, holds_slot, probe_round, nullptr, &evicted);
  EXPECT_EQ(evicted.id, 0u);
  return id;
}

TEST(PermitLedgerTest, IssueAndRetire) {
  PermitLedger ledger({7, 1});
  EXPECT_EQ(ledger.epoch(), 7u);
  Permit evicted;
  const uint64_t a = ledger.Issue(kT0, kT0 + absl::Seconds(2), true, 0,
                                  nullptr, &evicted);
  EXPECT_EQ(evicted.id, 0u);
  const uint64_t b = ledger.Issue(kT0 + absl::Seconds(1),
                                  kT0 + absl::Seconds(3), false, 5, nullptr, &evicted);
  EXPECT_NE(a, 0u);
  EXPECT_NE(b, 0u);
  EXPECT_NE(a, b);
  EXPECT_EQ(a >> 40, 7u);  // the epoch sits in the high bits
  EXPECT_EQ(b >> 40, 7u);
  EXPECT_EQ(ledger.live(), 2u);

  Permit out;
  ASSERT_TRUE(ledger.Retire(b, &out));
  EXPECT_EQ(out.id, b);
  EXPECT_EQ(out.issued, kT0 + absl::Seconds(1));
  EXPECT_EQ(out.deadline, kT0 + absl::Seconds(3));
  EXPECT_FALSE(out.holds_slot);
  EXPECT_EQ(out.probe_round, 5u);
  EXPECT_EQ(ledger.live(), 1u);
  EXPECT_FALSE(ledger.Retire(b, &out));  // repeated

  ASSERT_TRUE(ledger.Retire(a, &out));
  EXPECT_EQ(out.id, a);
  EXPECT_TRUE(out.holds_slot);
  EXPECT_EQ(out.probe_round, 0u);
  EXPECT_EQ(ledger.live(), 0u);
}

TEST(PermitLedgerTest, UnknownIdsDoNotMatch) {
  PermitLedger ledger({3, 1});
  const uint64_t a = IssueAt(ledger, kT0);
  Permit out;
  EXPECT_FALSE(ledger.Retire(0, &out));
  EXPECT_FALSE(ledger.Retire(a + 1, &out));  // not issued yet
  EXPECT_FALSE(ledger.Retire(a + 1024, &out));
  EXPECT_FALSE(ledger.Retire(~uint64_t{0}, &out));
  EXPECT_EQ(ledger.live(), 1u);
  EXPECT_TRUE(ledger.Retire(a, &out));
}

TEST(PermitLedgerTest, EpochMismatchDoesNotMatch) {
  PermitLedger old_ledger({1, 1});
  PermitLedger new_ledger({2, 1});
  const uint64_t old_id = IssueAt(old_ledger, kT0);
  const uint64_t new_id = IssueAt(new_ledger, kT0);
  // Same sequence number, different epoch.
  ASSERT_EQ(old_id & ((uint64_t{1} << 40) - 1),
            new_id & ((uint64_t{1} << 40) - 1));
  Permit out;
  EXPECT_FALSE(new_ledger.Retire(old_id, &out));
  EXPECT_EQ(new_ledger.live(), 1u);
  EXPECT_TRUE(new_ledger.Retire(new_id, &out));
}

TEST(PermitLedgerTest, PopExpiredInIssueOrder) {
  PermitLedger ledger({1, 1});
  const uint64_t a = IssueAt(ledger, kT0, absl::Seconds(2));
  const uint64_t b = IssueAt(ledger, kT0 + absl::Seconds(1), absl::Seconds(2));
  const uint64_t c = IssueAt(ledger, kT0 + absl::Seconds(2), absl::Seconds(2));
  Permit out;
  EXPECT_FALSE(ledger.PopExpired(kT0 + absl::Seconds(2) - absl::Nanoseconds(1),
                                 &out));
  ASSERT_TRUE(ledger.PopExpired(kT0 + absl::Seconds(3), &out));  // at deadline
  EXPECT_EQ(out.id, a);
  ASSERT_TRUE(ledger.PopExpired(kT0 + absl::Seconds(3), &out));
  EXPECT_EQ(out.id, b);
  EXPECT_FALSE(ledger.PopExpired(kT0 + absl::Seconds(3), &out));
  EXPECT_EQ(ledger.live(), 1u);
  // Expired permits are gone for Retire.
  EXPECT_FALSE(ledger.Retire(a, &out));
  EXPECT_TRUE(ledger.Retire(c, &out));
}

TEST(PermitLedgerTest, PopExpiredSkipsRetired) {
  PermitLedger ledger({1, 1});
  const uint64_t a = IssueAt(ledger, kT0);
  const uint64_t b = IssueAt(ledger, kT0);
  const uint64_t c = IssueAt(ledger, kT0);
  Permit out;
  ASSERT_TRUE(ledger.Retire(a, &out));
  ASSERT_TRUE(ledger.Retire(b, &out));
  ASSERT_TRUE(ledger.PopExpired(kT0 + absl::Hours(1), &out));
  EXPECT_EQ(out.id, c);
  EXPECT_FALSE(ledger.PopExpired(kT0 + absl::Hours(1), &out));
  EXPECT_EQ(ledger.live(), 0u);
}

TEST(PermitLedgerTest, StartsAtTheOriginsSequence) {
  PermitLedger ledger({3, 12345});
  const uint64_t a = IssueAt(ledger, kT0);
  EXPECT_EQ(a, (uint64_t{3} << 40) | 12345);
  EXPECT_EQ(IssueAt(ledger, kT0), a + 1);
  // Only the low 40 bits of first_seq count.
  PermitLedger masked({3, (uint64_t{1} << 40) | 7});
  EXPECT_EQ(IssueAt(masked, kT0), (uint64_t{3} << 40) | 7);
}

// A process restarted with the same epoch but another starting sequence
// must not accept the ids of the one before.
TEST(PermitLedgerTest, SameEpochOtherStartDoesNotMatch) {
  PermitLedger old_ledger({6, 1});
  PermitLedger new_ledger({6, uint64_t{1} << 39});
  std::vector<uint64_t> old_ids;
  for (int i = 0; i < 100; ++i) old_ids.push_back(IssueAt(old_ledger, kT0));
  for (int i = 0; i < 100; ++i) IssueAt(new_ledger, kT0);
  Permit out;
  for (uint64_t id : old_ids) EXPECT_FALSE(new_ledger.Retire(id, &out)) << id;
  EXPECT_EQ(new_ledger.live(), 100u);
}

// The sequence wraps from 2^40 - 1 to 0 inside the epoch; the id stays
// non-zero, every permit stays findable, and ids from before the start or
// not yet issued do not match.
TEST(PermitLedgerTest, WrapsThroughZeroKeepingIdsNonZero) {
  PermitLedger ledger({5, kSeqMask - 1});
  const uint64_t a = IssueAt(ledger, kT0);
  const uint64_t b = IssueAt(ledger, kT0);
  const uint64_t c = IssueAt(ledger, kT0);
  const uint64_t d = IssueAt(ledger, kT0);
  const uint64_t epoch_bits = uint64_t{5} << 40;
  EXPECT_EQ(a, epoch_bits | (kSeqMask - 1));
  EXPECT_EQ(b, epoch_bits | kSeqMask);
  EXPECT_EQ(c, epoch_bits);  // sequence 0
  EXPECT_EQ(d, epoch_bits | 1);
  EXPECT_NE(c, 0u);

  Permit out;
  EXPECT_FALSE(ledger.Retire(epoch_bits | (kSeqMask - 2), &out));  // before
  EXPECT_FALSE(ledger.Retire(epoch_bits | 2, &out));  // not issued yet
  EXPECT_FALSE(ledger.Retire(b + 1, &out));  // carries into the epoch bits
  ASSERT_TRUE(ledger.Retire(c, &out));
  EXPECT_EQ(out.id, c);
  ASSERT_TRUE(ledger.Retire(a, &out));
  EXPECT_FALSE(ledger.Retire(a, &out));
  EXPECT_FALSE(ledger.Retire(c, &out));
  ASSERT_TRUE(ledger.PopExpired(kT0 + absl::Hours(1), &out));
  EXPECT_EQ(out.id, b);
  ASSERT_TRUE(ledger.Retire(d, &out));
  EXPECT_EQ(ledger.live(), 0u);
  EXPECT_FALSE(ledger.PopExpired(kT0 + absl::Hours(1), &out));
}

// Growth, churn and eviction from several starting sequences: the usual
// one, just below the 40-bit wrap (so it wraps while the ring grows or
// churns), the last sequence, 0, and one in the middle.
class PermitLedgerStartTest : public ::testing::TestWithParam<uint64_t> {
 protected:
  static PermitLedger::Origin OriginWithEpoch(uint32_t epoch) {
    return {epoch, GetParam()};
  }
};

INSTANTIATE_TEST_SUITE_P(Starts, PermitLedgerStartTest,
                         ::testing::Values(uint64_t{1}, kSeqMask - 9,
                                           kSeqMask - 30000, kSeqMask,
                                           uint64_t{0},
                                           uint64_t{0x5A5A5A5A5A}));

TEST_P(PermitLedgerStartTest, GrowsAndKeepsEveryPermit) {
  PermitLedger ledger(OriginWithEpoch(9));
  std::vector<uint64_t> ids;
  absl::flat_hash_set<uint64_t> unique;
  for (int i = 0; i < 50000; ++i) {
    ids.push_back(IssueAt(ledger, kT0 + absl::Microseconds(i)));
    unique.insert(ids.back());
    ASSERT_EQ(ids.back() >> 40, 9u) << i;
    ASSERT_EQ(ids.back() & kSeqMask, (GetParam() + i) & kSeqMask) << i;
  }
  EXPECT_EQ(unique.size(), ids.size());
  EXPECT_EQ(ledger.live(), ids.size());
  // Retire out of order: every other one, then the rest backwards.
  Permit out;
  for (size_t i = 0; i < ids.size(); i += 2) {
    ASSERT_TRUE(ledger.Retire(ids[i], &out)) << i;
    ASSERT_EQ(out.issued, kT0 + absl::Microseconds(i));
  }
  for (size_t i = ids.size() - 1; i < ids.size(); i -= 2) {
    ASSERT_TRUE(ledger.Retire(ids[i], &out)) << i;
  }
  EXPECT_EQ(ledger.live(), 0u);
}

// Steady traffic pushes the sequence far past the ring size; wrap-around
// must keep ids distinct and findable.
TEST_P(PermitLedgerStartTest, SteadyChurnWrapsTheRing) {
  PermitLedger ledger(OriginWithEpoch(4));
  std::mt19937 rng(5);
  std::deque<uint64_t> live;
  absl::Time now = kT0;
  Permit out;
  for (int i = 0; i < 200000; ++i) {
    now += absl::Microseconds(10);
    live.push_back(IssueAt(ledger, now, absl::Seconds(1)));
    if (live.size() > 40) {
      // Retire a random one of the older half.
      const size_t pick = rng() % 20;
      ASSERT_TRUE(ledger.Retire(live[pick], &out)) << i;
      ASSERT_EQ(out.id, live[pick]);
      ASSERT_FALSE(ledger.Retire(live[pick], &out));
      live.erase(live.begin() + pick);
    }
    ASSERT_EQ(ledger.live(), live.size());
  }
  // Everything left expires, in order, exactly once.
  for (uint64_t id : live) {
    ASSERT_TRUE(ledger.PopExpired(now + absl::Seconds(1), &out));
    EXPECT_EQ(out.id, id);
  }
  EXPECT_FALSE(ledger.PopExpired(now + absl::Hours(1), &out));
  EXPECT_EQ(ledger.live(), 0u);
}

// Past kMaxPermits live permits the oldest is retired early and handed back.
TEST_P(PermitLedgerStartTest, EvictsOldestPastMaxPermits) {
  PermitLedger ledger(OriginWithEpoch(1));
  Permit evicted;
  const uint64_t first =
      ledger.Issue(kT0, kT0 + absl::Seconds(2), true, 0, nullptr, &evicted);
  ASSERT_EQ(evicted.id, 0u);
  const uint64_t second =
      ledger.Issue(kT0, kT0 + absl::Seconds(2), false, 0, nullptr, &evicted);
  for (size_t i = 2; i < PermitLedger::kMaxPermits; ++i) {
    ledger.Issue(kT0, kT0 + absl::Seconds(2), false, 0, nullptr, &evicted);
    ASSERT_EQ(evicted.id, 0u) << i;
  }
  ASSERT_EQ(ledger.live(), PermitLedger::kMaxPermits);

  const uint64_t over =
      ledger.Issue(kT0, kT0 + absl::Seconds(2), false, 0, nullptr, &evicted);
  EXPECT_EQ(evicted.id, first);
  EXPECT_TRUE(evicted.holds_slot);
  EXPECT_EQ(ledger.live(), PermitLedger::kMaxPermits);
  Permit out;
  EXPECT_FALSE(ledger.Retire(first, &out));
  EXPECT_TRUE(ledger.Retire(over, &out));

  // Full again: the next oldest goes.
  ledger.Issue(kT0, kT0 + absl::Seconds(2), false, 0, nullptr, &evicted);
  EXPECT_EQ(evicted.id, second);
  EXPECT_LE(ledger.live(), PermitLedger::kMaxPermits);
  // Retiring the oldest makes room without an eviction.
  const uint64_t third = NextId(second);
  ASSERT_TRUE(ledger.Retire(third, &out));
  ledger.Issue(kT0, kT0 + absl::Seconds(2), false, 0, nullptr, &evicted);
  EXPECT_EQ(evicted.id, 0u);
  EXPECT_EQ(ledger.live(), PermitLedger::kMaxPermits - 1);
}

TEST(PermitEpochsTest, SameSeedSameOrigins) {
  PermitEpochs a(42);
  PermitEpochs b(42);
  PermitEpochs c(43);
  for (int i = 0; i < 100; ++i) {
    const PermitLedger::Origin from_a = a.Next();
    const PermitLedger::Origin from_b = b.Next();
    const PermitLedger::Origin from_c = c.Next();
    EXPECT_EQ(from_a.epoch, from_b.epoch);
    EXPECT_EQ(from_a.first_seq, from_b.first_seq);
    EXPECT_NE(from_a.first_seq & kSeqMask, from_c.first_seq & kSeqMask);
  }
}

// A full cycle of epochs: each follows the one before, 0 is skipped, ids
// stay below 2^63, and a ledger whose epoch came round again starts at
// another sequence.
TEST(PermitEpochsTest, EpochsCycleAndSkipZero) {
  constexpr uint32_t kEpochCount = (uint32_t{1} << 23) - 1;
  PermitEpochs epochs(7);
  const PermitLedger::Origin first = epochs.Next();
  ASSERT_GE(first.epoch, 1u);
  ASSERT_LE(first.epoch, kEpochCount);
  uint32_t previous = first.epoch;
  for (uint32_t i = 1; i < kEpochCount; ++i) {
    const uint32_t epoch = epochs.Next().epoch;
    ASSERT_EQ(epoch, previous % kEpochCount + 1) << i;
    previous = epoch;
  }
  const PermitLedger::Origin again = epochs.Next();
  EXPECT_EQ(again.epoch, first.epoch);
  EXPECT_NE(again.first_seq & kSeqMask, first.first_seq & kSeqMask);

  PermitLedger ledger({kEpochCount, kSeqMask});
  const uint64_t largest = IssueAt(ledger, kT0);
  EXPECT_LT(largest, uint64_t{1} << 63);
}

}  // namespace
}  // namespace sluice::core
