#ifndef SLUICE_SERVER_TLS_TLS_RELOADER_H_
#define SLUICE_SERVER_TLS_TLS_RELOADER_H_

#include <openssl/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/tls/server_tls.h"

namespace sluice::tls {

// The certificate sluiced serves now, and how its reloads went: what
// /metrics shows.
struct TlsStats {
  CertificateInfo certificate;
  uint64_t reloads = 0;          // a changed file was loaded
  uint64_t reload_failures = 0;  // a changed file did not load
};

// Keeps the HTTP API's OpenSSL context in step with the certificate files.
// Every `interval` its thread looks at the files (identity, size and
// modification time, with symlinks followed, so an in-place rewrite, a
// rename over the file and a Kubernetes ..data symlink swap are all seen);
// when one changed it builds a new context, logs the new certificate and
// swaps it in. A context that does not load (a half-written rotation, a
// key that does not match) is logged and counted, and the old one stays
// until the files change again. gRPC reloads the same files on its own
// (MakeServerCredentials). Safe for concurrent use.
class TlsReloader {
 public:
  // Loads the files (errors as LoadServerContext's), logs the certificate
  // and starts watching them. With `interval` zero no thread runs and only
  // CheckNow reloads (tests).
  static absl::StatusOr<std::unique_ptr<TlsReloader>> Start(
      const ServerTlsFiles& files, absl::Duration interval);
  ~TlsReloader();  // stops the thread

  // The context new connections use. Quick: a lock and a reference count.
  std::shared_ptr<SSL_CTX> context() const ABSL_LOCKS_EXCLUDED(mu_);
  TlsStats stats() const ABSL_LOCKS_EXCLUDED(mu_);

  // One look at the files, now, on the caller's thread.
  void CheckNow() ABSL_LOCKS_EXCLUDED(check_mu_, mu_);

 private:
  TlsReloader(ServerTlsFiles files, absl::Duration interval);
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // The files' identities, sizes and times, as one comparable string.
  std::string Fingerprint() const;

  const ServerTlsFiles files_;
  const absl::Duration interval_;

  // Serializes checks from the thread and from CheckNow.
  absl::Mutex check_mu_;
  std::string fingerprint_ ABSL_GUARDED_BY(check_mu_);

  mutable absl::Mutex mu_;
  std::shared_ptr<SSL_CTX> context_ ABSL_GUARDED_BY(mu_);
  TlsStats stats_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  std::thread thread_;
};

}  // namespace sluice::tls

#endif  // SLUICE_SERVER_TLS_TLS_RELOADER_H_
