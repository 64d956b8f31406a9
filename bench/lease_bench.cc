// SPDX-License-Identifier: Apache-2.0
// SDK leases (issue 28): Acquire + Report of a dependency the client
// decides in its own process from a lease, against an uncontended mutex
// lock/unlock in the same run, with heap allocations per call and the
// RPCs that still reach Sluice per call.
//
// Sluice is a real DecisionServiceImpl and Engine in this process, served
// over loopback TCP; the client is the SDK as a gateway links it, with
// ClientOptions::lease on (a 250 ms tick). Before the timed loop the
// dependency is made hot and the first lease awaited; from then on the
// only RPCs are the renewals, counted with the Acquires Sluice answered.
//
//   build/bench/lease_bench [--benchmark_min_time=0.5]
#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "counted_alloc.h"
#include "server/core/clock.h"
#include "server/core/engine.h"
#include "server/core/policy_config.h"
#include "server/rpc/decision_service.h"
#include "sluice/client/client.h"

namespace sluice {
namespace {

using bench::AllocationCounter;

// A real Sluice on loopback and a leasing client of it, for the whole run.
class Setup {
 public:
  Setup() : engine_(&clock_, core::Engine::Options()), service_(&engine_) {
    core::PolicyConfig p;
    p.name = "hot";
    p.call_timeout = absl::Seconds(1);
    core::RateLimitConfig rate;
    rate.rate = 1e9;
    rate.burst = 1e9;
    p.rate_limit = rate;
    core::ConcurrencyConfig concurrency;
    concurrency.max_in_flight = 1000000;
    p.concurrency = concurrency;
    core::BreakerConfig breaker;
    breaker.consecutive_failures = 5;
    p.breaker = breaker;
    engine_.PutPolicy(p);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();

    client::ClientOptions options;
    options.target = absl::StrCat("127.0.0.1:", port);
    options.lease.enabled = true;
    auto made = client::Client::Create(options);
    if (!made.ok()) {
      std::fprintf(stderr, "lease_bench: %s\n",
                   made.status().ToString().c_str());
      std::abort();
    }
    client_ = *std::move(made);
    // Hot, then leased: the first lease is in force once a call is leased.
    const absl::Time give_up = absl::Now() + absl::Seconds(10);
    while (absl::Now() < give_up) {
      client::Permit permit = client_->Acquire("hot");
      const bool leased = permit.leased();
      permit.Report(client::Outcome::kSuccess, absl::Microseconds(1));
      if (leased) return;
      absl::SleepFor(absl::Microseconds(100));
    }
    std::fprintf(stderr, "lease_bench: no lease within 10 s\n");
    std::abort();
  }
  ~Setup() {
    client_.reset();
    server_->Shutdown();
  }

  client::Client& client() { return *client_; }
  // RPCs that reached Sluice so far: Acquires it answered and renewals.
  uint64_t rpcs() {
    auto status = engine_.Inspect("hot");
    const uint64_t asked =
        status.ok() ? status->counters.acquired - status->counters.leased : 0;
    return asked + client_->stats().lease_renewals +
           client_->stats().lease_renewal_failures;
  }

 private:
  core::RealClock clock_;
  core::Engine engine_;
  rpc::DecisionServiceImpl service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<client::Client> client_;
};

Setup& TheSetup() {
  static Setup* setup = new Setup();
  return *setup;
}

void BM_MutexLockUnlock(benchmark::State& state) {
  static std::mutex mu;
  AllocationCounter allocs;
  for (auto _ : state) {
    mu.lock();
    benchmark::ClobberMemory();
    mu.unlock();
  }
  allocs.Report(state);
}
BENCHMARK(BM_MutexLockUnlock);

void BM_LeasedAcquireReport(benchmark::State& state) {
  Setup& setup = TheSetup();
  client::Client& client = setup.client();
  uint64_t leased = 0;
  // Allocations of the calls the lease decided, apart from the few that
  // asked Sluice (a lease that ran dry between renewals) or made a renewal.
  uint64_t leased_allocs = 0;
  const uint64_t rpcs_before = setup.rpcs();
  AllocationCounter allocs;
  for (auto _ : state) {
    const uint64_t before = allocations;
    client::Permit permit = client.Acquire("hot");
    const bool was_leased = permit.leased();
    permit.Report(client::Outcome::kSuccess, absl::Microseconds(1));
    if (was_leased) {
      ++leased;
      leased_allocs += allocations - before;
    }
  }
  allocs.Report(state);
  const double n = static_cast<double>(state.iterations());
  state.counters["leased_share"] = static_cast<double>(leased) / n;
  state.counters["allocs_per_leased_op"] =
      leased == 0 ? 0
                  : static_cast<double>(leased_allocs) /
                        static_cast<double>(leased);
  state.counters["rpcs_per_op"] =
      static_cast<double>(setup.rpcs() - rpcs_before) / n;
}
BENCHMARK(BM_LeasedAcquireReport);

}  // namespace
}  // namespace sluice

int main(int argc, char** argv) {
  // abseil's Mutex deadlock detection stays as Debian builds it (on), as in
  // a gateway that links the SDK and never turns it off: a leased call
  // takes no absl::Mutex.
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  sluice::TheSetup();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
