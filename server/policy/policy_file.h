// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_POLICY_POLICY_FILE_H_
#define SLUICE_SERVER_POLICY_POLICY_FILE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "sluice/v1/policy.pb.h"

namespace sluice::policy {

// Parses a policies document: YAML (or JSON, which is YAML) with a top-level
// `policies:` list, each entry the JSON mapping of sluice.v1.Policy.
// Unknown fields, bad enum names, bad durations, missing or duplicate names
// and YAML syntax errors are INVALID_ARGUMENT naming `source` and, where
// known, the policy, the field and the line. Does not validate the policies'
// values; ToConfig does that.
absl::StatusOr<std::vector<v1::Policy>> ParsePolicies(absl::string_view text,
                                                      absl::string_view source);

// A policies document parsed, with where each policy's fields are written.
struct ParsedPolicies {
  std::vector<v1::Policy> policies;
  // One map a policy: the 1-based line of each field the file sets, by its
  // path as ToConfig's errors name it ("rate_limit.rate",
  // "envoy_descriptors[0].entries[1].value"), and "" for the policy itself.
  std::vector<std::map<std::string, int>> lines;
};

// ParsePolicies, keeping the lines.
absl::StatusOr<ParsedPolicies> ParsePoliciesWithLines(absl::string_view text,
                                                      absl::string_view source);

// The line of `field` in one policy's `lines`: its own when the file sets
// it, else its closest enclosing field's (a default that breaks a rule
// points at its block), else the policy's; 0 if `lines` is empty.
int FieldLine(const std::map<std::string, int>& lines,
              absl::string_view field);

// Reads and parses the file at `path` (NOT_FOUND / PERMISSION_DENIED when
// unreadable).
absl::StatusOr<std::vector<v1::Policy>> ParsePoliciesFile(
    const std::string& path);

// Writes policies in the same document shape (for sluicectl and docs).
std::string PoliciesToYaml(const std::vector<v1::Policy>& policies);

}  // namespace sluice::policy

#endif  // SLUICE_SERVER_POLICY_POLICY_FILE_H_
