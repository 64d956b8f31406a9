// SPDX-License-Identifier: Apache-2.0
// http::HttpServer on its own (an engine and a DecisionServiceImpl, no
// gRPC server): its health switch, its connection handling (keep-alive,
// the connection cap and shedding, the deadline of each phase, stopping
// with idle and busy connections), strict framing and size limits, and
// its addresses. Port 0 on loopback; deadlines are made short in the
// options rather than waited out.

#include "server/http/http_server.h"

#include <httplib.h>
#include <openssl/ssl.h>
#include <signal.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/engine.h"
#include "server/rpc/decision_service.h"
#include "server/tls/server_tls.h"
#include "tests/http/raw_connection.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/stats_recorder.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/test_certs.h"
#include "tests/testing/wait_for.h"

namespace sluice::http {
namespace {

using ::testing::HasSubstr;

constexpr char kAcquire[] = R"({"dependency": "anything"})";

class HttpServerTest : public ::testing::Test {
 protected:
  std::unique_ptr<HttpServer> Start(HttpServerOptions options = {}) {
    absl::StatusOr<std::unique_ptr<HttpServer>> server =
        HttpServer::Start(options, &service_);
    EXPECT_TRUE(server.ok()) << server.status();
    if (!server.ok()) return nullptr;
    (*server)->SetServing(true);
    return *std::move(server);
  }

  testing::FakeClock clock_;
  core::Engine engine_{&clock_, core::Engine::Options()};
  rpc::DecisionServiceImpl service_{&engine_};
};

TEST_F(HttpServerTest, HealthFollowsSetServing) {
  absl::StatusOr<std::unique_ptr<HttpServer>> server =
      HttpServer::Start(HttpServerOptions(), &service_);
  ASSERT_TRUE(server.ok()) << server.status();
  httplib::Client client("127.0.0.1", (*server)->port());
  auto health = [&] {
    const httplib::Result r = client.Get("/v1/health");
    return r ? absl::StrCat(r->status, " ", r->body) : std::string("none");
  };
  EXPECT_EQ(health(), R"(503 {"status":"NOT_SERVING"})");  // not yet
  (*server)->SetServing(true);
  EXPECT_EQ(health(), R"(200 {"status":"SERVING"})");
  (*server)->SetServing(false);  // shutting down
  EXPECT_EQ(health(), R"(503 {"status":"NOT_SERVING"})");
}

TEST_F(HttpServerTest, StopClosesIdleKeepAliveConnectionsAtOnce) {
  std::unique_ptr<HttpServer> server = Start();
  ASSERT_NE(server, nullptr);
  testing::RawConnection idle(server->port());
  ASSERT_TRUE(idle.SendPost("/v1/acquire", kAcquire));
  ASSERT_EQ(idle.Read().status, 200);
  EXPECT_EQ(server->Stats().connections, 1);

  // httplib's own loop noticed a stop only at the end of its keep-alive
  // wait (5 s); this one wakes the idle connection at once.
  const absl::Time start = absl::Now();
  server->Stop(absl::Now() + absl::Seconds(30));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_TRUE(idle.ClosedByServer());
  EXPECT_EQ(server->Stats().connections, 0);
  EXPECT_FALSE(testing::RawConnection(server->port()).connected());
}

TEST_F(HttpServerTest, StopCutsARequestStillArrivingAtTheDeadline) {
  std::unique_ptr<HttpServer> server = Start();
  ASSERT_NE(server, nullptr);
  testing::RawConnection slow(server->port());
  // Half a body: the server waits for the rest (up to its 5 s read
  // timeout) on the connection's thread.
  ASSERT_TRUE(slow.Send(
      "POST /v1/acquire HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{"));
  // Accepted and taken by a thread before the stop; Stats tells when.
  ASSERT_TRUE(testing::WaitFor([&] { return server->Stats().connections == 1; },
                               absl::Seconds(5)));
  const absl::Time start = absl::Now();
  server->Stop(absl::Now() + absl::Milliseconds(100));
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(slow.Read().status, 0);  // cut, never answered
}

// Its metrics are Stats(): requests by endpoint and status, connections by
// state, connections closed early by reason, requests refused by reason.
TEST_F(HttpServerTest, StatsAreItsMetrics) {
  HttpServerOptions options;
  options.io_threads = 1;
  std::unique_ptr<HttpServer> server = Start(options);
  ASSERT_NE(server, nullptr);
  testing::RawConnection client(server->port());
  ASSERT_TRUE(client.SendPost("/v1/acquire", kAcquire));
  ASSERT_EQ(client.Read().status, 200);
  ASSERT_TRUE(testing::WaitFor([&] { return server->Stats().idle == 1; },
                               absl::Seconds(5)));
  testing::RawConnection lost(server->port());
  ASSERT_TRUE(lost.SendPost("/v1/nowhere", kAcquire));
  ASSERT_EQ(lost.Read().status, 404);
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        uint64_t answered = 0;
        for (const auto& c : server->Stats().requests) answered += c.count;
        return answered == 2;
      },
      absl::Seconds(5)));

  const HttpStats s = server->Stats();
  testing::StatsRecorder stats(*server);
  EXPECT_EQ(stats.Sum("sluice_http_requests_total",
                      {{"endpoint", "/v1/acquire"}, {"code", "200"}}),
            1);
  EXPECT_EQ(stats.Sum("sluice_http_requests_total",
                      {{"endpoint", "other"}, {"code", "404"}}),
            1);
  EXPECT_EQ(stats.Find("sluice_http_requests_total").size(), s.requests.size());
  EXPECT_EQ(stats.Sum("sluice_http_connections", {{"state", "active"}}),
            s.connections - s.idle);
  EXPECT_EQ(stats.Sum("sluice_http_connections", {{"state", "idle"}}), s.idle);
  EXPECT_GE(s.idle, 1);
  EXPECT_EQ(stats.Sum("sluice_http_connections", {{"state", "waiting"}}), 0);
  const std::string closed = "sluice_http_connections_closed_total";
  EXPECT_EQ(stats.Find(closed).size(), 7u);
  for (const char* reason :
       {"shed", "refused", "timeout_handshake", "timeout_head",
        "timeout_body", "timeout_write", "timeout_idle"}) {
    EXPECT_EQ(stats.Sum(closed, {{"reason", reason}}), 0) << reason;
  }
  EXPECT_EQ(stats.Find("sluice_http_requests_rejected_total").size(), 2u);

  // A framing error is refused and counted, and its connection closed.
  testing::RawConnection bad(server->port());
  ASSERT_TRUE(bad.Send("POST /v1/acquire HTTP/1.1\r\nContent-Length: x\r\n\r\n"));
  EXPECT_EQ(bad.Read().status, 400);
  ASSERT_TRUE(testing::WaitFor(
      [&] { return server->Stats().rejected[Rejection::kFraming] == 1; },
      absl::Seconds(5)));
  EXPECT_EQ(testing::StatsRecorder(*server).Sum(
                "sluice_http_requests_rejected_total", {{"reason", "framing"}}),
            1);
}

// An HttpServer that reports the stats it was given: WriteStats alone.
class FixedStatsServer final : public HttpServer {
 public:
  explicit FixedStatsServer(HttpStats stats) : stats_(std::move(stats)) {}
  int port() const override { return 0; }
  void SetServing(bool) override {}
  void Stop(absl::Time) override {}
  HttpStats Stats() const override { return stats_; }

 private:
  const HttpStats stats_;
};

TEST(HttpServerStatsTest, EachDeadlineAndRefusalIsWrittenUnderItsOwnReason) {
  HttpStats stats;
  stats.shed = 1;
  stats.refused = 2;
  stats.timeouts[Timeout::kHandshake] = 3;
  stats.timeouts[Timeout::kHead] = 4;
  stats.timeouts[Timeout::kBody] = 5;
  stats.timeouts[Timeout::kWrite] = 6;
  stats.timeouts[Timeout::kIdle] = 7;
  stats.rejected[Rejection::kFraming] = 8;
  stats.rejected[Rejection::kLimits] = 9;
  const testing::StatsRecorder out{FixedStatsServer(stats)};

  const std::string closed = "sluice_http_connections_closed_total";
  EXPECT_EQ(out.Find(closed).size(), 7u);
  const std::map<std::string, double> closed_by_reason = {
      {"shed", 1},         {"refused", 2},      {"timeout_handshake", 3},
      {"timeout_head", 4}, {"timeout_body", 5}, {"timeout_write", 6},
      {"timeout_idle", 7}};
  for (const auto& [reason, count] : closed_by_reason) {
    EXPECT_EQ(out.Sum(closed, {{"reason", reason}}), count) << reason;
  }
  const std::string rejected = "sluice_http_requests_rejected_total";
  EXPECT_EQ(out.Find(rejected).size(), 2u);
  EXPECT_EQ(out.Sum(rejected, {{"reason", "framing"}}), 8);
  EXPECT_EQ(out.Sum(rejected, {{"reason", "limits"}}), 9);
}

TEST_F(HttpServerTest, AFullServerShedsTheConnectionIdleLongest) {
  HttpServerOptions options;
  options.io_threads = 1;
  options.max_connections = 2;
  std::unique_ptr<HttpServer> server = Start(options);
  ASSERT_NE(server, nullptr);
  testing::RawConnection oldest(server->port());
  ASSERT_TRUE(oldest.SendPost("/v1/acquire", kAcquire));
  ASSERT_EQ(oldest.Read().status, 200);
  testing::RawConnection newer(server->port());
  ASSERT_TRUE(newer.SendPost("/v1/acquire", kAcquire));
  ASSERT_EQ(newer.Read().status, 200);
  // Both idle, the cap reached: a new client is served, and the connection
  // idle longest makes room for it.
  testing::RawConnection fresh(server->port());
  ASSERT_TRUE(fresh.SendPost("/v1/acquire", kAcquire));
  EXPECT_EQ(fresh.Read().status, 200);
  EXPECT_TRUE(oldest.ClosedByServer());
  ASSERT_TRUE(newer.SendPost("/v1/acquire", kAcquire));
  EXPECT_EQ(newer.Read().status, 200);
  EXPECT_EQ(server->Stats().shed, 1u);
  EXPECT_EQ(server->Stats().connections, 2);
}

TEST_F(HttpServerTest, AFullServerShedsASlowHeadBeforeAnIdleConnection) {
  HttpServerOptions options;
  options.io_threads = 1;
  options.max_connections = 2;
  std::unique_ptr<HttpServer> server = Start(options);
  ASSERT_NE(server, nullptr);
  testing::RawConnection slow(server->port());  // a head begun, never ended
  ASSERT_TRUE(slow.Send("POST /v1/acquire HTTP/1.1\r\nHost: t\r\n"));
  ASSERT_TRUE(testing::WaitFor([&] { return server->Stats().connections == 1; },
                               absl::Seconds(5)));
  testing::RawConnection idle(server->port());
  ASSERT_TRUE(idle.SendPost("/v1/acquire", kAcquire));
  ASSERT_EQ(idle.Read().status, 200);
  testing::RawConnection fresh(server->port());
  ASSERT_TRUE(fresh.SendPost("/v1/acquire", kAcquire));
  EXPECT_EQ(fresh.Read().status, 200);
  EXPECT_EQ(slow.Read().status, 0);  // closed, never answered
  ASSERT_TRUE(idle.SendPost("/v1/acquire", kAcquire));
  EXPECT_EQ(idle.Read().status, 200);
}

TEST_F(HttpServerTest, AHeadMustArriveWithinTheHeadTimeout) {
  HttpServerOptions options;
  options.head_timeout = absl::Milliseconds(200);
  std::unique_ptr<HttpServer> server = Start(options);
  ASSERT_NE(server, nullptr);
  testing::RawConnection slow(server->port());
  const absl::Time start = absl::Now();
  // One byte every 50 ms: each arrives long before any per-read timeout,
  // but the head's deadline holds for the whole head.
  const std::string head = "POST /v1/acquire HTTP/1.1\r\nHost: t\r\n";
  bool cut = false;
  for (size_t i = 0; i < 200 && !cut; ++i) {
    cut = !slow.Send(std::string(1, head[i % head.size()]));
    absl::SleepFor(absl::Milliseconds(50));
    if (absl::Now() - start > absl::Seconds(3)) break;
  }
  EXPECT_EQ(slow.Read().status, 0);  // closed without an answer
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(server->Stats().timeouts[Timeout::kHead], 1u);
  ASSERT_TRUE(testing::WaitFor([&] { return server->Stats().connections == 0; },
                               absl::Seconds(5)));
}

TEST_F(HttpServerTest, ABodyMustArriveWithinTheBodyTimeout) {
  HttpServerOptions options;
  options.body_timeout = absl::Milliseconds(200);
  std::unique_ptr<HttpServer> server = Start(options);
  ASSERT_NE(server, nullptr);
  testing::RawConnection slow(server->port());
  const absl::Time start = absl::Now();
  ASSERT_TRUE(slow.Send(
      "POST /v1/acquire HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{"));
  EXPECT_EQ(slow.Read().status, 0);
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  EXPECT_EQ(server->Stats().timeouts[Timeout::kBody], 1u);
}

TEST_F(HttpServerTest, AnIdleConnectionClosesAtTheIdleTimeout) {
  HttpServerOptions options;
  options.idle_timeout = absl::Milliseconds(200);
  std::unique_ptr<HttpServer> server = Start(options);
  ASSERT_NE(server, nullptr);
  testing::RawConnection idle(server->port());
  ASSERT_TRUE(idle.SendPost("/v1/acquire", kAcquire));
  ASSERT_EQ(idle.Read().status, 200);
  EXPECT_TRUE(idle.ClosedByServer());
  EXPECT_EQ(server->Stats().timeouts[Timeout::kIdle], 1u);
  EXPECT_EQ(server->Stats().idle, 0);
}

TEST_F(HttpServerTest, ASilentNewConnectionClosesAtTheHeadTimeout) {
  HttpServerOptions options;
  options.head_timeout = absl::Milliseconds(200);
  std::unique_ptr<HttpServer> server = Start(options);
  ASSERT_NE(server, nullptr);
  testing::RawConnection silent(server->port());
  EXPECT_TRUE(silent.ClosedByServer());
  EXPECT_EQ(server->Stats().timeouts[Timeout::kHead], 1u);
}

// TLS (HttpServerOptions::tls_context) with certificates made by openssl.
class HttpServerTlsTest : public HttpServerTest {
 protected:
  void SetUp() override {
    ASSERT_TRUE(certs_.ok()) << certs_.error();
    tls::ServerTlsFiles files;
    files.cert_file = certs_.server_cert();
    files.key_file = certs_.server_key();
    files.client_ca_file = mutual_ ? certs_.ca_cert() : "";
    absl::StatusOr<tls::LoadedContext> loaded = tls::LoadServerContext(files);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    context_ = loaded->context;
  }
  HttpServerOptions TlsOptions() {
    HttpServerOptions options;
    options.tls_context = [this] { return context_; };
    return options;
  }
  // GET /v1/health over HTTPS, trusting the test CA: "STATUS BODY" or
  // "none".
  std::string Health(int port, bool client_cert) {
    std::unique_ptr<httplib::SSLClient> client =
        client_cert ? std::make_unique<httplib::SSLClient>(
                          "127.0.0.1", port, certs_.client_cert(),
                          certs_.client_key())
                    : std::make_unique<httplib::SSLClient>("127.0.0.1", port);
    client->set_ca_cert_path(certs_.ca_cert().c_str());
    client->enable_server_certificate_verification(true);
    client->set_connection_timeout(std::chrono::seconds(5));
    const httplib::Result r = client->Get("/v1/health");
    return r ? absl::StrCat(r->status, " ", r->body) : std::string("none");
  }

  bool mutual_ = false;
  testing::TempDir dir_{"sluice_http_tls"};
  testing::TestCerts certs_{dir_.path()};
  std::shared_ptr<SSL_CTX> context_;
};

TEST_F(HttpServerTlsTest, ServesHttpsAndRefusesPlaintext) {
  std::unique_ptr<HttpServer> server = Start(TlsOptions());
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(Health(server->port(), false), R"(200 {"status":"SERVING"})");
  // Keep-alive and a body over TLS: two requests on one connection.
  httplib::SSLClient client("127.0.0.1", server->port());
  client.set_ca_cert_path(certs_.ca_cert().c_str());
  client.enable_server_certificate_verification(true);
  client.set_keep_alive(true);
  for (int i = 0; i < 2; ++i) {
    const httplib::Result r =
        client.Post("/v1/acquire", kAcquire, "application/json");
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, 200);
    EXPECT_THAT(r->body, HasSubstr("ALLOW"));
  }
  // A plaintext request is not answered: the handshake fails and the
  // connection is closed (reset, as the request was not read).
  testing::RawConnection plain(server->port());
  ASSERT_TRUE(plain.SendPost("/v1/acquire", kAcquire));
  EXPECT_EQ(plain.Read().status, 0);
}

TEST_F(HttpServerTlsTest, TheHandshakeMustFinishWithinItsTimeout) {
  HttpServerOptions options = TlsOptions();
  options.tls_handshake_timeout = absl::Milliseconds(200);
  std::unique_ptr<HttpServer> server = Start(options);
  ASSERT_NE(server, nullptr);
  testing::RawConnection silent(server->port());  // never says hello
  const absl::Time start = absl::Now();
  EXPECT_TRUE(silent.ClosedByServer());
  EXPECT_LT(absl::Now() - start, absl::Seconds(3));
  ASSERT_TRUE(testing::WaitFor([&] { return server->Stats().connections == 0; },
                               absl::Seconds(5)));
  EXPECT_EQ(server->Stats().timeouts[Timeout::kHandshake], 1u);
}

// Handshakes, sends a request and closes without reading the answer: the
// server's writes after that meet a reset connection. TLS 1.2, so that no
// session ticket is left unread (closing with unread bytes would reset the
// connection at once, before the server writes anything).
bool RequestAndHangUp(int port, const std::string& ca_file) {
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(
      SSL_CTX_new(TLS_client_method()), SSL_CTX_free);
  if (ctx == nullptr ||
      SSL_CTX_set_max_proto_version(ctx.get(), TLS1_2_VERSION) != 1 ||
      SSL_CTX_load_verify_locations(ctx.get(), ca_file.c_str(), nullptr) != 1) {
    return false;
  }
  testing::RawConnection connection(port);
  std::unique_ptr<SSL, decltype(&SSL_free)> ssl(SSL_new(ctx.get()), SSL_free);
  if (!connection.connected() || ssl == nullptr ||
      SSL_set_fd(ssl.get(), connection.fd()) != 1 ||
      SSL_connect(ssl.get()) != 1) {
    return false;
  }
  const std::string request = absl::StrCat(
      "POST /v1/acquire HTTP/1.1\r\nHost: t\r\nContent-Type: "
      "application/json\r\nContent-Length: ",
      sizeof(kAcquire) - 1, "\r\n\r\n", kAcquire);
  return SSL_write(ssl.get(), request.data(),
                   static_cast<int>(request.size())) > 0;
}  // closes the socket unread

TEST_F(HttpServerTlsTest, ClientsThatHangUpDoNotStopTheServer) {
  std::unique_ptr<HttpServer> server = Start(TlsOptions());
  ASSERT_NE(server, nullptr);
  // SIGPIPE's default action, whatever the shell that started this test or
  // a library (httplib::Server ignores it for the process) set: the server
  // must not depend on either.
  struct sigaction previous {};
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  ASSERT_EQ(sigaction(SIGPIPE, &default_action, &previous), 0);
  // Each one's answer meets EPIPE: without SIGPIPE blocked on the server's
  // threads, that would end this process.
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(RequestAndHangUp(server->port(), certs_.ca_cert())) << i;
  }
  ASSERT_TRUE(testing::WaitFor([&] { return server->Stats().connections == 0; },
                               absl::Seconds(10)));
  EXPECT_EQ(Health(server->port(), false), R"(200 {"status":"SERVING"})");
  sigaction(SIGPIPE, &previous, nullptr);
}

class HttpServerMutualTlsTest : public HttpServerTlsTest {
 protected:
  void SetUp() override {
    mutual_ = true;
    HttpServerTlsTest::SetUp();
  }
};

TEST_F(HttpServerMutualTlsTest, AnswersOnlyClientsWithACertificateOfTheCa) {
  std::unique_ptr<HttpServer> server = Start(TlsOptions());
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(Health(server->port(), false), "none");
  EXPECT_EQ(Health(server->port(), true), R"(200 {"status":"SERVING"})");
}

TEST_F(HttpServerTest, ANewConnectionIsRefusedWhenNoneCanBeShed) {
  HttpServerOptions options;
  options.io_threads = 1;
  options.max_connections = 1;
  std::unique_ptr<HttpServer> server = Start(options);
  ASSERT_NE(server, nullptr);
  // A request under way (its body arriving) is never shed ...
  testing::RawConnection busy(server->port());
  ASSERT_TRUE(busy.Send(
      "POST /v1/acquire HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{"));
  ASSERT_TRUE(testing::WaitFor([&] { return server->Stats().connections == 1; },
                               absl::Seconds(5)));
  // ... so the next connection is answered 503 at once and closed.
  testing::RawConnection turned_away(server->port());
  ASSERT_TRUE(turned_away.SendPost("/v1/acquire", kAcquire));
  const testing::RawResponse answer = turned_away.Read();
  EXPECT_EQ(answer.status, 503);
  EXPECT_EQ(answer.header("retry-after"), "1");
  EXPECT_EQ(answer.header("connection"), "close");
  turned_away.SendPost("/v1/acquire", kAcquire);
  EXPECT_EQ(turned_away.Read().status, 0);
  EXPECT_EQ(server->Stats().refused, 1u);
  // The busy request goes on.
  ASSERT_TRUE(busy.Send(std::string(R"("dependency": "x"})") +
                        std::string(100 - 1 - 17, ' ')));
  EXPECT_EQ(busy.Read().status, 200);
}

TEST_F(HttpServerTest, IdleConnectionsStayBelowTheCap) {
  std::unique_ptr<HttpServer> server = Start();
  ASSERT_NE(server, nullptr);
  std::vector<std::unique_ptr<testing::RawConnection>> idle;
  for (int i = 0; i < 50; ++i) {
    idle.push_back(std::make_unique<testing::RawConnection>(server->port()));
    ASSERT_TRUE(idle.back()->SendPost("/v1/acquire", kAcquire));
    ASSERT_EQ(idle.back()->Read().status, 200);
  }
  ASSERT_TRUE(testing::WaitFor([&] { return server->Stats().idle == 50; },
                               absl::Seconds(5)));
  // Closing an idle connection races with its client's next request, so
  // all are kept: each still answers.
  for (auto& c : idle) {
    ASSERT_TRUE(c->SendPost("/v1/acquire", kAcquire));
    EXPECT_EQ(c->Read().status, 200);
  }
  EXPECT_EQ(server->Stats().shed, 0u);
}

TEST_F(HttpServerTest, MaxRequestsPerConnectionCloses) {
  HttpServerOptions options;
  options.max_requests_per_connection = 2;
  std::unique_ptr<HttpServer> server = Start(options);
  ASSERT_NE(server, nullptr);
  testing::RawConnection connection(server->port());
  ASSERT_TRUE(connection.SendPost("/v1/acquire", kAcquire));
  const testing::RawResponse first = connection.Read();
  EXPECT_EQ(first.header("keep-alive"), "timeout=65, max=2");
  ASSERT_TRUE(connection.SendPost("/v1/acquire", kAcquire));
  const testing::RawResponse second = connection.Read();
  EXPECT_EQ(second.status, 200);
  EXPECT_EQ(second.header("connection"), "close");
  EXPECT_TRUE(connection.ClosedByServer());
}

TEST_F(HttpServerTest, RequestCountersSnapshot) {
  std::unique_ptr<HttpServer> server = Start();
  ASSERT_NE(server, nullptr);
  httplib::Client client("127.0.0.1", server->port());
  client.Post("/v1/acquire", kAcquire, "application/json");
  client.Post("/v1/acquire", kAcquire, "application/json");
  client.Get("/v1/acquire");
  client.Get("/x");
  std::map<std::string, uint64_t> counts;
  for (const RequestCounters::Count& c : server->Stats().requests) {
    counts[absl::StrCat(EndpointLabel(c.endpoint), " ", c.code)] = c.count;
  }
  EXPECT_EQ(counts["/v1/acquire 200"], 2u);
  EXPECT_EQ(counts["/v1/acquire 405"], 1u);
  EXPECT_EQ(counts["other 404"], 1u);
  EXPECT_EQ(counts.count("/v1/report 200"), 1u);  // shown at zero
  EXPECT_EQ(counts.count("other 200"), 0u);
}

TEST(RequestCountersTest, UncountedStatusesShareOneLabel) {
  RequestCounters counters;
  counters.Add(Endpoint::kAcquire, 418);
  counters.Add(Endpoint::kAcquire, 302);
  counters.Add(Endpoint::kDecide, 503);
  std::map<std::string, uint64_t> counts;
  for (const RequestCounters::Count& c : counters.Snapshot()) {
    counts[absl::StrCat(EndpointLabel(c.endpoint), " ", c.code)] = c.count;
  }
  EXPECT_EQ(counts["/v1/acquire other"], 2u);
  EXPECT_EQ(counts["/v1/decide 503"], 1u);
  // And a 200 for each endpoint but "other", even at zero (six of them,
  // /v1/check included).
  EXPECT_EQ(counts.size(), 8u);
  EXPECT_EQ(counts["/v1/report 200"], 0u);
  EXPECT_EQ(counts["/v1/check 200"], 0u);
}

TEST_F(HttpServerTest, AddressesTcpOnly) {
  std::unique_ptr<HttpServer> first = Start();
  ASSERT_NE(first, nullptr);
  HttpServerOptions busy;
  busy.listen = absl::StrCat("127.0.0.1:", first->port());
  EXPECT_EQ(HttpServer::Start(busy, &service_).status().code(),
            absl::StatusCode::kUnavailable);
  HttpServerOptions unix;
  unix.listen = "unix:/tmp/sluice-http.sock";
  EXPECT_THAT(HttpServer::Start(unix, &service_).status().message(),
              HasSubstr("served over TCP only"));
  HttpServerOptions v6;
  v6.listen = "[::1]:0";
  absl::StatusOr<std::unique_ptr<HttpServer>> on_v6 =
      HttpServer::Start(v6, &service_);
  ASSERT_TRUE(on_v6.ok()) << on_v6.status();
  httplib::Client client("::1", (*on_v6)->port());
  const httplib::Result r = client.Get("/v1/health");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 503);  // SetServing was not called
}

TEST_F(HttpServerTest, StoppedRightAfterStart) {
  for (int i = 0; i < 20; ++i) {
    std::unique_ptr<HttpServer> server = Start();
    ASSERT_NE(server, nullptr);
    server->Stop(absl::Now());  // must not hang on a loop not yet running
  }
}

// Framing RFC 9112 says to refuse: one answer, 400, and the connection
// closed; a request sent right behind it on the same connection (the
// "smuggled" one) is never answered.
struct FramingCase {
  const char* name;
  const char* head;  // up to and without the empty line
  const char* body;
};

class HttpServerFramingTest
    : public HttpServerTest,
      public ::testing::WithParamInterface<FramingCase> {};

TEST_P(HttpServerFramingTest, OneAnswer400AndTheConnectionClosed) {
  std::unique_ptr<HttpServer> server = Start();
  ASSERT_NE(server, nullptr);
  testing::RawConnection connection(server->port());
  const std::string next =
      "GET /v1/health HTTP/1.1\r\nHost: t\r\n\r\n";
  ASSERT_TRUE(connection.Send(absl::StrCat(GetParam().head, "\r\n\r\n",
                                           GetParam().body, next)));
  const testing::RawResponse first = connection.Read();
  EXPECT_EQ(first.status, 400) << first.body;
  EXPECT_EQ(first.header("connection"), "close");
  EXPECT_THAT(first.body, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_EQ(connection.Read().status, 0);  // nothing more, and closed
  EXPECT_EQ(server->Stats().rejected[Rejection::kFraming], 1u);
}

constexpr char kPost[] = "POST /v1/acquire HTTP/1.1\r\nHost: t\r\n";
constexpr char kChunkedBody[] =
    "1a\r\n{\"dependency\": \"anything\"}\r\n0\r\n\r\n";

const FramingCase kFramingCases[] = {
    {"LengthThenChunked",
     "POST /v1/acquire HTTP/1.1\r\nHost: t\r\nContent-Length: 26\r\n"
     "Transfer-Encoding: chunked",
     kChunkedBody},
    {"ChunkedThenLength",
     "POST /v1/acquire HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
     "Content-Length: 26",
     kChunkedBody},
    {"TwoDifferentLengths",
     "POST /v1/acquire HTTP/1.1\r\nHost: t\r\nContent-Length: 26\r\n"
     "Content-Length: 5",
     kAcquire},
    {"TheSameLengthTwice",
     "POST /v1/acquire HTTP/1.1\r\nHost: t\r\nContent-Length: 26\r\n"
     "Content-Length: 26",
     kAcquire},
    {"LengthList",
     "POST /v1/acquire HTTP/1.1\r\nHost: t\r\nContent-Length: 26, 26",
     kAcquire},
    {"PlusLength",
     "POST /v1/acquire HTTP/1.1\r\nHost: t\r\nContent-Length: +26", kAcquire},
    {"SpaceBeforeColon",
     "POST /v1/acquire HTTP/1.1\r\nHost: t\r\nTransfer-Encoding : chunked",
     kChunkedBody},
    {"XChunked",
     "POST /v1/acquire HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: xchunked",
     kChunkedBody},
    {"GzipChunked",
     "POST /v1/acquire HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, "
     "chunked",
     kChunkedBody},
    {"UrlEncodedChunked",
     "POST /v1/acquire HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: %63hunked",
     kChunkedBody},
    {"ChunkedTwice",
     "POST /v1/acquire HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
     "Transfer-Encoding: chunked",
     kChunkedBody},
    {"ChunkedOnHttp10",
     "POST /v1/acquire HTTP/1.0\r\nHost: t\r\nTransfer-Encoding: chunked",
     kChunkedBody},
    {"ObsFold",
     "POST /v1/acquire HTTP/1.1\r\nHost: t\r\nContent-Length:\r\n 26",
     kAcquire},
    {"NoHost", "GET /v1/health HTTP/1.1", ""},
    {"TwoHosts", "GET /v1/health HTTP/1.1\r\nHost: a\r\nHost: b", ""},
    {"BareLineFeeds", "GET /v1/health HTTP/1.1\nHost: t\n", ""},
};

INSTANTIATE_TEST_SUITE_P(
    Shapes, HttpServerFramingTest, ::testing::ValuesIn(kFramingCases),
    [](const ::testing::TestParamInfo<FramingCase>& info) {
      return std::string(info.param.name);
    });

TEST_F(HttpServerTest, HeaderValuesAreNeverUrlDecoded) {
  std::unique_ptr<HttpServer> server = Start();
  ASSERT_NE(server, nullptr);
  testing::RawConnection connection(server->port());
  ASSERT_TRUE(connection.Send(absl::StrCat(
      kPost, "Content-Type: application%2Fjson\r\nContent-Length: ",
      sizeof(kAcquire) - 1, "\r\n\r\n", kAcquire,
      "GET /v1/health HTTP/1.1\r\nHost: t\r\n\r\n")));
  const testing::RawResponse first = connection.Read();
  EXPECT_EQ(first.status, 415);  // not JSON, and answered before the body
  EXPECT_EQ(first.header("connection"), "close");
  EXPECT_EQ(connection.Read().status, 0);
}

TEST_F(HttpServerTest, ARequestLineAbove8KiBIs414) {
  std::unique_ptr<HttpServer> server = Start();
  ASSERT_NE(server, nullptr);
  testing::RawConnection connection(server->port());
  // Never ended: refused once 8 KiB have come without a line end.
  ASSERT_TRUE(connection.Send("GET /" + std::string(9000, 'a')));
  const testing::RawResponse answer = connection.Read();
  EXPECT_EQ(answer.status, 414);
  EXPECT_EQ(answer.header("connection"), "close");
  EXPECT_EQ(server->Stats().rejected[Rejection::kLimits], 1u);
}

TEST_F(HttpServerTest, AHeadAbove64KiBIs431AfterAtMostThat) {
  std::unique_ptr<HttpServer> server = Start();
  ASSERT_NE(server, nullptr);
  testing::RawConnection connection(server->port());
  ASSERT_TRUE(connection.Send("GET /v1/health HTTP/1.1\r\nHost: t\r\n"));
  // Tiny headers, 1 MB of them: the server stops parsing at 64 KiB and
  // answers (what comes after is read and dropped while it closes).
  const std::string fields = [] {
    std::string out;
    for (int i = 0; i < 1000; ++i) out += "a:b\r\n";  // 5 kB
    return out;
  }();
  size_t sent = 0;
  while (sent < (size_t{1} << 20) && connection.Send(fields)) {
    sent += fields.size();
  }
  const testing::RawResponse answer = connection.Read();
  EXPECT_EQ(answer.status, 431);
  EXPECT_EQ(answer.header("connection"), "close");
  EXPECT_EQ(server->Stats().rejected[Rejection::kLimits], 1u);
}

TEST_F(HttpServerTest, MoreThan100HeaderFieldsIs431) {
  std::unique_ptr<HttpServer> server = Start();
  ASSERT_NE(server, nullptr);
  testing::RawConnection connection(server->port());
  std::string request = "GET /v1/health HTTP/1.1\r\nHost: t\r\n";
  for (int i = 0; i < 100; ++i) request += absl::StrCat("x", i, ": y\r\n");
  ASSERT_TRUE(connection.Send(request + "\r\n"));
  EXPECT_EQ(connection.Read().status, 431);
  // 100 fields in all is still fine.
  testing::RawConnection fine(server->port());
  request = "GET /v1/health HTTP/1.1\r\nHost: t\r\n";
  for (int i = 0; i < 99; ++i) request += absl::StrCat("x", i, ": y\r\n");
  ASSERT_TRUE(fine.Send(request + "\r\n"));
  EXPECT_EQ(fine.Read().status, 200);
}

TEST_F(HttpServerTest, AChunkedBodyIsServed) {
  std::unique_ptr<HttpServer> server = Start();
  ASSERT_NE(server, nullptr);
  testing::RawConnection connection(server->port());
  ASSERT_TRUE(connection.Send(absl::StrCat(
      kPost, "Transfer-Encoding: chunked\r\n\r\n", "5\r\n{\"dep\r\n",
      "15\r\nendency\": \"anything\"}\r\n0\r\nX-Trailer: 1\r\n\r\n")));
  const testing::RawResponse answer = connection.Read();
  EXPECT_EQ(answer.status, 200) << answer.body;
  EXPECT_THAT(answer.body, HasSubstr("ALLOW"));
  ASSERT_TRUE(connection.SendPost("/v1/acquire", kAcquire));  // kept alive
  EXPECT_EQ(connection.Read().status, 200);
}

}  // namespace
}  // namespace sluice::http
