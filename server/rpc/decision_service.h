#ifndef SLUICE_SERVER_RPC_DECISION_SERVICE_H_
#define SLUICE_SERVER_RPC_DECISION_SERVICE_H_

#include <grpcpp/grpcpp.h>

#include "server/core/engine.h"
#include "sluice/v1/decision.grpc.pb.h"

namespace sluice::rpc {

// sluice.v1.DecisionService on the gRPC callback API. Each handler validates
// the request, asks the engine, converts the answer and finishes inline; it
// holds no logic or state of its own and logs nothing per request. Safe for
// concurrent use; `engine` must outlive the service.
class DecisionServiceImpl final : public v1::DecisionService::CallbackService {
 public:
  explicit DecisionServiceImpl(core::Engine* engine);

  grpc::ServerUnaryReactor* Acquire(grpc::CallbackServerContext* context,
                                    const v1::AcquireRequest* request,
                                    v1::AcquireResponse* response) override;

  grpc::ServerUnaryReactor* ReportResult(
      grpc::CallbackServerContext* context,
      const v1::ReportResultRequest* request,
      v1::ReportResultResponse* response) override;

 private:
  core::Engine* const engine_;
};

}  // namespace sluice::rpc

#endif  // SLUICE_SERVER_RPC_DECISION_SERVICE_H_
