// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TOOLS_SLUICE_BENCH_PERCENTILE_HISTOGRAM_H_
#define SLUICE_TOOLS_SLUICE_BENCH_PERCENTILE_HISTOGRAM_H_

#include <cstdint>
#include <vector>

#include "absl/time/time.h"

namespace sluice::bench {

// A log-linear (HDR-style) histogram of durations for percentiles: every
// power of two of nanoseconds is split into 128 equal buckets, so a
// percentile is off by less than 0.4% of its value (half a bucket) while the
// histogram stays a fixed 30 KB however many samples it holds.
// server/metrics/prometheus_latency_histogram.h has 14 Prometheus buckets, far
// too coarse for a p999. Not thread-safe; the owner locks.
class PercentileHistogram {
 public:
  PercentileHistogram();

  // Negative durations count as 0; durations beyond about 68 s as 68 s.
  void Record(absl::Duration d);
  void Merge(const PercentileHistogram& other);

  uint64_t count() const { return count_; }
  absl::Duration max() const { return absl::Nanoseconds(max_nanos_); }
  absl::Duration mean() const;
  // The duration that `q` (in [0, 1]) of the samples are at or below: the
  // middle of its bucket. Zero when empty.
  absl::Duration Percentile(double q) const;

 private:
  static constexpr int kSubBits = 7;
  static constexpr int64_t kSubBuckets = int64_t{1} << kSubBits;
  static constexpr int kMaxExponent = 35;  // 2^36 ns is about 68.7 s

  static int IndexOf(int64_t nanos);
  // The smallest value of bucket `index`, and its width.
  static int64_t LowerBound(int index);
  static int64_t Width(int index);

  std::vector<uint64_t> buckets_;
  uint64_t count_ = 0;
  int64_t max_nanos_ = 0;
  double sum_nanos_ = 0;
};

}  // namespace sluice::bench

#endif  // SLUICE_TOOLS_SLUICE_BENCH_PERCENTILE_HISTOGRAM_H_
