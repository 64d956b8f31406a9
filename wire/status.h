// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_WIRE_STATUS_H_
#define SLUICE_WIRE_STATUS_H_

// absl::Status <-> grpc::Status, converted once at each RPC edge, and the
// status macros abseil 20220623 does not ship.

#include <grpcpp/support/status.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sluice::wire {

// The canonical codes have the same numbers in both libraries; the message
// is kept, made valid UTF-8 (ToValidUtf8). A code gRPC does not know
// becomes UNKNOWN.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace sluice::wire

// Returns the absl::Status `expr` from the enclosing function unless it is OK.
#define SLUICE_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    const absl::Status sluice_status_ = (expr);      \
    if (!sluice_status_.ok()) return sluice_status_; \
  } while (false)

// `lhs = *rexpr` for an absl::StatusOr `rexpr`, or returns its status.
// `lhs` may declare a variable: SLUICE_ASSIGN_OR_RETURN(auto x, F());
#define SLUICE_ASSIGN_OR_RETURN(lhs, rexpr) \
  SLUICE_ASSIGN_OR_RETURN_IMPL_(            \
      SLUICE_STATUS_CONCAT_(sluice_statusor_, __LINE__), lhs, rexpr)

#define SLUICE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                  \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = *std::move(statusor)

#define SLUICE_STATUS_CONCAT_INNER_(a, b) a##b
#define SLUICE_STATUS_CONCAT_(a, b) SLUICE_STATUS_CONCAT_INNER_(a, b)

#endif  // SLUICE_WIRE_STATUS_H_
