// SPDX-License-Identifier: Apache-2.0
// Sidecar mode (issue 14): Acquire latency over a Unix socket against TCP
// loopback in the same run, and the CPU and memory of one sluiced sidecar
// idle and under a fixed offered rate.
//
// Two real sluiced processes (standalone, no Redis) load the same policies:
// one serves on unix:DIR/sluice.sock, the other on 127.0.0.1:PORT. For each,
// one channel is built exactly as Client::Create builds it from
// SidecarClientOptions (pick_first, fast reconnect); on that channel the
// bench times, one call at a time:
//   - Acquire through the SDK (Client::Acquire, then Permit::Report success,
//     as a gateway does; the report is awaited before the next timed call,
//     so no timed call overlaps a report);
//   - the same Acquire as a raw synchronous gRPC call (no SDK), its report
//     sent synchronously and untimed;
//   - grpc.health.v1 Health/Check on the same server: the cost of a gRPC
//     round trip that decides nothing, the baseline of the ratios;
//   - a 64-byte echo over a plain socket of the same kind (an echo thread in
//     this process): the kernel's part of the round trip, without gRPC.
// Rounds alternate the transports (and which goes first) so that the noise
// of a shared machine hits both alike.
//
// And, from /proc of the Unix-socket sluiced: VmRSS after start with the
// policies loaded, CPU (utime + stime) while idle right after start, and CPU
// and VmRSS while client threads offer a fixed rate of Acquire + Report
// pairs through the SDK (after the latency rounds). Each interval also
// reports the CPU that other processes used meanwhile (/proc/stat minus the
// bench and both sluiced): on a shared 2-core machine that is the first
// thing to look at when two runs disagree.
//
//   build/bench/sidecar_bench [--calls=N] [--rounds=N] [--warmup=N]
//       [--rate=R[,R...]] [--threads=N] [--busy-seconds=S]
//       [--idle-seconds=S] [--json=FILE]

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/percentile.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "proc_cpu.h"
#include "sluice/client/client.h"
#include "sluice/client/options.h"
#include "sluice/v1/decision.grpc.pb.h"
#include "tests/testing/sluiced_process.h"

namespace {

using sluice::bench::CpuMicros;
using sluice::bench::SchedMicros;
using sluice::bench::Slurp;
using sluice::testing::SluicedProcess;

constexpr char kDependency[] = "inventory";

// Every gate runs on `inventory` and none refuses: a token bucket far above
// the offered rate, an in-flight cap the bench never reaches, a breaker with
// all three rules (every report is a success). The other entries are there
// so that the idle RSS is that of a sidecar with a handful of policies.
constexpr char kPolicies[] = R"(policies:
  - name: inventory
    call_timeout: 2s
    rate_limit:
      algorithm: TOKEN_BUCKET
      rate: 1000000
      per: 1s
      burst: 1000000
    concurrency: { max_in_flight: 1000 }
    breaker:
      consecutive_failures: 5
      failure_rate_threshold: 0.5
      slow_call_duration: 1s
      slow_call_rate_threshold: 0.8
      window: 10s
      minimum_calls: 20
      open_duration: 15s
      max_open_duration: 300s
      half_open_probes: 2
      successes_to_close: 2
    fallback:
      strategy: STATIC
      payload: '{"degraded":true}'
      content_type: application/json
      on: [CIRCUIT_OPEN, PROBE_LIMIT]
  - name: payments-partner
    call_timeout: 5s
    rate_limit: { algorithm: SLIDING_WINDOW, rate: 600, per: 1m, buckets: 60 }
    breaker: { consecutive_failures: 3 }
  - name: search
    call_timeout: 800ms
    concurrency: { max_in_flight: 20 }
    breaker: { failure_rate_threshold: 0.3, minimum_calls: 50 }
  - name: reports-api
    rate_limit: { rate: 10, per: 1s, burst: 20 }
    per_key: true
    max_keys: 10000
  - name: recommendations
    shadow: true
    rate_limit: { rate: 200 }
    breaker: { consecutive_failures: 10, open_duration: 30s }
)";

struct Flags {
  int calls = 2000;
  int rounds = 10;
  int warmup = 1000;
  std::vector<int> rates = {1000, 5000};
  int threads = 4;
  double busy_seconds = 5;
  double idle_seconds = 10;
  // The SDK's leases (on in SidecarClientOptions): off by default, so that
  // every SDK Acquire crosses the transport being compared.
  bool lease = false;
  std::string json;
};

void Usage(FILE* out) {
  std::fprintf(out, R"(Usage: sidecar_bench [flags]

Starts two sluiced (standalone, same policies): one on a Unix socket, one on
TCP loopback. Times Acquire (through the SDK, and raw) and grpc.health.v1
Check on each, and a 64-byte echo over a plain socket of each kind, in
rounds alternating the transports; then measures the Unix
socket sluiced's memory and CPU idle and at fixed offered rates.

  --calls=N          timed calls of each kind per transport per round (2000)
  --rounds=N         rounds; each runs both transports, alternating (10)
  --warmup=N         untimed calls of each kind per transport first (1000)
  --rate=R[,R...]    offered Acquire+Report pairs/s for the busy figures
                     (1000,5000); 0 skips them
  --threads=N        client threads offering the busy rate (4)
  --busy-seconds=S   length of each busy interval (5)
  --idle-seconds=S   length of the idle CPU interval (10); 0 skips it
  --lease=off|on     the SDK's leases (off): on, as the sidecar preset has
                     them, a hot dependency is decided in this process and
                     the SDK rows time a leased Acquire (the lease takes
                     tokens the raw Acquires would otherwise get); the busy
                     figures then show the sidecar's CPU with a leasing
                     client
  --json=FILE        also write every figure as JSON to FILE
  --help             this text

sluiced is $SLUICED_BINARY when set, else the one this bench was built with.
)");
}

bool ParseFlags(int argc, char** argv, Flags* flags) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      Usage(stdout);
      std::exit(0);
    }
    std::string value;
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::fprintf(stderr, "sidecar_bench: %s needs a value\n", arg.c_str());
      return false;
    }
    bool ok = true;
    if (arg == "--calls") {
      ok = absl::SimpleAtoi(value, &flags->calls) && flags->calls > 0;
    } else if (arg == "--rounds") {
      ok = absl::SimpleAtoi(value, &flags->rounds) && flags->rounds > 0;
    } else if (arg == "--warmup") {
      ok = absl::SimpleAtoi(value, &flags->warmup) && flags->warmup >= 0;
    } else if (arg == "--threads") {
      ok = absl::SimpleAtoi(value, &flags->threads) && flags->threads > 0;
    } else if (arg == "--busy-seconds") {
      ok = absl::SimpleAtod(value, &flags->busy_seconds) &&
           flags->busy_seconds > 0;
    } else if (arg == "--idle-seconds") {
      ok = absl::SimpleAtod(value, &flags->idle_seconds) &&
           flags->idle_seconds >= 0;
    } else if (arg == "--rate") {
      flags->rates.clear();
      for (absl::string_view part : absl::StrSplit(value, ',')) {
        int rate = 0;
        if (!absl::SimpleAtoi(part, &rate) || rate < 0) {
          ok = false;
          break;
        }
        if (rate > 0) flags->rates.push_back(rate);
      }
    } else if (arg == "--lease") {
      ok = value == "on" || value == "off";
      flags->lease = value == "on";
    } else if (arg == "--json") {
      flags->json = value;
    } else {
      std::fprintf(stderr, "sidecar_bench: unknown flag %s (see --help)\n",
                   arg.c_str());
      return false;
    }
    if (!ok) {
      std::fprintf(stderr, "sidecar_bench: bad value for %s: \"%s\"\n",
                   arg.c_str(), value.c_str());
      return false;
    }
  }
  return true;
}

// ---- /proc --------------------------------------------------------------

// A "Name:   N kB" (or plain N) field of /proc/PID/status, or -1.
int64_t StatusField(pid_t pid, const std::string& name) {
  std::istringstream in(Slurp(absl::StrCat("/proc/", pid, "/status")));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + ":", 0) != 0) continue;
    std::istringstream rest(line.substr(name.size() + 1));
    int64_t value = -1;
    rest >> value;
    return value;
  }
  return -1;
}

double SelfCpuMicros() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 +
         (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// How busy the rest of the machine is: non-idle CPU of the whole machine
// (/proc/stat) minus this process and both sluiced, in cores. Other work on
// a 2-core machine skews every figure, so each interval reports it.
struct LoadMark {
  double machine_busy_us = 0;
  double ours_us = 0;
  absl::Time at;
};

LoadMark MarkLoad(const std::vector<pid_t>& servers) {
  LoadMark m;
  std::istringstream in(Slurp("/proc/stat"));
  std::string cpu;
  uint64_t v[8] = {0};
  in >> cpu;
  for (uint64_t& x : v) in >> x;
  // user nice system idle iowait irq softirq steal
  const uint64_t busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
  m.machine_busy_us = static_cast<double>(busy) * 1e6 /
                      static_cast<double>(sysconf(_SC_CLK_TCK));
  m.ours_us = SelfCpuMicros();
  for (pid_t pid : servers) m.ours_us += CpuMicros(pid);
  m.at = absl::Now();
  return m;
}

double OtherCores(const LoadMark& a, const LoadMark& b) {
  const double other = (b.machine_busy_us - a.machine_busy_us) -
                       (b.ours_us - a.ours_us);
  return std::max(0.0, other) / absl::ToDoubleMicroseconds(b.at - a.at);
}

// ---- latency ------------------------------------------------------------

struct Summary {
  size_t n = 0;
  double p50 = 0, p90 = 0, p99 = 0, p999 = 0, mean = 0, max = 0;  // us
};

Summary Summarize(std::vector<double> v) {
  Summary s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return sluice::base::SortedPercentile(v, q); };
  s.p50 = at(0.50);
  s.p90 = at(0.90);
  s.p99 = at(0.99);
  s.p999 = at(0.999);
  s.max = v.back();
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  return s;
}

double Micros(absl::Duration d) { return absl::ToDoubleMicroseconds(d); }

// One transport: its sluiced, the channel the SDK client and the raw stubs
// share, and the samples.
// The floor under any RPC: a 64-byte echo over a plain socket of the same
// kind (a blocking thread echoes in this process), so that the kernel's part
// of the difference between the transports shows apart from gRPC's work.
class Echo {
 public:
  static constexpr size_t kBytes = 64;
  ~Echo() {
    if (client_ >= 0) close(client_);  // the echo thread sees EOF and ends
    if (thread_.joinable()) thread_.join();
    if (listener_ >= 0) close(listener_);
    if (!unix_path_.empty()) unlink(unix_path_.c_str());
  }
  // `unix_path` empty: TCP on 127.0.0.1 (TCP_NODELAY, as gRPC sets it).
  bool Start(const std::string& unix_path) {
    sockaddr_storage addr{};
    socklen_t len = 0;
    if (unix_path.empty()) {
      auto* in = reinterpret_cast<sockaddr_in*>(&addr);
      in->sin_family = AF_INET;
      in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      len = sizeof(sockaddr_in);
    } else {
      auto* un = reinterpret_cast<sockaddr_un*>(&addr);
      un->sun_family = AF_UNIX;
      if (unix_path.size() >= sizeof(un->sun_path)) return false;
      std::snprintf(un->sun_path, sizeof(un->sun_path), "%s",
                    unix_path.c_str());
      len = sizeof(sockaddr_un);
      unix_path_ = unix_path;
    }
    listener_ = socket(addr.ss_family, SOCK_STREAM, 0);
    if (listener_ < 0 ||
        bind(listener_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(listener_, 1) != 0 ||
        getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) !=
            0) {
      return false;
    }
    client_ = socket(addr.ss_family, SOCK_STREAM, 0);
    if (client_ < 0 ||
        connect(client_, reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      return false;
    }
    const int server = accept(listener_, nullptr, nullptr);
    if (server < 0) return false;
    if (unix_path.empty()) {
      const int one = 1;
      setsockopt(client_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      setsockopt(server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    thread_ = std::thread([server] {
      char buf[kBytes];
      while (true) {
        const ssize_t n = read(server, buf, sizeof(buf));
        if (n <= 0 || !WriteAll(server, buf, static_cast<size_t>(n))) break;
      }
      close(server);
    });
    return true;
  }
  // One round trip; false on an error.
  bool RoundTrip() {
    char buf[kBytes] = {0};
    if (!WriteAll(client_, buf, sizeof(buf))) return false;
    size_t got = 0;
    while (got < sizeof(buf)) {
      const ssize_t n = read(client_, buf + got, sizeof(buf) - got);
      if (n <= 0) return false;
      got += static_cast<size_t>(n);
    }
    return true;
  }

 private:
  static bool WriteAll(int fd, const char* p, size_t n) {
    while (n > 0) {
      const ssize_t w = write(fd, p, n);
      if (w <= 0) return false;
      p += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }
  int listener_ = -1, client_ = -1;
  std::string unix_path_;
  std::thread thread_;
};

struct Transport {
  std::string name;
  Echo echo;
  std::vector<double> echo_rtt;
  SluicedProcess process;
  std::string target;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<sluice::client::Client> client;
  std::unique_ptr<sluice::v1::DecisionService::Stub> decision;
  std::unique_ptr<grpc::health::v1::Health::Stub> health;
  std::vector<double> sdk_acquire, raw_acquire, health_check;
  uint64_t refused = 0, local = 0, errors = 0;
};

// The options a gateway uses for this sidecar: the preset, with the TCP
// target for the TCP transport, and leases as --lease says.
sluice::client::ClientOptions OptionsFor(const std::string& target,
                                         bool lease) {
  sluice::client::ClientOptions options =
      sluice::client::SidecarClientOptions();
  options.target = target;  // "unix:PATH" or "127.0.0.1:PORT"
  options.lease.enabled = lease;
  return options;
}

// The channel exactly as Client::Create builds one from `options`.
std::shared_ptr<grpc::Channel> ChannelFor(
    const sluice::client::ClientOptions& options) {
  grpc::ChannelArguments args;
  if (!options.load_balancing_policy.empty()) {
    args.SetLoadBalancingPolicyName(options.load_balancing_policy);
  }
  for (const auto& [name, value] : options.channel_int_args) {
    args.SetInt(name, value);
  }
  return grpc::CreateCustomChannel(options.target,
                                   grpc::InsecureChannelCredentials(), args);
}

bool Connect(Transport* t, bool lease, std::string* error) {
  sluice::client::ClientOptions options = OptionsFor(t->target, lease);
  t->channel = ChannelFor(options);
  if (!t->channel->WaitForConnected(
          absl::ToChronoTime(absl::Now() + absl::Seconds(5)))) {
    *error = "cannot connect to " + t->target;
    return false;
  }
  options.channel = t->channel;
  auto client = sluice::client::Client::Create(options);
  if (!client.ok()) {
    *error = std::string(client.status().message());
    return false;
  }
  t->client = std::move(*client);
  t->decision = sluice::v1::DecisionService::NewStub(t->channel);
  t->health = grpc::health::v1::Health::NewStub(t->channel);
  return true;
}

// Waits until the client has settled `expected` reports (sent or failed);
// false after a second.
bool AwaitReports(const sluice::client::Client& client, uint64_t expected) {
  const absl::Time give_up = absl::Now() + absl::Seconds(1);
  while (true) {
    const sluice::client::ClientStats s = client.stats();
    if (s.reports_sent + s.reports_failed >= expected) return true;
    if (absl::Now() > give_up) return false;
    std::this_thread::yield();
  }
}

// (a) Acquire through the SDK, then the report a gateway sends; the report
// is awaited (untimed) so that it does not overlap the next timed call.
void SdkAcquire(Transport* t, bool record, uint64_t* reports_expected) {
  const absl::Time start = absl::Now();
  sluice::client::Permit permit = t->client->Acquire(kDependency);
  const absl::Time end = absl::Now();
  if (record) t->sdk_acquire.push_back(Micros(end - start));
  if (permit.decided_locally()) {
    ++t->local;
  } else if (!permit.allowed()) {
    ++t->refused;
  } else if (permit.leased()) {
    // Settled in this process; its outcome goes with the next renewal.
    permit.Report(sluice::client::Outcome::kSuccess, absl::Milliseconds(1));
  } else {
    permit.Report(sluice::client::Outcome::kSuccess, absl::Milliseconds(1));
    ++*reports_expected;
    if (!AwaitReports(*t->client, *reports_expected)) ++t->errors;
  }
}

// (b) The same decision as a raw synchronous gRPC call; its report is sent
// synchronously, untimed.
void RawAcquire(Transport* t, bool record) {
  sluice::v1::AcquireRequest request;
  request.set_dependency(kDependency);
  sluice::v1::AcquireResponse response;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  const absl::Time start = absl::Now();
  grpc::Status status = t->decision->Acquire(&ctx, request, &response);
  const absl::Time end = absl::Now();
  if (record) t->raw_acquire.push_back(Micros(end - start));
  if (!status.ok()) {
    ++t->errors;
  } else if (response.verdict() != sluice::v1::ALLOW) {
    ++t->refused;
  } else if (!response.permit_id().empty()) {
    sluice::v1::ReportResultRequest report;
    report.set_dependency(kDependency);
    report.set_permit_id(response.permit_id());
    report.set_outcome(sluice::v1::SUCCESS);
    report.mutable_latency()->set_nanos(1000000);
    sluice::v1::ReportResultResponse report_response;
    grpc::ClientContext report_ctx;
    report_ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
    if (!t->decision->ReportResult(&report_ctx, report, &report_response)
             .ok()) {
      ++t->errors;
    }
  }
}

// (c) The baseline: a gRPC round trip to the same server that decides
// nothing.
void HealthCheck(Transport* t, bool record) {
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(1)));
  const absl::Time start = absl::Now();
  grpc::Status status = t->health->Check(&ctx, request, &response);
  const absl::Time end = absl::Now();
  if (record) t->health_check.push_back(Micros(end - start));
  if (!status.ok()) ++t->errors;
}

// (d) The kernel floor: a 64-byte echo over a plain socket of the kind.
void EchoRoundTrip(Transport* t, bool record) {
  const absl::Time start = absl::Now();
  const bool ok = t->echo.RoundTrip();
  const absl::Time end = absl::Now();
  if (record) t->echo_rtt.push_back(Micros(end - start));
  if (!ok) ++t->errors;
}

// Call `i`: one of each kind, in an order that rotates with `i`, so that
// no kind always follows the same one (a call right after a report pays
// for the work that report leaves behind).
void OneOfEach(Transport* t, int i, bool record, uint64_t* reports_expected) {
  for (int k = 0; k < 4; ++k) {
    switch ((i + k) % 4) {
      case 0:
        SdkAcquire(t, record, reports_expected);
        break;
      case 1:
        RawAcquire(t, record);
        break;
      case 2:
        HealthCheck(t, record);
        break;
      default:
        EchoRoundTrip(t, record);
        break;
    }
  }
}

// ---- busy load ----------------------------------------------------------

struct BusyResult {
  int offered = 0;
  double achieved = 0;       // decisions/s over the interval
  uint64_t decisions = 0;    // SDK Acquires answered by sluiced
  uint64_t local = 0;        // decided by the SDK (timeout or backoff)
  uint64_t backoff = 0;      // of those, without asking (backing off)
  Summary latency;           // of every SDK Acquire, local ones included
  uint64_t refused = 0;
  double seconds = 0;        // the measured interval, calls and drain
  double cpu_us = 0;         // sluiced utime + stime over the interval
  double millicores = 0;
  double sched_millicores = 0;  // from schedstat (threads that stayed)
  double cpu_us_per_decision = 0;
  double client_cpu_us_per_decision = 0;  // this process (SDK + pacing)
  double other_cores = 0;    // other processes on the machine
  int64_t rss_kb = 0;        // VmRSS at the end
};

// `threads` threads offer `rate` Acquire + Report pairs per second in
// total, each on its own fixed schedule (a late call goes at once and the
// schedule is kept, so the offered count is rate x seconds).
BusyResult Busy(Transport* t, pid_t pid, const std::vector<pid_t>& servers,
                int rate, int threads, double seconds) {
  BusyResult r;
  const LoadMark load0 = MarkLoad(servers);
  r.offered = rate;
  std::atomic<uint64_t> decisions{0}, local{0}, refused{0}, leased{0};
  const sluice::client::ClientStats before = t->client->stats();
  const double cpu0 = CpuMicros(pid);
  const double sched0 = SchedMicros(pid);
  const double self0 = SelfCpuMicros();
  const absl::Time t0 = absl::Now();
  timespec mono0;
  clock_gettime(CLOCK_MONOTONIC, &mono0);
  const int64_t start_ns = mono0.tv_sec * 1000000000LL + mono0.tv_nsec;
  const int64_t per_thread = static_cast<int64_t>(rate * seconds / threads);
  const int64_t interval_ns = static_cast<int64_t>(1e9 * threads / rate);
  std::vector<std::thread> workers;
  std::vector<std::vector<double>> latencies(threads);
  for (int i = 0; i < threads; ++i) {
    latencies[i].reserve(static_cast<size_t>(per_thread));
    workers.emplace_back([&, i] {
      int64_t next = start_ns + interval_ns * i / threads;
      for (int64_t k = 0; k < per_thread; ++k, next += interval_ns) {
        timespec when{static_cast<time_t>(next / 1000000000LL),
                      static_cast<long>(next % 1000000000LL)};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &when, nullptr);
        const absl::Time start = absl::Now();
        sluice::client::Permit permit = t->client->Acquire(kDependency);
        latencies[i].push_back(Micros(absl::Now() - start));
        if (permit.decided_locally()) {
          local.fetch_add(1);
        } else if (!permit.allowed()) {
          refused.fetch_add(1);
          decisions.fetch_add(1);
        } else {
          decisions.fetch_add(1);
          if (permit.leased()) leased.fetch_add(1);
          permit.Report(sluice::client::Outcome::kSuccess,
                        absl::Milliseconds(1));
        }
      }
    });
  }
  for (std::thread& w : workers) w.join();
  // The reports are part of the work: wait for them to land.
  // (A leased call's report stays in this process.)
  const uint64_t reports = decisions.load() - refused.load() - leased.load();
  AwaitReports(*t->client, before.reports_sent + before.reports_failed + reports);
  const absl::Time t1 = absl::Now();
  const double cpu1 = CpuMicros(pid);
  const double sched1 = SchedMicros(pid);
  const double self1 = SelfCpuMicros();
  r.decisions = decisions.load();
  r.local = local.load();
  r.backoff = t->client->stats().backoff_decisions - before.backoff_decisions;
  std::vector<double> all;
  for (const std::vector<double>& l : latencies) {
    all.insert(all.end(), l.begin(), l.end());
  }
  r.latency = Summarize(std::move(all));
  r.refused = refused.load();
  r.seconds = absl::ToDoubleSeconds(t1 - t0);
  r.achieved = static_cast<double>(r.decisions) / r.seconds;
  r.cpu_us = cpu1 - cpu0;
  r.millicores = r.cpu_us / r.seconds / 1000.0;
  r.sched_millicores = (sched1 - sched0) / r.seconds / 1000.0;
  if (r.decisions > 0) {
    r.cpu_us_per_decision = r.cpu_us / static_cast<double>(r.decisions);
    r.client_cpu_us_per_decision =
        (self1 - self0) / static_cast<double>(r.decisions);
  }
  r.rss_kb = StatusField(pid, "VmRSS");
  r.other_cores = OtherCores(load0, MarkLoad(servers));
  return r;
}

// ---- output -------------------------------------------------------------

void PrintRow(const char* label, const Summary& s) {
  std::printf("  %-24s %8.1f %8.1f %8.1f %8.1f %8.1f\n", label, s.p50, s.p90,
              s.p99, s.p999, s.mean);
}

void PrintRatio(const char* label, const Summary& a, const Summary& b) {
  std::printf("  %-24s %7.2fx %7.2fx %7.2fx %7.2fx %7.2fx\n", label,
              a.p50 / b.p50, a.p90 / b.p90, a.p99 / b.p99, a.p999 / b.p999,
              a.mean / b.mean);
}

std::string JsonSummary(const Summary& s) {
  return absl::StrCat("{\"n\": ", s.n, ", \"p50_us\": ", s.p50,
                      ", \"p90_us\": ", s.p90, ", \"p99_us\": ", s.p99,
                      ", \"p999_us\": ", s.p999, ", \"mean_us\": ", s.mean,
                      ", \"max_us\": ", s.max, "}");
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) return 2;

  Transport unix_t, tcp_t;
  unix_t.name = "unix";
  tcp_t.name = "tcp";
  unix_t.process.set_listen("unix:" + unix_t.process.dir() + "/sluice.sock",
                            "unix:" + unix_t.process.dir() + "/admin.sock");
  // TCP keeps SluicedProcess's default, 127.0.0.1:0 for both.
  for (Transport* t : {&unix_t, &tcp_t}) {
    std::string error;
    if (!t->process.Start(kPolicies, {}, "", &error)) {
      std::fprintf(stderr, "sidecar_bench: %s sluiced: %s\n", t->name.c_str(),
                   error.c_str());
      return 1;
    }
    t->target = t->process.target();
    if (!t->echo.Start(t == &unix_t ? t->process.dir() + "/echo.sock" : "")) {
      std::fprintf(stderr, "sidecar_bench: %s echo socket: %s\n",
                   t->name.c_str(), std::strerror(errno));
      return 1;
    }
    if (!Connect(t, flags.lease, &error)) {
      std::fprintf(stderr, "sidecar_bench: %s: %s\n", t->name.c_str(),
                   error.c_str());
      return 1;
    }
  }
  const pid_t pid = unix_t.process.pid();
  const pid_t tcp_pid = tcp_t.process.pid();
  if (pid <= 0 || tcp_pid <= 0) {
    std::fprintf(stderr, "sidecar_bench: cannot find the sluiced pids\n");
    return 1;
  }
  const std::vector<pid_t> servers = {pid, tcp_pid};
  // Connected, policies loaded, nothing asked yet.
  absl::SleepFor(absl::Milliseconds(500));
  const int64_t rss_start_kb = StatusField(pid, "VmRSS");
  const int64_t threads_idle = StatusField(pid, "Threads");

  std::printf("sidecar_bench: sluiced standalone (no Redis), same policies; "
              "SDK leases %s\n",
              flags.lease ? "on" : "off");
  std::printf("  unix: %s (pid %d)\n  tcp:  %s\n", unix_t.target.c_str(),
              static_cast<int>(pid), tcp_t.target.c_str());
  std::printf("  %d rounds x %d calls of each kind per transport, "
              "alternating unix/tcp; %d warm-up calls\n",
              flags.rounds, flags.calls, flags.warmup);

  // Idle: started, connected, nothing asked for idle_seconds (the
  // housekeeping thread and gRPC's own timers run).
  double idle_millicores = -1, idle_sched_millicores = -1;
  double idle_other_cores = -1;
  int64_t rss_idle_kb = -1;
  std::string idle_line;
  if (flags.idle_seconds > 0) {
    const LoadMark load0 = MarkLoad(servers);
    const double cpu0 = CpuMicros(pid);
    const double sched0 = SchedMicros(pid);
    const absl::Time t0 = absl::Now();
    absl::SleepFor(absl::Seconds(flags.idle_seconds));
    idle_other_cores = OtherCores(load0, MarkLoad(servers));
    const double cpu1 = CpuMicros(pid);
    const double sched1 = SchedMicros(pid);
    const double secs = absl::ToDoubleSeconds(absl::Now() - t0);
    idle_millicores = (cpu1 - cpu0) / secs / 1000.0;
    idle_sched_millicores = (sched1 - sched0) / secs / 1000.0;
    rss_idle_kb = StatusField(pid, "VmRSS");
    idle_line = absl::StrFormat(
        "  idle %.0f s after start: CPU %5.1f millicores (%.0f ms; "
        "schedstat: %.2f millicores), RSS %.1f MiB; other load %.2f cores\n",
        secs, idle_millicores, (cpu1 - cpu0) / 1000.0, idle_sched_millicores,
        rss_idle_kb / 1024.0, idle_other_cores);
  }

  // ---- latency: warm up, then rounds alternating the transports.
  uint64_t reports_expected_unix = 0, reports_expected_tcp = 0;
  auto expected = [&](Transport* t) {
    return t == &unix_t ? &reports_expected_unix : &reports_expected_tcp;
  };
  for (Transport* t : {&unix_t, &tcp_t}) {
    for (int i = 0; i < flags.warmup; ++i) OneOfEach(t, i, false, expected(t));
  }
  const absl::Time latency_start = absl::Now();
  const LoadMark latency_load0 = MarkLoad(servers);
  for (int round = 0; round < flags.rounds; ++round) {
    Transport* order[2] = {&unix_t, &tcp_t};
    if (round % 2 == 1) std::swap(order[0], order[1]);
    for (Transport* t : order) {
      for (int i = 0; i < flags.calls; ++i) OneOfEach(t, i, true, expected(t));
    }
  }
  const double latency_seconds =
      absl::ToDoubleSeconds(absl::Now() - latency_start);
  const double latency_other_cores =
      OtherCores(latency_load0, MarkLoad(servers));

  const Summary u_sdk = Summarize(unix_t.sdk_acquire);
  const Summary u_raw = Summarize(unix_t.raw_acquire);
  const Summary u_health = Summarize(unix_t.health_check);
  const Summary t_sdk = Summarize(tcp_t.sdk_acquire);
  const Summary t_raw = Summarize(tcp_t.raw_acquire);
  const Summary t_health = Summarize(tcp_t.health_check);
  const Summary u_echo = Summarize(unix_t.echo_rtt);
  const Summary t_echo = Summarize(tcp_t.echo_rtt);

  std::printf("\nlatency, microseconds (%.1f s)  %8s %8s %8s %8s %8s\n",
              latency_seconds, "p50", "p90", "p99", "p99.9", "mean");
  PrintRow("unix Acquire (SDK)", u_sdk);
  PrintRow("tcp  Acquire (SDK)", t_sdk);
  PrintRow("unix Acquire (raw gRPC)", u_raw);
  PrintRow("tcp  Acquire (raw gRPC)", t_raw);
  PrintRow("unix health Check", u_health);
  PrintRow("tcp  health Check", t_health);
  PrintRow("unix 64-byte echo", u_echo);
  PrintRow("tcp  64-byte echo", t_echo);
  std::printf("  (other processes used %.2f of %u cores meanwhile)\n",
              latency_other_cores, std::thread::hardware_concurrency());
  std::printf("ratios\n");
  PrintRatio("unix/tcp Acquire (SDK)", u_sdk, t_sdk);
  PrintRatio("unix/tcp Acquire (raw)", u_raw, t_raw);
  PrintRatio("unix/tcp health Check", u_health, t_health);
  PrintRatio("unix/tcp 64-byte echo", u_echo, t_echo);
  PrintRatio("unix SDK/health", u_sdk, u_health);
  PrintRatio("tcp  SDK/health", t_sdk, t_health);
  PrintRatio("unix raw/health", u_raw, u_health);
  PrintRatio("tcp  raw/health", t_raw, t_health);
  for (Transport* t : {&unix_t, &tcp_t}) {
    if (t->refused + t->local + t->errors > 0) {
      std::printf("  WARNING %s: %llu refused, %llu decided locally by the "
                  "SDK (5 ms timeout or backoff), %llu errors\n",
                  t->name.c_str(),
                  static_cast<unsigned long long>(t->refused),
                  static_cast<unsigned long long>(t->local),
                  static_cast<unsigned long long>(t->errors));
    }
  }

  // ---- resources of the Unix-socket sidecar.
  const double tick_ms = 1000.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  std::printf("\nunix sidecar resources (/proc/%d; CPU counted in %.0f ms "
              "ticks)\n",
              static_cast<int>(pid), tick_ms);
  std::printf("  RSS after start, policies loaded:    %7.1f MiB (%lld "
              "threads)\n",
              rss_start_kb / 1024.0, static_cast<long long>(threads_idle));
  std::printf("%s", idle_line.c_str());
  std::vector<BusyResult> busy;
  if (!flags.rates.empty()) {
    std::printf("  busy: Acquire + Report pairs through the SDK from %d "
                "threads, %.0f s per rate\n",
                flags.threads, flags.busy_seconds);
    std::printf("    offered/s  answered/s  millicores (schedstat)  "
                "CPU us/decision  client us/decision  RSS MiB  other load\n");
  }
  for (int rate : flags.rates) {
    BusyResult r =
        Busy(&unix_t, pid, servers, rate, flags.threads, flags.busy_seconds);
    std::printf("    %9d  %10.0f  %10.1f  %10.1f  %15.1f  %18.1f  %7.1f  %5.2f "
                "cores\n",
                rate, r.achieved, r.millicores, r.sched_millicores,
                r.cpu_us_per_decision, r.client_cpu_us_per_decision,
                r.rss_kb / 1024.0, r.other_cores);
    std::printf("               SDK Acquire latency us: p50 %.1f, p99 %.1f, "
                "p99.9 %.1f, max %.1f\n",
                r.latency.p50, r.latency.p99, r.latency.p999, r.latency.max);
    if (r.local + r.refused > 0) {
      std::printf("               WARNING: %llu decided locally by the SDK "
                  "(%llu of them backing off after 5 ms timeouts), %llu "
                  "refused\n",
                  static_cast<unsigned long long>(r.local),
                  static_cast<unsigned long long>(r.backoff),
                  static_cast<unsigned long long>(r.refused));
    }
    busy.push_back(r);
  }
  const int64_t rss_peak_kb = StatusField(pid, "VmHWM");
  std::printf("  peak RSS (VmHWM) over the run:       %7.1f MiB\n",
              rss_peak_kb / 1024.0);

  if (!flags.json.empty()) {
    std::ofstream out(flags.json, std::ios::trunc);
    out << "{\n  \"config\": {\"calls\": " << flags.calls
        << ", \"rounds\": " << flags.rounds << ", \"warmup\": "
        << flags.warmup << ", \"threads\": " << flags.threads
        << ", \"busy_seconds\": " << flags.busy_seconds
        << ", \"idle_seconds\": " << flags.idle_seconds
        << ", \"lease\": " << (flags.lease ? "true" : "false")
        << ", \"nproc\": " << std::thread::hardware_concurrency()
        << ", \"redis\": false},\n";
    out << "  \"latency\": {\n";
    out << "    \"unix\": {\"sdk_acquire\": " << JsonSummary(u_sdk)
        << ", \"raw_acquire\": " << JsonSummary(u_raw)
        << ", \"health_check\": " << JsonSummary(u_health)
        << ", \"echo_64b\": " << JsonSummary(u_echo)
        << ", \"refused\": " << unix_t.refused << ", \"local\": "
        << unix_t.local << ", \"errors\": " << unix_t.errors << "},\n";
    out << "    \"tcp\": {\"sdk_acquire\": " << JsonSummary(t_sdk)
        << ", \"raw_acquire\": " << JsonSummary(t_raw)
        << ", \"health_check\": " << JsonSummary(t_health)
        << ", \"echo_64b\": " << JsonSummary(t_echo)
        << ", \"refused\": " << tcp_t.refused << ", \"local\": "
        << tcp_t.local << ", \"errors\": " << tcp_t.errors << "},\n";
    out << "    \"seconds\": " << latency_seconds
        << ", \"other_load_cores\": " << latency_other_cores << "\n  },\n";
    out << "  \"sidecar\": {\"rss_start_kb\": " << rss_start_kb
        << ", \"threads\": " << threads_idle
        << ", \"idle_millicores\": " << idle_millicores
        << ", \"idle_schedstat_millicores\": " << idle_sched_millicores
        << ", \"idle_other_load_cores\": " << idle_other_cores
        << ", \"rss_idle_kb\": " << rss_idle_kb
        << ", \"rss_peak_kb\": " << rss_peak_kb
        << ", \"cpu_tick_ms\": " << tick_ms << ", \"busy\": [";
    for (size_t i = 0; i < busy.size(); ++i) {
      const BusyResult& r = busy[i];
      out << (i ? ", " : "") << "{\"offered_per_s\": " << r.offered
          << ", \"answered_per_s\": " << r.achieved
          << ", \"decisions\": " << r.decisions << ", \"local\": " << r.local
          << ", \"backoff\": " << r.backoff << ", \"refused\": " << r.refused
          << ", \"sdk_acquire\": " << JsonSummary(r.latency)
          << ", \"seconds\": " << r.seconds
          << ", \"millicores\": " << r.millicores
          << ", \"schedstat_millicores\": " << r.sched_millicores
          << ", \"cpu_us_per_decision\": " << r.cpu_us_per_decision
          << ", \"client_cpu_us_per_decision\": "
          << r.client_cpu_us_per_decision << ", \"rss_kb\": " << r.rss_kb
          << ", \"other_load_cores\": " << r.other_cores
          << "}";
    }
    out << "]}\n}\n";
  }

  // Clients first (they drain their reports), then the servers.
  for (Transport* t : {&unix_t, &tcp_t}) {
    t->client.reset();
    t->decision.reset();
    t->health.reset();
    t->channel.reset();
    t->process.Terminate();
  }
  return 0;
}
