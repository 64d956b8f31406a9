// SPDX-License-Identifier: Apache-2.0
#include "server/rpc/rate_limit_service.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "spdlog/spdlog.h"
#include "server/rpc/message_bounds.h"
#include "server/rpc/serve_unary.h"
#include "wire/limits.h"
#include "wire/time.h"

namespace sluice::rpc {
namespace {

using envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
using envoy::service::ratelimit::v3::RateLimitRequest;
using envoy::service::ratelimit::v3::RateLimitResponse;
using RlsLimit = envoy::service::ratelimit::v3::RateLimitResponse::RateLimit;

// The policy's rate as requests per the smallest Envoy unit that holds at
// least one request: 100 per 1s is 100/SECOND, 10 per 30s is 20/MINUTE,
// 0.5 per 1s is 30/MINUTE, 1 per 168h is 4/MONTH. Envoy's units cannot say "burst", so a token
// bucket is described by its sustained rate.
void SetCurrentLimit(const core::PolicyConfig& policy, RlsLimit* out) {
  const core::RateLimitConfig& rate = *policy.rate_limit;
  struct Unit {
    double seconds;
    RlsLimit::Unit unit;
  };
  // MONTH and YEAR as 30 and 365 days.
  static constexpr Unit kUnits[] = {{1, RlsLimit::SECOND},
                                    {60, RlsLimit::MINUTE},
                                    {3600, RlsLimit::HOUR},
                                    {86400, RlsLimit::DAY},
                                    {30 * 86400, RlsLimit::MONTH},
                                    {365 * 86400, RlsLimit::YEAR}};
  const double per_seconds = absl::ToDoubleSeconds(rate.per);
  // Below one a year, "1 per YEAR" is the closest Envoy can say.
  Unit chosen = kUnits[5];
  for (const Unit& u : kUnits) {
    if (u.seconds < per_seconds) continue;
    if (rate.rate * u.seconds / per_seconds >= 1 - 1e-9) {
      chosen = u;
      break;
    }
  }
  const double n = std::round(rate.rate * chosen.seconds / per_seconds);
  out->set_name(policy.name);
  out->set_unit(chosen.unit);
  out->set_requests_per_unit(static_cast<uint32_t>(std::clamp(
      n, 1.0, static_cast<double>(std::numeric_limits<uint32_t>::max()))));
}

// What a full quota holds: the bucket's burst or the window's limit.
double Quota(const core::RateLimitConfig& rate) {
  return rate.algorithm == core::RateAlgorithm::kTokenBucket
             ? rate.burst
             : std::floor(rate.rate);
}

// How long until the quota is whole again after a decision that left
// `remaining`: a bucket refills at its rate; a window frees its oldest
// calls within one window length.
absl::Duration UntilReset(const core::RateLimitConfig& rate,
                          int64_t remaining) {
  const double missing = Quota(rate) - static_cast<double>(remaining);
  if (missing <= 0) return absl::ZeroDuration();
  if (rate.algorithm == core::RateAlgorithm::kSlidingWindow) return rate.per;
  return rate.per * (missing / rate.rate);
}

int64_t CeilSeconds(absl::Duration d) {
  return absl::ToInt64Seconds(absl::Ceil(d, absl::Seconds(1)));
}

void AddHeader(google::protobuf::RepeatedPtrField<
                   envoy::config::core::v3::HeaderValue>* headers,
               absl::string_view key, absl::string_view value) {
  envoy::config::core::v3::HeaderValue* header = headers->Add();
  header->set_key(std::string(key));
  header->set_value(std::string(value));
}

// Checks what Envoy's own validation would: a domain, 1..kMaxDescriptors
// descriptors, each with 1..kMaxEntries entries with a key.
absl::Status Validate(const RateLimitRequest& request) {
  if (request.domain().empty() ||
      request.domain().size() > wire::kMaxNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("domain must be 1 to ", wire::kMaxNameBytes,
                     " bytes, got ", request.domain().size()));
  }
  const int n = request.descriptors_size();
  if (n < 1 || n > RateLimitServiceImpl::kMaxDescriptors) {
    return absl::InvalidArgumentError(
        absl::StrCat("descriptors must have 1 to ",
                     RateLimitServiceImpl::kMaxDescriptors, " entries, got ",
                     n));
  }
  for (int i = 0; i < n; ++i) {
    const RateLimitDescriptor& d = request.descriptors(i);
    if (d.entries_size() < 1 ||
        d.entries_size() > RateLimitServiceImpl::kMaxEntries) {
      return absl::InvalidArgumentError(absl::StrCat(
          "descriptors[", i, "].entries must have 1 to ",
          RateLimitServiceImpl::kMaxEntries, " entries, got ",
          d.entries_size()));
    }
    for (int j = 0; j < d.entries_size(); ++j) {
      if (d.entries(j).key().empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "descriptors[", i, "].entries[", j, "].key must not be empty"));
      }
    }
  }
  return absl::OkStatus();
}

// Hits a descriptor adds: its own hits_addend when set, else the request's;
// 0 means 1 either way. A count beyond what any policy admits stays beyond
// it (the engine then refuses it) rather than wrapping.
uint32_t Hits(const RateLimitRequest& request, const RateLimitDescriptor& d) {
  const uint64_t hits = d.has_hits_addend() ? d.hits_addend().value()
                                            : uint64_t{request.hits_addend()};
  if (hits == 0) return 1;
  return static_cast<uint32_t>(
      std::min<uint64_t>(hits, std::numeric_limits<uint32_t>::max()));
}

using Match = policy::DescriptorIndex::Match;

static_assert(RateLimitServiceImpl::kMaxDescriptors <=
              static_cast<int>(core::Engine::kMaxCalls));

// The policy and per-key partition of every descriptor, in order;
// INVALID_ARGUMENT when the values a descriptor's any-value entries match
// make a partition longer than a key may be.
absl::Status MatchAll(const policy::DescriptorIndex& index,
                      const RateLimitRequest& request,
                      std::vector<Match>* matches) {
  const int n = request.descriptors_size();
  matches->resize(n);
  std::vector<policy::DescriptorEntry> entries;
  entries.reserve(RateLimitServiceImpl::kMaxEntries);
  for (int i = 0; i < n; ++i) {
    entries.clear();
    for (const RateLimitDescriptor::Entry& e :
         request.descriptors(i).entries()) {
      entries.push_back({e.key(), e.value()});
    }
    Match& match = (*matches)[i];
    match = index.Find(request.domain(), entries);
    if (match.key.size() > wire::kMaxKeyBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "descriptors[", i, "]: the values its any-value entries match make "
          "a per-key partition of ", match.key.size(), " bytes for policy \"",
          match.policy->name, "\"; at most ", wire::kMaxKeyBytes, " bytes"));
    }
  }
  return absl::OkStatus();
}

// A matched descriptor's status from its decision; returns the time until
// its quota is whole again (zero without a rate limit or a retry_after).
absl::Duration SetStatus(const core::PolicyConfig& policy,
                         const core::Decision& d,
                         RateLimitResponse::DescriptorStatus* status) {
  const bool allowed = d.verdict == core::Verdict::kAllow;
  status->set_code(allowed ? RateLimitResponse::OK
                           : RateLimitResponse::OVER_LIMIT);
  if (d.remaining >= 0) {
    status->set_limit_remaining(static_cast<uint32_t>(std::min<int64_t>(
        d.remaining, std::numeric_limits<uint32_t>::max())));
  }
  absl::Duration reset = absl::ZeroDuration();
  if (!allowed && d.retry_after > absl::ZeroDuration()) {
    reset = d.retry_after;
  } else if (policy.rate_limit.has_value()) {
    reset = UntilReset(*policy.rate_limit, std::max<int64_t>(d.remaining, 0));
  }
  if (policy.rate_limit.has_value()) {
    SetCurrentLimit(policy, status->mutable_current_limit());
  }
  if (reset > absl::ZeroDuration() || policy.rate_limit.has_value()) {
    wire::DurationToProto(reset, status->mutable_duration_until_reset());
  }
  return reset;
}

// The response to a request whose matched descriptors were decided as
// `joint`: its decisions are those of `matches` with a policy, in order,
// and `permit_ids` their permits as ReportResult takes them.
void ToResponse(const std::vector<Match>& matches,
                const core::Engine::JointDecision& joint,
                const std::vector<std::string>& permit_ids,
                RateLimitResponse* response) {
  // Whether a matched policy asks for headers, and the tightest answer
  // among those with a rate limit.
  bool want_headers = false;
  const core::PolicyConfig* header_policy = nullptr;
  int64_t header_remaining = 0;
  absl::Duration header_reset = absl::ZeroDuration();
  absl::Duration retry_after = absl::ZeroDuration();
  const core::PolicyConfig* degraded = nullptr;
  core::Reason degraded_reason = core::Reason::kNone;

  response->mutable_statuses()->Reserve(static_cast<int>(matches.size()));
  size_t call = 0;
  for (const Match& match : matches) {
    RateLimitResponse::DescriptorStatus* status = response->add_statuses();
    if (match.policy == nullptr) {
      // As Envoy's own service does: nothing limits what nothing names.
      status->set_code(RateLimitResponse::OK);
      continue;
    }
    const core::PolicyConfig& policy = *match.policy;
    const core::Decision& d = joint.decisions[call++];
    const absl::Duration reset = SetStatus(policy, d, status);
    if (d.verdict != core::Verdict::kAllow) {
      retry_after = std::max(retry_after, d.retry_after);
      if (d.verdict == core::Verdict::kDegrade && degraded == nullptr) {
        degraded = &policy;
        degraded_reason = d.reason;
      }
    }
    want_headers = want_headers || policy.rate_limit_headers;
    if (policy.rate_limit_headers && policy.rate_limit.has_value() &&
        (header_policy == nullptr || d.remaining < header_remaining)) {
      header_policy = &policy;
      header_remaining = std::max<int64_t>(d.remaining, 0);
      header_reset = reset;
    }
  }

  auto* headers = response->mutable_response_headers_to_add();
  response->set_overall_code(joint.admitted ? RateLimitResponse::OK
                                            : RateLimitResponse::OVER_LIMIT);
  if (!joint.admitted && degraded != nullptr) {
    if (!degraded->fallback.payload.empty()) {
      response->set_raw_body(degraded->fallback.payload);
      if (!degraded->fallback.content_type.empty()) {
        AddHeader(headers, "content-type", degraded->fallback.content_type);
      }
    }
    AddHeader(headers, "x-sluice-degraded", core::ReasonName(degraded_reason));
  }
  if (joint.admitted) {
    // For a gateway that reports outcomes (a Lua filter, ext_proc): the
    // permits to name in ReportResult, as the filter's dynamic metadata.
    google::protobuf::ListValue* list = nullptr;
    call = 0;
    for (const Match& match : matches) {
      if (match.policy == nullptr) continue;
      const std::string& permit_id = permit_ids[call++];
      if (permit_id.empty()) continue;
      if (list == nullptr) {
        list = (*response->mutable_dynamic_metadata()
                     ->mutable_fields())["sluice_permits"]
                   .mutable_list_value();
      }
      auto* fields =
          list->add_values()->mutable_struct_value()->mutable_fields();
      (*fields)["dependency"].set_string_value(match.policy->name);
      (*fields)["key"].set_string_value(match.key);
      (*fields)["permit_id"].set_string_value(permit_id);
    }
  }
  if (header_policy != nullptr) {
    AddHeader(headers, "RateLimit-Limit",
              absl::StrCat(static_cast<int64_t>(
                  Quota(*header_policy->rate_limit))));
    AddHeader(headers, "RateLimit-Remaining", absl::StrCat(header_remaining));
    AddHeader(headers, "RateLimit-Reset",
              absl::StrCat(CeilSeconds(header_reset)));
  }
  if (want_headers && !joint.admitted) {
    AddHeader(headers, "Retry-After",
              absl::StrCat(std::max<int64_t>(1, CeilSeconds(retry_after))));
  }
}

}  // namespace

RateLimitServiceImpl::RateLimitServiceImpl(core::Engine* engine,
                                           DecisionServiceImpl* decisions)
    : engine_(engine), decisions_(decisions) {}

grpc::ServerUnaryReactor* RateLimitServiceImpl::ShouldRateLimit(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  // Counted on the raw bytes first: 2 million empty descriptors in a
  // message are refused for their count, not built and then refused.
  return ServeUnary<RateLimitRequest, RateLimitResponse>(
      context, request, response, kRateLimitBudget,
      [this](const RateLimitRequest& r, RateLimitResponse* out) {
        return Handle(r, out);
      },
      &invalid_);
}

std::shared_ptr<const policy::DescriptorIndex> RateLimitServiceImpl::Index() {
  // Read the generation before the policies: a change in between makes the
  // next call rebuild again, never keeps a stale index.
  const uint64_t generation = engine_->policies_generation();
  // Generations only grow: an index built at or after `generation` is
  // current enough, and one built by a slower thread never replaces it.
  std::shared_ptr<const policy::DescriptorIndex> index =
      std::atomic_load(&index_);
  if (index != nullptr && index->generation() >= generation) return index;
  absl::MutexLock lock(&mu_);
  index = std::atomic_load(&index_);
  if (index != nullptr && index->generation() >= generation) return index;
  index = std::make_shared<const policy::DescriptorIndex>(engine_->Policies(),
                                                          generation);
  for (const std::string& conflict : index->conflicts()) {
    spdlog::warn("rate-limit service: {}", conflict);
  }
  std::atomic_store(&index_, index);
  return index;
}

absl::Status RateLimitServiceImpl::Handle(const RateLimitRequest& request,
                                          RateLimitResponse* response) {
  if (absl::Status s = Validate(request); !s.ok()) {
    invalid_.fetch_add(1, std::memory_order_relaxed);
    return s;
  }
  // Map every descriptor before deciding any, so a malformed one refuses
  // the request without having taken anything.
  const std::shared_ptr<const policy::DescriptorIndex> index = Index();
  std::vector<Match> matches;
  if (absl::Status s = MatchAll(*index, request, &matches); !s.ok()) {
    invalid_.fetch_add(1, std::memory_order_relaxed);
    return s;
  }

  std::vector<core::Engine::Call> calls;
  calls.reserve(matches.size());
  for (size_t i = 0; i < matches.size(); ++i) {
    if (matches[i].policy == nullptr) continue;
    calls.push_back({matches[i].policy->name, matches[i].key,
                     Hits(request, request.descriptors(static_cast<int>(i)))});
  }
  std::vector<std::string> permit_ids;
  absl::StatusOr<core::Engine::JointDecision> joint =
      decisions_->DecideAll(calls, core::Unreported::kRelease, &permit_ids);
  if (!joint.ok()) return joint.status();

  unmatched_.fetch_add(matches.size() - calls.size(),
                       std::memory_order_relaxed);
  (joint->admitted ? ok_ : over_limit_).fetch_add(1, std::memory_order_relaxed);
  ToResponse(matches, *joint, permit_ids, response);
  return absl::OkStatus();
}

void RateLimitServiceImpl::WriteStats(base::StatsWriter& out) const {
  static constexpr base::MetricDef kRlsRequests = base::CounterDef(
      "sluice_rls_requests_total", {"code"},
      "Envoy rate-limit service (RLS v3) ShouldRateLimit calls by answer: "
      "OK, OVER_LIMIT, or INVALID_ARGUMENT for a malformed request. Each "
      "matched descriptor also counts in sluice_decisions_total like an "
      "Acquire of its policy.");
  out.WriteBy(kRlsRequests, {{"OK", ok_},
                             {"OVER_LIMIT", over_limit_},
                             {"INVALID_ARGUMENT", invalid_}});
  static constexpr base::MetricDef kRlsUnmatchedDescriptors = base::CounterDef(
      "sluice_rls_unmatched_descriptors_total", {},
      "RLS descriptors no policy's envoy_descriptors match; answered OK "
      "and not limited.");
  out.Write(kRlsUnmatchedDescriptors,
            unmatched_.load(std::memory_order_relaxed));
}

}  // namespace sluice::rpc
