// SPDX-License-Identifier: Apache-2.0
#include "server/rpc/decision_service.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/rpc/decision_convert.h"
#include "server/rpc/message_bounds.h"
#include "server/rpc/serve_unary.h"
#include "wire/limits.h"
#include "wire/quote.h"
#include "wire/status.h"

namespace sluice::rpc {

DecisionServiceImpl::DecisionServiceImpl(
    core::Engine* engine, std::function<void(absl::Duration)> on_acquire)
    : engine_(engine),
      on_acquire_(std::move(on_acquire)),
      decide_handler_([this](const v1::DecideCall& call, int index,
                             v1::DecideResult* result) {
        DecideOne(call, index, result);
      }) {}

grpc::ServerUnaryReactor* DecisionServiceImpl::Acquire(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary<v1::AcquireRequest, v1::AcquireResponse>(
      context, request, response, kAcquireBudget,
      [this](const v1::AcquireRequest& r, v1::AcquireResponse* out) {
        return AcquireOne(r, out);
      });
}

absl::Status DecisionServiceImpl::AcquireOne(const v1::AcquireRequest& request,
                                             v1::AcquireResponse* response) {
  const absl::Time start = on_acquire_ ? absl::Now() : absl::InfinitePast();
  absl::Status status = DecideAcquire(request, response);
  if (on_acquire_) on_acquire_(absl::Now() - start);
  return status;
}

absl::Status DecisionServiceImpl::DecideAcquire(
    const v1::AcquireRequest& request, v1::AcquireResponse* response) {
  SLUICE_RETURN_IF_ERROR(ValidateAcquireRequest(request));
  absl::StatusOr<core::Decision> decision = engine_->Acquire(
      request.dependency(), request.key(), request.permits());
  if (!decision.ok()) return decision.status();
  DecisionToProto(*decision, response);
  if (!permit_suffix_.empty() && !response->permit_id().empty()) {
    response->mutable_permit_id()->append(permit_suffix_);
  }
  return absl::OkStatus();
}

absl::StatusOr<core::Decision> DecisionServiceImpl::DecideCall(
    absl::string_view dependency, absl::string_view key, uint32_t permits,
    core::Unreported unreported, std::string* permit_id) {
  const absl::Time start = on_acquire_ ? absl::Now() : absl::InfinitePast();
  absl::StatusOr<core::Decision> decision =
      engine_->Acquire(dependency, key, permits, unreported);
  if (on_acquire_) on_acquire_(absl::Now() - start);
  permit_id->clear();
  if (decision.ok() && !decision->permit_id.empty()) {
    *permit_id = FormatPermitId(decision->permit_id);
    permit_id->append(permit_suffix_);
  }
  return decision;
}

absl::StatusOr<core::Engine::JointDecision> DecisionServiceImpl::DecideAll(
    absl::Span<const core::Engine::Call> calls, core::Unreported unreported,
    std::vector<std::string>* permit_ids) {
  // Each call timed from the end of the one before.
  absl::Time start = on_acquire_ ? absl::Now() : absl::InfinitePast();
  std::function<void()> on_decided;
  if (on_acquire_) {
    on_decided = [this, &start] {
      const absl::Time now = absl::Now();
      on_acquire_(now - start);
      start = now;
    };
  }
  absl::StatusOr<core::Engine::JointDecision> joint =
      engine_->AcquireAll(calls, unreported, on_decided);
  permit_ids->clear();
  if (!joint.ok()) return joint;
  permit_ids->resize(joint->decisions.size());
  for (size_t i = 0; i < joint->decisions.size(); ++i) {
    const core::PermitId& id = joint->decisions[i].permit_id;
    if (id.empty()) continue;
    (*permit_ids)[i] = FormatPermitId(id);
    (*permit_ids)[i].append(permit_suffix_);
  }
  return joint;
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
  return SettleReport(request.dependency(), request.key(), args);
}

core::BreakerState DecisionServiceImpl::SettleReport(
    absl::string_view dependency, absl::string_view key,
    const ReportArgs& args, bool* forged) {
  if (forward_ && !args.issuer.empty() && args.issuer != replica_id_) {
    if (forged != nullptr) *forged = false;
    core::ForwardedReport f;
    f.issuer = args.issuer;
    f.dependency = std::string(dependency);
    f.key = std::string(key);
    f.permit_id = args.permit_id;
    f.outcome = args.outcome;
    f.latency = args.latency;
    forward_(std::move(f));
    return engine_->PeekBreaker(dependency, key);
  }
  return engine_->Report(dependency, key, args.permit_id, args.outcome,
                         args.latency, forged);
}

absl::StatusOr<ReportArgs> DecisionServiceImpl::CheckReport(
    const v1::ReportResultRequest& request) {
  absl::StatusOr<ReportArgs> args = ParseReportRequest(request);
  if (!args.ok() && !ParsePermitId(request.permit_id()).ok()) {
    engine_->CountMalformedPermit();
  }
  return args;
}

absl::StatusOr<core::BreakerState> DecisionServiceImpl::ReportOne(
    const v1::ReportResultRequest& request) {
  absl::StatusOr<ReportArgs> args = CheckReport(request);
  if (!args.ok()) return args.status();
  return Settle(request, *args);
}

grpc::ServerUnaryReactor* DecisionServiceImpl::ReportResult(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary<v1::ReportResultRequest, v1::ReportResultResponse>(
      context, request, response, kReportBudget,
      [this](const v1::ReportResultRequest& r, v1::ReportResultResponse* out) {
        absl::StatusOr<core::BreakerState> state = ReportOne(r);
        if (!state.ok()) return state.status();
        out->set_breaker_state(BreakerStateToProto(*state));
        return absl::OkStatus();
      });
}

grpc::ServerUnaryReactor* DecisionServiceImpl::ReportResults(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary<v1::ReportResultsRequest, v1::ReportResultsResponse>(
      context, request, response, kReportsBudget,
      [this](const v1::ReportResultsRequest& r,
             v1::ReportResultsResponse* out) { return ReportMany(r, out); });
}

absl::Status DecisionServiceImpl::ReportMany(
    const v1::ReportResultsRequest& request,
    v1::ReportResultsResponse* response) {
  const int n = request.reports_size();
  if (n > kMaxBatch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reports: at most ", kMaxBatch, " per call, got ", n));
  }
  // All or nothing: check every report before applying any.
  std::vector<ReportArgs> args;
  args.reserve(n);
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<ReportArgs> parsed = CheckReport(request.reports(i));
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reports[", i, "]: ", parsed.status().message()));
    }
    args.push_back(*parsed);
  }
  for (int i = 0; i < n; ++i) {
    response->add_breaker_states(
        BreakerStateToProto(Settle(request.reports(i), args[i])));
  }
  return absl::OkStatus();
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>*
DecisionServiceImpl::Decide(grpc::CallbackServerContext* /*context*/) {
  return new DecideStream(&decide_handler_, &streams_);
}

grpc::ServerUnaryReactor* DecisionServiceImpl::RenewLeases(
    grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
    grpc::ByteBuffer* response) {
  return ServeUnary<v1::RenewLeasesRequest, v1::RenewLeasesResponse>(
      context, request, response, kRenewLeasesBudget,
      [this](const v1::RenewLeasesRequest& r, v1::RenewLeasesResponse* out) {
        return RenewMany(r, out);
      });
}

namespace {

// What one renewal must hold before it is applied.
absl::Status CheckRenewal(const v1::ClientLeaseRenewal& r) {
  if (absl::Status s = wire::ValidateRequestNames(r.dependency(), r.key());
      !s.ok()) {
    return s;
  }
  uint64_t ended = 0;
  for (uint64_t n : {r.successes(), r.slow(), r.failures(), r.timeouts(),
                     r.cancelled()}) {
    if (n > r.admitted() - ended) {
      return absl::InvalidArgumentError(absl::StrCat(
          "successes + slow + failures + timeouts + cancelled: more calls "
          "ended than admitted (", r.admitted(), ")"));
    }
    ended += n;
  }
  if (r.in_flight() > r.admitted() - ended) {
    return absl::InvalidArgumentError(absl::StrCat(
        "in_flight: ", r.in_flight(), " is more than the calls admitted and "
        "not ended (", r.admitted() - ended, ")"));
  }
  for (const auto& [name, value] :
       {std::pair<const char*, uint32_t>{"want_tokens", r.want_tokens()},
        {"want_slots", r.want_slots()}}) {
    if (value > DecisionServiceImpl::kMaxWanted) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": at most ", DecisionServiceImpl::kMaxWanted,
                       ", got ", value));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DecisionServiceImpl::RenewMany(
    const v1::RenewLeasesRequest& request,
    v1::RenewLeasesResponse* response) {
  if (request.client() == 0) {
    return absl::InvalidArgumentError("client: must not be 0");
  }
  const int n = request.leases_size();
  if (n > kMaxRenewals) {
    return absl::InvalidArgumentError(absl::StrCat(
        "leases: at most ", kMaxRenewals, " per call, got ", n));
  }
  absl::flat_hash_set<std::pair<absl::string_view, absl::string_view>> seen;
  seen.reserve(n);
  for (int i = 0; i < n; ++i) {
    const v1::ClientLeaseRenewal& r = request.leases(i);
    absl::Status s = CheckRenewal(r);
    if (s.ok() && !seen.insert({r.dependency(), r.key()}).second) {
      s = absl::InvalidArgumentError(
          r.key().empty() ? "the dependency is renewed twice"
                          : "the dependency and key are renewed twice");
    }
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("leases[", i, "]: ", s.message()));
    }
  }
  response->mutable_grants()->Reserve(n);
  for (const v1::ClientLeaseRenewal& r : request.leases()) {
    core::LeaseSettlement in;
    in.client = request.client();
    in.lease = r.lease();
    in.tokens_spent = r.tokens_spent();
    in.tokens_refused = r.tokens_refused();
    in.admitted = r.admitted();
    in.successes = r.successes();
    in.slow = r.slow();
    in.failures = r.failures();
    in.timeouts = r.timeouts();
    in.cancelled = r.cancelled();
    in.in_flight = r.in_flight();
    in.want_tokens = r.want_tokens();
    in.want_slots = r.want_slots();
    const core::LeaseTerms terms =
        engine_->RenewLease(r.dependency(), in, r.key());
    v1::ClientLeaseGrant* g = response->add_grants();
    g->set_dependency(r.dependency());
    g->set_key(r.key());
    g->set_per_key(terms.per_key);
    g->set_lease(terms.lease);
    g->set_token_limit(terms.token_limit);
    g->set_unlimited_tokens(terms.unlimited_tokens);
    g->set_slot_limit(terms.slot_limit);
    g->set_unlimited_slots(terms.unlimited_slots);
    *g->mutable_valid_for() = DurationToProto(terms.valid_for);
    *g->mutable_call_timeout() = DurationToProto(terms.call_timeout);
    if (terms.slow_after != absl::InfiniteDuration()) {
      *g->mutable_slow_after() = DurationToProto(terms.slow_after);
    }
    g->set_breaker_state(BreakerStateToProto(terms.breaker_state));
    g->set_exhausted(terms.exhausted);
    if (terms.retry_after > absl::ZeroDuration()) {
      *g->mutable_retry_after() = DurationToProto(terms.retry_after);
    }
    g->set_policy_version(terms.policy_version);
    g->set_reason(terms.reason);
  }
  return absl::OkStatus();
}

absl::Status DecisionServiceImpl::HandleDecide(
    const v1::DecideRequest& request, v1::DecideResponse* response) {
  const int n = request.calls_size();
  if (n > kMaxDecideCalls) {
    return absl::InvalidArgumentError(
        absl::StrCat("calls: at most ", kMaxDecideCalls,
                     " per DecideRequest, got ", n, "; none was handled"));
  }
  response->mutable_results()->Reserve(n);
  for (int i = 0; i < n; ++i) {
    DecideOne(request.calls(i), i, response->add_results());
  }
  return absl::OkStatus();
}

void DecisionServiceImpl::DecideOne(const v1::DecideCall& call, int index,
                                    v1::DecideResult* result) {
  result->set_request_id(call.request_id());
  absl::Status status;
  absl::string_view field;
  switch (call.call_case()) {
    case v1::DecideCall::kAcquire:
      field = "acquire";
      status = AcquireOne(call.acquire(), result->mutable_acquire());
      break;
    case v1::DecideCall::kReport: {
      field = "report";
      absl::StatusOr<core::BreakerState> state = ReportOne(call.report());
      if (state.ok()) {
        result->mutable_report()->set_breaker_state(
            BreakerStateToProto(*state));
      }
      status = state.status();
      break;
    }
    case v1::DecideCall::CALL_NOT_SET:
      // Also a call kind newer than this server, which parses as an
      // unknown field.
      status =
          absl::InvalidArgumentError("one of acquire or report is required");
      break;
  }
  if (!status.ok()) {
    v1::DecideError* error = result->mutable_error();  // clears the oneof
    error->set_code(ToGrpcStatus(status).error_code());
    // A proto3 string must be valid UTF-8, or the client cannot parse the
    // whole response (and its stream fails).
    error->set_message(wire::ToValidUtf8(
        absl::StrCat("calls[", index, "]", field.empty() ? "" : ".", field,
                     ": ", status.message())));
  }
}

void DecisionServiceImpl::WriteStats(base::StatsWriter& out) const {
  static constexpr base::MetricDef kDecideStreams = base::GaugeDef(
      "sluice_decide_streams", {},
      "DecisionService.Decide streams open now (gateways deciding over "
      "one long-lived stream). Their calls count in the other metrics "
      "like unary ones.");
  out.Write(kDecideStreams,
            static_cast<double>(static_cast<uint64_t>(open_streams())));
}

}  // namespace sluice::rpc
