// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CORE_VERDICT_H_
#define SLUICE_SERVER_CORE_VERDICT_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "wire/enums/enum_lists.h"

// What a decision says: its verdict and the reason for it. The enums are
// generated from wire/enums/enum_lists.h, so they carry the sluice.v1
// numbers and the RPC edge converts with a cast.

namespace sluice::core {

enum class Verdict : uint8_t { SLUICE_VERDICT_LIST(SLUICE_ENUM_ENUMERATOR) };

// Why a verdict is not a plain ALLOW; kNone for a plain ALLOW. The numbers
// run from 0 without gaps: they index per-reason counters and bit masks.
enum class Reason : uint8_t { SLUICE_REASON_LIST(SLUICE_ENUM_ENUMERATOR) };
inline constexpr int kReasonCount = 0 SLUICE_REASON_LIST(SLUICE_ENUM_PLUS_ONE);
constexpr bool ReasonNumbersAreDense() {
  int next = 0;
  bool dense = true;
#define SLUICE_DENSE_ROW(enumerator, number, ...) \
  dense = dense && number == next++;
  SLUICE_REASON_LIST(SLUICE_DENSE_ROW)
#undef SLUICE_DENSE_ROW
  return dense;
}
static_assert(ReasonNumbersAreDense(), "reasons must be numbered 0, 1, 2, ...");

// What the engine answers for a dependency that has no policy.
enum class UnknownDependencyAction : uint8_t { kAllow = 1, kReject = 2 };

// The refusal kinds of SLUICE_REASON_LIST's last column.
enum class RefusalKind : uint8_t {
  kNotRefused,
  kOverLimit,
  kRefused,
  kNoPolicy,
};

constexpr RefusalKind RefusalKindOf(Reason reason) {
  using E = Reason;
  switch (reason) {
#define SLUICE_KIND_CASE(enumerator, number, proto, name, kind) \
  case E::enumerator:                                          \
    return RefusalKind::kind;
    SLUICE_REASON_LIST(SLUICE_KIND_CASE)
#undef SLUICE_KIND_CASE
  }
  return RefusalKind::kNotRefused;
}

// The HTTP status a gateway answers when refused for `reason`: 429 when the
// caller went over a limit, 503 for every other refusal. The one statement of
// the rule: Decision::http_status carries it to the wire, and clients answer
// what the server sent (wire/http_status.h).
constexpr int RefusalHttpStatus(Reason reason) {
  return RefusalKindOf(reason) == RefusalKind::kOverLimit ? 429 : 503;
}

// Whether a policy's fallback may name `reason` in `on`: the refusals a
// policy makes (not an unknown dependency's, which has no policy).
constexpr bool FallbackMayApply(Reason reason) {
  const RefusalKind kind = RefusalKindOf(reason);
  return kind == RefusalKind::kOverLimit || kind == RefusalKind::kRefused;
}

// The names Sluice writes ("RATE_LIMITED"): the protos' names, except
// "NONE" for kNone, where the proto says REASON_UNSPECIFIED. The one source
// of the names in metric labels, the x-sluice-reason and x-sluice-degraded
// headers and the logs.
SLUICE_ENUM_NAME_FUNCTION(VerdictName, Verdict, SLUICE_VERDICT_LIST,
                          "VERDICT_UNSPECIFIED")

SLUICE_ENUM_NAME_FUNCTION(ReasonName, Reason, SLUICE_REASON_LIST,
                          "REASON_UNSPECIFIED")

}  // namespace sluice::core

#endif  // SLUICE_SERVER_CORE_VERDICT_H_
