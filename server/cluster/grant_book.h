#ifndef SLUICE_SERVER_CLUSTER_GRANT_BOOK_H_
#define SLUICE_SERVER_CLUSTER_GRANT_BOOK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace sluice::cluster {

// The fair split tick.lua's allocate() makes, for the ledger of a central
// replica: `total` whole units split max-min fair by demand (each party
// asks for its demand plus 5% headroom), what nobody wants spread evenly,
// then whole units by largest remainder. Equal remainders go by name in an
// order that turns every 10 s (by `now`), so that when there are fewer
// units than parties the units move round. names[j] and demand[j] describe
// party j; the result is in the same order. Pure; not thread-sensitive.
std::vector<int64_t> FairSplit(int64_t total,
                               const std::vector<std::string>& names,
                               const std::vector<double>& demand,
                               absl::Time now);

}  // namespace sluice::cluster

#endif  // SLUICE_SERVER_CLUSTER_GRANT_BOOK_H_
