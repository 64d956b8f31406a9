// SPDX-License-Identifier: Apache-2.0
// An LD_PRELOAD library that stops a process's wall clock at a time a test
// sets, for a redis-server whose TIME (and so tick.lua's now and its keys'
// expiries) a test must control to the millisecond.
//
// SLUICE_STORE_CLOCK_FILE names a file of 8 bytes: the time in microseconds
// since the Unix epoch, a native int64. The library maps it once and reads
// it at every gettimeofday, time and clock_gettime(CLOCK_REALTIME*); a test
// moves the clock by writing the file. Monotonic clocks stay real, so the
// server's event loop and timers run as usual. Without the variable, or
// while the file cannot be mapped, the real clock is used.
//
// (libfaketime does this too, but it deadlocks in redis-server's start with
// Debian's jemalloc: its clock_gettime allocates before it is initialised.
// This library allocates nothing.)
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace {

std::atomic<const volatile int64_t*> mapped{nullptr};

// The mapped clock file, or nullptr.
const volatile int64_t* ClockFile() {
  const volatile int64_t* p = mapped.load(std::memory_order_acquire);
  if (p != nullptr) return p;
  const char* path = getenv("SLUICE_STORE_CLOCK_FILE");
  if (path == nullptr) return nullptr;
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  void* m = mmap(nullptr, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return nullptr;
  const volatile int64_t* expected = nullptr;
  if (!mapped.compare_exchange_strong(
          expected, static_cast<const volatile int64_t*>(m))) {
    munmap(m, sizeof(int64_t));  // another thread mapped it first
    return expected;
  }
  return static_cast<const volatile int64_t*>(m);
}

}  // namespace

extern "C" int clock_gettime(clockid_t id, struct timespec* ts) noexcept {
  if (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE) {
    if (const volatile int64_t* file = ClockFile()) {
      const int64_t us = *file;
      ts->tv_sec = static_cast<time_t>(us / 1000000);
      ts->tv_nsec = static_cast<long>(us % 1000000) * 1000;
      return 0;
    }
  }
  return static_cast<int>(syscall(SYS_clock_gettime, id, ts));
}

extern "C" int gettimeofday(struct timeval* tv, void* /*tz*/) noexcept {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  // glibc declares tv non-null.
  tv->tv_sec = ts.tv_sec;
  tv->tv_usec = ts.tv_nsec / 1000;
  return 0;
}

extern "C" time_t time(time_t* out) noexcept {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (out != nullptr) *out = ts.tv_sec;
  return ts.tv_sec;
}
