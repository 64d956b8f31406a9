// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_POLICY_POLICY_CONVERT_H_
#define SLUICE_SERVER_POLICY_POLICY_CONVERT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "server/core/policy_config.h"
#include "sluice/v1/policy.pb.h"

namespace sluice::policy {

// Validates `policy` as a whole and resolves its defaults. Every error is
// INVALID_ARGUMENT and names the policy, the field and the rule, e.g.
//   policy "inventory": breaker.failure_rate_threshold must be in (0, 1],
//   got 1.5
// The version field is copied as is; `digest` is PolicyDigest of the
// canonical form (FromConfig of the result).
absl::StatusOr<core::PolicyConfig> ToConfig(const v1::Policy& policy);

// The proto form of a config, with every default written out.
v1::Policy FromConfig(const core::PolicyConfig& config);

// A digest of what a canonical policy (FromConfig's output) says, its
// version excluded: FNV-1a (64-bit) of its deterministic serialization. The
// same content gives the same digest in every process and after restarts of
// the same build; any change of a field changes it (barring a collision).
uint64_t PolicyDigest(const v1::Policy& canonical);

// Whether two Envoy descriptors match the same requests (same domain, same
// entries in the same order).
bool SameEnvoyDescriptor(const core::EnvoyDescriptorConfig& a,
                         const core::EnvoyDescriptorConfig& b);

// `"edge" ["destination_cluster": "payments", "tenant": *]`, for messages.
std::string EnvoyDescriptorString(const core::EnvoyDescriptorConfig& d);

// The config form of a route of a canonical policy (FromConfig's output,
// already validated and normalised).
core::HttpRouteConfig CanonicalHttpRoute(const v1::HttpRoute& canonical);

// `host "api.example.com" path "/pay"... methods GET,POST`, for messages.
std::string HttpRouteString(const core::HttpRouteConfig& route);

}  // namespace sluice::policy

#endif  // SLUICE_SERVER_POLICY_POLICY_CONVERT_H_
