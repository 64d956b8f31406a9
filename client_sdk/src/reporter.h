// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_CLIENT_SRC_REPORTER_H_
#define SLUICE_CLIENT_SRC_REPORTER_H_

#include <atomic>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "counters.h"
#include "decide_stream.h"
#include "sluice/client/types.h"
#include "grpcpp/channel.h"
#include "sluice/v1/decision.grpc.pb.h"

namespace sluice::client::internal {

// Sends reports without ever blocking the caller. While fewer than
// `max_in_flight` calls are outstanding, each report is started at once as
// its own ReportResult on gRPC's callback API (no thread hop, so Sluice hears
// about a failure before the caller's next Acquire can overtake it). Beyond
// that, reports wait in a queue, and completions drain it in batches of up to
// `max_batch` per ReportResults call: under load one call carries many
// reports. When the queue is full the newest report is dropped and counted
// (Sluice then expires that permit as a TIMEOUT).
//
// With a Decide stream, reports go on it instead (no in-flight cap: the
// stream coalesces them), and fall back to the unary calls when the stream
// is shut down or the server has no Decide.
//
// Shared by the client and every permit it hands out (a permit may outlive
// the client). Safe for concurrent use.
class Reporter {
 public:
  struct Options {
    absl::Duration timeout = absl::Seconds(1);
    int max_in_flight = 512;
    size_t max_queued = 100000;
    int max_batch = 256;
  };

  Reporter(std::shared_ptr<grpc::Channel> channel, const Options& options,
           std::shared_ptr<Counters> counters,
           std::shared_ptr<DecideStream> stream = nullptr);
  // Waits for the callbacks of reports in flight (each bounded by its
  // deadline), so that the channel is never released on a gRPC thread.
  ~Reporter();

  // Never blocks on the network.
  void Send(const std::string& dependency, const std::string& key,
            const std::string& permit_id, Outcome outcome,
            absl::Duration latency, int status_code)
      ABSL_LOCKS_EXCLUDED(mu_);

  // A permit went away unreported: reports it CANCELLED.
  void AutoCancel(const std::string& dependency, const std::string& key,
                  const std::string& permit_id) ABSL_LOCKS_EXCLUDED(mu_);

  // Waits until nothing is queued or in flight, or `timeout` passed. True if
  // drained.
  bool Drain(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Call;
  struct BatchCall;

  // Sends on the stream; false when it takes no more calls.
  bool SendOnStream(const v1::ReportResultRequest& request);
  void Start(std::unique_ptr<v1::ReportResultRequest> request);
  void StartBatch(std::vector<std::unique_ptr<v1::ReportResultRequest>> batch);
  void OnDone(bool ok, uint64_t reports) ABSL_LOCKS_EXCLUDED(mu_);
  // Starts queued reports while in-flight slots are free.
  void Pump() ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::DecisionService::Stub> stub_;
  const std::shared_ptr<Counters> counters_;
  const std::shared_ptr<DecideStream> stream_;  // may be null

  std::atomic<int> in_flight_{0};
  // Callbacks that may still touch this object; the last thing each does is
  // decrement it.
  std::atomic<int> callbacks_{0};
  std::atomic<size_t> queued_{0};

  absl::Mutex mu_;
  std::deque<std::unique_ptr<v1::ReportResultRequest>> queue_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace sluice::client::internal

#endif  // SLUICE_CLIENT_SRC_REPORTER_H_
