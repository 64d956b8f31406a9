// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: the HTTP API's request parser (server/http/
// request_parser.h), the code every byte a client sends goes through. The
// first input byte picks how the rest is cut into reads (all at once, or
// pieces of 1 to 255 bytes); the outcome must not depend on it, the
// parser must never stall on a full buffer or use more bytes than it was
// given, and what it refuses gets a status of its set and a close.
//
// Build: link sluice_http_parser with -fsanitize=fuzzer (clang).

#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/string_view.h"
#include "server/http/request_parser.h"

namespace {

void Check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  using sluice::http::ParseOutcome;
  using sluice::http::ParseRequest;
  using sluice::http::RequestLimits;
  // Smaller limits than the server's, so that short inputs reach them.
  RequestLimits limits;
  limits.max_request_line_bytes = 256;
  limits.max_head_bytes = 1024;
  limits.max_header_count = 16;
  limits.max_body_bytes = 4096;
  const size_t piece = data[0];
  const absl::string_view bytes(reinterpret_cast<const char*>(data) + 1,
                                size - 1);
  const ParseOutcome whole = ParseRequest(bytes, limits);
  const ParseOutcome split = ParseRequest(bytes, limits, piece);
  Check(whole.kind != ParseOutcome::Kind::kStalled);
  Check(split.kind != ParseOutcome::Kind::kStalled);
  Check(whole.kind == split.kind);
  Check(whole.status == split.status);
  Check(whole.consumed == split.consumed);
  Check(whole.consumed <= bytes.size());
  Check(whole.body == split.body);
  Check(whole.body.size() <= limits.max_body_bytes);
  if (whole.kind == ParseOutcome::Kind::kRefused) {
    Check(whole.close);
    Check(whole.status == 400 || whole.status == 413 ||
          whole.status == 414 || whole.status == 431);
  }
  return 0;
}
