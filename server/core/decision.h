// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_DECISION_H_
#define SLUICE_SERVER_CORE_DECISION_H_

#include <cstdint>
#include <memory>

#include "absl/time/time.h"
#include "server/core/breaker_state.h"
#include "server/core/permit_seal.h"
#include "server/core/policy_config.h"
#include "server/core/verdict.h"

namespace sluice::core {

// The answer to one Acquire. A refusal is a value, not an error: an error
// (absl::Status) means the engine could not decide at all.
struct Decision {
  Verdict verdict = Verdict::kAllow;
  Reason reason = Reason::kNone;
  // Set (not empty()) when verdict is kAllow and the policy tracks the
  // call; hand it back to Engine::Report.
  PermitId permit_id;
  absl::Duration call_timeout = absl::ZeroDuration();
  absl::Duration retry_after = absl::ZeroDuration();
  BreakerState breaker_state = BreakerState::kClosed;
  // Tokens or window room left after this call; -1 without a rate limit.
  int64_t remaining = -1;
  uint64_t policy_version = 0;
  // Suggested HTTP status for kReject (429 or 503); 0 otherwise.
  int http_status = 0;
  // The deciding policy; null for an unknown dependency. Holds the fallback
  // served when verdict is kDegrade. Valid until this thread's next
  // Engine::Acquire (the thread holds a reference to it until then), so
  // the decision path touches no reference count shared with other
  // threads; convert the decision before deciding the next call.
  const PolicyConfig* policy = nullptr;

  const FallbackConfig* fallback() const {
    return verdict == Verdict::kDegrade && policy ? &policy->fallback
                                                  : nullptr;
  }
};

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_DECISION_H_
