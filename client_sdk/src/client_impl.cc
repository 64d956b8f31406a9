// SPDX-License-Identifier: Apache-2.0
#include "client_impl.h"

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "base/option_checks.h"
#include "coarse_clock.h"
#include "convert.h"
#include "grpcpp/alarm.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "permit_access.h"
#include "wire/http_status.h"
#include "wire/limits.h"
#include "wire/status.h"
#include "wire/tls.h"

namespace sluice::client {
namespace internal {
namespace {

// The server's error, saying whose it is.
absl::Status FromGrpc(const grpc::Status& status) {
  const absl::Status s = wire::FromGrpcStatus(status);
  return absl::Status(s.code(), absl::StrCat("Sluice: ", s.message()));
}

// Errors that say Sluice is unreachable, overloaded or broken, as opposed to
// errors about this request. Only these feed the backoff.
bool IsTransportError(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::OUT_OF_RANGE:
    case grpc::StatusCode::NOT_FOUND:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::FAILED_PRECONDITION:
      return false;
    default:
      return true;
  }
}

}  // namespace

struct ClientImpl::PendingAcquire {
  PendingAcquire(absl::string_view dependency, absl::string_view key)
      : dependency(dependency), key(key) {}

  const std::string dependency;
  const std::string key;
  // When the question left (the caller's start).
  absl::Time sent;
  grpc::ClientContext context;
  v1::AcquireRequest request;
  v1::AcquireResponse response;
  // Whoever sets it first owns the answer: the RPC callback or a caller
  // that stopped waiting.
  std::atomic<bool> claimed{false};
  absl::Notification done;
  grpc::Status status;
  // AcquireAsync only: the caller's callback, and on the stream the alarm
  // that decides locally at acquire_timeout.
  std::function<void(Permit)> async_done;
  grpc::Alarm alarm;
};

ClientImpl::Shared::Shared(const ClientOptions& options,
                           std::shared_ptr<grpc::Channel> channel)
    : options(options),
      channel(channel),
      stub(v1::DecisionService::NewStub(channel)),
      counters(std::make_shared<Counters>()),
      stream(options.use_stream ? std::make_shared<DecideStream>(channel)
                                : nullptr),
      reporter(std::make_shared<Reporter>(
          channel,
          Reporter::Options{options.report_timeout,
                            options.max_reports_in_flight,
                            options.max_queued_reports},
          counters, stream)),
      leases(options.lease.enabled
                 ? std::make_shared<LeaseBook>(options.lease, channel,
                                               counters)
                 : nullptr),
      backoff(Backoff::Options{
          options.backoff_after_failures, options.backoff_initial,
          options.backoff_max, options.backoff_jitter,
          static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()))}) {}

bool ClientImpl::Shared::ShouldAsk(absl::Time now) {
  if (backoff.ShouldAsk(now)) return true;
  if (!awaiting_connection.load(std::memory_order_relaxed)) return false;
  // An idle channel starts connecting here; one in TRANSIENT_FAILURE retries
  // on its own reconnect backoff.
  if (channel->GetState(/*try_to_connect=*/true) != GRPC_CHANNEL_READY ||
      !awaiting_connection.exchange(false)) {
    return false;
  }
  backoff.EndPeriod(now);
  return backoff.ShouldAsk(now);
}

void ClientImpl::Shared::RecordTransportFailure(absl::Time now) {
  // Only a failure of the connection itself waits for it to come back; a
  // Sluice that is connected but slow keeps its whole backoff period.
  awaiting_connection.store(
      channel->GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY,
      std::memory_order_relaxed);
  backoff.RecordFailure(now);
}

Permit ClientImpl::Shared::Local(std::string dependency, std::string key,
                                 absl::Status error) {
  if (leases != nullptr) {
    std::shared_ptr<LeaseLine> line = leases->Find(dependency, key);
    if (line != nullptr && line->HoldsLimit(absl::Now())) {
      // Sluice cannot be asked, but the lease it lent still holds the
      // limit: what the lease does not cover is refused until it ends.
      Counters::Inc(counters->lease_refusals);
      Counters::Inc(counters->lease_decisions_while_unreachable);
      return PermitAccess::HeldLimit(std::move(dependency), std::move(error));
    }
  }
  Counters::Inc(counters->local_decisions);
  const Verdict verdict = options.on_failure == FailureMode::kFailOpen
                              ? Verdict::kAllow
                              : Verdict::kReject;
  return PermitAccess::Local(std::move(dependency), std::move(key), verdict,
                             options.local_call_timeout, std::move(error));
}

void ClientImpl::Shared::RememberOpen(const PendingAcquire& call,
                                      const Permit& permit) {
  std::shared_ptr<LeaseLine> line = leases->Line(call.dependency);
  if (line == nullptr) return;
  auto refusal = std::make_shared<LeaseLine::OpenRefusal>();
  refusal->verdict = permit.verdict();
  refusal->http_status = permit.http_status();
  refusal->fallback = PermitAccess::SharedFallback(permit);
  refusal->policy_version = permit.policy_version();
  if (permit.breaker_state() == BreakerState::kForcedOpen) {
    refusal->breaker_state = BreakerState::kForcedOpen;
  }
  line->RememberOpen(std::move(refusal), call.sent, permit.retry_after());
  // A renewal now: it carries the line from here on, one per tick, and
  // each answer says whether the breaker is still OPEN.
  leases->MaybeRenew(absl::Now(), true);
}

void ClientImpl::Shared::SendAcquire(
    const std::shared_ptr<PendingAcquire>& call,
    std::function<void(grpc::Status)> on_done) {
  if (stream != nullptr) {
    v1::DecideCall decide;
    *decide.mutable_acquire() = call->request;
    DecideStream::Done done = [this, call, on_done](const grpc::Status& status,
                                                    v1::DecideResult result) {
      if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
        SendAcquire(call, on_done);  // unary from now on
        return;
      }
      grpc::Status s = status;
      if (s.ok() && result.has_error()) {
        s = grpc::Status(static_cast<grpc::StatusCode>(result.error().code()),
                         result.error().message());
      } else if (s.ok() && !result.has_acquire()) {
        s = grpc::Status(grpc::StatusCode::INTERNAL,
                         "Decide answered an Acquire with another result");
      } else if (s.ok()) {
        call->response.Swap(result.mutable_acquire());
      }
      on_done(std::move(s));
    };
    // The call keeps the deadline its unary RPC would have.
    const absl::Time deadline = absl::FromChrono(call->context.deadline());
    if (stream->Send(std::move(decide), deadline, std::move(done))) return;
  }
  stub->async()->Acquire(&call->context, &call->request, &call->response,
                         std::move(on_done));
}

void ClientImpl::Shared::HandBack(const PendingAcquire& call,
                                  const grpc::Status& status) {
  // The caller gave up and decided locally. A late ALLOW would hold a slot
  // (and count as a TIMEOUT when it expires): hand it back.
  const v1::AcquireResponse& r = call.response;
  if (status.ok() && r.verdict() == v1::ALLOW && !r.permit_id().empty()) {
    reporter->Send(call.dependency, call.key, r.permit_id(),
                   Outcome::kCancelled, absl::ZeroDuration(), 0);
  }
}

Permit ClientImpl::Shared::Settle(const PendingAcquire& call,
                                  const grpc::Status& status) {
  if (status.ok()) {
    awaiting_connection.store(false, std::memory_order_relaxed);
    backoff.RecordSuccess();
    Permit permit = PermitAccess::FromResponse(call.dependency, call.key,
                                               call.response, reporter);
    if (leases != nullptr && call.key.empty() &&
        permit.reason() == Reason::kCircuitOpen) {
      RememberOpen(call, permit);
    }
    return permit;
  }
  if (IsTransportError(status.error_code())) {
    RecordTransportFailure(absl::Now());
  }
  return Local(call.dependency, call.key, FromGrpc(status));
}

ClientImpl::ClientImpl(const ClientOptions& options,
                       std::shared_ptr<grpc::Channel> channel)
    : shared_(std::make_shared<Shared>(options, std::move(channel))),
      counters_(shared_->counters),
      cache_(options.cache_max_entries, options.cache_max_bytes) {}

ClientImpl::~ClientImpl() {
  if (shared_->leases != nullptr) shared_->leases->Close();
  shared_->reporter->Drain(shared_->options.shutdown_timeout);
  // Calls still waiting on the stream complete now (CANCELLED); reports from
  // permits that outlive the client go unary.
  if (shared_->stream != nullptr) shared_->stream->Shutdown();
  // Bounded by the Acquire deadline plus report_timeout.
  while (shared_->callbacks.load() > 0) absl::SleepFor(absl::Milliseconds(1));
}

ClientStats ClientImpl::stats() const {
  ClientStats stats = counters_->Snapshot();
  if (shared_->leases != nullptr) shared_->leases->AddStats(&stats);
  return stats;
}

std::shared_ptr<LeaseLine> ClientImpl::DecideLeased(
    absl::string_view dependency, absl::string_view key, uint32_t permits,
    LeaseLine::Decision* d) {
  LeaseBook* book = shared_->leases.get();
  if (book == nullptr) return nullptr;
  const absl::Time now = CoarseNow();
  std::shared_ptr<LeaseLine> line = key.empty()
                                        ? book->Line(dependency)
                                        : book->KeyLine(dependency, key, now);
  if (line == nullptr) return nullptr;
  *d = line->Decide(permits, now);
  // The line counts what it answered (LeaseLine::AddStats).
  if (d->answer == LeaseLine::Answer::kAsk) {
    // A call that wants a renewal asks Sluice first and renews after (the
    // caller does), so that the lease never takes the tokens that call was
    // about to get.
    if (!d->renew_now) book->MaybeRenew(now);
    return nullptr;
  }
  book->MaybeRenew(now, d->renew_now);
  return line;
}

Permit ClientImpl::Acquire(absl::string_view dependency, absl::string_view key,
                           uint32_t permits) {
  if (absl::Status s = wire::ValidateRequestNames(dependency, key); !s.ok()) {
    Counters::Inc(counters_->acquires);
    return shared_->Local(std::string(dependency), std::string(key), s);
  }
  LeaseLine::Decision leased;
  if (std::shared_ptr<LeaseLine> line =
          DecideLeased(dependency, key, permits, &leased)) {
    return PermitAccess::Leased(dependency, key, leased, std::move(line));
  }
  Counters::Inc(counters_->acquires);
  Permit permit = AskSluice(dependency, key, permits, absl::Now());
  // The call that asks for a renewal went to Sluice first, so the lease is
  // lent after it and never takes the tokens it was about to get.
  if (leased.renew_now) shared_->leases->MaybeRenew(absl::Now(), true);
  return permit;
}

Permit ClientImpl::AskSluice(absl::string_view dependency,
                             absl::string_view key, uint32_t permits,
                             absl::Time start) {
  if (!shared_->ShouldAsk(start)) {
    Counters::Inc(counters_->backoff_decisions);
    return shared_->Local(
        std::string(dependency), std::string(key),
        absl::UnavailableError("Sluice failed recently; backing off"));
  }
  const absl::Duration timeout = shared_->options.acquire_timeout;
  auto call = std::make_shared<PendingAcquire>(dependency, key);
  call->sent = start;
  call->request.set_dependency(call->dependency);
  call->request.set_key(call->key);
  call->request.set_permits(permits);
  call->request.set_caller(shared_->options.caller);
  // The caller waits only `timeout`, but the RPC may run on a while longer,
  // so that a late ALLOW still reaches us and can be handed back.
  call->context.set_deadline(
      absl::ToChronoTime(start + timeout + shared_->options.report_timeout));
  shared_->callbacks.fetch_add(1);
  shared_->SendAcquire(
      call, [shared = shared_.get(), call](grpc::Status status) mutable {
        call->status = std::move(status);
        if (!call->claimed.exchange(true)) {
          call->done.Notify();
        } else {
          shared->HandBack(*call, call->status);
        }
        // Before the count: once it is zero the client may be gone, and
        // the call (its ClientContext) must not outlive the channel.
        call.reset();
        shared->callbacks.fetch_sub(1);
      });
  // Wait on our own clock rather than gRPC's deadline timer, so that the
  // caller is back within the timeout whatever gRPC's timers do.
  if (!call->done.WaitForNotificationWithTimeout(timeout)) {
    if (!call->claimed.exchange(true)) {
      shared_->RecordTransportFailure(absl::Now());
      return shared_->Local(
          call->dependency, call->key,
          absl::DeadlineExceededError(absl::StrCat(
              "Sluice did not answer within ", absl::FormatDuration(timeout))));
    }
    call->done.WaitForNotification();  // The callback is just finishing.
  }
  return shared_->Settle(*call, call->status);
}

void ClientImpl::AcquireAsync(absl::string_view dependency,
                              absl::string_view key, uint32_t permits,
                              std::function<void(Permit)> done) {
  if (absl::Status s = wire::ValidateRequestNames(dependency, key); !s.ok()) {
    Counters::Inc(counters_->acquires);
    done(shared_->Local(std::string(dependency), std::string(key), s));
    return;
  }
  LeaseLine::Decision leased;
  if (std::shared_ptr<LeaseLine> line =
          DecideLeased(dependency, key, permits, &leased)) {
    done(PermitAccess::Leased(dependency, key, leased, std::move(line)));
    return;
  }
  Counters::Inc(counters_->acquires);
  const absl::Time start = absl::Now();
  // The answer comes later on another thread: the lease is asked for now.
  if (leased.renew_now) shared_->leases->MaybeRenew(start, true);
  if (!shared_->ShouldAsk(start)) {
    Counters::Inc(counters_->backoff_decisions);
    done(shared_->Local(
        std::string(dependency), std::string(key),
        absl::UnavailableError("Sluice failed recently; backing off")));
    return;
  }
  auto call = std::make_shared<PendingAcquire>(dependency, key);
  call->sent = start;
  call->request.set_dependency(call->dependency);
  call->request.set_key(call->key);
  call->request.set_permits(permits);
  call->request.set_caller(shared_->options.caller);
  const absl::Duration timeout = shared_->options.acquire_timeout;
  call->context.set_deadline(absl::ToChronoTime(start + timeout));
  call->async_done = std::move(done);
  if (shared_->stream != nullptr) {
    // The stream also ends the call at its deadline (DEADLINE_EXCEEDED), but
    // on gRPC's timer; this alarm decides locally at acquire_timeout, as the
    // unary deadline would, and whichever comes first claims the call. It
    // holds the call weakly; the stream holds it until the answer or the
    // deadline.
    shared_->callbacks.fetch_add(1);
    call->alarm.Set(
        absl::ToChronoTime(start + timeout),
        [shared = shared_.get(), weak = std::weak_ptr<PendingAcquire>(call),
         timeout](bool fired) {
          std::shared_ptr<PendingAcquire> call = weak.lock();
          if (fired && call != nullptr && !call->claimed.exchange(true)) {
            shared->RecordTransportFailure(absl::Now());
            call->async_done(shared->Local(
                call->dependency, call->key,
                absl::DeadlineExceededError(
                    absl::StrCat("Sluice did not answer within ",
                                 absl::FormatDuration(timeout)))));
          }
          call.reset();  // before the count, as below
          shared->callbacks.fetch_sub(1);
        });
  }
  shared_->callbacks.fetch_add(1);
  shared_->SendAcquire(
      call, [shared = shared_.get(), call](grpc::Status status) mutable {
        if (call->claimed.exchange(true)) {
          shared->HandBack(*call, status);  // the alarm decided already
        } else {
          if (shared->stream != nullptr) call->alarm.Cancel();
          call->async_done(shared->Settle(*call, status));
        }
        // Before the count: once it is zero the client may be gone, and
        // the call (its ClientContext and alarm) must not outlive it.
        call.reset();
        shared->callbacks.fetch_sub(1);
      });
}

void ClientImpl::ServeFallback(const Fallback& fallback,
                               absl::string_view dependency,
                               const CallOptions& options, CallResult* result) {
  result->kind = CallResult::Kind::kDegraded;
  Response& out = result->response;
  if (fallback.strategy == Fallback::Strategy::kCache) {
    std::optional<Response> cached =
        cache_.Get(dependency, options.key, fallback.cache_ttl, absl::Now());
    if (cached.has_value()) {
      Counters::Inc(counters_->cache_hits);
      out = *std::move(cached);
      result->fallback_source = CallResult::FallbackSource::kCache;
      return;
    }
    Counters::Inc(counters_->cache_misses);
  }
  if ((fallback.strategy == Fallback::Strategy::kStatic ||
       fallback.strategy == Fallback::Strategy::kCache) &&
      !fallback.payload.empty()) {
    out.status_code = 200;
    out.body = fallback.payload;
    out.content_type = fallback.content_type.empty()
                           ? options.default_fallback.content_type
                           : fallback.content_type;
    result->fallback_source = CallResult::FallbackSource::kStatic;
    return;
  }
  out = options.default_fallback;
  result->fallback_source = CallResult::FallbackSource::kDefault;
}

CallResult ClientImpl::Call(
    absl::string_view dependency,
    const std::function<absl::StatusOr<Response>(const CallContext&)>& fn,
    const CallOptions& options) {
  const absl::Time asked = absl::Now();
  Permit permit = Acquire(dependency, options.key, options.permits);
  CallResult result;
  result.decision_latency = absl::Now() - asked;
  result.reason = permit.reason();
  result.breaker_state = permit.breaker_state();
  result.decided_locally = permit.decided_locally();
  result.retry_after = permit.retry_after();

  switch (permit.verdict()) {
    case Verdict::kReject:
      result.kind = CallResult::Kind::kRejected;
      result.http_status =
          permit.http_status() != 0 ? permit.http_status()
                                    : wire::kClientRefusalHttpStatus;
      return result;
    case Verdict::kDegrade:
      ServeFallback(permit.fallback(), dependency, options, &result);
      return result;
    case Verdict::kAllow:
      break;
  }

  const absl::Duration timeout = permit.call_timeout() > absl::ZeroDuration()
                                     ? permit.call_timeout()
                                     : shared_->options.local_call_timeout;
  const absl::Time start = absl::Now();
  absl::StatusOr<Response> response = fn(CallContext{start + timeout, timeout});
  result.latency = absl::Now() - start;
  result.backend_called = true;
  result.outcome =
      options.classify ? options.classify(response) : DefaultClassify(response);
  permit.Report(result.outcome, result.latency,
                response.ok() ? response->status_code : 0);
  if (!response.ok()) result.error = response.status();

  if (result.outcome == Outcome::kSuccess) {
    if (response->status_code >= 200 && response->status_code < 300) {
      cache_.Put(dependency, options.key, *response, absl::Now());
    }
    result.response = *std::move(response);
    return result;
  }
  if (result.outcome == Outcome::kCancelled) {
    if (response.ok()) result.response = *std::move(response);
    return result;
  }
  // The call failed or timed out: serve the fallback when the policy (sent
  // with the ALLOW) or the caller asks for it.
  const Fallback& policy_fallback = permit.fallback();
  if (policy_fallback.serve_on_failure &&
      policy_fallback.strategy != Fallback::Strategy::kNone) {
    result.reason = Reason::kCallFailed;
    ServeFallback(policy_fallback, dependency, options, &result);
    return result;
  }
  if (options.fallback_on_failure) {
    Fallback local;
    local.strategy = options.cache_on_failure ? Fallback::Strategy::kCache
                                              : Fallback::Strategy::kDefault;
    local.cache_ttl = options.cache_ttl_on_failure;
    result.reason = Reason::kCallFailed;
    ServeFallback(local, dependency, options, &result);
    return result;
  }
  if (response.ok()) result.response = *std::move(response);
  return result;
}

wire::ClientTlsFiles TlsFilesOf(const TlsOptions& tls) {
  wire::ClientTlsFiles files;
  files.ca_file = tls.ca_file;
  files.cert_file = tls.cert_file;
  files.key_file = tls.key_file;
  files.server_name = tls.server_name;
  return files;
}

absl::Status ValidateOptions(const ClientOptions& options) {
  if (options.target.empty() && options.channel == nullptr) {
    return absl::InvalidArgumentError(
        "ClientOptions: target or channel is required");
  }
  if (options.credentials != nullptr &&
      (TlsFilesOf(options.tls).enabled() || !options.tls.server_name.empty())) {
    return absl::InvalidArgumentError(
        "ClientOptions: set credentials or tls, not both");
  }
  for (absl::Status s :
       {base::CheckPositive("ClientOptions.acquire_timeout",
                            options.acquire_timeout),
        base::CheckPositive("ClientOptions.local_call_timeout",
                            options.local_call_timeout),
        base::CheckPositive("ClientOptions.backoff_after_failures",
                            options.backoff_after_failures)}) {
    if (!s.ok()) return s;
  }
  if (options.backoff_initial <= absl::ZeroDuration() ||
      options.backoff_max < options.backoff_initial) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClientOptions: need 0 < backoff_initial <= backoff_max, got ",
        absl::FormatDuration(options.backoff_initial), " and ",
        absl::FormatDuration(options.backoff_max)));
  }
  if (!(options.backoff_jitter >= 0 && options.backoff_jitter < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClientOptions.backoff_jitter must be in [0, 1), got ",
                     options.backoff_jitter));
  }
  for (absl::Status s :
       {base::CheckPositive("ClientOptions.report_timeout",
                            options.report_timeout),
        base::CheckPositive("ClientOptions.max_reports_in_flight",
                            options.max_reports_in_flight)}) {
    if (!s.ok()) return s;
  }
  if (options.lease.enabled) {
    const LeaseOptions& lease = options.lease;
    // Between 10 ms (a renewal each call would cost more than it saves)
    // and the 4 s a lease may last without one.
    if (lease.tick < absl::Milliseconds(10) || lease.tick > absl::Seconds(4)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ClientOptions.lease.tick must be in [10ms, 4s], got ",
          absl::FormatDuration(lease.tick)));
    }
    if (lease.hot_calls == 0 || lease.max_leased == 0 ||
        lease.max_leased > 256) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ClientOptions.lease: need hot_calls >= 1 and max_leased in "
          "[1, 256], got ",
          lease.hot_calls, " and ", lease.max_leased));
    }
  }
  return absl::OkStatus();
}

}  // namespace internal

absl::StatusOr<std::unique_ptr<Client>> Client::Create(
    const ClientOptions& options) {
  if (absl::Status s = internal::ValidateOptions(options); !s.ok()) return s;
  std::shared_ptr<grpc::Channel> channel = options.channel;
  if (channel == nullptr) {
    grpc::ChannelArguments args;
    if (!options.load_balancing_policy.empty()) {
      args.SetLoadBalancingPolicyName(options.load_balancing_policy);
    }
    for (const auto& [name, value] : options.channel_int_args) {
      args.SetInt(name, value);
    }
    std::shared_ptr<grpc::ChannelCredentials> credentials = options.credentials;
    if (credentials == nullptr) {
      static const wire::ClientTlsNames kNames{
          "ClientOptions.tls.ca_file", "ClientOptions.tls.cert_file",
          "ClientOptions.tls.key_file", "ClientOptions.tls.server_name"};
      const wire::ClientTlsFiles files = internal::TlsFilesOf(options.tls);
      absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> made =
          wire::MakeChannelCredentials(files, kNames);
      if (!made.ok()) return made.status();
      credentials = *std::move(made);
      wire::AddTlsChannelArguments(files, &args);
    }
    channel = grpc::CreateCustomChannel(options.target, credentials, args);
  }
  // Connect now rather than on the first Acquire, whose short deadline the
  // connection setup would otherwise spend (a sidecar's 5 ms, say).
  channel->GetState(/*try_to_connect=*/true);
  return std::unique_ptr<Client>(
      std::make_unique<internal::ClientImpl>(options, std::move(channel)));
}

}  // namespace sluice::client
