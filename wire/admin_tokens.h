// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_WIRE_ADMIN_TOKENS_H_
#define SLUICE_WIRE_ADMIN_TOKENS_H_

// The admin token file's format, which sluiced (--admin-token-file) and
// sluicectl (--token-file) share, so one file serves both.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice::wire {

// The tokens of an admin token file: one a line, surrounding whitespace
// removed; blank lines and lines starting with '#' are skipped; a repeated
// token is kept once, at its first place. Several tokens are all valid at
// once, which is what lets an operator rotate without a window where a
// client is refused. INVALID_ARGUMENT when the text holds no token or a
// token that cannot travel in a gRPC header (whitespace or control
// characters inside; the line number is named, never the token).
absl::StatusOr<std::vector<std::string>> ParseAdminTokens(
    absl::string_view text);

}  // namespace sluice::wire

#endif  // SLUICE_WIRE_ADMIN_TOKENS_H_
