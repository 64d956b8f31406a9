#ifndef SLUICE_SERVER_TLS_SERVER_TLS_H_
#define SLUICE_SERVER_TLS_SERVER_TLS_H_

#include <grpcpp/security/server_credentials.h>
#include <openssl/types.h>

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

// How often the files are checked for a rotated certificate, by gRPC's
// file watcher and by the HTTP API's reloader alike. cert-manager renews
// days before expiry, so seconds do not matter; a file that is read every
// few seconds costs nothing.
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

// A server-side OpenSSL context built from the files, and what it serves.
struct LoadedContext {
  std::shared_ptr<SSL_CTX> context;
  CertificateInfo certificate;
};

// Reads and checks the files: the certificate chain and the key load, the
// key matches the certificate, and the client CA (if any) loads. The
// context requires and verifies client certificates when the client CA is
// set. INVALID_ARGUMENT naming the flag and the file, e.g. "--tls-key
// /etc/tls/tls.key does not match the certificate in --tls-cert ...".
absl::StatusOr<LoadedContext> LoadServerContext(const ServerTlsFiles& files);

// gRPC server credentials: insecure when `files` is not enabled, else TLS
// with a certificate provider that re-reads the files every
// kTlsReloadInterval (a rotated certificate is served without a restart)
// and, with a client CA, requires and verifies client certificates.
std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(
    const ServerTlsFiles& files);

// One line for the logs: "subject CN=x, serial 1A, expires 2027-01-01 ...".
std::string DescribeCertificate(const CertificateInfo& certificate);

}  // namespace sluice::tls

#endif  // SLUICE_SERVER_TLS_SERVER_TLS_H_
