// SPDX-License-Identifier: Apache-2.0
#include "tools/sluice-bench/percentile_histogram.h"

#include <algorithm>

#include "base/percentile.h"

namespace sluice::bench {
namespace {

int BitWidth(uint64_t v) {
  int width = 0;
  while (v != 0) {
    ++width;
    v >>= 1;
  }
  return width;
}

}  // namespace

// Values below 2 * kSubBuckets get a bucket each; above, the power of two
// [2^e, 2^(e+1)) has kSubBuckets buckets of width 2^(e - kSubBits).
PercentileHistogram::PercentileHistogram()
    : buckets_(kSubBuckets * (kMaxExponent - kSubBits + 2)) {}

int PercentileHistogram::IndexOf(int64_t nanos) {
  if (nanos < 2 * kSubBuckets) return static_cast<int>(nanos);
  const int e = BitWidth(static_cast<uint64_t>(nanos)) - 1;
  const int64_t sub = (nanos >> (e - kSubBits)) - kSubBuckets;
  return static_cast<int>(kSubBuckets * (e - kSubBits + 1) + sub);
}

int64_t PercentileHistogram::LowerBound(int index) {
  if (index < 2 * kSubBuckets) return index;
  const int e = static_cast<int>(index / kSubBuckets) + kSubBits - 1;
  const int64_t sub = index % kSubBuckets;
  return (kSubBuckets + sub) << (e - kSubBits);
}

int64_t PercentileHistogram::Width(int index) {
  if (index < 2 * kSubBuckets) return 1;
  const int e = static_cast<int>(index / kSubBuckets) + kSubBits - 1;
  return int64_t{1} << (e - kSubBits);
}

void PercentileHistogram::Record(absl::Duration d) {
  constexpr int64_t kLargest = (int64_t{1} << (kMaxExponent + 1)) - 1;
  const int64_t nanos =
      std::clamp<int64_t>(absl::ToInt64Nanoseconds(d), 0, kLargest);
  ++buckets_[IndexOf(nanos)];
  ++count_;
  max_nanos_ = std::max(max_nanos_, nanos);
  sum_nanos_ += static_cast<double>(nanos);
}

void PercentileHistogram::Merge(const PercentileHistogram& other) {
  for (size_t i = 0; i < buckets_.size(); ++i) buckets_[i] += other.buckets_[i];
  count_ += other.count_;
  max_nanos_ = std::max(max_nanos_, other.max_nanos_);
  sum_nanos_ += other.sum_nanos_;
}

absl::Duration PercentileHistogram::mean() const {
  if (count_ == 0) return absl::ZeroDuration();
  return absl::Nanoseconds(sum_nanos_ / static_cast<double>(count_));
}

absl::Duration PercentileHistogram::Percentile(double q) const {
  if (count_ == 0) return absl::ZeroDuration();
  const uint64_t rank = base::NearestRank(count_, q);
  uint64_t seen = 0;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    seen += buckets_[i];
    if (seen >= rank) {
      const int index = static_cast<int>(i);
      // The middle of the bucket, but never beyond the largest sample.
      const int64_t mid = LowerBound(index) + (Width(index) - 1) / 2;
      return absl::Nanoseconds(std::min(mid, max_nanos_));
    }
  }
  return max();
}

}  // namespace sluice::bench
