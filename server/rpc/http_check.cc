// SPDX-License-Identifier: Apache-2.0
#include "server/rpc/http_check.h"

#include <algorithm>
#include <initializer_list>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "wire/limits.h"
#include "wire/quote.h"
#include "wire/status.h"

namespace sluice::rpc {
namespace {

std::optional<absl::string_view> Header(const HttpCheckRequest& request,
                                        absl::string_view name) {
  if (!request.header) return std::nullopt;
  return request.header(name);
}

// The first of `values` given (not empty), else "".
absl::string_view FirstGiven(std::initializer_list<absl::string_view> values) {
  for (absl::string_view v : values) {
    if (!v.empty()) return v;
  }
  return "";
}

absl::string_view HeaderOrEmpty(const HttpCheckRequest& request,
                                absl::string_view name) {
  if (name.empty()) return "";
  return Header(request, name).value_or("");
}

// The names a request arrived at: a dependency a policy could have
// ([A-Za-z0-9._-], 1 to 256 bytes; also safe in a header and in the
// metadata), and a key of at most 1,024 bytes of UTF-8.
absl::Status ValidateNames(absl::string_view dependency,
                           absl::string_view key) {
  SLUICE_RETURN_IF_ERROR(wire::ValidateRequestNames(dependency, key));
  for (char c : dependency) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' &&
        c != '_' && c != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("dependency ", wire::QuoteUntrusted(dependency),
                       " is not a policy name ([A-Za-z0-9._-])"));
    }
  }
  // A key is reported back as a proto3 string (ReportResult, the metadata),
  // which must be UTF-8.
  if (!wire::IsValidUtf8(key)) {
    return absl::InvalidArgumentError(
        absl::StrCat("key ", wire::QuoteUntrusted(key), " is not valid UTF-8"));
  }
  return absl::OkStatus();
}

bool RouteMatches(const core::HttpRouteConfig& route,
                  const HttpCheckRequest& request) {
  if (!absl::StartsWith(request.path, route.path_prefix)) return false;
  if (!route.methods.empty() &&
      !std::binary_search(route.methods.begin(), route.methods.end(),
                          request.method)) {
    return false;
  }
  for (const auto& [name, value] : route.headers) {
    const std::optional<absl::string_view> got = Header(request, name);
    if (!got.has_value()) return false;
    if (!value.empty() && *got != value) return false;
  }
  return true;
}

int64_t RetryAfterSeconds(absl::Duration d) {
  return std::max<int64_t>(
      1, absl::ToInt64Seconds(absl::Ceil(d, absl::Seconds(1))));
}

}  // namespace

std::string PercentEncodeKey(absl::string_view key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(key.size());
  for (char c : key) {
    const auto b = static_cast<unsigned char>(c);
    if (b > 0x20 && b < 0x7f && c != '%' && c != ',') {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[b >> 4]);
      out.push_back(kHex[b & 0xf]);
    }
  }
  return out;
}

std::string NormalizeHost(absl::string_view host) {
  if (absl::StartsWith(host, "[")) {
    // An IPv6 literal: the port follows the bracket.
    const size_t end = host.find(']');
    if (end != absl::string_view::npos) host = host.substr(0, end + 1);
  } else if (const size_t colon = host.rfind(':');
             colon != absl::string_view::npos) {
    host = host.substr(0, colon);
  }
  return absl::AsciiStrToLower(host);
}

HttpRouteIndex::HttpRouteIndex(
    std::vector<std::shared_ptr<const core::PolicyConfig>> policies,
    uint64_t generation)
    : policies_(std::move(policies)), generation_(generation) {
  // Routes that could tie share a TieGroup (see HttpRouteConfig).
  std::map<std::string, std::vector<Entry>> groups;
  for (const std::shared_ptr<const core::PolicyConfig>& policy : policies_) {
    for (const core::HttpRouteConfig& route : policy->http_routes) {
      const Entry entry{policy.get(), &route, route.specificity()};
      std::vector<Entry>& group = groups[route.TieGroup()];
      for (const Entry& other : group) {
        if (other.policy != entry.policy && other.route->Overlaps(route)) {
          conflicts_.push_back(absl::StrCat(
              "policies \"", other.policy->name, "\" and \"", policy->name,
              "\" have equally specific HTTP routes for host \"",
              route.host.empty() ? "*" : route.host, "\" path prefix \"",
              route.path_prefix, "\"; \"", other.policy->name,
              "\" answers them"));
          break;
        }
      }
      group.push_back(entry);
      if (route.host.empty()) {
        any_.push_back(entry);
      } else if (route.host[0] == '*') {
        wildcard_[route.host.substr(1)].push_back(entry);
      } else {
        exact_[route.host].push_back(entry);
      }
      ++routes_;
    }
  }
  // Most specific first; a stable sort keeps equals in policy-name order.
  const auto by_specificity = [](const Entry& a, const Entry& b) {
    return b.specificity < a.specificity;
  };
  std::stable_sort(any_.begin(), any_.end(), by_specificity);
  for (auto& [host, entries] : exact_) {
    std::stable_sort(entries.begin(), entries.end(), by_specificity);
  }
  for (auto& [suffix, entries] : wildcard_) {
    std::stable_sort(entries.begin(), entries.end(), by_specificity);
  }
}

const HttpRouteIndex::Entry* HttpRouteIndex::FirstMatch(
    const Entries& entries, const HttpCheckRequest& request) {
  for (const Entry& e : entries) {
    if (RouteMatches(*e.route, request)) return &e;
  }
  return nullptr;
}

HttpRouteIndex::Match HttpRouteIndex::Find(const HttpCheckRequest& request,
                                           absl::string_view host) const {
  const Entry* best = nullptr;
  const auto consider = [&](const Entries& entries) {
    const Entry* e = FirstMatch(entries, request);
    if (e != nullptr &&
        (best == nullptr || best->specificity < e->specificity)) {
      best = e;
    }
  };
  if (!host.empty()) {
    if (auto it = exact_.find(host); it != exact_.end()) consider(it->second);
    // Every suffix that starts at a dot and leaves a label before it:
    // "a.b.example.com" tries ".b.example.com", ".example.com", ".com".
    for (size_t dot = host.find('.', 1); dot != absl::string_view::npos;
         dot = host.find('.', dot + 1)) {
      if (auto it = wildcard_.find(host.substr(dot)); it != wildcard_.end()) {
        consider(it->second);
      }
    }
  }
  consider(any_);
  Match match;
  if (best != nullptr) {
    match.policy = best->policy;
    match.route = best->route;
  }
  return match;
}

HttpCheck::HttpCheck(core::Engine* engine, DecisionServiceImpl* decisions)
    : engine_(engine), decisions_(decisions) {}

std::shared_ptr<const HttpRouteIndex> HttpCheck::Index() {
  // As RateLimitServiceImpl::Index: the generation before the policies, and
  // an index at or after it is current enough.
  const uint64_t generation = engine_->policies_generation();
  std::shared_ptr<const HttpRouteIndex> index = std::atomic_load(&index_);
  if (index != nullptr && index->generation() >= generation) return index;
  absl::MutexLock lock(&mu_);
  index = std::atomic_load(&index_);
  if (index != nullptr && index->generation() >= generation) return index;
  index =
      std::make_shared<const HttpRouteIndex>(engine_->Policies(), generation);
  for (const std::string& conflict : index->conflicts()) {
    spdlog::warn("HTTP check: {}", conflict);
  }
  std::atomic_store(&index_, index);
  return index;
}

absl::StatusOr<HttpCheckAnswer> HttpCheck::Check(
    const HttpCheckRequest& request) {
  HttpCheckAnswer answer;
  // The operator's names first; the x-sluice-* headers only where a
  // gateway sets them. The key comes from where the policy's name came
  // from, so a client can never pick its own key for a policy an operator
  // named.
  absl::string_view dependency = request.dependency;
  absl::string_view key;
  if (!dependency.empty()) {
    key = FirstGiven({request.key, HeaderOrEmpty(request, request.key_header)});
  } else if (request.naming_headers) {
    dependency = HeaderOrEmpty(request, kDependencyHeader);
    key = HeaderOrEmpty(request, kKeyHeader);
  }
  // Holds the policy a route names, whose name `dependency` then views.
  std::shared_ptr<const HttpRouteIndex> index;
  if (dependency.empty()) {
    index = Index();
    const HttpRouteIndex::Match match =
        index->Find(request, NormalizeHost(request.host));
    if (match.policy == nullptr) {
      answer.kind = HttpCheckAnswer::Kind::kUnmatched;
      answer.headers.emplace_back(kUnmatchedHeader, "1");
      return answer;
    }
    dependency = match.policy->name;
    key = HeaderOrEmpty(request, match.route->key_header);
  }
  SLUICE_RETURN_IF_ERROR(ValidateNames(dependency, key));

  answer.dependency = std::string(dependency);
  answer.key = std::string(key);
  absl::StatusOr<core::Decision> decided = decisions_->DecideCall(
      dependency, key, 1, core::Unreported::kRelease, &answer.permit_id);
  if (!decided.ok()) return decided.status();
  const core::Decision& d = *decided;
  answer.reason = d.reason;
  answer.retry_after = d.retry_after;
  switch (d.verdict) {
    case core::Verdict::kAllow:
      answer.kind = HttpCheckAnswer::Kind::kAllow;
      answer.http_status = 200;
      answer.headers.emplace_back(kDependencyHeader, answer.dependency);
      if (!answer.key.empty()) {
        answer.headers.emplace_back(kKeyHeader, PercentEncodeKey(answer.key));
      }
      if (!answer.permit_id.empty()) {
        answer.headers.emplace_back(kPermitHeader, answer.permit_id);
      }
      break;
    case core::Verdict::kReject: {
      answer.kind = HttpCheckAnswer::Kind::kRefuse;
      answer.http_status = d.http_status != 0
                               ? d.http_status
                               : core::RefusalHttpStatus(d.reason);
      const int64_t seconds = RetryAfterSeconds(d.retry_after);
      const absl::string_view reason = core::ReasonName(d.reason);
      answer.headers.emplace_back("content-type", "application/json");
      answer.headers.emplace_back("retry-after", absl::StrCat(seconds));
      answer.headers.emplace_back(kReasonHeader, reason);
      // The dependency is a policy name and the reason an upper-case word:
      // neither needs escaping.
      answer.body =
          absl::StrCat(R"({"error":"refused by Sluice","reason":")", reason,
                       R"(","dependency":")", answer.dependency,
                       R"(","retry_after_seconds":)", seconds, "}");
      break;
    }
    case core::Verdict::kDegrade: {
      answer.kind = HttpCheckAnswer::Kind::kDegrade;
      const core::FallbackConfig* fallback = d.fallback();
      answer.http_status = fallback != nullptr ? fallback->http_status : 200;
      if (fallback != nullptr) {
        answer.body = fallback->payload;
        if (!fallback->content_type.empty()) {
          answer.headers.emplace_back("content-type", fallback->content_type);
        }
      }
      answer.headers.emplace_back(kDegradedHeader, core::ReasonName(d.reason));
      break;
    }
  }
  return answer;
}

}  // namespace sluice::rpc
