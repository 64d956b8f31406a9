// SPDX-License-Identifier: Apache-2.0
#include "server/core/permit_seal.h"

#include <cstdint>
#include <random>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "server/core/siphash.h"
#include "tests/core/engine_test_util.h"

namespace sluice::core {
namespace {

// The 16-byte key 00 01 .. 0f of the SipHash paper, as its two words.
constexpr uint64_t kPaperK0 = 0x0706050403020100;
constexpr uint64_t kPaperK1 = 0x0f0e0d0c0b0a0908;

std::string Bytes(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>(i));
  return s;
}

TEST(SipHashTest, MatchesThePublishedVectors) {
  // Appendix A of the paper: the 15-byte message 00 01 .. 0e.
  EXPECT_EQ(SipHash24(kPaperK0, kPaperK1, Bytes(15)), 0xa129ca6149be45e5u);
  // The first vectors of the reference implementation's table (messages
  // 00 .. n-1 for n = 0, 1, 7, 8), read as little-endian words.
  EXPECT_EQ(SipHash24(kPaperK0, kPaperK1, ""), 0x726fdb47dd0e0e31u);
  EXPECT_EQ(SipHash24(kPaperK0, kPaperK1, Bytes(1)), 0x74f839c593dc67fdu);
  EXPECT_EQ(SipHash24(kPaperK0, kPaperK1, Bytes(7)), 0xab0200f58b01d137u);
  EXPECT_EQ(SipHash24(kPaperK0, kPaperK1, Bytes(8)), 0x93f5f5799a932462u);
}

TEST(SipHashTest, PiecesHashLikeTheWhole) {
  const std::string all = Bytes(64);
  for (size_t cut = 0; cut <= all.size(); ++cut) {
    SipHasher h(kPaperK0, kPaperK1);
    h.Update(absl::string_view(all).substr(0, cut));
    h.Update(absl::string_view(all).substr(cut));
    EXPECT_EQ(h.Finish(), SipHash24(kPaperK0, kPaperK1, all)) << cut;
  }
  SipHasher words(1, 2);
  words.UpdateU64(0x0706050403020100);
  EXPECT_EQ(words.Finish(), SipHash24(1, 2, Bytes(8)));
}

TEST(PermitSealTest, VerifiesWhatItSealedAndNothingElse) {
  const PermitSeal seal(PermitKey{11, 22});
  const PermitId id = seal.Seal(1234, "inventory", "tenant-1");
  EXPECT_EQ(id.serial, 1234u);
  EXPECT_TRUE(seal.Verify(id, "inventory", "tenant-1"));
  EXPECT_FALSE(seal.Verify(id, "inventory", "tenant-2"));
  EXPECT_FALSE(seal.Verify(id, "inventor", "ytenant-1"));  // another split
  EXPECT_FALSE(seal.Verify(id, "search", "tenant-1"));
  EXPECT_FALSE(seal.Verify({id.serial + 1, id.mac}, "inventory", "tenant-1"));
  EXPECT_FALSE(seal.Verify({id.serial, id.mac ^ 1}, "inventory", "tenant-1"));
  EXPECT_FALSE(seal.Verify(PermitId{}, "inventory", "tenant-1"));
  // Another key (another process) does not accept it.
  EXPECT_FALSE(PermitSeal(PermitKey{11, 23}).Verify(id, "inventory",
                                                     "tenant-1"));
}

TEST(PermitSealTest, RandomKeysAreDrawnAfresh) {
  absl::flat_hash_set<uint64_t> seen;
  for (int i = 0; i < 100; ++i) {
    const PermitKey key = RandomPermitKey();
    EXPECT_FALSE(key.empty());
    seen.insert(key.k0);
    seen.insert(key.k1);
  }
  EXPECT_EQ(seen.size(), 200u);
}

// The attack of issue 25: a data-plane client settles another client's
// permit by guessing its id. One permit is held (concurrency 1, a breaker
// that trips on one failure); 10,000 guesses around it (its serial's
// neighbours with its MAC and with neighbouring MACs, every single-bit flip
// of serial and MAC, and random ids in its epoch) are reported as FAILURE.
// None frees the slot or reaches the breaker; the real id still does.
TEST(PermitSealTest, TenThousandGuessesSettleNothing) {
  testing::FakeClock clock;
  Engine engine(&clock, SeededOptions());
  PolicyConfig p = MakePolicy("inventory");
  WithConcurrency(p, 1);
  WithBreaker(p, 1);
  engine.PutPolicy(p);
  absl::StatusOr<Decision> held = engine.Acquire("inventory", "", 1);
  ASSERT_TRUE(held.ok());
  ASSERT_EQ(held->verdict, Verdict::kAllow);
  const PermitId real = held->permit_id;

  std::vector<PermitId> guesses;
  for (int64_t d = -1000; d <= 1000; ++d) {
    if (d == 0) continue;
    guesses.push_back({real.serial + static_cast<uint64_t>(d), real.mac});
  }
  for (int64_t d = -1000; d <= 1000; ++d) {
    if (d == 0) continue;
    guesses.push_back({real.serial, real.mac + static_cast<uint64_t>(d)});
  }
  for (int bit = 0; bit < 64; ++bit) {
    guesses.push_back({real.serial ^ (uint64_t{1} << bit), real.mac});
    guesses.push_back({real.serial, real.mac ^ (uint64_t{1} << bit)});
  }
  std::mt19937_64 random(25);
  const uint64_t epoch_bits = real.serial & ~((uint64_t{1} << 40) - 1);
  while (guesses.size() < 10000) {
    // Half keep the epoch (a client knows it from its own permits).
    const uint64_t serial = guesses.size() % 2 == 0
                                ? epoch_bits | (random() >> 24)
                                : random();
    guesses.push_back({serial, random()});
  }
  ASSERT_EQ(guesses.size(), 10000u);

  for (const PermitId& guess : guesses) {
    ASSERT_NE(guess, real);
    engine.Report("inventory", "", guess, Outcome::kFailure,
                  absl::Milliseconds(5));
  }
  EXPECT_EQ(engine.PermitReportsRefused().forged, 10000u);
  absl::StatusOr<LivePolicyStatus> s = engine.Inspect("inventory");
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s->gates.has_value());
  EXPECT_EQ(s->gates->in_flight, 1u);  // still held
  EXPECT_EQ(s->gates->breaker_state, BreakerState::kClosed);
  EXPECT_EQ(s->gates->window.calls, 0);  // no outcome reached the breaker
  EXPECT_EQ(Outcomes(s->counters, Outcome::kFailure), 0u);
  absl::StatusOr<Decision> refused = engine.Acquire("inventory", "", 1);
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->reason, Reason::kConcurrencyLimited);

  // The holder's own report settles it: the slot is freed and the failure
  // trips the breaker.
  EXPECT_EQ(engine.Report("inventory", "", real, Outcome::kFailure,
                          absl::Milliseconds(5)),
            BreakerState::kOpen);
  s = engine.Inspect("inventory");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->gates->in_flight, 0u);
  EXPECT_EQ(Outcomes(s->counters, Outcome::kFailure), 1u);
  EXPECT_EQ(engine.PermitReportsRefused().forged, 10000u);
}

}  // namespace
}  // namespace sluice::core
