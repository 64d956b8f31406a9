// SPDX-License-Identifier: Apache-2.0
// HotMutex: mutual exclusion, TryLock, and waiters that go to sleep. Runs
// under TSan too, where a missing acquire or release on the lock word shows
// up as a race on the guarded counter.
#include "server/core/hot_mutex.h"

#include <sched.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "gtest/gtest.h"

namespace sluice::core {
namespace {

// A counter that is not atomic: only the lock keeps increments apart.
struct Counter {
  HotMutex mu;
  uint64_t value ABSL_GUARDED_BY(mu) = 0;

  void Add() {
    HotMutexLock lock(&mu);
    ++value;
  }
  uint64_t Get() {
    HotMutexLock lock(&mu);
    return value;
  }
};

TEST(HotMutexTest, ThreadsNeverLoseAnIncrement) {
  constexpr int kThreads = 4;
  constexpr int kIncrements = 100000;
  Counter counter;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIncrements; ++i) counter.Add();
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(counter.Get(), uint64_t{kThreads} * kIncrements);
}

// Critical sections that give up the CPU inside, with more threads than
// cores: the waiters outlast their spins and yields and sleep on the futex,
// so every Unlock that hands over goes through the wake-up path.
TEST(HotMutexTest, SleepingWaitersAreWokenAndExcluded) {
  constexpr int kThreads = 6;
  constexpr int kRounds = 200;
  struct {
    HotMutex mu;
    int inside ABSL_GUARDED_BY(mu) = 0;  // threads holding it: 0 or 1
    uint64_t total ABSL_GUARDED_BY(mu) = 0;
  } s;
  std::atomic<int> overlaps{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int r = 0; r < kRounds; ++r) {
        HotMutexLock lock(&s.mu);
        if (++s.inside != 1) overlaps.fetch_add(1);
        for (int y = 0; y < 5; ++y) sched_yield();
        ++s.total;
        --s.inside;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  HotMutexLock lock(&s.mu);
  EXPECT_EQ(s.total, uint64_t{kThreads} * kRounds);
}

// Whether TryLock succeeded (the lock is then released again).
bool TryLockAndRelease(HotMutex* mu) {
  if (!mu->TryLock()) return false;
  mu->Unlock();
  return true;
}

bool TryLockFromAnotherThread(HotMutex* mu) {
  bool got = false;
  std::thread([&] { got = TryLockAndRelease(mu); }).join();
  return got;
}

TEST(HotMutexTest, TryLockTakesOnlyAFreeLock) {
  HotMutex mu;
  EXPECT_TRUE(TryLockFromAnotherThread(&mu));
  mu.Lock();
  EXPECT_FALSE(TryLockFromAnotherThread(&mu));
  // Not recursive: the holder's own try fails too.
  EXPECT_FALSE(TryLockAndRelease(&mu));
  mu.Unlock();
  EXPECT_TRUE(TryLockFromAnotherThread(&mu));
  EXPECT_TRUE(TryLockAndRelease(&mu));
  // And Lock still works after TryLock's Unlock.
  mu.Lock();
  mu.Unlock();
}

// Writes made under the lock by one thread are seen by the next holder (the
// acquire and release orders on the lock word; TSan checks them as well).
TEST(HotMutexTest, NextHolderSeesThePreviousHoldersWrites) {
  struct {
    HotMutex mu;
    uint64_t a ABSL_GUARDED_BY(mu) = 0;
    uint64_t b ABSL_GUARDED_BY(mu) = 0;
  } s;
  std::atomic<bool> mismatch{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50000; ++i) {
        HotMutexLock lock(&s.mu);
        if (s.a != s.b) mismatch.store(true);
        ++s.a;
        ++s.b;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_FALSE(mismatch.load());
  HotMutexLock lock(&s.mu);
  EXPECT_EQ(s.a, 100000u);
}

}  // namespace
}  // namespace sluice::core
