// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_PROMTOOL_H_
#define SLUICE_TESTS_TESTING_PROMTOOL_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace sluice::testing {

// What `promtool check metrics` (Debian's prometheus package) says of a
// /metrics body: "" when it has no complaint. The body goes through a file
// of this call's own (mkstemp): ctest runs tests side by side, and a
// shared name let one test's promtool read another's body.
inline std::string Promtool(const std::string& body) {
  std::string path = ::testing::TempDir() + "/sluice_metrics.XXXXXX";
  const int fd = mkstemp(path.data());
  if (fd < 0) return "cannot make a temporary file for promtool";
  size_t written = 0;
  while (written < body.size()) {
    const ssize_t n = write(fd, body.data() + written, body.size() - written);
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
  close(fd);
  if (written != body.size()) {
    unlink(path.c_str());
    return "cannot write the body for promtool";
  }
  const std::string cmd =
      absl::StrCat("promtool check metrics < ", path, " 2>&1");
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string output;
  if (pipe == nullptr) {
    output = "cannot run promtool";
  } else {
    char buf[512];
    while (fgets(buf, sizeof(buf), pipe) != nullptr) output += buf;
    const int rc = pclose(pipe);
    if (rc != 0 && output.empty()) output = absl::StrCat("exit status ", rc);
  }
  unlink(path.c_str());
  return output;
}

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_PROMTOOL_H_
