// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_RPC_HTTP_CHECK_H_
#define SLUICE_SERVER_RPC_HTTP_CHECK_H_

// One HTTP request a gateway asks about before routing it, whatever the
// transport: Envoy's external authorization (gRPC) and the forward-auth
// endpoint /v1/check both name the policy, decide and shape the answer
// here, so that they agree on every header and status.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/engine.h"
#include "server/core/policy_config.h"
#include "server/rpc/decision_service.h"

namespace sluice::rpc {

// The headers of the answers (lowercase, as HTTP/2 sends them).
inline constexpr absl::string_view kDependencyHeader = "x-sluice-dependency";
inline constexpr absl::string_view kKeyHeader = "x-sluice-key";
inline constexpr absl::string_view kPermitHeader = "x-sluice-permit";
inline constexpr absl::string_view kReasonHeader = "x-sluice-reason";
inline constexpr absl::string_view kDegradedHeader = "x-sluice-degraded";
inline constexpr absl::string_view kUnmatchedHeader = "x-sluice-unmatched";

// An HTTP request as the transport received it. Every view must stay valid
// during HttpCheck::Check.
struct HttpCheckRequest {
  absl::string_view method;  // "GET"
  // Host or :authority as sent: any case, with or without a port.
  absl::string_view host;
  absl::string_view path;  // without the query string
  // A request header's value by lowercase name; nullopt when absent. Unset
  // means the request has no headers.
  std::function<std::optional<absl::string_view>(absl::string_view)> header;
  // The names the operator configured for this request: Envoy's context
  // extensions sluice_dependency and sluice_key, or /v1/check's query
  // parameters dependency, key and key_header; "" when not given.
  absl::string_view dependency;
  absl::string_view key;
  absl::string_view key_header;  // a header whose value is the key
  // Whether the x-sluice-dependency and x-sluice-key headers may name the
  // policy and key when `dependency` is not given. Only a transport whose
  // check requests a gateway builds says yes (/v1/check: NGINX's
  // proxy_set_header, Envoy's headers_to_add). Envoy's external
  // authorization passes the client's own headers, which must never choose
  // a policy or a key.
  bool naming_headers = false;
};

// The answer, for the transport to put into its own format.
struct HttpCheckAnswer {
  enum class Kind {
    kAllow,      // let the request through (200, headers to the upstream)
    kRefuse,     // answer it with http_status (429 or 503) and the body
    kDegrade,    // answer it with the fallback: http_status, body, headers
    kUnmatched,  // no policy names it: let it through, nothing decided
  };
  Kind kind = Kind::kUnmatched;
  // kAllow and kUnmatched 200; kRefuse 429 or 503; kDegrade the policy's
  // Fallback.http_status (a 2xx there would mean "allow" to a forward-auth
  // gateway, which is the transport's to handle).
  int http_status = 200;
  // Lowercase names, in order: for kAllow the headers for the upstream
  // (x-sluice-dependency, x-sluice-key, x-sluice-permit), for kUnmatched
  // x-sluice-unmatched, else the headers of the answer to the client
  // (content-type, retry-after, x-sluice-reason or x-sluice-degraded).
  std::vector<std::pair<std::string, std::string>> headers;
  // kRefuse: a short JSON error; kDegrade: the fallback payload.
  std::string body;
  // The policy that decided ("" for kUnmatched) and the per-key partition.
  std::string dependency;
  std::string key;
  // The permit as ReportResult takes it (AcquireResponse.permit_id); ""
  // when the decision issued none.
  std::string permit_id;
  core::Reason reason = core::Reason::kNone;
  absl::Duration retry_after = absl::ZeroDuration();
};

// `key` with every byte outside visible ASCII, '%' and ',' as %XX
// (upper-case hex), as the x-sluice-key header carries it.
std::string PercentEncodeKey(absl::string_view key);

// The request's host for matching: lowercase, without the port.
std::string NormalizeHost(absl::string_view host);

// Which policy answers an HTTP request by the policies' http_routes: the
// most specific matching route (core::HttpRouteConfig::Specificity); among
// equally specific ones, which the policy store refuses, the policy first
// by name, and conflicts() names the pair. Immutable once built; safe to
// share.
class HttpRouteIndex {
 public:
  struct Match {
    // Null when no route matches.
    const core::PolicyConfig* policy = nullptr;
    const core::HttpRouteConfig* route = nullptr;
  };

  // `policies` sorted by name, as Engine::Policies() returns them.
  // `generation`: the engine's policies_generation() they were read at.
  HttpRouteIndex(
      std::vector<std::shared_ptr<const core::PolicyConfig>> policies,
      uint64_t generation = 0);

  // `host`: NormalizeHost's output.
  Match Find(const HttpCheckRequest& request, absl::string_view host) const;

  const std::vector<std::string>& conflicts() const { return conflicts_; }
  uint64_t generation() const { return generation_; }
  bool empty() const { return routes_ == 0; }

 private:
  struct Entry {
    const core::PolicyConfig* policy;
    const core::HttpRouteConfig* route;
    core::HttpRouteConfig::Specificity specificity;
  };
  // Most specific first; the first entry whose conditions hold wins.
  using Entries = std::vector<Entry>;

  static const Entry* FirstMatch(const Entries& entries,
                                 const HttpCheckRequest& request);

  // Keeps every policy the entries point at alive.
  std::vector<std::shared_ptr<const core::PolicyConfig>> policies_;
  absl::flat_hash_map<std::string, Entries> exact_;  // by host
  // By suffix with its dot: "*.example.com" under ".example.com".
  absl::flat_hash_map<std::string, Entries> wildcard_;
  Entries any_;
  size_t routes_ = 0;
  std::vector<std::string> conflicts_;
  uint64_t generation_;
};

// Names the policy of an HTTP request, decides it through the same engine
// path as an Acquire (DecisionServiceImpl::DecideCall: the same metrics and
// events) and shapes the answer. The naming rules, in order:
//   1. explicit: request.dependency, its key being request.key or the
//      header named by request.key_header ("" without either); else, with
//      request.naming_headers, the x-sluice-dependency header, its key the
//      x-sluice-key header. The key comes from where the name came from,
//      so a client cannot pick its own key for a policy an operator named;
//   2. else the policies' http_routes (HttpRouteIndex), the key being the
//      value of the route's key_header ("" without one);
//   3. else kUnmatched: nothing is decided.
// A permit is held like the rate-limit service's: one never reported ends
// without counting as a timeout. Safe for concurrent use.
class HttpCheck {
 public:
  // Both must outlive this.
  HttpCheck(core::Engine* engine, DecisionServiceImpl* decisions);

  // INVALID_ARGUMENT for a name no policy can have (a dependency outside
  // [A-Za-z0-9._-] or over 256 bytes; a key over 1,024 bytes or not valid
  // UTF-8); messages are valid UTF-8. Else the answer.
  absl::StatusOr<HttpCheckAnswer> Check(const HttpCheckRequest& request);

  // The route index for the policies in force, rebuilt after each change.
  std::shared_ptr<const HttpRouteIndex> Index() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  core::Engine* const engine_;
  DecisionServiceImpl* const decisions_;

  // Read with std::atomic_load; replaced with std::atomic_store under mu_,
  // which only serialises the rebuilds.
  std::shared_ptr<const HttpRouteIndex> index_;
  absl::Mutex mu_;
};

}  // namespace sluice::rpc

#endif  // SLUICE_SERVER_RPC_HTTP_CHECK_H_
