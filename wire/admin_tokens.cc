// SPDX-License-Identifier: Apache-2.0
#include "wire/admin_tokens.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace sluice::wire {
namespace {

// gRPC refuses a header value with bytes outside printable ASCII, and a
// space inside is almost always a paste error (two tokens on one line).
bool TravelsInAHeader(absl::string_view token) {
  return std::all_of(token.begin(), token.end(),
                     [](char c) { return c > ' ' && c < 0x7f; });
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseAdminTokens(
    absl::string_view text) {
  std::vector<std::string> tokens;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    if (!TravelsInAHeader(line)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", line_number,
          ": a token must be printable ASCII without spaces (one token a "
          "line)"));
    }
    if (std::find(tokens.begin(), tokens.end(), line) == tokens.end()) {
      tokens.emplace_back(line);
    }
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(
        "no token (one a line; blank lines and # comments are skipped)");
  }
  return tokens;
}

}  // namespace sluice::wire
