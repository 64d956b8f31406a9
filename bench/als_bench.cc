// SPDX-License-Identifier: Apache-2.0
// What settling a permit costs sluiced through Envoy's access-log service
// (StreamAccessLogs, entries batched per message as Envoy's gRPC access
// logger sends them) against the unary ReportResult a Lua filter or SDK
// sends per call: permits settled per second of sluiced CPU, each way, and
// the ratio, measured in the same run on the same process.
//
// One real sluiced (standalone). Each round first takes 2 x N permits by
// Acquire (not measured), then settles N of them by streaming access-log
// entries (--batch entries per message, the sluice_permits metadata shape
// of ext_authz, a 200 with a latency) and the other N by unary
// ReportResult from --threads client threads. Only sluiced's CPU counts:
// utime + stime from /proc/PID/stat (10 ms ticks) over each phase, and the
// threads' schedstat run time (nanoseconds) beside it. Rounds alternate
// which phase goes first, so the noise of a shared machine hits both alike;
// the figures printed are each round's and the median.
//
//   build/bench/als_bench [--entries=N] [--batch=B] [--threads=T]
//       [--rounds=R]

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "envoy/service/accesslog/v3/als.grpc.pb.h"
#include "proc_cpu.h"
#include "sluice/v1/decision.grpc.pb.h"
#include "tests/testing/sluiced_process.h"

ABSL_FLAG(int, entries, 100000,
          "permits settled each way per round (N); 2 x N are taken first");
ABSL_FLAG(int, batch, 100, "access-log entries per StreamAccessLogsMessage");
ABSL_FLAG(int, threads, 4,
          "client threads taking permits and sending ReportResult");
ABSL_FLAG(int, rounds, 3, "rounds; each measures both ways");

namespace {

using envoy::data::accesslog::v3::HTTPAccessLogEntry;
using envoy::service::accesslog::v3::AccessLogService;
using envoy::service::accesslog::v3::StreamAccessLogsMessage;
using sluice::bench::CpuMicros;
using sluice::bench::SchedMicros;
using sluice::testing::SluicedProcess;

// Nothing refuses: the in-flight cap holds every permit a round takes, the
// call timeout outlasts a round, and every report is a success, so the
// breaker, adaptive limit and latency paths all run on every settle.
constexpr char kPolicies[] = R"(policies:
  - name: inventory
    call_timeout: 120s
    concurrency: { max_in_flight: 1000000 }
    adaptive_concurrency: { min_limit: 1000000, max_limit: 1000000 }
    breaker:
      consecutive_failures: 5
      failure_rate_threshold: 0.5
      slow_call_duration: 1s
      slow_call_rate_threshold: 0.8
      window: 10s
      minimum_calls: 20
      latency_baseline: { factor: 3 }
)";

struct Cpu {
  double ticks_us = 0;
  double sched_us = 0;
  absl::Duration wall;
};

class Meter {
 public:
  explicit Meter(pid_t pid)
      : pid_(pid),
        ticks_(CpuMicros(pid)),
        sched_(SchedMicros(pid)),
        start_(absl::Now()) {}
  Cpu Stop() const {
    return {CpuMicros(pid_) - ticks_, SchedMicros(pid_) - sched_,
            absl::Now() - start_};
  }

 private:
  pid_t pid_;
  double ticks_;
  double sched_;
  absl::Time start_;
};

// Runs fn(i) for i in [0, n) on `threads` threads.
template <typename Fn>
void Parallel(int n, int threads, Fn fn) {
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = next++; i < n; i = next++) fn(i);
    });
  }
  for (std::thread& t : pool) t.join();
}

std::vector<std::string> TakePermits(sluice::v1::DecisionService::Stub* stub,
                                     int n, int threads) {
  std::vector<std::string> ids(n);
  std::atomic<int> failed{0};
  Parallel(n, threads, [&](int i) {
    sluice::v1::AcquireRequest request;
    request.set_dependency("inventory");
    sluice::v1::AcquireResponse response;
    grpc::ClientContext context;
    if (!stub->Acquire(&context, request, &response).ok() ||
        response.verdict() != sluice::v1::ALLOW) {
      ++failed;
      return;
    }
    ids[i] = response.permit_id();
  });
  if (failed > 0) {
    std::fprintf(stderr, "als_bench: %d Acquire calls failed\n", failed.load());
    std::exit(1);
  }
  return ids;
}

HTTPAccessLogEntry Entry(const std::string& permit_id) {
  HTTPAccessLogEntry entry;
  entry.mutable_response()->mutable_response_code()->set_value(200);
  auto* common = entry.mutable_common_properties();
  common->mutable_time_to_last_upstream_rx_byte()->set_nanos(20000000);
  common->mutable_time_to_last_downstream_tx_byte()->set_nanos(21000000);
  auto& filter =
      (*common->mutable_metadata()
            ->mutable_filter_metadata())["envoy.filters.http.ext_authz"];
  auto& fields = *(*filter.mutable_fields())["sluice_permits"]
                      .mutable_list_value()
                      ->add_values()
                      ->mutable_struct_value()
                      ->mutable_fields();
  fields["dependency"].set_string_value("inventory");
  fields["key"].set_string_value("");
  fields["permit_id"].set_string_value(permit_id);
  return entry;
}

// The messages settling `ids`, built before the phase is measured.
std::vector<StreamAccessLogsMessage> Messages(
    const std::vector<std::string>& ids, int batch) {
  std::vector<StreamAccessLogsMessage> messages;
  for (size_t i = 0; i < ids.size(); i += batch) {
    StreamAccessLogsMessage m;
    if (messages.empty()) m.mutable_identifier()->set_log_name("als_bench");
    for (size_t j = i; j < std::min(ids.size(), i + batch); ++j) {
      *m.mutable_http_logs()->add_log_entry() = Entry(ids[j]);
    }
    messages.push_back(std::move(m));
  }
  return messages;
}

Cpu StreamPhase(AccessLogService::Stub* stub, pid_t pid,
                const std::vector<StreamAccessLogsMessage>& messages) {
  const Meter meter(pid);
  grpc::ClientContext context;
  envoy::service::accesslog::v3::StreamAccessLogsResponse response;
  auto writer = stub->StreamAccessLogs(&context, &response);
  for (const StreamAccessLogsMessage& m : messages) {
    if (!writer->Write(m)) break;
  }
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  const Cpu cpu = meter.Stop();
  if (!status.ok()) {
    std::fprintf(stderr, "als_bench: StreamAccessLogs: %s\n",
                 status.error_message().c_str());
    std::exit(1);
  }
  return cpu;
}

Cpu UnaryPhase(sluice::v1::DecisionService::Stub* stub, pid_t pid,
               const std::vector<std::string>& ids, int threads) {
  // Requests built first, so the phase is the calls alone.
  std::vector<sluice::v1::ReportResultRequest> requests(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    requests[i].set_dependency("inventory");
    requests[i].set_permit_id(ids[i]);
    requests[i].set_outcome(sluice::v1::SUCCESS);
    requests[i].mutable_latency()->set_nanos(20000000);
  }
  std::atomic<int> failed{0};
  const Meter meter(pid);
  Parallel(static_cast<int>(ids.size()), threads, [&](int i) {
    sluice::v1::ReportResultResponse response;
    grpc::ClientContext context;
    if (!stub->ReportResult(&context, requests[i], &response).ok()) ++failed;
  });
  const Cpu cpu = meter.Stop();
  if (failed > 0) {
    std::fprintf(stderr, "als_bench: %d ReportResult calls failed\n",
                 failed.load());
    std::exit(1);
  }
  return cpu;
}

double PerCpuSecond(int n, double cpu_us) {
  return cpu_us > 0 ? n / (cpu_us / 1e6) : 0;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Permits settled per second of sluiced CPU: Envoy access-log entries "
      "(StreamAccessLogs) against unary ReportResult, in the same run.");
  absl::ParseCommandLine(argc, argv);
  const int n = absl::GetFlag(FLAGS_entries);
  const int batch = absl::GetFlag(FLAGS_batch);
  const int threads = absl::GetFlag(FLAGS_threads);
  const int rounds = absl::GetFlag(FLAGS_rounds);
  if (n < 1 || batch < 1 || batch > 1000 || threads < 1 || rounds < 1 ||
      2 * n > 1000000) {
    std::fprintf(stderr,
                 "als_bench: --entries 1..500000, --batch 1..1000, "
                 "--threads and --rounds >= 1\n");
    return 2;
  }

  SluicedProcess sluiced;
  std::string error;
  if (!sluiced.Start(kPolicies, {}, "", &error)) {
    std::fprintf(stderr, "als_bench: sluiced did not start: %s\n%s\n",
                 error.c_str(), sluiced.Log().c_str());
    return 1;
  }
  const pid_t pid = sluiced.pid();
  auto channel =
      grpc::CreateChannel(sluiced.target(), grpc::InsecureChannelCredentials());
  auto decisions = sluice::v1::DecisionService::NewStub(channel);
  auto als = AccessLogService::NewStub(channel);

  std::printf(
      "sluiced pid %d; %d permits settled each way per round, %d entries "
      "per access-log message, %d client threads for ReportResult\n\n",
      pid, n, batch, threads);
  std::printf(
      "round  first   access-log: CPU ms (sched) entries/CPU-s   "
      "ReportResult: CPU ms (sched) reports/CPU-s   ratio (sched)\n");

  std::vector<double> ratios, sched_ratios, als_rates, unary_rates;
  double settled_before = 0;
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::string> ids = TakePermits(decisions.get(), 2 * n, threads);
    const std::vector<std::string> unary_ids(ids.begin() + n, ids.end());
    ids.resize(n);
    const std::vector<StreamAccessLogsMessage> messages = Messages(ids, batch);

    Cpu stream_cpu, unary_cpu;
    const bool stream_first = round % 2 == 0;
    if (stream_first) {
      stream_cpu = StreamPhase(als.get(), pid, messages);
      unary_cpu = UnaryPhase(decisions.get(), pid, unary_ids, threads);
    } else {
      unary_cpu = UnaryPhase(decisions.get(), pid, unary_ids, threads);
      stream_cpu = StreamPhase(als.get(), pid, messages);
    }

    const double settled =
        sluiced.Metric("sluice_access_log_entries_total{result=\"settled\"}");
    if (settled - settled_before != n) {
      std::fprintf(stderr,
                   "als_bench: %.0f entries settled in round %d, expected %d\n",
                   settled - settled_before, round + 1, n);
      return 1;
    }
    settled_before = settled;

    const double als_rate = PerCpuSecond(n, stream_cpu.ticks_us);
    const double unary_rate = PerCpuSecond(n, unary_cpu.ticks_us);
    const double ratio = unary_rate > 0 ? als_rate / unary_rate : 0;
    const double sched_ratio =
        stream_cpu.sched_us > 0 ? unary_cpu.sched_us / stream_cpu.sched_us : 0;
    ratios.push_back(ratio);
    sched_ratios.push_back(sched_ratio);
    als_rates.push_back(als_rate);
    unary_rates.push_back(unary_rate);
    std::printf(
        "%5d  %-6s  %8.0f (%8.1f) %12.0f        %8.0f (%8.1f) %12.0f   "
        "%5.1fx (%5.1fx)\n",
        round + 1, stream_first ? "stream" : "unary",
        stream_cpu.ticks_us / 1000, stream_cpu.sched_us / 1000, als_rate,
        unary_cpu.ticks_us / 1000, unary_cpu.sched_us / 1000, unary_rate,
        ratio, sched_ratio);
  }
  std::printf(
      "\nmedian: %.0f access-log entries per sluiced CPU-second, %.0f unary "
      "ReportResult per CPU-second: %.1fx (schedstat: %.1fx; goal >= 3x)\n",
      Median(als_rates), Median(unary_rates), Median(ratios),
      Median(sched_ratios));
  return 0;
}
