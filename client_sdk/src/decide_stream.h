// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_CLIENT_SRC_DECIDE_STREAM_H_
#define SLUICE_CLIENT_SRC_DECIDE_STREAM_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/alarm.h"
#include "grpcpp/channel.h"
#include "sluice/v1/decision.grpc.pb.h"

namespace sluice::client::internal {

// The client's one DecisionService.Decide stream, shared by all its calls.
// Each call gets a request id and joins a queue; whatever queued while the
// previous write was in flight goes out as one DecideRequest (at most
// kMaxCallsPerMessage calls), and each result is handed to its call's
// callback by request id. When the stream breaks, every call still waiting
// is completed with the stream's status; the next call opens a new stream.
// A server without Decide (UNIMPLEMENTED) makes unimplemented() true for
// good, and the client uses the unary methods from then on.
//
// Each call carries the deadline its unary RPC would have. One gRPC alarm per
// DecideStream (not a thread) fires at the earliest deadline of the open
// stream: a call past its deadline completes with DEADLINE_EXCEEDED, as the
// unary RPC would. If the stream has received nothing since such a call was
// queued, it is taken for dead (a hung server, a blackholed connection): it is
// cancelled, its other calls complete with UNAVAILABLE, and the next call
// opens a new stream.
//
// Safe for concurrent use. Callbacks run on gRPC threads, or on the calling
// thread when the stream is shut down, never under the stream's lock.
class DecideStream {
 public:
  // The status is OK when the server answered; the result may then still
  // carry an error of its own. A failed status is the stream's.
  using Done = std::function<void(const grpc::Status&, v1::DecideResult)>;

  // The server's limit per DecideRequest.
  static constexpr int kMaxCallsPerMessage = 1000;

  explicit DecideStream(std::shared_ptr<grpc::Channel> channel);
  // Shuts down.
  ~DecideStream();

  DecideStream(const DecideStream&) = delete;
  DecideStream& operator=(const DecideStream&) = delete;

  // Queues one call (its request_id is assigned here); `done` runs exactly
  // once, by `deadline` at the latest (then with DEADLINE_EXCEEDED). False,
  // with `done` untouched (not moved from), after Shutdown or once the server
  // turned out not to have Decide: the caller then uses the unary method.
  bool Send(v1::DecideCall call, absl::Time deadline, Done&& done)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Cancels the stream and waits until its callbacks have run; Send fails
  // from then on.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  bool unimplemented() const { return unimplemented_.load(); }

 private:
  class Session;

  // Ends `session`: completes its waiting calls with `status`.
  void OnSessionDone(Session* session, const grpc::Status& status)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Makes sure the alarm fires by `at`. Returns the alarm to Set (outside
  // mu_) and the one it replaces (to destroy, which cancels it, outside mu_).
  struct Rearm {
    std::shared_ptr<grpc::Alarm> to_set;
    absl::Time at;
    std::shared_ptr<grpc::Alarm> replaced;
  };
  Rearm ArmBy(absl::Time at) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetAlarm(Rearm rearm) ABSL_LOCKS_EXCLUDED(mu_);
  // The alarm's callback: completes the open stream's overdue calls, cancels
  // it if it looks dead, and re-arms for the next deadline.
  void OnAlarm(bool fired) ABSL_LOCKS_EXCLUDED(mu_);
  // No session and no alarm callback left: Shutdown may return.
  bool Idle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::DecisionService::Stub> stub_;
  std::atomic<bool> unimplemented_{false};

  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  // The open stream, or null until the next call opens one.
  Session* session_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Sessions whose OnDone has not run yet (at most the current one and one
  // breaking).
  int live_sessions_ ABSL_GUARDED_BY(mu_) = 0;
  // The deadline alarm (set or about to be), when it fires (InfiniteFuture
  // for none pending), and how many alarm callbacks may still run: each
  // decrements it last.
  std::shared_ptr<grpc::Alarm> alarm_ ABSL_GUARDED_BY(mu_);
  absl::Time alarm_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  int alarm_callbacks_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace sluice::client::internal

#endif  // SLUICE_CLIENT_SRC_DECIDE_STREAM_H_
