#ifndef SLUICE_SERVER_RPC_DECISION_CONVERT_H_
#define SLUICE_SERVER_RPC_DECISION_CONVERT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/core/decision.h"
#include "server/core/types.h"
#include "sluice/v1/decision.pb.h"
#include "wire/limits.h"
#include "wire/status.h"
#include "wire/time.h"

// Request validation and core <-> proto conversion for DecisionService. Pure
// functions; safe for concurrent use.

namespace sluice::rpc {

// The wire library's limits and conversions, under the names the handlers use.
using wire::DurationFromProto;
using wire::DurationToProto;
using wire::kMaxDependencyBytes;
using wire::kMaxKeyBytes;
using wire::ToGrpcStatus;
inline constexpr uint32_t kMaxPermits = 1000000;

// INVALID_ARGUMENT naming the field and the rule when `request` breaks one.
absl::Status ValidateAcquireRequest(const v1::AcquireRequest& request);

// A ReportResultRequest checked and converted for Engine::Report.
struct ReportArgs {
  uint64_t permit_id = 0;  // 0: none given
  // The replica that issued the permit ("id@replica"); "" for a permit
  // without one (standalone).
  std::string issuer;
  core::Outcome outcome = core::Outcome::kSuccess;
  absl::Duration latency = absl::ZeroDuration();
};
absl::StatusOr<ReportArgs> ParseReportRequest(
    const v1::ReportResultRequest& request);

// Fills `response` from `decision`, including the fallback on DEGRADE.
void DecisionToProto(const core::Decision& decision,
                     v1::AcquireResponse* response);

v1::BreakerState BreakerStateToProto(core::BreakerState state);

// permit_id on the wire: the core's id in decimal, "" for 0. In cluster mode
// the server appends "@" and its replica id, so that a report reaching
// another replica can be passed on to the issuer.
std::string FormatPermitId(uint64_t permit_id);
// Inverse of FormatPermitId; "" is 0. INVALID_ARGUMENT for anything that is
// not 1-20 decimal digits fitting in a uint64.
absl::StatusOr<uint64_t> ParsePermitId(absl::string_view text);
// The replica id after "@" in a permit_id; "" when there is none.
absl::string_view PermitIssuer(absl::string_view text);

}  // namespace sluice::rpc

#endif  // SLUICE_SERVER_RPC_DECISION_CONVERT_H_
