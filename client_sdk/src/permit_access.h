// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_CLIENT_SRC_PERMIT_ACCESS_H_
#define SLUICE_CLIENT_SRC_PERMIT_ACCESS_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "lease_book.h"
#include "reporter.h"
#include "sluice/client/permit.h"
#include "sluice/v1/decision.pb.h"

namespace sluice::client::internal {

// Builds permits; the one friend of Permit.
class PermitAccess {
 public:
  // From Sluice's answer. A report is owed only for an ALLOW with a
  // permit id.
  static Permit FromResponse(std::string dependency, std::string key,
                             const v1::AcquireResponse& response,
                             std::shared_ptr<Reporter> reporter);
  // The fallback `permit` carries, shared rather than copied; null: none.
  static std::shared_ptr<const Fallback> SharedFallback(const Permit& permit) {
    return permit.fallback_;
  }
  // Decided by the SDK because Sluice could not (`error` says why).
  static Permit Local(std::string dependency, std::string key, Verdict verdict,
                      absl::Duration call_timeout, absl::Status error);
  // Decided from `line`'s lease: an ALLOW that reports to the line, or a
  // refusal of a spent lease.
  static Permit Leased(absl::string_view dependency, absl::string_view key,
                       const LeaseLine::Decision& decision,
                       std::shared_ptr<LeaseLine> line);
  // A refusal because Sluice could not be asked (`error`) while the
  // dependency's lease still holds its limit.
  static Permit HeldLimit(std::string dependency, absl::Status error);
};

}  // namespace sluice::client::internal

#endif  // SLUICE_CLIENT_SRC_PERMIT_ACCESS_H_
