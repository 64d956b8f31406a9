// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_MANUAL_ENV_H_
#define SLUICE_TESTS_TESTING_MANUAL_ENV_H_

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/env.h"
#include "base/periodic.h"
#include "server/core/clock.h"

namespace sluice::testing {

// An Env whose periodic tasks run only when the test says, on the test's
// thread, by the test's clock: a test that drives a component's time with
// a FakeClock also schedules its periodic work by it, so there is one fake
// clock, not two. RunDue runs what the schedule (the real Env's) has due;
// RunAll runs every task once regardless. The env must outlive its tasks,
// and a run must not destroy a task. Safe for concurrent use.
class ManualEnv final : public base::Env {
 public:
  // `clock` must outlive the env.
  explicit ManualEnv(const core::Clock* clock) : clock_(clock) {}

  absl::Time Now() const override { return clock_->Now(); }

  std::unique_ptr<base::PeriodicTask> StartPeriodic(
      const base::PeriodicOptions& options, base::PeriodicRun run) override
      ABSL_LOCKS_EXCLUDED(mu_) {
    auto task = std::make_unique<Task>(this, options, std::move(run));
    absl::MutexLock lock(&mu_);
    tasks_.push_back(task.get());
    return task;
  }

  // Runs each task due at Now() once, in the order they were started;
  // returns how many ran.
  int RunDue() ABSL_LOCKS_EXCLUDED(mu_) { return RunTasks(/*all=*/false); }
  // Runs each task once, due or not; returns how many ran.
  int RunAll() ABSL_LOCKS_EXCLUDED(mu_) { return RunTasks(/*all=*/true); }

  // Tasks started and not stopped.
  int running() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(tasks_.size());
  }
  // When the soonest running task is due (InfiniteFuture: none runs).
  absl::Time next_due() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    absl::Time next = absl::InfiniteFuture();
    for (const Task* t : tasks_) next = std::min(next, t->due());
    return next;
  }

 private:
  class Task final : public base::PeriodicTask {
   public:
    Task(ManualEnv* env, const base::PeriodicOptions& options,
         base::PeriodicRun run)
        : env_(env), run_(std::move(run)), schedule_(options, env->Now()) {}
    ~Task() override { Stop(); }

    void Wake() override ABSL_LOCKS_EXCLUDED(mu_) {
      absl::MutexLock lock(&mu_);
      if (!stopped_) schedule_.Wake(env_->Now());
    }
    void Stop() override ABSL_LOCKS_EXCLUDED(mu_) {
      {
        absl::MutexLock lock(&mu_);
        if (stopped_) return;
        stopped_ = true;
      }
      env_->Remove(this);
    }

    absl::Time due() const ABSL_LOCKS_EXCLUDED(mu_) {
      absl::MutexLock lock(&mu_);
      return schedule_.due();
    }
    // One run, if the task is not stopped.
    bool Run() ABSL_LOCKS_EXCLUDED(mu_) {
      {
        absl::MutexLock lock(&mu_);
        if (stopped_) return false;
        schedule_.Started();
      }
      const absl::Duration next_in = run_();
      absl::MutexLock lock(&mu_);
      schedule_.Finished(env_->Now(), next_in);
      return true;
    }

   private:
    ManualEnv* const env_;
    const base::PeriodicRun run_;
    mutable absl::Mutex mu_;
    bool stopped_ ABSL_GUARDED_BY(mu_) = false;
    base::PeriodicSchedule schedule_ ABSL_GUARDED_BY(mu_);
  };

  void Remove(Task* task) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    tasks_.erase(std::remove(tasks_.begin(), tasks_.end(), task), tasks_.end());
  }

  int RunTasks(bool all) ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<Task*> chosen;
    {
      absl::MutexLock lock(&mu_);
      const absl::Time now = clock_->Now();
      for (Task* t : tasks_) {
        if (all || t->due() <= now) chosen.push_back(t);
      }
    }
    int ran = 0;
    for (Task* t : chosen) ran += t->Run() ? 1 : 0;
    return ran;
  }

  const core::Clock* const clock_;
  mutable absl::Mutex mu_;
  std::vector<Task*> tasks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_MANUAL_ENV_H_
