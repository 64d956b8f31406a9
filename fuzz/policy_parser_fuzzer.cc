// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the policies file parser (policy::ParsePolicies, YAML or
// JSON), then, for what parses, the validation into the core's config and
// the YAML sluicectl writes back, which must parse again.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/policy/policy_convert.h"
#include "server/policy/policy_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<std::vector<sluice::v1::Policy>> policies =
      sluice::policy::ParsePolicies(text, "fuzz.yaml");
  if (!policies.ok()) return 0;
  for (const sluice::v1::Policy& policy : *policies) {
    (void)sluice::policy::ToConfig(policy);
  }
  const std::string written = sluice::policy::PoliciesToYaml(*policies);
  absl::StatusOr<std::vector<sluice::v1::Policy>> again =
      sluice::policy::ParsePolicies(written, "rewritten.yaml");
  if (!again.ok() || again->size() != policies->size()) {
    std::fprintf(stderr, "written policies do not parse again: %s\n%s\n",
                 again.ok() ? "another count"
                            : std::string(again.status().message()).c_str(),
                 written.c_str());
    std::abort();
  }
  return 0;
}
