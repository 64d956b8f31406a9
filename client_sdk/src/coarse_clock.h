// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_CLIENT_SRC_COARSE_CLOCK_H_
#define SLUICE_CLIENT_SRC_COARSE_CLOCK_H_

#include "absl/time/time.h"

namespace sluice::client::internal {

// How far the coarse clock may trail the true time before CoarseNow stops
// using it. The kernel moves it at each scheduler tick (4 ms at 250 Hz),
// which a busy or virtual machine may deliver late: the worst lag seen in
// 2 million reads on a 2-vCPU VM was 8 ms, two ticks.
inline constexpr absl::Duration kCoarseLagAllowance = absl::Milliseconds(25);

// The wall clock as the kernel's coarse source keeps it
// (CLOCK_REALTIME_COARSE: read from the vDSO in about 7 ns, where absl::Now
// takes about 30 on such a VM), moved on by kCoarseLagAllowance so that it
// is not behind the true time. absl::Now where the kernel has no usable
// coarse source, and from the first CheckCoarseClock that found it behind
// all the same.
//
// For a leased decision, which compares it with the end of its lease, of a
// retry wait or of an OPEN answer. Each of those is counted from an
// absl::Now taken when the renewal or Acquire was sent, so the coarse clock
// ends one up to the allowance early, never late.
absl::Time CoarseNow();

// `precise`, an absl::Now() just taken: if CoarseNow is behind it, the lag
// outgrew the allowance, and CoarseNow answers absl::Now() from then on in
// this process. Each lease renewal checks.
void CheckCoarseClock(absl::Time precise);

}  // namespace sluice::client::internal

#endif  // SLUICE_CLIENT_SRC_COARSE_CLOCK_H_
