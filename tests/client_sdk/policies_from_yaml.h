// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_CLIENT_SDK_POLICIES_FROM_YAML_H_
#define SLUICE_TESTS_CLIENT_SDK_POLICIES_FROM_YAML_H_

#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "server/policy/policy_convert.h"
#include "server/policy/policy_file.h"

namespace sluice::client {

// Installs the policies of a policies file's text in `engine`, as sluiced
// would load them (its store numbers them from 1); a test fails on a
// policy that does not parse.
inline void InstallPolicies(absl::string_view yaml, core::Engine* engine) {
  auto policies = policy::ParsePolicies(yaml, "test");
  ASSERT_TRUE(policies.ok()) << policies.status();
  std::vector<core::PolicyConfig> configs;
  for (const auto& p : *policies) {
    auto config = policy::ToConfig(p);
    ASSERT_TRUE(config.ok()) << config.status();
    config->version = configs.size() + 1;
    configs.push_back(*std::move(config));
  }
  engine->ReplacePolicies(std::move(configs));
}

}  // namespace sluice::client

#endif  // SLUICE_TESTS_CLIENT_SDK_POLICIES_FROM_YAML_H_
