// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_SERVER_TLS_TLS_RELOADER_H_
#define SLUICE_SERVER_TLS_TLS_RELOADER_H_

#include <grpcpp/security/server_credentials.h>
#include <openssl/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/env.h"
#include "base/stats.h"
#include "server/tls/server_tls.h"

namespace sluice::tls {

// The certificate sluiced serves now, and how its reloads went: what
// /metrics shows.
struct TlsStats {
  CertificateInfo certificate;
  uint64_t reloads = 0;          // a changed file was loaded
  uint64_t reload_failures = 0;  // a changed file did not load
};

// How often gRPC's watcher re-reads sluiced's private copy of the pair
// (whole seconds: gRPC's unit). A new pair reaches gRPC within this time
// after the HTTP API has it.
inline constexpr int kGrpcRefreshSeconds = 1;

// The one owner of the TLS pair of every listener. Every `interval` a
// periodic task of its Env reads the files (base::ReadRegularFile: a FIFO or
// a directory is refused at once, never waited on) and compares them with
// what it read last; when they changed it validates the pair in memory
// (LoadServerContext: the chain, the key, the key matches the certificate,
// the client CA) and only then publishes it, to gRPC first and then to the
// HTTP API. A pair that does not load (a half-written rotation, an empty
// key, a key of another certificate, a directory or a FIFO in place of a
// file) is logged and counted, and the previous pair keeps serving on every
// listener until the files change again.
//
// gRPC 1.51's public API can only reload a pair from files
// (FileWatcherCertificateProvider), so GrpcCredentials gives gRPC a private
// copy of the validated pair, never the operator's files: one file holding
// the key and then the chain, in a directory sluiced creates (mode 0700,
// file 0600, removed by the destructor), replaced by rename with a
// modification time at least one second above the last (gRPC compares the
// seconds before and after its read and reads again when they differ, so
// a replacement during its read is not taken half).
//
// Safe for concurrent use.
class TlsReloader final : public base::StatsSource {
 public:
  // Loads the files (errors as LoadServerContext's), logs the certificate
  // and starts watching them: a look every `interval` (above zero), run by
  // `env` (which must outlive the reloader; tests give a manual one).
  static absl::StatusOr<std::unique_ptr<TlsReloader>> Start(
      const ServerTlsFiles& files, absl::Duration interval,
      base::Env* env = base::Env::Default());
  ~TlsReloader();  // stops watching, removes gRPC's copy

  // The context new HTTPS connections use. Quick: a lock and a reference
  // count.
  std::shared_ptr<SSL_CTX> context() const ABSL_LOCKS_EXCLUDED(mu_);
  TlsStats stats() const ABSL_LOCKS_EXCLUDED(mu_);
  // stats() as the sluice_tls_* metrics.
  void WriteStats(base::StatsWriter& out) const override
      ABSL_LOCKS_EXCLUDED(mu_);

  // Server credentials for gRPC's TCP listeners, serving the pair context()
  // serves; made on the first call (which creates the private directory
  // under $TMPDIR, else /tmp), the same object after. With a client CA,
  // client certificates are required and verified. UNAVAILABLE naming the
  // directory when it cannot be created or written.
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> GrpcCredentials()
      ABSL_LOCKS_EXCLUDED(check_mu_);

  // The file gRPC reads ("" before GrpcCredentials), for tests.
  std::string grpc_identity_file() const ABSL_LOCKS_EXCLUDED(check_mu_);

 private:
  explicit TlsReloader(ServerTlsFiles files);
  // One look at the files.
  void Check() ABSL_LOCKS_EXCLUDED(check_mu_, mu_);
  // Writes `loaded` for gRPC's watcher, when it has one.
  absl::Status PublishToGrpc(const LoadedContext& loaded)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(check_mu_);
  void RemoveGrpcCopy() ABSL_EXCLUSIVE_LOCKS_REQUIRED(check_mu_);

  const ServerTlsFiles files_;

  // Serializes the checks and the gRPC copy.
  mutable absl::Mutex check_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  // What the last check read (bytes or the error), to tell a change.
  std::string last_read_ ABSL_GUARDED_BY(check_mu_);
  // The pair in service.
  std::string identity_pem_ ABSL_GUARDED_BY(check_mu_);
  std::string client_ca_pem_ ABSL_GUARDED_BY(check_mu_);
  // gRPC's private copy: its directory ("" until GrpcCredentials), the
  // modification time of the last file written, the credentials made.
  std::string grpc_dir_ ABSL_GUARDED_BY(check_mu_);
  absl::Time grpc_mtime_ ABSL_GUARDED_BY(check_mu_) = absl::InfinitePast();
  std::shared_ptr<grpc::ServerCredentials> grpc_credentials_
      ABSL_GUARDED_BY(check_mu_);

  mutable absl::Mutex mu_;
  std::shared_ptr<SSL_CTX> context_ ABSL_GUARDED_BY(mu_);
  TlsStats stats_ ABSL_GUARDED_BY(mu_);

  std::unique_ptr<base::PeriodicTask> task_;
};

}  // namespace sluice::tls

#endif  // SLUICE_SERVER_TLS_TLS_RELOADER_H_
