#include "server/cluster/share_allocator.h"

#include <algorithm>
#include <numeric>

namespace sluice::cluster {

std::vector<double> AllocateShares(const std::vector<double>& demand,
                                   double limit, const ShareOptions& options) {
  const size_t n = demand.size();
  std::vector<double> share(n, 0);
  if (n == 0) return share;
  if (limit <= 0) {
    std::fill(share.begin(), share.end(), 1.0 / n);
    return share;
  }
  // Work in fractions of the limit.
  const double floor_each = options.floor / n;
  std::vector<double> want(n);
  for (size_t i = 0; i < n; ++i) {
    want[i] = std::max(0.0, demand[i] * options.headroom / limit - floor_each);
    share[i] = floor_each;
  }
  double left = 1.0 - options.floor;

  // Water-fill in order of increasing want.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return want[a] < want[b]; });
  size_t remaining = n;
  for (size_t i : order) {
    const double even = left / remaining;
    const double give = std::min(want[i], even);
    share[i] += give;
    left -= give;
    --remaining;
  }
  // What nobody wanted is spread evenly, so the shares still add up to 1.
  if (left > 0) {
    for (double& s : share) s += left / n;
  }
  return share;
}

}  // namespace sluice::cluster
