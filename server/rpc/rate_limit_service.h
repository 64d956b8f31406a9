// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_RPC_RATE_LIMIT_SERVICE_H_
#define SLUICE_SERVER_RPC_RATE_LIMIT_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "base/stats.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "server/core/engine.h"
#include "server/core/policy_config.h"
#include "server/rpc/decision_service.h"

namespace sluice::rpc {

// Which policy answers a descriptor of Envoy's rate-limit protocol, and under
// which per-key partition: one trie per domain built from the policies'
// envoy_descriptors. A descriptor matches when its entries follow one path
// of the trie to its end, entry for entry; at each step an entry with the
// exact key and value wins over an any-value entry of the same key, as in
// Envoy's own rate-limit service. Immutable once built; safe to share.
class DescriptorIndex {
 public:
  struct Match {
    // Null when no policy answers the descriptor.
    const core::PolicyConfig* policy = nullptr;
    // The per-key partition: the value an any-value entry matched; with
    // several, their values joined by "|", each with "\\" and "|" escaped
    // by a backslash; "" when there are none.
    std::string key;
  };

  // `policies` sorted by name, as Engine::Policies() returns them. Two
  // policies claiming the same descriptor are refused by the policy store;
  // should a set adopted from the cluster store still hold such a pair, the
  // first by name answers and conflicts() names the descriptor.
  // `generation`: the engine's policies_generation() the set was read at.
  DescriptorIndex(
      std::vector<std::shared_ptr<const core::PolicyConfig>> policies,
      uint64_t generation = 0);

  Match Find(absl::string_view domain,
             const envoy::extensions::common::ratelimit::v3::
                 RateLimitDescriptor& descriptor) const;

  const std::vector<std::string>& conflicts() const { return conflicts_; }
  uint64_t generation() const { return generation_; }
  bool empty() const { return domains_.empty(); }

 private:
  struct Node {
    // By ExactKey(key, value).
    absl::flat_hash_map<std::string, std::unique_ptr<Node>> exact;
    // By key: entries that match any value.
    absl::flat_hash_map<std::string, std::unique_ptr<Node>> any;
    const core::PolicyConfig* policy = nullptr;
  };

  static std::string ExactKey(absl::string_view key, absl::string_view value);

  // Keeps every policy the trie points at alive.
  std::vector<std::shared_ptr<const core::PolicyConfig>> policies_;
  absl::flat_hash_map<std::string, std::unique_ptr<Node>> domains_;
  std::vector<std::string> conflicts_;
  uint64_t generation_;
};

// envoy.service.ratelimit.v3.RateLimitService on the data port, so Envoy's
// rate-limit filters (and anything else speaking RLS v3) can ask Sluice.
// Each descriptor is mapped to a policy by the index above and decided by
// the same engine, metrics and events as an Acquire; the permit a decision
// takes expires as a release, not as a timeout, since Envoy never reports
// (a gateway that does report names the permit from the response's
// dynamic metadata). Safe for concurrent use.
// Checks the request's size and counts (kRateLimitBudget) on its raw bytes
// before protobuf builds it. Safe for concurrent use.
class RateLimitServiceImpl final
    : public envoy::service::ratelimit::v3::RateLimitService::
          WithRawCallbackMethod_ShouldRateLimit<
              envoy::service::ratelimit::v3::RateLimitService::Service>,
      public base::StatsSource {
 public:
  // Totals since start, for the metrics.
  struct Totals {
    uint64_t ok = 0;           // requests answered OK
    uint64_t over_limit = 0;   // requests answered OVER_LIMIT
    uint64_t invalid = 0;      // requests refused with INVALID_ARGUMENT
    uint64_t unmatched = 0;    // descriptors no policy answers
  };

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

  Totals totals() const;
  // totals() as the sluice_rls_* metrics.
  void WriteStats(base::StatsWriter& out) const override;

  static constexpr int kMaxDescriptors = 64;
  static constexpr int kMaxEntries = 64;

 private:
  // The index for the policies in force, rebuilt after each change. Readers
  // share it through std::atomic_load (a short lock inside the standard
  // library, never held while building); mu_ serialises the rebuilds.
  std::shared_ptr<const DescriptorIndex> Index() ABSL_LOCKS_EXCLUDED(mu_);

  core::Engine* const engine_;
  DecisionServiceImpl* const decisions_;
  std::atomic<uint64_t> ok_{0};
  std::atomic<uint64_t> over_limit_{0};
  std::atomic<uint64_t> invalid_{0};
  std::atomic<uint64_t> unmatched_{0};

  // Read with std::atomic_load; replaced with std::atomic_store under mu_,
  // which only serialises the rebuilds.
  std::shared_ptr<const DescriptorIndex> index_;
  absl::Mutex mu_;
};

}  // namespace sluice::rpc

#endif  // SLUICE_SERVER_RPC_RATE_LIMIT_SERVICE_H_
