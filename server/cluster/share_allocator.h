#ifndef SLUICE_SERVER_CLUSTER_SHARE_ALLOCATOR_H_
#define SLUICE_SERVER_CLUSTER_SHARE_ALLOCATOR_H_

#include <vector>

namespace sluice::cluster {

// Splits one cluster-wide limit between replicas by their demand over the
// last tick. Every replica runs this on the same inputs and takes its own
// entry, so the fractions add up to exactly 1 and no replica can admit the
// whole limit on its own while others want some.
//
// Max-min fair rather than proportional to demand: a replica running flat
// out has unbounded demand and would starve paced replicas under a
// proportional split. Here each replica first gets a small floor (so an idle
// replica can still admit the first calls of a burst), then the rest is
// water-filled: replicas that want less than an even part get what they want
// (plus `headroom` for noise), the others split what remains, and whatever
// nobody wants is spread evenly.
struct ShareOptions {
  // Part of the limit reserved as floors, split evenly among replicas.
  double floor = 0.05;
  // Demand is scaled by this before filling, so a steady replica does not
  // miss by the noise of one tick.
  double headroom = 1.05;
};

// `demand[i]` is replica i's demand in the same units as `limit` (both per
// second). Returns each replica's fraction of the limit; they sum to 1.
std::vector<double> AllocateShares(const std::vector<double>& demand,
                                   double limit,
                                   const ShareOptions& options = {});

}  // namespace sluice::cluster

#endif  // SLUICE_SERVER_CLUSTER_SHARE_ALLOCATOR_H_
