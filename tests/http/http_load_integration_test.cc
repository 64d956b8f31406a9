// SPDX-License-Identifier: Apache-2.0
// The HTTP server under hostile load, in real time (CTest label
// "integration"): hundreds of slow-header, slow-body and silent-TLS
// connections held while a clean client is served; thousands of idle
// keep-alive connections held while new clients are served; and the
// memory 16 MB of headers costs on one connection and on 128 at once.
// The real HttpServer and DecisionServiceImpl, in process, on loopback.

#include <fcntl.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "server/http/http_server.h"
#include "server/rpc/decision_service.h"
#include "server/tls/server_tls.h"
#include "tests/http/raw_connection.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_certs.h"
#include "tests/testing/wait_for.h"

namespace sluice::http {
namespace {

// This process's resident memory, from /proc/self/status, in bytes.
int64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::stoll(line.substr(6)) * 1024;
    }
  }
  return -1;
}

// A socket connected to 127.0.0.1:port, or -1.
int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
      0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Holds `n` hostile connections on a thread of its own until destroyed:
// each sends its opening, then one byte a second; one the server closed is
// opened again (as an attacker would).
class SlowClients {
 public:
  enum class Kind { kHeader, kBody, kSilent };

  SlowClients(int port, Kind kind, int n) : port_(port), kind_(kind) {
    fds_.assign(static_cast<size_t>(n), -1);
    thread_ = std::thread([this] { Run(); });
  }
  ~SlowClients() {
    done_.store(true);
    thread_.join();
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  // Connections opened again after the server closed them.
  int reopened() const { return reopened_.load(); }
  int open() const { return open_.load(); }

 private:
  void Run() {
    while (!done_.load()) {
      int open = 0;
      for (int& fd : fds_) {
        if (fd >= 0 && !Alive(fd)) {
          ::close(fd);
          fd = -1;
          reopened_.fetch_add(1);
        }
        if (fd < 0) {
          fd = Connect(port_);
          if (fd < 0) continue;
          ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
          Send(fd, Opening());
        } else if (kind_ != Kind::kSilent) {
          Send(fd, kind_ == Kind::kHeader ? "a" : " ");
        }
        ++open;
      }
      open_.store(open);
      for (int i = 0; i < 10 && !done_.load(); ++i) {
        absl::SleepFor(absl::Milliseconds(100));
      }
    }
  }

  std::string Opening() const {
    switch (kind_) {
      case Kind::kHeader:
        return "POST /v1/acquire HTTP/1.1\r\nHost: t\r\nX-Slow: ";
      case Kind::kBody:
        return "POST /v1/acquire HTTP/1.1\r\nHost: t\r\n"
               "Content-Length: 100000\r\n\r\n{";
      case Kind::kSilent:
        break;
    }
    return "";
  }

  static void Send(int fd, const std::string& bytes) {
    if (!bytes.empty()) {
      ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
  }
  // False once the server closed it (a read sees the end or an error).
  static bool Alive(int fd) {
    char buffer[512];
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }

  const int port_;
  const Kind kind_;
  std::vector<int> fds_;
  std::atomic<bool> done_{false};
  std::atomic<int> reopened_{0};
  std::atomic<int> open_{0};
  std::thread thread_;
};

struct CleanRun {
  int requests = 0;
  int errors = 0;
  absl::Duration p99;
  absl::Duration max;
};

// GET /v1/health on a new connection each time, every 10 ms, for
// `duration`; `get` answers the status of one request.
template <typename Get>
CleanRun RunCleanClient(absl::Duration duration, Get get) {
  CleanRun run;
  std::vector<absl::Duration> latencies;
  const absl::Time end = absl::Now() + duration;
  while (absl::Now() < end) {
    const absl::Time start = absl::Now();
    const int status = get();
    latencies.push_back(absl::Now() - start);
    ++run.requests;
    if (status != 200) ++run.errors;
    absl::SleepFor(absl::Milliseconds(10));
  }
  std::sort(latencies.begin(), latencies.end());
  if (!latencies.empty()) {
    run.p99 = latencies[latencies.size() * 99 / 100];
    run.max = latencies.back();
  }
  return run;
}

class HttpLoadTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Thousands of connections, both ends in this process.
    rlimit limit{};
    ::getrlimit(RLIMIT_NOFILE, &limit);
    limit.rlim_cur = limit.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }

  std::unique_ptr<HttpServer> Start(HttpServerOptions options) {
    absl::StatusOr<std::unique_ptr<HttpServer>> server =
        HttpServer::Start(options, &service_);
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return nullptr;
    (*server)->SetServing(true);
    return *std::move(server);
  }

  static int PlainHealth(int port) {
    testing::RawConnection c(port);
    if (!c.Send("GET /v1/health HTTP/1.1\r\nHost: t\r\n\r\n")) return 0;
    return c.Read().status;
  }

  void Report(const char* what, const CleanRun& run) {
    const double errors = 100.0 * run.errors / std::max(1, run.requests);
    std::printf("%s: %d requests, %.2f%% errors, p99 %.1f ms, max %.1f ms\n",
                what, run.requests, errors,
                absl::ToDoubleMilliseconds(run.p99),
                absl::ToDoubleMilliseconds(run.max));
    EXPECT_GE(run.requests, 100) << what;
    EXPECT_LE(errors, 1.0) << what;
    EXPECT_LE(run.p99, absl::Milliseconds(50)) << what;
  }

  testing::FakeClock clock_;
  core::Engine engine_{&clock_, core::Engine::Options()};
  rpc::DecisionServiceImpl service_{&engine_};
};

TEST_F(HttpLoadTest, SlowHeadersAndBodiesDoNotTakeTheApi) {
  std::unique_ptr<HttpServer> server = Start(HttpServerOptions());
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  for (SlowClients::Kind kind :
       {SlowClients::Kind::kHeader, SlowClients::Kind::kBody}) {
    SlowClients slow(port, kind, 300);
    ASSERT_TRUE(testing::WaitFor([&] { return slow.open() == 300; },
                                 absl::Seconds(10)));
    // Through the head (or body) deadline of 10 s and the reconnections
    // after it.
    const CleanRun run = RunCleanClient(absl::Seconds(15), [&] {
      return PlainHealth(port);
    });
    const HttpStats stats = server->Stats();
    std::printf(
        "  300 slow %s clients held; reopened after a deadline: %d; "
        "server: %lld connections, timeouts head %llu body %llu\n",
        kind == SlowClients::Kind::kHeader ? "header" : "body", slow.reopened(),
        static_cast<long long>(stats.connections),
        static_cast<unsigned long long>(stats.timeouts[Timeout::kHead]),
        static_cast<unsigned long long>(stats.timeouts[Timeout::kBody]));
    Report(kind == SlowClients::Kind::kHeader ? "slow headers" : "slow bodies",
           run);
    EXPECT_GT(slow.reopened(), 0);  // the deadline did cut them
  }
}

TEST_F(HttpLoadTest, SilentTlsConnectionsDoNotTakeTheApi) {
  testing::TempDir dir("sluice_http_load");
  testing::TestCerts certs(dir.path());
  ASSERT_TRUE(certs.ok()) << certs.error();
  tls::ServerTlsFiles files;
  files.cert_file = certs.server_cert();
  files.key_file = certs.server_key();
  absl::StatusOr<tls::LoadedContext> loaded = tls::LoadServerContext(files);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::shared_ptr<SSL_CTX> context = loaded->context;
  HttpServerOptions options;
  options.tls_context = [context] { return context; };
  std::unique_ptr<HttpServer> server = Start(options);
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  SlowClients silent(port, SlowClients::Kind::kSilent, 300);
  ASSERT_TRUE(testing::WaitFor([&] { return silent.open() == 300; },
                               absl::Seconds(10)));
  const CleanRun run = RunCleanClient(absl::Seconds(10), [&] {
    httplib::SSLClient client("127.0.0.1", port);
    client.set_ca_cert_path(certs.ca_cert().c_str());
    client.enable_server_certificate_verification(true);
    client.set_connection_timeout(std::chrono::seconds(5));
    const httplib::Result r = client.Get("/v1/health");
    return r ? r->status : 0;
  });
  std::printf("  300 silent TLS clients held; reopened after the handshake "
              "deadline: %d\n",
              silent.reopened());
  Report("silent TLS", run);
  EXPECT_GT(silent.reopened(), 0);
}

TEST_F(HttpLoadTest, FiveThousandIdleKeepAliveConnectionsAndNewClients) {
  std::unique_ptr<HttpServer> server = Start(HttpServerOptions());
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  const int64_t rss_before = ResidentBytes();
  constexpr int kIdle = 5000;
  std::vector<std::unique_ptr<testing::RawConnection>> idle;
  idle.reserve(kIdle);
  for (int i = 0; i < kIdle; ++i) {
    idle.push_back(std::make_unique<testing::RawConnection>(port));
    ASSERT_TRUE(idle.back()->Send("GET /v1/health HTTP/1.1\r\nHost: t\r\n\r\n"))
        << i;
    ASSERT_EQ(idle.back()->Read().status, 200) << i;
  }
  ASSERT_TRUE(testing::WaitFor([&] { return server->Stats().idle == kIdle; },
                               absl::Seconds(10)));
  const int64_t rss_idle = ResidentBytes();
  const CleanRun run = RunCleanClient(absl::Seconds(3), [&] {
    return PlainHealth(port);
  });
  std::printf("%d idle keep-alive connections: RSS +%.1f MB (both ends in "
              "this process)\n",
              kIdle, (rss_idle - rss_before) / 1e6);
  Report("new clients beside 5000 idle connections", run);
  EXPECT_EQ(server->Stats().shed, 0u);
  // Every idle one is still served.
  for (int i = 0; i < kIdle; i += 50) {
    ASSERT_TRUE(idle[static_cast<size_t>(i)]->Send(
        "GET /v1/health HTTP/1.1\r\nHost: t\r\n\r\n"));
    EXPECT_EQ(idle[static_cast<size_t>(i)]->Read().status, 200) << i;
  }
}

// Sends up to 16 MB of "a:b\r\n" on each of `n` connections at once, until
// the server answers or closes; the peak RSS growth seen meanwhile.
int64_t HeaderFloodGrowth(int port, int n, int* answered_431) {
  std::string flood;
  for (int i = 0; i < 13107; ++i) flood += "a:b\r\n";  // 64 kB a piece
  const int64_t before = ResidentBytes();
  std::atomic<int64_t> peak{before};
  std::atomic<bool> done{false};
  std::thread sampler([&] {
    while (!done.load()) {
      peak.store(std::max(peak.load(), ResidentBytes()));
      absl::SleepFor(absl::Milliseconds(5));
    }
  });
  std::vector<std::thread> senders;
  std::atomic<int> refused{0};
  for (int i = 0; i < n; ++i) {
    senders.emplace_back([&] {
      testing::RawConnection c(port);
      if (!c.Send("GET /v1/health HTTP/1.1\r\nHost: t\r\n")) return;
      for (size_t sent = 0; sent < (size_t{16} << 20); sent += flood.size()) {
        pollfd answer{c.fd(), POLLIN, 0};
        if (::poll(&answer, 1, 0) > 0 || !c.Send(flood)) break;
      }
      if (c.Read().status == 431) refused.fetch_add(1);
    });
  }
  for (std::thread& t : senders) t.join();
  done.store(true);
  sampler.join();
  *answered_431 = refused.load();
  return peak.load() - before;
}

TEST_F(HttpLoadTest, SixteenMegabytesOfHeadersCostLittleMemory) {
  std::unique_ptr<HttpServer> server = Start(HttpServerOptions());
  ASSERT_NE(server, nullptr);
  int refused = 0;
  const int64_t one = HeaderFloodGrowth(server->port(), 1, &refused);
  std::printf("16 MB of headers on 1 connection: 431 on %d, peak RSS +%.1f "
              "MB\n",
              refused, one / 1e6);
  EXPECT_EQ(refused, 1);
  const int64_t many = HeaderFloodGrowth(server->port(), 128, &refused);
  std::printf("16 MB of headers on 128 connections at once: 431 on %d, peak "
              "RSS +%.1f MB\n",
              refused, many / 1e6);
  EXPECT_EQ(refused, 128);
  EXPECT_LE(one + many, int64_t{32} << 20);
  ASSERT_TRUE(testing::WaitFor([&] { return server->Stats().connections == 0; },
                               absl::Seconds(10)));
  EXPECT_EQ(server->Stats().rejected[Rejection::kLimits], 129u);
}

}  // namespace
}  // namespace sluice::http
