// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_TREE_LEASE_SERVICE_H_
#define SLUICE_SERVER_TREE_LEASE_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "absl/time/time.h"
#include "server/cluster/leaf_server.h"
#include "sluice/v1/lease.grpc.pb.h"

namespace sluice::tree {

// Lease with Tick on raw bytes, so that each request is checked against
// kLeaseTickBudget before protobuf builds it.
using RawLeaseService =
    v1::Lease::WithRawCallbackMethod_Tick<v1::Lease::Service>;

// sluice.v1.Lease on the gRPC callback API, served by a central replica on
// its data port: check the request's size and counts, parse and decode it
// (INVALID_ARGUMENT naming the field), ask the LeafServer, encode and
// finish inline. The LeafServer's status goes to the leaf as it is
// (ABORTED, UNAVAILABLE, RESOURCE_EXHAUSTED, ...). Holds no state; safe for
// concurrent use. `leaf_server` must outlive the service. The server's
// maximum receive size must be at least kMaxLeaseRequestBytes
// (lease_codec.h), the data port's own limit, for the largest valid tick
// to reach the handler.
// What a server that registers LeaseServiceImpl must allow on its
// listener: leaves' keepalive pings (UpstreamStore::Options::keepalive_time)
// at their pace, with or without a call in flight, instead of answering
// them with GOAWAY "too_many_pings".
// `min_ping_interval` is the shortest keepalive_time a leaf may use.
void AddLeaseServerArguments(grpc::ServerBuilder* builder,
                             absl::Duration min_ping_interval);

class LeaseServiceImpl final : public RawLeaseService {
 public:
  explicit LeaseServiceImpl(cluster::LeafServer* leaf_server);

  grpc::ServerUnaryReactor* Tick(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;

 private:
  cluster::LeafServer* const leaf_server_;
};

}  // namespace sluice::tree

#endif  // SLUICE_SERVER_TREE_LEASE_SERVICE_H_
