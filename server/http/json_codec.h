#ifndef SLUICE_SERVER_HTTP_JSON_CODEC_H_
#define SLUICE_SERVER_HTTP_JSON_CODEC_H_

// The proto3 JSON mapping of the HTTP API's messages, and the JSON of its
// errors. Pure functions; safe for concurrent use.

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

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
// valid UTF-8 become U+FFFD, so the result is always valid JSON.
std::string JsonQuote(absl::string_view text);

}  // namespace sluice::http

#endif  // SLUICE_SERVER_HTTP_JSON_CODEC_H_
