// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TOOLS_SLUICE_BENCH_LOAD_PHASE_H_
#define SLUICE_TOOLS_SLUICE_BENCH_LOAD_PHASE_H_

#include <grpcpp/grpcpp.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tools/sluice-bench/bench_options.h"
#include "tools/sluice-bench/budget.h"
#include "tools/sluice-bench/percentile_histogram.h"
#include "tools/sluice-bench/workload.h"

namespace sluice::bench {

// What one phase of load (decisions, or health checks) came to.
struct PhaseResult {
  // From the first call to the last answer.
  absl::Duration elapsed;
  // Decisions made (or health checks answered).
  uint64_t completed = 0;
  // Acquire latency (or Health/Check latency).
  PercentileHistogram first;
  // Acquire until its report was answered, for allowed decisions.
  PercentileHistogram pair;
  // Acquire verdicts, indexed by sluice.v1.Verdict.
  std::array<uint64_t, 4> verdicts{};
  // Failed calls by gRPC code name ("UNAVAILABLE"); "UNANSWERED" for calls a
  // stream ended without answering.
  std::map<std::string, uint64_t> errors;
  // "UNIMPLEMENTED: ..." of the first failure, for the operator.
  std::string first_error;

  uint64_t error_count() const;
  double per_second() const;
  // Adds `other`'s calls, latencies and errors (not its elapsed time).
  void Merge(const PhaseResult& other);
};

// options.connections channels to options.target, each with a channel
// argument of its own so that none shares a connection, each connected.
// UNAVAILABLE when one does not connect within options.deadline.
absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> OpenConnections(
    const BenchOptions& options);

// Acquire + ReportResult pairs in options.mode, options.concurrency of them
// in flight on each channel. `seed` varies the mix between phases.
PhaseResult RunDecisions(
    const BenchOptions& options, const Workload& workload,
    const std::vector<std::shared_ptr<grpc::Channel>>& channels,
    PhaseLength length, uint64_t seed);

// grpc.health.v1.Health/Check for the whole server (""), options.concurrency
// in flight on each channel.
PhaseResult RunHealthChecks(
    const BenchOptions& options,
    const std::vector<std::shared_ptr<grpc::Channel>>& channels,
    PhaseLength length);

}  // namespace sluice::bench

#endif  // SLUICE_TOOLS_SLUICE_BENCH_LOAD_PHASE_H_
