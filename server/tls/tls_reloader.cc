#include "server/tls/tls_reloader.h"

#include <sys/stat.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace sluice::tls {

absl::StatusOr<std::unique_ptr<TlsReloader>> TlsReloader::Start(
    const ServerTlsFiles& files, absl::Duration interval) {
  std::unique_ptr<TlsReloader> reloader(new TlsReloader(files, interval));
  // The fingerprint before the load: a file that changes in between is
  // loaded again at the first check.
  {
    absl::MutexLock check(&reloader->check_mu_);
    reloader->fingerprint_ = reloader->Fingerprint();
  }
  absl::StatusOr<LoadedContext> loaded = LoadServerContext(files);
  if (!loaded.ok()) return loaded.status();
  spdlog::info("TLS certificate {}: {}", files.cert_file,
               DescribeCertificate(loaded->certificate));
  {
    absl::MutexLock lock(&reloader->mu_);
    reloader->context_ = std::move(loaded->context);
    reloader->stats_.certificate = loaded->certificate;
  }
  if (interval > absl::ZeroDuration()) {
    reloader->thread_ = std::thread([r = reloader.get()] { r->Run(); });
  }
  return reloader;
}

TlsReloader::TlsReloader(ServerTlsFiles files, absl::Duration interval)
    : files_(std::move(files)), interval_(interval) {}

TlsReloader::~TlsReloader() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<SSL_CTX> TlsReloader::context() const {
  absl::MutexLock lock(&mu_);
  return context_;
}

TlsStats TlsReloader::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

std::string TlsReloader::Fingerprint() const {
  std::string out;
  for (const std::string* path :
       {&files_.cert_file, &files_.key_file, &files_.client_ca_file}) {
    if (path->empty()) continue;
    struct stat st {};
    if (::stat(path->c_str(), &st) != 0) {
      absl::StrAppend(&out, "missing;");
      continue;
    }
    absl::StrAppend(&out, st.st_dev, ":", st.st_ino, ":", st.st_size, ":",
                    st.st_mtim.tv_sec, ".", st.st_mtim.tv_nsec, ";");
  }
  return out;
}

void TlsReloader::CheckNow() {
  absl::MutexLock check(&check_mu_);
  const std::string fingerprint = Fingerprint();
  if (fingerprint == fingerprint_) return;
  fingerprint_ = fingerprint;
  absl::StatusOr<LoadedContext> loaded = LoadServerContext(files_);
  absl::MutexLock lock(&mu_);
  if (!loaded.ok()) {
    ++stats_.reload_failures;
    spdlog::error(
        "TLS certificate files changed but do not load ({}); still serving "
        "the previous certificate ({}), retrying when they change again",
        std::string(loaded.status().message()),
        DescribeCertificate(stats_.certificate));
    return;
  }
  ++stats_.reloads;
  context_ = std::move(loaded->context);
  stats_.certificate = loaded->certificate;
  spdlog::info("TLS certificate reloaded from {}: {}", files_.cert_file,
               DescribeCertificate(loaded->certificate));
}

void TlsReloader::Run() {
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping_), interval_)) return;
    }
    CheckNow();
  }
}

}  // namespace sluice::tls
