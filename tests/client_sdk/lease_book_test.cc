// SPDX-License-Identifier: Apache-2.0
// The pieces of a leased decision that need no Sluice: the coarse clock it
// decides by, and the book's answer to "which line?" from a thread's cache.
#include "lease_book.h"

#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coarse_clock.h"
#include "counters.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"

namespace sluice::client::internal {
namespace {

TEST(CoarseNowTest, NeverBehindTheClockAndAtMostItsAllowanceAhead) {
  for (int i = 0; i < 100000; ++i) {
    const absl::Time before = absl::Now();
    const absl::Time coarse = CoarseNow();
    const absl::Time after = absl::Now();
    ASSERT_GE(coarse, before) << "at " << i;
    ASSERT_LE(coarse, after + kCoarseLagAllowance) << "at " << i;
  }
}

TEST(CoarseNowTest, ACheckThatFindsItBehindTurnsItToThePreciseClock) {
  // A precise time from the future: as if the coarse clock had fallen
  // further behind than its allowance.
  CheckCoarseClock(absl::Now() + absl::Seconds(1));
  for (int i = 0; i < 1000; ++i) {
    const absl::Time before = absl::Now();
    const absl::Time now = CoarseNow();
    ASSERT_GE(now, before);
    ASSERT_LE(now, absl::Now());
  }
}

std::shared_ptr<LeaseBook> MakeBook(size_t max_leased = 256) {
  LeaseOptions options;
  options.enabled = true;
  options.max_leased = max_leased;
  // Never connected: lines need no Sluice.
  return std::make_shared<LeaseBook>(
      options,
      grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()),
      std::make_shared<Counters>());
}

TEST(LeaseBookTest, ALineIsTheBooksWhicheverThreadAsksAndInWhateverOrder) {
  std::shared_ptr<LeaseBook> book = MakeBook();
  const std::shared_ptr<LeaseLine> a = book->Line("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dependency(), "a");
  EXPECT_EQ(book->Line("a"), a);  // this thread's last line
  const std::shared_ptr<LeaseLine> b = book->Line("b");
  ASSERT_NE(b, nullptr);
  EXPECT_NE(b, a);
  EXPECT_EQ(b->dependency(), "b");
  EXPECT_EQ(book->Line("a"), a);
  EXPECT_EQ(book->Find("b"), b);

  std::shared_ptr<LeaseLine> from_another;
  std::thread([&] { from_another = book->Line("a"); }).join();
  EXPECT_EQ(from_another, a);
}

TEST(LeaseBookTest, AnotherBookHasItsOwnLinesThoughThisThreadUsedOneOfThat) {
  std::shared_ptr<LeaseBook> first = MakeBook();
  const std::shared_ptr<LeaseLine> old = first->Line("a");
  std::shared_ptr<LeaseBook> second = MakeBook();
  const std::shared_ptr<LeaseLine> mine = second->Line("a");
  ASSERT_NE(mine, nullptr);
  EXPECT_NE(mine, old);
  EXPECT_EQ(mine->book().lock(), second);
  // A book made where a dead one was is still another book.
  first.reset();
  std::shared_ptr<LeaseBook> third = MakeBook();
  const std::shared_ptr<LeaseLine> its = third->Line("a");
  EXPECT_NE(its, old);
  EXPECT_NE(its, mine);
  EXPECT_EQ(its->book().lock(), third);
}

TEST(LeaseBookTest, MaxLeasedHoldsWithTheCache) {
  std::shared_ptr<LeaseBook> book = MakeBook(/*max_leased=*/1);
  const std::shared_ptr<LeaseLine> a = book->Line("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(book->Line("b"), nullptr);
  EXPECT_EQ(book->Line("a"), a);
  EXPECT_EQ(book->Line("b"), nullptr);
}

// A key gets a line only once it is hot (hot_calls calls within a tick),
// so that many cold keys take none; a key's line that holds and wants
// nothing is dropped at the next renewal.
TEST(LeaseBookTest, AKeyGetsALineOnlyWhenHotAndLosesItWhenIdle) {
  std::shared_ptr<LeaseBook> book = MakeBook();
  const absl::Time t0 = absl::Now();
  for (int i = 0; i < 15; ++i) {
    EXPECT_EQ(book->KeyLine("dep", "tenant-a", t0), nullptr) << i;
  }
  // Another key's count is its own, and a tick later counting starts over.
  EXPECT_EQ(book->KeyLine("dep", "tenant-b", t0), nullptr);
  const std::shared_ptr<LeaseLine> a = book->KeyLine("dep", "tenant-a", t0);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->dependency(), "dep");
  EXPECT_EQ(a->key(), "tenant-a");
  EXPECT_EQ(book->KeyLine("dep", "tenant-a", t0), a);
  EXPECT_EQ(book->Find("dep", "tenant-a"), a);
  EXPECT_EQ(book->Find("dep"), nullptr);  // the dependency's own line
  const absl::Time t1 = t0 + absl::Milliseconds(250);
  for (int i = 0; i < 15; ++i) {
    EXPECT_EQ(book->KeyLine("dep", "tenant-b", t1), nullptr) << i;
  }
  // Its first call makes it hot; never called, it wants nothing and goes.
  EXPECT_TRUE(a->Idle());
  book->MaybeRenew(t1, true);
  EXPECT_EQ(book->Find("dep", "tenant-a"), nullptr);
}

TEST(LeaseBookTest, ColdKeysAreCountedBoundedly) {
  std::shared_ptr<LeaseBook> book = MakeBook();
  const absl::Time t0 = absl::Now();
  for (size_t i = 0; i < LeaseBook::kMostCountedKeys; ++i) {
    EXPECT_EQ(book->KeyLine("dep", absl::StrCat("k", i), t0), nullptr);
  }
  // A key beyond the bound is not counted this tick, however hot.
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(book->KeyLine("dep", "late", t0), nullptr);
  }
  // A counted one still turns hot.
  std::shared_ptr<LeaseLine> line;
  for (int i = 0; i < 15 && line == nullptr; ++i) {
    line = book->KeyLine("dep", "k7", t0);
  }
  EXPECT_NE(line, nullptr);
}

}  // namespace
}  // namespace sluice::client::internal
