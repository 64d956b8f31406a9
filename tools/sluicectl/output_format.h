// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TOOLS_SLUICECTL_OUTPUT_FORMAT_H_
#define SLUICE_TOOLS_SLUICECTL_OUTPUT_FORMAT_H_

// How sluicectl writes what the server said: tables for people, JSON for
// scripts. JSON always comes from a JSON library, so any text a server puts
// in a message (quotes, backslashes, newlines) stays valid JSON.

#include <cstdint>
#include <string>
#include <vector>

#include "google/protobuf/message.h"
#include "google/protobuf/timestamp.pb.h"

namespace sluice::ctl {

// A response as JSON with the proto field names ("breaker_state"); pretty
// is indented over several lines, otherwise one line (for watch).
std::string MessageJson(const google::protobuf::Message& message,
                        bool pretty = true);

// What `apply` did to one policy.
struct ApplyResult {
  std::string name;
  std::string action;  // create, update or unchanged
  std::string result;  // ok, dry-run or "failed: <server message>"
  uint64_t version = 0;
};

// One line: {"name":...,"action":...,"result":...,"version":N}.
std::string ApplyResultJson(const ApplyResult& result);

// Rows as aligned columns, two spaces apart, one line each.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);

// RFC 3339 in UTC with milliseconds, or "-" for an unset timestamp.
std::string FormatTime(const google::protobuf::Timestamp& time);

}  // namespace sluice::ctl

#endif  // SLUICE_TOOLS_SLUICECTL_OUTPUT_FORMAT_H_
