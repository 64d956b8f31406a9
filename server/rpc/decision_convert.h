// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_RPC_DECISION_CONVERT_H_
#define SLUICE_SERVER_RPC_DECISION_CONVERT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/core/breaker_state.h"
#include "server/core/decision.h"
#include "server/core/outcome.h"
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
  core::PermitId permit_id;  // empty: none given
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

// permit_id on the wire: 32 lowercase hex digits, the core's serial then
// its MAC (16 each), "" for an empty id. In cluster mode the server appends
// "@" and its replica id, so that a report reaching another replica can be
// passed on to the issuer, which checks the MAC.
inline constexpr size_t kPermitIdDigits = 32;
std::string FormatPermitId(const core::PermitId& permit_id);
// Inverse of FormatPermitId (either case of hex digits); "" is the empty
// id. INVALID_ARGUMENT for anything else: the message quotes the text only
// when it is printable ASCII, so it is always valid UTF-8. Reads only the
// syntax: whether the MAC is right is the engine's question.
absl::StatusOr<core::PermitId> ParsePermitId(absl::string_view text);
// The replica id after "@" in a permit_id; "" when there is none.
absl::string_view PermitIssuer(absl::string_view text);

}  // namespace sluice::rpc

#endif  // SLUICE_SERVER_RPC_DECISION_CONVERT_H_
