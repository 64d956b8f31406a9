// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TOOLS_SLUICE_BENCH_HTTP_LOAD_H_
#define SLUICE_TOOLS_SLUICE_BENCH_HTTP_LOAD_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/sluice-bench/bench_options.h"
#include "tools/sluice-bench/budget.h"
#include "tools/sluice-bench/load_phase.h"
#include "tools/sluice-bench/workload.h"

namespace sluice::bench {

// Load through sluiced's HTTP/JSON API: options.connections keep-alive
// connections to options.http_target, each driven by a thread of its own
// in a closed loop, one request in flight at a time (HTTP/1.1, as a gateway
// worker without pipelining makes them). The connections stay open from
// one phase to the next, like the gRPC channels. Not thread-safe; one
// phase runs at a time.
class HttpConnections {
 public:
  // Connects options.connections clients, each answering one GET
  // /v1/health; UNAVAILABLE when one cannot within options.deadline.
  static absl::StatusOr<std::unique_ptr<HttpConnections>> Open(
      const BenchOptions& options);
  ~HttpConnections();

  // POST /v1/acquire then, for an ALLOW, POST /v1/report (after
  // options.latency with options.hold). `seed` varies the mix between
  // phases. Errors count by "HTTP_<status>", or "CONNECTION" when no answer
  // came.
  PhaseResult RunDecisions(const Workload& workload, PhaseLength length,
                           uint64_t seed);

  // GET /v1/health on the same connections.
  PhaseResult RunHealthChecks(PhaseLength length);

 private:
  struct Connection;  // an httplib client, kept out of this header
  explicit HttpConnections(const BenchOptions& options);

  const BenchOptions& options_;
  std::vector<std::unique_ptr<Connection>> connections_;
};

}  // namespace sluice::bench

#endif  // SLUICE_TOOLS_SLUICE_BENCH_HTTP_LOAD_H_
