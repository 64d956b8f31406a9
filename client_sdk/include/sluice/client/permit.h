// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_CLIENT_PERMIT_H_
#define SLUICE_CLIENT_PERMIT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "sluice/client/types.h"

namespace sluice::client {

namespace internal {
class Reporter;
class PermitAccess;
class LeaseLine;
}  // namespace internal

// Sluice's answer to one Acquire, and the obligation to report the call.
//
// When allowed() is true, make the call and then Report() how it went. A
// permit destroyed without a report reports kCancelled, so a forgotten report
// never holds a concurrency slot or a HALF_OPEN probe until it expires.
// Reporting is asynchronous and never blocks. Refused permits and permits the
// SDK decided on its own (decided_locally()) have nothing to report; Report()
// is then a no-op.
//
// Move-only. Not thread-safe: one thread uses a permit at a time (it may be
// moved to another thread).
class Permit {
 public:
  // An ALLOW decided locally with nothing to report.
  Permit();
  ~Permit();
  Permit(Permit&& other) noexcept;
  Permit& operator=(Permit&& other) noexcept;
  Permit(const Permit&) = delete;
  Permit& operator=(const Permit&) = delete;

  Verdict verdict() const { return verdict_; }
  bool allowed() const { return verdict_ == Verdict::kAllow; }
  // Why the verdict is not a plain ALLOW; kNone for a plain ALLOW.
  Reason reason() const { return reason_; }
  const std::string& dependency() const { return dependency_; }
  const std::string& key() const { return key_; }
  // Deadline to give the downstream call (the policy's call_timeout).
  absl::Duration call_timeout() const { return call_timeout_; }
  // When a refused call is worth retrying; zero when Sluice did not say.
  absl::Duration retry_after() const { return retry_after_; }
  // What to serve instead; strategy kNone unless Sluice sent one (DEGRADE).
  const Fallback& fallback() const;
  BreakerState breaker_state() const { return breaker_state_; }
  // Suggested HTTP status for a refusal (429 or 503); 0 otherwise.
  int http_status() const { return http_status_; }
  // Tokens left after this call; -1 when unknown or unlimited.
  int64_t remaining() const { return remaining_; }
  uint64_t policy_version() const { return policy_version_; }
  // True when Sluice did not answer and the SDK decided by
  // ClientOptions::on_failure; sluice_error() then says why.
  bool decided_locally() const { return decided_locally_; }
  const absl::Status& sluice_error() const { return sluice_error_; }
  // True when the client decided it from a lease Sluice lent it
  // (ClientOptions::lease) without asking: an ALLOW whose report stays in
  // the client until its next renewal, a refusal because the lease was
  // spent, or a CIRCUIT_OPEN refusal repeating Sluice's last answer while
  // its breaker is OPEN.
  bool leased() const { return leased_; }
  // True once the call was reported (or there is nothing to report).
  bool reported() const { return reporter_ == nullptr && lease_ == nullptr; }

  // Reports how the call went; `status_code` is optional (for diagnostics).
  // Only the first report counts; later ones are ignored.
  void Report(Outcome outcome, absl::Duration latency, int status_code = 0);

 private:
  friend class internal::PermitAccess;

  // Names made in place, for the SDK's own decisions.
  Permit(absl::string_view dependency, absl::string_view key);
  void MoveFrom(Permit& other) noexcept;

  Verdict verdict_ = Verdict::kAllow;
  Reason reason_ = Reason::kNone;
  std::string dependency_;
  std::string key_;
  std::string permit_id_;
  absl::Duration call_timeout_ = absl::ZeroDuration();
  absl::Duration retry_after_ = absl::ZeroDuration();
  // Null without one (most permits): an ALLOW carries none, and a
  // refusal the SDK repeats shares the one Sluice sent.
  std::shared_ptr<const Fallback> fallback_;
  BreakerState breaker_state_ = BreakerState::kUnknown;
  int http_status_ = 0;
  int64_t remaining_ = -1;
  uint64_t policy_version_ = 0;
  bool decided_locally_ = true;
  absl::Status sluice_error_;
  bool leased_ = false;
  // Set while a report is owed: to Sluice, or to the lease it came from.
  std::shared_ptr<internal::Reporter> reporter_;
  std::shared_ptr<internal::LeaseLine> lease_;
};

}  // namespace sluice::client

#endif  // SLUICE_CLIENT_PERMIT_H_
