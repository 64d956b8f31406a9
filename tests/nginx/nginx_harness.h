// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TESTS_NGINX_NGINX_HARNESS_H_
#define SLUICE_TESTS_NGINX_NGINX_HARNESS_H_

// What the NGINX tests share: sluice-example-backend and a real sluiced
// (with its HTTP API) on free ports, and the real nginx running one of
// deploy/nginx's configs rewritten to those ports, checked with `nginx -t`,
// as the current user in a prefix directory of its own.

#include <grp.h>
#include <pwd.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/child_process.h"
#include "tests/testing/http_get.h"
#include "tests/testing/port_file.h"
#include "tests/testing/redis_server.h"  // FreePort
#include "tests/testing/sluiced_process.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/wait_for.h"

namespace sluice::testing {

// A file of deploy/nginx, the configurations these tests run.
inline std::string NginxDeployFile(const std::string& name) {
  return absl::StrCat(kSourceDir, "/deploy/nginx/", name);
}

// Debian's path; $NGINX_BINARY overrides it.
inline std::string NginxBinary() {
  const char* path = std::getenv("NGINX_BINARY");
  return path != nullptr && *path != '\0' ? path : "/usr/sbin/nginx";
}

// Replaces the one occurrence of `from`; false if there is not exactly one.
inline bool ReplaceOnce(std::string* text, const std::string& from,
                        const std::string& to) {
  const size_t at = text->find(from);
  if (at == std::string::npos ||
      text->find(from, at + 1) != std::string::npos) {
    return false;
  }
  text->replace(at, from.size(), to);
  return true;
}

// The last `lines` lines of `text`.
inline std::string Tail(const std::string& text, int lines) {
  if (text.empty()) return text;
  size_t at = text.size();
  for (int i = 0; i <= lines && at != std::string::npos && at > 0; ++i) {
    at = text.rfind('\n', at - 1);
  }
  return at == std::string::npos ? text : text.substr(at + 1);
}

// A fixture with the backend, sluiced and nginx; a test's SetUp calls
// StartBackendAndSluiced, then StartNginx.
class NginxHarness : public ::testing::Test {
 protected:
  explicit NginxHarness(const std::string& dir_prefix) : dir_(dir_prefix) {}

  // The example backend (1 ms a call), then sluiced loaded with the
  // deploy/nginx policies file `policies`, both answering.
  void StartBackendAndSluiced(const std::string& policies) {
    ASSERT_FALSE(dir_.path().empty());
    backend_port_ = FreePort();
    ASSERT_TRUE(backend_.Start(
        {kExampleBackendPath,
         absl::StrCat("--listen=127.0.0.1:", backend_port_), "--latency=1ms"},
        dir_.File("backend.log")));
    ASSERT_TRUE(WaitFor(
        [&] {
          return backend_.Exited() ||
                 HttpGet(backend_port_, "/healthz") == "ok\n";
        },
        absl::Seconds(10)));
    ASSERT_FALSE(backend_.Exited()) << backend_.Log();

    std::string error;
    ASSERT_TRUE(sluiced_.Start(ReadFile(NginxDeployFile(policies)),
                               {"--http-listen=127.0.0.1:0"}, "", &error))
        << error;
    sluice_http_ = sluiced_.listener("http");
    ASSERT_NE(sluice_http_, "") << "sluiced's port file has no http= line";
    ASSERT_EQ(HttpRequest(PortOf(sluice_http_), "GET", "/v1/health").status,
              200);
  }

  // The deploy/nginx config `conf_name` with this test's ports as nginx.conf,
  // the deploy/nginx files `beside` copied next to it, then `nginx -t`,
  // then nginx itself in the foreground (daemon off).
  void StartNginx(const std::string& conf_name,
                  const std::vector<std::string>& beside = {}) {
    // The addresses in deploy/nginx's configs that the test replaces.
    constexpr char kConfListen[] = "listen 127.0.0.1:8080;";
    constexpr char kConfSluice[] = "server 127.0.0.1:8090;";
    constexpr char kConfBackend[] = "server 127.0.0.1:8081;";
    std::string conf = ReadFile(NginxDeployFile(conf_name));
    nginx_port_ = FreePort();
    ASSERT_TRUE(
        ReplaceOnce(&conf, kConfListen,
                    absl::StrCat("listen 127.0.0.1:", nginx_port_, ";")))
        << conf_name << " must say `" << kConfListen << "` once";
    ASSERT_TRUE(ReplaceOnce(&conf, kConfSluice,
                            absl::StrCat("server ", sluice_http_, ";")))
        << conf_name << " must say `" << kConfSluice << "` once";
    ASSERT_TRUE(
        ReplaceOnce(&conf, kConfBackend,
                    absl::StrCat("server 127.0.0.1:", backend_port_, ";")))
        << conf_name << " must say `" << kConfBackend << "` once";
    WriteFile(dir_.File("nginx.conf"), conf);
    for (const std::string& name : beside) {
      WriteFile(dir_.File(name), ReadFile(NginxDeployFile(name)));
    }

    // As root, nginx's workers would run as nobody, who cannot enter the
    // test's directory: they run as this user instead.
    std::string globals = "daemon off;";
    if (geteuid() == 0) {
      const passwd* user = getpwuid(geteuid());
      const group* grp = getgrgid(getegid());
      ASSERT_TRUE(user != nullptr && grp != nullptr);
      absl::StrAppend(&globals, " user ", user->pw_name, " ", grp->gr_name,
                      ";");
    }
    const CommandResult check = RunCommand(
        absl::StrCat(NginxBinary(), " -t -p ", dir_.path(), "/ -c ",
                     dir_.File("nginx.conf"), " -g '", globals, "'"));
    ASSERT_EQ(check.exit_code, 0) << check.output;
    ASSERT_TRUE(absl::StrContains(check.output, "test is successful"))
        << check.output;

    ASSERT_TRUE(nginx_.Start({NginxBinary(), "-p", dir_.path() + "/", "-c",
                              dir_.File("nginx.conf"), "-g", globals},
                             dir_.File("nginx.out")));
    ASSERT_TRUE(WaitFor(
        [&] {
          return nginx_.Exited() ||
                 HttpRequest(nginx_port_, "GET", "/").status != 0;
        },
        absl::Seconds(10)));
    ASSERT_FALSE(nginx_.Exited()) << nginx_.Log();
  }

  // A GET through nginx, as `tenant` (X-Tenant) when one is given.
  HttpResponse Get(const std::string& path, const std::string& tenant = "") {
    return HttpRequest(nginx_port_, "GET", path, 5000,
                       tenant.empty() ? "" : "X-Tenant: " + tenant + "\r\n");
  }

  TempDir dir_;
  ChildProcess backend_;
  SluicedProcess sluiced_;
  ChildProcess nginx_;
  int backend_port_ = 0;
  int nginx_port_ = 0;
  std::string sluice_http_;  // host:port of sluiced's HTTP API
};

}  // namespace sluice::testing

#endif  // SLUICE_TESTS_NGINX_NGINX_HARNESS_H_
