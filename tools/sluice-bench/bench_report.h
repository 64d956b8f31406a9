// SPDX-License-Identifier: Apache-2.0
#ifndef SLUICE_TOOLS_SLUICE_BENCH_BENCH_REPORT_H_
#define SLUICE_TOOLS_SLUICE_BENCH_BENCH_REPORT_H_

#include <optional>
#include <string>

#include "tools/sluice-bench/bench_options.h"
#include "tools/sluice-bench/load_phase.h"

namespace sluice::bench {

// The text sluice-bench prints: the run's shape, decisions, the baseline
// when there is one, and the ratios.
std::string FormatReport(const BenchOptions& options,
                         const PhaseResult& decisions,
                         const std::optional<PhaseResult>& baseline);

// The same as JSON (config, decisions, baseline, ratio), for plots.
// Latencies are in microseconds.
std::string FormatJson(const BenchOptions& options,
                       const PhaseResult& decisions,
                       const std::optional<PhaseResult>& baseline);

}  // namespace sluice::bench

#endif  // SLUICE_TOOLS_SLUICE_BENCH_BENCH_REPORT_H_
