// SPDX-License-Identifier: Apache-2.0
#include "server/http/request_counters.h"

#include <algorithm>

namespace sluice::http {

void RequestCounters::Add(Endpoint endpoint, int http_status) {
  const auto* found =
      std::find(kCountedStatuses.begin(), kCountedStatuses.end(), http_status);
  const size_t slot = static_cast<size_t>(found - kCountedStatuses.begin());
  counts_[static_cast<size_t>(endpoint)][slot].fetch_add(
      1, std::memory_order_relaxed);
}

std::vector<RequestCounters::Count> RequestCounters::Snapshot() const {
  std::vector<Count> out;
  for (int e = 0; e < kEndpointCount; ++e) {
    const auto endpoint = static_cast<Endpoint>(e);
    for (size_t slot = 0; slot < kSlots; ++slot) {
      const uint64_t n = counts_[e][slot].load(std::memory_order_relaxed);
      const bool ok_series =
          slot == 0 && endpoint != Endpoint::kUnknown;  // 200
      if (n == 0 && !ok_series) continue;
      out.push_back({endpoint,
                     slot < kCountedStatuses.size()
                         ? std::to_string(kCountedStatuses[slot])
                         : std::string("other"),
                     n});
    }
  }
  return out;
}

}  // namespace sluice::http
