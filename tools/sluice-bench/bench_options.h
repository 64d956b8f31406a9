// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TOOLS_SLUICE_BENCH_BENCH_OPTIONS_H_
#define SLUICE_TOOLS_SLUICE_BENCH_BENCH_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "tools/sluice-bench/workload.h"

namespace sluice::bench {

enum class Mode {
  kUnary,   // Acquire, then ReportResult, as separate unary RPCs
  kStream,  // both as calls on one DecisionService.Decide stream
  kRls,     // Envoy's RateLimitService/ShouldRateLimit, no report
};

const char* ModeName(Mode mode);

// Which front end of sluiced the decisions go through.
enum class Api {
  kGrpc,  // DecisionService on --target, in --mode unary or stream
  kHttp,  // the HTTP/JSON API on --http-target: POST /v1/acquire and
          // /v1/report, one request in flight per keep-alive connection
};

const char* ApiName(Api api);


// Everything a run needs, as the command line sets it.
struct BenchOptions {
  // HOST:PORT or unix:PATH of a running sluiced.
  std::string target = "127.0.0.1:50051";
  // TLS to --target (a sluiced with --tls-cert): the CA of its certificate,
  // and a client certificate and key for --tls-client-ca. "" each:
  // plaintext. gRPC only.
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  Api api = Api::kGrpc;
  // HOST:PORT of sluiced's HTTP API (its --http-listen), for Api::kHttp.
  std::string http_target;
  Mode mode = Mode::kUnary;
  // Separate gRPC channels, each with its own connection; with Api::kHttp,
  // keep-alive connections, each driven by a thread of its own.
  int connections = 4;
  // Decisions in flight per connection (unary: concurrent RPC chains;
  // stream: calls outstanding on the connection's stream; HTTP: 1).
  int concurrency = 16;
  // Stream mode: at most this many calls per DecideRequest.
  int batch = 1;
  WorkloadOptions workload;
  // The latency each report carries.
  absl::Duration latency = absl::Milliseconds(5);
  // Hold an allowed permit for `latency` before reporting it.
  bool hold = false;
  // Decisions to make; 0 runs for `duration` instead.
  uint64_t count = 0;
  absl::Duration duration = absl::Seconds(10);
  // Run unmeasured for this long first (decisions and baseline alike).
  absl::Duration warmup = absl::Seconds(1);
  // Deadline of each unary RPC, and of connecting.
  absl::Duration deadline = absl::Seconds(5);
  // Also measure grpc.health.v1.Health/Check (HTTP: GET /v1/health) with
  // the same load shape.
  bool baseline = true;
  // Where to write the JSON result; "" for none.
  std::string json_path;
  // Seeds the per-call generators, so that a run's mix is repeatable.
  uint64_t seed = 1;
  // The AcquireRequest.caller of every call.
  std::string caller = "sluice-bench";
};

// What reading the command line came to.
struct ParsedCommandLine {
  enum class Outcome { kRun, kHelp, kUsageError };
  Outcome outcome = Outcome::kRun;
  BenchOptions options;
  // kHelp: the help text. kUsageError: one line naming the flag.
  std::string text;
};

ParsedCommandLine ParseBenchCommandLine(int argc, const char* const* argv);

// The --help text.
extern const char kBenchUsage[];

}  // namespace sluice::bench

#endif  // SLUICE_TOOLS_SLUICE_BENCH_BENCH_OPTIONS_H_
