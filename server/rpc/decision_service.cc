#include "server/rpc/decision_service.h"

#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/rpc/decision_convert.h"
#include "wire/status.h"

namespace sluice::rpc {
namespace {

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context,
                                 const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(wire::ToGrpcStatus(status));
  return reactor;
}

}  // namespace

DecisionServiceImpl::DecisionServiceImpl(
    core::Engine* engine, std::function<void(absl::Duration)> on_acquire)
    : engine_(engine), on_acquire_(std::move(on_acquire)) {}

grpc::ServerUnaryReactor* DecisionServiceImpl::Acquire(
    grpc::CallbackServerContext* context, const v1::AcquireRequest* request,
    v1::AcquireResponse* response) {
  const absl::Time start = on_acquire_ ? absl::Now() : absl::InfinitePast();
  grpc::ServerUnaryReactor* reactor = DoAcquire(context, request, response);
  if (on_acquire_) on_acquire_(absl::Now() - start);
  return reactor;
}

grpc::ServerUnaryReactor* DecisionServiceImpl::DoAcquire(
    grpc::CallbackServerContext* context, const v1::AcquireRequest* request,
    v1::AcquireResponse* response) {
  if (absl::Status s = ValidateAcquireRequest(*request); !s.ok()) {
    return Finish(context, s);
  }
  absl::StatusOr<core::Decision> decision = engine_->Acquire(
      request->dependency(), request->key(), request->permits());
  if (!decision.ok()) return Finish(context, decision.status());
  DecisionToProto(*decision, response);
  if (!permit_suffix_.empty() && !response->permit_id().empty()) {
    response->mutable_permit_id()->append(permit_suffix_);
  }
  return Finish(context, absl::OkStatus());
}

void DecisionServiceImpl::EnableForwarding(
    std::string replica_id,
    std::function<bool(core::ForwardedReport)> forward) {
  replica_id_ = std::move(replica_id);
  permit_suffix_ = "@" + replica_id_;
  forward_ = std::move(forward);
}

core::BreakerState DecisionServiceImpl::Settle(
    const v1::ReportResultRequest& request, const ReportArgs& args) {
  if (forward_ && !args.issuer.empty() && args.issuer != replica_id_) {
    core::ForwardedReport f;
    f.issuer = args.issuer;
    f.dependency = request.dependency();
    f.key = request.key();
    f.permit_id = args.permit_id;
    f.outcome = args.outcome;
    f.latency = args.latency;
    forward_(std::move(f));
    return engine_->PeekBreaker(request.dependency(), request.key());
  }
  return engine_->Report(request.dependency(), request.key(), args.permit_id,
                         args.outcome, args.latency);
}

grpc::ServerUnaryReactor* DecisionServiceImpl::ReportResult(
    grpc::CallbackServerContext* context,
    const v1::ReportResultRequest* request,
    v1::ReportResultResponse* response) {
  absl::StatusOr<ReportArgs> args = ParseReportRequest(*request);
  if (!args.ok()) return Finish(context, args.status());
  response->set_breaker_state(BreakerStateToProto(Settle(*request, *args)));
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* DecisionServiceImpl::ReportResults(
    grpc::CallbackServerContext* context,
    const v1::ReportResultsRequest* request,
    v1::ReportResultsResponse* response) {
  const int n = request->reports_size();
  if (n > kMaxBatch) {
    return Finish(context, absl::InvalidArgumentError(absl::StrCat(
                               "reports: at most ", kMaxBatch,
                               " per call, got ", n)));
  }
  // All or nothing: check every report before applying any.
  std::vector<ReportArgs> args;
  args.reserve(n);
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<ReportArgs> parsed =
        ParseReportRequest(request->reports(i));
    if (!parsed.ok()) {
      return Finish(context,
                    absl::InvalidArgumentError(absl::StrCat(
                        "reports[", i, "]: ", parsed.status().message())));
    }
    args.push_back(*parsed);
  }
  for (int i = 0; i < n; ++i) {
    response->add_breaker_states(
        BreakerStateToProto(Settle(request->reports(i), args[i])));
  }
  return Finish(context, absl::OkStatus());
}

}  // namespace sluice::rpc
