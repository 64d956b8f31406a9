// SPDX-License-Identifier: Apache-2.0
// The TLS flags' checks, the startup check of the certificate files (a
// FIFO or a directory refused at once), the reloader that feeds the HTTP
// API and gRPC (driven by a manual Env, no thread): no bad pair reaches either,
// and gRPC's private copy; the client side's checks. Certificates made by
// openssl; no server runs.

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/app/options.h"
#include "server/tls/server_tls.h"
#include "server/tls/tls_reloader.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/manual_env.h"
#include "tests/testing/stats_recorder.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_certs.h"
#include "wire/tls.h"

namespace sluice {
namespace {

using ::testing::HasSubstr;
using testing::FakeClock;
using testing::ManualEnv;
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
  // The reloaders' looks at the files run when the test says.
  FakeClock clock_;
  ManualEnv env_{&clock_};
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
      tls::TlsReloader::Start(Files(), tls::kTlsReloadInterval, &env_);
  ASSERT_TRUE(reloader.ok()) << reloader.status();
  tls::TlsReloader& r = **reloader;
  const std::shared_ptr<SSL_CTX> first = r.context();
  EXPECT_EQ(env_.RunAll(), 1);  // nothing changed
  EXPECT_EQ(r.context(), first);
  EXPECT_EQ(r.stats().reloads, 0u);

  ASSERT_TRUE(certs_.ReissueServer(certs_.server_cert(), certs_.server_key()));
  // The next look is an interval after the last.
  clock_.Advance(tls::kTlsReloadInterval - absl::Seconds(1));
  EXPECT_EQ(env_.RunDue(), 0);
  EXPECT_EQ(r.stats().reloads, 0u);
  clock_.Advance(absl::Seconds(1));
  EXPECT_EQ(env_.RunDue(), 1);
  EXPECT_EQ(r.stats().reloads, 1u);
  EXPECT_EQ("serial=" + r.stats().certificate.serial, certs_.server_serial());
  const std::shared_ptr<SSL_CTX> second = r.context();
  EXPECT_NE(second, first);

  // Half a rotation: a new key without its certificate.
  TestCerts::Shell(
      "openssl genpkey -algorithm ec -pkeyopt "
      "ec_paramgen_curve:prime256v1 -out " +
      certs_.server_key());
  EXPECT_EQ(env_.RunAll(), 1);
  EXPECT_EQ(r.stats().reload_failures, 1u);
  EXPECT_EQ(r.stats().reloads, 1u);
  EXPECT_EQ(r.context(), second);
  EXPECT_EQ("serial=" + r.stats().certificate.serial, certs_.server_serial());
  EXPECT_EQ(env_.RunAll(), 1);  // unchanged since: not tried again
  EXPECT_EQ(r.stats().reload_failures, 1u);
}

// Its metrics are stats(): the certificate's notAfter and the reloads by
// result.
TEST_F(TlsFilesTest, ReloaderStatsAreItsMetrics) {
  absl::StatusOr<std::unique_ptr<tls::TlsReloader>> reloader =
      tls::TlsReloader::Start(Files(), tls::kTlsReloadInterval, &env_);
  ASSERT_TRUE(reloader.ok()) << reloader.status();
  tls::TlsReloader& r = **reloader;
  using sluice::testing::StatsRecorder;
  StatsRecorder before(r);
  EXPECT_EQ(before.Sum("sluice_tls_certificate_expiry_timestamp_seconds"),
            absl::ToUnixSeconds(r.stats().certificate.not_after));
  EXPECT_GT(before.Sum("sluice_tls_certificate_expiry_timestamp_seconds"), 0);
  EXPECT_EQ(before.Find("sluice_tls_reloads_total").size(), 2u);
  EXPECT_EQ(before.Sum("sluice_tls_reloads_total"), 0);

  ASSERT_TRUE(certs_.ReissueServer(certs_.server_cert(), certs_.server_key()));
  EXPECT_EQ(env_.RunAll(), 1);
  TestCerts::Shell(
      "openssl genpkey -algorithm ec -pkeyopt "
      "ec_paramgen_curve:prime256v1 -out " +
      certs_.server_key());
  EXPECT_EQ(env_.RunAll(), 1);
  StatsRecorder after(r);
  EXPECT_EQ(after.Sum("sluice_tls_reloads_total", {{"result", "ok"}}), 1);
  EXPECT_EQ(after.Sum("sluice_tls_reloads_total", {{"result", "error"}}), 1);
}

// The files sluiced reads, copied from certs_ so that a test can break them
// without touching the originals.
class TlsReloaderTest : public TlsFilesTest {
 protected:
  void SetUp() override {
    TlsFilesTest::SetUp();
    Copy(certs_.server_cert(), cert_);
    Copy(certs_.server_key(), key_);
  }
  static void Copy(const std::string& from, const std::string& to) {
    std::filesystem::remove_all(to);
    std::filesystem::copy_file(from, to);
  }
  static void Put(const std::string& path, const std::string& bytes) {
    std::filesystem::remove_all(path);
    std::ofstream(path, std::ios::binary) << bytes;
  }
  static std::string Slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  tls::ServerTlsFiles LiveFiles() const {
    tls::ServerTlsFiles files;
    files.cert_file = cert_;
    files.key_file = key_;
    return files;
  }
  const std::string cert_ = dir_.File("live.crt");
  const std::string key_ = dir_.File("live.key");
};

TEST_F(TlsReloaderTest, FifoAndDirectoryAreRefusedAtOnceNamingTheFlag) {
  ASSERT_EQ(::unlink(cert_.c_str()), 0);
  ASSERT_EQ(::mkfifo(cert_.c_str(), 0600), 0);
  // A blocking open would wait here for a writer that never comes.
  EXPECT_THAT(tls::LoadServerContext(LiveFiles()).status().message(),
              HasSubstr("--tls-cert " + cert_ + ": cannot read it: " + cert_ +
                        " is a FIFO, not a regular file"));
  ASSERT_EQ(::unlink(cert_.c_str()), 0);
  ASSERT_EQ(::mkdir(cert_.c_str(), 0700), 0);
  EXPECT_THAT(tls::LoadServerContext(LiveFiles()).status().message(),
              HasSubstr(cert_ + " is a directory, not a regular file"));
  Copy(certs_.server_cert(), cert_);
  Put(key_, "");
  EXPECT_THAT(tls::LoadServerContext(LiveFiles()).status().message(),
              HasSubstr("--tls-key " + key_ +
                        ": not a PEM private key (or one with a passphrase) "
                        "(the file is empty)"));
  Put(key_, Slurp(certs_.server_key()) + Slurp(certs_.server_cert()));
  EXPECT_TRUE(tls::LoadServerContext(LiveFiles()).ok());  // key + chain
}

// Every way a rotation can leave the files broken: the reloader counts a
// failure and neither the HTTP context nor gRPC's copy changes.
TEST_F(TlsReloaderTest, NoBadPairReachesHttpOrGrpc) {
  absl::StatusOr<std::unique_ptr<tls::TlsReloader>> reloader =
      tls::TlsReloader::Start(LiveFiles(), tls::kTlsReloadInterval, &env_);
  ASSERT_TRUE(reloader.ok()) << reloader.status();
  tls::TlsReloader& r = **reloader;
  ASSERT_TRUE(r.GrpcCredentials().ok());
  const std::string grpc_file = r.grpc_identity_file();
  ASSERT_FALSE(grpc_file.empty());
  const std::string grpc_pem = Slurp(grpc_file);
  const std::shared_ptr<SSL_CTX> context = r.context();
  const std::string serial = r.stats().certificate.serial;
  ASSERT_TRUE(
      certs_.ReissueServer(dir_.File("next.crt"), dir_.File("next.key")));

  struct Case {
    const char* what;
    std::function<void()> make;
  };
  const std::vector<Case> cases = {
      {"empty key", [&] { Put(key_, ""); }},
      {"certificate path is a directory",
       [&] {
         Copy(certs_.server_key(), key_);
         std::filesystem::remove_all(cert_);
         std::filesystem::create_directory(cert_);
       }},
      {"certificate is a FIFO",
       [&] {
         std::filesystem::remove_all(cert_);
         ASSERT_EQ(::mkfifo(cert_.c_str(), 0600), 0);
       }},
      {"garbage certificate",
       [&] {
         Put(cert_,
             "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n"
             "-----END CERTIFICATE-----\n");
       }},
      {"key of another certificate",
       [&] {
         Copy(certs_.server_cert(), cert_);
         Copy(certs_.client_key(), key_);
       }},
      {"key written before its certificate",
       [&] { Copy(dir_.File("next.key"), key_); }},
  };
  uint64_t failures = 0;
  for (const Case& c : cases) {
    c.make();
    EXPECT_EQ(env_.RunAll(), 1);
    EXPECT_EQ(r.stats().reload_failures, ++failures) << c.what;
    EXPECT_EQ(r.stats().reloads, 0u) << c.what;
    EXPECT_EQ(r.context(), context) << c.what;
    EXPECT_EQ(r.stats().certificate.serial, serial) << c.what;
    EXPECT_EQ(Slurp(grpc_file), grpc_pem) << c.what;
  }
  // The certificate follows its key: a good pair, served by both.
  Copy(dir_.File("next.crt"), cert_);
  EXPECT_EQ(env_.RunAll(), 1);
  EXPECT_EQ(r.stats().reloads, 1u);
  EXPECT_EQ("serial=" + r.stats().certificate.serial, certs_.server_serial());
  EXPECT_NE(r.context(), context);
  const std::string next_pem = Slurp(grpc_file);
  EXPECT_NE(next_pem, grpc_pem);
  // gRPC's copy is the validated pair, re-encoded: key first, then chain.
  EXPECT_TRUE(absl::StartsWith(next_pem, "-----BEGIN PRIVATE KEY-----"));
  EXPECT_THAT(next_pem, HasSubstr("-----BEGIN CERTIFICATE-----"));
}

TEST_F(TlsReloaderTest, GrpcCopyIsPrivateLaterEachTimeAndRemovedAtTheEnd) {
  std::string grpc_file;
  {
    absl::StatusOr<std::unique_ptr<tls::TlsReloader>> reloader =
        tls::TlsReloader::Start(LiveFiles(), tls::kTlsReloadInterval, &env_);
    ASSERT_TRUE(reloader.ok()) << reloader.status();
    tls::TlsReloader& r = **reloader;
    EXPECT_EQ(r.grpc_identity_file(), "");  // not made until asked for
    absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> first =
        r.GrpcCredentials();
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(*r.GrpcCredentials(), *first);  // made once
    grpc_file = r.grpc_identity_file();
    const std::string grpc_dir =
        std::filesystem::path(grpc_file).parent_path().string();
    struct stat st {};
    ASSERT_EQ(::stat(grpc_dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    ASSERT_EQ(::stat(grpc_file.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    // Two rotations within a second: each file's mtime is whole seconds
    // above the last, so gRPC's check of the seconds sees each one.
    time_t last = st.st_mtim.tv_sec;
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(certs_.ReissueServer(cert_, key_));
      EXPECT_EQ(env_.RunAll(), 1);
      ASSERT_EQ(r.stats().reloads, static_cast<uint64_t>(i + 1));
      ASSERT_EQ(::stat(grpc_file.c_str(), &st), 0);
      EXPECT_GT(st.st_mtim.tv_sec, last);
      last = st.st_mtim.tv_sec;
    }
  }
  EXPECT_FALSE(std::filesystem::exists(
      std::filesystem::path(grpc_file).parent_path()));
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

// The client side reads its files as the server does: a FIFO given as the
// CA is refused at once instead of waiting for a writer that never comes.
TEST_F(TlsFilesTest, ClientCredentialsRefuseAFifoWithoutBlocking) {
  const std::string fifo = certs_.File("ca.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  wire::ClientTlsFiles files;
  files.ca_file = fifo;
  EXPECT_THAT(wire::MakeChannelCredentials(files).status().message(),
              HasSubstr("--tls-ca " + fifo + ": cannot read it: " + fifo +
                        " is a FIFO, not a regular file"));
}

}  // namespace
}  // namespace sluice
