// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_POLICY_POLICY_FILE_H_
#define SLUICE_SERVER_POLICY_POLICY_FILE_H_

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

// Reads and parses the file at `path` (NOT_FOUND / PERMISSION_DENIED when
// unreadable).
absl::StatusOr<std::vector<v1::Policy>> LoadPolicyFile(const std::string& path);

// Reads a whole regular file (at most 16 MiB) with files::ReadRegularFile:
// never blocks on a FIFO; NOT_FOUND, PERMISSION_DENIED, FAILED_PRECONDITION
// ("PATH is a FIFO, not a regular file") and the like, naming the path.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

// Writes policies in the same document shape (for sluicectl and docs).
std::string PoliciesToYaml(const std::vector<v1::Policy>& policies);

}  // namespace sluice::policy

#endif  // SLUICE_SERVER_POLICY_POLICY_FILE_H_
