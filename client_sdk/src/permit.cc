// SPDX-License-Identifier: Apache-2.0
#include "sluice/client/permit.h"

#include <utility>

#include "convert.h"
#include "lease_book.h"
#include "permit_access.h"
#include "reporter.h"
#include "wire/http_status.h"

namespace sluice::client {

Permit::Permit() = default;

Permit::Permit(absl::string_view dependency, absl::string_view key)
    : dependency_(dependency.data(), dependency.size()) {
  if (!key.empty()) key_.assign(key.data(), key.size());
}

const Fallback& Permit::fallback() const {
  static const Fallback* const kNone = new Fallback();
  return fallback_ != nullptr ? *fallback_ : *kNone;
}

Permit::~Permit() {
  if (reporter_ != nullptr) {
    reporter_->AutoCancel(dependency_, key_, permit_id_);
  }
  if (lease_ != nullptr) Report(Outcome::kCancelled, absl::ZeroDuration());
}

Permit::Permit(Permit&& other) noexcept { MoveFrom(other); }

Permit& Permit::operator=(Permit&& other) noexcept {
  if (this == &other) return *this;
  // `old` takes what this permit held, and settles it when it goes.
  Permit old(std::move(*this));
  MoveFrom(other);
  return *this;
}

void Permit::MoveFrom(Permit& other) noexcept {
  // Member by member: cheaper than swapping, and a permit moves on every
  // Acquire. A moved-from permit owes nothing (its pointers are null).
  verdict_ = other.verdict_;
  reason_ = other.reason_;
  dependency_ = std::move(other.dependency_);
  key_ = std::move(other.key_);
  permit_id_ = std::move(other.permit_id_);
  call_timeout_ = other.call_timeout_;
  retry_after_ = other.retry_after_;
  fallback_ = std::move(other.fallback_);
  breaker_state_ = other.breaker_state_;
  http_status_ = other.http_status_;
  remaining_ = other.remaining_;
  policy_version_ = other.policy_version_;
  decided_locally_ = other.decided_locally_;
  sluice_error_ = std::move(other.sluice_error_);
  leased_ = other.leased_;
  reporter_ = std::move(other.reporter_);
  lease_ = std::move(other.lease_);
}

void Permit::Report(Outcome outcome, absl::Duration latency, int status_code) {
  if (lease_ != nullptr) {
    std::shared_ptr<internal::LeaseLine> line = std::move(lease_);
    lease_ = nullptr;
    if (line->Settle(outcome, latency)) {
      // The breaker must hear of it now, not at the next tick.
      if (auto book = line->book().lock()) book->MaybeRenew(absl::Now(), true);
    }
    return;
  }
  if (reporter_ == nullptr) return;
  std::shared_ptr<internal::Reporter> reporter = std::move(reporter_);
  reporter_ = nullptr;
  reporter->Send(dependency_, key_, permit_id_, outcome, latency, status_code);
}

namespace internal {

Permit PermitAccess::FromResponse(std::string dependency, std::string key,
                                  const v1::AcquireResponse& response,
                                  std::shared_ptr<Reporter> reporter) {
  Permit p;
  p.verdict_ = VerdictFromProto(response.verdict());
  p.reason_ = ReasonFromProto(response.reason());
  p.dependency_ = std::move(dependency);
  p.key_ = std::move(key);
  p.permit_id_ = response.permit_id();
  p.call_timeout_ = DurationFromProto(response.call_timeout());
  p.retry_after_ = DurationFromProto(response.retry_after());
  if (response.has_fallback()) {
    p.fallback_ = std::make_shared<const Fallback>(
        FallbackFromProto(response.fallback()));
  }
  p.breaker_state_ = BreakerStateFromProto(response.breaker_state());
  p.http_status_ = response.http_status();
  p.remaining_ = response.remaining();
  p.policy_version_ = response.policy_version();
  p.decided_locally_ = false;
  if (p.verdict_ == Verdict::kAllow && !p.permit_id_.empty()) {
    p.reporter_ = std::move(reporter);
  }
  return p;
}

Permit PermitAccess::Local(std::string dependency, std::string key,
                           Verdict verdict, absl::Duration call_timeout,
                           absl::Status error) {
  Permit p;
  p.verdict_ = verdict;
  p.reason_ = Reason::kSluiceUnavailable;
  p.dependency_ = std::move(dependency);
  p.key_ = std::move(key);
  p.call_timeout_ = call_timeout;
  p.http_status_ =
      verdict == Verdict::kReject ? wire::kClientRefusalHttpStatus : 0;
  p.decided_locally_ = true;
  p.sluice_error_ = std::move(error);
  return p;
}

Permit PermitAccess::Leased(absl::string_view dependency, absl::string_view key,
                            const LeaseLine::Decision& decision,
                            std::shared_ptr<LeaseLine> line) {
  // Made in the permit's own strings: no temporaries to move and destroy
  // on a path that takes a few dozen nanoseconds in all.
  Permit p(dependency, key);
  p.decided_locally_ = false;
  p.leased_ = true;
  p.breaker_state_ = decision.breaker_state;
  p.policy_version_ = decision.policy_version;
  if (decision.answer == LeaseLine::Answer::kAllow) {
    p.call_timeout_ = decision.call_timeout;
    p.lease_ = std::move(line);
  } else if (decision.answer == LeaseLine::Answer::kOpen) {
    const LeaseLine::OpenRefusal& open = *decision.open;
    p.verdict_ = open.verdict;
    p.reason_ = Reason::kCircuitOpen;
    p.http_status_ = open.http_status;
    p.fallback_ = open.fallback;
    p.retry_after_ = decision.retry_after;
  } else {
    p.verdict_ = Verdict::kReject;
    p.reason_ = Reason::kRateLimited;
    p.http_status_ = wire::kLeaseRefusalHttpStatus;
    p.retry_after_ = decision.retry_after;
    p.remaining_ = 0;
  }
  return p;
}

Permit PermitAccess::HeldLimit(std::string dependency, absl::Status error) {
  Permit p;
  p.verdict_ = Verdict::kReject;
  p.reason_ = Reason::kRateLimited;
  p.dependency_ = std::move(dependency);
  p.http_status_ = wire::kLeaseRefusalHttpStatus;
  p.remaining_ = 0;
  p.decided_locally_ = true;
  p.leased_ = true;
  p.sluice_error_ = std::move(error);
  return p;
}

}  // namespace internal
}  // namespace sluice::client
