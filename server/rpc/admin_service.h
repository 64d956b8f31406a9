// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_RPC_ADMIN_SERVICE_H_
#define SLUICE_SERVER_RPC_ADMIN_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/status/status.h"
#include "server/core/engine.h"
#include "server/rpc/admin_backend.h"
#include "server/rpc/admin_events.h"
#include "server/rpc/admin_tokens.h"
#include "sluice/v1/admin.grpc.pb.h"

namespace sluice::rpc {

// sluice.v1.AdminService on the gRPC callback API, for the admin listener
// only. Every handler first checks the bearer token (when one is set), then
// validates, calls the backend or engine, converts, and finishes inline;
// WatchEvents streams from an EventHub subscription and never blocks the
// publishers. Safe for concurrent use; `engine`, `backend` and `events` must
// outlive the service and the gRPC server it is registered with.
class AdminServiceImpl final : public v1::AdminService::CallbackService {
 public:
  struct Options {
    // One of them is required in "authorization: Bearer <token>" metadata;
    // nullptr: no check. Read on every call, so a reload applies at once;
    // must outlive the service.
    const AdminTokens* tokens = nullptr;
  };

  AdminServiceImpl(core::Engine* engine, AdminBackend* backend,
                   EventHub* events, Options options);

  grpc::ServerUnaryReactor* PutPolicy(grpc::CallbackServerContext* context,
                                      const v1::PutPolicyRequest* request,
                                      v1::PutPolicyResponse* response) override;
  grpc::ServerUnaryReactor* GetPolicy(grpc::CallbackServerContext* context,
                                      const v1::GetPolicyRequest* request,
                                      v1::Policy* response) override;
  grpc::ServerUnaryReactor* ListPolicies(
      grpc::CallbackServerContext* context,
      const v1::ListPoliciesRequest* request,
      v1::ListPoliciesResponse* response) override;
  grpc::ServerUnaryReactor* DeletePolicy(
      grpc::CallbackServerContext* context,
      const v1::DeletePolicyRequest* request,
      v1::DeletePolicyResponse* response) override;
  grpc::ServerUnaryReactor* SetBreakerOverride(
      grpc::CallbackServerContext* context,
      const v1::SetBreakerOverrideRequest* request,
      v1::SetBreakerOverrideResponse* response) override;
  grpc::ServerUnaryReactor* GetState(grpc::CallbackServerContext* context,
                                     const v1::GetStateRequest* request,
                                     v1::DependencyState* response) override;
  grpc::ServerWriteReactor<v1::Event>* WatchEvents(
      grpc::CallbackServerContext* context,
      const v1::WatchEventsRequest* request) override;

 private:
  // UNAUTHENTICATED unless the call carries the token.
  absl::Status Authenticate(const grpc::CallbackServerContext* context) const;

  core::Engine* const engine_;
  AdminBackend* const backend_;
  EventHub* const events_;
  const Options options_;
};

// Fills `out` from the engine's view of one dependency and the cluster view.
void DependencyStateToProto(const core::LivePolicyStatus& status,
                            const ClusterView& cluster,
                            v1::DependencyState* out);

}  // namespace sluice::rpc

#endif  // SLUICE_SERVER_RPC_ADMIN_SERVICE_H_
