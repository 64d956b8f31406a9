// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_TREE_LEASE_CODEC_H_
#define SLUICE_SERVER_TREE_LEASE_CODEC_H_

// The one conversion between the cluster store's tick (server/cluster/
// store.h) and the lease protocol's messages (proto/sluice/v1/lease.proto).
// Both directions of both messages live here, so a leaf (UpstreamStore) and
// a central replica (LeaseServiceImpl) can only disagree on the wire if the
// golden tests (tests/tree/lease_codec_test.cc) fail.
//
// Decoding treats the peer as hostile: every count and size is checked
// against the bounds below before anything is built from it, and a value
// out of range is INVALID_ARGUMENT naming the field, e.g.
//   policies[2].keys[7].key must be at most 1024 bytes, got 4000
// Any of the peer's bytes repeated in an error go through
// wire::QuoteUntrusted. Pure functions; safe for concurrent use.

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/cluster/store.h"
#include "server/rpc/message_bounds.h"
#include "sluice/v1/lease.pb.h"

namespace sluice::tree {

// The largest serialized LeaseTickReply a leaf takes (its channel's
// receive limit): a reply may carry the whole config.
inline constexpr size_t kMaxLeaseMessageBytes = size_t{16} << 20;
// The largest LeaseTickRequest: the data port's limit, since the central
// replica serves leases on it (rpc::kMaxDataMessageBytes, 2 MiB). 10,000
// keys of 100 bytes with every number at its widest take 1.8 MB
// (lease_codec_test).
inline constexpr size_t kMaxLeaseRequestBytes = rpc::kMaxDataMessageBytes;
// Fields at every depth of one message (see rpc::MessageBudget): a reply's
// keys and config, and a request's 10,000 keys of about 20 fields each.
inline constexpr int64_t kMaxLeaseFields = 1'500'000;
inline constexpr int64_t kMaxLeaseRequestFields = 300'000;
// Policies pushed in one tick (and answered in one reply).
inline constexpr size_t kMaxLeasePolicies = 4096;
// Breaker records of policies a tick left out, in one reply
// (TickReply::breakers). More than kMaxLeasePolicies: a leaf that has not
// seen the central's epoch gets the record of every policy that has one,
// and a config holds up to kMaxLeaseConfigEntries policies.
inline constexpr size_t kMaxLeaseBreakers = 10000;
// Keys of one policy in one tick (core::LivePolicy::kMaxKeysPerTick), and
// of all policies together (what fits kMaxLeaseRequestBytes).
inline constexpr size_t kMaxLeaseKeysPerPolicy = 10000;
inline constexpr size_t kMaxLeaseKeys = 10000;
// Forwarded reports in one message; a leaf drops the excess as if the
// issuer's inbox were full (TickReply::inbox_dropped).
inline constexpr size_t kMaxLeaseForwarded = 20000;
// Replicas named in a reply: the live list, and per policy the outcomes
// and warm entries.
inline constexpr size_t kMaxLeaseReplicas = 100000;
// Policies, overrides and deletions in one config snapshot or seed.
inline constexpr size_t kMaxLeaseConfigEntries = 10000;
// A serialized policy (the policies file takes 16 MiB for all of them).
inline constexpr size_t kMaxLeasePolicyBlobBytes = size_t{1} << 20;
// Store epochs, breaker causes and override notes.
inline constexpr size_t kMaxLeaseTextBytes = 1024;

// The budgets a request's and a reply's raw bytes are checked against
// before protobuf builds them (LeaseServiceImpl, UpstreamStore); the
// counted field is `policies` in both.
inline constexpr rpc::MessageBudget kLeaseTickBudget{
    kMaxLeaseRequestBytes, kMaxLeaseRequestFields, 9, "policies",
    static_cast<int64_t>(kMaxLeasePolicies)};
inline constexpr rpc::MessageBudget kLeaseReplyBudget{
    kMaxLeaseMessageBytes, kMaxLeaseFields, 6, "policies",
    static_cast<int64_t>(kMaxLeasePolicies)};

// Leaf -> central. The request is written as it is: callers that may exceed
// the bounds (forwarded reports) trim first (see UpstreamStore).
void EncodeTickRequest(const cluster::TickRequest& request,
                       v1::LeaseTickRequest* out);
// INVALID_ARGUMENT naming the field for anything out of bounds or range.
absl::StatusOr<cluster::TickRequest> DecodeTickRequest(
    const v1::LeaseTickRequest& request);

// Central -> leaf.
void EncodeTickReply(const cluster::TickReply& reply, v1::LeaseTickReply* out);
// INVALID_ARGUMENT naming the field for anything out of bounds or range.
absl::StatusOr<cluster::TickReply> DecodeTickReply(
    const v1::LeaseTickReply& reply);

// Whether `reply` answers `request`: one pull per pushed policy and one
// grant per pushed key, in push order, and no record in `breakers` for a
// pushed policy (its pull answers for its breaker); or, to a leave,
// nothing at all.
// INVALID_ARGUMENT naming the first mismatch.
absl::Status CheckReplyAnswers(const cluster::TickRequest& request,
                               const cluster::TickReply& reply);

}  // namespace sluice::tree

#endif  // SLUICE_SERVER_TREE_LEASE_CODEC_H_
