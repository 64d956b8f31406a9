// sluice-example-backend: an HTTP backend whose failure rate and latency can
// be changed while it runs, and which can simply be killed.
//
//   GET  /<anything>   200 {"path":..., "n":...} after `latency`, or 500 with
//                      probability `failure_rate`
//   POST /admin?failure_rate=0.5&latency=20ms   changes both at run time
//   GET  /healthz      200 "ok" (no latency, never fails)
#include <httplib.h>

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
#include "wire/address.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:8081", "host:port to serve on.");
ABSL_FLAG(absl::Duration, latency, absl::Milliseconds(2),
          "Time each request takes, e.g. 2ms.");
ABSL_FLAG(double, failure_rate, 0.0,
          "Share of requests answered 500, in [0, 1].");
ABSL_FLAG(int, threads, 64, "HTTP worker threads.");

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

  httplib::Server server;
  sluice::examples::StopOnSignal(&server);
  sluice::examples::ConfigureServer(&server, absl::GetFlag(FLAGS_threads));

  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  server.Post("/admin", [](const httplib::Request& req, httplib::Response& res) {
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
    res.set_content(absl::StrCat("failure_rate=", failure_rate.load(),
                                 " latency=", latency_us.load(), "us\n"),
                    "text/plain");
  });
  server.Get(".*", [](const httplib::Request& req, httplib::Response& res) {
    const int64_t us = latency_us.load();
    if (us > 0) absl::SleepFor(absl::Microseconds(us));
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
  std::fprintf(stderr, "sluice-example-backend: serving on %s\n",
               absl::GetFlag(FLAGS_listen).c_str());
  server.listen_after_bind();
  return 0;
}
