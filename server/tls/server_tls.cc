#include "server/tls/server_tls.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "absl/strings/str_cat.h"

namespace sluice::tls {
namespace {

// OpenSSL's queued errors, oldest first, as one message; clears the queue.
std::string OpenSslErrors() {
  std::string text;
  while (const unsigned long e = ERR_get_error()) {
    const char* reason = ERR_reason_error_string(e);
    if (!text.empty()) text += "; ";
    text += reason != nullptr ? reason : absl::StrCat("error ", e);
  }
  return text.empty() ? "unknown error" : text;
}

// "--flag PATH: cannot read it: ..." for a file that cannot be opened, so
// that a missing file is not reported as a parse error.
absl::Status CheckReadable(const char* flag, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, " ", path, ": cannot read it: ", std::strerror(errno)));
  }
  std::fclose(f);
  return absl::OkStatus();
}

// A private key with a passphrase fails instead of prompting on a terminal.
int NoPassphrase(char*, int, int, void*) { return 0; }

std::string NameText(const X509_NAME* name) {
  BIO* bio = BIO_new(BIO_s_mem());
  if (bio == nullptr) return "";
  X509_NAME_print_ex(bio, name, 0, XN_FLAG_RFC2253);
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio, &data);
  std::string text(data, static_cast<size_t>(size > 0 ? size : 0));
  BIO_free(bio);
  return text;
}

CertificateInfo Describe(const X509* certificate) {
  CertificateInfo info;
  if (certificate == nullptr) return info;
  info.subject = NameText(X509_get_subject_name(certificate));
  if (BIGNUM* serial =
          ASN1_INTEGER_to_BN(X509_get0_serialNumber(certificate), nullptr)) {
    if (char* hex = BN_bn2hex(serial)) {
      info.serial = hex;
      OPENSSL_free(hex);
    }
    BN_free(serial);
  }
  std::tm tm{};
  if (ASN1_TIME_to_tm(X509_get0_notAfter(certificate), &tm) == 1) {
    info.not_after = absl::FromTimeT(timegm(&tm));
  }
  return info;
}

}  // namespace

absl::Status ValidateServerTlsFlags(const ServerTlsFiles& files) {
  if (files.cert_file.empty() != files.key_file.empty()) {
    return absl::InvalidArgumentError(
        files.cert_file.empty()
            ? "--tls-key needs --tls-cert (the certificate of that key)"
            : "--tls-cert needs --tls-key (the certificate's private key)");
  }
  if (!files.client_ca_file.empty() && files.cert_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-client-ca needs --tls-cert and --tls-key: client "
        "certificates are checked only on TLS listeners");
  }
  return absl::OkStatus();
}

absl::StatusOr<LoadedContext> LoadServerContext(const ServerTlsFiles& files) {
  if (absl::Status s = ValidateServerTlsFlags(files); !s.ok()) return s;
  if (!files.enabled()) {
    return absl::InvalidArgumentError("TLS is off: no --tls-cert");
  }
  if (absl::Status s = CheckReadable("--tls-cert", files.cert_file); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckReadable("--tls-key", files.key_file); !s.ok()) {
    return s;
  }
  if (files.mutual()) {
    if (absl::Status s = CheckReadable("--tls-client-ca", files.client_ca_file);
        !s.ok()) {
      return s;
    }
  }
  ERR_clear_error();
  std::shared_ptr<SSL_CTX> context(SSL_CTX_new(TLS_server_method()),
                                   SSL_CTX_free);
  if (context == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot create a TLS context: ", OpenSslErrors()));
  }
  SSL_CTX* ctx = context.get();
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  // A client that closes without close_notify (most HTTP clients do) ends
  // the connection like a clean close.
  SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF |
                               SSL_OP_NO_RENEGOTIATION |
                               SSL_OP_CIPHER_SERVER_PREFERENCE);
  SSL_CTX_set_default_passwd_cb(ctx, NoPassphrase);
  if (SSL_CTX_use_certificate_chain_file(ctx, files.cert_file.c_str()) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-cert ", files.cert_file,
                     ": not a PEM certificate chain: ", OpenSslErrors()));
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, files.key_file.c_str(),
                                  SSL_FILETYPE_PEM) != 1) {
    const std::string errors = OpenSslErrors();
    if (errors.find("key values mismatch") != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls-key ", files.key_file,
                       " does not match the certificate in "
                       "--tls-cert ",
                       files.cert_file));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-key ", files.key_file,
        ": not a PEM private key (or one with a passphrase): ", errors));
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-key ", files.key_file,
                     " does not match the certificate in "
                     "--tls-cert ",
                     files.cert_file));
  }
  if (files.mutual()) {
    if (SSL_CTX_load_verify_locations(ctx, files.client_ca_file.c_str(),
                                      nullptr) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls-client-ca ", files.client_ca_file,
                       ": not a PEM CA bundle: ", OpenSslErrors()));
    }
    // The CA names go in the CertificateRequest, so a client with several
    // certificates picks one this server trusts.
    if (STACK_OF(X509_NAME)* names =
            SSL_load_client_CA_file(files.client_ca_file.c_str())) {
      SSL_CTX_set_client_CA_list(ctx, names);
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                       nullptr);
  }
  // Needed for session resumption once client certificates are verified.
  static constexpr unsigned char kSessionContext[] = "sluice";
  SSL_CTX_set_session_id_context(ctx, kSessionContext,
                                 sizeof(kSessionContext) - 1);
  ERR_clear_error();
  LoadedContext loaded;
  loaded.certificate = Describe(SSL_CTX_get0_certificate(ctx));
  loaded.context = std::move(context);
  return loaded;
}

std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(
    const ServerTlsFiles& files) {
  if (!files.enabled()) return grpc::InsecureServerCredentials();
  const unsigned int interval =
      static_cast<unsigned int>(absl::ToInt64Seconds(kTlsReloadInterval));
  auto provider =
      std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          files.key_file, files.cert_file, files.client_ca_file, interval);
  grpc::experimental::TlsServerCredentialsOptions options(provider);
  options.watch_identity_key_cert_pairs();
  if (files.mutual()) {
    options.watch_root_certs();
    options.set_cert_request_type(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(options);
}

std::string DescribeCertificate(const CertificateInfo& certificate) {
  return absl::StrCat(
      "subject ", certificate.subject, ", serial ", certificate.serial,
      ", expires ",
      absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", certificate.not_after,
                       absl::UTCTimeZone()));
}

}  // namespace sluice::tls
