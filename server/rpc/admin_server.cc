#include "server/rpc/admin_server.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "server/policy/policy_file.h"

namespace sluice::rpc {

absl::StatusOr<std::string> ReadAdminToken(const std::string& path) {
  absl::StatusOr<std::string> text = policy::ReadTextFile(path);
  if (!text.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--admin-token-file ", path, ": ", text.status().message()));
  }
  std::string token(absl::StripAsciiWhitespace(*text));
  if (token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--admin-token-file ", path, " is empty"));
  }
  return token;
}

absl::StatusOr<std::unique_ptr<AdminServer>> AdminServer::Start(
    const Options& options, core::Engine* engine, AdminBackend* backend,
    EventHub* events) {
  AdminServiceImpl::Options service_options;
  if (!options.token_file.empty()) {
    absl::StatusOr<std::string> token = ReadAdminToken(options.token_file);
    if (!token.ok()) return token.status();
    service_options.token = *std::move(token);
  }
  std::unique_ptr<AdminServer> server(new AdminServer());
  server->has_token_ = !service_options.token.empty();
  server->service_ = std::make_unique<AdminServiceImpl>(
      engine, backend, events, std::move(service_options));
  grpc::ServerBuilder builder;
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
  return server;
}

AdminServer::~AdminServer() { Shutdown(absl::Now()); }

void AdminServer::Shutdown(absl::Time deadline) {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  server_->Shutdown(absl::ToChronoTime(deadline));
}

}  // namespace sluice::rpc
