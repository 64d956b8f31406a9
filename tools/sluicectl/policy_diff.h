// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TOOLS_SLUICECTL_POLICY_DIFF_H_
#define SLUICE_TOOLS_SLUICECTL_POLICY_DIFF_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "sluice/v1/policy.pb.h"

namespace sluice::ctl {

// What `apply` would do to one policy.
struct PlannedChange {
  enum class Kind { kCreate, kUpdate, kUnchanged };
  Kind kind = Kind::kUnchanged;
  v1::Policy policy;            // as it will be sent
  uint64_t server_version = 0;  // 0 when the server does not have it
  std::string diff;             // unified-style lines, "" when unchanged
};

// Validates every policy of `file` locally (the same rules the server
// applies) and compares each with `server` (the server's ListPolicies).
// Policies only on the server are left alone. INVALID_ARGUMENT naming the
// policy, field and rule for the first invalid one.
absl::StatusOr<std::vector<PlannedChange>> PlanApply(
    const std::vector<v1::Policy>& file, const std::vector<v1::Policy>& server);

// A line diff of two texts: "  same", "- removed", "+ added".
std::string LineDiff(const std::string& before, const std::string& after);

// One policy as YAML, without its version (defaults written out).
std::string PolicyYaml(const v1::Policy& policy);

}  // namespace sluice::ctl

#endif  // SLUICE_TOOLS_SLUICECTL_POLICY_DIFF_H_
