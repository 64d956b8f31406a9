// SPDX-License-Identifier: Apache-2.0
#include "server/core/policy_config.h"

namespace sluice::core {

bool FallbackConfig::AppliesTo(Reason reason) const {
  if (strategy == FallbackStrategy::kNone) return false;
  if (on_mask == 0) return true;
  const auto bit = [](Reason r) { return uint32_t{1} << static_cast<int>(r); };
  if (on_mask & bit(reason)) return true;
  // A probe slot refusal is the breaker refusing, so it follows CIRCUIT_OPEN.
  return reason == Reason::kProbeLimit && (on_mask & bit(Reason::kCircuitOpen));
}

}  // namespace sluice::core
