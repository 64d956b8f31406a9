// SPDX-License-Identifier: Apache-2.0
#include "server/cluster/store.h"

namespace sluice::cluster {

void Store::WriteStats(base::StatsWriter& out) const {
  const StoreStatus s = status();
  for (const auto& [kind, n] : s.errors) {
    out.Counter("sluice_store_errors_total", {{"kind", kind}},
                static_cast<double>(n));
  }
  for (const auto& [kind, n] : s.events) {
    out.Counter("sluice_store_events_total", {{"kind", kind}},
                static_cast<double>(n));
  }
  if (!s.endpoint.empty()) {
    out.Gauge("sluice_store_endpoint_info", {{"endpoint", s.endpoint}}, 1);
  }
}

}  // namespace sluice::cluster
