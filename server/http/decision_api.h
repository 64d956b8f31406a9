// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_HTTP_DECISION_API_H_
#define SLUICE_SERVER_HTTP_DECISION_API_H_

// The HTTP/JSON decision API without its transport: which endpoint a path
// names, which requests are refused from their head alone, and the answer
// to a request body. HttpServer (http_server.h) puts it on a socket.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/http/json_codec.h"
#include "server/http/request_parser.h"
#include "server/rpc/decision_service.h"
#include "server/rpc/http_check.h"

namespace sluice::http {

// The API's endpoints, and kUnknown for every other path (so that metrics
// count unknown paths under one label).
enum class Endpoint : int {
  kAcquire,  // POST /v1/acquire   AcquireRequest -> AcquireResponse
  kReport,   // POST /v1/report    ReportResultRequest -> ReportResultResponse
  kReports,  // POST /v1/reports   ReportResultsRequest -> ReportResultsResponse
  kDecide,   // POST /v1/decide    DecideRequest -> DecideResponse
  kHealth,   // GET  /v1/health    {"status": "SERVING" | "NOT_SERVING"}
  kCheck,    // any  /v1/check[/...]  forward authentication (check_request.h)
  kUnknown,
};
inline constexpr int kEndpointCount = 7;

// The endpoint's path ("/v1/acquire"), or "other" for kUnknown: the
// `endpoint` label of sluice_http_requests_total.
absl::string_view EndpointLabel(Endpoint endpoint);
// The endpoint `path` names (no query string), or kUnknown. Every path
// under "/v1/check/" is kCheck.
Endpoint EndpointForPath(absl::string_view path);

// The largest request body read: a ReportResults call of the most reports
// allowed (10000) is about 1.5 MB, so 4 MiB leaves room for long keys.
inline constexpr size_t kMaxBodyBytes = size_t{4} << 20;

// A check's body is read and dropped when its Content-Length is at most
// this (a gateway that forwards a small body keeps its connection); a
// larger or chunked one is not read: the check is answered from the head
// and the connection closes after it.
inline constexpr size_t kMaxCheckBodyBytes = 64 * 1024;

// What the body of a POST to `endpoint` may hold, counted before it is
// parsed (json_codec.h): the batch caps of the gRPC methods ("calls" at
// most 1000, "reports" at most 10000) and about a dozen JSON values per
// element. Endpoints without a body get a budget of a few values.
JsonBudget JsonBudgetFor(Endpoint endpoint);

// An HTTP answer. The body is JSON unless content_type says otherwise.
struct Reply {
  int status = 200;
  std::string body;
  // The Allow header of a 405; "" otherwise.
  std::string allow;
  std::string content_type = "application/json";
  // More header fields (name, value): a check's answer (Retry-After,
  // x-sluice-...). A field with a CR, LF or NUL is not sent.
  std::vector<std::pair<std::string, std::string>> headers;
};

// What the API needs of a request before its body is read.
// Views of the request's own strings, valid while it is handled.
struct RequestHead {
  absl::string_view method;
  // Without the query string.
  absl::string_view path;
  // The Content-Type header, if given.
  std::optional<absl::string_view> content_type;
  // The Content-Length header, if given and a number.
  std::optional<uint64_t> content_length;
};

// The HTTP status for an error of `code`, following google.rpc.Code's HTTP
// mapping: INVALID_ARGUMENT, FAILED_PRECONDITION and OUT_OF_RANGE 400,
// NOT_FOUND 404, RESOURCE_EXHAUSTED 429, UNAVAILABLE 503, INTERNAL 500, ...
int HttpStatusForCode(absl::StatusCode code);

// {"code": 3, "status": "INVALID_ARGUMENT", "message": "..."}: the JSON
// error body for `status` (not OK), answered with `http_status`.
Reply ErrorReply(int http_status, const absl::Status& status);
// The same with the HTTP status HttpStatusForCode picks.
Reply ErrorReply(const absl::Status& status);
// The error for an HTTP status the transport chose itself (a malformed
// request line, a URI too long): a gRPC code that fits it and a message
// naming the status.
Reply TransportErrorReply(int http_status);

// The decision endpoints over an rpc::DecisionServiceImpl, whose per-call
// handlers (AcquireOne, ReportOne, ReportMany, HandleDecide) do all the
// work: validation, decisions, metrics and events are those of gRPC; and
// the forward-auth check over an rpc::HttpCheck, which Envoy's external
// authorization shares. Immutable; safe for concurrent use. `service` and
// `check` must outlive it; without `check`, /v1/check answers 501.
class DecisionApi {
 public:
  explicit DecisionApi(rpc::DecisionServiceImpl* service,
                       rpc::HttpCheck* check = nullptr);

  // The refusal of a request that is wrong before its body is read: 404 for
  // an unknown path, 405 (with Allow) for a method the endpoint does not
  // take, 413 for a Content-Length above kMaxBodyBytes, 415 for a
  // Content-Type other than application/json. nullopt when it may proceed.
  // A check (kCheck) takes any method, Content-Type and body.
  static std::optional<Reply> Check(const RequestHead& head);

  // The answer to `body` posted to one of the four POST endpoints: 200 and
  // the response message as JSON, or an error reply (400 for JSON that
  // does not fit the request message, or for what the handler refuses).
  Reply Post(Endpoint endpoint, absl::string_view body) const;

  // A forward-auth check (/v1/check[/...], any method) whose head is
  // `head`: the answer is its status (docs/http.md): 2xx allow, 429 or 503
  // refuse, 503 with x-sluice-degraded for a fallback, 400 for a request
  // that names its policy, key or original request wrongly.
  Reply CheckForward(const ParsedHead& head) const;

  // GET /v1/health: 200 {"status":"SERVING"} or 503
  // {"status":"NOT_SERVING"}.
  static Reply Health(bool serving);

 private:
  rpc::DecisionServiceImpl* const service_;
  rpc::HttpCheck* const check_;
};

}  // namespace sluice::http

#endif  // SLUICE_SERVER_HTTP_DECISION_API_H_
