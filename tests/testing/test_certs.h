// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_TESTING_TEST_CERTS_H_
#define SLUICE_TESTS_TESTING_TEST_CERTS_H_

// Real certificates for TLS tests, made by the openssl CLI into a
// directory: a CA, a second ("wrong") CA, a server certificate for
// localhost and 127.0.0.1, a client certificate, and a client certificate
// of the wrong CA. EC P-256 keys, valid for two days. The server
// certificate can be issued again with another serial (a rotation).

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace sluice::testing {

class TestCerts {
 public:
  // Makes everything in `dir` (which must exist); ok() says whether it
  // worked, error() what openssl said otherwise.
  explicit TestCerts(std::string dir) : dir_(std::move(dir)) {
    ok_ = MakeCa("ca", "Sluice Test CA") &&
          MakeCa("wrong-ca", "Some Other CA") &&
          Issue("ca", "server", "localhost", kServerExtensions, server_serial_,
                server_cert(), server_key()) &&
          Issue("ca", "client", "gateway", kClientExtensions, 2, client_cert(),
                client_key()) &&
          Issue("wrong-ca", "wrong-client", "intruder", kClientExtensions, 3,
                File("wrong-client.crt"), File("wrong-client.key"));
  }

  bool ok() const { return ok_; }
  const std::string& error() const { return error_; }
  const std::string& dir() const { return dir_; }

  std::string ca_cert() const { return File("ca.crt"); }
  std::string wrong_ca_cert() const { return File("wrong-ca.crt"); }
  std::string server_cert() const { return File("server.crt"); }
  std::string server_key() const { return File("server.key"); }
  std::string client_cert() const { return File("client.crt"); }
  std::string client_key() const { return File("client.key"); }
  std::string wrong_client_cert() const { return File("wrong-client.crt"); }
  std::string wrong_client_key() const { return File("wrong-client.key"); }
  // The serial of the last server certificate issued, as openssl prints
  // it ("serial=1000").
  std::string server_serial() const {
    return absl::StrCat("serial=", absl::Hex(server_serial_, absl::kZeroPad4));
  }

  // Issues a new server certificate (new key, next serial) to `cert_path`
  // and `key_path`, each written in place (truncated and rewritten, as an
  // operator's `cp` does). The paths may be the ones sluiced reads.
  bool ReissueServer(const std::string& cert_path,
                     const std::string& key_path) {
    ++server_serial_;
    const std::string cert = File("reissued.crt"), key = File("reissued.key");
    if (!Issue("ca", "reissued", "localhost", kServerExtensions, server_serial_,
               cert, key)) {
      return false;
    }
    return Run(absl::StrCat("cat ", key, " > ", key_path, " && cat ", cert,
                            " > ", cert_path));
  }

  // The serial of the certificate a TLS server on 127.0.0.1:`port` presents
  // ("serial=1001"), or "" when the handshake fails. With `alpn_h2` it
  // offers HTTP/2, as gRPC clients do.
  std::string PeerSerial(int port, bool alpn_h2) const {
    std::string out;
    if (Shell(absl::StrCat("openssl s_client -connect 127.0.0.1:", port,
                           alpn_h2 ? " -alpn h2" : "", " -CAfile ", ca_cert(),
                           " -verify_return_error </dev/null 2>/dev/null"
                           " | openssl x509 -noout -serial"),
              &out) != 0) {
      return "";
    }
    while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) {
      out.pop_back();
    }
    return out;
  }

  std::string File(const std::string& name) const { return dir_ + "/" + name; }

  // Runs `command` through the shell; its exit code, and its output
  // (stdout and stderr) in `output` when given.
  static int Shell(const std::string& command, std::string* output = nullptr) {
    FILE* pipe = popen((command + " 2>&1").c_str(), "r");
    if (pipe == nullptr) return -1;
    std::string text;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) text.append(buf, n);
    const int status = pclose(pipe);
    if (output != nullptr) *output = std::move(text);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  static constexpr const char* kServerExtensions =
      "subjectAltName=DNS:localhost,IP:127.0.0.1\n"
      "extendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n"
      "keyUsage=critical,digitalSignature\n";
  static constexpr const char* kClientExtensions =
      "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n"
      "keyUsage=critical,digitalSignature\n";

  bool Run(const std::string& command) {
    std::string output;
    if (Shell(command, &output) != 0) {
      error_ = absl::StrCat(command, ":\n", output);
      return false;
    }
    return true;
  }

  bool MakeCa(const std::string& name, const std::string& common_name) {
    return Run(absl::StrCat(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 "
        "-nodes -days 2 -subj '/CN=",
        common_name, "' -keyout ", File(name + ".key"), " -out ",
        File(name + ".crt")));
  }

  bool Issue(const std::string& ca, const std::string& name,
             const std::string& common_name, const char* extensions, int serial,
             const std::string& cert_path, const std::string& key_path) {
    const std::string csr = File(name + ".csr"), ext = File(name + ".ext");
    std::ofstream(ext, std::ios::trunc) << extensions;
    return Run(absl::StrCat(
        "openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes "
        "-subj '/CN=",
        common_name, "' -keyout ", key_path, " -out ", csr,
        " && openssl x509 -req -in ", csr, " -CA ", File(ca + ".crt"),
        " -CAkey ", File(ca + ".key"), " -set_serial ", serial,
        " -days 2 -extfile ", ext, " -out ", cert_path));
  }

  const std::string dir_;
  int server_serial_ = 0x1000;
  bool ok_ = false;
  std::string error_;
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_TESTING_TEST_CERTS_H_
