// SPDX-License-Identifier: Apache-2.0
// TLS of a real sluiced (--tls-cert, --tls-key, --tls-client-ca) with real
// certificates made by openssl: the data gRPC API through the SDK, the
// admin API through sluicectl and the HTTP API through curl; mutual TLS;
// a client trusting another CA; a certificate rotated in place and by a
// Kubernetes-style symlink swap, served without a restart; bad files.

#include <sys/wait.h>
#include <unistd.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sluice/client/client.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/port_file.h"
#include "tests/testing/sluiced_process.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_certs.h"
#include "tests/testing/wait_for.h"

namespace sluice::testing {
namespace {

using ::testing::HasSubstr;

constexpr absl::Duration kRotationWait = absl::Seconds(30);

class TlsIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    ASSERT_TRUE(certs_.ok()) << certs_.error();
  }

  // Starts sluiced with the HTTP API and `flags`.
  void Start(std::vector<std::string> flags) {
    flags.push_back("--http-listen=127.0.0.1:0");
    std::string error;
    ASSERT_TRUE(sluiced_.Start("policies: []\n", flags, "", &error)) << error;
  }
  std::vector<std::string> TlsFlags(bool mutual = false) const {
    std::vector<std::string> flags = {"--tls-cert=" + certs_.server_cert(),
                                      "--tls-key=" + certs_.server_key()};
    if (mutual) flags.push_back("--tls-client-ca=" + certs_.ca_cert());
    return flags;
  }
  int http_port() const { return PortOf(sluiced_.listener("http")); }

  // Whether an SDK client with `tls` gets Sluice's own answer.
  bool SdkDecides(const client::TlsOptions& tls) {
    client::ClientOptions options;
    options.target = sluiced_.target();
    options.tls = tls;
    options.acquire_timeout = absl::Seconds(2);
    absl::StatusOr<std::unique_ptr<client::Client>> c =
        client::Client::Create(options);
    if (!c.ok()) {
      ADD_FAILURE() << c.status();
      return false;
    }
    // The first call may race the connection; a refused one never decides.
    for (int i = 0; i < 3; ++i) {
      if (!(*c)->Acquire("inventory").decided_locally()) return true;
    }
    return false;
  }
  client::TlsOptions TrustCa() const {
    client::TlsOptions tls;
    tls.ca_file = certs_.ca_cert();
    return tls;
  }
  client::TlsOptions WithClientCert() const {
    client::TlsOptions tls = TrustCa();
    tls.cert_file = certs_.client_cert();
    tls.key_file = certs_.client_key();
    return tls;
  }

  // sluicectl list with `tls_flags`; its exit code.
  int Sluicectl(const std::string& tls_flags) const {
    return RunCommand(absl::StrCat(kSluicectlPath, " --target ",
                                   sluiced_.admin_target(), " --timeout 3s ",
                                   tls_flags, " list"))
        .exit_code;
  }
  std::string CaFlag(const std::string& ca) const { return "--tls-ca " + ca; }
  std::string ClientCertFlags() const {
    return absl::StrCat(CaFlag(certs_.ca_cert()), " --tls-cert ",
                        certs_.client_cert(), " --tls-key ",
                        certs_.client_key());
  }

  // curl GET /v1/health on the HTTP API with `flags`: the status, or "000"
  // when no answer came (curl's own code for that).
  std::string Curl(const std::string& scheme, const std::string& flags) const {
    // The status is the last three characters (curl's errors go first).
    const std::string out =
        RunCommand(absl::StrCat("curl -sS -m 5 -o /dev/null -w '%{http_code}' ",
                                flags, " ", scheme,
                                "://127.0.0.1:", http_port(), "/v1/health"))
            .output;
    return out.size() >= 3 ? out.substr(out.size() - 3) : out;
  }

  TempDir dir_{"sluice_tls"};
  TestCerts certs_{dir_.path()};
  SluicedProcess sluiced_;
};

TEST_F(TlsIntegrationTest, EveryListenerServesTls) {
  sluiced_.set_channel_credentials([&] {
    grpc::SslCredentialsOptions o;
    o.pem_root_certs = ReadFile(certs_.ca_cert());
    return grpc::SslCredentials(o);
  }());
  Start(TlsFlags());
  EXPECT_TRUE(SdkDecides(TrustCa()));
  EXPECT_FALSE(SdkDecides(client::TlsOptions()));  // plaintext
  EXPECT_EQ(Sluicectl(CaFlag(certs_.ca_cert())), 0);
  EXPECT_EQ(Sluicectl(""), 3);  // plaintext: unreachable
  EXPECT_EQ(Curl("https", "--cacert " + certs_.ca_cert()), "200");
  EXPECT_EQ(Curl("http", ""), "000");
  // The certificate sluiced serves is the one made here, on every port.
  EXPECT_EQ(certs_.PeerSerial(sluiced_.port(), true), certs_.server_serial());
  EXPECT_EQ(certs_.PeerSerial(sluiced_.admin_port(), true),
            certs_.server_serial());
  EXPECT_EQ(certs_.PeerSerial(http_port(), false), certs_.server_serial());
  // Expires in two days, as made.
  const double expiry =
      sluiced_.Metric("sluice_tls_certificate_expiry_timestamp_seconds");
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  EXPECT_GT(expiry, now + 86400);
  EXPECT_LT(expiry, now + 3 * 86400);
  const std::string log = sluiced_.Log();
  EXPECT_THAT(log, HasSubstr("TLS certificate"));
  EXPECT_THAT(log, HasSubstr("CN=localhost"));
  EXPECT_THAT(log, HasSubstr("stays plaintext"));
}

TEST_F(TlsIntegrationTest, MutualTlsRefusesClientsWithoutACertificate) {
  Start(TlsFlags(/*mutual=*/true));
  // Without a client certificate: refused on all three APIs.
  EXPECT_FALSE(SdkDecides(TrustCa()));
  EXPECT_EQ(Sluicectl(CaFlag(certs_.ca_cert())), 3);
  EXPECT_EQ(Curl("https", "--cacert " + certs_.ca_cert()), "000");
  // A certificate of another CA: refused too.
  client::TlsOptions intruder = TrustCa();
  intruder.cert_file = certs_.wrong_client_cert();
  intruder.key_file = certs_.wrong_client_key();
  EXPECT_FALSE(SdkDecides(intruder));
  EXPECT_EQ(Curl("https", absl::StrCat("--cacert ", certs_.ca_cert(),
                                       " --cert ", certs_.wrong_client_cert(),
                                       " --key ", certs_.wrong_client_key())),
            "000");
  // With the CA's client certificate: served.
  EXPECT_TRUE(SdkDecides(WithClientCert()));
  EXPECT_EQ(Sluicectl(ClientCertFlags()), 0);
  EXPECT_EQ(Curl("https", absl::StrCat("--cacert ", certs_.ca_cert(),
                                       " --cert ", certs_.client_cert(),
                                       " --key ", certs_.client_key())),
            "200");
}

TEST_F(TlsIntegrationTest, ClientTrustingAnotherCaFails) {
  Start(TlsFlags());
  client::TlsOptions wrong;
  wrong.ca_file = certs_.wrong_ca_cert();
  EXPECT_FALSE(SdkDecides(wrong));
  EXPECT_EQ(Sluicectl(CaFlag(certs_.wrong_ca_cert())), 3);
  EXPECT_EQ(Curl("https", "--cacert " + certs_.wrong_ca_cert()), "000");
  EXPECT_TRUE(SdkDecides(TrustCa()));  // the same server, the right CA
}

// Waits until every listener presents the certificate `serial`.
void ExpectServed(const TestCerts& certs, const SluicedProcess& sluiced,
                  int http_port, const std::string& serial) {
  for (const auto& [port, h2] : {std::pair<int, bool>{sluiced.port(), true},
                                 {sluiced.admin_port(), true},
                                 {http_port, false}}) {
    std::string seen;
    EXPECT_TRUE(WaitFor(
                    [&] {
                      seen = certs.PeerSerial(port, h2);
                      return seen == serial;
                    },
                    kRotationWait, absl::Milliseconds(250))
                    .has_value())
        << "port " << port << " still serves " << seen << ", not " << serial;
  }
}

TEST_F(TlsIntegrationTest, CertificateRewrittenInPlaceIsServedWithoutRestart) {
  Start(TlsFlags());
  const pid_t pid = sluiced_.pid();
  const std::string before = certs_.server_serial();
  ASSERT_TRUE(certs_.ReissueServer(certs_.server_cert(), certs_.server_key()))
      << certs_.error();
  ASSERT_NE(certs_.server_serial(), before);
  ExpectServed(certs_, sluiced_, http_port(), certs_.server_serial());
  EXPECT_EQ(sluiced_.pid(), pid);
  EXPECT_TRUE(SdkDecides(TrustCa()));
  EXPECT_THAT(sluiced_.Log(), HasSubstr("TLS certificate reloaded"));
}

// Kubernetes mounts a Secret as tls.crt -> ..data/tls.crt, ..data ->
// ..TIMESTAMP/, and rotates by pointing ..data at a new directory.
TEST_F(TlsIntegrationTest, SymlinkSwapAsKubernetesDoesIsServed) {
  const std::string mount = certs_.File("mount");
  ASSERT_EQ(
      RunCommand(
          absl::StrCat("mkdir -p ", mount, "/..v1 && cp ", certs_.server_cert(),
                       " ", mount, "/..v1/tls.crt && cp ", certs_.server_key(),
                       " ", mount, "/..v1/tls.key && ln -s ..v1 ", mount,
                       "/..data && ln -s ", "..data/tls.crt ", mount,
                       "/tls.crt && ln -s ..data/tls.key ", mount, "/tls.key"))
          .exit_code,
      0);
  Start(
      {"--tls-cert=" + mount + "/tls.crt", "--tls-key=" + mount + "/tls.key"});
  ASSERT_TRUE(
      certs_.ReissueServer(certs_.File("next.crt"), certs_.File("next.key")));
  ASSERT_EQ(
      RunCommand(absl::StrCat("mkdir ", mount, "/..v2 && cp ",
                              certs_.File("next.crt"), " ", mount,
                              "/..v2/tls.crt && cp ", certs_.File("next.key"),
                              " ", mount, "/..v2/tls.key && ln -s ..v2 ", mount,
                              "/..data_tmp && mv -T ", mount, "/..data_tmp ",
                              mount, "/..data && rm -rf ", mount, "/..v1"))
          .exit_code,
      0);
  ExpectServed(certs_, sluiced_, http_port(), certs_.server_serial());
}

// The serial a new handshake gets on each listener stays `serial` for
// `hold`: gRPC (data and admin ports, ALPN h2) and HTTPS alike.
void ExpectStillServed(const TestCerts& certs, const SluicedProcess& sluiced,
                       int http_port, const std::string& serial,
                       absl::Duration hold, const std::string& what) {
  const absl::Time end = absl::Now() + hold;
  do {
    EXPECT_EQ(certs.PeerSerial(sluiced.port(), true), serial) << what;
    EXPECT_EQ(certs.PeerSerial(sluiced.admin_port(), true), serial) << what;
    EXPECT_EQ(certs.PeerSerial(http_port, false), serial) << what;
  } while (absl::Now() < end && !::testing::Test::HasFailure());
}

// Every way a rotation can leave the files broken, one after the other on
// one running sluiced: it neither aborts nor hangs, counts each failed
// reload, and new gRPC and HTTPS handshakes keep getting the previous
// certificate; then the good pair is served on every listener.
TEST_F(TlsIntegrationTest, BadFilesKeepThePreviousPairOnEveryListener) {
  const std::string cert = certs_.File("live.crt");
  const std::string key = certs_.File("live.key");
  const auto copy = [](const std::string& from, const std::string& to) {
    return RunCommand(absl::StrCat("rm -rf ", to, " && cp ", from, " ", to))
               .exit_code == 0;
  };
  ASSERT_TRUE(copy(certs_.server_cert(), cert));
  ASSERT_TRUE(copy(certs_.server_key(), key));
  Start({"--tls-cert=" + cert, "--tls-key=" + key});
  const pid_t pid = sluiced_.pid();
  const std::string serial = certs_.server_serial();
  ASSERT_TRUE(
      certs_.ReissueServer(certs_.File("next.crt"), certs_.File("next.key")));
  const std::string next_serial = certs_.server_serial();
  ASSERT_NE(next_serial, serial);
  const std::string failures_metric = "sluice_tls_reloads_total{result=\"error\"}";

  const std::vector<std::pair<std::string, std::string>> cases = {
      {"empty key", absl::StrCat(": > ", key)},
      {"certificate path is a directory",
       absl::StrCat("cp ", certs_.server_key(), " ", key, " && rm ", cert,
                    " && mkdir ", cert)},
      {"certificate is a FIFO",
       absl::StrCat("rmdir ", cert, " && mkfifo ", cert)},
      {"garbage certificate",
       absl::StrCat("rm ", cert,
                    " && printf -- '-----BEGIN CERTIFICATE-----\\nbm90IGEgY2VydA"
                    "==\\n-----END CERTIFICATE-----\\n' > ",
                    cert)},
      {"key of another certificate",
       absl::StrCat("cp ", certs_.server_cert(), " ", cert, " && cp ",
                    certs_.client_key(), " ", key)},
      {"key written before its certificate",
       absl::StrCat("cp ", certs_.File("next.key"), " ", key)},
  };
  double failures = 0;
  for (const auto& [what, command] : cases) {
    ASSERT_EQ(RunCommand(command).exit_code, 0) << what;
    ++failures;
    EXPECT_TRUE(WaitFor([&] { return sluiced_.Metric(failures_metric) >= failures; },
                        kRotationWait, absl::Milliseconds(100))
                    .has_value())
        << what << ": no failed reload counted";
    // gRPC re-reads its copy every second: two seconds would show a bad
    // pair taken.
    ExpectStillServed(certs_, sluiced_, http_port(), serial, absl::Seconds(2),
                      what);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, WNOHANG), 0)
        << what << ": sluiced is gone ("
        << (WIFSIGNALED(status) ? "signal " : "exit ")
        << (WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status))
        << ")";
  }
  EXPECT_EQ(sluiced_.Metric(failures_metric), failures);
  // The certificate follows its key: served on every listener.
  ASSERT_EQ(RunCommand(absl::StrCat("cp ", certs_.File("next.crt"), " ", cert))
                .exit_code,
            0);
  ExpectServed(certs_, sluiced_, http_port(), next_serial);
  EXPECT_TRUE(SdkDecides(TrustCa()));
  const std::string log = sluiced_.Log();
  EXPECT_THAT(log, HasSubstr("is a FIFO, not a regular file"));
  EXPECT_THAT(log, HasSubstr("is a directory, not a regular file"));
  EXPECT_THAT(log, HasSubstr("does not match the certificate"));
  EXPECT_THAT(log, HasSubstr("still serving the previous certificate"));
}

// A FIFO where the certificate was: the reloader refuses it without
// waiting, and SIGTERM still ends sluiced at once.
TEST_F(TlsIntegrationTest, FifoCertificateDoesNotHangShutdown) {
  const std::string cert = certs_.File("live.crt");
  ASSERT_EQ(RunCommand(absl::StrCat("cp ", certs_.server_cert(), " ", cert))
                .exit_code,
            0);
  Start({"--tls-cert=" + cert, "--tls-key=" + certs_.server_key()});
  ASSERT_EQ(RunCommand(absl::StrCat("rm ", cert, " && mkfifo ", cert)).exit_code,
            0);
  EXPECT_TRUE(WaitFor(
                  [&] {
                    return sluiced_.Metric(
                               "sluice_tls_reloads_total{result=\"error\"}") >=
                           1;
                  },
                  kRotationWait, absl::Milliseconds(100))
                  .has_value());
  const absl::Time stop = absl::Now();
  EXPECT_EQ(sluiced_.Terminate(), 0);
  const absl::Duration took = absl::Now() - stop;
  std::cout << "SIGTERM to exit with a FIFO certificate: "
            << absl::FormatDuration(took) << "\n";
  EXPECT_LT(took, absl::Seconds(5));
}

// gRPC gets a private copy of the validated pair only when one of its
// listeners is TCP; the copy goes when sluiced exits.
TEST_F(TlsIntegrationTest, GrpcCopyOnlyForTcpListenersRemovedAtExit) {
  const std::string tmp = certs_.File("tmp");
  ASSERT_EQ(RunCommand("mkdir " + tmp).exit_code, 0);
  sluiced_.set_extra_env({"TMPDIR=" + tmp});
  const auto copies = [&] {
    return RunCommand(absl::StrCat("ls -A ", tmp)).output;
  };
  Start(TlsFlags());
  EXPECT_THAT(copies(), HasSubstr("sluiced-tls-"));
  EXPECT_EQ(RunCommand(absl::StrCat("stat -c %a ", tmp, "/sluiced-tls-*"))
                .output,
            "700\n");
  EXPECT_EQ(
      RunCommand(absl::StrCat("stat -c %a ", tmp, "/sluiced-tls-*/identity.pem"))
          .output,
      "600\n");
  EXPECT_EQ(sluiced_.Terminate(), 0);
  EXPECT_EQ(copies(), "");

  // Both gRPC listeners on Unix sockets: no gRPC credentials, no copy; the
  // HTTP API still serves TLS.
  sluiced_.set_listen("unix:" + certs_.File("d.sock"),
                      "unix:" + certs_.File("a.sock"));
  Start(TlsFlags());
  EXPECT_EQ(copies(), "");
  EXPECT_EQ(Curl("https", "--cacert " + certs_.ca_cert()), "200");
}

// A start that must fail: sluiced's exit code and log.
CommandResult StartFails(const std::vector<std::string>& flags) {
  std::string command =
      absl::StrCat(SluicedBinary(),
                   " --listen=127.0.0.1:0 --admin-listen=127.0.0.1:0 "
                   "--metrics-listen=127.0.0.1:0");
  for (const std::string& f : flags) absl::StrAppend(&command, " '", f, "'");
  return RunCommand(command);
}

TEST_F(TlsIntegrationTest, BadFilesStopTheStartNamingTheFlag) {
  // A key that is not the certificate's.
  CommandResult r = StartFails({"--tls-cert=" + certs_.server_cert(),
                                "--tls-key=" + certs_.client_key()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("--tls-key " + certs_.client_key() +
                                  " does not match the certificate in "
                                  "--tls-cert"));
  // No such certificate file.
  r = StartFails({"--tls-cert=" + certs_.File("missing.crt"),
                  "--tls-key=" + certs_.server_key()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("--tls-cert " + certs_.File("missing.crt") +
                                  ": cannot read it"));
  // A key given as the certificate.
  r = StartFails({"--tls-cert=" + certs_.server_key(),
                  "--tls-key=" + certs_.server_key()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("not a PEM certificate chain"));
  // A client CA that is not one.
  r = StartFails({"--tls-cert=" + certs_.server_cert(),
                  "--tls-key=" + certs_.server_key(),
                  "--tls-client-ca=" + certs_.server_key()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("--tls-client-ca"));
  // Half a pair is a usage error.
  r = StartFails({"--tls-cert=" + certs_.server_cert()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.output, HasSubstr("--tls-cert needs --tls-key"));
}

}  // namespace
}  // namespace sluice::testing
