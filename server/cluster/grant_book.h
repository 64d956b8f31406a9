// SPDX-License-Identifier: Apache-2.0
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

// The shares FairSplit rounds, before rounding: `total` split max-min fair
// by demand (plus 5% headroom), what nobody wants spread evenly. Pure.
std::vector<double> FairShares(int64_t total, const std::vector<double>& demand);

// One party's standing in CreditSplit, kept by the caller between splits.
struct SplitCredit {
  // Sub-unit share owed (positive) or taken ahead (negative), in units
  // times seconds.
  double credit = 0;
  // The fractional part of the party's share at the last split.
  double fraction = 0;
  // The party has a unit above its whole share in the current slot, and
  // will have one in the next (chosen when the current slot began).
  bool member = false;
  bool next = false;
};

// Whole units from fractional shares, fair over time, handed over only at
// slot boundaries, which the caller schedules. Each party earns the
// fractional part of its share as credit for every second, and pays 1 for
// every second it held a unit above its whole share (`holding[j]` since
// the last split, `seconds` ago). The units left after every party's whole
// share go to members. When a slot begins (`new_slot`), the members chosen
// for it at the start of the previous one take over, and the next slot's
// are chosen: the parties with the most credit once this slot (of
// `slot_seconds`) is paid for. So every party knows a
// slot ahead whether it gains or loses a unit, and a unit moves from one
// party to the next at the boundary without lying idle. Between slot
// starts the members change only when the number of units left over does:
// the member with the least credit drops out, or a party chosen for the
// next slot (else the one with the most credit) comes in. Over time a
// party gets units in proportion to its share, and every party with a
// fraction gets a turn. `credit` has one entry per party (updated).
std::vector<int64_t> CreditSplit(int64_t total,
                                 const std::vector<double>& share,
                                 const std::vector<bool>& holding,
                                 double seconds, double slot_seconds,
                                 bool new_slot,
                                 std::vector<SplitCredit>* credit);

}  // namespace sluice::cluster

#endif  // SLUICE_SERVER_CLUSTER_GRANT_BOOK_H_
