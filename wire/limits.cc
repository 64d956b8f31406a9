// SPDX-License-Identifier: Apache-2.0
#include "wire/limits.h"

#include "absl/strings/str_cat.h"

namespace sluice::wire {

absl::Status ValidateRequestNames(absl::string_view dependency,
                                  absl::string_view key) {
  if (dependency.empty()) {
    return absl::InvalidArgumentError("dependency is required");
  }
  if (dependency.size() > kMaxDependencyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("dependency must be at most ", kMaxDependencyBytes,
                     " bytes, got ", dependency.size()));
  }
  if (key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "key must be at most ", kMaxKeyBytes, " bytes, got ", key.size()));
  }
  return absl::OkStatus();
}

absl::Status ValidateName(absl::string_view field, absl::string_view value) {
  if (value.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(field, " must be set"));
  }
  if (value.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " must be at most ", kMaxNameBytes,
                     " bytes, got ", value.size()));
  }
  return absl::OkStatus();
}

}  // namespace sluice::wire
