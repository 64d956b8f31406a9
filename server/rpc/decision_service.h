// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_RPC_DECISION_SERVICE_H_
#define SLUICE_SERVER_RPC_DECISION_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "absl/types/span.h"

#include "base/stats.h"
#include "server/core/engine.h"
#include "server/core/tick.h"
#include "server/rpc/decision_convert.h"
#include "server/rpc/decision_stream.h"
#include "sluice/v1/decision.grpc.pb.h"

namespace sluice::rpc {

// DecisionService with every method on raw bytes, so that each request is
// checked against its budget (message_bounds.h) before protobuf builds it.
using RawDecisionService = v1::DecisionService::WithRawCallbackMethod_Acquire<
    v1::DecisionService::WithRawCallbackMethod_ReportResult<
        v1::DecisionService::WithRawCallbackMethod_ReportResults<
            v1::DecisionService::WithRawCallbackMethod_Decide<
                v1::DecisionService::WithRawCallbackMethod_RenewLeases<
                    v1::DecisionService::Service>>>>>;

// sluice.v1.DecisionService on the gRPC callback API. Each handler checks
// the request's size and counts, parses it, asks the engine, converts the
// answer and finishes inline; it holds no logic or state of its own and
// logs nothing per request. Decide runs the very same per-call code for
// each call of its stream (DecideStream). Safe for concurrent use; `engine`
// must outlive the service.
class DecisionServiceImpl final : public RawDecisionService,
                                  public base::StatsSource {
 public:
  // `on_acquire`, when set, is told how long each Acquire took to handle
  // (for the metrics histogram); it must be cheap and lock-free.
  explicit DecisionServiceImpl(
      core::Engine* engine,
      std::function<void(absl::Duration)> on_acquire = nullptr);

  grpc::ServerUnaryReactor* Acquire(grpc::CallbackServerContext* context,
                                    const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override;

  grpc::ServerUnaryReactor* ReportResult(grpc::CallbackServerContext* context,
                                         const grpc::ByteBuffer* request,
                                         grpc::ByteBuffer* response) override;

  grpc::ServerUnaryReactor* ReportResults(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Decide(
      grpc::CallbackServerContext* context) override;

  grpc::ServerUnaryReactor* RenewLeases(grpc::CallbackServerContext* context,
                                        const grpc::ByteBuffer* request,
                                        grpc::ByteBuffer* response) override;

  // Cluster mode: permits carry `replica_id`, and a report for a permit of
  // another replica goes to `forward`, which passes it on to the issuer (and
  // returns false when it cannot; the permit then expires there). Call
  // before serving.
  void EnableForwarding(std::string replica_id,
                        std::function<bool(core::ForwardedReport)> forward);

  // The per-call handlers every front end shares (unary and streamed gRPC,
  // the HTTP/JSON API), so they decide, count and time alike.

  // One Acquire: validate, decide, convert, and tell on_acquire how long it
  // took.
  absl::Status AcquireOne(const v1::AcquireRequest& request,
                          v1::AcquireResponse* response);
  // One report: check it, then settle it (or forward it to its issuer).
  absl::StatusOr<core::BreakerState> ReportOne(
      const v1::ReportResultRequest& request);
  // Several reports, all or nothing: every one is checked first, and if one
  // is invalid none is applied and the error names it (reports[i]).
  absl::Status ReportMany(const v1::ReportResultsRequest& request,
                          v1::ReportResultsResponse* response);
  // One report a front end with its own format checked itself (Envoy's
  // access-log service): settled here, or forwarded to its issuer, as a
  // ReportResult would be. `forged`, when given, is set when this process
  // refused the permit's seal (a forwarded report is never refused here).
  core::BreakerState SettleReport(absl::string_view dependency,
                                  absl::string_view key,
                                  const ReportArgs& args,
                                  bool* forged = nullptr);
  // One decision for a front end with its own answer format (Envoy's
  // rate-limit service): the engine's decision, timed for the metrics like
  // an Acquire. `permit_id` gets the permit as ReportResult takes it (with
  // the replica suffix in cluster mode), "" when none was issued.
  absl::StatusOr<core::Decision> DecideCall(absl::string_view dependency,
                                            absl::string_view key,
                                            uint32_t permits,
                                            core::Unreported unreported,
                                            std::string* permit_id);
  // Decisions a front end needs together (the descriptors of an Envoy
  // rate-limit request), all or nothing: core::Engine::AcquireAll, each
  // call timed for the metrics like an Acquire. `permit_ids` gets, per
  // call, the permit as ReportResult takes it, "" where none is held.
  absl::StatusOr<core::Engine::JointDecision> DecideAll(
      absl::Span<const core::Engine::Call> calls, core::Unreported unreported,
      std::vector<std::string>* permit_ids);
  // One call of a Decide message, the `index`th: its result (request_id
  // included), an error result naming calls[index] if it failed. Error
  // messages are valid UTF-8.
  void DecideOne(const v1::DecideCall& call, int index,
                 v1::DecideResult* result);
  // A whole DecideRequest: a result per call, in order; INVALID_ARGUMENT,
  // and no call handled, for more than kMaxDecideCalls calls.
  absl::Status HandleDecide(const v1::DecideRequest& request,
                            v1::DecideResponse* response);

  // A whole RenewLeasesRequest, all or nothing: every renewal is checked
  // first, and if one is invalid none is applied and the error names it
  // (leases[i]). Then a grant per renewal, in order.
  absl::Status RenewMany(const v1::RenewLeasesRequest& request,
                         v1::RenewLeasesResponse* response);

  // Decide streams open now.
  int64_t open_streams() const { return streams_.open(); }
  // open_streams() as sluice_decide_streams.
  void WriteStats(base::StatsWriter& out) const override;
  // Ends every Decide stream, now and from now on (see DecideStream::End).
  // The server calls this when it begins to shut down.
  void EndStreams() { streams_.EndAll(); }

  // Most reports one ReportResults call may carry.
  static constexpr int kMaxBatch = 10000;
  // Most calls one DecideRequest may carry.
  static constexpr int kMaxDecideCalls = 1000;
  // Most dependencies one RenewLeasesRequest may renew.
  static constexpr int kMaxRenewals = 256;
  // Most tokens or slots one renewal may want.
  static constexpr uint32_t kMaxWanted = 1000000;

 private:
  absl::Status DecideAcquire(const v1::AcquireRequest& request,
                             v1::AcquireResponse* response);
  // ParseReportRequest, counting a permit id that cannot be read
  // (Engine::CountMalformedPermit).
  absl::StatusOr<ReportArgs> CheckReport(
      const v1::ReportResultRequest& request);
  // Settles one checked report here, or forwards it to its issuer; the
  // breaker state this replica sees for the dependency.
  core::BreakerState Settle(const v1::ReportResultRequest& request,
                            const ReportArgs& args);

  core::Engine* const engine_;
  const std::function<void(absl::Duration)> on_acquire_;
  // Set by EnableForwarding; read-only while serving.
  std::string replica_id_;
  std::string permit_suffix_;  // "@" + replica_id_, or ""
  std::function<bool(core::ForwardedReport)> forward_;
  const DecideStream::Handler decide_handler_;
  DecideStreams streams_;
};

}  // namespace sluice::rpc

#endif  // SLUICE_SERVER_RPC_DECISION_SERVICE_H_
