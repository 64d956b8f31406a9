// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_WIRE_LIMITS_H_
#define SLUICE_WIRE_LIMITS_H_

// Size limits of the names that cross the wire, shared by the server (which
// enforces them) and the client SDK (which checks before a round trip), so
// that both give the same answer in the same words.

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace sluice::wire {

inline constexpr size_t kMaxDependencyBytes = 256;
inline constexpr size_t kMaxKeyBytes = 1024;
// Policy and dependency names, replica ids.
inline constexpr size_t kMaxNameBytes = 256;

// INVALID_ARGUMENT naming the field and the rule: an empty or oversized
// dependency, an oversized key.
absl::Status ValidateRequestNames(absl::string_view dependency,
                                  absl::string_view key);

// INVALID_ARGUMENT "<field> must be set" for an empty `value`, or
// "<field> must be at most 256 bytes, got N" for an oversized one.
absl::Status ValidateName(absl::string_view field, absl::string_view value);

}  // namespace sluice::wire

#endif  // SLUICE_WIRE_LIMITS_H_
