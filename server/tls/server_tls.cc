// SPDX-License-Identifier: Apache-2.0
#include "server/tls/server_tls.h"

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <ctime>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/files.h"

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

// A memory BIO over `bytes` (read-only, no copy); freed with the object.
using BioPtr = std::unique_ptr<BIO, decltype(&BIO_free)>;
BioPtr ReadBio(const std::string& bytes) {
  return BioPtr(BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size())),
                BIO_free);
}

using X509Ptr = std::unique_ptr<X509, decltype(&X509_free)>;

// Every certificate of a PEM bundle, in order; blocks of other types (a
// key next to the chain) are skipped. Empty when the text holds none or a
// certificate block does not parse.
std::vector<X509Ptr> ReadCertificates(const std::string& pem) {
  std::vector<X509Ptr> out;
  BioPtr bio = ReadBio(pem);
  if (bio == nullptr) return out;
  while (true) {
    X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr,
                                   const_cast<char*>(""));
    if (cert == nullptr) break;
    out.emplace_back(cert, X509_free);
  }
  if (out.empty()) return out;
  // The loop ends at the end of the text, which OpenSSL reports as "no
  // start line"; anything else is a damaged block after good ones.
  const unsigned long last = ERR_peek_last_error();
  if (ERR_GET_LIB(last) == ERR_LIB_PEM &&
      ERR_GET_REASON(last) == PEM_R_NO_START_LINE) {
    ERR_clear_error();
    return out;
  }
  out.clear();
  return out;
}

std::string PemOf(X509* cert) {
  BioPtr bio(BIO_new(BIO_s_mem()), BIO_free);
  if (bio == nullptr || PEM_write_bio_X509(bio.get(), cert) != 1) return "";
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size > 0 ? size : 0));
}

std::string PemOf(EVP_PKEY* key) {
  BioPtr bio(BIO_new(BIO_s_mem()), BIO_free);
  if (bio == nullptr ||
      PEM_write_bio_PrivateKey(bio.get(), key, nullptr, nullptr, 0, nullptr,
                               nullptr) != 1) {
    return "";
  }
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size > 0 ? size : 0));
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

absl::StatusOr<ServerTlsPem> ReadServerTlsFiles(const ServerTlsFiles& files) {
  if (absl::Status s = ValidateServerTlsFlags(files); !s.ok()) return s;
  if (!files.enabled()) {
    return absl::InvalidArgumentError("TLS is off: no --tls-cert");
  }
  ServerTlsPem pem;
  const struct {
    const char* flag;
    const std::string* path;
    std::string* out;
  } kFiles[] = {{"--tls-cert", &files.cert_file, &pem.cert_chain},
                {"--tls-key", &files.key_file, &pem.key},
                {"--tls-client-ca", &files.client_ca_file, &pem.client_ca}};
  for (const auto& f : kFiles) {
    if (f.path->empty()) continue;
    absl::StatusOr<std::string> bytes =
        base::ReadRegularFile(*f.path, kMaxTlsFileBytes);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.flag, " ", *f.path, ": cannot read it: ", bytes.status().message()));
    }
    *f.out = *std::move(bytes);
  }
  return pem;
}

absl::StatusOr<LoadedContext> LoadServerContext(const ServerTlsFiles& files,
                                                const ServerTlsPem& pem) {
  if (absl::Status s = ValidateServerTlsFlags(files); !s.ok()) return s;
  if (!files.enabled()) {
    return absl::InvalidArgumentError("TLS is off: no --tls-cert");
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
  LoadedContext loaded;

  std::vector<X509Ptr> chain = ReadCertificates(pem.cert_chain);
  if (chain.empty() || SSL_CTX_use_certificate(ctx, chain[0].get()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-cert ", files.cert_file, ": not a PEM certificate chain",
        pem.cert_chain.empty() ? " (the file is empty)" : "", ": ",
        OpenSslErrors()));
  }
  std::string chain_pem;
  for (size_t i = 0; i < chain.size(); ++i) {
    absl::StrAppend(&chain_pem, PemOf(chain[i].get()));
    if (i == 0) continue;
    // add1: the context takes its own reference.
    if (SSL_CTX_add1_chain_cert(ctx, chain[i].get()) != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls-cert ", files.cert_file,
                       ": certificate ", i + 1,
                       " of the chain is unusable: ", OpenSslErrors()));
    }
  }

  BioPtr key_bio = ReadBio(pem.key);
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      key_bio == nullptr ? nullptr
                         : PEM_read_bio_PrivateKey(key_bio.get(), nullptr,
                                                   NoPassphrase, nullptr),
      EVP_PKEY_free);
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-key ", files.key_file,
        ": not a PEM private key (or one with a passphrase)",
        pem.key.empty() ? " (the file is empty)" : "", ": ", OpenSslErrors()));
  }
  const auto mismatch = [&] {
    ERR_clear_error();
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-key ", files.key_file,
                     " does not match the certificate in --tls-cert ",
                     files.cert_file));
  };
  if (SSL_CTX_use_PrivateKey(ctx, key.get()) != 1) return mismatch();
  if (SSL_CTX_check_private_key(ctx) != 1) return mismatch();
  loaded.identity_pem = PemOf(key.get());
  if (loaded.identity_pem.empty() || chain_pem.empty()) {
    return absl::InternalError(
        absl::StrCat("cannot re-encode the certificate pair: ",
                     OpenSslErrors()));
  }
  absl::StrAppend(&loaded.identity_pem, chain_pem);

  if (files.mutual()) {
    std::vector<X509Ptr> cas = ReadCertificates(pem.client_ca);
    if (cas.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls-client-ca ", files.client_ca_file,
                       ": not a PEM CA bundle: ", OpenSslErrors()));
    }
    X509_STORE* store = SSL_CTX_get_cert_store(ctx);
    // The CA names go in the CertificateRequest, so a client with several
    // certificates picks one this server trusts.
    STACK_OF(X509_NAME)* names = sk_X509_NAME_new_null();
    for (const X509Ptr& ca : cas) {
      // add_cert takes its own reference; a duplicate is not an error.
      X509_STORE_add_cert(store, ca.get());
      if (names != nullptr) {
        if (X509_NAME* name = X509_NAME_dup(X509_get_subject_name(ca.get()))) {
          if (sk_X509_NAME_push(names, name) == 0) X509_NAME_free(name);
        }
      }
      absl::StrAppend(&loaded.client_ca_pem, PemOf(ca.get()));
    }
    ERR_clear_error();
    if (names != nullptr) SSL_CTX_set_client_CA_list(ctx, names);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                       nullptr);
  }
  // Needed for session resumption once client certificates are verified.
  static constexpr unsigned char kSessionContext[] = "sluice";
  SSL_CTX_set_session_id_context(ctx, kSessionContext,
                                 sizeof(kSessionContext) - 1);
  ERR_clear_error();
  loaded.certificate = Describe(SSL_CTX_get0_certificate(ctx));
  loaded.context = std::move(context);
  return loaded;
}

absl::StatusOr<LoadedContext> LoadServerContext(const ServerTlsFiles& files) {
  absl::StatusOr<ServerTlsPem> pem = ReadServerTlsFiles(files);
  if (!pem.ok()) return pem.status();
  return LoadServerContext(files, *pem);
}

std::string DescribeCertificate(const CertificateInfo& certificate) {
  return absl::StrCat(
      "subject ", certificate.subject, ", serial ", certificate.serial,
      ", expires ",
      absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", certificate.not_after,
                       absl::UTCTimeZone()));
}

}  // namespace sluice::tls
