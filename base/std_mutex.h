// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_BASE_STD_MUTEX_H_
#define SLUICE_BASE_STD_MUTEX_H_

#include <mutex>

#include "absl/base/thread_annotations.h"

namespace sluice::base {

// A std::mutex that clang's thread-safety analysis can see, for a lock
// taken on every call in the SDK (a leased dependency's line). On Debian's
// abseil, absl::Mutex costs about three times as much under two threads
// (docs/benchmarks.md, "The dependency lock"), and its deadlock detection,
// which that build leaves on, walks a lock graph on every Lock() unless the
// program turns it off, as a gateway linking the SDK has no reason to do.
// server/core's CoreMutex is the same lock: the core may link nothing of
// base/ (cmake/SluiceLayers.cmake), and the SDK nothing of server/.
class ABSL_LOCKABLE StdMutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  bool TryLock() ABSL_EXCLUSIVE_TRYLOCK_FUNCTION(true) {
    return mu_.try_lock();
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  // Tells clang's analysis the lock is held (taken where it cannot see).
  void AssertHeld() ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  std::mutex mu_;
};

class ABSL_SCOPED_LOCKABLE StdLock {
 public:
  explicit StdLock(StdMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) {
    mu_->Lock();
  }
  ~StdLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  StdLock(const StdLock&) = delete;
  StdLock& operator=(const StdLock&) = delete;

 private:
  StdMutex* const mu_;
};

}  // namespace sluice::base

#endif  // SLUICE_BASE_STD_MUTEX_H_
