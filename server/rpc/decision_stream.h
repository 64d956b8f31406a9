// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_RPC_DECISION_STREAM_H_
#define SLUICE_SERVER_RPC_DECISION_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/rpc/open_streams.h"
#include "sluice/v1/decision.grpc.pb.h"
#include "sluice/v1/decision.pb.h"

namespace sluice::rpc {

class DecideStream;

// The open Decide streams of one service, so that shutdown can end them
// (see DecideStream::End).
using DecideStreams = OpenStreams<DecideStream>;

// One DecisionService.Decide stream, on raw bytes so that each message is
// checked (kDecideBudget: size, at most 1000 calls) before it is parsed. A
// message over the budget ends the stream with one error (INVALID_ARGUMENT
// or RESOURCE_EXHAUSTED) once the results already due are written; no call
// of it is handled. Each message's calls are handled in order by `handle`,
// one result each; results go out coalesced in DecideResponses.
//
// Output is bounded by flow control: one write in flight, and at most
// about kMaxPendingBytes of results waiting behind it. When they are full,
// handling stops (in the middle of a message if need be) and no further
// message is read, until the write completes; so a client that does not
// read its responses stops being served and holds a bounded amount of
// memory. After the client half-closes, the stream finishes OK once every
// result is written. Nothing is settled when a stream breaks, and all it
// holds is freed when gRPC calls OnDone.
//
// Owns itself: created by the service's Decide handler, deleted in OnDone.
// gRPC may run OnReadDone and OnWriteDone at once on different threads;
// the state they share is guarded by mu_, and the read-side state is only
// touched by whoever holds the handling token (handling_).
class DecideStream final
    : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // Handles call `index` of a message, filling `out` (its request_id
  // included). Must be safe for concurrent use (several streams call it at
  // once).
  using Handler = std::function<void(const v1::DecideCall& call, int index,
                                     v1::DecideResult* out)>;

  // Serialized results waiting behind the write in flight above which the
  // stream stops handling calls and reading messages.
  static constexpr size_t kMaxPendingBytes = size_t{1} << 20;

  // `handle` and `streams` must outlive the stream, which joins `streams`
  // while it lives.
  DecideStream(const Handler* handle, DecideStreams* streams);

  // Reads no more calls and finishes with UNAVAILABLE once the results of
  // the calls already handled are written, so the gateway opens a new
  // stream (to another replica, behind a load balancer). Calls the gateway
  // wrote that were not handled by then get no answer here; the SDK decides
  // them locally, as for any failed call.
  void End() ABSL_LOCKS_EXCLUDED(mu_);

  void OnReadDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnCancel() override ABSL_LOCKS_EXCLUDED(mu_);
  void OnDone() override;

 private:
  // Handles the calls of request_ from next_call_ on while there is room,
  // then reads the next message; stops (paused_) when the results waiting
  // are full. Called by the holder of the handling token, without mu_.
  void Continue() ABSL_LOCKS_EXCLUDED(mu_);
  // Starts a write of the pending results unless one is in flight.
  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finishes once nothing is left to read or write, or the stream broke.
  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Handler* const handle_;
  DecideStreams* const streams_;

  // Read side: the message read and how far it is handled. Touched only by
  // the holder of the handling token.
  grpc::ByteBuffer read_buffer_;
  v1::DecideRequest request_;
  int next_call_ = 0;

  absl::Mutex mu_;
  // Results not yet handed to a write, and their serialized size.
  v1::DecideResponse pending_ ABSL_GUARDED_BY(mu_);
  size_t pending_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The bytes being written; gRPC reads them until OnWriteDone.
  grpc::ByteBuffer writing_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  // The handling token: a message read is being handled outside mu_, so the
  // stream must not finish, and nobody else may touch the read side.
  bool handling_ ABSL_GUARDED_BY(mu_) = false;
  // Handling stopped for room; OnWriteDone takes the token and continues.
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  // The queue was full at least once: OnDone returns free memory to the
  // system.
  bool held_much_ ABSL_GUARDED_BY(mu_) = false;
  // The client half-closed, reading failed, or a message was refused.
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  // Cancelled, or a write failed: nothing more can be sent.
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  // End() was called.
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
  // A message was refused whole: the status the stream finishes with.
  grpc::Status refusal_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sluice::rpc

#endif  // SLUICE_SERVER_RPC_DECISION_STREAM_H_
