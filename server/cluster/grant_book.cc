// SPDX-License-Identifier: Apache-2.0
#include "server/cluster/grant_book.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace sluice::cluster {

std::vector<int64_t> FairSplit(int64_t total,
                               const std::vector<std::string>& names,
                               const std::vector<double>& demand,
                               absl::Time now) {
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
  // Shares computed in name order, so that equal demands come out alike
  // whatever order the caller gave.
  if (!in_order) std::sort(order.begin(), order.end(), before);
  std::vector<double> by_name(n);
  for (size_t pos = 0; pos < n; ++pos) by_name[pos] = demand[order[pos]];
  const std::vector<double> named = FairShares(total, by_name);
  std::vector<double> share(n);
  for (size_t pos = 0; pos < n; ++pos) share[order[pos]] = named[pos];
  int64_t used = 0;
  for (size_t j = 0; j < n; ++j) {
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

std::vector<double> FairShares(int64_t total,
                               const std::vector<double>& demand) {
  constexpr double kHeadroom = 1.05;
  const size_t n = demand.size();
  std::vector<double> share(n, 0.0);
  if (n == 0 || total <= 0) return share;
  // Smallest demand first: each takes what it asks, or an equal part of
  // what is left, whichever is less. Equal demands are interchangeable.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (demand[a] != demand[b]) return demand[a] < demand[b];
    return a < b;
  });
  double left = static_cast<double>(total);
  size_t remaining = n;
  for (size_t j : order) {
    const double asked = std::max(0.0, demand[j]) * kHeadroom;
    share[j] = std::min(asked, left / static_cast<double>(remaining));
    left -= share[j];
    --remaining;
  }
  for (size_t j = 0; j < n; ++j) share[j] += left / static_cast<double>(n);
  return share;
}

std::vector<int64_t> CreditSplit(int64_t total,
                                 const std::vector<double>& share,
                                 const std::vector<bool>& holding,
                                 double seconds, double slot_seconds,
                                 bool new_slot,
                                 std::vector<SplitCredit>* credit) {
  // Credit is bounded, so that a party that stops asking or a long pause
  // cannot build a claim that shuts the others out for long.
  constexpr double kMaxCredit = 8.0;
  const size_t n = std::min({share.size(), holding.size(), credit->size()});
  std::vector<int64_t> units(n, 0);
  if (n == 0 || total <= 0) return units;
  std::vector<SplitCredit>& c = *credit;
  seconds = std::clamp(seconds, 0.0, kMaxCredit);
  int64_t used = 0;
  for (size_t j = 0; j < n; ++j) {
    // What the last split owed the party, less what it held above it.
    c[j].credit += (c[j].fraction - (holding[j] ? 1.0 : 0.0)) * seconds;
    c[j].credit = std::clamp(c[j].credit, -kMaxCredit, kMaxCredit);
    units[j] = static_cast<int64_t>(std::floor(share[j] + 1e-9));
    c[j].fraction = std::max(0.0, share[j] - static_cast<double>(units[j]));
    if (c[j].fraction < 1e-9) c[j].fraction = 0;
    used += units[j];
  }
  const size_t extra = static_cast<size_t>(std::min<int64_t>(
      static_cast<int64_t>(n), std::max<int64_t>(0, total - used)));
  // Parties by claim: only one with a fraction is owed a unit above its
  // whole share; then the most credit (plus `ahead`); then the order given.
  auto by_claim = [&](const std::vector<double>& ahead) {
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const bool fa = c[a].fraction > 0, fb = c[b].fraction > 0;
      if (fa != fb) return fa;
      const double ca = c[a].credit + ahead[a], cb = c[b].credit + ahead[b];
      if (ca != cb) return ca > cb;
      return a < b;
    });
    return order;
  };
  if (new_slot) {
    // The members chosen a slot ago take over.
    for (size_t j = 0; j < n; ++j) {
      c[j].member = c[j].next && c[j].fraction > 0;
      c[j].next = false;
    }
  }
  const std::vector<size_t> ranked = by_claim(std::vector<double>(n, 0.0));
  size_t members = 0;
  for (size_t j = 0; j < n; ++j) {
    if (c[j].member && c[j].fraction <= 0) c[j].member = false;
    if (c[j].member) ++members;
  }
  // Fewer units left over than members: the least owed drop out.
  for (auto it = ranked.rbegin(); it != ranked.rend() && members > extra;
       ++it) {
    if (c[*it].member) {
      c[*it].member = false;
      --members;
    }
  }
  // More: those chosen for the next slot come in first, then by claim.
  for (int pass = 0; pass < 2 && members < extra; ++pass) {
    for (size_t k = 0; k < n && members < extra; ++k) {
      SplitCredit& p = c[ranked[k]];
      if (p.member || (pass == 0 && !p.next)) continue;
      p.member = true;
      ++members;
    }
  }
  if (new_slot) {
    // The next slot's members: the most credit once this slot's turns are
    // paid for.
    std::vector<double> ahead(n);
    for (size_t j = 0; j < n; ++j) {
      ahead[j] = (c[j].fraction - (c[j].member ? 1.0 : 0.0)) * slot_seconds;
    }
    const std::vector<size_t> next = by_claim(ahead);
    for (size_t k = 0; k < extra; ++k) c[next[k]].next = true;
  }
  for (size_t j = 0; j < n; ++j) {
    if (c[j].member) ++units[j];
  }
  return units;
}

}  // namespace sluice::cluster
