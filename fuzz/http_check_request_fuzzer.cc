// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: what the forward-auth endpoint /v1/check reads from a
// request's head before anything is decided (server/http/
// check_request.h): its query string and the forwarded headers of each
// gateway. The input is a request as a client sends it; the head the
// server's parser makes of it goes through every reader, which must
// refuse or answer, and what they accept must hold: parameters valid
// UTF-8 and never more than three, a key_header a lowercase token, a path
// that starts with '/', a lowercase host.
//
// Build: link sluice_http with -fsanitize=fuzzer (clang).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "server/http/check_request.h"
#include "server/http/request_parser.h"
#include "wire/quote.h"

namespace {

void Check(bool condition) {
  if (!condition) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sluice::http;  // NOLINT: a fuzz target's one function
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);

  // The query string alone, as any target could carry it.
  const auto pairs = ParseQuery(bytes);
  if (pairs.ok()) {
    Check(pairs->size() <= kMaxQueryParameters);
    for (const auto& [name, value] : *pairs) {
      Check(sluice::wire::IsValidUtf8(name) &&
            sluice::wire::IsValidUtf8(value));
    }
  }

  RequestLimits limits;
  limits.max_request_line_bytes = 1024;
  limits.max_head_bytes = 4096;
  limits.max_header_count = 32;
  limits.max_body_bytes = 0;
  const ParseOutcome out = ParseRequest(bytes, limits);
  if (out.kind != ParseOutcome::Kind::kRequest) return 0;
  const ParsedHead& head = out.head;

  const auto parameters = CheckParametersOf(head);
  if (parameters.ok()) {
    for (const auto* value :
         {&parameters->dependency, &parameters->key, &parameters->key_header}) {
      if (value->has_value()) Check(sluice::wire::IsValidUtf8(**value));
    }
    if (parameters->key_header.has_value()) {
      Check(!parameters->key_header->empty());
      Check(absl::AsciiStrToLower(*parameters->key_header) ==
            *parameters->key_header);
    }
    (void)CheckNamingHeaders(head, *parameters);
  }
  if (IsCheckPath(head.path)) {
    const auto original = ForwardedRequestOf(head);
    if (original.ok()) {
      Check(absl::StartsWith(original->path, "/"));
      Check(original->path.find_first_of("?#") == std::string::npos);
      Check(absl::AsciiStrToLower(original->host) == original->host);
      Check(!original->method.empty());
    }
  }
  return 0;
}
