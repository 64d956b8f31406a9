#ifndef SLUICE_SERVER_RPC_STATUS_CONVERT_H_
#define SLUICE_SERVER_RPC_STATUS_CONVERT_H_

#include <grpcpp/support/status.h>

#include "absl/status/status.h"

namespace sluice::rpc {

// The one place where an absl::Status becomes a grpc::Status. The canonical
// codes have the same numbers in both libraries; the message is kept as is.
grpc::Status ToGrpcStatus(const absl::Status& status);

}  // namespace sluice::rpc

#endif  // SLUICE_SERVER_RPC_STATUS_CONVERT_H_
