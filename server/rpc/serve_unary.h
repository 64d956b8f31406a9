// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_RPC_SERVE_UNARY_H_
#define SLUICE_SERVER_RPC_SERVE_UNARY_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "server/rpc/message_bounds.h"
#include "wire/status.h"

namespace sluice::rpc {

// One unary call of the data port on raw bytes: `in` checked against
// `budget` and parsed (ParseBounded), `handle(request, &response)` run, its
// answer serialized into `out`, and the call finished with the status.
// `refused`, when given, counts a request refused before `handle` runs
// (too large, too many elements, not a message).
template <typename Request, typename Response, typename Handle>
grpc::ServerUnaryReactor* ServeUnary(grpc::CallbackServerContext* context,
                                     const grpc::ByteBuffer* in,
                                     grpc::ByteBuffer* out,
                                     const MessageBudget& budget,
                                     Handle handle,
                                     std::atomic<uint64_t>* refused = nullptr) {
  Request request;
  absl::Status status = ParseBounded(*in, budget, &request);
  if (status.ok()) {
    Response response;
    status = handle(request, &response);
    if (status.ok()) status = SerializeToBuffer(response, out);
  } else if (refused != nullptr) {
    refused->fetch_add(1, std::memory_order_relaxed);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(wire::ToGrpcStatus(status));
  return reactor;
}

}  // namespace sluice::rpc

#endif  // SLUICE_SERVER_RPC_SERVE_UNARY_H_
