// SPDX-License-Identifier: Apache-2.0
// NGINX's auth_request recipe end to end: the real nginx (Debian's, no njs)
// runs deploy/nginx/auth-request.conf in front of sluice-example-backend,
// and asks a real sluiced's forward-auth endpoint (GET /v1/check) loaded
// with deploy/nginx/auth-request-policies.yaml before each call. The test
// renders the config with free ports, checks it with `nginx -t`, and runs
// nginx as the current user in a prefix directory of its own.
//
//   AdmitsAtTheLimitAndRefusesWith429: a tenant of `catalog` (70/s) asked
//     far more often for 3 s is admitted at 70/s within 5%; the rest get
//     429 with Retry-After;
//   BreakerRefusalIs503WithRetryAfter: `payments`' breaker, opened by
//     failures reported to Sluice, refuses with 503 and Retry-After;
//   DegradeServesTheFallbackWithItsStatus: `inventory`'s open breaker
//     serves its fallback payload with status 200; `recommendations`',
//     whose status (203) the recipe has no line for, with Sluice's 503;
//   FailsOpenWhenSluiceIsDown: a killed sluiced lets every call through;
//   HostileRequestsGetACleanError: a tenant that is not UTF-8 gets a 400
//     from NGINX (neither the backend nor a 500), and a hostile query
//     string sent to /v1/check gets a 400 naming what was wrong.
// nginx missing is a failure, not a skip: scripts/setup installs it.
// The figures are printed on lines starting with "[nginx]".
#include <grp.h>
#include <pwd.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
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

namespace sluice {
namespace {

using testing::ChildProcess;
using testing::FreePort;
using testing::HttpGet;
using testing::HttpRequest;
using testing::HttpResponse;
using testing::ReadFile;
using testing::RunCommand;
using testing::SluicedProcess;
using testing::TempDir;
using testing::WaitFor;
using testing::WriteFile;

std::string DeployFile(const std::string& name) {
  return absl::StrCat(testing::kSourceDir, "/deploy/nginx/", name);
}

// Debian's path; $NGINX_BINARY overrides it.
constexpr char kNginx[] = "/usr/sbin/nginx";

// deploy/nginx/auth-request-policies.yaml: `catalog`'s per-tenant bucket,
// and the breakers of `inventory` and `recommendations` (with fallbacks)
// and `payments`.
constexpr double kRate = 70;  // per second
constexpr double kBurst = 10;
constexpr int kTrip = 5;
constexpr char kInventoryPayload[] = R"({"items":[],"degraded":true})";
constexpr char kRecommendationsPayload[] = R"({"recommendations":[]})";
// The addresses in deploy/nginx/auth-request.conf the test replaces.
constexpr char kConfListen[] = "listen 127.0.0.1:8080;";
constexpr char kConfSluice[] = "server 127.0.0.1:8090;";
constexpr char kConfBackend[] = "server 127.0.0.1:8081;";

std::string NginxBinary() {
  const char* path = std::getenv("NGINX_BINARY");
  return path != nullptr && *path != '\0' ? path : kNginx;
}

// Replaces the one occurrence of `from`; false if there is not exactly one.
bool ReplaceOnce(std::string* text, const std::string& from,
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
std::string Tail(const std::string& text, int lines) {
  if (text.empty()) return text;
  size_t at = text.size();
  for (int i = 0; i <= lines && at != std::string::npos && at > 0; ++i) {
    at = text.rfind('\n', at - 1);
  }
  return at == std::string::npos ? text : text.substr(at + 1);
}

// The example backend's answer: it echoes the path it served.
bool IsBackend(const HttpResponse& r) {
  return r.status == 200 && absl::StrContains(r.body, "\"path\":");
}

// A whole-second Retry-After of at least 1, as Sluice sends it.
int RetryAfter(const HttpResponse& r) {
  int seconds = 0;
  return absl::SimpleAtoi(r.header("retry-after"), &seconds) ? seconds : 0;
}

class NginxAuthRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    ASSERT_EQ(access(NginxBinary().c_str(), X_OK), 0)
        << NginxBinary() << " not found: install the Debian package nginx "
        << "(scripts/setup does)";

    backend_port_ = FreePort();
    ASSERT_TRUE(backend_.Start(
        {testing::kExampleBackendPath,
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
    ASSERT_TRUE(
        sluiced_.Start(ReadFile(DeployFile("auth-request-policies.yaml")),
                       {"--http-listen=127.0.0.1:0"}, "", &error))
        << error;
    sluice_http_ = sluiced_.listener("http");
    ASSERT_NE(sluice_http_, "") << "sluiced's port file has no http= line";
    ASSERT_EQ(
        HttpRequest(testing::PortOf(sluice_http_), "GET", "/v1/health").status,
        200);

    ASSERT_NO_FATAL_FAILURE(StartNginx());
  }

  void TearDown() override {
    if (HasFailure()) {
      std::printf("---- nginx error.log (tail):\n%s\n",
                  Tail(ReadFile(dir_.File("error.log")), 30).c_str());
      std::printf("---- nginx access.log (tail):\n%s\n",
                  Tail(ReadFile(dir_.File("access.log")), 10).c_str());
      std::printf("---- sluiced log (tail):\n%s\n",
                  Tail(sluiced_.Log(), 20).c_str());
    }
    nginx_.Stop(SIGTERM, absl::Seconds(5));
  }

  // deploy/nginx/auth-request.conf with this test's ports, then `nginx -t`,
  // then nginx itself in the foreground (daemon off).
  void StartNginx() {
    std::string conf = ReadFile(DeployFile("auth-request.conf"));
    nginx_port_ = FreePort();
    ASSERT_TRUE(
        ReplaceOnce(&conf, kConfListen,
                    absl::StrCat("listen 127.0.0.1:", nginx_port_, ";")))
        << "auth-request.conf must say `" << kConfListen << "` once";
    ASSERT_TRUE(ReplaceOnce(&conf, kConfSluice,
                            absl::StrCat("server ", sluice_http_, ";")))
        << "auth-request.conf must say `" << kConfSluice << "` once";
    ASSERT_TRUE(
        ReplaceOnce(&conf, kConfBackend,
                    absl::StrCat("server 127.0.0.1:", backend_port_, ";")))
        << "auth-request.conf must say `" << kConfBackend << "` once";
    WriteFile(dir_.File("nginx.conf"), conf);

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
    const testing::CommandResult check = RunCommand(
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

  HttpResponse Get(const std::string& path, const std::string& tenant = "") {
    return HttpRequest(nginx_port_, "GET", path, 5000,
                       tenant.empty() ? "" : "X-Tenant: " + tenant + "\r\n");
  }

  // Opens `dependency`'s breaker: the failures of calls Sluice allowed,
  // reported to it as a backend or an SDK would (auth_request reports
  // nothing).
  void OpenBreaker(const std::string& dependency) {
    for (int i = 0; i < kTrip; ++i) {
      const v1::AcquireResponse permit = sluiced_.Acquire(dependency);
      ASSERT_EQ(permit.verdict(), v1::ALLOW) << dependency;
      sluiced_.Report(dependency, permit.permit_id(), v1::FAILURE);
    }
    ASSERT_EQ(sluiced_.Metric(absl::StrCat("sluice_breaker_state{dependency=\"",
                                           dependency, "\",state=\"OPEN\"}")),
              1)
        << dependency;
  }

  TempDir dir_{"nginx_auth_request"};
  ChildProcess backend_;
  SluicedProcess sluiced_;
  ChildProcess nginx_;
  int backend_port_ = 0;
  int nginx_port_ = 0;
  std::string sluice_http_;  // host:port of sluiced's HTTP API
};

TEST_F(NginxAuthRequestTest, AdmitsAtTheLimitAndRefusesWith429) {
  // Eight threads, 5 ms apart each: two to four times the limit in all
  // (an answer through NGINX takes a few ms on a loaded machine), against
  // 70 a second for the one tenant.
  constexpr absl::Duration kWindow = absl::Seconds(3);
  constexpr int kThreads = 8;
  absl::Mutex mu;
  int64_t asked = 0, admitted = 0, refused = 0, other = 0;
  absl::Time first = absl::InfiniteFuture(), last = absl::InfinitePast();
  std::string unexpected;
  HttpResponse a_refusal;
  const absl::Time end = absl::Now() + kWindow;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      while (absl::Now() < end) {
        const absl::Time sent = absl::Now();
        const HttpResponse r = Get("/api/catalog/item", "tenant-a");
        absl::MutexLock lock(&mu);
        ++asked;
        first = std::min(first, sent);
        last = std::max(last, sent);
        if (IsBackend(r)) {
          ++admitted;
        } else if (r.status == 429 && RetryAfter(r) >= 1 &&
                   r.header("x-sluice-reason") == "RATE_LIMITED") {
          if (++refused == 1) a_refusal = r;
        } else if (++other <= 3) {
          absl::StrAppend(&unexpected, r.status, " ", r.body, "; ");
        }
        absl::SleepFor(absl::Milliseconds(5));  // paces the offered load
      }
    });
  }
  for (std::thread& t : threads) t.join();

  // The bucket starts with its burst; the rest comes at the rate.
  const double seconds = absl::ToDoubleSeconds(last - first);
  const double rate = (static_cast<double>(admitted) - kBurst) / seconds;
  std::printf(
      "[nginx] auth_request, one tenant over %.2f s: %lld asked (%.0f/s), "
      "%lld admitted, %lld refused (429), %lld other; admitted %.1f/s "
      "after the burst of %.0f, against a limit of %.0f/s (%+.1f%%)\n",
      seconds, static_cast<long long>(asked), asked / seconds,
      static_cast<long long>(admitted), static_cast<long long>(refused),
      static_cast<long long>(other), rate, kBurst, kRate,
      100 * (rate - kRate) / kRate);
  EXPECT_EQ(other, 0) << unexpected;
  EXPECT_GT(refused, 0);
  // Offered well above the limit, so that the bucket is empty throughout.
  EXPECT_GE(asked / seconds, 1.5 * kRate) << "too little offered to measure";
  EXPECT_NEAR(rate, kRate, 0.05 * kRate);

  // A refusal as the client saw it.
  EXPECT_EQ(a_refusal.header("content-type"), "application/json");
  EXPECT_TRUE(
      absl::StrContains(a_refusal.body, "\"reason\":\"RATE_LIMITED\""))
      << a_refusal.body;
  // Another tenant has a bucket of its own.
  EXPECT_TRUE(IsBackend(Get("/api/catalog/item", "tenant-b")));
}

TEST_F(NginxAuthRequestTest, BreakerRefusalIs503WithRetryAfter) {
  EXPECT_TRUE(IsBackend(Get("/api/payments/pay")));
  ASSERT_NO_FATAL_FAILURE(OpenBreaker("payments"));
  const HttpResponse r = Get("/api/payments/pay");
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(r.header("x-sluice-reason"), "CIRCUIT_OPEN");
  // The rest of the 30 s open period, in whole seconds.
  EXPECT_GE(RetryAfter(r), 25);
  EXPECT_LE(RetryAfter(r), 30);
  EXPECT_TRUE(absl::StrContains(r.body, "\"reason\":\"CIRCUIT_OPEN\""))
      << r.body;
  std::printf("[nginx] payments' breaker open: %d, Retry-After: %s, %s",
              r.status, r.header("retry-after").c_str(), r.body.c_str());
}

TEST_F(NginxAuthRequestTest, DegradeServesTheFallbackWithItsStatus) {
  EXPECT_TRUE(IsBackend(Get("/api/inventory/list")));
  ASSERT_NO_FATAL_FAILURE(OpenBreaker("inventory"));
  for (int i = 0; i < 3; ++i) {
    const HttpResponse r = Get("/api/inventory/list");
    EXPECT_EQ(r.status, 200);
    EXPECT_EQ(r.body, kInventoryPayload);
    EXPECT_EQ(r.header("content-type"), "application/json");
    EXPECT_EQ(r.header("x-sluice-degraded"), "CIRCUIT_OPEN");
  }
  // A fallback status without an error_page of its own: Sluice's 503, the
  // payload, and the status the gateway could have served.
  ASSERT_NO_FATAL_FAILURE(OpenBreaker("recommendations"));
  const HttpResponse r = Get("/api/recommendations/top");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, kRecommendationsPayload);
  EXPECT_EQ(r.header("x-sluice-degraded"), "CIRCUIT_OPEN");
  EXPECT_EQ(r.header("x-sluice-fallback-status"), "203");
}

TEST_F(NginxAuthRequestTest, FailsOpenWhenSluiceIsDown) {
  sluiced_.Kill();
  absl::Duration slowest;
  for (int i = 0; i < 20; ++i) {
    const absl::Time start = absl::Now();
    const HttpResponse r = Get("/api/catalog/item", "tenant-c");
    slowest = std::max(slowest, absl::Now() - start);
    EXPECT_TRUE(IsBackend(r)) << r.status << " " << r.body;
  }
  std::printf("[nginx] sluiced killed: 20 of 20 calls reached the backend, "
              "slowest %.0f ms\n",
              absl::ToDoubleMilliseconds(slowest));
  EXPECT_LT(slowest, absl::Milliseconds(500));
  EXPECT_TRUE(absl::StrContains(ReadFile(dir_.File("access.log")),
                                "answer=fail-open"));
}

TEST_F(NginxAuthRequestTest, HostileRequestsGetACleanError) {
  // A key that is not UTF-8: refused as malformed, which the recipe turns
  // into the client's 400, never into a call that skips the limit.
  const HttpResponse bad_key = Get("/api/catalog/item", "\xff\xfe");
  EXPECT_EQ(bad_key.status, 400) << bad_key.body;
  EXPECT_FALSE(absl::StrContains(bad_key.body, "\"path\":")) << bad_key.body;

  // Straight to Sluice: a 400 whose JSON message names what was wrong.
  const int sluice = testing::PortOf(sluice_http_);
  struct Case {
    const char* target;
    const char* says;
  };
  for (const Case& c : {
           Case{"/v1/check?dependency=catalog&dependency=payments",
                "given twice"},
           Case{"/v1/check?dependency=catalog&key=%zz", "hex digits"},
           Case{"/v1/check?dependency=catalog&key=%ff%fe", "UTF-8"},
           Case{"/v1/check?dependancy=catalog", "unknown query parameter"},
       }) {
    const HttpResponse r = HttpRequest(sluice, "GET", c.target);
    EXPECT_EQ(r.status, 400) << c.target;
    EXPECT_EQ(r.header("content-type"), "application/json") << c.target;
    EXPECT_TRUE(absl::StrContains(r.body, "\"status\":\"INVALID_ARGUMENT\""))
        << r.body;
    EXPECT_TRUE(absl::StrContains(r.body, c.says)) << c.target << ": " << r.body;
  }
  const HttpResponse twice = HttpRequest(
      sluice, "GET", "/v1/check", 5000,
      "X-Forwarded-Uri: /a\r\nX-Forwarded-Uri: /b\r\n");
  EXPECT_EQ(twice.status, 400) << twice.body;
  // And sluiced still serves.
  EXPECT_EQ(HttpRequest(sluice, "GET", "/v1/health").status, 200);
}

}  // namespace
}  // namespace sluice
