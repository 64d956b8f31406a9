// SPDX-License-Identifier: Apache-2.0
// sluice-bench: load for a running sluiced, through gRPC or the HTTP/JSON
// API, with the health check of the same front end as the baseline. `sluice-bench --help` lists the flags.
//
// Exit codes: 0 no call failed, 1 some failed (or no connection), 2 usage.

#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/sluice-bench/bench_options.h"
#include "tools/sluice-bench/bench_report.h"
#include "tools/sluice-bench/http_load.h"
#include "tools/sluice-bench/load_phase.h"
#include "tools/sluice-bench/workload.h"

namespace sluice::bench {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

// A warm-up seeds its mix apart from the measured phase.
constexpr uint64_t kWarmupSeedOffset = uint64_t{1} << 40;

int Main(int argc, char** argv) {
  const ParsedCommandLine line = ParseBenchCommandLine(argc, argv);
  switch (line.outcome) {
    case ParsedCommandLine::Outcome::kHelp:
      std::fputs(line.text.c_str(), stdout);
      return kExitOk;
    case ParsedCommandLine::Outcome::kUsageError:
      std::fprintf(stderr, "sluice-bench: %s\n(see sluice-bench --help)\n",
                   line.text.c_str());
      return kExitUsage;
    case ParsedCommandLine::Outcome::kRun:
      break;
  }
  const BenchOptions& options = line.options;
  const Workload workload(options.workload);
  // The two phases of a run, through gRPC or the HTTP API.
  std::function<PhaseResult(PhaseLength, uint64_t)> run_decisions;
  std::function<PhaseResult(PhaseLength)> run_health_checks;
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::unique_ptr<HttpConnections> http;
  if (options.api == Api::kHttp) {
    absl::StatusOr<std::unique_ptr<HttpConnections>> opened =
        HttpConnections::Open(options);
    if (!opened.ok()) {
      std::fprintf(stderr, "sluice-bench: %s\n",
                   std::string(opened.status().message()).c_str());
      return kExitFailed;
    }
    http = *std::move(opened);
    run_decisions = [&](PhaseLength length, uint64_t seed) {
      return http->RunDecisions(workload, length, seed);
    };
    run_health_checks = [&](PhaseLength length) {
      return http->RunHealthChecks(length);
    };
  } else {
    absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> opened =
        OpenConnections(options);
    if (!opened.ok()) {
      std::fprintf(stderr, "sluice-bench: %s\n",
                   std::string(opened.status().message()).c_str());
      return kExitFailed;
    }
    channels = *std::move(opened);
    run_decisions = [&](PhaseLength length, uint64_t seed) {
      return RunDecisions(options, workload, channels, length, seed);
    };
    run_health_checks = [&](PhaseLength length) {
      return RunHealthChecks(options, channels, length);
    };
  }
  const PhaseLength warmup{0, options.warmup};
  const PhaseLength measured{options.count, options.duration};

  if (options.warmup > absl::ZeroDuration()) {
    run_decisions(warmup, options.seed + kWarmupSeedOffset);
  }
  const PhaseResult decisions = run_decisions(measured, options.seed);
  std::optional<PhaseResult> baseline;
  if (options.baseline) {
    if (options.warmup > absl::ZeroDuration()) run_health_checks(warmup);
    baseline = run_health_checks(measured);
  }

  std::fputs(FormatReport(options, decisions, baseline).c_str(), stdout);
  if (!options.json_path.empty()) {
    std::ofstream out(options.json_path, std::ios::trunc);
    out << FormatJson(options, decisions, baseline);
    if (!out.good()) {
      std::fprintf(stderr, "sluice-bench: cannot write %s\n",
                   options.json_path.c_str());
      return kExitFailed;
    }
  }
  const bool failed = decisions.error_count() > 0 ||
                      (baseline.has_value() && baseline->error_count() > 0);
  return failed ? kExitFailed : kExitOk;
}

}  // namespace
}  // namespace sluice::bench

int main(int argc, char** argv) { return sluice::bench::Main(argc, argv); }
