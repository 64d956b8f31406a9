// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_RLS_IN_PROCESS_SERVER_H_
#define SLUICE_TESTS_RLS_IN_PROCESS_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "envoy/service/ratelimit/v3/rls.grpc.pb.h"
#include "server/app/options.h"
#include "server/app/server.h"
#include "server/core/clock.h"
#include "sluice/v1/decision.grpc.pb.h"

namespace sluice::rls_test {

// app::Server on `clock` with the policies file at `policies_path`, and
// stubs on a TCP channel to its data port. With `metrics_listener` it also
// serves /metrics on server().metrics_port().
class InProcessServer {
 public:
  InProcessServer(const std::string& policies_path, core::Clock* clock,
                  bool metrics_listener = false) {
    app::ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.admin_listen = "127.0.0.1:0";
    options.metrics_listen = "127.0.0.1:0";
    options.policies_path = policies_path;
    app::Server::Dependencies deps;
    deps.clock = clock;
    deps.metrics_listener = metrics_listener;
    server_ = std::make_unique<app::Server>(options, deps);
    status_ = server_->BuildAndStart();
    if (!status_.ok()) return;
    channel_ = grpc::CreateChannel(server_->target(),
                                   grpc::InsecureChannelCredentials());
    rls_ = envoy::service::ratelimit::v3::RateLimitService::NewStub(channel_);
    decisions_ = v1::DecisionService::NewStub(channel_);
  }

  const absl::Status& status() const { return status_; }
  app::Server& server() { return *server_; }
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  envoy::service::ratelimit::v3::RateLimitService::Stub* rls() {
    return rls_.get();
  }
  v1::DecisionService::Stub* decisions() { return decisions_.get(); }

 private:
  absl::Status status_;
  std::unique_ptr<app::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<envoy::service::ratelimit::v3::RateLimitService::Stub> rls_;
  std::unique_ptr<v1::DecisionService::Stub> decisions_;
};

}  // namespace sluice::rls_test

#endif  // SLUICE_TESTS_RLS_IN_PROCESS_SERVER_H_
