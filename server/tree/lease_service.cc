// SPDX-License-Identifier: Apache-2.0
#include "server/tree/lease_service.h"

#include <google/protobuf/arena.h>

#include <utility>

#include "absl/status/statusor.h"
#include "server/rpc/message_bounds.h"
#include "server/tree/lease_codec.h"
#include "wire/status.h"

namespace sluice::tree {

void AddLeaseServerArguments(grpc::ServerBuilder* builder,
                             absl::Duration min_ping_interval) {
  // gRPC's server refuses pings closer than 5 minutes apart while no call
  // is in flight (two strikes, then GOAWAY): a leaf pings every
  // keepalive_time (1 s), idle or not, so that it notices a central replica
  // that stopped answering within the grace period (see
  // UpstreamStore::Options::keepalive_time for why not only during ticks).
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder->AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      static_cast<int>(absl::ToInt64Milliseconds(min_ping_interval)));
}

LeaseServiceImpl::LeaseServiceImpl(cluster::LeafServer* leaf_server)
    : leaf_server_(leaf_server) {}

grpc::ServerUnaryReactor* LeaseServiceImpl::Tick(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  // Both messages in one arena: a tick's many small parts are allocated
  // and freed as a few blocks.
  google::protobuf::Arena arena;
  absl::Status status = [&]() -> absl::Status {
    v1::LeaseTickRequest& proto =
        *google::protobuf::Arena::CreateMessage<v1::LeaseTickRequest>(&arena);
    SLUICE_RETURN_IF_ERROR(
        rpc::ParseBounded(*request, kLeaseTickBudget, &proto));
    SLUICE_ASSIGN_OR_RETURN(cluster::TickRequest tick,
                            DecodeTickRequest(proto));
    SLUICE_ASSIGN_OR_RETURN(cluster::TickReply reply,
                            leaf_server_->ServeLeaf(tick));
    // A leaf refuses a reply past the bound; rather than fail its every
    // tick, the oldest reports beyond it go (they expire at the issuer as
    // TIMEOUT, as from a full inbox). The ledger is meant to hand at most
    // kMaxLeaseForwarded a tick.
    if (reply.forwarded_to_me.size() > kMaxLeaseForwarded) {
      reply.forwarded_to_me.erase(
          reply.forwarded_to_me.begin(),
          reply.forwarded_to_me.end() - kMaxLeaseForwarded);
    }
    v1::LeaseTickReply& out =
        *google::protobuf::Arena::CreateMessage<v1::LeaseTickReply>(&arena);
    EncodeTickReply(reply, &out);
    return rpc::SerializeToBuffer(out, response);
  }();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(wire::ToGrpcStatus(status));
  return reactor;
}

}  // namespace sluice::tree
