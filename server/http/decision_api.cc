// SPDX-License-Identifier: Apache-2.0
#include "server/http/decision_api.h"

#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/http/check_request.h"
#include "server/http/json_codec.h"
#include "server/http/json_fast.h"
#include "server/rpc/decision_convert.h"
#include "sluice/v1/decision.pb.h"
#include "wire/quote.h"

namespace sluice::http {
namespace {

// The status a fallback is served with, on a check answered 503.
constexpr absl::string_view kFallbackStatusHeader = "x-sluice-fallback-status";

// How much of an unknown path a 404 repeats.
constexpr size_t kQuotedPathBytes = 128;

constexpr absl::string_view kEndpoints =
    "the API serves POST /v1/acquire, /v1/report, /v1/reports and "
    "/v1/decide, GET /v1/health, and /v1/check (any method)";

// "application/json", whatever the case and parameters ("; charset=utf-8").
bool IsJson(absl::string_view content_type) {
  const absl::string_view media = absl::StripAsciiWhitespace(
      content_type.substr(0, content_type.find(';')));
  return absl::EqualsIgnoreCase(media, "application/json");
}

Reply MethodNotAllowed(const RequestHead& head, absl::string_view allow) {
  Reply reply = ErrorReply(405, absl::UnimplementedError(absl::StrCat(
                                    head.method, " is not allowed on ",
                                    head.path, "; use ", allow)));
  reply.allow = std::string(allow);
  return reply;
}

// What each endpoint's body may hold, counted before it is parsed: the
// batch caps of the gRPC methods, and about a dozen JSON values per element
// (an Acquire or a report with a latency is under ten).
constexpr JsonBudget kAcquireJson{64, "", 0};
constexpr JsonBudget kReportJson{64, "", 0};
constexpr JsonBudget kReportsJson{
    int64_t{rpc::DecisionServiceImpl::kMaxBatch} * 12 + 64, "reports",
    rpc::DecisionServiceImpl::kMaxBatch};
constexpr JsonBudget kDecideJson{
    int64_t{rpc::DecisionServiceImpl::kMaxDecideCalls} * 16 + 64, "calls",
    rpc::DecisionServiceImpl::kMaxDecideCalls};

// The direct decoder and printer of json_fast.h for the messages that
// have one; the others always take protobuf's converter.
bool FastParse(absl::string_view, google::protobuf::Message*) { return false; }
bool FastParse(absl::string_view body, v1::AcquireRequest* request) {
  return FastParseJson(body, request);
}
bool FastParse(absl::string_view body, v1::ReportResultRequest* request) {
  return FastParseJson(body, request);
}
bool FastPrint(const google::protobuf::Message&, std::string*) {
  return false;
}
bool FastPrint(const v1::AcquireResponse& response, std::string* out) {
  return FastPrintJson(response, out);
}
bool FastPrint(const v1::ReportResultResponse& response, std::string* out) {
  return FastPrintJson(response, out);
}

// Parses `body` into a Request (counted against `budget` first), has
// `handle` fill the Response, and prints it: the one shape of every POST
// endpoint. A body the direct decoder takes skips the count: it is one
// object of at most six scalar members, far inside every budget.
template <typename Request, typename Response, typename Handle>
Reply Call(absl::string_view body, const JsonBudget& budget, Handle handle) {
  Request request;
  if (!FastParse(body, &request)) {
    request.Clear();
    if (absl::Status s = ParseJson(body, budget, &request); !s.ok()) {
      return ErrorReply(s);
    }
  }
  Response response;
  if (absl::Status s = handle(request, &response); !s.ok()) {
    return ErrorReply(s);
  }
  Reply reply;
  if (FastPrint(response, &reply.body)) return reply;
  absl::StatusOr<std::string> json = PrintJson(response);
  if (!json.ok()) return ErrorReply(json.status());
  reply.body = *std::move(json);
  return reply;
}

// The HTTP answer to a check. The status is the decision: a gateway takes
// any 2xx for "allow", so a fallback is 503 with its payload, and its own
// status in x-sluice-fallback-status for the gateway to serve it with.
Reply CheckReply(rpc::HttpCheckAnswer answer) {
  Reply reply;
  for (auto& [name, value] : answer.headers) {
    if (name == "content-type") {
      reply.content_type = std::move(value);
    } else {
      reply.headers.emplace_back(std::move(name), std::move(value));
    }
  }
  switch (answer.kind) {
    case rpc::HttpCheckAnswer::Kind::kAllow:
      reply.body = "{\"decision\":\"allow\"}";
      break;
    case rpc::HttpCheckAnswer::Kind::kUnmatched:
      reply.body = "{\"decision\":\"unmatched\"}";
      break;
    case rpc::HttpCheckAnswer::Kind::kRefuse:
      reply.status = answer.http_status;
      reply.body = std::move(answer.body);
      break;
    case rpc::HttpCheckAnswer::Kind::kDegrade:
      reply.status = 503;
      reply.headers.emplace_back(kFallbackStatusHeader,
                                 absl::StrCat(answer.http_status));
      reply.body = std::move(answer.body);
      break;
  }
  return reply;
}

}  // namespace

JsonBudget JsonBudgetFor(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::kReports:
      return kReportsJson;
    case Endpoint::kDecide:
      return kDecideJson;
    case Endpoint::kAcquire:
    case Endpoint::kReport:
    case Endpoint::kHealth:
    case Endpoint::kCheck:
    case Endpoint::kUnknown:
      break;
  }
  return kAcquireJson;
}

absl::string_view EndpointLabel(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::kAcquire:
      return "/v1/acquire";
    case Endpoint::kReport:
      return "/v1/report";
    case Endpoint::kReports:
      return "/v1/reports";
    case Endpoint::kDecide:
      return "/v1/decide";
    case Endpoint::kHealth:
      return "/v1/health";
    case Endpoint::kCheck:
      return kCheckPath;
    case Endpoint::kUnknown:
      break;
  }
  return "other";
}

Endpoint EndpointForPath(absl::string_view path) {
  for (Endpoint e : {Endpoint::kAcquire, Endpoint::kReport, Endpoint::kReports,
                     Endpoint::kDecide, Endpoint::kHealth}) {
    if (path == EndpointLabel(e)) return e;
  }
  if (IsCheckPath(path)) return Endpoint::kCheck;
  return Endpoint::kUnknown;
}

int HttpStatusForCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kCancelled:
      return 499;  // google.rpc's (and nginx's) "client closed request"
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kDataLoss:
    default:
      return 500;
  }
}

Reply ErrorReply(int http_status, const absl::Status& status) {
  const absl::StatusCode code =
      status.ok() ? absl::StatusCode::kUnknown : status.code();
  Reply reply;
  reply.status = http_status;
  reply.body =
      absl::StrCat("{\"code\":", static_cast<int>(code),
                   ",\"status\":", JsonQuote(absl::StatusCodeToString(code)),
                   ",\"message\":", JsonQuote(status.message()), "}");
  return reply;
}

Reply ErrorReply(const absl::Status& status) {
  return ErrorReply(HttpStatusForCode(status.code()), status);
}

Reply TransportErrorReply(int http_status) {
  switch (http_status) {
    case 400:
      return ErrorReply(400, absl::InvalidArgumentError(
                                 "malformed HTTP request (request line or "
                                 "headers)"));
    case 404:
      return ErrorReply(404, absl::NotFoundError(absl::StrCat(
                                 "no such endpoint; ", kEndpoints)));
    case 413:
      return ErrorReply(413, absl::ResourceExhaustedError(absl::StrCat(
                                 "request body is larger than the limit of ",
                                 kMaxBodyBytes, " bytes (4 MiB)")));
    case 414:
      return ErrorReply(414,
                        absl::InvalidArgumentError("request URI is too long"));
    case 416:
      return ErrorReply(
          416, absl::InvalidArgumentError("Range requests are not supported"));
    case 431:
      return ErrorReply(431, absl::InvalidArgumentError(
                                 "request header fields are too large"));
    default:
      break;
  }
  if (http_status >= 500) {
    return ErrorReply(http_status, absl::InternalError(absl::StrCat(
                                       "the server could not answer (HTTP ",
                                       http_status, ")")));
  }
  return ErrorReply(http_status,
                    absl::InvalidArgumentError(absl::StrCat(
                        "the request was refused (HTTP ", http_status, ")")));
}

DecisionApi::DecisionApi(rpc::DecisionServiceImpl* service,
                         rpc::HttpCheck* check)
    : service_(service), check_(check) {}

std::optional<Reply> DecisionApi::Check(const RequestHead& head) {
  const Endpoint endpoint = EndpointForPath(head.path);
  if (endpoint == Endpoint::kUnknown) {
    const absl::string_view path(head.path);
    return ErrorReply(
        404, absl::NotFoundError(absl::StrCat(
                 "no endpoint at ",
                 wire::QuoteUntrusted(path, kQuotedPathBytes), "; ",
                 kEndpoints)));
  }
  if (endpoint == Endpoint::kHealth) {
    if (head.method != "GET" && head.method != "HEAD") {
      return MethodNotAllowed(head, "GET, HEAD");
    }
    return std::nullopt;
  }
  // Gateways send GET, or the original request's method, with its
  // Content-Type; the server bounds the body (kMaxCheckBodyBytes).
  if (endpoint == Endpoint::kCheck) return std::nullopt;
  if (head.method != "POST") return MethodNotAllowed(head, "POST");
  if (head.content_length.has_value() && *head.content_length > kMaxBodyBytes) {
    return ErrorReply(
        413, absl::ResourceExhaustedError(absl::StrCat(
                 "request body is ", *head.content_length,
                 " bytes; the limit is ", kMaxBodyBytes, " bytes (4 MiB)")));
  }
  if (head.content_type.has_value() && !IsJson(*head.content_type)) {
    return ErrorReply(
        415, absl::InvalidArgumentError(absl::StrCat(
                 "Content-Type must be application/json, got ",
                 wire::QuoteUntrusted(*head.content_type, kQuotedPathBytes))));
  }
  return std::nullopt;
}

Reply DecisionApi::Post(Endpoint endpoint, absl::string_view body) const {
  switch (endpoint) {
    case Endpoint::kAcquire:
      return Call<v1::AcquireRequest, v1::AcquireResponse>(
          body, kAcquireJson, [this](const v1::AcquireRequest& request,
                       v1::AcquireResponse* response) {
            return service_->AcquireOne(request, response);
          });
    case Endpoint::kReport:
      return Call<v1::ReportResultRequest, v1::ReportResultResponse>(
          body, kReportJson, [this](const v1::ReportResultRequest& request,
                       v1::ReportResultResponse* response) {
            absl::StatusOr<core::BreakerState> state =
                service_->ReportOne(request);
            if (!state.ok()) return state.status();
            response->set_breaker_state(rpc::BreakerStateToProto(*state));
            return absl::OkStatus();
          });
    case Endpoint::kReports:
      return Call<v1::ReportResultsRequest, v1::ReportResultsResponse>(
          body, kReportsJson, [this](const v1::ReportResultsRequest& request,
                       v1::ReportResultsResponse* response) {
            return service_->ReportMany(request, response);
          });
    case Endpoint::kDecide:
      // One HTTP response answers the whole request, so a request over the
      // cap is refused whole (by the count before parsing).
      return Call<v1::DecideRequest, v1::DecideResponse>(
          body, kDecideJson,
          [this](const v1::DecideRequest& request,
                 v1::DecideResponse* response) {
            return service_->HandleDecide(request, response);
          });
    case Endpoint::kHealth:
    case Endpoint::kCheck:
    case Endpoint::kUnknown:
      break;
  }
  return ErrorReply(absl::InternalError(
      absl::StrCat("no POST handler for ", EndpointLabel(endpoint))));
}

Reply DecisionApi::CheckForward(const ParsedHead& head) const {
  absl::StatusOr<CheckParameters> parameters = CheckParametersOf(head);
  if (!parameters.ok()) return ErrorReply(400, parameters.status());
  if (absl::Status s = CheckNamingHeaders(head, *parameters); !s.ok()) {
    return ErrorReply(400, s);
  }
  absl::StatusOr<ForwardedRequest> original = ForwardedRequestOf(head);
  if (!original.ok()) return ErrorReply(400, original.status());
  if (check_ == nullptr) {
    return ErrorReply(absl::UnimplementedError(
        "this server has no forward-auth check"));
  }
  rpc::HttpCheckRequest request;
  request.method = original->method;
  request.host = original->host;
  request.path = original->path;
  request.header = [&head](absl::string_view name) {
    return head.FindField(name);
  };
  // Views of the parameters, which outlive the call ("" when not given).
  const auto view = [](const std::optional<std::string>& value) {
    return value.has_value() ? absl::string_view(*value)
                             : absl::string_view();
  };
  request.dependency = view(parameters->dependency);
  request.key = view(parameters->key);
  request.key_header = view(parameters->key_header);
  // A gateway builds the check request, and may name the policy with the
  // x-sluice-* headers (NGINX's proxy_set_header, Envoy's headers_to_add).
  request.naming_headers = true;
  absl::StatusOr<rpc::HttpCheckAnswer> answer = check_->Check(request);
  if (!answer.ok()) return ErrorReply(answer.status());
  return CheckReply(*std::move(answer));
}

Reply DecisionApi::Health(bool serving) {
  Reply reply;
  reply.status = serving ? 200 : 503;
  reply.body = serving ? "{\"status\":\"SERVING\"}"
                       : "{\"status\":\"NOT_SERVING\"}";
  return reply;
}

}  // namespace sluice::http
