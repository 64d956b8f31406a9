// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_HTTP_JSON_FAST_H_
#define SLUICE_SERVER_HTTP_JSON_FAST_H_

// A direct JSON decoder and printer for the messages of the two hot
// endpoints (POST /v1/acquire and /v1/report), beside protobuf's general
// JSON converter (json_codec.h), which costs several times more per
// request. The decoder takes only the plain shape clients send (an object
// of the message's own fields, each once, with values of the obvious JSON
// type) and declines everything else, which ParseJson then decodes or
// refuses with its usual messages. Pure functions; safe for concurrent use.

#include <string>

#include "absl/strings/string_view.h"
#include "sluice/v1/decision.pb.h"

namespace sluice::http {

// Reads `json` into `request` (cleared first) and returns true when it is
// a JSON object whose members are the message's fields, by their
// lowerCamelCase or .proto names, each at most once, with: strings for
// string fields (valid UTF-8, no control characters, escapes other than
// \u); enum values by name; integers written plainly (no sign for
// unsigned fields, no fraction, exponent or leading zero, within range);
// a latency as "<seconds>[.<up to 9 digits>]s". Returns false, leaving
// `request` unspecified, for anything else. What it accepts ParseJson
// accepts too, into an equal message (fuzz/json_codec_fuzzer.cc checks).
bool FastParseJson(absl::string_view json, v1::AcquireRequest* request);
bool FastParseJson(absl::string_view json, v1::ReportResultRequest* request);

// Sets `out` to exactly what PrintJson prints for `response` and returns
// true, unless the response holds what this printer leaves to PrintJson
// (a fallback, strings outside printable ASCII, a duration protobuf would
// refuse): then false, with `out` unspecified.
bool FastPrintJson(const v1::AcquireResponse& response, std::string* out);
bool FastPrintJson(const v1::ReportResultResponse& response, std::string* out);

}  // namespace sluice::http

#endif  // SLUICE_SERVER_HTTP_JSON_FAST_H_
