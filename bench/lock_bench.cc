// SPDX-License-Identifier: Apache-2.0
// Which lock for the request path (a dependency shard's, in
// server/core/live_policy.cc): the candidates side by side in one run, on a
// critical section the size of a dependency's (Acquire or Report holds the
// lock for 50-100 ns), at 1, 2 and 4 threads.
//
// Each iteration takes the lock, advances a shared state by `inside` steps of
// a dependent multiply-add chain (about 1 ns a step), releases it, then does
// `outside` steps on thread-local state (the work Engine does between two
// lock holds: lookups, snapshot checks, building the Decision).
//
// The figure that matters is real time per op at 2 threads against 1: at or
// below 1.0x, a second core adds throughput (or at least costs none); above,
// the two threads together do less than one alone. The table at the end
// prints those ratios.
//
//   build/bench/lock_bench [--benchmark_repetitions=N]

#include <pthread.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"
#include "thread_scaling.h"

namespace sluice::core {
namespace {

class StdMutex {
 public:
  void Lock() { mu_.lock(); }
  void Unlock() { mu_.unlock(); }

 private:
  std::mutex mu_;
};

// glibc's adaptive mutex: spins up to ~100 times (no pause) before the futex.
class AdaptiveMutex {
 public:
  AdaptiveMutex() {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(&mu_, &attr);
    pthread_mutexattr_destroy(&attr);
  }
  ~AdaptiveMutex() { pthread_mutex_destroy(&mu_); }
  void Lock() { pthread_mutex_lock(&mu_); }
  void Unlock() { pthread_mutex_unlock(&mu_); }

 private:
  pthread_mutex_t mu_;
};

class AbslMutex {
 public:
  void Lock() { mu_.Lock(); }
  void Unlock() { mu_.Unlock(); }

 private:
  absl::Mutex mu_;
};

inline uint64_t Step(uint64_t x) {
  return x * 6364136223846793005ULL + 1442695040888963407ULL;
}

// The lock and the state it guards, on cache lines of their own as a
// LivePolicy's would be relative to other dependencies.
template <typename Lock>
struct alignas(64) Shared {
  Lock lock;
  alignas(64) uint64_t state[4] = {1, 2, 3, 4};
};

template <typename Lock>
void BM_Lock(benchmark::State& state) {
  static Shared<Lock>* shared = new Shared<Lock>();
  const int inside = static_cast<int>(state.range(0));
  const int outside = static_cast<int>(state.range(1));
  uint64_t local = static_cast<uint64_t>(state.thread_index()) + 1;
  for (auto _ : state) {
    shared->lock.Lock();
    uint64_t x = shared->state[0];
    for (int i = 0; i < inside; ++i) x = Step(x);
    shared->state[0] = x;
    ++shared->state[1];
    shared->lock.Unlock();
    for (int i = 0; i < outside; ++i) local = Step(local);
    benchmark::DoNotOptimize(local);
  }
}

// inside, outside: ~60 ns under the lock alone, and the same with as much
// work again outside it.
#define SLUICE_LOCK_BENCH(Lock)                                        \
  BENCHMARK_TEMPLATE(BM_Lock, Lock)                                    \
      ->Args({60, 0})                                                  \
      ->Args({60, 60})                                                 \
      ->Threads(1)                                                     \
      ->Threads(2)                                                     \
      ->Threads(4)                                                     \
      ->UseRealTime()
SLUICE_LOCK_BENCH(StdMutex);
SLUICE_LOCK_BENCH(AdaptiveMutex);
SLUICE_LOCK_BENCH(AbslMutex);

}  // namespace
}  // namespace sluice::core

int main(int argc, char** argv) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  sluice::bench::ThreadScalingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintScaling();
  benchmark::Shutdown();
  return 0;
}
