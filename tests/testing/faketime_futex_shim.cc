// SPDX-License-Identifier: Apache-2.0
// An LD_PRELOAD companion of libfaketime for tests that run one process with
// a shifted clock (LD_PRELOAD="libfaketimeMT.so.1:<this>" FAKETIME=+4s).
//
// libfaketime shifts what clock_gettime returns, but abseil's timed waits
// (absl::Mutex::AwaitWithDeadline, CondVar::WaitWithTimeout) hand an absolute
// CLOCK_REALTIME deadline, computed from that shifted clock, straight to the
// futex syscall, and the kernel measures it on the real clock. With
// FAKETIME=+4s every such wait lasts 4 s longer: sluiced's 1 s sync tick
// becomes a 5 s one. A host whose clock is really 4 s ahead has no such
// effect, so this shim moves those deadlines back onto the kernel's clock.
// Then the process sees a different time and nothing else.
#include <dlfcn.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>

#include <cstdarg>
#include <cstdint>

namespace {

using SyscallFn = long (*)(long, ...);

SyscallFn RealSyscall() {
  static const SyscallFn real =
      reinterpret_cast<SyscallFn>(dlsym(RTLD_NEXT, "syscall"));
  return real;
}

int64_t Nanos(const timespec& t) {
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}

}  // namespace

extern "C" long syscall(long number, ...) noexcept {
  va_list ap;
  va_start(ap, number);
  long a[6];
  for (long& arg : a) arg = va_arg(ap, long);
  va_end(ap);
  const SyscallFn real = RealSyscall();
  timespec adjusted;
  const int op = static_cast<int>(a[1]);
  if (number == SYS_futex && (op & FUTEX_CLOCK_REALTIME) != 0 &&
      (op & FUTEX_CMD_MASK) == FUTEX_WAIT_BITSET && a[3] != 0) {
    timespec shifted_now, kernel_now;
    clock_gettime(CLOCK_REALTIME, &shifted_now);  // libfaketime's answer
    real(SYS_clock_gettime, CLOCK_REALTIME, &kernel_now);
    const int64_t deadline = Nanos(*reinterpret_cast<const timespec*>(a[3])) -
                             (Nanos(shifted_now) - Nanos(kernel_now));
    adjusted.tv_sec = deadline / 1000000000;
    adjusted.tv_nsec = deadline % 1000000000;
    a[3] = reinterpret_cast<long>(&adjusted);
  }
  return real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}
