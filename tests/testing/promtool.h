// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_PROMTOOL_H_
#define SLUICE_TESTS_TESTING_PROMTOOL_H_

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace sluice::testing {

// What `promtool check metrics` (Debian's prometheus package) says of a
// /metrics body: "" when it has no complaint.
inline std::string Promtool(const std::string& body) {
  const std::string path = ::testing::TempDir() + "/sluice_metrics.txt";
  {
    std::ofstream out(path);
    out << body;
  }
  const std::string cmd =
      absl::StrCat("promtool check metrics < ", path, " 2>&1");
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return "cannot run promtool";
  std::string output;
  char buf[512];
  while (fgets(buf, sizeof(buf), pipe) != nullptr) output += buf;
  const int rc = pclose(pipe);
  if (rc != 0 && output.empty()) output = absl::StrCat("exit status ", rc);
  return output;
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_PROMTOOL_H_
