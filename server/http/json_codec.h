// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_HTTP_JSON_CODEC_H_
#define SLUICE_SERVER_HTTP_JSON_CODEC_H_

// The proto3 JSON mapping of the HTTP API's messages, and the JSON of its
// errors. Pure functions; safe for concurrent use.

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace sluice::http {

// Reads `json` into `message` by the proto3 JSON mapping: field names in
// lowerCamelCase or as the .proto spells them, 64-bit integers as strings or
// numbers, enums by name or number. An unknown field is an error, not
// ignored. INVALID_ARGUMENT naming the field and what it takes, e.g.
//   unknown field "bogus" (AcquireRequest has dependency, key, permits,
//   caller)
//   permits: invalid value "x"; expected a whole number from 0 to 4294967295
absl::Status ParseJson(absl::string_view json,
                       google::protobuf::Message* message);

// What a JSON request body may hold, counted before it is parsed: parsing
// builds a message object per array element, so 4 MiB of "{}," would cost
// far more than its bytes.
struct JsonBudget {
  // JSON values at every depth (an object, an array, a string, a number,
  // true, false and null each count one).
  int64_t max_values = 0;
  // A member of the top-level object whose array has its own, clearer
  // refusal: its name ("" for none) and most elements.
  absl::string_view counted_member;
  int64_t max_counted = 0;
};

// Objects and arrays nested deeper than this are refused.
inline constexpr int kMaxJsonDepth = 32;

// Scans `json` without allocating and refuses it, INVALID_ARGUMENT, when
// it holds more than `budget` allows: "calls: at most 1000 per request,
// got 1400000; none was handled", or too many values, or nesting deeper
// than kMaxJsonDepth. Syntax errors are left to the parser, which names
// them better; counts up to the error are checked all the same.
absl::Status CheckJsonShape(absl::string_view json, const JsonBudget& budget);

// CheckJsonShape, then ParseJson.
absl::Status ParseJson(absl::string_view json, const JsonBudget& budget,
                       google::protobuf::Message* message);

// `message` by the proto3 JSON mapping: lowerCamelCase names, every scalar
// and repeated field printed even at its default (so "remaining": "0" is
// there), enums by name, 64-bit integers as JSON strings. INTERNAL in the
// unlikely case protobuf cannot print it.
absl::StatusOr<std::string> PrintJson(const google::protobuf::Message& message);

// Protobuf's JSON parse error `error`, about a `root` message, rewritten so
// that it names the field (as a path like calls[0].report.outcome) and says
// what the field takes. Used by ParseJson; public for its tests.
std::string DescribeParseError(absl::string_view error,
                               const google::protobuf::Descriptor& root);

// `text` as a JSON string literal, quotes included. Bytes that are not
// valid UTF-8 become U+FFFD, so the result is always valid JSON (and valid
// UTF-8).
std::string JsonQuote(absl::string_view text);

}  // namespace sluice::http

#endif  // SLUICE_SERVER_HTTP_JSON_CODEC_H_
