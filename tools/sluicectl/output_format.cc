// SPDX-License-Identifier: Apache-2.0
#include "tools/sluicectl/output_format.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"
#include "wire/time.h"

namespace sluice::ctl {

std::string MessageJson(const google::protobuf::Message& message, bool pretty) {
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.add_whitespace = pretty;
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(message, &out, options);
  return out;
}

std::string ApplyResultJson(const ApplyResult& result) {
  // ordered_json keeps the field order scripts have always seen.
  const nlohmann::ordered_json json = {
      {"name", result.name},
      {"action", result.action},
      {"result", result.result},
      {"version", result.version},
  };
  // A server message that is not UTF-8 is replaced, not thrown on.
  return json.dump(/*indent=*/-1, ' ', /*ensure_ascii=*/false,
                   nlohmann::ordered_json::error_handler_t::replace);
}

std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (size_t i = 0; i < row.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  std::string out;
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      absl::StrAppend(&out, row[i]);
      if (i + 1 < row.size()) out.append(widths[i] - row[i].size() + 2, ' ');
    }
    out.push_back('\n');
  }
  return out;
}

std::string FormatTime(const google::protobuf::Timestamp& time) {
  if (time.seconds() == 0 && time.nanos() == 0) return "-";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ",
                          wire::TimestampFromProto(time), absl::UTCTimeZone());
}

}  // namespace sluice::ctl
