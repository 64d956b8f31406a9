// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_CLIENT_SDK_EXAMPLES_WORKER_POOL_H_
#define SLUICE_CLIENT_SDK_EXAMPLES_WORKER_POOL_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace sluice::examples {

// The example backend's capacity model: `workers` slots taken first come,
// first served, and a queue of at most `queue` waiting requests. With a
// fixed service time S the backend serves workers / S requests a second, and
// by Little's law a request's latency is S plus its wait in the queue.
// Safe for concurrent use.
class WorkerPool {
 public:
  struct Stats {
    int workers = 0;  // 0 = unlimited
    int queue_limit = 0;
    int busy = 0;
    int queued = 0;
    uint64_t admitted = 0;
    uint64_t turned_away = 0;
  };

  // workers 0 = unlimited: nobody ever waits.
  WorkerPool(int workers, int queue_limit);

  // Takes a worker, waiting in FIFO order behind earlier callers. False at
  // once when `queue` callers are already waiting: the caller answers 503.
  bool Acquire() ABSL_LOCKS_EXCLUDED(mu_);
  // Gives back the worker taken by a successful Acquire().
  void Release() ABSL_LOCKS_EXCLUDED(mu_);
  // Changes the capacity; waiters are served as workers free up. Workers
  // already busy beyond a lowered count finish their request first.
  void SetWorkers(int workers) ABSL_LOCKS_EXCLUDED(mu_);

  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Ticket {
    const WorkerPool* pool;
    uint64_t number;
  };
  static bool Granted(Ticket* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->pool->mu_);
  // Hands free workers to the oldest waiters.
  void GrantLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool HasFreeWorkerLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int queue_limit_;
  mutable absl::Mutex mu_;
  int workers_ ABSL_GUARDED_BY(mu_);
  int busy_ ABSL_GUARDED_BY(mu_) = 0;
  // Waiters hold tickets [next_grant_, next_ticket_); lower ones may run.
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_grant_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t admitted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t turned_away_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::examples

#endif  // SLUICE_CLIENT_SDK_EXAMPLES_WORKER_POOL_H_
