// SPDX-License-Identifier: Apache-2.0
#include "server/rpc/admin_service.h"

#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/rpc/decision_convert.h"
#include "wire/limits.h"
#include "wire/status.h"
#include "wire/time.h"

namespace sluice::rpc {
namespace {

grpc::ServerUnaryReactor* Finish(grpc::CallbackServerContext* context,
                                 const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(wire::ToGrpcStatus(status));
  return reactor;
}

// One WatchEvents stream. The publisher side (EventHub, any thread) only
// kicks it; writes happen one at a time, from the kick or from OnWriteDone.
class WatchReactor final : public grpc::ServerWriteReactor<v1::Event> {
 public:
  WatchReactor(EventHub* hub, std::string dependency)
      : hub_(hub), state_(std::make_shared<State>()) {
    state_->reactor = this;
    subscription_ = hub_->Subscribe(
        std::move(dependency),
        [state = std::weak_ptr<State>(state_)] {
          if (auto s = state.lock()) s->Kick();
        });
    state_->subscription = subscription_.get();
    // Tells the client at once that the watch is in place.
    StartSendInitialMetadata();
    state_->Kick();
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&state_->mu);
      state_->writing = false;
      if (!ok) {
        // The client went away; OnCancel or OnDone follows.
        state_->FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED,
                                          "watcher went away"));
        return;
      }
    }
    state_->Kick();
  }

  void OnCancel() override {
    absl::MutexLock lock(&state_->mu);
    state_->FinishLocked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&state_->mu);
      state_->reactor = nullptr;
    }
    hub_->Unsubscribe(subscription_.get());
    delete this;
  }

 private:
  // Shared with the hub's callback, which may outlive the reactor.
  struct State {
    absl::Mutex mu;
    WatchReactor* reactor ABSL_GUARDED_BY(mu) = nullptr;
    EventHub::Subscription* subscription = nullptr;
    bool writing ABSL_GUARDED_BY(mu) = false;
    bool finished ABSL_GUARDED_BY(mu) = false;
    // The message being written; must live until OnWriteDone.
    v1::Event current ABSL_GUARDED_BY(mu);

    // Starts the next write when none is in flight and an event is queued.
    void Kick() ABSL_LOCKS_EXCLUDED(mu) {
      absl::MutexLock lock(&mu);
      if (reactor == nullptr || writing || finished) return;
      if (!subscription->Pop(&current)) return;
      writing = true;
      reactor->StartWrite(&current);
    }
    void FinishLocked(const grpc::Status& status)
        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
      if (finished || reactor == nullptr) return;
      finished = true;
      reactor->Finish(status);
    }
  };

  EventHub* const hub_;
  const std::shared_ptr<State> state_;
  std::shared_ptr<EventHub::Subscription> subscription_;
};

class RejectedWatch final : public grpc::ServerWriteReactor<v1::Event> {
 public:
  explicit RejectedWatch(const absl::Status& status) {
    Finish(wire::ToGrpcStatus(status));
  }
  void OnDone() override { delete this; }
};

uint64_t Count(int64_t n) { return n > 0 ? static_cast<uint64_t>(n) : 0; }

// The adaptive gates and the baseline rule, each only when the policy has it.
// A duration not known yet stays unset rather than "0s".
void AdaptiveStateToProto(const core::GateStatus& g,
                          v1::DependencyState* out) {
  if (g.throttle) {
    const core::ThrottleStatus& t = *g.throttle;
    v1::AdaptiveThrottleState* state = out->mutable_throttle();
    state->set_requests(t.requests);
    state->set_accepts(t.accepts);
    state->set_probability(t.probability);
    state->set_refused(t.refused);
  }
  if (g.adaptive_limit) {
    const core::AdaptiveLimitStatus& a = *g.adaptive_limit;
    v1::AdaptiveLimitState* state = out->mutable_adaptive_limit();
    state->set_limit(a.limit);
    state->set_in_flight(a.in_flight);
    state->set_steady_limit(a.steady_limit);
    if (a.baseline > absl::ZeroDuration()) {
      wire::DurationToProto(a.baseline, state->mutable_baseline());
    }
    if (a.last_latency > absl::ZeroDuration()) {
      wire::DurationToProto(a.last_latency, state->mutable_last_latency());
    }
    state->set_refused(a.refused);
  }
  if (g.baseline) {
    const core::BaselineStatus& b = *g.baseline;
    v1::LatencyBaselineState* state = out->mutable_latency_baseline();
    state->set_windows_learned(b.learned.windows);
    state->set_ready(b.ready);
    if (b.learned.windows > 0) {
      wire::DurationToProto(b.mean, state->mutable_mean());
      wire::DurationToProto(b.stddev, state->mutable_stddev());
    }
    state->set_success_rate(b.learned.success);
    state->set_live_calls(b.live_calls);
    if (b.live_calls > 0) {
      wire::DurationToProto(b.live_mean, state->mutable_live_mean());
    }
    state->set_live_success_rate(b.live_success);
  }
}

}  // namespace

void DependencyStateToProto(const core::LivePolicyStatus& status,
                            const ClusterView& cluster,
                            v1::DependencyState* out) {
  out->set_dependency(status.policy->name);
  out->set_policy_version(status.policy->version);
  out->set_keys(status.keys);
  const core::DecisionCounters& c = status.counters;
  v1::DecisionCounts* d = out->mutable_decisions();
  d->set_acquired(c.acquired);
  d->set_allowed(c.allowed);
  d->set_rejected(c.rejected);
  d->set_degraded(c.degraded);
  d->set_shadow_refused(c.shadow_refused);
  out->set_store_status(cluster.store_status);
  out->set_live_replicas(cluster.live_replicas);
  out->set_grant_source(cluster.grant_source);
  out->set_leaves(cluster.leaves);
  if (!status.gates) {
    out->set_tokens_available(-1);
    return;
  }
  const core::GateStatus& g = *status.gates;
  out->set_tokens_available(g.tokens_available);
  out->set_window_count(Count(g.window_count));
  out->set_in_flight(std::max<uint32_t>(
      g.in_flight, static_cast<uint32_t>(g.live_permits)));
  const bool cluster_rate = status.policy->rate_limit &&
                            status.policy->rate_limit->scope ==
                                core::Scope::kCluster;
  out->set_share(cluster.cluster ? (cluster_rate ? g.rate_fraction : 1.0) : 0);
  out->set_effective_rate(g.effective_rate);
  out->set_effective_max_in_flight(g.effective_max_in_flight);
  out->set_has_grant(g.has_grant);
  if (!status.policy->per_key) {
    v1::ClientLeasesState* leases = out->mutable_client_leases();
    leases->set_leases(static_cast<uint32_t>(g.client_leases));
    leases->set_tokens(g.leased_tokens);
    leases->set_slots(g.leased_slots);
    leases->set_leased_decisions(c.leased);
  }
  AdaptiveStateToProto(g, out);
  if (!g.has_breaker) return;
  out->set_breaker_state(BreakerStateToProto(g.breaker_state));
  if (g.open_until != absl::InfinitePast()) {
    *out->mutable_open_until() = wire::TimestampToProto(g.open_until);
  }
  out->set_trip_cause(g.trip_cause);
  out->set_breaker_generation(g.breaker_generation);
  out->set_override(static_cast<v1::BreakerOverride>(g.override_mode));
  *out->mutable_current_open_duration() =
      wire::DurationToProto(g.current_open_duration);
  v1::OutcomeCounts* w = out->mutable_window_outcomes();
  w->set_calls(Count(g.window.calls));
  w->set_failures(Count(g.window.failures - g.window.timeouts));
  w->set_timeouts(Count(g.window.timeouts));
  w->set_successes(Count(g.window.calls - g.window.failures));
  w->set_slow(Count(g.window.slow));
}

AdminServiceImpl::AdminServiceImpl(core::Engine* engine, AdminBackend* backend,
                                   EventHub* events, Options options)
    : engine_(engine),
      backend_(backend),
      events_(events),
      options_(std::move(options)) {}

absl::Status AdminServiceImpl::Authenticate(
    const grpc::CallbackServerContext* context) const {
  if (options_.tokens == nullptr) return absl::OkStatus();
  const auto& metadata = context->client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return absl::UnauthenticatedError(
        "the admin API needs \"authorization: Bearer <token>\" metadata");
  }
  const absl::string_view value(it->second.data(), it->second.size());
  constexpr absl::string_view kBearer = "Bearer ";
  if (value.substr(0, kBearer.size()) != kBearer ||
      !options_.tokens->Accepts(value.substr(kBearer.size()))) {
    return absl::UnauthenticatedError("wrong admin token");
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* AdminServiceImpl::PutPolicy(
    grpc::CallbackServerContext* context, const v1::PutPolicyRequest* request,
    v1::PutPolicyResponse* response) {
  if (absl::Status s = Authenticate(context); !s.ok()) {
    return Finish(context, s);
  }
  absl::StatusOr<policy::PolicyChange> change =
      backend_->PutPolicy(request->policy(), request->expected_version());
  if (!change.ok()) return Finish(context, change.status());
  response->set_version(change->new_version);
  response->set_previous_version(change->old_version);
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* AdminServiceImpl::GetPolicy(
    grpc::CallbackServerContext* context, const v1::GetPolicyRequest* request,
    v1::Policy* response) {
  if (absl::Status s = Authenticate(context); !s.ok()) {
    return Finish(context, s);
  }
  if (absl::Status s = wire::ValidateName("name", request->name()); !s.ok()) {
    return Finish(context, s);
  }
  absl::StatusOr<v1::Policy> policy = backend_->GetPolicy(request->name());
  if (!policy.ok()) return Finish(context, policy.status());
  *response = *std::move(policy);
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* AdminServiceImpl::ListPolicies(
    grpc::CallbackServerContext* context,
    const v1::ListPoliciesRequest* request,
    v1::ListPoliciesResponse* response) {
  if (absl::Status s = Authenticate(context); !s.ok()) {
    return Finish(context, s);
  }
  for (v1::Policy& policy : backend_->ListPolicies()) {
    *response->add_policies() = std::move(policy);
  }
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* AdminServiceImpl::DeletePolicy(
    grpc::CallbackServerContext* context,
    const v1::DeletePolicyRequest* request,
    v1::DeletePolicyResponse* response) {
  if (absl::Status s = Authenticate(context); !s.ok()) {
    return Finish(context, s);
  }
  if (absl::Status s = wire::ValidateName("name", request->name()); !s.ok()) {
    return Finish(context, s);
  }
  absl::StatusOr<policy::PolicyChange> change =
      backend_->DeletePolicy(request->name(), request->expected_version());
  return Finish(context, change.status());
}

grpc::ServerUnaryReactor* AdminServiceImpl::SetBreakerOverride(
    grpc::CallbackServerContext* context,
    const v1::SetBreakerOverrideRequest* request,
    v1::SetBreakerOverrideResponse* response) {
  if (absl::Status s = Authenticate(context); !s.ok()) {
    return Finish(context, s);
  }
  if (absl::Status s = wire::ValidateName("dependency", request->dependency());
      !s.ok()) {
    return Finish(context, s);
  }
  if (request->override() != v1::AUTO && request->override() != v1::FORCE_OPEN &&
      request->override() != v1::FORCE_CLOSED) {
    return Finish(context,
                  absl::InvalidArgumentError(
                      "override must be AUTO, FORCE_OPEN or FORCE_CLOSED"));
  }
  const auto override = static_cast<core::BreakerOverride>(request->override());
  absl::Status status =
      backend_->SetOverride(request->dependency(), override, request->note());
  if (!status.ok()) return Finish(context, status);
  absl::StatusOr<core::LivePolicyStatus> state =
      engine_->Inspect(request->dependency());
  if (state.ok() && state->gates) {
    response->set_breaker_state(BreakerStateToProto(state->gates->breaker_state));
  }
  return Finish(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* AdminServiceImpl::GetState(
    grpc::CallbackServerContext* context, const v1::GetStateRequest* request,
    v1::DependencyState* response) {
  if (absl::Status s = Authenticate(context); !s.ok()) {
    return Finish(context, s);
  }
  if (absl::Status s = wire::ValidateName("dependency", request->dependency());
      !s.ok()) {
    return Finish(context, s);
  }
  absl::StatusOr<core::LivePolicyStatus> status =
      engine_->Inspect(request->dependency(), request->key());
  if (!status.ok()) return Finish(context, status.status());
  DependencyStateToProto(*status, backend_->cluster(), response);
  response->set_replica_id(events_->replica_id());
  return Finish(context, absl::OkStatus());
}

grpc::ServerWriteReactor<v1::Event>* AdminServiceImpl::WatchEvents(
    grpc::CallbackServerContext* context,
    const v1::WatchEventsRequest* request) {
  if (absl::Status s = Authenticate(context); !s.ok()) {
    return new RejectedWatch(s);
  }
  return new WatchReactor(events_, request->dependency());
}

}  // namespace sluice::rpc
