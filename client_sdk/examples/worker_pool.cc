// SPDX-License-Identifier: Apache-2.0
#include "worker_pool.h"

#include <algorithm>

namespace sluice::examples {

WorkerPool::WorkerPool(int workers, int queue_limit)
    : queue_limit_(std::max(0, queue_limit)), workers_(std::max(0, workers)) {}

bool WorkerPool::HasFreeWorkerLocked() const {
  return workers_ == 0 || busy_ < workers_;
}

bool WorkerPool::Granted(Ticket* t) {
  return t->number < t->pool->next_grant_;
}

void WorkerPool::GrantLocked() {
  while (next_grant_ < next_ticket_ && HasFreeWorkerLocked()) {
    ++next_grant_;
    ++busy_;
  }
}

bool WorkerPool::Acquire() {
  absl::MutexLock lock(&mu_);
  const uint64_t waiting = next_ticket_ - next_grant_;
  if (waiting == 0 && HasFreeWorkerLocked()) {
    ++busy_;
    ++admitted_;
    return true;
  }
  if (waiting >= static_cast<uint64_t>(queue_limit_)) {
    ++turned_away_;
    return false;
  }
  Ticket ticket{this, next_ticket_++};
  // GrantLocked() counted this waiter busy when it granted the ticket.
  mu_.Await(absl::Condition(&WorkerPool::Granted, &ticket));
  ++admitted_;
  return true;
}

void WorkerPool::Release() {
  absl::MutexLock lock(&mu_);
  --busy_;
  GrantLocked();
}

void WorkerPool::SetWorkers(int workers) {
  absl::MutexLock lock(&mu_);
  workers_ = std::max(0, workers);
  GrantLocked();
}

WorkerPool::Stats WorkerPool::stats() const {
  absl::MutexLock lock(&mu_);
  Stats s;
  s.workers = workers_;
  s.queue_limit = queue_limit_;
  s.busy = busy_;
  s.queued = static_cast<int>(next_ticket_ - next_grant_);
  s.admitted = admitted_;
  s.turned_away = turned_away_;
  return s;
}

}  // namespace sluice::examples
