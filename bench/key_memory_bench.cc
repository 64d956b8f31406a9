// SPDX-License-Identifier: Apache-2.0
// Memory per key of a per_key policy, for two policies:
//   bucket   a token bucket only;
//   guarded  a token bucket, an in-flight cap and a breaker with a
//            failure-rate window (10 s in 10 buckets, 20 calls minimum)
//            and a consecutive-failures rule.
//
// In process (the default): one Engine per policy (per_key, max_keys
// 1,000,000); --keys distinct keys each get one Acquire and one Report
// (success), so every key has had a full call. Bytes per key are the growth
// over the insertion divided by the keys, counted three ways:
//   live      operator new/delete of this binary, each block's
//             malloc_usable_size (what the allocator really set aside,
//             rounding included; malloc's own 8-byte chunk headers are not
//             in it);
//   requested the sizes the program asked for;
//   arena     glibc's mallinfo2() uordblks + hblkhd (every malloc, headers
//             included, and mmapped blocks), the cross-check;
//   RSS       this process's VmRSS (free memory returned with malloc_trim
//             before each policy, so the second does not reuse the first's).
// Keys are "tenant-" plus 7 digits: 14 bytes, as a short tenant id (and
// inside std::string's 15-byte inline buffer, so a key costs no string
// block of its own).
//
// With --rss: starts a real sluiced (standalone) with both policies as two
// dependencies, and for each in turn sends --rss_keys distinct keys through
// gRPC Acquire + ReportResult from --threads client threads, reading the
// server's VmRSS from /proc before and after. That figure includes
// everything the server keeps (allocator rounding and headers, arenas of
// its threads, hash tables at their current load), which is what an
// operator sizes a pod for.
//
//   build/bench/key_memory_bench [--keys=N]
//   build/bench/key_memory_bench --rss [--rss_keys=N] [--threads=N]

#include <malloc.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/core/clock.h"
#include "server/core/engine.h"
#include "server/core/policy_config.h"
#include "sluice/v1/decision.grpc.pb.h"
#include "tests/testing/sluiced_process.h"

ABSL_FLAG(int, keys, 1000000, "distinct keys per policy, in process");
ABSL_FLAG(bool, rss, false,
          "measure a running sluiced's VmRSS instead (real gRPC calls)");
ABSL_FLAG(int, rss_keys, 100000, "distinct keys per policy with --rss");
ABSL_FLAG(int, threads, 8, "client threads with --rss");

// --- Allocation accounting ---------------------------------------------------
// Live bytes by malloc_usable_size and by requested size. A delete without a
// size (rare: most of the standard library passes it) is counted at its
// usable size on the requested side too, and counted, so the figure says how
// far it can be off.

namespace {
std::atomic<int64_t> live_usable{0};
std::atomic<int64_t> live_requested{0};
std::atomic<int64_t> unsized_deletes{0};

void* Allocate(std::size_t size, std::size_t align) {
  if (size == 0) size = 1;
  void* p = nullptr;
  if (align <= alignof(std::max_align_t)) {
    p = std::malloc(size);
  } else if (posix_memalign(&p, align, size) != 0) {
    p = nullptr;
  }
  if (p == nullptr) return nullptr;
  live_usable.fetch_add(static_cast<int64_t>(malloc_usable_size(p)),
                        std::memory_order_relaxed);
  live_requested.fetch_add(static_cast<int64_t>(size),
                           std::memory_order_relaxed);
  return p;
}
void* AllocateOrThrow(std::size_t size, std::size_t align) {
  if (void* p = Allocate(size, align)) return p;
  throw std::bad_alloc();
}
void Release(void* p, std::size_t size, bool sized) {
  if (p == nullptr) return;
  const auto usable = static_cast<int64_t>(malloc_usable_size(p));
  live_usable.fetch_sub(usable, std::memory_order_relaxed);
  if (sized) {
    live_requested.fetch_sub(static_cast<int64_t>(size == 0 ? 1 : size),
                             std::memory_order_relaxed);
  } else {
    unsized_deletes.fetch_add(1, std::memory_order_relaxed);
    live_requested.fetch_sub(usable, std::memory_order_relaxed);
  }
  std::free(p);
}
constexpr std::size_t kDefaultAlign = alignof(std::max_align_t);
}  // namespace

void* operator new(std::size_t n) { return AllocateOrThrow(n, kDefaultAlign); }
void* operator new[](std::size_t n) {
  return AllocateOrThrow(n, kDefaultAlign);
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return Allocate(n, kDefaultAlign);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return Allocate(n, kDefaultAlign);
}
void* operator new(std::size_t n, std::align_val_t a) {
  return AllocateOrThrow(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
  return AllocateOrThrow(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { Release(p, 0, false); }
void operator delete[](void* p) noexcept { Release(p, 0, false); }
void operator delete(void* p, std::size_t n) noexcept { Release(p, n, true); }
void operator delete[](void* p, std::size_t n) noexcept {
  Release(p, n, true);
}
void operator delete(void* p, std::align_val_t) noexcept {
  Release(p, 0, false);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  Release(p, 0, false);
}
void operator delete(void* p, std::size_t n, std::align_val_t) noexcept {
  Release(p, n, true);
}
void operator delete[](void* p, std::size_t n, std::align_val_t) noexcept {
  Release(p, n, true);
}

namespace {

using sluice::core::Engine;
using sluice::core::Outcome;
using sluice::core::PolicyConfig;
using sluice::core::Verdict;

constexpr uint32_t kMaxKeys = 1000000;

// "tenant-0000123": 14 bytes.
std::string KeyName(const char* prefix, int i) {
  return absl::StrFormat("%s-%07d", prefix, i);
}

// --- In process --------------------------------------------------------------

// Every key is new, so a bucket this size never refuses its first call.
PolicyConfig BucketPolicy(const std::string& name) {
  PolicyConfig p;
  p.name = name;
  p.call_timeout = absl::Seconds(2);
  sluice::core::RateLimitConfig rate;
  rate.rate = 100;
  rate.burst = 100;
  p.rate_limit = rate;
  p.per_key = true;
  p.max_keys = kMaxKeys;
  return p;
}

PolicyConfig GuardedPolicy(const std::string& name) {
  PolicyConfig p = BucketPolicy(name);
  sluice::core::ConcurrencyConfig concurrency;
  concurrency.max_in_flight = 10;
  p.concurrency = concurrency;
  sluice::core::BreakerConfig breaker;
  breaker.consecutive_failures = 5;
  breaker.failure_rate_threshold = 0.5;
  breaker.window = absl::Seconds(10);
  breaker.buckets = 10;
  breaker.minimum_calls = 20;
  p.breaker = breaker;
  return p;
}

int64_t StatusFieldKb(pid_t pid, const char* field) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  const std::string prefix = absl::StrCat(field, ":");
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) {
      int64_t kb = 0;
      std::istringstream(line.substr(prefix.size())) >> kb;
      return kb;
    }
  }
  return -1;
}

struct Sample {
  int64_t usable, requested, arena, rss_kb;
  static Sample Now() {
    const struct mallinfo2 mi = mallinfo2();
    // Large blocks (a big hash table) are mmapped and counted apart.
    return {live_usable.load(), live_requested.load(),
            static_cast<int64_t>(mi.uordblks + mi.hblkhd),
            StatusFieldKb(getpid(), "VmRSS")};
  }
};

// Inserts `keys` keys into a fresh engine holding only `policy`; false if
// any call was not allowed.
bool MeasureInProcess(const PolicyConfig& policy, int keys) {
  auto engine = std::make_unique<Engine>(sluice::core::RealClock::Get(),
                                         Engine::Options{});
  engine->ReplacePolicies({policy});
  // A first key, so that one-time state (the thread's snapshot cache, the
  // permit ledger) is not charged to the keys.
  {
    auto d = engine->Acquire(policy.name, "warm-up", 1);
    engine->Report(policy.name, "warm-up", d->permit_id, Outcome::kSuccess,
                   absl::Milliseconds(1));
  }
  malloc_trim(0);
  const Sample before = Sample::Now();
  const int64_t unsized_before = unsized_deletes.load();
  const absl::Time start = absl::Now();
  char key[32];
  for (int i = 0; i < keys; ++i) {
    // No allocation for the key itself: a stack buffer and a string_view.
    const int len = std::snprintf(key, sizeof(key), "tenant-%07d", i);
    const absl::string_view k(key, static_cast<size_t>(len));
    absl::StatusOr<sluice::core::Decision> d = engine->Acquire(policy.name, k, 1);
    if (!d.ok() || d->verdict != Verdict::kAllow) {
      std::fprintf(stderr, "key_memory_bench: %s refused key %d\n",
                   policy.name.c_str(), i);
      return false;
    }
    engine->Report(policy.name, k, d->permit_id, Outcome::kSuccess,
                   absl::Milliseconds(1));
  }
  const absl::Duration took = absl::Now() - start;
  const Sample after = Sample::Now();
  absl::StatusOr<sluice::core::LivePolicyStatus> status =
      engine->Inspect(policy.name);
  const size_t held = status.ok() ? status->keys : 0;
  const double n = keys;
  std::printf(
      "  %-8s %7d keys (%zu held) in %5.2f s: live %6.1f B/key, requested "
      "%6.1f B/key, arena (mallinfo2) %6.1f B/key, process RSS %6.1f "
      "B/key; %" PRId64 " unsized deletes\n",
      policy.name.c_str(), keys, held, absl::ToDoubleSeconds(took),
      static_cast<double>(after.usable - before.usable) / n,
      static_cast<double>(after.requested - before.requested) / n,
      static_cast<double>(after.arena - before.arena) / n,
      static_cast<double>(after.rss_kb - before.rss_kb) * 1024 / n,
      unsized_deletes.load() - unsized_before);
  return true;
}

// --- A running sluiced -------------------------------------------------------

// The same two policies. A breaker's window has 10 buckets (not settable in
// a policy file; BreakerConfig's default).
constexpr char kRssPolicies[] = R"(policies:
  - name: bucket
    call_timeout: 2s
    rate_limit: { algorithm: TOKEN_BUCKET, rate: 100, per: 1s, burst: 100 }
    per_key: true
    max_keys: 1000000
  - name: guarded
    call_timeout: 2s
    rate_limit: { algorithm: TOKEN_BUCKET, rate: 100, per: 1s, burst: 100 }
    concurrency: { max_in_flight: 10 }
    breaker:
      consecutive_failures: 5
      failure_rate_threshold: 0.5
      window: 10s
      minimum_calls: 20
    per_key: true
    max_keys: 1000000
)";

// Keys [first, first + count) of `dependency`, split over `threads` client
// threads, each an Acquire then a ReportResult. False on any failed call or
// refusal.
bool Drive(sluice::v1::DecisionService::Stub* stub,
           const std::string& dependency, const char* prefix, int first,
           int count, int threads) {
  std::atomic<int> next{first};
  std::atomic<bool> failed{false};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (int i = next.fetch_add(1); i < first + count && !failed.load();
           i = next.fetch_add(1)) {
        sluice::v1::AcquireRequest req;
        req.set_dependency(dependency);
        req.set_key(KeyName(prefix, i));
        sluice::v1::AcquireResponse resp;
        grpc::ClientContext ctx;
        ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
        grpc::Status s = stub->Acquire(&ctx, req, &resp);
        if (!s.ok() || resp.verdict() != sluice::v1::ALLOW) {
          std::fprintf(stderr, "key_memory_bench: %s key %d: %s %s\n",
                       dependency.c_str(), i, s.error_message().c_str(),
                       resp.ShortDebugString().c_str());
          failed.store(true);
          return;
        }
        sluice::v1::ReportResultRequest report;
        report.set_dependency(dependency);
        report.set_key(req.key());
        report.set_permit_id(resp.permit_id());
        report.set_outcome(sluice::v1::SUCCESS);
        report.mutable_latency()->set_nanos(1000000);
        sluice::v1::ReportResultResponse report_resp;
        grpc::ClientContext report_ctx;
        report_ctx.set_deadline(
            absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
        s = stub->ReportResult(&report_ctx, report, &report_resp);
        if (!s.ok()) {
          std::fprintf(stderr, "key_memory_bench: report %s key %d: %s\n",
                       dependency.c_str(), i, s.error_message().c_str());
          failed.store(true);
          return;
        }
      }
    });
  }
  for (std::thread& w : workers) w.join();
  return !failed.load();
}

int MeasureSluiced(int keys, int threads) {
  sluice::testing::SluicedProcess sluiced;
  std::string error;
  if (!sluiced.Start(kRssPolicies, {}, "", &error)) {
    std::fprintf(stderr, "key_memory_bench: %s\n", error.c_str());
    return 1;
  }
  auto channel =
      grpc::CreateChannel(sluiced.target(), grpc::InsecureChannelCredentials());
  auto stub = sluice::v1::DecisionService::NewStub(channel);
  const pid_t pid = sluiced.pid();
  std::printf("sluiced (pid %d) VmRSS after start: %" PRId64 " kB\n", pid,
              StatusFieldKb(pid, "VmRSS"));
  constexpr int kWarmUpKeys = 2000;
  for (const char* dependency : {"bucket", "guarded"}) {
    // Warm-up keys first (not counted): connections, server threads and
    // their allocator arenas, and the first hash-table sizes.
    if (!Drive(stub.get(), dependency, "warmup", 0, kWarmUpKeys, threads)) {
      return 1;
    }
    const int64_t before_kb = StatusFieldKb(pid, "VmRSS");
    const absl::Time start = absl::Now();
    if (!Drive(stub.get(), dependency, "tenant", 0, keys, threads)) return 1;
    const absl::Duration took = absl::Now() - start;
    const int64_t after_kb = StatusFieldKb(pid, "VmRSS");
    std::printf(
        "  %-8s %7d keys in %5.2f s (%.0f calls/s): VmRSS %" PRId64
        " -> %" PRId64 " kB, %6.0f B/key\n",
        dependency, keys, absl::ToDoubleSeconds(took),
        2.0 * keys / absl::ToDoubleSeconds(took), before_kb, after_kb,
        static_cast<double>(after_kb - before_kb) * 1024 / keys);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "memory per key of per_key policies, in process or (--rss) in a "
      "running sluiced");
  absl::ParseCommandLine(argc, argv);
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (absl::GetFlag(FLAGS_rss)) {
    const int keys = absl::GetFlag(FLAGS_rss_keys);
    std::printf(
        "Per-key memory of a running sluiced: VmRSS growth over %d distinct "
        "14-byte keys per policy, each an Acquire + ReportResult over gRPC\n",
        keys);
    return MeasureSluiced(keys, absl::GetFlag(FLAGS_threads));
  }
  const int keys = absl::GetFlag(FLAGS_keys);
  std::printf(
      "Per-key memory in process (Engine, per_key, max_keys %u): growth over "
      "%d distinct 14-byte keys, each an Acquire + Report\n",
      kMaxKeys, keys);
  if (!MeasureInProcess(BucketPolicy("bucket"), keys)) return 1;
  if (!MeasureInProcess(GuardedPolicy("guarded"), keys)) return 1;
  return 0;
}
