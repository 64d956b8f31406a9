// SPDX-License-Identifier: Apache-2.0
#include "tools/sluice-bench/bench_report.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "sluice/v1/decision.pb.h"

namespace sluice::bench {
namespace {

constexpr double kQuantiles[] = {0.5, 0.99, 0.999};
constexpr const char* kQuantileNames[] = {"p50", "p99", "p999"};

double Micros(absl::Duration d) { return absl::ToDoubleMicroseconds(d); }

// "0.412ms" style, three significant places.
std::string Ms(absl::Duration d) {
  return absl::StrFormat("%.3fms", absl::ToDoubleMilliseconds(d));
}

std::string Percentiles(const PercentileHistogram& h) {
  if (h.count() == 0) return "(none)";
  return absl::StrFormat("p50 %s  p99 %s  p999 %s  max %s",
                         Ms(h.Percentile(0.5)), Ms(h.Percentile(0.99)),
                         Ms(h.Percentile(0.999)), Ms(h.max()));
}

std::string Errors(const PhaseResult& r) {
  if (r.errors.empty()) return "0";
  std::string text = absl::StrCat(
      r.error_count(), " (",
      absl::StrJoin(r.errors, ", ",
                    [](std::string* out, const auto& entry) {
                      absl::StrAppend(out, entry.first, " ", entry.second);
                    }),
      ")");
  absl::StrAppend(&text, "\n  first: ", r.first_error);
  return text;
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

// "unary", "stream" or "http", and where the load went.
const char* RunName(const BenchOptions& options) {
  return options.api == Api::kHttp ? ApiName(options.api)
                                   : ModeName(options.mode);
}
const std::string& Target(const BenchOptions& options) {
  return options.api == Api::kHttp ? options.http_target : options.target;
}
const char* BaselineName(const BenchOptions& options) {
  return options.api == Api::kHttp ? "GET /v1/health"
                                   : "grpc.health.v1.Health/Check";
}

nlohmann::ordered_json LatencyJson(const PercentileHistogram& h) {
  nlohmann::ordered_json j = {{"count", h.count()},
                              {"mean", Micros(h.mean())},
                              {"max", Micros(h.max())}};
  for (size_t i = 0; i < std::size(kQuantiles); ++i) {
    j[kQuantileNames[i]] = Micros(h.Percentile(kQuantiles[i]));
  }
  return j;
}

nlohmann::ordered_json ErrorsJson(const PhaseResult& r) {
  nlohmann::ordered_json by_code = nlohmann::ordered_json::object();
  for (const auto& [code, n] : r.errors) by_code[code] = n;
  return {{"total", r.error_count()}, {"by_code", by_code}};
}

}  // namespace

std::string FormatReport(const BenchOptions& options,
                         const PhaseResult& decisions,
                         const std::optional<PhaseResult>& baseline) {
  std::string out = absl::StrFormat(
      "sluice-bench %s -> %s: %d connections x %d in flight%s, %s, "
      "warm-up %s\n",
      RunName(options), Target(options), options.connections,
      options.concurrency,
      options.mode == Mode::kStream ? absl::StrCat(", batch <= ", options.batch)
                                    : "",
      options.count > 0 ? absl::StrCat(options.count, " decisions")
                        : absl::StrCat(absl::FormatDuration(options.duration)),
      absl::FormatDuration(options.warmup));
  absl::StrAppendFormat(
      &out, "decisions      %d in %.2fs = %.0f/s\n", decisions.completed,
      absl::ToDoubleSeconds(decisions.elapsed), decisions.per_second());
  absl::StrAppend(&out, "acquire        ", Percentiles(decisions.first), "\n");
  absl::StrAppend(&out, "acquire+report ", Percentiles(decisions.pair), "\n");
  absl::StrAppendFormat(
      &out, "verdicts       ALLOW %d  REJECT %d  DEGRADE %d\n",
      decisions.verdicts[v1::ALLOW], decisions.verdicts[v1::REJECT],
      decisions.verdicts[v1::DEGRADE]);
  absl::StrAppend(&out, "errors         ", Errors(decisions), "\n");
  if (!baseline.has_value()) return out;
  absl::StrAppendFormat(
      &out, "baseline: %s, same connections and concurrency\n",
      BaselineName(options));
  absl::StrAppendFormat(
      &out, "health checks  %d in %.2fs = %.0f/s\n", baseline->completed,
      absl::ToDoubleSeconds(baseline->elapsed), baseline->per_second());
  absl::StrAppend(&out, "check          ", Percentiles(baseline->first), "\n");
  absl::StrAppend(&out, "errors         ", Errors(*baseline), "\n");
  absl::StrAppendFormat(
      &out,
      "ratio          decisions/s / checks/s = %.2f; acquire / check latency: "
      "p50 %.2fx, p99 %.2fx, p999 %.2fx\n",
      Ratio(decisions.per_second(), baseline->per_second()),
      Ratio(Micros(decisions.first.Percentile(0.5)),
            Micros(baseline->first.Percentile(0.5))),
      Ratio(Micros(decisions.first.Percentile(0.99)),
            Micros(baseline->first.Percentile(0.99))),
      Ratio(Micros(decisions.first.Percentile(0.999)),
            Micros(baseline->first.Percentile(0.999))));
  return out;
}

std::string FormatJson(const BenchOptions& options,
                       const PhaseResult& decisions,
                       const std::optional<PhaseResult>& baseline) {
  nlohmann::ordered_json dependencies = nlohmann::ordered_json::object();
  for (const WeightedName& d : options.workload.dependencies) {
    dependencies[d.name] = d.weight;
  }
  nlohmann::ordered_json j;
  j["config"] = {
      {"target", Target(options)},
      {"api", ApiName(options.api)},
      {"mode", ModeName(options.mode)},
      {"connections", options.connections},
      {"concurrency", options.concurrency},
      {"batch", options.batch},
      {"dependencies", dependencies},
      {"keys", options.workload.keys},
      {"key_distribution",
       options.workload.key_distribution == KeyDistribution::kZipf ? "zipf"
                                                                   : "uniform"},
      {"failure_rate", options.workload.failure_rate},
      {"latency_us", Micros(options.latency)},
      {"hold", options.hold},
      {"count", options.count},
      {"duration_s",
       options.count > 0 ? 0.0 : absl::ToDoubleSeconds(options.duration)},
      {"warmup_s", absl::ToDoubleSeconds(options.warmup)},
      {"seed", options.seed},
  };
  j["decisions"] = {
      {"count", decisions.completed},
      {"elapsed_s", absl::ToDoubleSeconds(decisions.elapsed)},
      {"per_second", decisions.per_second()},
      {"acquire_latency_us", LatencyJson(decisions.first)},
      {"pair_latency_us", LatencyJson(decisions.pair)},
      {"verdicts",
       {{"ALLOW", decisions.verdicts[v1::ALLOW]},
        {"REJECT", decisions.verdicts[v1::REJECT]},
        {"DEGRADE", decisions.verdicts[v1::DEGRADE]}}},
      {"errors", ErrorsJson(decisions)},
  };
  if (baseline.has_value()) {
    j["baseline"] = {
        {"rpc", BaselineName(options)},
        {"count", baseline->completed},
        {"elapsed_s", absl::ToDoubleSeconds(baseline->elapsed)},
        {"per_second", baseline->per_second()},
        {"latency_us", LatencyJson(baseline->first)},
        {"errors", ErrorsJson(*baseline)},
    };
    nlohmann::ordered_json ratio = {
        {"throughput", Ratio(decisions.per_second(), baseline->per_second())}};
    for (size_t i = 0; i < std::size(kQuantiles); ++i) {
      ratio[absl::StrCat("latency_", kQuantileNames[i])] =
          Ratio(Micros(decisions.first.Percentile(kQuantiles[i])),
                Micros(baseline->first.Percentile(kQuantiles[i])));
    }
    j["ratio"] = ratio;
  } else {
    j["baseline"] = nullptr;
    j["ratio"] = nullptr;
  }
  return j.dump(2) + "\n";
}

}  // namespace sluice::bench
