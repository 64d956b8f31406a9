// SPDX-License-Identifier: Apache-2.0
#include "base/env.h"

#include <chrono>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace sluice::base {
namespace {

// Time for schedules: a monotonic clock, so that a step of the wall clock
// (NTP, an operator) neither stalls periodic work nor runs it early. The
// epoch is arbitrary; only differences mean anything.
absl::Time MonotonicNow() {
  return absl::UnixEpoch() +
         absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

// A periodic task on its own thread.
class ThreadPeriodicTask final : public PeriodicTask {
 public:
  ThreadPeriodicTask(const PeriodicOptions& options, PeriodicRun run)
      : run_(std::move(run)), schedule_(options, MonotonicNow()) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~ThreadPeriodicTask() override { Stop(); }

  void Wake() override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    schedule_.Wake(MonotonicNow());
    changed_.Signal();
  }

  void Stop() override ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      changed_.Signal();
    }
    // Two threads may both stop the task; only one may join it.
    absl::MutexLock join_lock(&join_mu_);
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mu_) {
    mu_.Lock();
    while (true) {
      // A Wake or Stop signals; a spurious or early wake-up re-reads the
      // schedule, which a Wake may have brought forward.
      while (!stopping_ && MonotonicNow() < schedule_.due()) {
        changed_.WaitWithTimeout(&mu_, schedule_.due() - MonotonicNow());
      }
      if (stopping_) break;
      schedule_.Started();
      mu_.Unlock();
      const absl::Duration next_in = run_();
      mu_.Lock();
      schedule_.Finished(MonotonicNow(), next_in);
    }
    mu_.Unlock();
  }

  const PeriodicRun run_;

  absl::Mutex mu_;
  absl::CondVar changed_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  PeriodicSchedule schedule_ ABSL_GUARDED_BY(mu_);

  absl::Mutex join_mu_;
  std::thread thread_;
};

class RealEnv final : public Env {
 public:
  absl::Time Now() const override { return MonotonicNow(); }
  std::unique_ptr<PeriodicTask> StartPeriodic(const PeriodicOptions& options,
                                              PeriodicRun run) override {
    return std::make_unique<ThreadPeriodicTask>(options, std::move(run));
  }
};

}  // namespace

Env* Env::Default() {
  static RealEnv* const env = new RealEnv();
  return env;
}

}  // namespace sluice::base
