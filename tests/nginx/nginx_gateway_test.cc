// SPDX-License-Identifier: Apache-2.0
// NGINX as the gateway, end to end: the real nginx (Debian's, with njs from
// libnginx-mod-http-js) runs deploy/nginx/nginx.conf and sluice.js in front
// of sluice-example-backend, and decides through a real sluiced's HTTP API
// (--http-listen) loaded with deploy/nginx/policies.yaml. The test renders
// the config with free ports, checks it with `nginx -t`, and runs nginx as
// the current user in a prefix directory of its own.
//
//   RateLimitHoldsPerTenant: the per-tenant token bucket of `catalog` holds
//     through NGINX for two tenants at once, every admitted call is
//     reported, and a key over Sluice's 1024-byte limit is still limited;
//   KilledBackendOpensBreakerThenFallback: a backend slower than the proxy
//     timeout is reported as TIMEOUT; a killed backend's 502s are reported
//     as failures and open the breakers of `inventory`, `recommendations`
//     and `payments`; clients then get the STATIC and DEFAULT fallbacks,
//     and a 503 with Retry-After where there is none;
//   FailsOpenWhenSluiceIsStoppedOrKilled: a stopped sluiced (SIGSTOP: every
//     acquire times out) and a killed one (connection refused) both let
//     every call through to the backend.
// nginx missing is a failure, not a skip: scripts/setup installs it.
// The figures are printed on lines starting with "[nginx]".
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
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
#include "tests/testing/wait_for.h"

namespace sluice {
namespace {

using testing::HttpRequest;
using testing::HttpResponse;
using testing::NginxBinary;
using testing::ReadFile;
using testing::Tail;
using testing::WaitFor;

// Debian's path of njs.
constexpr char kJsModule[] = "/usr/lib/nginx/modules/ngx_http_js_module.so";

// deploy/nginx/policies.yaml: `catalog`'s per-tenant bucket ...
constexpr double kRate = 20;  // per second
constexpr double kBurst = 10;
// ... and what `inventory` (STATIC) and `recommendations` (DEFAULT) serve
// while their breakers are open (5 failures in a row, open for 30 s);
// `payments` has no fallback.
constexpr int kTrip = 5;
constexpr char kInventoryPayload[] = R"({"items":[],"degraded":true})";
constexpr char kDefaultAnswer[] =
    "{\"degraded\":true,\"reason\":\"CIRCUIT_OPEN\"}\n";

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// The state letter of /proc/PID/stat ('R', 'S', 'T' for stopped ...), or
// '?' when it cannot be read.
char ProcessState(pid_t pid) {
  const std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  // "PID (COMM) STATE ...": COMM may hold spaces and parentheses.
  const size_t close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size()
             ? '?'
             : stat[close + 2];
}

// One answer from NGINX, as a load thread saw it.
struct Answer {
  absl::Time sent;
  absl::Duration took;
  std::string tenant;
  HttpResponse response;
};

struct Tally {
  int64_t asked = 0;
  int64_t admitted = 0;   // the backend's answer (X-Sluice-Result: backend)
  int64_t refused = 0;    // 429 RATE_LIMITED with Retry-After: 1
  int64_t fail_open = 0;  // proxied without a decision
  int64_t other = 0;
  absl::Time first = absl::InfiniteFuture(), last = absl::InfinitePast();
};

class NginxGatewayTest : public testing::NginxHarness {
 protected:
  NginxGatewayTest() : NginxHarness("nginx_gateway") {}

  void SetUp() override {
    // CI installs both (scripts/setup); without them this test fails.
    ASSERT_EQ(access(NginxBinary().c_str(), X_OK), 0)
        << NginxBinary() << " not found: install the Debian packages nginx "
        << "and libnginx-mod-http-js (scripts/setup does)";
    ASSERT_EQ(access(kJsModule, R_OK), 0)
        << kJsModule << " not found: install the Debian package "
        << "libnginx-mod-http-js (scripts/setup does)";

    ASSERT_NO_FATAL_FAILURE(StartBackendAndSluiced("policies.yaml"));
    ASSERT_NO_FATAL_FAILURE(StartNginx("nginx.conf", {"sluice.js"}));
  }

  void TearDown() override {
    if (HasFailure()) {
      std::printf("---- nginx error.log (tail):\n%s\n",
                  Tail(ReadFile(dir_.File("error.log")), 30).c_str());
      std::printf("---- nginx output:\n%s\n", Tail(nginx_.Log(), 10).c_str());
      std::printf("---- sluiced log (tail):\n%s\n",
                  Tail(sluiced_.Log(), 20).c_str());
      std::printf("---- backend log (tail):\n%s\n",
                  Tail(backend_.Log(), 10).c_str());
    }
    nginx_.Stop(SIGTERM, absl::Seconds(5));
  }

  // Sluice's count of reported outcomes (0 when it has none yet).
  double Outcomes(const std::string& dependency, const std::string& outcome) {
    return std::max(0.0, sluiced_.Metric(absl::StrCat(
                             "sluice_outcomes_total{dependency=\"", dependency,
                             "\",outcome=\"", outcome, "\"}")));
  }

  std::string ErrorLog() { return ReadFile(dir_.File("error.log")); }
};

bool IsRefusal(const HttpResponse& r) {
  return r.status == 429 && r.header("x-sluice-result") == "rejected" &&
         r.header("x-sluice-reason") == "RATE_LIMITED" &&
         r.header("retry-after") == "1" &&
         absl::StrContains(r.body, "\"error\":\"refused\"");
}

bool IsBackend(const HttpResponse& r, const std::string& result) {
  return r.status == 200 && r.header("x-sluice-result") == result &&
         absl::StrContains(r.body, "\"path\":");
}

TEST_F(NginxGatewayTest, RateLimitHoldsPerTenant) {
  // Back-to-back requests, 5 ms apart per thread: three threads for
  // tenant-a and two for tenant-b, several hundred a second each against
  // 20 a second per tenant.
  constexpr absl::Duration kWindow = absl::Seconds(3);
  const std::vector<std::string> threads_tenants = {
      "tenant-a", "tenant-a", "tenant-a", "tenant-b", "tenant-b"};
  absl::Mutex mu;
  std::vector<Answer> answers;
  const absl::Time end = absl::Now() + kWindow;
  std::vector<std::thread> threads;
  for (const std::string& tenant : threads_tenants) {
    threads.emplace_back([&, tenant] {
      while (absl::Now() < end) {
        Answer a;
        a.tenant = tenant;
        a.sent = absl::Now();
        a.response = Get("/api/catalog/item", tenant);
        a.took = absl::Now() - a.sent;
        {
          absl::MutexLock lock(&mu);
          answers.push_back(std::move(a));
        }
        absl::SleepFor(absl::Milliseconds(5));  // paces the offered load
      }
    });
  }
  for (std::thread& t : threads) t.join();

  std::map<std::string, Tally> tallies;
  for (const Answer& a : answers) {
    Tally& t = tallies[a.tenant];
    ++t.asked;
    t.first = std::min(t.first, a.sent);
    t.last = std::max(t.last, a.sent);
    if (IsBackend(a.response, "backend")) {
      ++t.admitted;
    } else if (IsRefusal(a.response)) {
      ++t.refused;
    } else if (IsBackend(a.response, "fail-open")) {
      ++t.fail_open;
    } else {
      ++t.other;
      if (t.other <= 3) {
        ADD_FAILURE() << a.tenant << ": unexpected answer " << a.response.status
                      << " " << a.response.header("x-sluice-result") << " "
                      << a.response.body;
      }
    }
  }
  int64_t admitted = 0, failed_open = 0;
  for (const std::string tenant : {"tenant-a", "tenant-b"}) {
    const Tally& t = tallies[tenant];
    const double seconds = absl::ToDoubleSeconds(t.last - t.first);
    // The bucket starts full: at most burst + rate x time (plus 10%), and,
    // with far more offered, at least 85% of that.
    const double expected = kBurst + kRate * seconds;
    std::printf(
        "[nginx] %s over %.2f s: %lld asked, %lld admitted, %lld "
        "refused (429), %lld failed open, %lld other; limit %.0f/s "
        "burst %.0f allows %.0f\n",
        tenant.c_str(), seconds, static_cast<long long>(t.asked),
        static_cast<long long>(t.admitted), static_cast<long long>(t.refused),
        static_cast<long long>(t.fail_open), static_cast<long long>(t.other),
        kRate, kBurst, expected);
    EXPECT_LE(t.admitted, 1.10 * expected + 1) << tenant;
    EXPECT_GE(t.admitted, 0.85 * expected) << tenant;
    EXPECT_GT(t.refused, 0) << tenant;
    EXPECT_EQ(t.other, 0) << tenant;
    // An acquire timing out on a loaded machine fails open; allowed, rarely.
    EXPECT_LE(t.fail_open, t.asked / 100) << tenant;
    admitted += t.admitted;
    failed_open += t.fail_open;
  }
  std::vector<absl::Duration> took;
  for (const Answer& a : answers) took.push_back(a.took);
  std::sort(took.begin(), took.end());
  std::printf(
      "[nginx] answer time through NGINX: median %.2f ms, p99 %.2f ms "
      "(%zu answers)\n",
      Ms(took[took.size() / 2]), Ms(took[took.size() * 99 / 100]), took.size());

  // Every admitted call was reported (and gave back its in-flight slot).
  EXPECT_TRUE(
      WaitFor([&] { return Outcomes("catalog", "SUCCESS") == admitted; },
              absl::Seconds(5)))
      << "Sluice counts " << Outcomes("catalog", "SUCCESS")
      << " SUCCESS reports for " << admitted << " admitted calls";
  // A call NGINX stopped waiting for (and served, failing open) may still
  // have been admitted by Sluice: nobody reports that permit, so it expires
  // as a TIMEOUT. No other call may.
  EXPECT_LE(Outcomes("catalog", "TIMEOUT"), failed_open);
  EXPECT_EQ(Outcomes("catalog", "FAILURE"), 0);

  // A tenant name over Sluice's 1024-byte key limit is sent hashed: still
  // limited, never an error that would fail open.
  const std::string long_tenant(1500, 't');
  int long_admitted = 0, long_refused = 0, long_undecided = 0;
  for (int i = 0; i < 30; ++i) {
    const HttpResponse r = Get("/api/catalog/item", long_tenant);
    if (IsBackend(r, "backend")) {
      ++long_admitted;
    } else if (IsRefusal(r)) {
      ++long_refused;
    } else if (IsBackend(r, "fail-open")) {
      ++long_undecided;  // an acquire over 100 ms; see above
    } else {
      ADD_FAILURE() << "long tenant: " << r.status << " "
                    << r.header("x-sluice-result");
    }
  }
  EXPECT_LE(long_undecided, 1);
  std::printf(
      "[nginx] a 1500-byte tenant, 30 requests at once: %d admitted, "
      "%d refused\n",
      long_admitted, long_refused);
  EXPECT_GE(long_admitted, kBurst);
  EXPECT_GT(long_refused, 0);
}

TEST_F(NginxGatewayTest, KilledBackendOpensBreakerThenFallback) {
  for (const std::string dependency :
       {"inventory", "recommendations", "payments"}) {
    const HttpResponse r = Get("/api/" + dependency + "/item");
    EXPECT_TRUE(IsBackend(r, "backend"))
        << dependency << ": " << r.status << " " << r.body;
  }

  // A backend slower than the proxy's 1 s timeout: NGINX answers 504 and
  // reports TIMEOUT (on `catalog`, which has no breaker).
  ASSERT_EQ(HttpRequest(backend_port_, "POST", "/admin?latency=1500ms").status,
            200);
  const HttpResponse slow = Get("/api/catalog/slow", "tenant-slow");
  EXPECT_EQ(slow.status, 504);
  EXPECT_EQ(slow.header("x-sluice-result"), "backend");
  EXPECT_TRUE(WaitFor([&] { return Outcomes("catalog", "TIMEOUT") == 1; },
                      absl::Seconds(5)))
      << Outcomes("catalog", "TIMEOUT") << " TIMEOUT reports";
  ASSERT_EQ(HttpRequest(backend_port_, "POST", "/admin?latency=1ms").status,
            200);

  backend_.Kill();
  const absl::Time killed = absl::Now();
  struct Case {
    std::string dependency;
    std::string body;  // the fallback; "" for none (payments)
  };
  for (const Case& c :
       {Case{"inventory", kInventoryPayload},
        Case{"recommendations", kDefaultAnswer}, Case{"payments", ""}}) {
    // 502 (connection refused) until the breaker opens. A report is sent
    // as the 502 goes out, so the next acquire may overtake it: a trip
    // after up to 3 more failures than the policy's 5 is accepted.
    // An acquire over 100 ms (a loaded machine) fails open: that call is
    // neither reported nor refused. A few are tolerated.
    int failures = 0, undecided = 0;
    std::optional<HttpResponse> refused;
    for (int n = 0; n < 20 && !refused.has_value(); ++n) {
      HttpResponse r = Get("/api/" + c.dependency + "/item");
      if (r.status == 502 && r.header("x-sluice-result") == "backend") {
        ++failures;
      } else if (r.status == 502 &&
                 r.header("x-sluice-result") == "fail-open") {
        ++undecided;
      } else if (r.header("x-sluice-result") == "degraded" ||
                 r.header("x-sluice-result") == "rejected") {
        refused = std::move(r);
      } else {
        ADD_FAILURE() << c.dependency << ": unexpected " << r.status << " "
                      << r.header("x-sluice-result") << " " << r.body;
      }
    }
    ASSERT_TRUE(refused.has_value()) << c.dependency << " never refused";
    std::printf(
        "[nginx] %s: breaker open after %d failures (502) of a "
        "killed backend, %.0f ms after the kill (%d undecided)\n",
        c.dependency.c_str(), failures, Ms(absl::Now() - killed), undecided);
    EXPECT_GE(failures, kTrip) << c.dependency;
    EXPECT_LE(failures, kTrip + 3) << c.dependency;

    // Then, every time while the breaker stays open (30 s), the fallback,
    // or without one a 503 that says when to come back.
    std::vector<HttpResponse> answers = {*refused};
    for (int n = 0; n < 10; ++n) {
      HttpResponse r = Get("/api/" + c.dependency + "/item");
      if (r.header("x-sluice-result") == "fail-open") {
        ++undecided;
      } else {
        answers.push_back(std::move(r));
      }
    }
    EXPECT_LE(undecided, 2) << c.dependency;
    EXPECT_GE(answers.size(), 9u) << c.dependency;
    for (const HttpResponse& r : answers) {
      if (c.body.empty()) {
        EXPECT_EQ(r.status, 503) << c.dependency;
        EXPECT_EQ(r.header("x-sluice-result"), "rejected") << c.dependency;
        EXPECT_EQ(r.header("x-sluice-reason"), "CIRCUIT_OPEN") << c.dependency;
        // The rest of the 30 s open period, rounded up to whole seconds.
        int retry_after = 0;
        EXPECT_TRUE(absl::SimpleAtoi(r.header("retry-after"), &retry_after));
        EXPECT_GE(retry_after, 25) << c.dependency;
        EXPECT_LE(retry_after, 30) << c.dependency;
        EXPECT_TRUE(absl::StrContains(r.body, "\"reason\":\"CIRCUIT_OPEN\""))
            << r.body;
      } else {
        EXPECT_EQ(r.status, 200) << c.dependency;
        EXPECT_EQ(r.header("x-sluice-result"), "degraded") << c.dependency;
        EXPECT_EQ(r.header("x-sluice-degraded"), "CIRCUIT_OPEN")
            << c.dependency;
        EXPECT_EQ(r.header("content-type"), "application/json") << c.dependency;
        EXPECT_EQ(r.body, c.body) << c.dependency;
      }
    }
    const HttpResponse& last = answers.back();
    const std::string shown = c.body.empty()
                                  ? "Retry-After: " + last.header("retry-after")
                                  : last.body;
    std::printf("[nginx] %s then: %d %s, %s\n", c.dependency.c_str(),
                last.status, last.header("x-sluice-result").c_str(),
                shown.c_str());
    // Sluice saw each 502 as a FAILURE.
    EXPECT_TRUE(
        WaitFor([&] { return Outcomes(c.dependency, "FAILURE") == failures; },
                absl::Seconds(5)))
        << c.dependency << ": " << Outcomes(c.dependency, "FAILURE")
        << " FAILURE reports for " << failures << " failures";
    EXPECT_EQ(sluiced_.Metric(absl::StrCat("sluice_breaker_state{dependency=\"",
                                           c.dependency, "\",state=\"OPEN\"}")),
              1)
        << c.dependency;
  }
}

TEST_F(NginxGatewayTest, FailsOpenWhenSluiceIsStoppedOrKilled) {
  // With Sluice deciding, 30 requests at once exceed a tenant's burst.
  int refused = 0;
  for (int i = 0; i < 30; ++i) {
    refused += IsRefusal(Get("/api/catalog/item", "tenant-c")) ? 1 : 0;
  }
  ASSERT_GT(refused, 0) << "the limit should refuse some";

  // Sends `n` requests for tenant-c; each must reach the backend without a
  // decision. The slowest answer's time.
  const auto expect_fail_open = [&](const char* phase, int n) {
    absl::Duration slowest;
    int failed_open = 0;
    for (int i = 0; i < n; ++i) {
      const absl::Time start = absl::Now();
      const HttpResponse r = Get("/api/catalog/item", "tenant-c");
      slowest = std::max(slowest, absl::Now() - start);
      if (IsBackend(r, "fail-open")) {
        ++failed_open;
      } else {
        ADD_FAILURE() << phase << ": " << r.status << " "
                      << r.header("x-sluice-result") << " " << r.body;
      }
    }
    std::printf(
        "[nginx] sluiced %s: %d of %d requests failed open, slowest "
        "answer %.0f ms\n",
        phase, failed_open, n, Ms(slowest));
    return slowest;
  };

  // Stopped: connections are accepted but never answered, so each acquire
  // ends at NGINX's 100 ms read timeout. kill() returns before the process
  // has stopped; /proc says when it has.
  ASSERT_GT(sluiced_.pid(), 0);
  kill(sluiced_.pid(), SIGSTOP);
  ASSERT_TRUE(WaitFor([&] { return ProcessState(sluiced_.pid()) == 'T'; },
                      absl::Seconds(5)))
      << "sluiced did not stop";
  const absl::Duration stopped_slowest = expect_fail_open("stopped", 10);
  EXPECT_LT(stopped_slowest, absl::Milliseconds(1000));
  kill(sluiced_.pid(), SIGCONT);
  EXPECT_TRUE(WaitFor(
      [&] {
        const std::string result =
            Get("/api/catalog/item", "tenant-d").header("x-sluice-result");
        return result == "backend" || result == "rejected";
      },
      absl::Seconds(5)))
      << "decisions did not come back after SIGCONT";

  // Killed: connection refused, at once.
  sluiced_.Kill();
  const absl::Duration killed_slowest = expect_fail_open("killed", 30);
  EXPECT_LT(killed_slowest, absl::Milliseconds(500));

  const std::string log = ErrorLog();
  EXPECT_TRUE(absl::StrContains(log, "answered 504; failing open")) << log;
  EXPECT_TRUE(absl::StrContains(log, "answered 502; failing open")) << log;
  // The access log tells the calls that went through undecided.
  const std::string access = ReadFile(dir_.File("access.log"));
  EXPECT_TRUE(absl::StrContains(access, " 200 ")) << Tail(access, 5);
  EXPECT_TRUE(absl::StrContains(access, "sluice=fail-open "))
      << Tail(access, 5);
  EXPECT_TRUE(
      absl::StrContains(access, "sluice=rejected rejected=RATE_LIMITED "))
      << Tail(access, 5);
}

}  // namespace
}  // namespace sluice
