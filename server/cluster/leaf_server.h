// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_CLUSTER_LEAF_SERVER_H_
#define SLUICE_SERVER_CLUSTER_LEAF_SERVER_H_

#include "absl/status/statusor.h"
#include "server/cluster/store.h"

namespace sluice::cluster {

// What a central replica offers the leaves below it (sluiced started with
// --upstream): a leaf's tick, answered from the central replica's memory
// without waiting on Redis. The lease protocol (proto/sluice/v1/lease.proto)
// carries TickRequest and TickReply between the two processes; this is the
// central side of it. Safe for concurrent use.
class LeafServer {
 public:
  virtual ~LeafServer() = default;

  // One leaf tick. Grants in the reply carry valid_for (a duration from the
  // start of the leaf's tick), never longer than what the central replica
  // itself still holds. ABORTED for a request whose (incarnation, sequence)
  // is not newer than one already applied for that leaf; UNAVAILABLE while
  // the central replica cannot lease (its own store is down past the grace
  // period, or it is stopping); RESOURCE_EXHAUSTED when it serves as many
  // leaves as it may.
  virtual absl::StatusOr<TickReply> ServeLeaf(const TickRequest& request) = 0;
};

}  // namespace sluice::cluster

#endif  // SLUICE_SERVER_CLUSTER_LEAF_SERVER_H_
