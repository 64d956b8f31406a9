// SPDX-License-Identifier: Apache-2.0
#include "server/rpc/decision_convert.h"

#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/core/live_policy.h"

namespace sluice::rpc {
namespace {

// The core's enums are generated from wire/enums/enum_lists.h, whose rows
// wire/enum_lists_check.cc checks against the protos: the numbers are equal,
// so conversion either way is a static_cast.
static_assert(kMaxPermits == core::LivePolicy::kMaxPermits);

void FallbackToProto(const core::FallbackConfig& config, v1::Fallback* out) {
  out->set_strategy(static_cast<v1::Fallback::Strategy>(config.strategy));
  out->set_payload(config.payload);
  out->set_content_type(config.content_type);
  for (int r = 1; r < core::kReasonCount; ++r) {
    if (config.on_mask & (1u << r)) out->add_on(static_cast<v1::Reason>(r));
  }
  if (config.cache_ttl > absl::ZeroDuration()) {
    DurationToProto(config.cache_ttl, out->mutable_cache_ttl());
  }
  out->set_serve_on_failure(config.serve_on_failure);
  // 200 is the default, which a reader takes from 0.
  if (config.http_status != 200) {
    out->set_http_status(static_cast<uint32_t>(config.http_status));
  }
}

}  // namespace

absl::Status ValidateAcquireRequest(const v1::AcquireRequest& request) {
  SLUICE_RETURN_IF_ERROR(
      wire::ValidateRequestNames(request.dependency(), request.key()));
  if (request.permits() > kMaxPermits) {
    return absl::InvalidArgumentError(absl::StrCat(
        "permits must be at most ", kMaxPermits, ", got ", request.permits()));
  }
  return absl::OkStatus();
}

absl::StatusOr<ReportArgs> ParseReportRequest(
    const v1::ReportResultRequest& request) {
  SLUICE_RETURN_IF_ERROR(
      wire::ValidateRequestNames(request.dependency(), request.key()));
  ReportArgs args;
  SLUICE_ASSIGN_OR_RETURN(args.permit_id, ParsePermitId(request.permit_id()));
  args.issuer = std::string(PermitIssuer(request.permit_id()));

  const int outcome = request.outcome();
  if (outcome == v1::OUTCOME_UNSPECIFIED || !v1::Outcome_IsValid(outcome)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "outcome must be SUCCESS, FAILURE, TIMEOUT or CANCELLED, got ",
        outcome == v1::OUTCOME_UNSPECIFIED ? "OUTCOME_UNSPECIFIED"
                                           : absl::StrCat(outcome)));
  }
  args.outcome = static_cast<core::Outcome>(outcome);

  if (request.has_latency()) {
    SLUICE_ASSIGN_OR_RETURN(args.latency,
                            DurationFromProto(request.latency(), "latency"));
    if (args.latency < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(
          absl::StrCat("latency must not be negative, got ",
                       absl::FormatDuration(args.latency)));
    }
  }
  return args;
}

v1::BreakerState BreakerStateToProto(core::BreakerState state) {
  return static_cast<v1::BreakerState>(state);
}

void DecisionToProto(const core::Decision& decision,
                     v1::AcquireResponse* response) {
  response->set_verdict(static_cast<v1::Verdict>(decision.verdict));
  response->set_reason(static_cast<v1::Reason>(decision.reason));
  response->set_permit_id(FormatPermitId(decision.permit_id));
  if (decision.call_timeout > absl::ZeroDuration()) {
    DurationToProto(decision.call_timeout, response->mutable_call_timeout());
  }
  if (decision.retry_after > absl::ZeroDuration()) {
    DurationToProto(decision.retry_after, response->mutable_retry_after());
  }
  if (const core::FallbackConfig* fallback = decision.fallback()) {
    FallbackToProto(*fallback, response->mutable_fallback());
  } else if (decision.verdict == core::Verdict::kAllow && decision.policy &&
             decision.policy->fallback.serve_on_failure) {
    // The gateway serves it if the allowed call fails.
    FallbackToProto(decision.policy->fallback, response->mutable_fallback());
  }
  response->set_breaker_state(BreakerStateToProto(decision.breaker_state));
  response->set_remaining(decision.remaining);
  response->set_policy_version(decision.policy_version);
  response->set_http_status(decision.http_status);
}

std::string FormatPermitId(const core::PermitId& permit_id) {
  if (permit_id.empty()) return std::string();
  std::string text(kPermitIdDigits, '0');
  static constexpr char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < 16; ++i) {
    const int shift = 60 - 4 * static_cast<int>(i);
    text[i] = kHex[(permit_id.serial >> shift) & 0xF];
    text[16 + i] = kHex[(permit_id.mac >> shift) & 0xF];
  }
  return text;
}

absl::string_view PermitIssuer(absl::string_view text) {
  const size_t at = text.find('@');
  return at == absl::string_view::npos ? absl::string_view()
                                       : text.substr(at + 1);
}

absl::StatusOr<core::PermitId> ParsePermitId(absl::string_view text) {
  if (text.empty()) return core::PermitId{};
  const absl::string_view issuer = PermitIssuer(text);
  const size_t at = text.find('@');
  if (at != absl::string_view::npos) {
    if (issuer.empty() || issuer.size() > wire::kMaxNameBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "permit_id must be ID@REPLICA as returned by Acquire, with a "
          "replica id of 1 to ", wire::kMaxNameBytes, " bytes"));
    }
    text = text.substr(0, at);
  }
  core::PermitId id;
  bool hex = text.size() == kPermitIdDigits;
  for (size_t i = 0; hex && i < kPermitIdDigits; ++i) {
    const char c = text[i];
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else {
      hex = false;
      break;
    }
    uint64_t& word = i < 16 ? id.serial : id.mac;
    word = (word << 4) | static_cast<uint64_t>(digit);
  }
  if (!hex) {
    // Quoted only when every byte is printable ASCII: a cut through a
    // multi-byte character would make the message invalid UTF-8.
    const size_t kShown = 40;
    bool printable = true;
    for (char c : text) printable = printable && absl::ascii_isprint(c);
    return absl::InvalidArgumentError(absl::StrCat(
        "permit_id must be the ", kPermitIdDigits,
        " hex digits returned by Acquire, got ",
        printable ? absl::StrCat("\"", text.substr(0, kShown),
                                 text.size() > kShown ? "...\"" : "\"")
                  : absl::StrCat(text.size(), " bytes that are not "
                                 "printable ASCII")));
  }
  return id;
}

}  // namespace sluice::rpc
