// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_REDIS_TLS_H_
#define SLUICE_TESTS_TESTING_REDIS_TLS_H_

// Redis over TLS for integration tests, the way a pod reaches it: a
// redis-server with only a TLS port (client certificates required), and a
// stunnel in client mode that listens in plaintext on loopback and speaks
// TLS to it. Certificates are made with the openssl command line in a test's
// directory: a CA, a server certificate for 127.0.0.1, a client
// certificate, and a second, unrelated CA for the "wrong CA" cases.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "tests/testing/child_process.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/sluiced_process.h"
#include "tests/testing/wait_for.h"

namespace sluice::testing {

// The PEM files under one directory.
struct TlsFiles {
  std::string ca_cert, ca_key;      // the CA both certificates chain to
  std::string server_cert, server_key;  // CN and IP SAN 127.0.0.1
  std::string client_cert, client_key;  // CN sluice, clientAuth
  std::string other_ca_cert;        // an unrelated CA
};

// Makes the certificates in `dir` (valid for two days, 2048-bit RSA). False
// with openssl's output in `error` when a step fails.
inline bool MakeTlsFiles(const std::string& dir, TlsFiles* files,
                         std::string* error) {
  files->ca_cert = dir + "/ca.crt";
  files->ca_key = dir + "/ca.key";
  files->server_cert = dir + "/server.crt";
  files->server_key = dir + "/server.key";
  files->client_cert = dir + "/client.crt";
  files->client_key = dir + "/client.key";
  files->other_ca_cert = dir + "/other-ca.crt";
  WriteFile(dir + "/server.ext",
            "subjectAltName = IP:127.0.0.1\n"
            "extendedKeyUsage = serverAuth\n");
  WriteFile(dir + "/client.ext", "extendedKeyUsage = clientAuth\n");
  const std::string d = "'" + dir + "'";
  const std::vector<std::string> steps = {
      absl::StrCat("openssl req -x509 -newkey rsa:2048 -nodes -days 2 "
                   "-subj '/CN=sluice test CA' -keyout ",
                   d, "/ca.key -out ", d, "/ca.crt"),
      absl::StrCat("openssl req -x509 -newkey rsa:2048 -nodes -days 2 "
                   "-subj '/CN=some other CA' -keyout ",
                   d, "/other-ca.key -out ", d, "/other-ca.crt"),
      absl::StrCat("openssl req -newkey rsa:2048 -nodes -subj '/CN=127.0.0.1' "
                   "-keyout ",
                   d, "/server.key -out ", d, "/server.csr"),
      absl::StrCat("openssl x509 -req -days 2 -CA ", d, "/ca.crt -CAkey ", d,
                   "/ca.key -CAcreateserial -in ", d, "/server.csr -out ", d,
                   "/server.crt -extfile ", d, "/server.ext"),
      absl::StrCat("openssl req -newkey rsa:2048 -nodes -subj '/CN=sluice' "
                   "-keyout ",
                   d, "/client.key -out ", d, "/client.csr"),
      absl::StrCat("openssl x509 -req -days 2 -CA ", d, "/ca.crt -CAkey ", d,
                   "/ca.key -CAcreateserial -in ", d, "/client.csr -out ", d,
                   "/client.crt -extfile ", d, "/client.ext"),
  };
  for (const std::string& step : steps) {
    const CommandResult r = RunCommand(step);
    if (r.exit_code != 0) {
      *error = absl::StrCat(step, " failed (", r.exit_code, "):\n", r.output);
      return false;
    }
  }
  return true;
}

// `redis-cli --tls` against `port` with the client certificate: the
// command's output, trimmed of the trailing newline.
inline std::string TlsRedisCli(const TlsFiles& files, int port,
                               const std::string& args) {
  CommandResult r = RunCommand(absl::StrCat(
      "redis-cli -h 127.0.0.1 -p ", port, " --tls --cacert ", files.ca_cert,
      " --cert ", files.client_cert, " --key ", files.client_key, " ", args));
  while (!r.output.empty() && r.output.back() == '\n') r.output.pop_back();
  return r.output;
}

// redis-server with a TLS port only (--port 0) that requires a client
// certificate signed by the CA. Not thread-safe.
class TlsRedisServer {
 public:
  TlsRedisServer(const std::string& dir, TlsFiles files)
      : dir_(dir), files_(std::move(files)), port_(FreePort()) {}

  bool Start(std::string* error) {
    const std::vector<std::string> args = {
        "/usr/bin/redis-server", "--port", "0", "--tls-port",
        std::to_string(port_), "--bind", "127.0.0.1", "--tls-cert-file",
        files_.server_cert, "--tls-key-file", files_.server_key,
        "--tls-ca-cert-file", files_.ca_cert, "--tls-auth-clients", "yes",
        "--save", "", "--appendonly", "no", "--loglevel", "warning"};
    if (!process_.Start(args, dir_ + "/redis.log")) {
      *error = "cannot spawn redis-server";
      return false;
    }
    if (!WaitFor([&] { return Cli("PING") == "PONG" || process_.Exited(); },
                 absl::Seconds(10), absl::Milliseconds(50)) ||
        process_.Exited()) {
      *error = "redis-server (TLS) did not answer PING:\n" + process_.Log();
      return false;
    }
    return true;
  }

  // redis-cli over TLS with the client certificate.
  std::string Cli(const std::string& args) const {
    return TlsRedisCli(files_, port_, args);
  }
  int port() const { return port_; }
  std::string Log() const { return process_.Log(); }

 private:
  const std::string dir_;
  const TlsFiles files_;
  const int port_;
  ChildProcess process_;
};

// stunnel in client mode in the foreground: accepts plaintext on
// 127.0.0.1:accept_port() and connects with TLS to 127.0.0.1:`connect_port`,
// verifying the server's certificate against `ca_file` (chain and IP
// 127.0.0.1) and presenting the client certificate. Not thread-safe.
class StunnelClient {
 public:
  StunnelClient(const std::string& dir, const TlsFiles& files,
                const std::string& ca_file, int connect_port)
      : dir_(dir),
        config_(dir + "/stunnel-" + std::to_string(connect_port) + ".conf"),
        accept_port_(FreePort()) {
    // The same shape as deploy/kubernetes/overlays/redis-tls's config.
    WriteFile(config_,
              absl::StrCat("foreground = yes\n"
                           "pid =\n"
                           "debug = notice\n"
                           "[redis]\n"
                           "client = yes\n"
                           "accept = 127.0.0.1:",
                           accept_port_,
                           "\n"
                           "connect = 127.0.0.1:",
                           connect_port,
                           "\n"
                           "CAfile = ",
                           ca_file,
                           "\n"
                           "verifyChain = yes\n"
                           "checkIP = 127.0.0.1\n"
                           "cert = ",
                           files.client_cert, "\nkey = ", files.client_key,
                           "\n"
                           "socket = l:TCP_NODELAY=1\n"
                           "socket = r:TCP_NODELAY=1\n"));
  }

  // Starts stunnel and waits until its port accepts. The Debian binary is
  // stunnel4 (also installed as stunnel).
  bool Start(std::string* error) {
    if (!process_.Start({"/usr/bin/stunnel4", config_},
                        dir_ + "/stunnel.log")) {
      *error = "cannot spawn /usr/bin/stunnel4";
      return false;
    }
    if (!WaitFor([&] { return Accepting() || process_.Exited(); },
                 absl::Seconds(10), absl::Milliseconds(20)) ||
        process_.Exited()) {
      *error = "stunnel did not start:\n" + process_.Log();
      return false;
    }
    return true;
  }
  // SIGTERM; true when it exited.
  bool Stop() { return process_.Stop(SIGTERM, absl::Seconds(5)); }

  int accept_port() const { return accept_port_; }
  std::string address() const {
    return absl::StrCat("127.0.0.1:", accept_port_);
  }
  std::string Log() const { return process_.Log(); }

 private:
  bool Accepting() const {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(accept_port_));
    const bool ok =
        connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    close(fd);
    return ok;
  }

  const std::string dir_;
  const std::string config_;
  const int accept_port_;
  ChildProcess process_;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_REDIS_TLS_H_
