// SPDX-License-Identifier: Apache-2.0
#include "server/rpc/ext_authz_service.h"

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/rpc/message_bounds.h"
#include "server/rpc/serve_unary.h"

namespace sluice::rpc {
namespace {

using envoy::config::core::v3::HeaderValueOption;
using envoy::service::auth::v3::AttributeContext;
using envoy::service::auth::v3::CheckRequest;
using envoy::service::auth::v3::CheckResponse;

// Envoy's per-route names (ExtAuthzPerRoute check_settings
// context_extensions).
constexpr absl::string_view kDependencyExtension = "sluice_dependency";
constexpr absl::string_view kKeyExtension = "sluice_key";

// The headers the upstream gets from an answer; the ones an answer does not
// set are removed, so the upstream never sees a client's own.
constexpr absl::string_view kUpstreamHeaders[] = {
    kDependencyHeader, kKeyHeader, kPermitHeader, kUnmatchedHeader};

void AddHeaders(const HttpCheckAnswer& answer,
                google::protobuf::RepeatedPtrField<HeaderValueOption>* out) {
  for (const auto& [name, value] : answer.headers) {
    HeaderValueOption* option = out->Add();
    option->mutable_header()->set_key(name);
    option->mutable_header()->set_value(value);
    // Replace, never add to, what the client sent: older Envoy reads
    // `append`, newer append_action.
    option->mutable_append()->set_value(false);
    option->set_append_action(HeaderValueOption::OVERWRITE_IF_EXISTS_OR_ADD);
  }
}

absl::string_view ExtensionOrEmpty(const AttributeContext& attributes,
                                   absl::string_view name) {
  auto it = attributes.context_extensions().find(std::string(name));
  return it == attributes.context_extensions().end()
             ? absl::string_view()
             : absl::string_view(it->second);
}

absl::Status Validate(const CheckRequest& request) {
  const AttributeContext::HttpRequest& http =
      request.attributes().request().http();
  const int headers = static_cast<int>(http.headers().size()) +
                      http.header_map().headers_size();
  if (headers > AuthorizationServiceImpl::kMaxHeaders) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attributes.request.http: at most ",
        AuthorizationServiceImpl::kMaxHeaders, " headers, got ", headers));
  }
  const int extensions =
      static_cast<int>(request.attributes().context_extensions().size());
  if (extensions > AuthorizationServiceImpl::kMaxContextExtensions) {
    return absl::InvalidArgumentError(
        absl::StrCat("attributes.context_extensions: at most ",
                     AuthorizationServiceImpl::kMaxContextExtensions,
                     " entries, got ", extensions));
  }
  return absl::OkStatus();
}

}  // namespace

AuthorizationServiceImpl::AuthorizationServiceImpl(HttpCheck* check)
    : check_(check) {}

grpc::ServerUnaryReactor* AuthorizationServiceImpl::Check(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  // Counted on the raw bytes first: a million empty headers are refused for
  // their count, not built and then refused.
  return ServeUnary<CheckRequest, CheckResponse>(
      context, request, response, kExtAuthzBudget,
      [this](const CheckRequest& r, CheckResponse* out) {
        return Handle(r, out);
      },
      &invalid_);
}

absl::Status AuthorizationServiceImpl::Handle(const CheckRequest& request,
                                              CheckResponse* response) {
  if (absl::Status s = Validate(request); !s.ok()) {
    invalid_.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  const AttributeContext& attributes = request.attributes();
  const AttributeContext::HttpRequest& http = attributes.request().http();

  HttpCheckRequest check;
  check.method = http.method();
  check.host = http.host();
  // Envoy sends the path with its query.
  absl::string_view path = http.path();
  check.path = path.substr(0, path.find('?'));
  // Envoy sends `headers` (lowercase names, repeated ones joined by ","), or
  // with encode_raw_headers the list `header_map`; the first value counts.
  check.header =
      [&http](absl::string_view name) -> std::optional<absl::string_view> {
    auto it = http.headers().find(std::string(name));
    if (it != http.headers().end()) return absl::string_view(it->second);
    for (const envoy::config::core::v3::HeaderValue& h :
         http.header_map().headers()) {
      if (h.key() == name) {
        return absl::string_view(h.raw_value().empty() ? h.value()
                                                       : h.raw_value());
      }
    }
    return std::nullopt;
  };
  check.dependency = ExtensionOrEmpty(attributes, kDependencyExtension);
  check.key = ExtensionOrEmpty(attributes, kKeyExtension);

  absl::StatusOr<HttpCheckAnswer> answer = check_->Check(check);
  if (!answer.ok()) {
    invalid_.fetch_add(1, std::memory_order_relaxed);
    return answer.status();
  }
  switch (answer->kind) {
    case HttpCheckAnswer::Kind::kAllow:
    case HttpCheckAnswer::Kind::kUnmatched: {
      (answer->kind == HttpCheckAnswer::Kind::kAllow ? allow_ : unmatched_)
          .fetch_add(1, std::memory_order_relaxed);
      response->mutable_status()->set_code(grpc::StatusCode::OK);
      envoy::service::auth::v3::OkHttpResponse* ok =
          response->mutable_ok_response();
      AddHeaders(*answer, ok->mutable_headers());
      for (absl::string_view name : kUpstreamHeaders) {
        bool set = false;
        for (const auto& header : answer->headers) {
          set = set || header.first == name;
        }
        if (!set) ok->add_headers_to_remove(std::string(name));
      }
      if (!answer->permit_id.empty()) {
        // As the rate-limit service: the permit to name in ReportResult
        // (or that an access log names), as the filter's metadata.
        auto* fields = (*response->mutable_dynamic_metadata()
                             ->mutable_fields())["sluice_permits"]
                           .mutable_list_value()
                           ->add_values()
                           ->mutable_struct_value()
                           ->mutable_fields();
        (*fields)["dependency"].set_string_value(answer->dependency);
        (*fields)["key"].set_string_value(answer->key);
        (*fields)["permit_id"].set_string_value(answer->permit_id);
      }
      break;
    }
    case HttpCheckAnswer::Kind::kRefuse:
    case HttpCheckAnswer::Kind::kDegrade: {
      (answer->kind == HttpCheckAnswer::Kind::kRefuse ? refuse_ : degrade_)
          .fetch_add(1, std::memory_order_relaxed);
      const bool over_limit = core::RefusalHttpStatus(answer->reason) == 429;
      response->mutable_status()->set_code(
          over_limit ? grpc::StatusCode::RESOURCE_EXHAUSTED
                     : grpc::StatusCode::UNAVAILABLE);
      response->mutable_status()->set_message(absl::StrCat(
          answer->kind == HttpCheckAnswer::Kind::kRefuse ? "refused: "
                                                         : "degraded: ",
          core::ReasonName(answer->reason), " (", answer->dependency, ")"));
      envoy::service::auth::v3::DeniedHttpResponse* denied =
          response->mutable_denied_response();
      // Any status in 200..599: the enum is open.
      denied->mutable_status()->set_code(
          static_cast<envoy::type::v3::StatusCode>(answer->http_status));
      AddHeaders(*answer, denied->mutable_headers());
      denied->set_body(answer->body);
      break;
    }
  }
  return absl::OkStatus();
}

void AuthorizationServiceImpl::WriteStats(base::StatsWriter& out) const {
  static constexpr base::MetricDef kExtAuthzChecks = base::CounterDef(
      "sluice_ext_authz_checks_total", {"result"},
      "Envoy external authorization Check calls by answer: allow, refuse, "
      "degrade (the fallback served), unmatched (no policy names the "
      "request; let through) or invalid (a malformed request). Each "
      "decided request also counts in sluice_decisions_total like an "
      "Acquire of its policy.");
  out.WriteBy(kExtAuthzChecks, {{"allow", allow_},
                                {"refuse", refuse_},
                                {"degrade", degrade_},
                                {"unmatched", unmatched_},
                                {"invalid", invalid_}});
}

}  // namespace sluice::rpc
