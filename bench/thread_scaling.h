// SPDX-License-Identifier: Apache-2.0
// A Google Benchmark reporter for benchmarks run at several thread counts:
// the usual table, then each benchmark at N threads against itself at 1
// (real time per op at N / at 1 = throughput at 1 / throughput at N). With
// --benchmark_repetitions it uses the means.
#ifndef SLUICE_BENCH_THREAD_SCALING_H_
#define SLUICE_BENCH_THREAD_SCALING_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"

namespace sluice::bench {

class ThreadScalingReporter : public benchmark::ConsoleReporter {
 public:
  // Benchmark name (before "/real_time/threads:") -> threads -> real ns per
  // op.
  using Times = std::map<std::string, std::map<int, double>>;

  // Colours only on a terminal (a reporter of our own does not see
  // --benchmark_color).
  ThreadScalingReporter()
      : ConsoleReporter(isatty(STDOUT_FILENO) ? OO_ColorTabular
                                              : OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      const bool wanted = run.repetitions > 1
                              ? run.run_type == Run::RT_Aggregate &&
                                    run.aggregate_name == "mean"
                              : run.run_type == Run::RT_Iteration;
      if (!wanted) continue;
      // "BM_AcquireReport/real_time/threads:2" -> BM_AcquireReport, 2.
      const std::string name = run.run_name.str();
      const size_t pos = name.find("/real_time/threads:");
      if (pos == std::string::npos) continue;
      const int threads = std::atoi(name.c_str() + pos + 19);
      // In the run's time unit (ns).
      times_[name.substr(0, pos)][threads] = run.GetAdjustedRealTime();
    }
    ConsoleReporter::ReportRuns(runs);
  }

  // The scaling table, for benchmarks run at 1 thread and at least one more
  // count.
  void PrintScaling() const {
    std::printf(
        "\nScaling: time per op at N threads / at 1 thread (= throughput(1) "
        "/ throughput(N);\n<= 1.0x: N threads do at least as much per "
        "second as one):\n");
    for (const auto& [name, by_threads] : times_) {
      const auto one = by_threads.find(1);
      if (one == by_threads.end() || one->second <= 0 ||
          by_threads.size() < 2) {
        continue;
      }
      std::printf("  %-44s 1t %7.1f ns", name.c_str(), one->second);
      for (const auto& [threads, ns] : by_threads) {
        if (threads == 1) continue;
        std::printf("   %dt %7.1f ns = %5.2fx", threads, ns, ns / one->second);
      }
      std::printf("\n");
    }
  }

  const Times& times() const { return times_; }

 private:
  Times times_;
};

}  // namespace sluice::bench

#endif  // SLUICE_BENCH_THREAD_SCALING_H_
