// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_CLIENT_SRC_COUNTERS_H_
#define SLUICE_CLIENT_SRC_COUNTERS_H_

#include <atomic>
#include <cstdint>

#include "sluice/client/client.h"

namespace sluice::client::internal {

// The live form of ClientStats. Relaxed atomics: counts, not ordering.
struct Counters {
  std::atomic<uint64_t> acquires{0};
  std::atomic<uint64_t> local_decisions{0};
  std::atomic<uint64_t> backoff_decisions{0};
  std::atomic<uint64_t> reports_sent{0};
  std::atomic<uint64_t> reports_failed{0};
  std::atomic<uint64_t> reports_dropped{0};
  std::atomic<uint64_t> report_batches{0};
  std::atomic<uint64_t> reports_auto_cancelled{0};
  std::atomic<uint64_t> cache_hits{0};
  std::atomic<uint64_t> cache_misses{0};
  // Leased calls are counted by their LeaseLine (LeaseLine::AddStats);
  // these two only count the calls refused while Sluice could not be asked
  // and a lease still held the limit.
  std::atomic<uint64_t> lease_refusals{0};
  std::atomic<uint64_t> lease_decisions_while_unreachable{0};
  std::atomic<uint64_t> lease_renewals{0};
  std::atomic<uint64_t> lease_renewal_failures{0};
  std::atomic<uint64_t> lease_expiries{0};
  std::atomic<uint64_t> leases_ended{0};

  static void Inc(std::atomic<uint64_t>& c, uint64_t n = 1) {
    c.fetch_add(n, std::memory_order_relaxed);
  }
  ClientStats Snapshot() const;
};

}  // namespace sluice::client::internal

#endif  // SLUICE_CLIENT_SRC_COUNTERS_H_
