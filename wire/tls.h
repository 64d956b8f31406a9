// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_WIRE_TLS_H_
#define SLUICE_WIRE_TLS_H_

#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace sluice::wire {

// A client's TLS settings for a channel to sluiced. All files empty:
// plaintext.
struct ClientTlsFiles {
  // PEM CA bundle that signed the server's certificate; "" with a cert or
  // key: the system's CAs.
  std::string ca_file;
  // Client certificate chain and key, for a server with --tls-client-ca;
  // both or neither.
  std::string cert_file;
  std::string key_file;
  // The name the server's certificate must carry, when it differs from the
  // target's host (e.g. an IP target and a DNS certificate); "" = the
  // target's host.
  std::string server_name;

  bool enabled() const {
    return !ca_file.empty() || !cert_file.empty() || !key_file.empty();
  }
};

// How the caller names each setting in its errors: flags by default, the
// SDK its fields.
struct ClientTlsNames {
  const char* ca_file = "--tls-ca";
  const char* cert_file = "--tls-cert";
  const char* key_file = "--tls-key";
  const char* server_name = "--tls-server-name";
};

// Channel credentials for `files`: insecure when none is set, else TLS with
// the files' contents read now (a rotated client certificate is used by the
// next channel made). INVALID_ARGUMENT naming the setting for a file that
// cannot be read or is not PEM, a cert without a key, or a server name
// without TLS.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const ClientTlsFiles& files,
                       const ClientTlsNames& names = ClientTlsNames());

// Sets what the credentials need on the channel: the server name override.
void AddTlsChannelArguments(const ClientTlsFiles& files,
                            grpc::ChannelArguments* args);

// A channel to `target` with `files`' credentials and arguments.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const std::string& target, const ClientTlsFiles& files,
    const ClientTlsNames& names = ClientTlsNames());

}  // namespace sluice::wire

#endif  // SLUICE_WIRE_TLS_H_
