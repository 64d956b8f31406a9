#include "server/cluster/grant_book.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace sluice::cluster {

std::vector<int64_t> FairSplit(int64_t total,
                               const std::vector<std::string>& names,
                               const std::vector<double>& demand,
                               absl::Time now) {
  constexpr double kHeadroom = 1.05;
  const size_t n = std::min(names.size(), demand.size());
  std::vector<int64_t> units(n, 0);
  if (n == 0 || total <= 0) return units;
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  // Callers usually pass names in order (the ledger's parties are a sorted
  // map): then an index stands for its name, and no string is compared.
  const bool in_order = std::is_sorted(names.begin(), names.begin() + n);
  auto before = [&](size_t a, size_t b) {
    return in_order ? a < b : names[a] < names[b];
  };
  // Smallest demand first: each takes what it asks, or an equal part of
  // what is left, whichever is less.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (demand[a] != demand[b]) return demand[a] < demand[b];
    return before(a, b);
  });
  std::vector<double> share(n, 0.0);
  double left = static_cast<double>(total);
  size_t remaining = n;
  for (size_t j : order) {
    const double asked = std::max(0.0, demand[j]) * kHeadroom;
    share[j] = std::min(asked, left / static_cast<double>(remaining));
    left -= share[j];
    --remaining;
  }
  int64_t used = 0;
  for (size_t j = 0; j < n; ++j) {
    share[j] += left / static_cast<double>(n);
    units[j] = static_cast<int64_t>(std::floor(share[j] + 1e-9));
    used += units[j];
  }
  if (in_order) {
    std::iota(order.begin(), order.end(), size_t{0});
  } else {
    std::sort(order.begin(), order.end(), before);
  }
  const int64_t turn = absl::ToUnixMillis(now) / 10000;
  std::vector<int64_t> rank(n, 0);
  for (size_t pos = 0; pos < n; ++pos) {
    rank[order[pos]] =
        (static_cast<int64_t>(pos) + turn) % static_cast<int64_t>(n);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const double ra = share[a] - static_cast<double>(units[a]);
    const double rb = share[b] - static_cast<double>(units[b]);
    if (ra != rb) return ra > rb;
    return rank[a] < rank[b];
  });
  const int64_t extra = std::min<int64_t>(static_cast<int64_t>(n),
                                          std::max<int64_t>(0, total - used));
  for (int64_t k = 0; k < extra; ++k) ++units[order[static_cast<size_t>(k)]];
  return units;
}

}  // namespace sluice::cluster
