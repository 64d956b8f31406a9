// SPDX-License-Identifier: Apache-2.0
// The HTTP/JSON decision API of a whole app::Server in process: a fake
// clock, port 0 for every listener, and an HTTP client on loopback. Every
// endpoint and every error a gateway can meet, and that HTTP decides,
// counts and releases exactly as gRPC does (same engine, same metrics).
// No sleeps: the fake clock never moves unless a test says so.

#include <httplib.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/app/options.h"
#include "server/app/server.h"
#include "tests/http/raw_connection.h"
#include "tests/testing/fake_clock.h"
#include "tests/testing/http_get.h"
#include "tests/testing/temp_dir.h"

namespace sluice::http {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;
using Json = nlohmann::json;

constexpr char kPolicies[] = R"(policies:
  - name: inventory
    call_timeout: 2s
    rate_limit: { rate: 1, per: 1s, burst: 3 }
  - name: search
    call_timeout: 1s
    concurrency: { max_in_flight: 1 }
)";

// One answer: the HTTP status, the body parsed as JSON (null when it is
// not JSON) and the headers.
struct Answer {
  int status = 0;
  Json json;
  httplib::Headers headers;

  std::string header(const std::string& name) const {
    const auto it = headers.find(name);
    return it == headers.end() ? std::string() : it->second;
  }
};

Answer ToAnswer(const httplib::Result& result) {
  Answer answer;
  if (!result) {
    ADD_FAILURE() << "no HTTP answer: " << httplib::to_string(result.error());
    return answer;
  }
  answer.status = result->status;
  answer.json = Json::parse(result->body, nullptr, /*allow_exceptions=*/false);
  answer.headers = result->headers;
  EXPECT_FALSE(answer.json.is_discarded()) << result->body;
  EXPECT_EQ(result->get_header_value("Content-Type"), "application/json");
  return answer;
}

class HttpApiTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(); }

  void Start(app::ServerOptions options = Options(), bool metrics = false) {
    client_.reset();
    server_.reset();
    {
      std::ofstream out(dir_.File("policies.yaml"));
      out << kPolicies;
    }
    options.policies_path = dir_.File("policies.yaml");
    app::Server::Dependencies deps;
    deps.clock = &clock_;
    deps.metrics_listener = metrics;
    server_ = std::make_unique<app::Server>(std::move(options), deps);
    ASSERT_TRUE(server_->BuildAndStart().ok());
    ASSERT_GT(server_->http_port(), 0);
    client_ =
        std::make_unique<httplib::Client>("127.0.0.1", server_->http_port());
    client_->set_keep_alive(true);
  }

  static app::ServerOptions Options() {
    app::ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.admin_listen = "127.0.0.1:0";
    options.metrics_listen = "127.0.0.1:0";
    options.http_listen = "127.0.0.1:0";
    return options;
  }

  Answer Post(const std::string& path, const std::string& body) {
    return ToAnswer(client_->Post(path.c_str(), body, "application/json"));
  }
  Answer Acquire(const std::string& dependency) {
    return Post("/v1/acquire",
                Json{{"dependency", dependency}, {"caller", "test"}}.dump());
  }
  Answer Report(const std::string& dependency, const std::string& permit_id,
                const std::string& outcome = "SUCCESS") {
    return Post("/v1/report", Json{{"dependency", dependency},
                                   {"permitId", permit_id},
                                   {"outcome", outcome},
                                   {"latency", "0.005s"}}
                                  .dump());
  }
  static void ExpectError(const Answer& answer, int http_status,
                          const std::string& status_name,
                          const std::string& message_part) {
    EXPECT_EQ(answer.status, http_status) << answer.json.dump();
    EXPECT_EQ(answer.json.value("status", ""), status_name);
    const std::map<std::string, absl::StatusCode> codes = {
        {"INVALID_ARGUMENT", absl::StatusCode::kInvalidArgument},
        {"NOT_FOUND", absl::StatusCode::kNotFound},
        {"RESOURCE_EXHAUSTED", absl::StatusCode::kResourceExhausted},
        {"UNIMPLEMENTED", absl::StatusCode::kUnimplemented}};
    EXPECT_EQ(answer.json.value("code", -1),
              static_cast<int>(codes.at(status_name)));
    EXPECT_THAT(answer.json.value("message", ""), HasSubstr(message_part));
  }

  testing::TempDir dir_{"http_api_test"};
  testing::FakeClock clock_;
  std::unique_ptr<app::Server> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(HttpApiTest, AcquireAnswersInLowerCamelCaseWithEveryField) {
  const Answer a = Acquire("inventory");
  ASSERT_EQ(a.status, 200);
  EXPECT_EQ(a.json["verdict"], "ALLOW");
  EXPECT_EQ(a.json["reason"], "REASON_UNSPECIFIED");
  EXPECT_THAT(a.json["permitId"].get<std::string>(), Not(IsEmpty()));
  EXPECT_EQ(a.json["callTimeout"], "2s");
  EXPECT_EQ(a.json["breakerState"], "CLOSED");
  // int64 and uint64 are JSON strings in the proto3 mapping.
  EXPECT_EQ(a.json["remaining"], "2");
  EXPECT_EQ(a.json["policyVersion"], "1");
  EXPECT_EQ(a.json["httpStatus"], 0);
  EXPECT_THAT(a.header("Keep-Alive"), HasSubstr("timeout=65"));
}

TEST_F(HttpApiTest, ProtoFieldNamesAreAcceptedToo) {
  const Answer a =
      Post("/v1/acquire", R"({"dependency": "inventory", "permits": 2})");
  ASSERT_EQ(a.status, 200);
  EXPECT_EQ(a.json["remaining"], "1");
  const Answer r = Post("/v1/report", Json{{"dependency", "inventory"},
                                           {"permit_id", a.json["permitId"]},
                                           {"outcome", "SUCCESS"},
                                           {"status_code", 200}}
                                          .dump());
  EXPECT_EQ(r.status, 200) << r.json.dump();
}

TEST_F(HttpApiTest, RefusalIsA200WithTheVerdictAndSuggestedStatus) {
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(Acquire("inventory").json["verdict"], "ALLOW");
  const Answer refused = Acquire("inventory");
  ASSERT_EQ(refused.status, 200);
  EXPECT_EQ(refused.json["verdict"], "REJECT");
  EXPECT_EQ(refused.json["reason"], "RATE_LIMITED");
  EXPECT_EQ(refused.json["httpStatus"], 429);
  EXPECT_EQ(refused.json["remaining"], "0");  // printed although zero
  EXPECT_EQ(refused.json["permitId"], "");
  EXPECT_TRUE(refused.json.contains("retryAfter"));
  clock_.Advance(absl::Seconds(1));  // one token back
  EXPECT_EQ(Acquire("inventory").json["verdict"], "ALLOW");
}

TEST_F(HttpApiTest, ReportReleasesTheConcurrencySlot) {
  const Answer first = Acquire("search");
  ASSERT_EQ(first.json["verdict"], "ALLOW");
  const Answer second = Acquire("search");
  EXPECT_EQ(second.json["verdict"], "REJECT");
  EXPECT_EQ(second.json["reason"], "CONCURRENCY_LIMITED");
  EXPECT_EQ(second.json["httpStatus"], 429);

  const Answer report = Report("search", first.json["permitId"]);
  ASSERT_EQ(report.status, 200) << report.json.dump();
  EXPECT_EQ(report.json, Json::parse(R"({"breakerState": "CLOSED"})"));
  EXPECT_EQ(Acquire("search").json["verdict"], "ALLOW");
}

TEST_F(HttpApiTest, ReportsBatchIsAllOrNothing) {
  const Answer held = Acquire("search");
  ASSERT_EQ(held.json["verdict"], "ALLOW");
  const Json good = {{"dependency", "search"},
                     {"permitId", held.json["permitId"]},
                     {"outcome", "SUCCESS"}};
  const Json bad = {
      {"dependency", "search"}, {"outcome", "SUCCESS"}, {"latency", "-1s"}};

  const Answer refused =
      Post("/v1/reports", Json{{"reports", {good, bad}}}.dump());
  ExpectError(refused, 400, "INVALID_ARGUMENT", "reports[1]: latency");
  // Nothing was applied: the slot is still taken.
  EXPECT_EQ(Acquire("search").json["reason"], "CONCURRENCY_LIMITED");

  const Answer applied =
      Post("/v1/reports",
           Json{{"reports",
                 {good, {{"dependency", "inventory"}, {"outcome", "FAILURE"}}}}}
               .dump());
  ASSERT_EQ(applied.status, 200) << applied.json.dump();
  EXPECT_EQ(applied.json["breakerStates"].size(), 2u);
  EXPECT_EQ(Acquire("search").json["verdict"], "ALLOW");
}

TEST_F(HttpApiTest, DecideMixesCallsWithErrorsPerCall) {
  const Answer held = Acquire("search");
  const Json calls = {
      {"calls",
       {{{"requestId", "1"}, {"acquire", {{"dependency", "inventory"}}}},
        {{"requestId", 2},
         {"report",
          {{"dependency", "search"},
           {"permitId", held.json["permitId"]},
           {"outcome", "SUCCESS"}}}},
        {{"requestId", "3"},
         {"report",
          {{"dependency", "search"},
           {"permitId", "abc"},
           {"outcome", "SUCCESS"}}}},
        {{"requestId", "4"}},
        {{"requestId", "5"}, {"acquire", {{"dependency", ""}}}},
        {{"requestId", "18446744073709551615"},
         {"acquire", {{"dependency", "search"}}}}}}};
  const Answer a = Post("/v1/decide", calls.dump());
  ASSERT_EQ(a.status, 200) << a.json.dump();
  const Json& results = a.json["results"];
  ASSERT_EQ(results.size(), 6u);
  EXPECT_EQ(results[0]["requestId"], "1");
  EXPECT_EQ(results[0]["acquire"]["verdict"], "ALLOW");
  EXPECT_EQ(results[1]["requestId"], "2");
  EXPECT_TRUE(results[1].contains("report")) << results[1];
  EXPECT_EQ(results[2]["error"]["code"], 3);
  EXPECT_THAT(results[2]["error"]["message"].get<std::string>(),
              HasSubstr("calls[2].report: permit_id"));
  EXPECT_THAT(results[3]["error"]["message"].get<std::string>(),
              HasSubstr("calls[3]: one of acquire or report is required"));
  EXPECT_THAT(results[4]["error"]["message"].get<std::string>(),
              HasSubstr("calls[4].acquire: dependency is required"));
  // The report of call 2 freed the slot call 6 takes.
  EXPECT_EQ(results[5]["requestId"], "18446744073709551615");
  EXPECT_EQ(results[5]["acquire"]["verdict"], "ALLOW");
}

TEST_F(HttpApiTest, DecideOverTheCallLimitIsRefusedWhole) {
  Json calls = Json::array();
  for (int i = 0; i <= rpc::DecisionServiceImpl::kMaxDecideCalls; ++i) {
    calls.push_back(
        {{"requestId", i}, {"acquire", {{"dependency", "search"}}}});
  }
  ExpectError(Post("/v1/decide", Json{{"calls", calls}}.dump()), 400,
              "INVALID_ARGUMENT", "calls: at most 1000 per request, got 1001");
  EXPECT_EQ(Acquire("search").json["verdict"], "ALLOW");  // none was handled
}

TEST_F(HttpApiTest, CountAmplifiedBodiesAreRefusedByTheirCount) {
  // Under 4 MiB each, millions of empty elements: one error naming the
  // count, before any element is built.
  std::string decide = "{\"calls\":[{}";
  for (int i = 1; i < 1300000; ++i) decide += ",{}";
  decide += "]}";
  ExpectError(Post("/v1/decide", decide), 400, "INVALID_ARGUMENT",
              "calls: at most 1000 per request, got 1300000");
  std::string reports = "{\"reports\":[{}";
  for (int i = 1; i < 1300000; ++i) reports += ",{}";
  reports += "]}";
  ExpectError(Post("/v1/reports", reports), 400, "INVALID_ARGUMENT",
              "reports: at most 10000 per request, got 1300000");
  // Values hidden where nothing is counted are bounded too.
  std::string nested = "{\"calls\":[{\"acquire\":{\"dependency\":[0";
  for (int i = 1; i < 100000; ++i) nested += ",0";
  nested += "]}}]}";
  ExpectError(Post("/v1/decide", nested), 400, "INVALID_ARGUMENT",
              "JSON values; no valid request has that many");
  EXPECT_EQ(Acquire("search").json["verdict"], "ALLOW");
}

TEST_F(HttpApiTest, BadJsonIs400) {
  ExpectError(Post("/v1/acquire", R"({"dependency": )"), 400,
              "INVALID_ARGUMENT", "request body is not valid JSON");
  ExpectError(Post("/v1/report", "[]"), 400, "INVALID_ARGUMENT",
              "request body must be a JSON object");
  ExpectError(Post("/v1/acquire", ""), 400, "INVALID_ARGUMENT",
              "request body is empty");
}

TEST_F(HttpApiTest, UnknownFieldsAreRefusedByName) {
  ExpectError(
      Post("/v1/acquire", R"({"dependency": "inventory", "tenant": "a"})"), 400,
      "INVALID_ARGUMENT", "unknown field \"tenant\"");
  ExpectError(
      Post("/v1/decide", R"({"calls": [{"acquire": {"dependncy": "a"}}]})"),
      400, "INVALID_ARGUMENT",
      "unknown field \"dependncy\" in calls[0].acquire");
}

TEST_F(HttpApiTest, WrongTypesNameTheField) {
  ExpectError(
      Post("/v1/acquire", R"({"dependency": "inventory", "permits": "two"})"),
      400, "INVALID_ARGUMENT",
      "permits: invalid value \"two\"; expected a whole number");
  ExpectError(
      Post("/v1/report", R"({"dependency": "inventory", "outcome": "OK"})"),
      400, "INVALID_ARGUMENT",
      "outcome: invalid value \"OK\"; expected one of");
  ExpectError(
      Post("/v1/report", R"({"dependency": "inventory", "latency": 5})"), 400,
      "INVALID_ARGUMENT", "latency: ");
  ExpectError(Post("/v1/reports", R"({"reports": [{"statusCode": true}]})"),
              400, "INVALID_ARGUMENT",
              "reports[0].status_code: invalid value true");
}

TEST_F(HttpApiTest, HandlerValidationIs400WithTheHandlersMessage) {
  ExpectError(Post("/v1/acquire", R"({"dependency": ""})"), 400,
              "INVALID_ARGUMENT", "dependency is required");
  ExpectError(
      Post("/v1/acquire", R"({"dependency": "inventory", "permits": 1000001})"),
      400, "INVALID_ARGUMENT", "permits must be at most 1000000");
  ExpectError(Post("/v1/report", R"({"dependency": "inventory"})"), 400,
              "INVALID_ARGUMENT", "outcome must be SUCCESS");
}

TEST_F(HttpApiTest, UnknownPathIs404) {
  ExpectError(Post("/v1/acquire/", "{}"), 404, "NOT_FOUND",
              "no endpoint at \"/v1/acquire/\"");
  ExpectError(ToAnswer(client_->Get("/metrics")), 404, "NOT_FOUND",
              "the API serves POST /v1/acquire");
}

TEST_F(HttpApiTest, WrongMethodIs405WithAllow) {
  const Answer get = ToAnswer(client_->Get("/v1/acquire"));
  ExpectError(get, 405, "UNIMPLEMENTED", "GET is not allowed on /v1/acquire");
  EXPECT_EQ(get.header("Allow"), "POST");
  const Answer put =
      ToAnswer(client_->Put("/v1/decide", "{}", "application/json"));
  EXPECT_EQ(put.status, 405);
  EXPECT_EQ(put.header("Allow"), "POST");
  const Answer post = Post("/v1/health", "{}");
  EXPECT_EQ(post.status, 405);
  EXPECT_EQ(post.header("Allow"), "GET, HEAD");
}

TEST_F(HttpApiTest, OversizedBodyIs413AndClosesTheConnection) {
  testing::RawConnection connection(server_->http_port());
  ASSERT_TRUE(connection.Send(
      "POST /v1/acquire HTTP/1.1\r\nHost: t\r\nContent-Type: "
      "application/json\r\nContent-Length: 4194305\r\n\r\n{\"dep"));
  const testing::RawResponse response = connection.Read();
  EXPECT_EQ(response.status, 413);
  EXPECT_EQ(response.header("connection"), "close");
  EXPECT_THAT(response.body,
              HasSubstr("request body is 4194305 bytes; the limit is 4194304"));
  connection.FinishSending();
  EXPECT_TRUE(connection.ClosedByServer());

  // Chunked, so the size shows only while reading: the same limit.
  const std::string chunk(1 << 20, ' ');
  int sent = 0;
  const httplib::Result chunked = client_->Post(
      "/v1/acquire",
      [&](size_t, httplib::DataSink& sink) {
        if (sent++ < 5) return sink.write(chunk.data(), chunk.size());
        sink.done();
        return true;
      },
      "application/json");
  ASSERT_TRUE(chunked);
  EXPECT_EQ(chunked->status, 413);
  EXPECT_THAT(chunked->body, HasSubstr("RESOURCE_EXHAUSTED"));

  // Exactly at the limit is read (and then refused as JSON, not as size).
  const std::string at_limit =
      R"({"dependency": "inventory"})" + std::string(kMaxBodyBytes - 27, ' ');
  ASSERT_EQ(at_limit.size(), kMaxBodyBytes);
  EXPECT_EQ(Post("/v1/acquire", at_limit).status, 200);
}

TEST_F(HttpApiTest, ExpectContinueIsRefusedBeforeTheBody) {
  testing::RawConnection connection(server_->http_port());
  ASSERT_TRUE(connection.Send(
      "POST /v1/reports HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
      "Content-Length: 9999999\r\n\r\n"));
  const testing::RawResponse response = connection.Read();
  EXPECT_EQ(response.status, 413);
  EXPECT_THAT(response.body, HasSubstr("\"status\":\"RESOURCE_EXHAUSTED\""));
}

TEST_F(HttpApiTest, OtherContentTypeIs415AndNoneIsAccepted) {
  const httplib::Result text = client_->Post(
      "/v1/acquire", R"({"dependency": "inventory"})", "text/plain");
  ASSERT_TRUE(text);
  ExpectError(ToAnswer(text), 415, "INVALID_ARGUMENT",
              "Content-Type must be application/json, got \"text/plain\"");

  const Answer charset =
      ToAnswer(client_->Post("/v1/acquire", R"({"dependency": "inventory"})",
                             "Application/JSON; charset=utf-8"));
  EXPECT_EQ(charset.status, 200);

  testing::RawConnection connection(server_->http_port());
  ASSERT_TRUE(
      connection.SendPost("/v1/acquire", R"({"dependency": "inventory"})"));
  const testing::RawResponse none = connection.Read();
  EXPECT_EQ(none.status, 200) << none.body;
  EXPECT_THAT(none.body, HasSubstr("\"verdict\":\"ALLOW\""));
}

TEST_F(HttpApiTest, MalformedRequestGetsAJsonError) {
  testing::RawConnection connection(server_->http_port());
  ASSERT_TRUE(connection.Send("NONSENSE\r\n\r\n"));
  const testing::RawResponse response = connection.Read();
  EXPECT_EQ(response.status, 400);
  EXPECT_THAT(response.body, HasSubstr("\"status\":\"INVALID_ARGUMENT\""));
  connection.FinishSending();
  EXPECT_TRUE(connection.ClosedByServer());
}

TEST_F(HttpApiTest, KeepAliveAndPipelinedRequestsShareOneConnection) {
  testing::RawConnection connection(server_->http_port());
  const std::string body = R"({"dependency": "inventory"})";
  const std::string request =
      "POST /v1/acquire HTTP/1.1\r\nHost: t\r\nContent-Type: "
      "application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_TRUE(connection.Send(request + request));  // pipelined
  EXPECT_EQ(connection.Read().status, 200);
  EXPECT_EQ(connection.Read().status, 200);
  ASSERT_TRUE(connection.Send(request));
  const testing::RawResponse third = connection.Read();
  EXPECT_EQ(third.status, 200);
  EXPECT_THAT(third.body, HasSubstr("\"remaining\":\"0\""));
  ASSERT_TRUE(
      connection.Send("GET /v1/health HTTP/1.1\r\nHost: t\r\n"
                      "Connection: close\r\n\r\n"));
  EXPECT_EQ(connection.Read().status, 200);
  EXPECT_TRUE(connection.ClosedByServer());
}

TEST_F(HttpApiTest, ResponsesAreNeverCompressed) {
  const httplib::Result r =
      client_->Post("/v1/acquire", {{"Accept-Encoding", "gzip, deflate"}},
                    R"({"dependency": "inventory"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->get_header_value("Content-Encoding"), "");
}

TEST_F(HttpApiTest, HealthIsServing) {
  const Answer health = ToAnswer(client_->Get("/v1/health"));
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.json, Json::parse(R"({"status": "SERVING"})"));
  const httplib::Result head = client_->Head("/v1/health");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
}

TEST_F(HttpApiTest, UnknownDependencyFollowsTheFlag) {
  const Answer allowed = Acquire("no-such-policy");
  ASSERT_EQ(allowed.status, 200);
  EXPECT_EQ(allowed.json["verdict"], "ALLOW");
  EXPECT_EQ(allowed.json["reason"], "UNKNOWN_DEPENDENCY");

  app::ServerOptions reject = Options();
  reject.unknown_dependency = core::UnknownDependencyAction::kReject;
  Start(reject);
  const Answer rejected = Acquire("no-such-policy");
  ASSERT_EQ(rejected.status, 200);
  EXPECT_EQ(rejected.json["verdict"], "REJECT");
  EXPECT_EQ(rejected.json["reason"], "UNKNOWN_DEPENDENCY");
  EXPECT_EQ(rejected.json["httpStatus"], 503);
}

TEST_F(HttpApiTest, ShutdownClosesTheApi) {
  ASSERT_EQ(ToAnswer(client_->Get("/v1/health")).status, 200);
  const int port = server_->http_port();
  server_->Shutdown(absl::Now() + absl::Seconds(5));
  EXPECT_EQ(server_->http_port(), port);  // still known after the stop
  const httplib::Result after = client_->Get("/v1/health");
  EXPECT_FALSE(after) << after->status;
}

TEST(HttpApiOffTest, NoListenerWithoutTheFlag) {
  testing::FakeClock clock;
  app::ServerOptions options;
  options.listen = "127.0.0.1:0";
  options.admin_listen = "127.0.0.1:0";
  app::Server::Dependencies deps;
  deps.clock = &clock;
  deps.metrics_listener = false;
  app::Server server(options, deps);
  ASSERT_TRUE(server.BuildAndStart().ok());
  EXPECT_EQ(server.http_port(), 0);
  EXPECT_EQ(server.http_target(), "");
}

TEST(HttpApiOptionsTest, TcpOnlyAndAFewThreadsAtLeast) {
  app::ServerOptions options;
  options.http_listen = "unix:/run/sluice/http.sock";
  EXPECT_THAT(app::ValidateOptions(options).message(),
              HasSubstr("--http-listen: the HTTP API is served over TCP only "
                        "(HOST:PORT), got \"unix:/run/sluice/http.sock\""));
  options.http_listen = "nowhere";
  EXPECT_THAT(std::string(app::ValidateOptions(options).message()),
              StartsWith("--http-listen: expected HOST:PORT"));
  options.http_listen = "[::1]:8080";
  EXPECT_TRUE(app::ValidateOptions(options).ok());
  options.http_threads = 0;
  EXPECT_THAT(app::ValidateOptions(options).message(),
              HasSubstr("--http-threads must be in [1, 256], got 0"));
  options.http_threads = 2;
  options.http_max_connections = 0;
  EXPECT_THAT(app::ValidateOptions(options).message(),
              HasSubstr("--http-max-connections must be in [1, 1000000], "
                        "got 0"));
}

// The metrics /metrics serves: HTTP requests by endpoint and status, and the
// decisions made over HTTP in the engine's own counters, checked by
// promtool like the other metrics.
TEST_F(HttpApiTest, MetricsCountRequestsByEndpointAndStatus) {
  Start(Options(), /*metrics=*/true);
  ASSERT_GT(server_->metrics_port(), 0);
  for (int i = 0; i < 4; ++i) Acquire("inventory");  // 3 allowed, 1 refused
  Post("/v1/acquire", "{");
  Post("/v1/nowhere", "{}");
  ToAnswer(client_->Get("/v1/health"));

  const std::string page =
      testing::HttpGet(server_->metrics_port(), "/metrics");
  EXPECT_THAT(page, HasSubstr("sluice_http_requests_total{endpoint=\"/v1/"
                              "acquire\",code=\"200\"} 4"));
  EXPECT_THAT(page, HasSubstr("sluice_http_requests_total{endpoint=\"/v1/"
                              "acquire\",code=\"400\"} 1"));
  EXPECT_THAT(page, HasSubstr("sluice_http_requests_total{endpoint=\"other\","
                              "code=\"404\"} 1"));
  EXPECT_THAT(page, HasSubstr("sluice_http_requests_total{endpoint=\"/v1/"
                              "health\",code=\"200\"} 1"));
  EXPECT_THAT(page, HasSubstr("sluice_http_requests_total{endpoint=\"/v1/"
                              "decide\",code=\"200\"} 0"));
  // The client's keep-alive connection at least (a closed one may not have
  // been counted out yet).
  EXPECT_THAT(page, HasSubstr("sluice_http_connections{state=\"active\"} "));
  EXPECT_THAT(page, HasSubstr("sluice_http_connections{state=\"waiting\"} 0"));
  EXPECT_THAT(page, HasSubstr("sluice_decisions_total{dependency=\"inventory\","
                              "verdict=\"ALLOW\",reason=\"NONE\"} 3"));
  EXPECT_THAT(page, HasSubstr("sluice_decisions_total{dependency=\"inventory\","
                              "verdict=\"REJECT\",reason=\"RATE_LIMITED\"} 1"));
  EXPECT_THAT(page, HasSubstr("sluice_acquire_duration_seconds_count 4"));

  const std::string path = dir_.File("metrics.txt");
  {
    std::ofstream out(path);
    out << page;
  }
  FILE* pipe =
      popen(("promtool check metrics < " + path + " 2>&1").c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[512];
  while (fgets(buf, sizeof(buf), pipe) != nullptr) output += buf;
  EXPECT_EQ(pclose(pipe), 0) << output;
  EXPECT_EQ(output, "") << page;
}

}  // namespace
}  // namespace sluice::http
