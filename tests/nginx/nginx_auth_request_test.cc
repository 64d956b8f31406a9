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
#include <unistd.h>

#include <algorithm>
#include <cstdio>
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
#include "tests/nginx/nginx_harness.h"
#include "tests/testing/http_get.h"
#include "tests/testing/port_file.h"
#include "tests/testing/sluiced_process.h"

namespace sluice {
namespace {

using testing::HttpRequest;
using testing::HttpResponse;
using testing::NginxBinary;
using testing::ReadFile;
using testing::Tail;

// deploy/nginx/auth-request-policies.yaml: `catalog`'s per-tenant bucket,
// and the breakers of `inventory` and `recommendations` (with fallbacks)
// and `payments`.
constexpr double kRate = 70;  // per second
constexpr double kBurst = 10;
constexpr int kTrip = 5;
constexpr char kInventoryPayload[] = R"({"items":[],"degraded":true})";
constexpr char kRecommendationsPayload[] = R"({"recommendations":[]})";

// The example backend's answer: it echoes the path it served.
bool IsBackend(const HttpResponse& r) {
  return r.status == 200 && absl::StrContains(r.body, "\"path\":");
}

// A whole-second Retry-After of at least 1, as Sluice sends it.
int RetryAfter(const HttpResponse& r) {
  int seconds = 0;
  return absl::SimpleAtoi(r.header("retry-after"), &seconds) ? seconds : 0;
}

class NginxAuthRequestTest : public testing::NginxHarness {
 protected:
  NginxAuthRequestTest() : NginxHarness("nginx_auth_request") {}

  void SetUp() override {
    ASSERT_EQ(access(NginxBinary().c_str(), X_OK), 0)
        << NginxBinary() << " not found: install the Debian package nginx "
        << "(scripts/setup does)";

    ASSERT_NO_FATAL_FAILURE(
        StartBackendAndSluiced("auth-request-policies.yaml"));
    ASSERT_NO_FATAL_FAILURE(StartNginx("auth-request.conf"));
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
