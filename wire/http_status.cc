#include "wire/http_status.h"

#include "server/core/types.h"

namespace sluice::wire {

// Core and proto reasons share their numbers (checked in
// server/rpc/decision_convert.cc), so the core's rule applies as is.
int RefusalHttpStatus(v1::Reason reason) {
  return core::RefusalHttpStatus(static_cast<core::Reason>(reason));
}

}  // namespace sluice::wire
