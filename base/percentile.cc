// SPDX-License-Identifier: Apache-2.0
#include "base/percentile.h"

#include <algorithm>
#include <cmath>

namespace sluice::base {

uint64_t NearestRank(uint64_t count, double q) {
  if (!(q >= 0)) q = 0;  // NaN too
  if (q > 1) q = 1;
  const auto rank =
      static_cast<uint64_t>(std::ceil(q * static_cast<double>(count)));
  return std::clamp<uint64_t>(rank, 1, count);
}

}  // namespace sluice::base
