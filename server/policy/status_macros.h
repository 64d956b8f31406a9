#ifndef SLUICE_SERVER_POLICY_STATUS_MACROS_H_
#define SLUICE_SERVER_POLICY_STATUS_MACROS_H_

#include "absl/status/status.h"

// abseil 20220623 ships no status macros; this is the one we need.
#define SLUICE_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    const absl::Status sluice_status_ = (expr);      \
    if (!sluice_status_.ok()) return sluice_status_; \
  } while (false)

#endif  // SLUICE_SERVER_POLICY_STATUS_MACROS_H_
