// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TREE_LEASE_TEST_SERVER_H_
#define SLUICE_TESTS_TREE_LEASE_TEST_SERVER_H_

// A central replica for the lease tests: LeaseServiceImpl over a fake
// LeafServer, on an in-process gRPC server at 127.0.0.1 port 0.

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/cluster/leaf_server.h"
#include "server/tree/lease_service.h"

namespace sluice::tree::lease_testing {

// Answers every tick with one grant per pushed key (half its limit, valid
// for 2 s), or with the status it was told to fail with; it can also hold
// every tick until released. Safe for concurrent use.
class FakeLeafServer final : public cluster::LeafServer {
 public:
  explicit FakeLeafServer(std::string name) : name_(std::move(name)) {}

  absl::StatusOr<cluster::TickReply> ServeLeaf(
      const cluster::TickRequest& request) override {
    absl::MutexLock lock(&mu_);
    requests_.push_back(request);
    mu_.Await(absl::Condition(
        +[](bool* hold) { return !*hold; }, &hold_));
    if (!fail_with_.ok()) return fail_with_;
    cluster::TickReply reply;
    reply.store_now = absl::FromUnixMillis(1700000000000);
    reply.replicas = {name_, request.replica_id};
    reply.live_weight = 2;
    for (const cluster::PolicyPush& push : request.policies) {
      cluster::PolicyPull pull;
      pull.epoch = absl::StrCat(name_, "-epoch");
      for (const core::KeyTick& key : push.keys) {
        cluster::StoreGrant grant;
        for (int u = 0; u < core::kClusterResources; ++u) {
          grant.units[u] = key.limit[u] / 2;
        }
        grant.valid_for = absl::Seconds(2);
        pull.grants.push_back(grant);
      }
      if (drop_grants_) pull.grants.clear();
      reply.policies.push_back(std::move(pull));
    }
    for (uint64_t i = 1; i <= forwarded_to_me_; ++i) {
      core::ForwardedReport f;
      f.issuer = request.replica_id;
      f.dependency = "inventory";
      f.permit_id = {i, 0};
      f.outcome = core::Outcome::kSuccess;
      reply.forwarded_to_me.push_back(std::move(f));
    }
    return reply;
  }

  void FailWith(absl::Status status) {
    absl::MutexLock lock(&mu_);
    fail_with_ = std::move(status);
  }
  // Ticks wait until Release.
  void Hold() {
    absl::MutexLock lock(&mu_);
    hold_ = true;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    hold_ = false;
  }
  // Replies answer no key (a broken central replica).
  void DropGrants() {
    absl::MutexLock lock(&mu_);
    drop_grants_ = true;
  }
  // Replies carry this many reports for the leaf's permits (serials 1..n).
  void ForwardToLeaf(uint64_t n) {
    absl::MutexLock lock(&mu_);
    forwarded_to_me_ = n;
  }
  std::vector<cluster::TickRequest> requests() const {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  const std::string& name() const { return name_; }

 private:
  const std::string name_;
  mutable absl::Mutex mu_;
  std::vector<cluster::TickRequest> requests_ ABSL_GUARDED_BY(mu_);
  absl::Status fail_with_ ABSL_GUARDED_BY(mu_);
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  bool drop_grants_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t forwarded_to_me_ ABSL_GUARDED_BY(mu_) = 0;
};

// LeaseServiceImpl over a FakeLeafServer on 127.0.0.1:<port 0>.
class LeaseTestServer {
 public:
  // Without `lease_arguments` the server keeps gRPC's defaults (which
  // refuse leaves' keepalive pings).
  // `credentials` null: plaintext.
  explicit LeaseTestServer(
      std::string name, bool lease_arguments = true,
      std::shared_ptr<grpc::ServerCredentials> credentials = nullptr)
      : leaf_server_(std::move(name)), service_(&leaf_server_) {
    grpc::ServerBuilder builder;
    if (lease_arguments) {
      AddLeaseServerArguments(&builder, absl::Milliseconds(100));
    }
    builder.AddListeningPort("127.0.0.1:0",
                             credentials != nullptr
                                 ? credentials
                                 : grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~LeaseTestServer() { Stop(); }

  // Closes every connection (GOAWAY) and stops listening.
  void Stop() {
    if (server_ == nullptr) return;
    leaf_server_.Release();
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
    server_.reset();
  }

  bool started() const { return server_ != nullptr && port_ != 0; }
  int port() const { return port_; }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  FakeLeafServer& leaf_server() { return leaf_server_; }

 private:
  FakeLeafServer leaf_server_;
  LeaseServiceImpl service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace sluice::tree::lease_testing

#endif  // SLUICE_TESTS_TREE_LEASE_TEST_SERVER_H_
