#ifndef SLUICE_PROTO_SLUICE_V1_REQUEST_LIMITS_H_
#define SLUICE_PROTO_SLUICE_V1_REQUEST_LIMITS_H_

// The size limits of decision.proto's request fields, shared by the server
// (which enforces them) and the client SDK (which checks them before a round
// trip), so that both give the same answer in the same words.

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace sluice::v1 {

inline constexpr size_t kMaxDependencyBytes = 256;
inline constexpr size_t kMaxKeyBytes = 1024;

// INVALID_ARGUMENT naming the field and the rule: an empty or oversized
// dependency, an oversized key.
inline absl::Status ValidateRequestNames(absl::string_view dependency,
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

}  // namespace sluice::v1

#endif  // SLUICE_PROTO_SLUICE_V1_REQUEST_LIMITS_H_
