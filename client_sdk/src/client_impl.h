// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_CLIENT_SRC_CLIENT_IMPL_H_
#define SLUICE_CLIENT_SRC_CLIENT_IMPL_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "backoff.h"
#include "counters.h"
#include "decide_stream.h"
#include "lease_book.h"
#include "reporter.h"
#include "response_cache.h"
#include "sluice/client/client.h"
#include "grpcpp/channel.h"
#include "sluice/v1/decision.grpc.pb.h"
#include "wire/tls.h"

namespace sluice::client::internal {

// The one implementation of Client. Safe for concurrent use: the stub,
// backoff, cache and reporter are each safe for concurrent use, and the
// rest is immutable after construction.
class ClientImpl final : public Client {
 public:
  ClientImpl(const ClientOptions& options,
             std::shared_ptr<grpc::Channel> channel);
  ~ClientImpl() override;

  Permit Acquire(absl::string_view dependency, absl::string_view key,
                 uint32_t permits) override;
  void AcquireAsync(absl::string_view dependency, absl::string_view key,
                    uint32_t permits, std::function<void(Permit)> done) override;
  CallResult Call(
      absl::string_view dependency,
      const std::function<absl::StatusOr<Response>(const CallContext&)>& fn,
      const CallOptions& options) override;
  // The shared counters, and what the lease lines answered.
  ClientStats stats() const override;

 private:
  struct PendingAcquire;

  // State that outstanding RPC callbacks use. The client's destructor waits
  // for them, so the channel is never released on a gRPC thread.
  struct Shared {
    Shared(const ClientOptions& options, std::shared_ptr<grpc::Channel> channel);

    const ClientOptions options;
    const std::shared_ptr<grpc::Channel> channel;
    const std::unique_ptr<v1::DecisionService::Stub> stub;
    const std::shared_ptr<Counters> counters;
    // The Decide stream when options.use_stream; null otherwise.
    const std::shared_ptr<DecideStream> stream;
    const std::shared_ptr<Reporter> reporter;
    // The leases when options.lease.enabled; null otherwise.
    const std::shared_ptr<LeaseBook> leases;
    Backoff backoff;
    // Acquire callbacks that may still run; each decrements it last.
    std::atomic<int> callbacks{0};
    // A transport failure found the connection down; its return ends the
    // backoff period early (ShouldAsk).
    std::atomic<bool> awaiting_connection{false};

    // Whether to ask Sluice now: not while backing off, except that a
    // connection that came back since the failures ends the wait at once
    // (a sidecar that restarted is asked again as soon as it serves, not at
    // the end of the period). While backing off it also keeps the channel
    // trying to connect.
    bool ShouldAsk(absl::Time now);
    // Feeds the backoff a transport failure.
    void RecordTransportFailure(absl::Time now);
    // A CIRCUIT_OPEN answer to `call` (leases on, no key): the
    // dependency's lease line repeats it until the breaker may let a call
    // through (LeaseLine::RememberOpen).
    void RememberOpen(const PendingAcquire& call, const Permit& permit);

    // Sends `call` on the Decide stream, or as a unary Acquire when there is
    // none (or the server turned out to have no Decide); `on_done` gets the
    // status a unary call would have finished with, the answer in
    // call->response.
    void SendAcquire(const std::shared_ptr<PendingAcquire>& call,
                     std::function<void(grpc::Status)> on_done);

    // Reports a late ALLOW (the caller stopped waiting) CANCELLED.
    void HandBack(const PendingAcquire& call, const grpc::Status& status);

    // The permit for Sluice's answer, or the local one when it failed.
    Permit Settle(const PendingAcquire& call, const grpc::Status& status);
    Permit Local(std::string dependency, std::string key, absl::Status error);
  };

  // Decides the call from its dependency's lease when one serves it, by
  // the coarse clock (CoarseNow): the line it was decided by, with the
  // decision in `d`; null when Sluice must be asked (`d->renew_now`: ask
  // for a renewal after it answered). `d` comes default-constructed and is
  // left so when no line serves the call.
  std::shared_ptr<LeaseLine> DecideLeased(absl::string_view dependency,
                                          absl::string_view key,
                                          uint32_t permits,
                                          LeaseLine::Decision* d);
  // Acquire's call to Sluice (or its local answer when backing off).
  Permit AskSluice(absl::string_view dependency, absl::string_view key,
                   uint32_t permits, absl::Time start);

  // Starts the RPC, or settles `call` locally without asking (bad names,
  // backing off). Returns false when the answer is already decided.
  static bool Start(const std::shared_ptr<Shared>& shared,
                    const std::shared_ptr<PendingAcquire>& call,
                    std::function<void(const grpc::Status&)> on_done);

  void ServeFallback(const Fallback& fallback, absl::string_view dependency,
                     const CallOptions& options, CallResult* result);

  const std::shared_ptr<Shared> shared_;
  const std::shared_ptr<Counters> counters_;
  ResponseCache cache_;
};

// Validates options; used by Client::Create.
absl::Status ValidateOptions(const ClientOptions& options);
// The SDK's TlsOptions as the wire library takes them.
wire::ClientTlsFiles TlsFilesOf(const TlsOptions& tls);

}  // namespace sluice::client::internal

#endif  // SLUICE_CLIENT_SRC_CLIENT_IMPL_H_
