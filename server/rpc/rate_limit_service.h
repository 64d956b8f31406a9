// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_RPC_RATE_LIMIT_SERVICE_H_
#define SLUICE_SERVER_RPC_RATE_LIMIT_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "base/stats.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "server/core/engine.h"
#include "server/policy/descriptor_index.h"
#include "server/rpc/decision_service.h"

namespace sluice::rpc {

// envoy.service.ratelimit.v3.RateLimitService on the data port, so Envoy's
// rate-limit filters (and anything else speaking RLS v3) can ask Sluice.
// Each descriptor is mapped to a policy by a policy::DescriptorIndex; the
// matched ones are decided together, all or nothing
// (core::Engine::AcquireAll), by the same engine, metrics and events as an
// Acquire. The permit a decision takes expires as a release, not as a
// timeout, since Envoy never reports (a gateway that does report names the
// permit from the response's dynamic metadata). Checks the request's size
// and counts (kRateLimitBudget) on its raw bytes before protobuf builds
// it. Safe for concurrent use.
class RateLimitServiceImpl final
    : public envoy::service::ratelimit::v3::RateLimitService::
          WithRawCallbackMethod_ShouldRateLimit<
              envoy::service::ratelimit::v3::RateLimitService::Service>,
      public base::StatsSource {
 public:
  // Both must outlive the service.
  RateLimitServiceImpl(core::Engine* engine, DecisionServiceImpl* decisions);

  grpc::ServerUnaryReactor* ShouldRateLimit(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
      grpc::ByteBuffer* response) override;

  // The whole request: INVALID_ARGUMENT naming the field for a malformed
  // one, else every descriptor decided and answered.
  absl::Status Handle(
      const envoy::service::ratelimit::v3::RateLimitRequest& request,
      envoy::service::ratelimit::v3::RateLimitResponse* response);

  // The counts since start as the sluice_rls_* metrics.
  void WriteStats(base::StatsWriter& out) const override;

  static constexpr int kMaxDescriptors = 64;
  static constexpr int kMaxEntries = 64;

 private:
  // The index for the policies in force, rebuilt after each change. Readers
  // share it through std::atomic_load (a short lock inside the standard
  // library, never held while building); mu_ serialises the rebuilds.
  std::shared_ptr<const policy::DescriptorIndex> Index()
      ABSL_LOCKS_EXCLUDED(mu_);

  core::Engine* const engine_;
  DecisionServiceImpl* const decisions_;
  // Requests answered OK, OVER_LIMIT and INVALID_ARGUMENT; descriptors no
  // policy answers.
  std::atomic<uint64_t> ok_{0};
  std::atomic<uint64_t> over_limit_{0};
  std::atomic<uint64_t> invalid_{0};
  std::atomic<uint64_t> unmatched_{0};

  // Read with std::atomic_load; replaced with std::atomic_store under mu_,
  // which only serialises the rebuilds.
  std::shared_ptr<const policy::DescriptorIndex> index_;
  absl::Mutex mu_;
};

}  // namespace sluice::rpc

#endif  // SLUICE_SERVER_RPC_RATE_LIMIT_SERVICE_H_
