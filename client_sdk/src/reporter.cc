// SPDX-License-Identifier: Apache-2.0
#include "reporter.h"

#include <algorithm>
#include <utility>

#include "convert.h"
#include "wire/time.h"

namespace sluice::client::internal {

struct Reporter::Call {
  grpc::ClientContext context;
  std::unique_ptr<v1::ReportResultRequest> request;
  v1::ReportResultResponse response;
};

struct Reporter::BatchCall {
  grpc::ClientContext context;
  v1::ReportResultsRequest request;
  v1::ReportResultsResponse response;
};

Reporter::Reporter(std::shared_ptr<grpc::Channel> channel,
                   const Options& options, std::shared_ptr<Counters> counters,
                   std::shared_ptr<DecideStream> stream)
    : options_(options),
      channel_(std::move(channel)),
      stub_(v1::DecisionService::NewStub(channel_)),
      counters_(std::move(counters)),
      stream_(std::move(stream)) {}

Reporter::~Reporter() {
  while (callbacks_.load() > 0) absl::SleepFor(absl::Milliseconds(1));
}

void Reporter::Send(const std::string& dependency, const std::string& key,
                    const std::string& permit_id, Outcome outcome,
                    absl::Duration latency, int status_code) {
  auto request = std::make_unique<v1::ReportResultRequest>();
  request->set_dependency(dependency);
  request->set_key(key);
  request->set_permit_id(permit_id);
  request->set_outcome(OutcomeToProto(outcome));
  // The server rejects a negative latency; a clock step can produce one.
  *request->mutable_latency() =
      wire::DurationToProto(std::max(latency, absl::ZeroDuration()));
  request->set_status_code(status_code);
  if (stream_ != nullptr && SendOnStream(*request)) return;

  if (in_flight_.fetch_add(1) < options_.max_in_flight) {
    Start(std::move(request));
    return;
  }
  in_flight_.fetch_sub(1);
  {
    absl::MutexLock lock(&mu_);
    if (queue_.size() >= options_.max_queued) {
      Counters::Inc(counters_->reports_dropped);
      return;
    }
    queue_.push_back(std::move(request));
    queued_.fetch_add(1);
  }
  // A completion may have freed a slot between our check and the push.
  Pump();
}

void Reporter::AutoCancel(const std::string& dependency,
                          const std::string& key,
                          const std::string& permit_id) {
  Counters::Inc(counters_->reports_auto_cancelled);
  Send(dependency, key, permit_id, Outcome::kCancelled, absl::ZeroDuration(),
       0);
}

bool Reporter::SendOnStream(const v1::ReportResultRequest& request) {
  v1::DecideCall call;
  *call.mutable_report() = request;
  in_flight_.fetch_add(1);
  callbacks_.fetch_add(1);
  DecideStream::Done done = [this, request](const grpc::Status& status,
                                            v1::DecideResult result) {
    if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      // An old server: this report goes unary (keeping its in-flight
      // slot), like every later one.
      Start(std::make_unique<v1::ReportResultRequest>(request));
    } else {
      OnDone(status.ok() && result.has_report(), 1);
    }
    callbacks_.fetch_sub(1);  // Last touch of `this`.
  };
  // The deadline a unary ReportResult would have.
  if (stream_->Send(std::move(call), absl::Now() + options_.timeout,
                    std::move(done))) {
    return true;
  }
  in_flight_.fetch_sub(1);
  callbacks_.fetch_sub(1);
  return false;
}

void Reporter::Start(std::unique_ptr<v1::ReportResultRequest> request) {
  auto* call = new Call;
  call->request = std::move(request);
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  callbacks_.fetch_add(1);
  stub_->async()->ReportResult(
      &call->context, call->request.get(), &call->response,
      [this, call](grpc::Status status) {
        delete call;
        OnDone(status.ok(), 1);
        callbacks_.fetch_sub(1);  // Last touch of `this`.
      });
}

void Reporter::StartBatch(
    std::vector<std::unique_ptr<v1::ReportResultRequest>> batch) {
  auto* call = new BatchCall;
  call->request.mutable_reports()->Reserve(static_cast<int>(batch.size()));
  for (auto& report : batch) call->request.add_reports()->Swap(report.get());
  call->context.set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  callbacks_.fetch_add(1);
  Counters::Inc(counters_->report_batches);
  const uint64_t n = batch.size();
  stub_->async()->ReportResults(&call->context, &call->request,
                                &call->response,
                                [this, call, n](grpc::Status status) {
                                  delete call;
                                  OnDone(status.ok(), n);
                                  callbacks_.fetch_sub(1);  // Last touch.
                                });
}

void Reporter::OnDone(bool ok, uint64_t reports) {
  Counters::Inc(ok ? counters_->reports_sent : counters_->reports_failed,
                reports);
  in_flight_.fetch_sub(1);
  if (queued_.load() > 0) Pump();
}

void Reporter::Pump() {
  while (true) {
    std::vector<std::unique_ptr<v1::ReportResultRequest>> batch;
    {
      absl::MutexLock lock(&mu_);
      if (queue_.empty()) return;
      if (in_flight_.fetch_add(1) >= options_.max_in_flight) {
        in_flight_.fetch_sub(1);
        return;
      }
      while (!queue_.empty() &&
             batch.size() < static_cast<size_t>(options_.max_batch)) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      queued_.fetch_sub(batch.size());
    }
    if (batch.size() == 1) {
      Start(std::move(batch.front()));
    } else {
      StartBatch(std::move(batch));
    }
  }
}

bool Reporter::Drain(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  // Completions arrive on gRPC threads without taking mu_, so poll; this
  // runs once, at shutdown.
  while (in_flight_.load() > 0 || queued_.load() > 0) {
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

}  // namespace sluice::client::internal
