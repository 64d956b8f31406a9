// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_WIRE_QUOTE_H_
#define SLUICE_WIRE_QUOTE_H_

// Untrusted bytes inside error messages. Every error string Sluice sends
// (gRPC status messages, Decide stream errors, HTTP JSON errors, RLS) must
// be valid UTF-8: protobuf refuses to serialize a proto3 string that is not,
// and a client decoding the message would fail on it. These two functions
// are the one place that makes bytes safe for that.

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace sluice::wire {

// How many bytes of an untrusted value an error message repeats by default.
inline constexpr size_t kQuotedBytes = 64;

// `text` in double quotes, for an error message: at most `max_bytes` bytes
// of it, cut at a character boundary (never inside a UTF-8 sequence) and
// then marked by "..." inside the quotes. Well-formed UTF-8 is kept as it
// is; '"' and '\' are escaped by a backslash; control characters become
// \n, \r, \t or \xNN; every byte that is not part of well-formed UTF-8
// (a stray continuation byte, a truncated sequence, an overlong form, a
// surrogate, above U+10FFFF) becomes \xNN. The result is valid UTF-8.
//   QuoteUntrusted("ab\xff") == "\"ab\\xff\""
std::string QuoteUntrusted(absl::string_view text,
                           size_t max_bytes = kQuotedBytes);

// `text` with every byte that is not part of well-formed UTF-8 replaced by
// U+FFFD; well-formed text is returned unchanged. The last line of defence
// where a message leaves the process.
std::string ToValidUtf8(absl::string_view text);

// The length of the well-formed UTF-8 sequence that starts text[i] (1 to
// 4), or 0 when text[i] does not start one. `i` < text.size().
size_t Utf8SequenceLength(absl::string_view text, size_t i);

// True when all of `text` is well-formed UTF-8.
bool IsValidUtf8(absl::string_view text);

}  // namespace sluice::wire

#endif  // SLUICE_WIRE_QUOTE_H_
