#ifndef SLUICE_SERVER_RPC_DECISION_STREAM_H_
#define SLUICE_SERVER_RPC_DECISION_STREAM_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "sluice/v1/decision.grpc.pb.h"

namespace sluice::rpc {

class DecideStream;

// The open Decide streams of one service, so that shutdown can end them:
// a stream never ends by itself while its gateway lives.
class DecideStreams {
 public:
  // Ends every open stream, and every stream opened from now on, once its
  // results are written (see DecideStream::End).
  void EndAll() ABSL_LOCKS_EXCLUDED(mu_);
  int64_t open() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  friend class DecideStream;
  void Add(DecideStream* stream) ABSL_LOCKS_EXCLUDED(mu_);
  void Remove(DecideStream* stream) ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  absl::flat_hash_set<DecideStream*> open_ ABSL_GUARDED_BY(mu_);
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
};

// One DecisionService.Decide stream. Each message read is handled inline, in
// order, by `handle`, which appends one result per call; the results go out
// as one DecideResponse. Only one write may be outstanding, so results that
// arrive while a write is in flight wait in a pending response and go out
// together when it completes. Flow control: while more than
// kMaxPendingResults wait, no further message is read; reading resumes when
// the write completes. After the client half-closes, the stream finishes OK
// once every result is written. Nothing is settled when a stream breaks.
//
// Owns itself: created by the service's Decide handler, deleted in OnDone.
// gRPC may run OnReadDone and OnWriteDone at once on different threads;
// the state they share is guarded by mu_.
class DecideStream final
    : public grpc::ServerBidiReactor<v1::DecideRequest, v1::DecideResponse> {
 public:
  // Handles one message, appending one result per call to `out`. Must be
  // safe for concurrent use (several streams call it at once).
  using Handler =
      std::function<void(const v1::DecideRequest&, v1::DecideResponse*)>;

  // Results waiting to be written above which the stream stops reading.
  static constexpr int kMaxPendingResults = 4096;

  // `handle` and `streams` must outlive the stream, which joins `streams`
  // while it lives.
  DecideStream(const Handler* handle, DecideStreams* streams);

  // Reads no more calls and finishes with UNAVAILABLE once the results of
  // the calls already read are written, so the gateway opens a new stream
  // (to another replica, behind a load balancer). Calls the gateway wrote
  // that were not read by then get no answer here; the SDK decides them
  // locally, as for any failed call.
  void End() ABSL_LOCKS_EXCLUDED(mu_);

  void OnReadDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnCancel() override ABSL_LOCKS_EXCLUDED(mu_);
  void OnDone() override;

 private:
  // Starts a write of the pending results unless one is in flight.
  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Finishes once nothing is left to read or write, or the stream broke.
  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Handler* const handle_;
  DecideStreams* const streams_;
  // Filled by the one outstanding read; only the read side touches it.
  v1::DecideRequest request_;

  absl::Mutex mu_;
  // Results not yet handed to a write.
  v1::DecideResponse pending_ ABSL_GUARDED_BY(mu_);
  // The message being written; gRPC reads it until OnWriteDone.
  v1::DecideResponse writing_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  // A message read is being handled (outside mu_); its results are yet to
  // join pending_, so the stream must not finish.
  bool handling_ ABSL_GUARDED_BY(mu_) = false;
  // A read was held back by flow control; OnWriteDone starts it.
  bool read_paused_ ABSL_GUARDED_BY(mu_) = false;
  // The client half-closed, or reading failed.
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  // Cancelled, or a write failed: nothing more can be sent.
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  // End() was called.
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace sluice::rpc

#endif  // SLUICE_SERVER_RPC_DECISION_STREAM_H_
