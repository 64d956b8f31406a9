// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_RPC_EXT_AUTHZ_SERVICE_H_
#define SLUICE_SERVER_RPC_EXT_AUTHZ_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "base/stats.h"
#include "envoy/service/auth/v3/external_auth.grpc.pb.h"
#include "server/rpc/http_check.h"

namespace sluice::rpc {

// envoy.service.auth.v3.Authorization on the data port, so Envoy's
// external authorization filter (gRPC mode) can ask Sluice about each HTTP
// request before routing it. The request is named, decided and answered by
// HttpCheck; this only reads the CheckRequest and writes the
// CheckResponse:
//   allow      OK; the x-sluice-* headers go to the upstream, and the
//              permit into the dynamic metadata `sluice_permits`, as the
//              rate-limit service puts it;
//   refuse     denied (RESOURCE_EXHAUSTED for 429, UNAVAILABLE for 503):
//              Envoy answers the client with the status, retry-after,
//              x-sluice-reason and the JSON body;
//   degrade    denied: Envoy answers with the fallback's status, payload
//              and content-type, and x-sluice-degraded;
//   unmatched  OK with x-sluice-unmatched: 1.
// Checks the request's size and counts (kExtAuthzBudget) on its raw bytes
// before protobuf builds it. Safe for concurrent use.
class AuthorizationServiceImpl final
    : public envoy::service::auth::v3::Authorization::
          WithRawCallbackMethod_Check<
              envoy::service::auth::v3::Authorization::Service>,
      public base::StatsSource {
 public:
  // `check` must outlive the service.
  explicit AuthorizationServiceImpl(HttpCheck* check);

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override;

  // The whole request: INVALID_ARGUMENT naming the field for a malformed
  // one, else the answer.
  absl::Status Handle(const envoy::service::auth::v3::CheckRequest& request,
                      envoy::service::auth::v3::CheckResponse* response);

  // The counts since start as sluice_ext_authz_checks_total.
  void WriteStats(base::StatsWriter& out) const override;

  // Most request headers (and context extensions) a CheckRequest may carry.
  static constexpr int kMaxHeaders = 256;
  static constexpr int kMaxContextExtensions = 64;

 private:
  HttpCheck* const check_;
  std::atomic<uint64_t> allow_{0};
  std::atomic<uint64_t> refuse_{0};
  std::atomic<uint64_t> degrade_{0};
  std::atomic<uint64_t> unmatched_{0};
  std::atomic<uint64_t> invalid_{0};  // refused before any decision
};

}  // namespace sluice::rpc

#endif  // SLUICE_SERVER_RPC_EXT_AUTHZ_SERVICE_H_
