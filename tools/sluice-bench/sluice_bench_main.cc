// sluice-bench: load for a running sluiced, with gRPC's health check on the
// same server as the baseline. `sluice-bench --help` lists the flags.
//
// Exit codes: 0 no call failed, 1 some failed (or no connection), 2 usage.

#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/sluice-bench/bench_options.h"
#include "tools/sluice-bench/bench_report.h"
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
  absl::StatusOr<std::vector<std::shared_ptr<grpc::Channel>>> channels =
      OpenConnections(options);
  if (!channels.ok()) {
    std::fprintf(stderr, "sluice-bench: %s\n",
                 std::string(channels.status().message()).c_str());
    return kExitFailed;
  }
  const Workload workload(options.workload);
  const PhaseLength warmup{0, options.warmup};
  const PhaseLength measured{options.count, options.duration};

  if (options.warmup > absl::ZeroDuration()) {
    RunDecisions(options, workload, *channels, warmup,
                 options.seed + kWarmupSeedOffset);
  }
  const PhaseResult decisions =
      RunDecisions(options, workload, *channels, measured, options.seed);
  std::optional<PhaseResult> baseline;
  if (options.baseline) {
    if (options.warmup > absl::ZeroDuration()) {
      RunHealthChecks(options, *channels, warmup);
    }
    baseline = RunHealthChecks(options, *channels, measured);
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
