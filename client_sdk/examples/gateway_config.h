// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_CLIENT_SDK_EXAMPLES_GATEWAY_CONFIG_H_
#define SLUICE_CLIENT_SDK_EXAMPLES_GATEWAY_CONFIG_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "sluice/client/options.h"

namespace sluice::examples {

// One route: requests whose path starts with `prefix` go to `backend` (the
// path is passed on unchanged), guarded by Sluice's policy `dependency`.
struct Route {
  std::string prefix;
  std::string dependency;
  // Base URL, "http://host:port".
  std::string backend;
  // Request header whose value is the Sluice key ("" = no key).
  std::string key_header;
  // The gateway's own answer for DEFAULT fallbacks and failed calls.
  std::string default_fallback = "null";
  // Serve the fallback when an allowed call fails, so clients see a degraded
  // answer instead of a 502.
  bool fallback_on_failure = true;
};

struct GatewayConfig {
  std::string listen = "127.0.0.1:8080";
  // gRPC target of Sluice (several replicas: "ipv4:a:p1,b:p2"). A
  // "unix:PATH" target is a sidecar in the same pod: the client starts from
  // SidecarClientOptions(PATH) (5ms acquire timeout, fast reconnects).
  std::string sluice = "127.0.0.1:50051";
  // TLS to Sluice (sluice_tls: ca_file, cert_file, key_file, server_name;
  // see ClientOptions::tls). Absent: plaintext.
  client::TlsOptions sluice_tls;
  // Unset: 20ms, or the sidecar preset's 5ms for a unix: target.
  std::optional<absl::Duration> acquire_timeout;
  bool fail_open = true;
  // Decide busy dependencies in-process from leases (ClientOptions::lease),
  // renewed every lease_tick (unset: the SDK's default). Unset: on for a
  // unix: target (the sidecar preset), off otherwise.
  std::optional<bool> lease;
  std::optional<absl::Duration> lease_tick;
  // HTTP worker threads; each serves one client connection at a time.
  int threads = 64;
  std::vector<Route> routes;
};

// Parses the YAML config, e.g.
//   listen: 127.0.0.1:8080
//   sluice: ipv4:127.0.0.1:50051,127.0.0.1:50061
//   acquire_timeout: 20ms
//   sluice_tls:                  # optional; docs/tls.md
//     ca_file: /etc/sluice-tls/ca.crt
//     cert_file: /etc/sluice-tls/tls.crt   # with --tls-client-ca
//     key_file: /etc/sluice-tls/tls.key
//   routes:
//     - prefix: /api/catalog
//       dependency: catalog
//       backend: http://127.0.0.1:8081
//       default_fallback: '{"items":[]}'
// Errors are INVALID_ARGUMENT naming `source` and the field.
absl::StatusOr<GatewayConfig> ParseGatewayConfig(absl::string_view text,
                                                 absl::string_view source);

// The route with the longest matching prefix, or null.
const Route* MatchRoute(const GatewayConfig& config, absl::string_view path);

}  // namespace sluice::examples

#endif  // SLUICE_CLIENT_SDK_EXAMPLES_GATEWAY_CONFIG_H_
