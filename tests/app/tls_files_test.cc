// The TLS flags' checks, the startup check of the certificate files and
// the HTTP API's reloader (driven by CheckNow, no thread), and the client
// side's checks, with certificates made by openssl. No server runs.

#include <memory>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/app/options.h"
#include "server/tls/server_tls.h"
#include "server/tls/tls_reloader.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_certs.h"
#include "wire/tls.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;
using testing::TestCerts;

TEST(TlsFlagsTest, CertAndKeyComeTogetherAndTheClientCaNeedsThem) {
  app::ServerOptions options;
  EXPECT_TRUE(app::ValidateOptions(options).ok());  // plaintext
  options.tls_cert_file = "/etc/tls/tls.crt";
  EXPECT_THAT(app::ValidateOptions(options).message(),
              HasSubstr("--tls-cert needs --tls-key"));
  options.tls_cert_file = "";
  options.tls_key_file = "/etc/tls/tls.key";
  EXPECT_THAT(app::ValidateOptions(options).message(),
              HasSubstr("--tls-key needs --tls-cert"));
  options.tls_key_file = "";
  options.tls_client_ca_file = "/etc/tls/ca.crt";
  EXPECT_THAT(app::ValidateOptions(options).message(),
              HasSubstr("--tls-client-ca needs --tls-cert and --tls-key"));
  options.tls_cert_file = "/etc/tls/tls.crt";
  options.tls_key_file = "/etc/tls/tls.key";
  EXPECT_TRUE(app::ValidateOptions(options).ok());  // files read at start
}

class TlsFilesTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(certs_.ok()) << certs_.error(); }
  tls::ServerTlsFiles Files() const {
    tls::ServerTlsFiles files;
    files.cert_file = certs_.server_cert();
    files.key_file = certs_.server_key();
    return files;
  }
  TempDir dir_{"sluice_tls_files"};
  TestCerts certs_{dir_.path()};
};

TEST_F(TlsFilesTest, LoadsAndDescribesTheCertificate) {
  absl::StatusOr<tls::LoadedContext> loaded = tls::LoadServerContext(Files());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_NE(loaded->context, nullptr);
  EXPECT_EQ(loaded->certificate.subject, "CN=localhost");
  EXPECT_EQ("serial=" + loaded->certificate.serial, certs_.server_serial());
  EXPECT_GT(loaded->certificate.not_after, absl::Now() + absl::Hours(24));
  EXPECT_LT(loaded->certificate.not_after, absl::Now() + absl::Hours(72));
}

TEST_F(TlsFilesTest, RefusesAKeyOfAnotherCertificate) {
  tls::ServerTlsFiles files = Files();
  files.key_file = certs_.client_key();
  EXPECT_THAT(tls::LoadServerContext(files).status().message(),
              HasSubstr("--tls-key " + certs_.client_key() +
                        " does not match the certificate in --tls-cert"));
}

TEST_F(TlsFilesTest, NamesTheFlagOfAMissingOrWrongFile) {
  tls::ServerTlsFiles files = Files();
  files.key_file = certs_.File("nope.key");
  EXPECT_THAT(
      tls::LoadServerContext(files).status().message(),
      HasSubstr("--tls-key " + certs_.File("nope.key") + ": cannot read it"));
  files = Files();
  files.client_ca_file = certs_.server_key();
  EXPECT_THAT(tls::LoadServerContext(files).status().message(),
              HasSubstr("--tls-client-ca " + certs_.server_key()));
  files.client_ca_file = certs_.ca_cert();
  EXPECT_TRUE(tls::LoadServerContext(files).ok());
}

TEST_F(TlsFilesTest,
       ReloaderSwapsInAChangedCertificateAndKeepsTheOldOnAFailure) {
  absl::StatusOr<std::unique_ptr<tls::TlsReloader>> reloader =
      tls::TlsReloader::Start(Files(), absl::ZeroDuration());
  ASSERT_TRUE(reloader.ok()) << reloader.status();
  tls::TlsReloader& r = **reloader;
  const std::shared_ptr<SSL_CTX> first = r.context();
  r.CheckNow();  // nothing changed
  EXPECT_EQ(r.context(), first);
  EXPECT_EQ(r.stats().reloads, 0u);

  ASSERT_TRUE(certs_.ReissueServer(certs_.server_cert(), certs_.server_key()));
  r.CheckNow();
  EXPECT_EQ(r.stats().reloads, 1u);
  EXPECT_EQ("serial=" + r.stats().certificate.serial, certs_.server_serial());
  const std::shared_ptr<SSL_CTX> second = r.context();
  EXPECT_NE(second, first);

  // Half a rotation: a new key without its certificate.
  TestCerts::Shell(
      "openssl genpkey -algorithm ec -pkeyopt "
      "ec_paramgen_curve:prime256v1 -out " +
      certs_.server_key());
  r.CheckNow();
  EXPECT_EQ(r.stats().reload_failures, 1u);
  EXPECT_EQ(r.stats().reloads, 1u);
  EXPECT_EQ(r.context(), second);
  EXPECT_EQ("serial=" + r.stats().certificate.serial, certs_.server_serial());
  r.CheckNow();  // unchanged since: not tried again
  EXPECT_EQ(r.stats().reload_failures, 1u);
}

TEST_F(TlsFilesTest, ClientCredentialsNameTheSettingAtFault) {
  wire::ClientTlsFiles files;
  EXPECT_TRUE(wire::MakeChannelCredentials(files).ok());  // plaintext
  files.server_name = "sluice.example";
  EXPECT_THAT(wire::MakeChannelCredentials(files).status().message(),
              HasSubstr("--tls-server-name needs TLS"));
  files = {};
  files.cert_file = certs_.client_cert();
  EXPECT_THAT(wire::MakeChannelCredentials(files).status().message(),
              HasSubstr("--tls-cert needs --tls-key"));
  files = {};
  files.ca_file = certs_.File("missing-ca.crt");
  EXPECT_THAT(wire::MakeChannelCredentials(files).status().message(),
              HasSubstr("--tls-ca " + certs_.File("missing-ca.crt") +
                        ": cannot read it"));
  files.ca_file = certs_.client_key();  // a key, not a certificate
  EXPECT_THAT(wire::MakeChannelCredentials(files).status().message(),
              HasSubstr("not a PEM file holding a CERTIFICATE"));
  files.ca_file = certs_.ca_cert();
  files.cert_file = certs_.client_cert();
  files.key_file = certs_.client_key();
  EXPECT_TRUE(wire::MakeChannelCredentials(files).ok());
}

}  // namespace
}  // namespace sluice
