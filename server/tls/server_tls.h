// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_TLS_SERVER_TLS_H_
#define SLUICE_SERVER_TLS_SERVER_TLS_H_

#include <openssl/types.h>

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace sluice::tls {

// The certificate files of sluiced's TLS listeners, as the flags name them.
// All empty: plaintext.
struct ServerTlsFiles {
  // PEM certificate chain, the server's own certificate first (--tls-cert).
  std::string cert_file;
  // PEM private key of that certificate (--tls-key).
  std::string key_file;
  // PEM CA bundle; when set, clients must present a certificate it signed
  // (mutual TLS, --tls-client-ca).
  std::string client_ca_file;

  bool enabled() const { return !cert_file.empty(); }
  bool mutual() const { return !client_ca_file.empty(); }
};

// How often the files are checked for a rotated certificate (TlsReloader).
// cert-manager renews days before expiry, so seconds do not matter; a file
// that is read every few seconds costs nothing.
inline constexpr absl::Duration kTlsReloadInterval = absl::Seconds(5);

// The flags alone, without reading a file: --tls-cert and --tls-key come
// together, and --tls-client-ca needs them. INVALID_ARGUMENT naming the
// flag.
absl::Status ValidateServerTlsFlags(const ServerTlsFiles& files);

// What the logs and metrics say of a loaded certificate.
struct CertificateInfo {
  std::string subject;  // e.g. "CN=sluice.example"
  std::string serial;   // hex, as `openssl x509 -serial` prints it
  absl::Time not_after = absl::InfinitePast();
};

// What the files hold, read with base::ReadRegularFile: a FIFO, a
// directory or a file over kMaxTlsFileBytes is refused at once, never
// waited on.
struct ServerTlsPem {
  std::string cert_chain;
  std::string key;
  std::string client_ca;  // "" without --tls-client-ca
};

// Far above any real chain or bundle.
inline constexpr size_t kMaxTlsFileBytes = size_t{1} << 20;

// INVALID_ARGUMENT naming the flag and the file, e.g. "--tls-key
// /etc/tls/tls.key: cannot read it: /etc/tls/tls.key is a FIFO, not a
// regular file".
absl::StatusOr<ServerTlsPem> ReadServerTlsFiles(const ServerTlsFiles& files);

// A server-side OpenSSL context built from the files, what it serves, and
// the same pair re-encoded for gRPC.
struct LoadedContext {
  std::shared_ptr<SSL_CTX> context;
  CertificateInfo certificate;
  // The validated private key, then the certificate chain (server's own
  // first), as PEM: one file gRPC reads as both key and chain (its PEM
  // readers skip the blocks of the other type).
  std::string identity_pem;
  // The client CA bundle's certificates as PEM; "" without a client CA.
  std::string client_ca_pem;
};

// Builds and checks a context from bytes in memory, nothing read from
// disk: the certificate chain parses (every PEM certificate in the file,
// nothing left over that is not PEM), the key parses (no passphrase), the
// key matches the certificate, and the client CA (if any) holds at least
// one certificate and parses. The context requires and verifies client
// certificates when the client CA is set. `files` only names the files in
// the errors: INVALID_ARGUMENT naming the flag and the file, e.g.
// "--tls-key /etc/tls/tls.key does not match the certificate in --tls-cert
// ...".
absl::StatusOr<LoadedContext> LoadServerContext(const ServerTlsFiles& files,
                                                const ServerTlsPem& pem);
// ReadServerTlsFiles, then the above.
absl::StatusOr<LoadedContext> LoadServerContext(const ServerTlsFiles& files);

// One line for the logs: "subject CN=x, serial 1A, expires 2027-01-01 ...".
std::string DescribeCertificate(const CertificateInfo& certificate);

}  // namespace sluice::tls

#endif  // SLUICE_SERVER_TLS_SERVER_TLS_H_
