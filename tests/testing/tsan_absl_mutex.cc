// SPDX-License-Identifier: Apache-2.0
// Linked into core-only test binaries when built with -DSLUICE_TSAN=ON.
//
// Debian's abseil is not built with ThreadSanitizer, so TSan cannot see the
// happens-before edges that absl::Mutex creates and reports every access
// guarded by one as a race. These definitions interpose the shared library's
// absl::Mutex lock functions (an executable's symbols win over a shared
// library's), call the real ones through dlsym(RTLD_NEXT) and tell TSan what
// happened, so TSan checks the core's locking for real.

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>

#include "absl/synchronization/mutex.h"

namespace {

using LockFn = void (*)(absl::Mutex*);
using TryLockFn = bool (*)(absl::Mutex*);

template <typename Fn>
Fn Real(const char* symbol) {
  void* fn = dlsym(RTLD_NEXT, symbol);
  if (fn == nullptr) {
    std::fprintf(stderr, "tsan_absl_mutex: %s not found\n", symbol);
    std::abort();
  }
  return reinterpret_cast<Fn>(fn);
}

#define SLUICE_ABSL_SYMBOL(name) "_ZN4absl7debian35Mutex" name

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static const LockFn real = Real<LockFn>(SLUICE_ABSL_SYMBOL("4LockEv"));
  __tsan_mutex_pre_lock(this, 0);
  real(this);
  __tsan_mutex_post_lock(this, 0, 0);
}

void Mutex::Unlock() {
  static const LockFn real = Real<LockFn>(SLUICE_ABSL_SYMBOL("6UnlockEv"));
  __tsan_mutex_pre_unlock(this, 0);
  real(this);
  __tsan_mutex_post_unlock(this, 0);
}

bool Mutex::TryLock() {
  static const TryLockFn real =
      Real<TryLockFn>(SLUICE_ABSL_SYMBOL("7TryLockEv"));
  __tsan_mutex_pre_lock(this, __tsan_mutex_try_lock);
  const bool locked = real(this);
  __tsan_mutex_post_lock(
      this, locked ? __tsan_mutex_try_lock : __tsan_mutex_try_lock_failed, 0);
  return locked;
}

void Mutex::ReaderLock() {
  static const LockFn real =
      Real<LockFn>(SLUICE_ABSL_SYMBOL("10ReaderLockEv"));
  __tsan_mutex_pre_lock(this, __tsan_mutex_read_lock);
  real(this);
  __tsan_mutex_post_lock(this, __tsan_mutex_read_lock, 0);
}

void Mutex::ReaderUnlock() {
  static const LockFn real =
      Real<LockFn>(SLUICE_ABSL_SYMBOL("12ReaderUnlockEv"));
  __tsan_mutex_pre_unlock(this, __tsan_mutex_read_lock);
  real(this);
  __tsan_mutex_post_unlock(this, __tsan_mutex_read_lock);
}

ABSL_NAMESPACE_END
}  // namespace absl
