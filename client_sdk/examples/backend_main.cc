// SPDX-License-Identifier: Apache-2.0
// sluice-example-backend: an HTTP backend whose failure rate, latency and
// capacity can be changed while it runs, and which can simply be killed.
//
//   GET  /<anything>   200 {"path":..., "n":...} after `latency`, or 500 with
//                      probability `failure_rate`
//   POST /admin?failure_rate=0.5&latency=20ms&workers=2   changes them at run
//                      time
//   GET  /stats        {"workers":..., "busy":..., "queued":..., ...}
//   GET  /healthz      200 "ok" (no latency, never fails)
//
// Capacity model (--workers N > 0): a request waits first come, first served
// for one of N workers and holds it for `latency`, so the backend serves
// N / latency requests a second and latency grows with the queue as Little's
// law says. At most --queue requests wait; the next one is answered 503 at
// once. --workers 0 (the default) serves everything in parallel.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <random>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "http_util.h"
#include "worker_pool.h"
#include "wire/address.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:8081", "host:port to serve on.");
ABSL_FLAG(absl::Duration, latency, absl::Milliseconds(2),
          "Time each request takes, e.g. 2ms.");
ABSL_FLAG(double, failure_rate, 0.0,
          "Share of requests answered 500, in [0, 1].");
ABSL_FLAG(int, threads, 64,
          "HTTP worker threads; with --workers, at least workers + queue + 16 "
          "(each waiting request and each keep-alive connection holds one).");
ABSL_FLAG(int, workers, 0,
          "Requests served at once (0 = unlimited); the rest wait in a queue.");
ABSL_FLAG(int, queue, 100,
          "With --workers: most requests waiting for a worker; beyond, 503.");

namespace {

std::atomic<int64_t> latency_us{0};
std::atomic<double> failure_rate{0};
std::atomic<uint64_t> served{0};

bool Fails() {
  const double rate = failure_rate.load();
  if (rate <= 0) return false;
  thread_local std::mt19937_64 rng(std::random_device{}());
  return std::uniform_real_distribution<double>(0, 1)(rng) < rate;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "HTTP backend for the Sluice example gateway; see the file comment.");
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<sluice::wire::HostPort> address =
      sluice::wire::ParseHostPort(absl::GetFlag(FLAGS_listen));
  if (!address.ok()) {
    std::fprintf(stderr, "sluice-example-backend: --listen: %s\n",
                 std::string(address.status().message()).c_str());
    return 2;
  }
  latency_us = absl::ToInt64Microseconds(absl::GetFlag(FLAGS_latency));
  failure_rate = absl::GetFlag(FLAGS_failure_rate);

  const int workers = absl::GetFlag(FLAGS_workers);
  const int queue = absl::GetFlag(FLAGS_queue);
  if (workers < 0 || queue < 0) {
    std::fprintf(stderr, "sluice-example-backend: --workers and --queue must "
                         "be >= 0\n");
    return 2;
  }
  sluice::examples::WorkerPool pool(workers, queue);
  int threads = absl::GetFlag(FLAGS_threads);
  if (workers > 0) threads = std::max(threads, workers + queue + 16);

  httplib::Server server;
  sluice::examples::StopOnSignal(&server);
  sluice::examples::ConfigureServer(&server, threads);

  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  server.Get("/stats", [&pool](const httplib::Request&, httplib::Response& res) {
    const sluice::examples::WorkerPool::Stats st = pool.stats();
    res.set_content(
        sluice::examples::JsonText({{"workers", st.workers},
                                    {"queue_limit", st.queue_limit},
                                    {"busy", st.busy},
                                    {"queued", st.queued},
                                    {"admitted", st.admitted},
                                    {"turned_away", st.turned_away},
                                    {"served", served.load()}}),
        "application/json");
  });
  server.Post("/admin", [&pool](const httplib::Request& req,
                                httplib::Response& res) {
    if (req.has_param("failure_rate")) {
      double rate = 0;
      if (!absl::SimpleAtod(req.get_param_value("failure_rate"), &rate) ||
          rate < 0 || rate > 1) {
        res.status = 400;
        res.set_content("failure_rate must be in [0, 1]\n", "text/plain");
        return;
      }
      failure_rate = rate;
    }
    if (req.has_param("latency")) {
      absl::Duration d;
      if (!absl::ParseDuration(req.get_param_value("latency"), &d) ||
          d < absl::ZeroDuration()) {
        res.status = 400;
        res.set_content("latency must be a duration such as 20ms\n",
                        "text/plain");
        return;
      }
      latency_us = absl::ToInt64Microseconds(d);
    }
    if (req.has_param("workers")) {
      int n = 0;
      if (!absl::SimpleAtoi(req.get_param_value("workers"), &n) || n < 0) {
        res.status = 400;
        res.set_content("workers must be an integer >= 0\n", "text/plain");
        return;
      }
      pool.SetWorkers(n);
    }
    res.set_content(absl::StrCat("failure_rate=", failure_rate.load(),
                                 " latency=", latency_us.load(),
                                 "us workers=", pool.stats().workers, "\n"),
                    "text/plain");
  });
  server.Get(".*", [&pool](const httplib::Request& req,
                           httplib::Response& res) {
    if (!pool.Acquire()) {
      res.status = 503;
      res.set_content("{\"error\":\"queue full\"}", "application/json");
      return;
    }
    const int64_t us = latency_us.load();
    if (us > 0) absl::SleepFor(absl::Microseconds(us));
    pool.Release();
    const uint64_t n = served.fetch_add(1) + 1;
    if (Fails()) {
      res.status = 500;
      res.set_content("{\"error\":\"injected failure\"}", "application/json");
      return;
    }
    res.set_content(sluice::examples::JsonText({{"path", req.path}, {"n", n}}),
                    "application/json");
  });

  if (!server.bind_to_port(address->host, address->port)) {
    std::fprintf(stderr, "sluice-example-backend: cannot listen on %s\n",
                 absl::GetFlag(FLAGS_listen).c_str());
    return 1;
  }
  sluice::examples::WidenListenBacklog(address->port);
  std::fprintf(stderr,
               "sluice-example-backend: serving on %s (%d threads, workers %d, "
               "queue %d)\n",
               absl::GetFlag(FLAGS_listen).c_str(), threads, workers, queue);
  server.listen_after_bind();
  return 0;
}
