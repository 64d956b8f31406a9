// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_CORE_MUTEX_H_
#define SLUICE_SERVER_CORE_CORE_MUTEX_H_

#include <mutex>

#include "absl/base/thread_annotations.h"

namespace sluice::core {

// The lock of a dependency's shard and of each per-core slice: a std::mutex
// that clang's thread-safety analysis can see. On Debian's abseil,
// absl::Mutex made two threads on one dependency cost about three times as
// much per decision (docs/benchmarks.md, "The dependency lock").
class ABSL_LOCKABLE CoreMutex {
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

class ABSL_SCOPED_LOCKABLE CoreLock {
 public:
  explicit CoreLock(CoreMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu)
      : mu_(mu) {
    mu_->Lock();
  }
  ~CoreLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  CoreLock(const CoreLock&) = delete;
  CoreLock& operator=(const CoreLock&) = delete;

 private:
  CoreMutex* const mu_;
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_CORE_MUTEX_H_
