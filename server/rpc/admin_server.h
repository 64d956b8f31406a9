// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_RPC_ADMIN_SERVER_H_
#define SLUICE_SERVER_RPC_ADMIN_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/core/engine.h"
#include "server/rpc/admin_backend.h"
#include "server/rpc/admin_events.h"
#include "server/rpc/admin_service.h"
#include "server/rpc/admin_tokens.h"

namespace sluice::rpc {

// The admin listener: AdminService on a gRPC server of its own, never on the
// data-plane port. Start and Shutdown are for the owner, from one thread;
// Shutdown is idempotent.
class AdminServer {
 public:
  struct Options {
    // "host:port"; port 0 picks a free one.
    std::string listen = "127.0.0.1:50052";
    // File holding the bearer tokens, one a line (see wire::ParseAdminTokens);
    // "" serves without a token. Re-read when it changes.
    std::string token_file;
    // How often the token file is checked for changes.
    absl::Duration token_file_interval = absl::Seconds(1);
    // The listener's credentials (TLS, server/tls); null: plaintext.
    std::shared_ptr<grpc::ServerCredentials> credentials;
  };

  // Reads the tokens, binds, starts serving and starts watching the token
  // file. INVALID_ARGUMENT for an unreadable or empty token file,
  // UNAVAILABLE when the address cannot be bound. `engine`, `backend` and
  // `events` must outlive the server.
  static absl::StatusOr<std::unique_ptr<AdminServer>> Start(
      const Options& options, core::Engine* engine, AdminBackend* backend,
      EventHub* events);
  ~AdminServer();

  int port() const { return port_; }
  bool has_token() const { return token_file_ != nullptr; }
  // The watched token file (for its metrics); nullptr without one.
  const AdminTokenFile* token_file() const { return token_file_.get(); }
  // A channel to the admin API that skips the network (in-process tests).
  std::shared_ptr<grpc::Channel> InProcessChannel() {
    return server_->InProcessChannel(grpc::ChannelArguments());
  }

  // Lets in-flight calls finish until `deadline`, then cancels them (and
  // every WatchEvents stream).
  void Shutdown(absl::Time deadline);

 private:
  AdminServer() = default;

  // Before the service, which reads its tokens, so it is destroyed after.
  std::unique_ptr<AdminTokenFile> token_file_;
  std::unique_ptr<AdminServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace sluice::rpc

#endif  // SLUICE_SERVER_RPC_ADMIN_SERVER_H_
