// SPDX-License-Identifier: Apache-2.0
#include "tools/sluicectl/policy_diff.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/policy/policy_convert.h"
#include "server/policy/policy_file.h"

namespace sluice::ctl {

std::string PolicyYaml(const v1::Policy& policy) {
  v1::Policy p = policy;
  p.set_version(0);
  return policy::PoliciesToYaml({p});
}

std::string LineDiff(const std::string& before, const std::string& after) {
  const std::vector<std::string> a = absl::StrSplit(before, '\n');
  const std::vector<std::string> b = absl::StrSplit(after, '\n');
  // Longest common subsequence table; policies are a few dozen lines.
  std::vector<std::vector<int>> lcs(a.size() + 1,
                                    std::vector<int>(b.size() + 1, 0));
  for (size_t i = a.size(); i-- > 0;) {
    for (size_t j = b.size(); j-- > 0;) {
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1
                               : std::max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  std::string out;
  size_t i = 0, j = 0;
  while (i < a.size() || j < b.size()) {
    if (i < a.size() && j < b.size() && a[i] == b[j]) {
      if (!a[i].empty()) absl::StrAppend(&out, "  ", a[i], "\n");
      ++i;
      ++j;
    } else if (j < b.size() &&
               (i == a.size() || lcs[i][j + 1] >= lcs[i + 1][j])) {
      absl::StrAppend(&out, "+ ", b[j++], "\n");
    } else {
      absl::StrAppend(&out, "- ", a[i++], "\n");
    }
  }
  return out;
}

absl::StatusOr<std::vector<PlannedChange>> PlanApply(
    const std::vector<v1::Policy>& file,
    const std::vector<v1::Policy>& server) {
  std::map<std::string, const v1::Policy*> by_name;
  for (const v1::Policy& p : server) by_name[p.name()] = &p;
  std::vector<PlannedChange> plan;
  for (const v1::Policy& p : file) {
    v1::Policy input = p;
    input.set_version(0);
    absl::StatusOr<core::PolicyConfig> config = policy::ToConfig(input);
    if (!config.ok()) return config.status();
    PlannedChange change;
    change.policy = policy::FromConfig(*config);
    change.policy.set_version(0);
    const std::string after = PolicyYaml(change.policy);
    auto it = by_name.find(p.name());
    if (it == by_name.end()) {
      change.kind = PlannedChange::Kind::kCreate;
      change.diff = LineDiff("", after);
    } else {
      change.server_version = it->second->version();
      const std::string before = PolicyYaml(*it->second);
      if (before == after) {
        change.kind = PlannedChange::Kind::kUnchanged;
      } else {
        change.kind = PlannedChange::Kind::kUpdate;
        change.diff = LineDiff(before, after);
      }
    }
    plan.push_back(std::move(change));
  }
  return plan;
}

}  // namespace sluice::ctl
