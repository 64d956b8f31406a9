// SPDX-License-Identifier: Apache-2.0
#include "tools/sluicectl/admin_connection.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "base/files.h"
#include "wire/admin_tokens.h"

namespace sluice::ctl {

int AdminConnection::Connect() {
  if (!options_.token_file.empty()) {
    absl::StatusOr<std::string> token =
        base::ReadRegularFile(options_.token_file);
    if (!token.ok()) {
      std::fprintf(stderr, "sluicectl: cannot read --token-file %s: %s\n",
                   options_.token_file.c_str(),
                   std::string(token.status().message()).c_str());
      return kUsage;
    }
    // The server's format (one token a line, # comments), so the file
    // sluiced reads serves here too; while it holds several during a
    // rotation, the last one is the newest by convention.
    absl::StatusOr<std::vector<std::string>> tokens =
        wire::ParseAdminTokens(*token);
    if (!tokens.ok()) {
      std::fprintf(stderr, "sluicectl: --token-file %s: %s\n",
                   options_.token_file.c_str(),
                   std::string(tokens.status().message()).c_str());
      return kUsage;
    }
    token_ = tokens->back();
  }
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      wire::MakeChannel(options_.target, options_.tls);
  if (!channel.ok()) {
    std::fprintf(stderr, "sluicectl: %s\n",
                 std::string(channel.status().message()).c_str());
    return kUsage;
  }
  stub_ = v1::AdminService::NewStub(*channel);
  return kOk;
}

std::unique_ptr<grpc::ClientContext> AdminConnection::Context(
    bool deadline) const {
  auto context = std::make_unique<grpc::ClientContext>();
  if (deadline) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
  }
  if (!token_.empty()) {
    context->AddMetadata("authorization", "Bearer " + token_);
  }
  return context;
}

int AdminConnection::Fail(const grpc::Status& status,
                          const std::string& what) const {
  const char* target = options_.target.c_str();
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      // A TLS mismatch looks like any unreachable server to gRPC ("Socket
      // closed", "handshake failed"), so the hint names TLS too.
      std::fprintf(stderr,
                   "sluicectl: cannot reach the Sluice admin API at %s "
                   "(%s). Is sluiced running with --admin-listen there? "
                   "Set --target or SLUICE_ADMIN_TARGET.%s\n",
                   target, status.error_message().c_str(),
                   options_.tls.enabled()
                       ? " With TLS, check --tls-ca (and --tls-cert and "
                         "--tls-key if sluiced has --tls-client-ca)."
                       : " If sluiced serves TLS (--tls-cert), pass --tls-ca.");
      return kUnreachable;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      std::fprintf(stderr,
                   "sluicectl: %s: the server at %s did not answer within "
                   "%s.\n",
                   what.c_str(), target,
                   absl::FormatDuration(options_.timeout).c_str());
      return kUnreachable;
    case grpc::StatusCode::UNAUTHENTICATED:
      std::fprintf(stderr,
                   "sluicectl: %s: %s. Pass the admin token with "
                   "--token-file (or SLUICE_ADMIN_TOKEN_FILE).\n",
                   what.c_str(), status.error_message().c_str());
      return kUnauthenticated;
    case grpc::StatusCode::UNIMPLEMENTED:
      std::fprintf(stderr,
                   "sluicectl: %s: %s does not serve the admin API (is "
                   "it the data-plane port? use the --admin-listen "
                   "address).\n",
                   what.c_str(), target);
      return kUnreachable;
    default:
      std::fprintf(stderr, "sluicectl: %s: %s\n", what.c_str(),
                   status.error_message().c_str());
      return kRefused;
  }
}

}  // namespace sluice::ctl
