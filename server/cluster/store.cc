// SPDX-License-Identifier: Apache-2.0
#include "server/cluster/store.h"

namespace sluice::cluster {

void Store::WriteStats(base::StatsWriter& out) const {
  const StoreStatus s = status();
  static constexpr base::MetricDef kStoreErrors = base::CounterDef(
      "sluice_store_errors_total", {"kind"},
      "Failed store connections and round trips by kind: connect, "
      "timeout, auth (password or ACL refused, or a password missing), "
      "readonly (a replica answered), sentinel (no sentinel named the "
      "master), protocol, script. Cluster mode only.");
  for (const auto& [kind, n] : s.errors) {
    out.Write(kStoreErrors, {kind}, static_cast<double>(n));
  }
  static constexpr base::MetricDef kStoreEvents = base::CounterDef(
      "sluice_store_events_total", {"kind"},
      "Store topology changes followed, by kind: master_changed (Redis "
      "Sentinel failover), moved (a leaf's upstream central replica "
      "changed). Cluster mode only.");
  for (const auto& [kind, n] : s.events) {
    out.Write(kStoreEvents, {kind}, static_cast<double>(n));
  }
  static constexpr base::MetricDef kStoreEndpointInfo = base::GaugeDef(
      "sluice_store_endpoint_info", {"endpoint"},
      "Always 1; the endpoint label says where the store is now (host:port, "
      "the master Sentinel named, or the masters of a Redis Cluster). "
      "Cluster mode only.");
  if (!s.endpoint.empty()) {
    out.Write(kStoreEndpointInfo, {s.endpoint}, 1);
  }
}

}  // namespace sluice::cluster
