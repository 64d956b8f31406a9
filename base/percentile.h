// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_BASE_PERCENTILE_H_
#define SLUICE_BASE_PERCENTILE_H_

#include <algorithm>
#include <cstdint>
#include <vector>

namespace sluice::base {

// Percentiles by the nearest-rank rule: the q-th percentile of n sorted
// values is the one at rank ceil(q * n) (counting from 1), and at least the
// first. No interpolation, so the answer is always one of the values (a
// latency that was measured), and the 100th percentile is the largest.

// The rank (from 1) of the q-th percentile of `count` values, count > 0;
// q is clamped to [0, 1].
uint64_t NearestRank(uint64_t count, double q);

// The q-th percentile of `sorted`, in ascending order; T() when empty.
template <typename T>
T SortedPercentile(const std::vector<T>& sorted, double q) {
  if (sorted.empty()) return T();
  return sorted[NearestRank(sorted.size(), q) - 1];
}

// The q-th percentile of `values`, which it sorts; T() when empty.
template <typename T>
T Percentile(std::vector<T>& values, double q) {
  std::sort(values.begin(), values.end());
  return SortedPercentile(values, q);
}

}  // namespace sluice::base

#endif  // SLUICE_BASE_PERCENTILE_H_
