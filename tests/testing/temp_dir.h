// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_TEMP_DIR_H_
#define SLUICE_TESTS_TESTING_TEMP_DIR_H_

// A fresh directory under /tmp for one test, removed with everything in it
// when the TempDir goes away.

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace sluice::testing {

class TempDir {
 public:
  // `prefix` names the test in the directory's name: /tmp/PREFIX_XXXXXX.
  explicit TempDir(const std::string& prefix) {
    std::string name = "/tmp/" + prefix + "_XXXXXX";
    if (mkdtemp(name.data()) != nullptr) path_ = name;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // Empty when the directory could not be made.
  const std::string& path() const { return path_; }
  // path() + "/" + name.
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_TEMP_DIR_H_
