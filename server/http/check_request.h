// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_HTTP_CHECK_REQUEST_H_
#define SLUICE_SERVER_HTTP_CHECK_REQUEST_H_

// What a forward-auth request (GET /v1/check, from NGINX auth_request,
// ingress-nginx auth-url, Traefik ForwardAuth or Envoy's HTTP-mode external
// authorization) says before anything is decided: the policy and key its
// query string names, and the original request the gateway asks about,
// read from the forwarded headers those gateways send. Pure functions of
// the request's head, so that tests drive them without a socket. Every
// value is hostile: each refusal is INVALID_ARGUMENT naming what was wrong.

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/http/request_parser.h"

namespace sluice::http {

// The path of the endpoint, and the prefix of its longer form: Envoy's
// HTTP-mode external authorization appends the original path to its
// path_prefix, so "/v1/check/api/payments/1" is a check of
// "/api/payments/1".
inline constexpr absl::string_view kCheckPath = "/v1/check";

// Query strings of more parameters than this are refused unread.
inline constexpr size_t kMaxQueryParameters = 16;

// `text` with every %XX replaced by its byte and '+' by a space (the
// application/x-www-form-urlencoded form). INVALID_ARGUMENT for a '%' not
// followed by two hex digits, and for a result that is not valid UTF-8.
absl::StatusOr<std::string> PercentDecode(absl::string_view text);

// The name=value pairs of `query` (without the '?'), decoded, in order.
// An empty query has none; an empty piece ("a=1&&b=2") is skipped; a
// piece without '=' has the value "". INVALID_ARGUMENT for more than
// kMaxQueryParameters pieces, a name given twice, or a name or value that
// PercentDecode refuses.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseQuery(
    absl::string_view query);

// What the query string of /v1/check names. Each is absent unless given.
struct CheckParameters {
  std::optional<std::string> dependency;  // `dependency`: the policy
  std::optional<std::string> key;         // `key`: the partition key
  // `key_header`: the request header whose value is the key (a header
  // name, lowercased).
  std::optional<std::string> key_header;
};

// The parameters of /v1/check's `query`. INVALID_ARGUMENT for what
// ParseQuery refuses, for a parameter other than the three (a typo is
// caught rather than ignored), and for a key_header that is not a header
// name.
absl::StatusOr<CheckParameters> ParseCheckParameters(absl::string_view query);

// The parameters of a check whose head is `head`: those of its query
// string for "/v1/check?..."; none for "/v1/check/<path>?...", whose query
// string is the original request's (Envoy appends the original path and
// query to its path_prefix).
absl::StatusOr<CheckParameters> CheckParametersOf(const ParsedHead& head);

// The original request a check is about.
struct ForwardedRequest {
  // Lowercased, without a port; "" when no header gives one.
  std::string host;
  // As sent (not decoded), without its query string; starts with '/'.
  std::string path;
  // As sent, e.g. "GET".
  std::string method;
};

// The original request of a check whose own head is `head`, the first
// found of:
//   host:   X-Forwarded-Host, the host of X-Original-URL, Host;
//   path:   X-Forwarded-Uri, X-Original-URI, the path of X-Original-URL,
//           the part of head.path after "/v1/check" ("/" when none);
//   method: X-Forwarded-Method, X-Original-Method, head.method.
// INVALID_ARGUMENT for one of those headers sent twice, a path that does
// not start with '/', a host that is not a host name or address, or a
// method that is not a token.
absl::StatusOr<ForwardedRequest> ForwardedRequestOf(const ParsedHead& head);

// The headers that name a check's policy and key: x-sluice-dependency,
// x-sluice-key, and the one `parameters.key_header` names. OK when each is
// absent or sent once with a value that is valid UTF-8; INVALID_ARGUMENT
// otherwise (a key that is not UTF-8 is refused, not hashed, so that a
// gateway answers the client an error rather than let it through).
absl::Status CheckNamingHeaders(const ParsedHead& head,
                                const CheckParameters& parameters);

// Whether `path` (no query string) is the check endpoint: "/v1/check" or
// "/v1/check/..." (not "/v1/checks").
bool IsCheckPath(absl::string_view path);

}  // namespace sluice::http

#endif  // SLUICE_SERVER_HTTP_CHECK_REQUEST_H_
