// SPDX-License-Identifier: Apache-2.0
#include "wire/tls.h"

#include <grpcpp/create_channel.h>

#include <cstddef>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/files.h"

namespace sluice::wire {
namespace {

// A certificate chain or a key is a few kilobytes; the server reads its own
// TLS files with the same bound.
constexpr size_t kMaxPemFileBytes = size_t{1} << 20;

// The PEM text of `path`; `marker` is what it must hold ("CERTIFICATE",
// "PRIVATE KEY"), so that a swapped or empty file fails here, clearly,
// rather than as a handshake error on every call.
absl::StatusOr<std::string> ReadPem(const char* name, const std::string& path,
                                    const char* marker) {
  absl::StatusOr<std::string> pem =
      base::ReadRegularFile(path, kMaxPemFileBytes);
  if (!pem.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, " ", path, ": cannot read it: ", pem.status().message()));
  }
  if (!absl::StrContains(*pem, "-----BEGIN ") ||
      !absl::StrContains(*pem, marker)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " ", path, ": not a PEM file holding a ", marker));
  }
  return pem;
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const ClientTlsFiles& files,
                       const ClientTlsNames& names) {
  if (!files.enabled()) {
    if (!files.server_name.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(names.server_name, " needs TLS: set ", names.ca_file,
                       " (or ", names.cert_file, " and ", names.key_file, ")"));
    }
    return grpc::InsecureChannelCredentials();
  }
  if (files.cert_file.empty() != files.key_file.empty()) {
    return absl::InvalidArgumentError(
        files.cert_file.empty()
            ? absl::StrCat(names.key_file, " needs ", names.cert_file)
            : absl::StrCat(names.cert_file, " needs ", names.key_file));
  }
  grpc::SslCredentialsOptions options;
  if (!files.ca_file.empty()) {
    absl::StatusOr<std::string> ca =
        ReadPem(names.ca_file, files.ca_file, "CERTIFICATE");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *std::move(ca);
  }
  if (!files.cert_file.empty()) {
    absl::StatusOr<std::string> cert =
        ReadPem(names.cert_file, files.cert_file, "CERTIFICATE");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key =
        ReadPem(names.key_file, files.key_file, "PRIVATE KEY");
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *std::move(cert);
    options.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(options);
}

void AddTlsChannelArguments(const ClientTlsFiles& files,
                            grpc::ChannelArguments* args) {
  if (files.enabled() && !files.server_name.empty()) {
    args->SetSslTargetNameOverride(files.server_name);
  }
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const std::string& target, const ClientTlsFiles& files,
    const ClientTlsNames& names) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(files, names);
  if (!credentials.ok()) return credentials.status();
  grpc::ChannelArguments args;
  AddTlsChannelArguments(files, &args);
  return grpc::CreateCustomChannel(target, *credentials, args);
}

}  // namespace sluice::wire
