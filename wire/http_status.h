#ifndef SLUICE_WIRE_HTTP_STATUS_H_
#define SLUICE_WIRE_HTTP_STATUS_H_

// The HTTP status a gateway answers for a refusal: AcquireResponse's
// http_status field, and the SDK's own refusals (fail-closed while Sluice is
// unreachable). The rule itself is the core's (core::RefusalHttpStatus), as
// the engine fills Decision::http_status; this is its proto-side name.

#include "sluice/v1/decision.pb.h"

namespace sluice::wire {

// 429 for RATE_LIMITED and CONCURRENCY_LIMITED (the caller went over a
// limit), 503 for any other refusal, including one without a reason.
int RefusalHttpStatus(v1::Reason reason);

}  // namespace sluice::wire

#endif  // SLUICE_WIRE_HTTP_STATUS_H_
