// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_CLIENT_CLIENT_H_
#define SLUICE_CLIENT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "sluice/client/options.h"
#include "sluice/client/permit.h"
#include "sluice/client/types.h"

namespace sluice::client {

// A downstream answer, as Call caches and serves it.
struct Response {
  int status_code = 200;
  std::string body;
  std::string content_type;
};

// Handed to the function Call wraps.
struct CallContext {
  // Give up on the downstream call by then (now + the policy's call_timeout).
  absl::Time deadline;
  // The same, as a duration from the start of the call.
  absl::Duration timeout;
};

// Turns what the wrapped function returned into an outcome for the breaker.
using Classifier = std::function<Outcome(const absl::StatusOr<Response>&)>;

// The default Classifier: OK with status_code < 500 is kSuccess;
// DEADLINE_EXCEEDED is kTimeout; CANCELLED is kCancelled; any other error or
// a 5xx status_code is kFailure.
Outcome DefaultClassify(const absl::StatusOr<Response>& result);

struct CallOptions {
  // Partition key (tenant, route, user); "" = none.
  std::string key;
  // Tokens to take from the rate limit.
  uint32_t permits = 1;
  // The gateway's own default answer: served for DEFAULT fallbacks, and for
  // STATIC or CACHE fallbacks that have no payload.
  Response default_fallback;
  // Serve a fallback when the allowed call fails even if Sluice did not send
  // the policy's fallback with the ALLOW. Uses default_fallback (or a cached
  // response when cache_on_failure is set).
  bool fallback_on_failure = false;
  // With fallback_on_failure: try the response cache first (younger than
  // cache_ttl_on_failure).
  bool cache_on_failure = false;
  absl::Duration cache_ttl_on_failure = absl::ZeroDuration();
  // Null means DefaultClassify.
  Classifier classify;
};

// What Call did.
struct CallResult {
  enum class Kind {
    kBackend,   // The downstream answer (which may be a failure).
    kDegraded,  // A fallback, because Sluice said DEGRADE or the call failed.
    kRejected,  // Refused; answer http_status (429 or 503).
  };
  enum class FallbackSource { kNone, kDefault, kStatic, kCache };

  Kind kind = Kind::kBackend;
  // kBackend: the downstream response (empty when it returned an error).
  // kDegraded: the fallback to serve.
  Response response;
  // Why: kDegraded/kRejected give the refusal reason or kCallFailed;
  // kBackend gives kNone, kShadow, kUnknownDependency or kSluiceUnavailable.
  Reason reason = Reason::kNone;
  // True when the downstream function ran.
  bool backend_called = false;
  // How the downstream call went (when backend_called).
  Outcome outcome = Outcome::kSuccess;
  // The downstream error, when it returned one.
  absl::Status error;
  // How long the downstream call took (when backend_called).
  absl::Duration latency = absl::ZeroDuration();
  // How long deciding took: the Acquire, whether Sluice answered it, a
  // lease decided it in the process, or the SDK decided alone. What
  // Sluice adds to the request.
  absl::Duration decision_latency = absl::ZeroDuration();
  FallbackSource fallback_source = FallbackSource::kNone;
  // kRejected: suggested HTTP status; retry_after when Sluice gave one.
  int http_status = 0;
  absl::Duration retry_after = absl::ZeroDuration();
  BreakerState breaker_state = BreakerState::kUnknown;
  bool decided_locally = false;
};

// Counters since the client was created.
struct ClientStats {
  uint64_t acquires = 0;
  // Acquires the SDK answered itself by on_failure (Sluice down or slow).
  uint64_t local_decisions = 0;
  // Of those, answered without asking because the client was backing off.
  uint64_t backoff_decisions = 0;
  uint64_t reports_sent = 0;
  uint64_t reports_failed = 0;
  uint64_t reports_dropped = 0;
  // ReportResults calls that carried queued reports in a batch.
  uint64_t report_batches = 0;
  // Permits destroyed unreported (reported as kCancelled).
  uint64_t reports_auto_cancelled = 0;
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  // Leases (ClientOptions::lease). Calls the client admitted from a lease
  // without asking Sluice; calls it refused because the lease was spent
  // and Sluice had nothing more (RATE_LIMITED, without asking) or could
  // not be asked while the lease still held the limit.
  uint64_t leased_decisions = 0;
  uint64_t lease_refusals = 0;
  // Calls refused (CIRCUIT_OPEN, with the policy's fallback) without
  // asking, because Sluice had just said the dependency's breaker is OPEN.
  uint64_t lease_open_refusals = 0;
  // Of leased_decisions, lease_refusals and lease_open_refusals: made while
  // the last renewal had failed (Sluice slow or unreachable).
  uint64_t lease_decisions_while_unreachable = 0;
  // RenewLeases calls that were answered, and that failed.
  uint64_t lease_renewals = 0;
  uint64_t lease_renewal_failures = 0;
  // Leases that ended without a renewal (Sluice unreachable too long), and
  // leases Sluice ended or the client gave back.
  uint64_t lease_expiries = 0;
  uint64_t leases_ended = 0;
};

// The Sluice client a gateway links against. Create one per process and
// share it: it is safe for concurrent use by any number of threads.
//
//   sluice::client::ClientOptions options;
//   options.target = "127.0.0.1:50051";
//   auto client = sluice::client::Client::Create(options);  // StatusOr
//   sluice::client::Permit permit = (*client)->Acquire("inventory");
//   if (permit.allowed()) { ...call...; permit.Report(Outcome::kSuccess, took); }
class Client {
 public:
  // INVALID_ARGUMENT when neither target nor channel is set or an option is
  // out of range. Does not connect: a Sluice that is down only shows later.
  static absl::StatusOr<std::unique_ptr<Client>> Create(
      const ClientOptions& options);

  // Waits up to shutdown_timeout for outstanding reports.
  virtual ~Client() = default;

  // Asks Sluice whether one call to `dependency` may go ahead. Returns within
  // acquire_timeout (plus scheduling noise) whatever Sluice does; when Sluice
  // cannot decide, the permit follows on_failure and decided_locally() is
  // true.
  virtual Permit Acquire(absl::string_view dependency,
                         absl::string_view key = "", uint32_t permits = 1) = 0;

  // Acquire for event loops: returns at once and runs `done` exactly once,
  // on a gRPC thread or inline when decided locally. `done` must not block.
  virtual void AcquireAsync(absl::string_view dependency, absl::string_view key,
                            uint32_t permits,
                            std::function<void(Permit)> done) = 0;

  // The whole flow: Acquire; on ALLOW run `fn` with the policy's deadline,
  // time and classify it, report it and, when it failed and the policy (or
  // `options`) says so, serve the fallback; on DEGRADE serve the fallback
  // (CACHE from the LRU of last good responses, else its payload, else
  // options.default_fallback); on REJECT return kRejected.
  virtual CallResult Call(
      absl::string_view dependency,
      const std::function<absl::StatusOr<Response>(const CallContext&)>& fn,
      const CallOptions& options = CallOptions()) = 0;

  virtual ClientStats stats() const = 0;
};

}  // namespace sluice::client

#endif  // SLUICE_CLIENT_CLIENT_H_
