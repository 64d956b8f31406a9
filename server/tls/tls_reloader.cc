// SPDX-License-Identifier: Apache-2.0
#include "server/tls/tls_reloader.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/files.h"
#include "spdlog/spdlog.h"

namespace sluice::tls {
namespace {

constexpr char kIdentityFile[] = "identity.pem";
constexpr char kClientCaFile[] = "client-ca.pem";

// What a check read, as one comparable string: each file's bytes, or the
// error that stopped the read.
std::string ReadingOf(const absl::StatusOr<ServerTlsPem>& pem) {
  if (!pem.ok()) return absl::StrCat("error:", pem.status().message());
  return absl::StrCat(pem->cert_chain.size(), ":", pem->cert_chain,
                      pem->key.size(), ":", pem->key, pem->client_ca.size(),
                      ":", pem->client_ca);
}

}  // namespace

absl::StatusOr<std::unique_ptr<TlsReloader>> TlsReloader::Start(
    const ServerTlsFiles& files, absl::Duration interval, base::Env* env) {
  std::unique_ptr<TlsReloader> reloader(new TlsReloader(files));
  absl::StatusOr<ServerTlsPem> pem = ReadServerTlsFiles(files);
  if (!pem.ok()) return pem.status();
  absl::StatusOr<LoadedContext> loaded = LoadServerContext(files, *pem);
  if (!loaded.ok()) return loaded.status();
  spdlog::info("TLS certificate {}: {}", files.cert_file,
               DescribeCertificate(loaded->certificate));
  {
    absl::MutexLock check(&reloader->check_mu_);
    reloader->last_read_ = ReadingOf(pem);
    reloader->identity_pem_ = std::move(loaded->identity_pem);
    reloader->client_ca_pem_ = std::move(loaded->client_ca_pem);
  }
  {
    absl::MutexLock lock(&reloader->mu_);
    reloader->context_ = std::move(loaded->context);
    reloader->stats_.certificate = loaded->certificate;
  }
  base::PeriodicOptions periodic;
  periodic.first_run_in = interval;
  reloader->task_ =
      env->StartPeriodic(periodic, [r = reloader.get(), interval] {
        r->Check();
        return interval;
      });
  return reloader;
}

TlsReloader::TlsReloader(ServerTlsFiles files) : files_(std::move(files)) {}

TlsReloader::~TlsReloader() {
  if (task_ != nullptr) task_->Stop();
  absl::MutexLock check(&check_mu_);
  grpc_credentials_.reset();
  RemoveGrpcCopy();
}

std::shared_ptr<SSL_CTX> TlsReloader::context() const {
  absl::MutexLock lock(&mu_);
  return context_;
}

TlsStats TlsReloader::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

void TlsReloader::WriteStats(base::StatsWriter& out) const {
  const TlsStats s = stats();
  const absl::Time not_after = s.certificate.not_after;
  static constexpr base::MetricDef kTlsCertificateExpiryTimestampSeconds =
      base::GaugeDef(
          "sluice_tls_certificate_expiry_timestamp_seconds", {},
          "Unix time at which the served TLS certificate (--tls-cert) expires "
          "(its notAfter). Only with --tls-cert.");
  out.Write(kTlsCertificateExpiryTimestampSeconds,
            not_after == absl::InfinitePast()
                ? 0
                : absl::ToDoubleSeconds(not_after - absl::UnixEpoch()));
  static constexpr base::MetricDef kTlsReloads = base::CounterDef(
      "sluice_tls_reloads_total", {"result"},
      "Changes of the TLS certificate files seen, by result: ok (the "
      "new certificate is served) or error (it did not load; the "
      "previous one stays, the log says why). Only with --tls-cert.");
  out.WriteBy(kTlsReloads, {{"ok", s.reloads}, {"error", s.reload_failures}});
}

std::string TlsReloader::grpc_identity_file() const {
  absl::MutexLock check(&check_mu_);
  return grpc_dir_.empty() ? "" : absl::StrCat(grpc_dir_, "/", kIdentityFile);
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>>
TlsReloader::GrpcCredentials() {
  absl::MutexLock check(&check_mu_);
  if (grpc_credentials_ != nullptr) return grpc_credentials_;
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(
      tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp", "/sluiced-tls-XXXXXX");
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  // mkdtemp creates the directory with mode 0700.
  if (::mkdtemp(buf.data()) == nullptr) {
    return absl::UnavailableError(absl::StrCat(
        "cannot create a private directory for gRPC's copy of the TLS "
        "pair (",
        pattern, "; set TMPDIR to a writable directory): ",
        std::strerror(errno)));
  }
  grpc_dir_ = buf.data();
  LoadedContext current;
  current.identity_pem = identity_pem_;
  current.client_ca_pem = client_ca_pem_;
  if (absl::Status s = PublishToGrpc(current); !s.ok()) {
    RemoveGrpcCopy();
    return s;
  }
  const std::string identity = absl::StrCat(grpc_dir_, "/", kIdentityFile);
  const std::string client_ca =
      files_.mutual() ? absl::StrCat(grpc_dir_, "/", kClientCaFile) : "";
  // One file as both the key and the chain: gRPC reads the two paths one
  // after the other, and a rename in between changes the mtime it checks.
  auto provider =
      std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          identity, identity, client_ca, kGrpcRefreshSeconds);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (files_.mutual()) {
    options.watch_root_certs();
    options.set_cert_request_type(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  grpc_credentials_ = grpc::experimental::TlsServerCredentials(options);
  return grpc_credentials_;
}

absl::Status TlsReloader::PublishToGrpc(const LoadedContext& loaded) {
  if (grpc_dir_.empty()) return absl::OkStatus();
  // Strictly later than the last file, in whole seconds: a rotation within
  // the second of the last one still changes what gRPC compares.
  absl::Time mtime = absl::FromUnixSeconds(absl::ToUnixSeconds(absl::Now()));
  if (grpc_mtime_ != absl::InfinitePast() && mtime <= grpc_mtime_) {
    mtime = grpc_mtime_ + absl::Seconds(1);
  }
  base::AtomicWriteOptions options;
  options.mode = 0600;
  options.mtime = mtime;
  // The client CA first: gRPC's watcher picks both up in its next pass.
  if (files_.mutual()) {
    if (absl::Status s = base::WriteFileAtomically(
            absl::StrCat(grpc_dir_, "/", kClientCaFile), loaded.client_ca_pem,
            options);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s =
          base::WriteFileAtomically(absl::StrCat(grpc_dir_, "/", kIdentityFile),
                                    loaded.identity_pem, options);
      !s.ok()) {
    return s;
  }
  grpc_mtime_ = mtime;
  return absl::OkStatus();
}

void TlsReloader::RemoveGrpcCopy() {
  if (grpc_dir_.empty()) return;
  for (const char* name : {kIdentityFile, kClientCaFile}) {
    const std::string path = absl::StrCat(grpc_dir_, "/", name);
    ::unlink(path.c_str());
    ::unlink((path + ".tmp").c_str());
  }
  if (::rmdir(grpc_dir_.c_str()) != 0) {
    spdlog::warn("cannot remove {}, the private copy of the TLS pair: {}",
                 grpc_dir_, std::strerror(errno));
  }
  grpc_dir_.clear();
}

void TlsReloader::Check() {
  absl::MutexLock check(&check_mu_);
  absl::StatusOr<ServerTlsPem> pem = ReadServerTlsFiles(files_);
  std::string reading = ReadingOf(pem);
  if (reading == last_read_) return;
  last_read_ = std::move(reading);
  absl::StatusOr<LoadedContext> loaded =
      pem.ok() ? LoadServerContext(files_, *pem)
               : absl::StatusOr<LoadedContext>(pem.status());
  // gRPC first: a pair it cannot be handed is not served anywhere.
  if (loaded.ok()) {
    if (absl::Status s = PublishToGrpc(*loaded); !s.ok()) {
      loaded = absl::UnavailableError(
          absl::StrCat("cannot hand it to gRPC: ", s.message()));
      last_read_.clear();  // tried again at the next check
    }
  }
  absl::MutexLock lock(&mu_);
  if (!loaded.ok()) {
    ++stats_.reload_failures;
    spdlog::error(
        "TLS certificate files changed but do not load ({}); still serving "
        "the previous certificate ({}) on every listener, retrying when they "
        "change again",
        std::string(loaded.status().message()),
        DescribeCertificate(stats_.certificate));
    return;
  }
  ++stats_.reloads;
  identity_pem_ = std::move(loaded->identity_pem);
  client_ca_pem_ = std::move(loaded->client_ca_pem);
  context_ = std::move(loaded->context);
  stats_.certificate = loaded->certificate;
  spdlog::info("TLS certificate reloaded from {}: {}", files_.cert_file,
               DescribeCertificate(loaded->certificate));
}

}  // namespace sluice::tls
