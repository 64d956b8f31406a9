// SPDX-License-Identifier: Apache-2.0
#include "server/rpc/admin_server.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace sluice::rpc {

absl::StatusOr<std::unique_ptr<AdminServer>> AdminServer::Start(
    const Options& options, core::Engine* engine, AdminBackend* backend,
    EventHub* events) {
  std::unique_ptr<AdminServer> server(new AdminServer());
  AdminServiceImpl::Options service_options;
  if (!options.token_file.empty()) {
    absl::StatusOr<std::unique_ptr<AdminTokenFile>> tokens =
        AdminTokenFile::Load({options.token_file, options.token_file_interval});
    if (!tokens.ok()) return tokens.status();
    server->token_file_ = *std::move(tokens);
    service_options.tokens = server->token_file_->tokens();
  }
  server->service_ = std::make_unique<AdminServiceImpl>(
      engine, backend, events, std::move(service_options));
  grpc::ServerBuilder builder;
  // A connection that never finishes its (TLS) handshake is closed after
  // 10 s instead of gRPC's default of 120 s.
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, 10000);
  builder.AddListeningPort(options.listen,
                           options.credentials != nullptr
                               ? options.credentials
                               : grpc::InsecureServerCredentials(),
                           &server->port_);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve the admin API on ", options.listen,
                     " (address in use or not available?)"));
  }
  if (server->token_file_ != nullptr) server->token_file_->StartWatching();
  return server;
}

AdminServer::~AdminServer() { Shutdown(absl::Now()); }

void AdminServer::Shutdown(absl::Time deadline) {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  server_->Shutdown(absl::ToChronoTime(deadline));
}

}  // namespace sluice::rpc
