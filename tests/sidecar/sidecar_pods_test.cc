// SPDX-License-Identifier: Apache-2.0
// Sidecar mode (issue 14) end to end: three simulated pods. Each pod is a
// sluiced listening on a Unix socket in its own directory (cluster mode,
// --replica-id pod-N) plus the example gateway whose `sluice:` target is that
// socket (so the SDK runs with SidecarClientOptions: 5 ms acquire timeout,
// fail open while the socket is dead, reconnect at least every second). The
// three sidecars form one cluster through a real redis-server; the gateways
// call one shared example backend, as a Service would. Pod 0's `payments`
// route alone points at a second backend that answers 500 to everything:
// a backend failure that only pod 0 sees.
//
// The scenario, with load through all three gateways all along:
//   1. the cluster-scope token bucket on `catalog` holds across the pods;
//   2. failures seen by pod 0 alone open the `payments` breaker on all three;
//   3. SIGKILL of pod 0's sluiced: gateway 0 fails open (its requests still
//      reach the backend, counted by its SDK as local decisions) while pods 1
//      and 2 keep limiting, and hold the whole limit between them once pod 0
//      is stale;
//   4. pod 0's sluiced restarts on the same socket path (removing the stale
//      socket the SIGKILL left): it rejoins, gateway 0 decides through it
//      again, and the limit holds over the three pods again.
// The figures are printed on lines starting with "[pods]".
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/build_paths.h"
#include "tests/testing/http_get.h"
#include "tests/testing/redis_server.h"
#include "tests/testing/sluiced_process.h"
#include "tests/testing/wait_for.h"

namespace sluice {
namespace {

using testing::FreePort;
using testing::HttpGet;
using testing::HttpRequest;
using testing::HttpResponse;
using testing::MetricSample;
using testing::ReadFile;
using testing::RedisServer;
using testing::RunCommand;
using testing::SluicedProcess;
using testing::WaitFor;
using testing::WaitForSyncTicks;
using testing::WriteFile;

// Cluster timing: ticks of 500 ms, so a replica is stale after 1.5 s.
constexpr absl::Duration kSync = absl::Milliseconds(500);
constexpr absl::Duration kStalePeriod = absl::Milliseconds(1500);  // 3 ticks
// The cluster limit on `catalog`.
constexpr double kRate = 30;   // per second
constexpr double kBurst = 15;  // 5 units for each of three pods
constexpr int kPods = 3;
// Each measuring window.
constexpr absl::Duration kWindow = absl::Seconds(4);

constexpr char kPolicies[] = R"(policies:
  - name: catalog
    rate_limit: { rate: 30, per: 1s, burst: 15, scope: CLUSTER }
  - name: payments
    call_timeout: 2s
    breaker: { consecutive_failures: 5, open_duration: 60s }
    fallback:
      strategy: STATIC
      payload: '{"payments":"later"}'
      content_type: application/json
      on: [CIRCUIT_OPEN, PROBE_LIMIT]
)";

// What may be admitted in `window` under the limit (rate x window + burst,
// plus 10%), and the least we expect (70% of rate x window).
int64_t UpperBound(absl::Duration window) {
  return static_cast<int64_t>(
      1.10 * (kRate * absl::ToDoubleSeconds(window) + kBurst));
}
int64_t LowerBound(absl::Duration window) {
  return static_cast<int64_t>(0.70 * kRate * absl::ToDoubleSeconds(window));
}

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// A child process other than sluiced (gateway, backend), its output in a log.
class ChildProcess {
 public:
  ChildProcess() = default;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() { Kill(); }

  bool Start(std::vector<std::string> args, const std::string& log_path) {
    log_path_ = log_path;
    pid_ = testing::SpawnWithLog(std::move(args), testing::CurrentEnvironment(),
                                 log_path, /*append=*/true);
    return pid_ > 0;
  }
  bool Exited() {
    if (pid_ <= 0) return true;
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) pid_ = -1;
    return pid_ <= 0;
  }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  std::string Log() const { return ReadFile(log_path_); }

 private:
  pid_t pid_ = -1;
  std::string log_path_;
};

// Waits until GET /healthz on `port` answers "ok" (gateway and backend).
bool WaitHealthy(ChildProcess* process, int port) {
  return WaitFor(
             [&] {
               return process->Exited() || HttpGet(port, "/healthz") == "ok\n";
             },
             absl::Seconds(10), absl::Milliseconds(20))
             .has_value() &&
         !process->Exited();
}

// One simulated pod: the sidecar and the gateway that uses it.
struct Pod {
  SluicedProcess sluiced;  // destroyed last: its directory holds the socket
  ChildProcess gateway;
  int gateway_port = 0;
  std::string replica_id;

  std::string socket() const { return sluiced.dir() + "/sluice.sock"; }
  // One sample of the gateway's /metrics ("name{labels}" works too), or -1.
  double GatewayMetric(const std::string& name) const {
    return MetricSample(gateway_port, name);
  }
  double LocalDecisions() const {
    return GatewayMetric(
        R"(sluice_gateway_sdk_events_total{event="local_decisions"})");
  }
  double Acquires() const {
    return GatewayMetric(R"(sluice_gateway_sdk_events_total{event="acquires"})");
  }
};

// How one gateway answered one request.
struct Answer {
  absl::Time sent;  // when the request started
  absl::Time at;    // when the answer arrived
  int pod = 0;
  int status = 0;
  std::string result;  // X-Sluice-Result
};

struct Counts {
  int64_t asked = 0;
  int64_t admitted = 0;  // 200 from the backend
  int64_t refused = 0;   // 429 from the gateway (Sluice said RATE_LIMITED)
  int64_t other = 0;     // anything else: a failed request, 5xx, fallback
};

// Offered load on GET /api/catalog/item through every gateway, recorded.
class CatalogLoad {
 public:
  // `threads` per gateway, each pausing `pause` after every answer.
  CatalogLoad(std::vector<int> ports, int threads, absl::Duration pause)
      : ports_(std::move(ports)), threads_per_pod_(threads), pause_(pause) {}
  ~CatalogLoad() { Stop(); }

  void Start() {
    for (size_t pod = 0; pod < ports_.size(); ++pod) {
      for (int t = 0; t < threads_per_pod_; ++t) {
        threads_.emplace_back([this, pod] { Run(static_cast<int>(pod)); });
      }
    }
  }
  void Stop() {
    stop_ = true;
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  // Answers of `pod` (-1: every pod) that arrived in [from, to); with
  // `sent_from`, only those to requests started at or after `from`.
  Counts Count(int pod, absl::Time from, absl::Time to,
               bool sent_from = false) const {
    absl::MutexLock lock(&mu_);
    Counts c;
    for (const Answer& a : answers_) {
      if ((sent_from ? a.sent : a.at) < from || a.at >= to ||
          (pod >= 0 && a.pod != pod)) {
        continue;
      }
      ++c.asked;
      if (a.status == 200 && a.result == "backend") {
        ++c.admitted;
      } else if (a.status == 429 && a.result == "rejected") {
        ++c.refused;
      } else {
        ++c.other;
      }
    }
    return c;
  }
  // The first answer of `pod` after `from` with `status`.
  std::optional<absl::Time> First(int pod, absl::Time from, int status) const {
    absl::MutexLock lock(&mu_);
    std::optional<absl::Time> first;
    for (const Answer& a : answers_) {
      if (a.pod == pod && a.at >= from && a.status == status &&
          (!first.has_value() || a.at < *first)) {
        first = a.at;
      }
    }
    return first;
  }

 private:
  void Run(int pod) {
    while (!stop_) {
      const absl::Time sent = absl::Now();
      const HttpResponse r = HttpRequest(ports_[pod], "GET", "/api/catalog/item");
      Answer a;
      a.sent = sent;
      a.at = absl::Now();
      a.pod = pod;
      a.status = r.status;
      a.result = r.header("x-sluice-result");
      {
        absl::MutexLock lock(&mu_);
        answers_.push_back(std::move(a));
      }
      absl::SleepFor(pause_);  // paces the offered load
    }
  }

  const std::vector<int> ports_;
  const int threads_per_pod_;
  const absl::Duration pause_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
  mutable absl::Mutex mu_;
  std::vector<Answer> answers_ ABSL_GUARDED_BY(mu_);
};

// The SDK's acquires and local decisions of every gateway at one moment.
struct SdkSnapshot {
  std::vector<double> acquires, local;
};

std::string Describe(const Counts& c) {
  return absl::StrCat(c.admitted, " admitted, ", c.refused, " refused, ",
                      c.other, " other, of ", c.asked);
}

class SidecarPodsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/sidecar_pods_XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    ASSERT_TRUE(redis_.Start());
    backend_port_ = FreePort();
    ASSERT_TRUE(
        backend_.Start({testing::kExampleBackendPath,
                        absl::StrCat("--listen=127.0.0.1:", backend_port_),
                        "--latency=2ms"},  // 64 threads: every gateway thread
                                           // keeps a connection
                       dir_ + "/backend.log"));
    ASSERT_TRUE(WaitHealthy(&backend_, backend_port_)) << backend_.Log();
    failing_port_ = FreePort();
    ASSERT_TRUE(failing_backend_.Start(
        {testing::kExampleBackendPath,
         absl::StrCat("--listen=127.0.0.1:", failing_port_),
         // A thread per kept-alive connection of the gateway (8 threads):
         // with fewer, a connection past them waits in the backlog until
         // the 2 s call_timeout, and the breaker trips seconds late.
         "--latency=2ms", "--failure_rate=1", "--threads=16"},
        dir_ + "/failing_backend.log"));
    ASSERT_TRUE(WaitHealthy(&failing_backend_, failing_port_))
        << failing_backend_.Log();
  }

  void TearDown() override {
    if (HasFailure()) {
      for (size_t i = 0; i < pods_.size(); ++i) {
        std::printf("---- pod %zu sluiced log (tail):\n%s\n", i,
                    Tail(pods_[i]->sluiced.Log(), 40).c_str());
        std::printf("---- pod %zu gateway log (tail):\n%s\n", i,
                    Tail(pods_[i]->gateway.Log(), 20).c_str());
      }
    }
    pods_.clear();
    RunCommand("rm -rf " + dir_);
  }

  static std::string Tail(const std::string& text, int lines) {
    size_t at = text.size();
    for (int i = 0; i <= lines && at != std::string::npos && at > 0; ++i) {
      at = text.rfind('\n', at - 1);
    }
    return at == std::string::npos ? text : text.substr(at + 1);
  }

  // Starts (or restarts) pod `i`'s sluiced on its socket; the error if not.
  std::string StartSidecar(int i) {
    Pod& pod = *pods_[i];
    pod.sluiced.set_listen("unix:" + pod.socket(),
                           "unix:" + pod.sluiced.dir() + "/admin.sock");
    std::string error;
    if (!pod.sluiced.Start(kPolicies,
                           {"--redis=" + redis_.address(),
                            "--sync-interval=" + absl::FormatDuration(kSync),
                            "--replica-id=" + pod.replica_id,
                            "--redis-timeout=200ms"},
                           "", &error)) {
      return error;
    }
    return "";
  }

  // Starts pod `i`'s gateway on a free port, `sluice: unix:<socket>`.
  std::string StartGateway(int i) {
    Pod& pod = *pods_[i];
    pod.gateway_port = FreePort();
    const int payments_backend = i == 0 ? failing_port_ : backend_port_;
    const std::string config = absl::StrCat(
        "listen: 127.0.0.1:", pod.gateway_port, "\n",
        "sluice: unix:", pod.socket(), "\n",
        "threads: 8\n",
        "routes:\n",
        "  - prefix: /api/catalog\n",
        "    dependency: catalog\n",
        "    backend: http://127.0.0.1:", backend_port_, "\n",
        "  - prefix: /api/payments\n",
        "    dependency: payments\n",
        "    backend: http://127.0.0.1:", payments_backend, "\n",
        "    default_fallback: '{\"payments\":\"later\"}'\n");
    const std::string config_path = absl::StrCat(dir_, "/gateway", i, ".yaml");
    WriteFile(config_path, config);
    if (!pod.gateway.Start(
            {testing::kExampleGatewayPath, "--config=" + config_path},
            absl::StrCat(dir_, "/gateway", i, ".log"))) {
      return "cannot spawn the gateway";
    }
    if (!WaitHealthy(&pod.gateway, pod.gateway_port)) {
      return "gateway did not come up:\n" + pod.gateway.Log();
    }
    return "";
  }

  void StartPods() {
    for (int i = 0; i < kPods; ++i) {
      pods_.push_back(std::make_unique<Pod>());
      pods_.back()->replica_id = absl::StrCat("pod-", i);
      const std::string error = StartSidecar(i);
      ASSERT_EQ(error, "") << "pod " << i;
      ASSERT_EQ(pods_.back()->sluiced.target(), "unix:" + pods_.back()->socket());
    }
    for (int i = 0; i < kPods; ++i) {
      const std::string error = StartGateway(i);
      ASSERT_EQ(error, "") << "pod " << i;
      // A unix: target: the gateway runs on the SDK's SidecarClientOptions.
      EXPECT_TRUE(absl::StrContains(pods_[i]->gateway.Log(),
                                    "Sluice at unix:" + pods_[i]->socket()))
          << pods_[i]->gateway.Log();
    }
  }

  std::vector<const SluicedProcess*> Sidecars(std::vector<int> which) const {
    std::vector<const SluicedProcess*> out;
    for (int i : which) out.push_back(&pods_[i]->sluiced);
    return out;
  }

  SdkSnapshot Sdk() const {
    SdkSnapshot s;
    for (const auto& pod : pods_) {
      s.acquires.push_back(pod->Acquires());
      s.local.push_back(pod->LocalDecisions());
    }
    return s;
  }
  // Prints what each gateway's SDK decided locally between two snapshots.
  void PrintLocalDecisions(const char* phase, const SdkSnapshot& from,
                           const SdkSnapshot& to) const {
    std::string line;
    for (size_t i = 0; i < from.local.size(); ++i) {
      absl::StrAppend(&line, i == 0 ? "" : "; ", "gateway ", i, " ",
                      to.local[i] - from.local[i], " of ",
                      to.acquires[i] - from.acquires[i]);
    }
    std::printf("[pods] SDK local (fail-open) decisions %s: %s\n", phase,
                line.c_str());
  }

  HttpResponse Payments(int pod) {
    return HttpRequest(pods_[pod]->gateway_port, "GET", "/api/payments/charge");
  }

  std::string dir_;
  RedisServer redis_;
  ChildProcess backend_, failing_backend_;
  int backend_port_ = 0, failing_port_ = 0;
  std::vector<std::unique_ptr<Pod>> pods_;
};

TEST_F(SidecarPodsTest, ThreePodsShareLimitsAndBreakersAndSurviveASidecarKill) {
  const absl::Time test_start = absl::Now();
  ASSERT_NO_FATAL_FAILURE(StartPods());
  for (int i = 0; i < kPods; ++i) {
    ASSERT_TRUE(pods_[i]->sluiced.WaitForLiveReplicas(kPods, absl::Seconds(10)))
        << "pod " << i << " never saw " << kPods << " live replicas";
  }
  std::printf("[pods] 3 pods up (redis, 2 backends, 3 sluiced on unix sockets, "
              "3 gateways) in %.0f ms\n",
              Ms(absl::Now() - test_start));

  std::vector<int> ports;
  for (const auto& pod : pods_) ports.push_back(pod->gateway_port);
  // Two clients per gateway, each ~19 requests/s: ~115/s offered against a
  // cluster limit of 30/s.
  CatalogLoad load(ports, 2, absl::Milliseconds(50));
  const SdkSnapshot sdk_start = Sdk();
  const absl::Time load_start = absl::Now();
  load.Start();

  // ---- 1. The cluster limit holds across the three pods.
  {
    // Two seconds (four ticks) for the grants to follow the demand; then
    // the measuring window.
    const absl::Time from = load_start + absl::Seconds(2);
    const absl::Time to = from + kWindow;
    absl::SleepFor(to - absl::Now() + absl::Milliseconds(100));  // the window
    PrintLocalDecisions("in phase 1 (warm-up and window)", sdk_start, Sdk());
    const Counts all = load.Count(-1, from, to);
    std::printf("[pods] phase 1 (3 pods, %.0f s window, limit %.0f/s burst "
                "%.0f): %s; allowed range [%lld, %lld]\n",
                absl::ToDoubleSeconds(kWindow), kRate, kBurst,
                Describe(all).c_str(),
                static_cast<long long>(LowerBound(kWindow)),
                static_cast<long long>(UpperBound(kWindow)));
    for (int i = 0; i < kPods; ++i) {
      const Counts c = load.Count(i, from, to);
      std::printf("[pods] phase 1 pod %d: %s\n", i, Describe(c).c_str());
      EXPECT_GT(c.admitted, 0) << "pod " << i << " got no share";
      EXPECT_EQ(c.other, 0) << "pod " << i;
    }
    EXPECT_LE(all.admitted, UpperBound(kWindow));
    EXPECT_GE(all.admitted, LowerBound(kWindow));
    EXPECT_GT(all.refused, 0);
  }

  // ---- 2. A backend failure seen by pod 0 alone opens the breaker on all.
  {
    for (int i = 1; i < kPods; ++i) {
      const HttpResponse r = Payments(i);
      EXPECT_EQ(r.status, 200) << "pod " << i;
      EXPECT_EQ(r.header("x-sluice-result"), "backend") << "pod " << i;
    }
    // Pod 0's payments backend answers 500: the gateway serves its fallback
    // (reason CALL_FAILED) and reports FAILURE; the fifth in a row trips.
    int failures = 0;
    absl::Time fifth_failure;
    std::optional<absl::Time> open_on_0;
    for (int n = 0; n < 30 && !open_on_0.has_value(); ++n) {
      const HttpResponse r = Payments(0);
      const std::string reason = r.header("x-sluice-reason");
      if (reason == "CALL_FAILED" && ++failures == 5) fifth_failure = absl::Now();
      if (reason == "CIRCUIT_OPEN") {
        open_on_0 = absl::Now();
        EXPECT_EQ(r.status, 200);
        EXPECT_EQ(r.header("x-sluice-result"), "degraded");
      }
      if (failures >= 5) absl::SleepFor(absl::Milliseconds(10));  // paces
    }
    ASSERT_GE(failures, 5);
    ASSERT_TRUE(open_on_0.has_value()) << "pod 0 never refused payments";
    std::printf("[pods] phase 2: pod 0 tripped after %d failures; its gateway "
                "answered CIRCUIT_OPEN %.0f ms after the 5th failure\n",
                failures, Ms(*open_on_0 - fifth_failure));
    // Pods 1 and 2 never saw a failure; they must refuse within two ticks.
    std::vector<std::optional<absl::Time>> seen(kPods);
    WaitFor(
        [&] {
          bool all = true;
          for (int i = 1; i < kPods; ++i) {
            if (seen[i].has_value()) continue;
            const HttpResponse r = Payments(i);
            if (r.header("x-sluice-reason") == "CIRCUIT_OPEN" &&
                r.header("x-sluice-result") == "degraded") {
              seen[i] = absl::Now();
            } else {
              all = false;
            }
          }
          return all;
        },
        fifth_failure + absl::Seconds(5), absl::Milliseconds(10));
    for (int i = 1; i < kPods; ++i) {
      ASSERT_TRUE(seen[i].has_value())
          << "pod " << i << " never refused payments";
      const absl::Duration lag = *seen[i] - fifth_failure;
      std::printf("[pods] phase 2: pod %d's gateway answered CIRCUIT_OPEN "
                  "%.0f ms after pod 0's 5th failure (sync interval %.0f ms)\n",
                  i, Ms(lag), Ms(kSync));
      EXPECT_LE(lag, 2 * kSync + absl::Milliseconds(250)) << "pod " << i;
      // The sidecar itself, asked over its socket.
      EXPECT_EQ(pods_[i]->sluiced.Acquire("payments").reason(),
                v1::CIRCUIT_OPEN)
          << "pod " << i;
    }
    for (int i = 0; i < kPods; ++i) {
      // 2 = open, as the gateway last saw it in Sluice's answers.
      EXPECT_EQ(pods_[i]->GatewayMetric(
                    R"(sluice_gateway_breaker_state{dependency="payments"})"),
                2)
          << "pod " << i;
    }
  }

  // ---- 3. SIGKILL of pod 0's sidecar: gateway 0 fails open, the others
  // keep limiting and, once pod 0 is stale, hold the whole limit.
  Pod& pod0 = *pods_[0];
  {
    PrintLocalDecisions("from the start to the kill", sdk_start, Sdk());
    const double local_before = pod0.LocalDecisions();
    ASSERT_GE(local_before, 0);
    const absl::Time killed = absl::Now();
    pod0.sluiced.Kill();
    // Requests started from here can only have been decided without it (a
    // refusal decided just before the kill may still be answered after).
    const absl::Time dead = absl::Now();
    struct stat info {};
    ASSERT_EQ(lstat(pod0.socket().c_str(), &info), 0)
        << "SIGKILL should leave the socket file behind";
    ASSERT_TRUE(S_ISSOCK(info.st_mode));
    ASSERT_TRUE(WaitFor([&] { return pod0.LocalDecisions() > local_before; },
                        killed + absl::Seconds(5)))
        << "gateway 0 never decided locally";
    std::printf("[pods] phase 3: kill -> gateway 0's first fail-open decision "
                "seen in %.0f ms (metrics polled every 10 ms)\n",
                Ms(absl::Now() - killed));
    // Pods 1 and 2 drop pod 0 after the stale period (three ticks).
    for (int i = 1; i < kPods; ++i) {
      ASSERT_TRUE(pods_[i]->sluiced.WaitForLiveReplicas(2, absl::Seconds(6)))
          << "pod " << i << " still counts pod 0";
    }
    const absl::Duration to_stale = absl::Now() - killed;
    std::printf("[pods] phase 3: kill -> pods 1 and 2 count 2 live replicas: "
                "%.0f ms (stale period %.0f ms)\n",
                Ms(to_stale), Ms(kStalePeriod));
    EXPECT_GE(to_stale, kStalePeriod - kSync);
    {
      Counts before_stale = load.Count(1, killed, killed + to_stale);
      before_stale.admitted += load.Count(2, killed, killed + to_stale).admitted;
      std::printf("[pods] phase 3: pods 1+2 admitted %lld in the %.1f s before "
                  "they dropped pod 0 (their own grants, 2/3 of the limit)\n",
                  static_cast<long long>(before_stale.admitted),
                  absl::ToDoubleSeconds(to_stale));
    }
    // Two more ticks for pod 0's grant to move to pods 1 and 2.
    ASSERT_TRUE(WaitForSyncTicks(Sidecars({1, 2}), 2, absl::Seconds(5)));

    const absl::Time from = absl::Now();
    const double local_from = pod0.LocalDecisions();
    const double fail_open_from = pod0.GatewayMetric(
        R"(sluice_gateway_fail_open_calls_total{dependency="catalog",result="success"})");
    absl::SleepFor(kWindow);  // the measuring window
    const absl::Time to = absl::Now();
    const double local_delta = pod0.LocalDecisions() - local_from;
    const double fail_open_delta =
        pod0.GatewayMetric(
            R"(sluice_gateway_fail_open_calls_total{dependency="catalog",result="success"})") -
        fail_open_from;
    const Counts gw0 = load.Count(0, from, to);
    const Counts gw0_all = load.Count(0, dead, to, /*sent_from=*/true);
    Counts others = load.Count(1, from, to);
    const Counts c2 = load.Count(2, from, to);
    others.asked += c2.asked;
    others.admitted += c2.admitted;
    others.refused += c2.refused;
    others.other += c2.other;
    std::printf("[pods] phase 3 (pod 0's sidecar dead, %.0f s window): "
                "gateway 0 %s (SDK local decisions +%.0f, fail-open backend "
                "calls +%.0f); pods 1+2 %s; allowed range for pods 1+2 "
                "[%lld, %lld]\n",
                absl::ToDoubleSeconds(to - from), Describe(gw0).c_str(),
                local_delta, fail_open_delta, Describe(others).c_str(),
                static_cast<long long>(LowerBound(to - from)),
                static_cast<long long>(UpperBound(to - from)));
    // Gateway 0 keeps serving: every request since the kill reached the
    // backend, decided by its SDK alone.
    EXPECT_EQ(gw0_all.admitted, gw0_all.asked) << Describe(gw0_all);
    EXPECT_GT(gw0.asked, 0);
    EXPECT_GE(local_delta, gw0.asked - 3);
    EXPECT_GE(fail_open_delta, gw0.admitted - 3);
    // Pods 1 and 2 still limit, now holding the whole limit between them.
    EXPECT_LE(others.admitted, UpperBound(to - from));
    EXPECT_GE(others.admitted, LowerBound(to - from));
    EXPECT_GT(others.refused, 0);
    EXPECT_EQ(others.other, 0);
  }

  // ---- 4. Pod 0's sidecar restarts on the same socket path and rejoins.
  {
    const SdkSnapshot before_restart = Sdk();
    const absl::Time restarted = absl::Now();
    const std::string error = StartSidecar(0);
    ASSERT_EQ(error, "");
    const absl::Duration to_serving = absl::Now() - restarted;
    EXPECT_TRUE(absl::StrContains(pod0.sluiced.Log(),
                                  "removed the stale socket " + pod0.socket()))
        << pod0.sluiced.Log();
    // Two things to see, timed separately: gateway 0 asks its sidecar again
    // (an Acquire that was not decided locally), and every pod counts three
    // live replicas.
    std::optional<absl::Duration> to_remote, to_rejoin;
    WaitFor(
        [&] {
          if (!to_remote.has_value() &&
              pod0.Acquires() - before_restart.acquires[0] >
                  pod0.LocalDecisions() - before_restart.local[0]) {
            to_remote = absl::Now() - restarted;
          }
          if (!to_rejoin.has_value() &&
              std::all_of(pods_.begin(), pods_.end(), [](const auto& pod) {
                return pod->sluiced.Metric("sluice_live_replicas") == kPods;
              })) {
            to_rejoin = absl::Now() - restarted;
          }
          return to_remote.has_value() && to_rejoin.has_value();
        },
        restarted + absl::Seconds(8));
    ASSERT_TRUE(to_remote.has_value())
        << "gateway 0 never asked its restarted sidecar";
    ASSERT_TRUE(to_rejoin.has_value()) << "the pods never counted 3 again";
    std::printf("[pods] phase 4: restart -> sluiced serving on the old socket "
                "path %.0f ms; -> gateway 0's first decision by its sidecar "
                "%.0f ms; -> all pods count 3 live replicas %.0f ms\n",
                Ms(to_serving), Ms(*to_remote), Ms(*to_rejoin));
    // The channel reconnects at most 1 s (+20% jitter) after the socket is
    // back, and the SDK probes as soon as it is connected; a probe during
    // the connect may still miss its 5 ms. Two reconnect periods allowed.
    EXPECT_LE(*to_remote, absl::Milliseconds(2400));
    // The restarted replica adopted the cluster's open breaker on its first
    // tick: the sidecar refuses payments, and so does gateway 0 (asked until
    // an answer was decided by the sidecar and not by a 5 ms timeout).
    EXPECT_EQ(pod0.sluiced.Acquire("payments").reason(), v1::CIRCUIT_OPEN);
    EXPECT_TRUE(WaitFor(
        [&] {
          return Payments(0).header("x-sluice-reason") == "CIRCUIT_OPEN";
        },
        absl::Seconds(2), absl::Milliseconds(50)))
        << "gateway 0 does not refuse payments after the restart";
    // A few ticks for the grants to follow the demand again.
    ASSERT_TRUE(WaitForSyncTicks(Sidecars({0, 1, 2}), 3, absl::Seconds(5)));
    PrintLocalDecisions("from the restart to the window", before_restart,
                        Sdk());

    const absl::Time from = absl::Now();
    const SdkSnapshot sdk_from = Sdk();
    absl::SleepFor(kWindow);  // the measuring window
    const absl::Time to = absl::Now();
    const SdkSnapshot sdk_to = Sdk();
    const Counts all = load.Count(-1, from, to);
    std::printf("[pods] phase 4 (pod 0 rejoined, %.0f s window): %s; allowed "
                "range [%lld, %lld]\n",
                absl::ToDoubleSeconds(to - from), Describe(all).c_str(),
                static_cast<long long>(LowerBound(to - from)),
                static_cast<long long>(UpperBound(to - from)));
    PrintLocalDecisions("in phase 4's window", sdk_from, sdk_to);
    for (int i = 0; i < kPods; ++i) {
      const Counts c = load.Count(i, from, to);
      std::printf("[pods] phase 4 pod %d: %s\n", i, Describe(c).c_str());
      EXPECT_GT(c.admitted, 0) << "pod " << i << " got no share";
      EXPECT_GT(c.refused, 0) << "pod " << i << " does not limit";
      EXPECT_EQ(c.other, 0) << "pod " << i;
    }
    // Gateway 0 decides through its sidecar again (its refusals above can
    // only come from there). The 5 ms acquire timeout of the sidecar preset
    // still lets a call now and then decide locally on a busy machine, as on
    // the gateways whose sidecar never went away (about 1% here, up to 10%
    // with a CPU hog running): not more than 3% or twice theirs, plus 2.
    const double asked0 = sdk_to.acquires[0] - sdk_from.acquires[0];
    const double local0 = sdk_to.local[0] - sdk_from.local[0];
    const double local_others = std::max(sdk_to.local[1] - sdk_from.local[1],
                                         sdk_to.local[2] - sdk_from.local[2]);
    EXPECT_GT(asked0, 0);
    EXPECT_LE(local0, std::max(0.03 * asked0, 2 * local_others) + 2)
        << "gateway 0 still decides without its sidecar";
    EXPECT_LE(all.admitted, UpperBound(to - from));
    EXPECT_GE(all.admitted, LowerBound(to - from));
  }
  load.Stop();
  PrintLocalDecisions("over the whole run", sdk_start, Sdk());
  std::printf("[pods] scenario wall time %.1f s\n",
              absl::ToDoubleSeconds(absl::Now() - test_start));
}

// A second sluiced on a socket path that a live one serves is refused with a
// clear message, and leaves the first serving (its socket file in place).
// The same path, once the first is SIGKILLed, is taken over.
TEST(SidecarSocketTest, SecondSluicedOnALiveSocketIsRefused) {
  constexpr char kSimple[] = R"(policies:
  - name: catalog
    rate_limit: { rate: 1000 }
)";
  SluicedProcess first;
  const std::string socket = first.dir() + "/sluice.sock";
  first.set_listen("unix:" + socket, "unix:" + first.dir() + "/admin.sock");
  std::string error;
  ASSERT_TRUE(first.Start(kSimple, {}, "", &error)) << error;

  SluicedProcess second;
  second.set_listen("unix:" + socket, "unix:" + second.dir() + "/admin.sock");
  error.clear();
  ASSERT_FALSE(second.Start(kSimple, {}, "", &error));
  EXPECT_TRUE(absl::StrContains(error, "cannot listen on unix:" + socket +
                                          ": another sluiced holds " + socket +
                                          ".lock"))
      << error;
  const size_t message = error.find("cannot listen");
  std::printf("[pods] second sluiced on a live socket: %s\n",
              error.substr(message == std::string::npos ? 0 : message).c_str());

  struct stat info {};
  ASSERT_EQ(lstat(socket.c_str(), &info), 0) << "the refused one removed it";
  EXPECT_TRUE(S_ISSOCK(info.st_mode));
  grpc::Status status;
  EXPECT_EQ(first.Acquire("catalog", &status).verdict(), v1::ALLOW);
  EXPECT_TRUE(status.ok()) << status.error_message();

  first.Kill();
  error.clear();
  ASSERT_TRUE(second.Start(kSimple, {}, "", &error)) << error;
  EXPECT_TRUE(absl::StrContains(second.Log(), "removed the stale socket " + socket))
      << second.Log();
  EXPECT_EQ(second.Acquire("catalog", &status).verdict(), v1::ALLOW);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(second.Terminate(), 0);
  EXPECT_NE(lstat(socket.c_str(), &info), 0) << "left behind at exit";
  EXPECT_NE(lstat((socket + ".lock").c_str(), &info), 0)
      << "lock file left behind at exit";
}

}  // namespace
}  // namespace sluice
