// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_ACQUIRE_LOAD_H_
#define SLUICE_TESTS_TESTING_ACQUIRE_LOAD_H_

// Offered load for the multi-process tests: one thread per replica calls
// Acquire until told to stop and keeps the time of every admitted call, so
// a test can measure admitted/s over any window afterwards.

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/testing/sluiced_process.h"

namespace sluice::testing {

// What one DriveAcquire thread saw.
struct AcquireLoad {
  std::vector<absl::Time> admitted;
  int64_t asked = 0;  // calls answered
  int64_t allowed = 0;
  int64_t errors = 0;  // calls that failed as RPCs
};

// Calls Acquire(dep) on `replica` until `stop`, pausing `pause` between
// calls (the pacing of the offered load).
inline void DriveAcquire(SluicedProcess* replica, const std::string& dep,
                         absl::Duration pause, const std::atomic<bool>* stop,
                         AcquireLoad* out) {
  while (!stop->load()) {
    grpc::Status status;
    const v1::AcquireResponse r = replica->Acquire(dep, &status);
    if (!status.ok()) {
      ++out->errors;
    } else {
      ++out->asked;
      if (r.verdict() == v1::ALLOW) {
        ++out->allowed;
        out->admitted.push_back(absl::Now());
      }
    }
    absl::SleepFor(pause);  // paces the offered load
  }
}

// Admitted calls per second in [from, to) of `admitted` (any order).
inline double AdmittedPerSecond(const std::vector<absl::Time>& admitted,
                                absl::Time from, absl::Time to) {
  int64_t n = 0;
  for (absl::Time t : admitted) n += t >= from && t < to;
  return n / absl::ToDoubleSeconds(to - from);
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_ACQUIRE_LOAD_H_
