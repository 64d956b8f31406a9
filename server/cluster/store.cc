// SPDX-License-Identifier: Apache-2.0
#include "server/cluster/store.h"

namespace sluice::cluster {

constexpr base::MetricDef kStoreErrors{
    "sluice_store_errors_total",
    base::MetricType::kCounter,
    {"kind"},
    "Failed store connections and round trips by kind: connect, "
    "timeout, auth (password or ACL refused, or a password missing), "
    "readonly (a replica answered), sentinel (no sentinel named the "
    "master), protocol, script. Cluster mode only."};
constexpr base::MetricDef kStoreEvents{
    "sluice_store_events_total",
    base::MetricType::kCounter,
    {"kind"},
    "Store topology changes followed, by kind: master_changed (Redis "
    "Sentinel failover), moved (a leaf's upstream central replica "
    "changed). Cluster mode only."};
constexpr base::MetricDef kStoreEndpointInfo{
    "sluice_store_endpoint_info",
    base::MetricType::kGauge,
    {"endpoint"},
    "Always 1; the endpoint label says where the store is now (host:port, "
    "the master Sentinel named, or the masters of a Redis Cluster). "
    "Cluster mode only."};

void Store::WriteStats(base::StatsWriter& out) const {
  const StoreStatus s = status();
  for (const auto& [kind, n] : s.errors) {
    out.Write(kStoreErrors, {kind}, static_cast<double>(n));
  }
  for (const auto& [kind, n] : s.events) {
    out.Write(kStoreEvents, {kind}, static_cast<double>(n));
  }
  if (!s.endpoint.empty()) {
    out.Write(kStoreEndpointInfo, {s.endpoint}, 1);
  }
}

}  // namespace sluice::cluster
