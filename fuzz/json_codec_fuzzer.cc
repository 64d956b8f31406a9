// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the HTTP API's JSON request decoders: the bytes of
// one request body, decoded as each endpoint decodes it (the count check of
// CheckJsonShape with the endpoint's budget, then protobuf's JSON parser
// and the rewriting of its errors). Crashes, sanitizer reports and these
// invariants are findings: an error is INVALID_ARGUMENT with a message of
// valid UTF-8 on one line, and a body refused for its counts is never
// parsed; JsonQuote of any bytes is valid UTF-8. For the messages with a
// direct decoder (json_fast.h) it is a differential check: a body the
// direct decoder takes must parse with protobuf's converter too, into an
// equal message, and print the same way.

#include <google/protobuf/util/message_differencer.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/http/decision_api.h"
#include "server/http/json_codec.h"
#include "server/http/json_fast.h"
#include "sluice/v1/decision.pb.h"
#include "wire/quote.h"

namespace {

bool IsValidUtf8(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const size_t n = sluice::wire::Utf8SequenceLength(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

void Check(bool condition) {
  if (!condition) std::abort();
}

// Overloads for the messages json_fast.h decodes; the others have none.
bool FastDecode(absl::string_view, google::protobuf::Message*) { return false; }
bool FastDecode(absl::string_view body, sluice::v1::AcquireRequest* request) {
  return sluice::http::FastParseJson(body, request);
}
bool FastDecode(absl::string_view body,
                sluice::v1::ReportResultRequest* request) {
  return sluice::http::FastParseJson(body, request);
}

template <typename Request>
void Decode(absl::string_view body, sluice::http::Endpoint endpoint) {
  const sluice::http::JsonBudget budget = sluice::http::JsonBudgetFor(endpoint);
  const absl::Status shape = sluice::http::CheckJsonShape(body, budget);
  Request request;
  const absl::Status status = sluice::http::ParseJson(body, budget, &request);
  Request fast;
  if (FastDecode(body, &fast)) {
    Check(status.ok());
    Check(google::protobuf::util::MessageDifferencer::Equals(fast, request));
  }
  if (!shape.ok()) Check(status == shape);
  if (status.ok()) {
    // What parsed prints, and prints as valid UTF-8.
    const absl::StatusOr<std::string> json = sluice::http::PrintJson(request);
    Check(json.ok());
    return;
  }
  Check(status.code() == absl::StatusCode::kInvalidArgument);
  Check(IsValidUtf8(status.message()));
  Check(status.message().find('\n') == absl::string_view::npos);
  const sluice::http::Reply reply = sluice::http::ErrorReply(status);
  Check(reply.status == 400);
  Check(IsValidUtf8(reply.body));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Bodies above the HTTP API's limit never reach the decoders.
  if (size > sluice::http::kMaxBodyBytes) return 0;
  const absl::string_view body(reinterpret_cast<const char*>(data), size);
  using sluice::http::Endpoint;
  Decode<sluice::v1::AcquireRequest>(body, Endpoint::kAcquire);
  Decode<sluice::v1::ReportResultRequest>(body, Endpoint::kReport);
  Decode<sluice::v1::ReportResultsRequest>(body, Endpoint::kReports);
  Decode<sluice::v1::DecideRequest>(body, Endpoint::kDecide);
  // The direct printer prints what protobuf prints, or declines.
  sluice::v1::AcquireResponse response;
  response.set_permit_id(std::string(body.substr(0, 64)));
  response.set_remaining(static_cast<int64_t>(size) - 32);
  if (size > 8) {
    response.mutable_retry_after()->set_nanos(static_cast<int32_t>(data[0]) *
                                              1000003 % 1000000000);
  }
  std::string fast;
  if (sluice::http::FastPrintJson(response, &fast)) {
    const absl::StatusOr<std::string> slow = sluice::http::PrintJson(response);
    Check(slow.ok() && *slow == fast);
  }
  Check(IsValidUtf8(sluice::http::JsonQuote(body)));
  Check(IsValidUtf8(sluice::wire::QuoteUntrusted(body)));
  return 0;
}
